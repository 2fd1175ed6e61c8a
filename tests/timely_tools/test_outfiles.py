"""The tools' output files: folders made on first use, JSON written the same way by every bench."""

from __future__ import annotations

import json
from pathlib import Path

from timely_tools import outfiles


def test_write_json_makes_the_folder_ends_the_file_with_a_newline_and_says_where(tmp_path, capsys):
    path = tmp_path / "new" / "deeper" / "out.json"
    outfiles.write_json(path, {"a": 1, "when": Path("/x")}, indent=2)
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and json.loads(text) == {"a": 1, "when": "/x"}  # a Path as its str
    assert capsys.readouterr().out == f"wrote {path}\n"
    outfiles.write_json(path, [1], say=False)
    assert json.loads(path.read_text()) == [1] and capsys.readouterr().out == ""
