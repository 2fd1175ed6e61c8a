"""The documentation holds together: every relative link (and image) in README.md and
docs/**/*.md reaches an existing file, and the heading its anchor names; every ``docs/...`` path
named in the code, the ROS interfaces, the launch files, scripts, configuration and tests exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKDOWN = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: Where code names docs paths (docstrings, comments, error messages, expected messages in tests).
CODE_DIRS = ("llm_planner_node", "robot", "timely_tools", "msg", "srv", "action", "launch", "bin", "scripts", "config",
             "tests")
CODE_FILES = ("Makefile", "CMakeLists.txt", "package.xml", "pyproject.toml", ".importlinter")
CODE_SUFFIXES = {".py", ".msg", ".srv", ".action", ".yaml", ".yml", ".xml", ".sh", ".toml", ".cfg", ".txt", ""}

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`+[^`]*`+")
DOCS_PATH = re.compile(r"(?<![\w./-])docs/[\w./-]*")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a markdown text outside fenced code blocks, with their numbers."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links and code marks dropped, lower case, punctuation out
    (word characters, hyphens and spaces stay), spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def broken_links(path: Path) -> list[str]:
    out = []
    for n, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(CODE_SPAN.sub("``", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{n}: {target}"
            if not dest.exists():
                out.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                out.append(f"{where} (no heading '#{anchor}' in {dest.relative_to(ROOT)})")
    return out


def _code_files() -> list[Path]:
    files = [ROOT / f for f in CODE_FILES if (ROOT / f).is_file()]
    for d in CODE_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if (p.is_file() and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts
                    and p.stat().st_size < 1_000_000 and p != Path(__file__).resolve()):  # not this file's examples
                files.append(p)
    return files


def missing_docs_paths(files: list[Path]) -> list[str]:
    out = []
    for p in files:
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in DOCS_PATH.finditer(line):
                name = m.group(0).rstrip(".")
                if not (ROOT / name).exists():
                    out.append(f"{p.relative_to(ROOT)}:{n}: {name}")
    return out


def test_every_relative_markdown_link_reaches_its_file_and_heading():
    assert len(MARKDOWN) > 10 and (ROOT / "docs" / "guides").is_dir() and (ROOT / "docs" / "reports").is_dir()
    broken = [b for path in MARKDOWN for b in broken_links(path)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_path_named_in_the_code_exists():
    files = _code_files()
    assert len(files) > 100
    missing = missing_docs_paths(files)
    assert not missing, "docs paths that do not exist:\n" + "\n".join(missing)


def test_every_docs_path_named_in_the_docs_exists():
    missing = missing_docs_paths(MARKDOWN)
    assert not missing, "docs paths that do not exist:\n" + "\n".join(missing)


def test_the_checks_find_what_is_broken(tmp_path, monkeypatch):
    """The link, anchor and path checks report a missing file, a missing heading and a docs path
    that does not exist, and accept what is there."""
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A `guide`: one\n\n## Run it (on a CPU)\n\n## Run it (on a CPU)\n")
    b = tmp_path / "docs" / "b.md"
    b.write_text("[ok](a.md#a-guide-one) [ok](a.md#run-it-on-a-cpu-1) [ok](#b) ![ok](a.md)\n"
                 "[gone](c.md) [no heading](a.md#nowhere) [web](https://example.org/x) `[code](d.md)`\n"
                 "```\n[in a block](e.md)\n```\n# B\n")
    assert broken_links(b) == ["docs/b.md:2: c.md (no such file)",
                               "docs/b.md:2: a.md#nowhere (no heading '#nowhere' in docs/a.md)"]
    code = tmp_path / "x.py"
    code.write_text('"""See docs/a.md, docs/b.md."""\nERR = "(docs/gone.md)"\nOTHER = "mydocs/x.md"\n')
    assert missing_docs_paths([code]) == ["x.py:2: docs/gone.md"]
