"""run_local as a test harness: its clock drives system-time engines deterministically, and it returns the
engines' statistics beside the tables."""

from __future__ import annotations

import itertools
import tempfile

import pandas as pd
import pytest

import headwater as hw

T = pd.Timestamp("2024-01-02 09:00:00")
SCHEMA = {"time": "timestamp", "sym": "string", "v": "double"}


@pytest.fixture
def bars():
    session = hw.connect(tempfile.mkdtemp(), start_spark=False)
    g = session.stream_graph("demo.stream_graph.bars")
    (g.source("t", schema=SCHEMA)
       .time_series_engine(window="10s", step="10s", metrics=["sum(v) as total", "count(v) as n"], key_column="sym",
                           use_system_time=True)
       .sink("out"))
    yield g
    session.close()


def rounds(n: int, seed: int) -> list[pd.DataFrame]:
    rng = pd.Series(range(n * 5)).sample(frac=1, random_state=seed).tolist()
    return [pd.DataFrame({"time": [T] * 5, "sym": [["a", "b", "c"][x % 3] for x in rng[i * 5:(i + 1) * 5]],
                          "v": [float(x) for x in rng[i * 5:(i + 1) * 5]]}) for i in range(n)]


def reference(frames: list[pd.DataFrame], times: list[pd.Timestamp]) -> pd.DataFrame:
    """pandas: each round's rows in the 10 s window of its processing time; a window is emitted once a later
    round's time reaches its end."""
    rows = pd.concat([f.assign(window=t.floor("10s")) for f, t in zip(frames, times, strict=True)])
    closed = rows[rows["window"] + pd.Timedelta("10s") <= max(times)]
    want = closed.groupby(["window", "sym"], as_index=False).agg(total=("v", "sum"), n=("v", "count"))
    want["time"] = want.pop("window") + pd.Timedelta("10s")
    return want[["time", "sym", "total", "n"]].sort_values(["time", "sym"], ignore_index=True)


def test_the_clock_decides_the_windows_and_equals_the_pandas_reference(bars):
    frames = rounds(8, seed=1)
    times = [pd.Timestamp("2024-01-02 09:30:00") + pd.Timedelta(seconds=s) for s in (1, 4, 9, 11, 15, 23, 24, 41)]
    got = bars.run_local({"t": frames}, clock=times)["out"]
    got = got.sort_values(["time", "sym"], ignore_index=True)
    pd.testing.assert_frame_equal(got, reference(frames, times), check_dtype=False)
    again = bars.run_local({"t": frames}, clock=[t.timestamp() for t in times])["out"]  # seconds: the same
    pd.testing.assert_frame_equal(again.sort_values(["time", "sym"], ignore_index=True), got, check_dtype=False)


def test_a_clock_function_is_called_once_per_round(bars):
    frames = rounds(3, seed=2)
    ticks = itertools.count()
    out = bars.run_local({"t": frames}, clock=lambda: 1_700_000_000 + 20 * next(ticks))
    assert next(ticks) == 3  # once per round
    times = [pd.Timestamp(1_700_000_000 + 20 * i, unit="s") for i in range(3)]
    got = out["out"].sort_values(["time", "sym"], ignore_index=True)
    pd.testing.assert_frame_equal(got, reference(frames, times), check_dtype=False)
    assert got["time"].nunique() == 2  # two windows closed by later rounds; the last one still open


def test_engine_stats_come_back_beside_the_tables(bars):
    out = bars.run_local({"t": rounds(2, seed=3)}, clock=[0, 5])
    stats = out.engine_stats
    assert stats[["task_id", "type"]].values.tolist() == [["0.0", "TIME_SERIES_ENGINE"]]
    assert stats.loc[0, "keys"] == 3 and stats.loc[0, "state_bytes"] > 0


def test_too_few_times_or_a_bad_time_is_a_clear_error(bars):
    with pytest.raises(hw.GraphDefinitionError, match="one per round"):
        bars.run_local({"t": rounds(3, seed=4)}, clock=[0, 1])
    with pytest.raises(hw.GraphDefinitionError, match="is not a time"):
        bars.run_local({"t": rounds(1, seed=4)}, clock=["soon"])
