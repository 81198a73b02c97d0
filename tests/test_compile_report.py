"""`python -m uniorch.tools.compile_report` runs (a depth of 1 and 2, front end only) and its table
has a row per depth with each stage's seconds."""
from __future__ import annotations

from uniorch.tools import compile_report


def test_compile_report_rows_and_table(tmp_path, capsys):
    out, js = tmp_path / "t.md", tmp_path / "t.json"
    assert compile_report.main(["--layers", "1,2", "--no-aot", "--out", str(out), "--json", str(js)]) == 0
    import json

    info = json.loads(js.read_text())
    rows = info["rows"]
    assert [r["layers"] for r in rows] == [1, 2]
    for r in rows:
        assert r["front_end_s"] > 0 and r["capture_s"] > 0 and r["passes_s"] > 0 and r["kernels"] > 0
    assert rows[1]["kernels"] > rows[0]["kernels"]
    text = out.read_text()
    assert "| 1 |" in text and "| 2 |" in text and info["commit"] in text
