"""The README's example runs as written, and gives the bars it says (checked against an independent reference)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.support.indicators import reference_bars

pytestmark = pytest.mark.spark

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_runs(spark, tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    monkeypatch.setenv("HEADWATER_HOME", str(tmp_path))  # hw.connect() with no argument uses it
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    session = scope["session"]
    try:
        out = session.sql("select * from demo.stream_table.one_min_indicators").to_pandas()
        assert len(out) == len(reference_bars(scope["ticks"])) == 4  # as the README's comment says
        assert {"ema20", "close"} <= set(out.columns)
    finally:
        session.close()
