"""The folders of `tests/` mirror the source: a test lives in the folder of what it tests.

`tests/<path>` tests the package `llm_planner_node/<path>` (`tests/core/policies` for
`llm_planner_node/core/policies`), `tests/robot_adapters/<path>` and `tests/timely_robot/<path>`
the packages `robot/robot_adapters/<path>` and `robot/timely_robot/<path>` (the robot side),
`tests/timely_tools/<path>` the package `timely_tools/<path>` (benchmarks, evaluation, training), and
`tests/<name>` a top-level module `llm_planner_node/<name>.py` that has no folder of its own
(`tests/models` for `models.py`). Two folders are not source folders:
`tests/e2e` (end to end over ROS: whole fleets, `timely-fleet up` and the commands as separate
processes) and `tests/foundation` (project-wide checks, this one included). Folders that hold no
Python file are data, and no test file sits directly in `tests/` (`testkit.py` holds the helpers
every folder shares)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
PROJECT_WIDE = ("e2e", "foundation")
ROOT_FILES = ("conftest.py", "__init__.py", "testkit.py")  # testkit: helpers every folder shares
#: the robot side's packages, under robot/
ROBOT_SIDE = ("robot_adapters", "timely_robot")


def _is_package(path: Path) -> bool:
    return (path / "__init__.py").is_file()


def _source_of(rel: Path, root: Path = ROOT) -> bool:
    """Whether the test folder ``tests/<rel>`` has its source folder (or top-level module)."""
    if rel.parts[0] in ROBOT_SIDE:
        return _is_package(root / "robot" / rel)
    if rel.parts[0] == "timely_tools":
        return _is_package(root / rel)
    return _is_package(root / "llm_planner_node" / rel) or (
        len(rel.parts) == 1 and (root / "llm_planner_node" / f"{rel.parts[0]}.py").is_file())


def _strays(tests: Path = TESTS, root: Path = ROOT) -> tuple[list[str], list[str]]:
    """(test folders without a source folder, Python files directly in ``tests/``), as paths
    relative to the project root."""
    folders = []
    for d in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = d.relative_to(tests)
        if (rel.parts[0] in PROJECT_WIDE or any(part == "__pycache__" or part.startswith(".") for part in rel.parts)
                or not any(d.rglob("*.py"))):
            continue
        if not _source_of(rel, root):
            folders.append(str(d.relative_to(root)))
    files = [str(f.relative_to(root)) for f in sorted(tests.glob("*.py")) if f.name not in ROOT_FILES]
    return folders, files


def test_every_test_folder_is_a_source_folder_or_project_wide():
    folders, _ = _strays()
    assert not folders, ("test folders without a package of the same path under llm_planner_node/ or "
                         "robot/ (move their tests to the folder of what they test, or to "
                         f"tests/e2e or tests/foundation): {folders}")
    assert all((TESTS / name).is_dir() for name in PROJECT_WIDE)


def test_no_test_file_sits_directly_in_tests():
    _, files = _strays()
    assert not files, f"test files directly in tests/ (move them to the folder of what they test): {files}"


def test_the_check_names_what_does_not_mirror(tmp_path):
    for pkg in ("llm_planner_node", "llm_planner_node/core", "llm_planner_node/core/policies", "robot/robot_adapters",
                "robot/robot_adapters/sim", "robot/timely_robot", "robot/timely_robot/link"):
        (tmp_path / pkg).mkdir(parents=True, exist_ok=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "llm_planner_node" / "models.py").write_text("")
    tests = tmp_path / "tests"
    for folder in ("core/policies", "robot_adapters/sim", "timely_robot/link", "models", "e2e", "foundation", "node",
                   "robot", "core/data", "node/__pycache__"):
        (tests / folder).mkdir(parents=True, exist_ok=True)
    for f in ("conftest.py", "test_loose.py", "core/policies/test_a.py", "robot_adapters/sim/test_b.py",
              "timely_robot/link/test_f.py", "models/test_c.py", "e2e/test_d.py", "node/test_e.py",
              "robot/conftest.py", "core/data/x.json"):
        (tests / f).write_text("")
    assert _strays(tests, tmp_path) == (["tests/node", "tests/robot"], ["tests/test_loose.py"])
