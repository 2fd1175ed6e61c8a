"""`llm_planner_node/core/` is the model: pure Python, no ROS, no vLLM, nothing outside itself
but the standard library and numpy."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "llm_planner_node" / "core"
ALLOWED_THIRD_PARTY = {"numpy"}


def test_core_imports_only_itself_the_standard_library_and_numpy():
    bad = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level > 0:
                    depth = len(path.relative_to(CORE).parts) - 1  # package depth below core/
                    if node.level > depth + 1:
                        bad.append((path.name, f"{'.' * node.level}{node.module or ''}"))
                    continue
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name == "llm_planner_node.core" or name.startswith("llm_planner_node.core."):
                    continue  # itself
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY:
                    bad.append((path.name, name))
    assert not bad, f"core/ must import only itself, the standard library and numpy: {bad}"
