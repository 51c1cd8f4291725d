"""time_series_engine's triggers (Orca C.1): force_trigger_time, update_time, sub_window, per-metric fill.

An independent per-row reference (tumbling windows of 10 s, as C.1 describes them), equal for any split of
the input into appends and after a kill at a random micro-batch; clear errors for bad arguments.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.errors import GraphDefinitionError

T0 = pd.Timestamp("2026-11-25 09:30:00")
W = pd.Timedelta(seconds=10)
SCHEMA = {"time": "timestamp", "sym": "string", "v": "double"}
METRICS = ["sum(v) as total", "count(v) as n", "avg(v) + 1 as mean1"]
_names = itertools.count()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("triggers"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def graph(session: hw.Session, **kw):
    g = session.stream_graph(f"trig{next(_names)}")
    (g.source("t", schema=SCHEMA)
       .time_series_engine(**{"window": "10s", "step": "10s", "metrics": METRICS, "time_column": "time",
                              "key_column": "sym", **kw})
       .sink("out"))
    return g


def _aggregate(values: list[float]) -> tuple[float, float, float]:
    v = pd.Series(values, dtype=float)
    return v.sum(min_count=1), float(v.count()), v.mean() + 1


def reference(rows: pd.DataFrame, *, force: pd.Timedelta | None = None, update: pd.Timedelta | None = None,
              sub: tuple[pd.Timedelta, pd.Timedelta] | None = None, fill: tuple = ("none",) * 3) -> list[tuple]:
    """Row by row as C.1 describes it: a key's window [s, s + 10 s) closes at the key's first row at or past
    its end (or its sub-window's end), or at a row of another key ``force`` past that; ``update`` emits the
    open window over the rows before a row entering a new period; ``fill`` fills each metric of an empty
    window; rows in closed windows are dropped."""
    lo, hi = sub or (pd.Timedelta(0), W)
    keys: dict[str, dict] = {}
    out: list[tuple] = []

    def emit(sym: str, key: dict) -> None:
        vals = key["rows"]
        if vals:
            res = _aggregate(vals)
            key["last"] = res
        elif fill[0] == "none":
            res = None
        else:
            res = tuple(key["last"][j] if f == "ffill" else (math.nan if f == "null" else float(f))
                        for j, f in enumerate(fill))
        if res is not None:
            out.append((key["start"] + W, sym, *res))
        key["rows"], key["pending"] = [], False
        key["start"] += W

    for row in rows.itertuples(index=False):
        t, sym = row.time, row.sym
        if force is not None:
            for other_sym, other in keys.items():
                while other_sym != sym and t - force >= other["start"] + hi:
                    emit(other_sym, other)
        key = keys.setdefault(sym, {"start": t.floor(W), "rows": [], "last": (math.nan,) * 3, "pending": False})
        while t >= key["start"] + hi:
            emit(sym, key)
        if t < key["start"]:
            continue  # its window was emitted
        period = (t - key["start"]) // update if update else 0
        if update and key["pending"] and period > key["period"]:
            out.append((key["start"] + W, sym, *_aggregate(key["rows"])))
            key["pending"] = False
        if key["start"] + lo <= t < key["start"] + hi:
            key["rows"].append(row.v)
            key["pending"], key["period"] = True, period
    return out


def make_rows(seed: int, n: int = 150) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    time = T0 + pd.to_timedelta(np.cumsum(rng.choice([0, 1, 2, 3, 7, 25], n, p=[.1, .3, .3, .15, .1, .05])),
                                unit="s")
    frame = pd.DataFrame({"time": time, "sym": rng.choice(["a", "b", "c"], n, p=[.6, .3, .1]),
                          "v": rng.integers(0, 20, n).astype(float)})
    frame.loc[rng.random(n) < 0.05, "v"] = np.nan
    late = rng.random(n) < 0.05  # out of order for its key: dropped when its window has gone
    frame.loc[late, "time"] = frame.loc[late, "time"] - pd.Timedelta(seconds=12)
    return frame


def as_tuples(out: pd.DataFrame) -> list[tuple]:
    return list(zip(out.time, out.sym, out.total, out.n, out.mean1, strict=True))


def assert_same(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[:2] == w[:2]
        np.testing.assert_allclose(np.array(g[2:], dtype=float), np.array(w[2:], dtype=float), rtol=1e-12)


CASES = {
    "force": ({"force_trigger_time": "5s"}, {"force": pd.Timedelta(seconds=5)}),
    "force_fill": ({"force_trigger_time": "0s", "fill": ["ffill", 0, "null"]},
                   {"force": pd.Timedelta(0), "fill": ("ffill", 0, "null")}),
    "update": ({"update_time": "5s"}, {"update": pd.Timedelta(seconds=5)}),
    "sub_window": ({"sub_window": "2s:6s"}, {"sub": (pd.Timedelta(seconds=2), pd.Timedelta(seconds=6))}),
    "fill": ({"fill": [-1, "null", "ffill"]}, {"fill": (-1, "null", "ffill")}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_trigger_equals_the_reference(session, case):
    kw, ref = CASES[case]
    rows = make_rows(3)
    out = graph(session, **kw).run_local({"t": rows})["out"]
    want = reference(rows, **ref)
    assert len(want) > 20
    assert_same(as_tuples(out), want)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), case=st.sampled_from(sorted(CASES)),
       cuts=st.lists(st.integers(1, 149), max_size=6, unique=True), crash=st.one_of(st.none(), st.integers(0, 6)))
def test_any_split_into_appends_and_a_kill_give_the_reference(session, tmp_path_factory, seed, case, cuts, crash):
    kw, ref = CASES[case]
    rows = make_rows(seed)
    runner = LocalRunner(graph(session, **kw).plan(), tmp_path_factory.mktemp("p"))
    for i, (a, b) in enumerate(itertools.pairwise([0, *sorted(cuts), len(rows)])):
        runner.append("t", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)  # ran, saved its state, never committed: replayed next
        runner.step()
    assert_same(as_tuples(runner.read("out")), reference(rows, **ref))


def late_count(rows: pd.DataFrame) -> int:
    """Rows of a key older than the start of the key's open window (10 s windows, no delay): dropped."""
    starts: dict[str, pd.Timestamp] = {}
    late = 0
    for row in rows.itertuples(index=False):
        start = starts.setdefault(row.sym, row.time.floor(W))
        while row.time >= start + W:
            start += W
        starts[row.sym] = start
        late += row.time < start
    return late


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 149), max_size=5, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 5)))
def test_late_rows_are_counted_once_in_the_engine_stats(session, tmp_path_factory, seed, cuts, crash):
    from headwater.dataplane.engine_stats import engine_rows

    rows = make_rows(seed)
    assume(late_count(rows) > 0)  # a few draws shift no row out of its window
    root = tmp_path_factory.mktemp("late")
    runner = LocalRunner(graph(session).plan(), root)
    for i, (a, b) in enumerate(itertools.pairwise([0, *sorted(cuts), len(rows)])):
        runner.append("t", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)  # the replay must not count its late rows twice
        runner.step()
    [stat] = engine_rows(runner.physical, root / "checkpoints")
    assert stat["late_rows"] == late_count(rows) > 0
    assert stat["keys"] == rows.sym.nunique()


def test_update_time_zero_emits_each_micro_batch_open_windows(session, tmp_path_factory):
    rows = pd.DataFrame({"time": T0 + pd.to_timedelta([1, 2, 4, 11], unit="s"), "sym": list("aaba"),
                         "v": [1.0, 2.0, 4.0, 8.0]})
    runner = LocalRunner(graph(session, update_time="0s").plan(), tmp_path_factory.mktemp("u0"))
    for a, b in [(0, 2), (2, 4)]:
        runner.append("t", rows.iloc[a:b])
        runner.step()
    got = [(t - T0).seconds for t in runner.read("out").time], runner.read("out").total.tolist()
    # batch 1: a's open window (3); batch 2: a's final window (3), then the open windows of a (8) and b (4)
    assert got == ([10, 10, 20, 10], [3.0, 3.0, 8.0, 4.0])


@pytest.mark.parametrize(("kw", "message"), [
    ({"update_time": "3s"}, "update_time 3s must divide step 10s"),
    ({"update_time": "5s", "window": "20s"}, "tumbling windows"),
    ({"force_trigger_time": "1s", "accepted_delay": "2s"}, "force_trigger_time excludes update_time and accepted_delay"),
    ({"force_trigger_time": "1s", "update_time": "5s"}, "force_trigger_time excludes"),
    ({"sub_window": "5s:12s"}, "sub_window 5s:12s must lie inside the window 10s"),
    ({"sub_window": "5s"}, "expected a pair like '0s:10s'"),
    ({"sub_window": ("1s", "2s"), "window": "20s"}, "sub_window needs tumbling windows"),
    ({"fill": ["null", "ffill"]}, "fill has 2 values for 3 metrics"),
    ({"fill": ["none", "null", 0]}, "fill must be one of"),
    ({"fill": "zero"}, "fill must be one of"),
    ({"key_purge_freq": "60s"}, "key_purge_freq needs key_column and force_trigger_time"),
    ({"key_purge_freq": "60s", "force_trigger_time": "0s", "fill": "null"}, "fill='none'"),
    ({"time_column": ["date", "time"]}, r"time_column must be one column name.*\(date, time\) pair"),
])
def test_bad_arguments_fail_at_definition_naming_the_node_and_value(session, kw, message):
    with pytest.raises(GraphDefinitionError, match=message) as info:
        graph(session, **kw)
    assert "time_series_engine" in str(info.value)


def test_key_purge_drops_quiet_keys_once_per_period_of_commit_time(session):
    from headwater.engines.base import SEQ

    node = graph(session, force_trigger_time="0s", key_purge_freq="60s").plan()
    [spec] = [n.spec for n in node.nodes.values() if getattr(n, "spec", None) is not None]
    processor = spec.processor()

    def batch(state, times, syms, batch_time):
        table = pa.table({"time": pa.array([T0 + pd.Timedelta(seconds=t) for t in times], pa.timestamp("us")),
                          "sym": syms, "v": [1.0] * len(times), SEQ: pa.array(range(len(times)), pa.int64())})
        return processor.process(state, table, batch_time=batch_time)

    state, _ = batch(processor.new_state(), [1, 2], ["a", "b"], 1000.0)  # the purge clock starts
    state, out = batch(state, [15], ["b"], 1030.0)  # b's row forces a's window; too soon to purge
    assert out.column("sym").to_pylist() == ["a", "b"] and len(state["keys"]) == 2
    state, out = batch(state, [16], ["b"], 1061.0)  # a period later: a (no open rows) goes, b stays
    assert processor.stats(state)["keys"] == 1
    state, out = batch(state, [21, 31], ["a", "b"], 1070.0)  # a comes back as a new key
    # a's row forces b's window [10 s, 20 s); b's row forces the new a's [20 s, 30 s)
    assert out.column("sym").to_pylist() == ["b", "a"] and out.column("total").to_pylist() == [2.0, 1.0]
    assert processor.stats(state) == {"keys": 2, "late_rows": 0}


def test_system_time_windows_follow_the_commit_time_of_micro_batches(session):
    from headwater.engines.base import SEQ

    g = session.stream_graph(f"trig{next(_names)}")
    (g.source("t", schema=SCHEMA)
       .time_series_engine(window="10s", step="10s", metrics=METRICS, key_column="sym", use_system_time=True)
       .sink("out"))
    [spec] = [n.spec for n in g.plan().nodes.values() if getattr(n, "spec", None) is not None]
    assert spec.output_schema().columns[0] == ("time", "timestamp")
    processor = spec.processor()

    def batch(state, syms, batch_time):
        table = pa.table({"time": pa.array([T0] * len(syms), pa.timestamp("us")), "sym": syms,
                          "v": [1.0] * len(syms), SEQ: pa.array(range(len(syms)), pa.int64())})
        return processor.process(state, table, batch_time=batch_time)

    state, out = batch(processor.new_state(), ["a", "b", "a"], 1_000.5)  # window [1000 s, 1010 s)
    state, out2 = batch(state, ["b"], 1_004.0)  # same window
    state, out3 = batch(state, ["c"], 1_011.0)  # a later batch closes every key's window, quiet or not
    assert out.num_rows == out2.num_rows == 0
    assert out3.column("sym").to_pylist() == ["a", "b"] and out3.column("total").to_pylist() == [2.0, 2.0]
    assert out3.column("time").cast(pa.int64()).to_pylist() == [1_010_000_000] * 2  # the window's end, in µs


@pytest.mark.parametrize(("kw", "message"), [
    ({"use_system_time": True}, "leave time_column out"),
    ({"use_system_time": True, "time_column": None, "force_trigger_time": "1s"}, "use_system_time excludes"),
    ({"time_column": None}, "time_column is required"),
])
def test_system_time_arguments(session, kw, message):
    with pytest.raises(GraphDefinitionError, match=message):
        graph(session, **kw)


def test_several_windows_one_step_as_orca_vector_window_size(session):
    g = session.stream_graph(f"trig{next(_names)}")
    (g.source("t", schema=SCHEMA)
       .time_series_engine(window=["10s", "20s"], step="10s", time_column="time", key_column="sym",
                           metrics=[["sum(v) as total"], ["sum(v) as total20", "count(v) as n20"]])
       .sink("out"))
    rows = make_rows(11).sort_values("time", kind="stable", ignore_index=True)  # in order: nothing is late
    got = g.run_local({"t": rows})["out"]
    assert got.columns.tolist() == ["time", "sym", "total", "total20", "n20"]

    def windows(size: pd.Timedelta) -> pd.DataFrame:
        """Per key, each window [end - size, end) on the 10 s grid holding rows, closed by a later row of the key."""
        out = []
        for sym, mine in rows.groupby("sym"):
            for end in sorted({t.floor(W) + W + k * W for t in mine.time for k in range(size // W)}):
                inside = mine[(mine.time >= end - size) & (mine.time < end)]
                if len(inside) and (mine.time >= end).any():
                    out.append({"time": end, "sym": sym, "sum": inside.v.sum(min_count=1), "n": inside.v.count()})
        return pd.DataFrame(out)

    ten, twenty = windows(W), windows(2 * W)
    want = ten.merge(twenty, on=["time", "sym"], how="outer", suffixes=("10", "20"))
    got = got.sort_values(["sym", "time"], ignore_index=True)
    want = want.sort_values(["sym", "time"], ignore_index=True)
    assert len(want) > 20 and len(ten) < len(want)  # some rows exist for the 20 s window alone
    assert list(zip(got.time, got.sym, strict=True)) == list(zip(want.time, want.sym, strict=True))
    np.testing.assert_allclose(got.total.to_numpy(float), want.sum10.to_numpy(float))
    np.testing.assert_allclose(got.total20.to_numpy(float), want.sum20.to_numpy(float))
    np.testing.assert_allclose(got.n20.to_numpy(float), want.n20.to_numpy(float))


def test_several_windows_need_one_metric_list_each(session):
    with pytest.raises(GraphDefinitionError, match="with 2 windows, metrics must be a list of 2 lists"):
        graph(session, window=["10s", "20s"], metrics=["sum(v) as total"])
    with pytest.raises(GraphDefinitionError, match="exclude use_window_start_time"):
        graph(session, window=["10s", "20s"], metrics=[["sum(v) as a"], ["sum(v) as b"]], use_window_start_time=True)
    with pytest.raises(GraphDefinitionError, match="window 15s must be a multiple of step 10s"):
        graph(session, window=["10s", "15s"], metrics=[["sum(v) as a"], ["sum(v) as b"]])


def test_the_documented_accepted_delay_example(session):
    """C.1: window 60 s, accepted_delay 5 s; rows 10:00:10 (10), 10:00:40 (20), 10:01:02 (1), 10:00:55 (30),
    10:01:06 (2): one output for [10:00, 10:01) = 60, emitted when 10:01:06 arrives."""
    g = session.stream_graph(f"trig{next(_names)}")
    (g.source("t", schema=SCHEMA)
       .time_series_engine(window="60s", step="60s", metrics=["sum(v) as total"], time_column="time",
                           key_column="sym", accepted_delay="5s")
       .sink("out"))
    at = pd.to_datetime(["2026-11-25 10:00:10", "2026-11-25 10:00:40", "2026-11-25 10:01:02", "2026-11-25 10:00:55",
                         "2026-11-25 10:01:06"])
    rows = pd.DataFrame({"time": at, "sym": ["s"] * 5, "v": [10.0, 20.0, 1.0, 30.0, 2.0]})
    out = g.run_local({"t": [rows.iloc[:4], rows.iloc[4:]]})["out"]  # nothing closes before the last row
    assert out.to_dict("list") == {"time": [pd.Timestamp("2026-11-25 10:01:00")], "sym": ["s"], "total": [60.0]}


def test_times_at_the_ends_of_the_timestamp_range_do_not_break_the_engine(session):
    """Timestamps beyond 2**53 µs (after 2255) are exact int64 times, not a crash on every retry; a far-future
    row that would fill hundreds of millions of windows fails with a clear error instead of exhausting memory."""
    big = 2**63 - 1
    rows = pa.table({"time": pa.array([0, big, 10_000_000, 25_000_000], pa.timestamp("us")),
                     "sym": ["a", "a", "b", "b"], "v": [1.0, 2.0, 3.0, 4.0]})
    out = graph(session).run_local({"t": rows})["out"]
    assert out.sym.tolist() == ["a", "b"] and out.total.tolist() == [1.0, 3.0]
    with pytest.raises(hw.errors.ExecutionError, match="would emit more than 50,000,000 windows"):
        graph(session, fill="ffill").run_local({"t": rows})
