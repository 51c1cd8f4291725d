"""Issue 3: a reactive graph with 20 different state functions is killed mid-stream, resumes, and its output
equals the batch computation exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import headwater as hw
from headwater.engines.base import SEQ
from headwater.engines.reactive_state import ReactiveStateEngine
from headwater.parse import to_metric
from headwater.types import Schema

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"time": "timestamp", "key": "string", "price": "double", "volume": "long"}
METRICS = [
    "time", "price",
    "ewm_mean(price, span=10, adjust=False) as ewm10",
    "ewm_std(price, span=20) as ewmstd20",
    "ema(price, 12) as ema12",
    "mavg(price, 10) as ma10",
    "msum(volume, 20) as vol20",
    "mstd(price, 20) as std20",
    "mmax(price, 30) as hi30",
    "mmin(price, 30) as lo30",
    "mcorr(price, volume, 15) as corr15",
    "mrank(price, True, 10) as rank10",
    "mmed(price, 9) as med9",
    "deltas(price) as d1",
    "prev(price) as p1",
    "percent_change(price) as pct1",
    "cumsum(volume) as cumvol",
    "cummax(price) as cummax",
    "cumavg(price) as cumavg",
    "tmsum(time, volume, '60s') as tvol60",
    "tmavg(time, price, '60s') as tavg60",
    "linear_time_trend(price, 10) as lt_a, lt_b",
    "segmentby(volume, volume > 500, func='cumsum') as seg",
]
GRAPH = textwrap.dedent("""
    import sys
    import pandas as pd
    import headwater as hw
    from tests.spark.test_reactive_recovery import build
    session = hw.connect(sys.argv[1])
    session.use_catalog("demo")
    build(session).submit()
    rows = pd.read_parquet(sys.argv[2])
    for i in range(0, len(rows), 1500):
        session.append("ticks", rows.iloc[i:i + 1500])
    print("appended", flush=True)
    sys.stdin.read()
""")


def build(session: hw.Session) -> hw.StreamGraph:
    g = session.stream_graph("factors")
    (g.source("ticks", schema=SCHEMA).parallelize("key", 2)
       .reactive_state_engine(key_column="key", metrics=METRICS).sync().sink("factor_values"))
    return g


def make_rows(n: int = 30_000, keys: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(4)
    price = np.round(100 + rng.normal(0, 1, n).cumsum() / 10, 3)
    price[rng.random(n) < 0.02] = np.nan
    return pd.DataFrame({
        "time": pd.Timestamp("2026-11-20 09:30") + pd.to_timedelta(np.sort(rng.integers(0, 3_600_000_000, n)), unit="us"),
        "key": np.array([f"K{i:02d}" for i in range(keys)])[rng.integers(0, keys, n)],
        "price": price,
        "volume": rng.integers(1, 1000, n).astype("int64"),
    })


def batch_reference(rows: pd.DataFrame, metrics: list[str] = METRICS) -> pd.DataFrame:
    """The engine over all rows at once: the batch computation streaming must equal."""
    schema = Schema.parse(SCHEMA)
    eng = ReactiveStateEngine(name="ref", input_schema=schema, key_column=("key",),
                              metrics=tuple(to_metric(m, where="ref") for m in metrics))
    table = pa.Table.from_pandas(rows, preserve_index=False).cast(schema.to_arrow())
    table = table.append_column(SEQ, pa.array(np.arange(len(rows), dtype=np.int64)))
    proc = eng.processor()
    return proc.process(proc.new_state(), table)[1].drop_columns([SEQ]).to_pandas()


def test_twenty_functions_survive_kill_and_resume_exactly(spark, tmp_path):
    rows = make_rows()
    assert len({m.split("(")[0] for m in METRICS if "(" in m}) >= 20
    first, second = rows.iloc[: len(rows) // 2], rows.iloc[len(rows) // 2:]
    first.to_parquet(tmp_path / "first.parquet")
    data_dir = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    proc = subprocess.Popen([sys.executable, "-c", GRAPH, str(data_dir), str(tmp_path / "first.parquet")], cwd=ROOT,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    log = data_dir / "tables" / "demo" / "factor_values" / "_delta_log"
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "appended"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and len(list(log.glob("*.json"))) < 2:
            assert proc.poll() is None, "the streaming process died before it was killed"
            time.sleep(0.05)  # polling interval of a condition wait
        assert len(list(log.glob("*.json"))) >= 2, "no output was committed before the deadline"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)

    session = hw.connect(data_dir)  # resumes the graph from its checkpoints
    session.use_catalog("demo")
    try:
        session.append("ticks", second)
        session.wait_until_caught_up("factors", timeout=300)
        got = session.sql("select * from stream_table.factor_values").to_pandas()
    finally:
        session.close()
    want = batch_reference(rows)
    assert len(got) == len(want)
    got = got.sort_values(["key", "time", "cumvol"]).reset_index(drop=True)
    want = want.sort_values(["key", "time", "cumvol"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False, check_exact=True)
