"""`llm_planner_node/core/` is the model: pure Python, no ROS, no vLLM, nothing outside itself
but the standard library, numpy and the robot side's pure rules (skills, budgets, the link's rules,
outcomes, the plan language: `robot/timely_robot/`, which import only one another, the standard
library and numpy)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "llm_planner_node" / "core"
ALLOWED_THIRD_PARTY = {"numpy"}
#: the robot side's pure modules, which the core may import
PURE_ROBOT_SIDE = {"timely_robot.skills", "timely_robot.budgets", "timely_robot.overrides", "timely_robot.approval",
                   "timely_robot.execution_time", "timely_robot.outcomes", "timely_robot.perceivable",
                   "timely_robot.link.rules", "timely_robot.plans", "timely_robot.minispec", "timely_robot.plan_cost"}


def _outside(path: Path, itself: str) -> list[str]:
    """The absolute imports of ``path`` that are neither ``itself`` (a package prefix), the
    standard library, numpy nor a pure module of the robot side."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == itself or name.startswith(itself + ".") or name in PURE_ROBOT_SIDE:
                continue
            if name.split(".")[0] not in sys.stdlib_module_names | ALLOWED_THIRD_PARTY:
                out.append(name)
    return out


def test_the_robot_side_modules_the_core_uses_are_pure():
    bad = {}
    for mod in sorted(PURE_ROBOT_SIDE):
        path = ROOT / "robot" / Path(*mod.split(".")).with_suffix(".py")
        assert path.is_file(), path
        if _outside(path, mod):
            bad[mod] = _outside(path, mod)
    assert not bad, f"robot-side modules the core imports must be pure: {bad}"


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
                if name == "llm_planner_node.core" or name.startswith("llm_planner_node.core.") \
                        or name in PURE_ROBOT_SIDE:
                    continue  # itself, or the robot side's pure rules
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY:
                    bad.append((path.name, name))
    assert not bad, f"core/ must import only itself, the standard library, numpy and {sorted(PURE_ROBOT_SIDE)}: {bad}"
