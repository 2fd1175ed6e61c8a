"""The architecture holds: the import-linter contracts of `.importlinter` (core pure, layers, the
runtime never imports the tools, the robot side stands alone) are kept, every package of the planner sits in a
layer, and neither a module nor a package of the project takes part in an import cycle, counting
the imports inside functions too (commands loaded by name, `importlib.import_module`, are not
imports)."""

from __future__ import annotations

import ast
import configparser
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("llm_planner_node", "timely_robot", "robot_adapters", "timely_tools")
#: where each package's source lives
SOURCES = {"llm_planner_node": ROOT / "llm_planner_node", "timely_robot": ROOT / "robot" / "timely_robot",
           "robot_adapters": ROOT / "robot" / "robot_adapters", "timely_tools": ROOT / "timely_tools"}


def test_import_linter_contracts_are_kept():
    p = subprocess.run([str(Path(sys.executable).parent / "lint-imports")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    contracts = (ROOT / ".importlinter").read_text().count("[importlinter:contract:")
    assert "0 broken" in p.stdout and p.stdout.count(" KEPT") == contracts >= 7


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in SOURCES[pkg].rglob("*.py"):
            name = ".".join(path.relative_to(SOURCES[pkg].parent).with_suffix("").parts)
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
    cli, ...)."""
    loose = sorted(p.stem for p in (ROOT / "llm_planner_node").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= 6, loose
    assert {"prompts", "segmenters", "engines", "service", "ros", "config", "security", "cli"} <= {
        p.name for p in (ROOT / "llm_planner_node").iterdir() if (p / "__init__.py").exists()}


def _package_imports(graph) -> dict[str, dict[str, list[tuple[str, str]]]]:
    """Imports between packages, from a grimp graph: an import of ``a.x.m`` by ``a.y.n`` is one of
    ``a.x`` by ``a.y``, seen where the two paths part, so packages at every depth and the modules
    beside them (``up``, ``models``, ``errors``, ...) are compared with their neighbours. The two
    root packages count as one level: their children side by side. A package importing what it
    holds (or the reverse) is no edge. Returns importer -> imported -> the module imports behind it."""
    edges: dict[str, dict[str, list[tuple[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            a, b = importer.split("."), imported.split(".")
            i = 0
            while i < min(len(a), len(b)) and a[i] == b[i]:
                i += 1
            if i == len(a) or i == len(b):
                continue
            depth = max(i + 1, 2)
            edges[".".join(a[:depth])][".".join(b[:depth])].append((importer, imported))
    return edges


def _package_cycles(graph) -> list[str]:
    """One line per package-level cycle: its packages, and for each edge one import behind it."""
    edges = _package_imports(graph)
    nodes = sorted(set(edges) | {b for d in edges.values() for b in d})
    out = []
    for comp in _cycles({a: set(d) for a, d in edges.items()}, nodes):
        why = [f"{a} -> {b} ({edges[a][b][0][0]} imports {edges[a][b][0][1]})"
               for a in comp for b in comp if b in edges.get(a, {})]
        out.append(" <-> ".join(comp) + ": " + "; ".join(why))
    return out


def test_no_package_level_import_cycles():
    """No two packages (sub-packages at every depth, and the modules beside them) import each
    other, directly or through others: every dependency between them points one way."""
    import grimp

    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    edges = _package_imports(graph)
    assert "llm_planner_node.core" in edges["timely_tools.sim"] and "robot_adapters.sim" in edges["timely_tools.bench"]
    assert "timely_tools.evaluation" in edges["timely_tools.bench"]
    assert "llm_planner_node.up" in edges["llm_planner_node.cli"]  # imported inside the demo's functions only
    cycles = _package_cycles(graph)
    assert not cycles, "packages importing each other:\n" + "\n".join(cycles)


def test_the_package_cycle_finder_finds_a_cycle_between_sub_packages():
    import grimp

    g = grimp.ImportGraph()
    for m in ("p", "p.a", "p.a.x", "p.a.y", "p.b", "p.b.z", "p.c", "p.d", "p.d.w"):
        g.add_module(m)
    g.add_import(importer="p.a.x", imported="p.b.z")  # p.a -> p.b
    g.add_import(importer="p.b.z", imported="p.a.y")  # p.b -> p.a: a cycle, though no module cycle
    g.add_import(importer="p.c", imported="p.d.w")  # p.c -> p.d, one way only
    g.add_import(importer="p.d.w", imported="p.d")  # a package's own module: no edge
    g.add_import(importer="p.a", imported="p.a.x")
    assert [c.split(":")[0] for c in _package_cycles(g)] == ["p.a <-> p.b"]
    assert "p.a -> p.b (p.a.x imports p.b.z)" in _package_cycles(g)[0]


def test_every_package_of_the_planner_sits_in_a_layer():
    """The layers contract names every package and top-level module of llm_planner_node."""
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    layered = set(re.split(r"[\s|:]+", config["importlinter:contract:layers"]["layers"])) - {""}
    pkg = ROOT / "llm_planner_node"
    parts = {f"llm_planner_node.{p.stem}" for p in pkg.glob("*.py") if p.name != "__init__.py"}
    parts |= {f"llm_planner_node.{p.name}" for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    assert not parts - layered, f"not in a layer of .importlinter: {sorted(parts - layered)}"
