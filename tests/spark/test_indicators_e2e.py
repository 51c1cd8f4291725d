"""The seed graph end to end on Spark: bars and indicators equal the pandas reference."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tests.support.indicators import (
    assert_frames_match,
    build_indicator_graph,
    make_ticks,
    reference_bars,
    reference_indicators,
)

import headwater as hw

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ticks() -> pd.DataFrame:
    return make_ticks(n_symbols=20, minutes=390, ticks_per_minute=5, seed=11)


@pytest.fixture(scope="module")
def reference(ticks):
    bars = reference_bars(ticks)
    return bars, reference_indicators(bars)


def splits(ticks: pd.DataFrame, how: str) -> list[pd.DataFrame]:
    n = len(ticks)
    if how == "one":
        cuts: list[int] = []
    elif how == "even7":
        cuts = [n * i // 7 for i in range(1, 7)]
    else:  # uneven: tiny and large appends, cutting through minutes
        rng = np.random.default_rng(5)
        cuts = sorted(set(rng.integers(1, n - 1, 12).tolist()) | {1, 2, n // 2})
    bounds = [0, *cuts, n]
    return [ticks.iloc[a:b] for a, b in itertools.pairwise(bounds)]


def check_outputs(session: hw.Session, reference) -> None:
    bars, indicators = reference
    got_bars = session.sql("select * from demo.stream_table.one_min_bar").to_pandas()
    assert_frames_match(got_bars, bars, ["symbol", "time"])
    got = session.sql("select * from stream_table.one_min_indicators").to_pandas()
    assert_frames_match(got, indicators, ["symbol", "time"])


@pytest.mark.parametrize("how", ["one", "even7", "uneven"])
def test_outputs_equal_reference_for_any_split(spark, tmp_path, ticks, reference, how):
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        g = build_indicator_graph(session).submit()
        meta = session.stream_graph_meta("indicators")
        assert meta.loc[0, "status"] == "running"
        assert meta.loc[0, "semantics"] == "exactly-once"
        assert [t["id"] for t in meta.loc[0, "tasks"]] == ["0.0", "0.1", "0.2", "1.0", "1.1"]
        for part in splits(ticks, how):
            session.append("trade", part)
        session.wait_until_caught_up("indicators", timeout=300)
        check_outputs(session, reference)
        assert "subgraph 1" in g.explain()
    finally:
        session.close()


def test_bad_append_is_rejected_and_nothing_stored_is_lost(spark, tmp_path, ticks):
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build_indicator_graph(session).submit()
        session.append("trade", ticks.iloc[:100])
        with pytest.raises(hw.SchemaError, match="price"):
            session.append("trade", ticks.iloc[100:200].assign(price=ticks["symbol"].iloc[100:200]))
        with pytest.raises(hw.SchemaError, match="volume"):
            session.append("trade", ticks.iloc[100:200].drop(columns=["volume"]))
        with pytest.raises(hw.CatalogError, match="does not exist"):
            session.append("trades", ticks.iloc[:10])
        assert len(session.sql("select * from stream_table.trade").to_pandas()) == 100
    finally:
        session.close()


def test_drop_removes_private_state_and_optionally_tables(spark, tmp_path, ticks):
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build_indicator_graph(session).submit()
        session.append("trade", ticks.iloc[:2000])
        session.wait_until_caught_up("indicators")
        graph_dir = tmp_path / "graphs" / "demo" / "indicators"
        assert (graph_dir / "checkpoints").exists()
        session.drop_stream_graph("indicators")
        assert not graph_dir.exists()
        assert session.stream_graph_meta("indicators").loc[0, "status"] == "destroyed"
        assert len(session.sql("select * from stream_table.one_min_bar").to_pandas()) > 0  # public tables kept
        # a new graph of the same name starts from scratch and can drop its tables
        build_indicator_graph(session).submit()
        session.wait_until_caught_up("indicators")
        session.drop_stream_graph("indicators", include_tables=True)
        assert session.stream_table_meta().empty
        with pytest.raises(hw.SqlError, match="not a public stream table"):
            session.sql("select * from stream_table.one_min_bar")
    finally:
        session.close()


def test_resubmit_with_another_definition_is_refused(spark, tmp_path):
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build_indicator_graph(session).submit()
        build_indicator_graph(session).submit()  # same definition: already running, nothing happens
        g = session.stream_graph("indicators")
        g.source("trade", schema={"time": "timestamp", "symbol": "string", "price": "double", "volume": "long"}) \
            .sink("copy")
        with pytest.raises(hw.CatalogError, match="different definition"):
            g.submit()
    finally:
        session.close()


KILLED_RUN = textwrap.dedent("""
    import sys
    import pandas as pd
    import headwater as hw
    from tests.support.indicators import build_indicator_graph
    session = hw.connect(sys.argv[1])
    session.use_catalog("demo")
    build_indicator_graph(session).submit()
    ticks = pd.read_parquet(sys.argv[2])
    for part in range(0, len(ticks), 997):
        session.append("trade", ticks.iloc[part:part + 997])
    print("appended", flush=True)
    sys.stdin.read()  # keep streaming until killed
""")


def test_kill_mid_stream_then_resume_loses_and_duplicates_nothing(spark, tmp_path, ticks, reference):
    first, second = ticks.iloc[: len(ticks) // 2], ticks.iloc[len(ticks) // 2:]
    first.to_parquet(tmp_path / "first.parquet")
    data_dir = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(data_dir), str(tmp_path / "first.parquet")],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "appended"
        # wait (with a deadline) until the graph has committed some, but not necessarily all, of its output
        bars_log = data_dir / "tables" / "demo" / "indicators_log_probe"
        deadline = time.monotonic() + 300
        bar_table = data_dir / "tables" / "demo" / "one_min_indicators" / "_delta_log"
        while time.monotonic() < deadline and len(list(bar_table.glob("*.json"))) < 2:
            proc.poll()
            assert proc.returncode is None, "the streaming process died before it was killed"
            time.sleep(0.05)  # polling interval of a condition wait, not synchronisation
        assert len(list(bar_table.glob("*.json"))) >= 2, "no output was committed before the deadline"
        del bars_log
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)

    session = hw.connect(data_dir)  # resumes the running graph from its checkpoints, in the background
    session.use_catalog("demo")
    try:
        assert session.stream_graph_meta("indicators").loc[0, "status"] in ("building", "running")
        session.append("trade", second)
        session.wait_until_caught_up("indicators", timeout=300)
        assert session.stream_graph_meta("indicators").loc[0, "status"] == "running"
        check_outputs(session, reference)
    finally:
        session.close()
