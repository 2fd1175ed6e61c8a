"""The architecture holds: the import-linter contracts of `.importlinter` (core pure, layers, the
runtime never imports the tools, adapters apart) are kept, and no module of the project takes
part in an import cycle, counting the imports inside functions too."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("llm_planner_node", "robot_adapters")


def test_import_linter_contracts_are_kept():
    p = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout and p.stdout.count(" KEPT") >= 6


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> project modules it imports, anywhere in its body (functions included)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[mod].update(n for n in names if n in mods and n != mod)
    return graph


def _cycles(graph: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles_counting_imports_inside_functions():
    mods = _modules()
    graph = _imports(mods)
    assert sum(len(v) for v in graph.values()) > 400  # the walk sees the project's imports
    assert _cycles(graph, sorted(mods)) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, ["a", "b", "c", "d"]) == [["a", "b", "c"]]


def test_the_package_top_level_holds_at_most_six_loose_modules():
    """The layout names the architecture: everything but the composition root and a few shared
    helpers lives in a folder (core, prompts, segmenters, engines, service, ros, config, security,
    cli, tools, ...)."""
    loose = sorted(p.stem for p in (ROOT / "llm_planner_node").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 6, loose
    assert {"prompts", "segmenters", "engines", "service", "ros", "config", "security", "cli", "tools"} <= {
        p.name for p in (ROOT / "llm_planner_node").iterdir() if (p / "__init__.py").exists()}
