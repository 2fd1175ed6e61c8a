"""The tools (benchmarks, training, reports) observe the runtime through its public names only:
renaming a private method of the planner or the adapters must not break a benchmark silently.

Parsed from source (AST): no ``from M import _name``; no ``obj._name`` (also through ``getattr``,
``setattr``, ``hasattr`` or ``delattr`` with a string) unless ``_name`` is defined in the same
module; no assignment to an attribute of an imported class or module (monkeypatching)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "timely_tools"
#: underscore names that are public API where they are defined (namedtuple's, os._exit)
PUBLIC_UNDERSCORED = {"_replace", "_asdict", "_fields", "_make", "_exit"}
ATTR_FUNCS = {"getattr", "setattr", "hasattr", "delattr"}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORED


def own_names(tree: ast.AST) -> set[str]:
    """Every name the module itself defines: functions, classes, assigned names, and attributes
    its methods set on ``self`` or ``cls``."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name)
              and node.value.id in ("self", "cls")):
            out.add(node.attr)  # an attribute of the module's own classes (not one set on another's object)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return out


def imported(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names)
    return out


def problems(source: str, where: str = "<source>") -> list[str]:
    """What in ``source`` uses another module's private names or patches what it imported."""
    tree = ast.parse(source)
    own, ext = own_names(tree), imported(tree)
    found = []

    def at(node: ast.AST, what: str) -> None:
        found.append(f"{where}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if private(a.name):
                    at(node, f"imports {node.module}.{a.name}")
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(node.ctx, ast.Store) and isinstance(base, ast.Name) and base.id in ext:
                at(node, f"assigns {base.id}.{node.attr} (an imported name)")
            elif private(node.attr) and node.attr not in own:
                at(node, f"uses {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTR_FUNCS:
            if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant) or not isinstance(node.args[1].value, str):
                continue
            name, obj = node.args[1].value, node.args[0]
            if node.func.id in ("setattr", "delattr") and isinstance(obj, ast.Name) and obj.id in ext:
                at(node, f"{node.func.id} on {obj.id} (an imported name)")
            elif private(name) and name not in own:
                at(node, f"{node.func.id}(..., {name!r})")
    return found


@pytest.mark.parametrize("source, n", [
    ("from m import _x", 1),
    ("import m\nm.obj._hidden()", 1),
    ("x = getattr(obj, '_hidden', None)", 1),
    ("from m import C\nC.run = lambda self: None", 1),
    ("from m import C\nsetattr(C, 'run', None)", 1),
    ("class A:\n    def __init__(self):\n        self._own = 1\n\ndef f(a):\n    return a._own", 0),
    ("import os\nos._exit(0)\np = t._replace(x=1)", 0),
    ("from m import C\nc = C()\nc.public = 1", 0),
    ("import subprocess\np = subprocess.Popen(['true'])\np._log = 1", 1),
])
def test_the_check_finds_what_it_should(source, n):
    assert len(problems(source)) == n, problems(source)


def test_the_tools_use_only_public_names_of_other_modules():
    files = sorted(TOOLS.rglob("*.py"))
    assert len(files) > 40  # the tools are where the check looks
    found = [p for f in files for p in problems(f.read_text(encoding="utf-8"), str(f.relative_to(ROOT)))]
    assert not found, "\n".join(found)
