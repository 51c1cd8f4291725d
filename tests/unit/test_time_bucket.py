"""time_bucket_engine (Orca C.4): Orca's closing rule on its own examples, an independent per-row pandas
reference equal for any split of the input into appends and after a kill, fill modes, and clear errors
for bad arguments."""

from __future__ import annotations

import datetime as dt
import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.engines.base import SEQ
from headwater.engines.time_bucket import TimeBucketEngine
from headwater.parse import parse_metric
from headwater.types import Schema

SCHEMA = {"t": "timestamp", "k": "string", "v": "double"}
METRICS = ["sum(v) as total", "count(v) as n", "max(v) - min(v) as rng", "first(v) as f", "last(v) as l",
           "avg(v) as mean", "std(v) as sd"]
COLUMNS = ["t", "k", "total", "n", "rng", "f", "l", "mean", "sd"]
MINUTE_CUTS = ["09:30", "09:35", "09:45", "10:00", "10:02", "10:30"]
SECOND_CUTS = ["09:30:00", "09:30:20", "09:31:00", "09:33:30", "09:40:00"]


# ---- the reference: C.4 read row by row, with pandas timestamps ------------------------------------------

def windows_of(cuts: list[str]) -> tuple[list[pd.Timedelta], pd.Timedelta]:
    unit = pd.Timedelta(minutes=1) if len(cuts[0]) == 5 else pd.Timedelta(seconds=1)
    return [pd.Timedelta(hours=int(c[:2]), minutes=int(c[3:5]), seconds=int(c[6:8] or 0)) for c in cuts], unit


def window_of(t: pd.Timestamp, cuts: list[pd.Timedelta], unit: pd.Timedelta, closed: str):
    """(day, index) of the window holding ``t``, or None."""
    day, tod = t.normalize(), t - t.normalize()
    for i in range(len(cuts) - 1):
        inside = (cuts[i] <= tod <= cuts[i + 1] - unit) if closed == "left" else (cuts[i] < tod <= cuts[i + 1])
        if inside:
            return day, i
    return None


def close_instant(w, cuts, unit, closed) -> pd.Timestamp:
    day, i = w
    return day + cuts[i + 1] - (unit if closed == "left" else pd.Timedelta(0))


def aggregates(values: list[float]) -> dict[str, float]:
    v = pd.Series(values, dtype=float)
    return {"total": v.sum(min_count=1), "n": float(v.count()), "rng": v.max() - v.min(), "f": v.iloc[0],
            "l": v.iloc[-1], "mean": v.mean(), "sd": v.std(ddof=1)}


def reference(rows: pd.DataFrame, cut_texts: list[str], *, closed: str = "left", fill=None,
              start_time: bool = False) -> pd.DataFrame:
    cuts, unit = windows_of(cut_texts)
    n = len(cuts) - 1
    out = []
    open_, through, last_emit, last_vals = {}, {}, {}, {}

    def emit(key, w, values, trigger):
        day, i = w
        out.append({"t": day + cuts[i if start_time else i + 1], "k": key, **values, "trigger": trigger})
        last_emit[key], last_vals[key] = w, values

    for pos, row in enumerate(rows.itertuples(index=False)):
        if pd.isna(row.t):
            continue
        key, w = row.k, window_of(row.t, cuts, unit, closed)
        if w is not None and (key not in through or w > through[key]):
            open_.setdefault(key, {}).setdefault(w, []).append(row.v)
        # the windows this row closes: every window whose closing instant is at or before it
        day = row.t.normalize()
        closable = [(d, i) for d in (day - pd.Timedelta(days=1), day) for i in range(n)
                    if close_instant((d, i), cuts, unit, closed) <= row.t]
        if not closable or (key in through and closable[-1] <= through[key]):
            continue
        upto = closable[-1]
        start = through.get(key)
        first_day = min([*open_.get(key, {})] + ([last_emit[key]] if key in last_emit else []) + [upto])[0]
        d = first_day
        while d <= upto[0]:
            for i in range(n):
                w2 = (d, i)
                if (start is not None and w2 <= start) or w2 > upto:
                    continue
                if w2 in open_.get(key, {}):
                    emit(key, w2, aggregates(open_[key].pop(w2)), pos)
                elif fill is not None and key in last_emit and last_emit[key][0] == d:
                    if fill == "ffill":
                        values = dict(last_vals[key])
                    elif fill == "null":
                        values = dict.fromkeys(aggregates([np.nan]), np.nan)
                    else:
                        values = {**dict.fromkeys(aggregates([np.nan]), float(fill)), "rng": 0.0}
                    emit(key, w2, values, pos)
            d += pd.Timedelta(days=1)
        through[key] = upto
    frame = pd.DataFrame(out, columns=[*COLUMNS, "trigger"])
    return frame.sort_values(["trigger", "t", "k"], kind="stable").drop(columns="trigger").reset_index(drop=True)


# ---- data and harness ------------------------------------------------------------------------------------

def make_rows(seed: int, n: int = 240, *, grain: str = "min") -> pd.DataFrame:
    """Rows over three days around the cut points: whole minutes (or seconds) mostly, some fractions, ties
    on closing instants, rows outside the cut range, out-of-order rows, NULL times and values."""
    rng = np.random.default_rng(seed)
    unit = pd.Timedelta(minutes=1) if grain == "min" else pd.Timedelta(seconds=10)
    days = np.sort(rng.choice(pd.to_datetime(["2026-01-05", "2026-01-06", "2026-01-08"]), n))
    offsets = np.zeros(n, dtype="timedelta64[ns]")
    clock = {}
    for i, d in enumerate(days):
        tod = clock.get(d, pd.Timedelta(hours=9, minutes=26) if grain == "min" else pd.Timedelta(hours=9, minutes=29))
        tod += unit * int(rng.choice([0, 1, 1, 2, 3])) + (pd.Timedelta(milliseconds=100) if rng.random() < 0.1 else pd.Timedelta(0))
        clock[d] = tod
        offsets[i] = tod.to_timedelta64()
    t = pd.Series(pd.to_datetime(days) + pd.to_timedelta(offsets))
    frame = pd.DataFrame({"t": t, "k": rng.choice(["a", "b", "c"], n), "v": rng.integers(0, 50, n).astype(float)})
    late = rng.random(n) < 0.05
    frame.loc[late, "t"] = frame.loc[late, "t"] - 3 * unit
    frame.loc[rng.random(n) < 0.05, "v"] = np.nan
    frame.loc[rng.random(n) < 0.02, "t"] = pd.NaT
    return frame


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("buckets"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_names = iter(range(10**6))


def graph(session: hw.Session, *, parallel: int = 0, **kw):
    g = session.stream_graph(f"b{next(_names)}")
    src = g.source("t", schema=SCHEMA)
    if parallel:
        src = src.parallelize("k", parallel)
    args = {"time_cut_points": MINUTE_CUTS, "metrics": METRICS, "time_column": "t", "key_column": "k", **kw}
    src.time_bucket_engine(**args).sink("out")
    return g


def run(g, tmp_path, rows: pd.DataFrame, cuts=(), crash: int | None = None) -> pd.DataFrame:
    """Append ``rows`` split at ``cuts``, one micro-batch per append; the one after append ``crash`` is killed
    before its commit (it ran and saved its state) and replayed."""
    runner = LocalRunner(g.plan(), tmp_path)
    bounds = [0, *sorted(cuts), len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        runner.append("t", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)
        runner.step()
    return runner.read("out")


def same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False, atol=1e-9)


# ---- Orca's rules on its own examples ----------------------------------------------------------------------

def at(*times: str) -> pd.Series:
    return pd.Series(pd.to_datetime([f"2026-01-05 {x}" for x in times], format="ISO8601"))


def test_left_closed_window_keeps_rows_up_to_one_unit_before_its_end_and_closes_there(session):
    """C.4: [09:00, 09:05) with minute cut points closes on a row at >= 09:04; 09:04:00.000 is its last row,
    09:04:00.100 is in no window."""
    g = graph(session, time_cut_points=["09:00", "09:05", "09:10"], metrics=["sum(v) as total"])
    rows = pd.DataFrame({"t": at("09:00:00", "09:03:59", "09:04:00", "09:04:00.100", "09:05:00", "09:09:00"),
                         "k": "a", "v": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]})
    out = g.run_local({"t": rows})["out"]
    assert out.to_dict("list") == {"t": list(at("09:05", "09:10")), "k": ["a", "a"], "total": [7.0, 48.0]}


def test_right_closed_window_holds_its_end_and_closes_there(session):
    g = graph(session, time_cut_points=["09:00", "09:05", "09:10"], metrics=["sum(v) as total"], closed="right")
    rows = pd.DataFrame({"t": at("09:00:00", "09:00:01", "09:05:00", "09:05:00", "09:07:00", "09:10:00"),
                         "k": "a", "v": [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]})
    out = g.run_local({"t": rows})["out"]
    # 09:00:00 is before (09:00, 09:05]; the second 09:05:00 row comes after its window closed
    assert out.to_dict("list") == {"t": list(at("09:05", "09:10")), "k": ["a", "a"], "total": [6.0, 48.0]}


def test_a_five_minute_bar_from_one_minute_bars_closes_a_minute_early(session, tmp_path):
    """The cascade C.4 is made for: 1-minute bars (stamped with their start) into 5-minute bars, each emitted
    by its last 1-minute bar."""
    g = session.stream_graph(f"b{next(_names)}")
    (g.source("ticks", schema={"t": "timestamp", "k": "string", "price": "double"})
      .time_series_engine(window="60s", step="60s", metrics=["first(price) as open", "max(price) as high",
                                                             "last(price) as close"],
                          time_column="t", key_column="k", use_window_start_time=True)
      .buffer("bars1")
      .time_bucket_engine(time_cut_points=["09:30", "09:35", "09:40"], time_column="t", key_column="k",
                          metrics=["first(open) as open", "max(high) as high", "last(close) as close"])
      .sink("bars5"))
    seconds = np.arange(0, 10 * 60 + 1, 15)  # 09:30:00 ... 09:40:00, a tick every 15 s
    ticks = pd.DataFrame({"t": pd.Timestamp("2026-01-05 09:30") + pd.to_timedelta(seconds, unit="s"), "k": "a",
                          "price": 100.0 + seconds / 60})
    runner = LocalRunner(g.plan(), tmp_path)
    emitted_at = {}
    for i in range(len(ticks)):
        runner.append("ticks", ticks.iloc[i:i + 1])
        runner.run_until_idle()
        for t in runner.read("bars5").t:
            emitted_at.setdefault(t, ticks.t.iloc[i])
    bars5 = runner.read("bars5")
    assert bars5.t.tolist() == list(pd.to_datetime(["2026-01-05 09:35", "2026-01-05 09:40"]))
    assert bars5.open.tolist() == [100.0, 105.0] and bars5.close.tolist() == [104.75, 109.75]
    # the 09:34 one-minute bar is closed by the 09:35:00 tick and closes the 09:30-09:35 bar with it
    assert emitted_at[pd.Timestamp("2026-01-05 09:35")] == pd.Timestamp("2026-01-05 09:35:00")


def test_only_rows_between_the_first_and_last_cut_point_count(session):
    g = graph(session, time_cut_points=["09:30", "10:00"], metrics=["count(v) as n"])
    rows = pd.DataFrame({"t": at("09:29:59", "09:30:00", "09:59:00", "09:59:30", "10:00:00", "12:00:00"),
                         "k": "a", "v": 1.0})
    out = g.run_local({"t": rows})["out"]
    assert out.to_dict("list") == {"t": list(at("10:00")), "k": ["a"], "n": [2]}


def test_second_precision_cut_points_close_a_second_early(session):
    g = graph(session, time_cut_points=[dt.time(9, 0), "09:00:30"], metrics=["count(v) as n"])
    rows = pd.DataFrame({"t": at("09:00:00", "09:00:29", "09:00:29.5"), "k": "a", "v": 1.0})
    assert g.run_local({"t": rows})["out"].n.tolist() == [2]


def test_cut_points_apply_on_every_day_and_output_can_be_the_window_start(session):
    g = graph(session, time_cut_points=["09:00", "09:10"], metrics=["sum(v) as total"], use_window_start_time=True)
    rows = pd.DataFrame({"t": pd.to_datetime(["2026-01-05 09:01", "2026-01-05 09:09", "2026-01-06 09:02",
                                              "2026-01-06 09:09"]), "k": "a", "v": [1.0, 2.0, 3.0, 4.0]})
    out = g.run_local({"t": rows})["out"]
    assert out.t.tolist() == list(pd.to_datetime(["2026-01-05 09:00", "2026-01-06 09:00"]))
    assert out.total.tolist() == [3.0, 7.0]


# ---- the reference property -------------------------------------------------------------------------------

@pytest.mark.parametrize(("cuts", "grain", "closed"), [(MINUTE_CUTS, "min", "left"), (MINUTE_CUTS, "min", "right"),
                                                       (SECOND_CUTS, "sec", "left")])
def test_whole_input_equals_the_reference(session, tmp_path, cuts, grain, closed):
    rows = make_rows(7, grain=grain)
    got = run(graph(session, time_cut_points=cuts, closed=closed), tmp_path, rows)
    want = reference(rows, cuts, closed=closed)
    assert len(want) > 15
    same(got, want)


@pytest.mark.parametrize("fill", ["null", "ffill", -2])
def test_fill_emits_the_empty_windows_of_days_with_rows(session, tmp_path, fill):
    rows = make_rows(3)
    got = run(graph(session, fill=fill), tmp_path, rows)
    want = reference(rows, MINUTE_CUTS, fill=fill)
    assert len(want) > len(reference(rows, MINUTE_CUTS))
    same(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 239), max_size=6, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 6)), closed=st.sampled_from(["left", "right"]),
       fill=st.sampled_from([None, "ffill", 0.0]))
def test_any_split_into_appends_and_a_kill_give_the_reference(session, tmp_path_factory, seed, cuts, crash, closed,
                                                               fill):
    rows = make_rows(seed)
    kw = {"closed": closed} | ({"fill": fill} if fill is not None else {})
    got = run(graph(session, **kw), tmp_path_factory.mktemp("p"), rows, cuts, crash)
    same(got, reference(rows, MINUTE_CUTS, closed=closed, fill=fill))


def test_parallel_tasks_give_the_same_windows(session, tmp_path):
    rows = make_rows(11)
    got = run(graph(session, parallel=2), tmp_path, rows)
    want = reference(rows, MINUTE_CUTS)
    same(got.sort_values(["k", "t"]), want.sort_values(["k", "t"]).reset_index(drop=True))


def test_key_purge_forgets_idle_keys_at_the_batch_commit_time():
    p = TimeBucketEngine(name="purge", input_schema=Schema.parse(SCHEMA), time_cut_points=tuple(MINUTE_CUTS),
                         metrics=(parse_metric("sum(v) as total"),), time_column="t", key_column=("k",),
                         key_purge_freq_in_second=60).processor()

    def batch(times, keys, seq0):
        return pa.table({"t": pa.array(pd.to_datetime([f"2026-01-05 {x}" for x in times]), pa.timestamp("us")),
                         "k": keys, "v": [1.0] * len(keys), SEQ: list(range(seq0, seq0 + len(keys)))})

    # 'a' ends after the last cut point (nothing open), 'b' has an open window
    state, out = p.process(p.new_state(), batch(["09:31", "11:00", "09:31"], ["a", "a", "b"], 0), batch_time=0.0)
    assert out.to_pydict()["k"] == ["a"] and state["keys"] == ["a", "b"]
    state, _ = p.process(state, batch(["09:37"], ["b"], 3), batch_time=30.0)  # not yet due
    assert state["keys"] == ["a", "b"]
    state, _ = p.process(state, batch(["09:38"], ["b"], 4), batch_time=61.0)  # due: 'a' has no open window
    assert state["keys"] == ["b"]


# ---- bad arguments ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("kw", "message"), [
    ({"time_cut_points": ["09:30"]}, r"time_cut_points must be a list of at least two times of day, got \('09:30',\)"),
    ({"time_cut_points": "09:30"}, "expected a list of times of day, got '09:30'"),
    ({"time_cut_points": ["09:30", "09:30"]}, r"must increase strictly, but '09:30' \(index 1\) follows '09:30'"),
    ({"time_cut_points": ["10:00", "09:30"]}, r"must increase strictly, but '09:30' \(index 1\) follows '10:00'"),
    ({"time_cut_points": ["09:30", "09:31:30"]}, "must all be minutes .* got '09:30', '09:31:30'"),
    ({"time_cut_points": ["09:30", "9h45"]}, r"time_cut_points\[1\]: cannot read '9h45' as a time of day"),
    ({"time_cut_points": [930, 945]}, r"time_cut_points\[0\]: cannot read 930 as a time of day"),
    ({"time_cut_points": ["09:30", "25:00"]}, "'25:00' is not a time of day"),
    ({"time_cut_points": ["09:30:00.5", "09:31:00"]}, "must all be minutes"),
    ({"time_cut_points": ["09:30", dt.time(9, 45, tzinfo=dt.UTC)]}, "has a time zone"),
    ({"time_column": "nope"}, "time_column 'nope' is not an input column"),
    ({"time_column": "v"}, "has type double; expected timestamp"),
    ({"time_column": "d"}, "time_column 'd' has type date; this engine cuts windows at times of day"),
    ({"key_column": "kk"}, "key_column 'kk' is not an input column"),
    ({"metrics": ["v"]}, "column 'v' is used outside an aggregate"),
    ({"metrics": []}, "metrics is empty"),
    ({"closed": "both"}, "closed must be 'left' or 'right', got 'both'"),
    ({"fill": "linear"}, "fill must be one of none, null, ffill or a number, got 'linear'"),
    ({"fill": True}, "fill must be one of .* got True of type bool"),
    ({"key_purge_freq_in_second": 0}, "key_purge_freq_in_second must be a positive number of seconds, got 0"),
    ({"key_purge_freq_in_second": 60, "fill": "null"}, "key_purge_freq_in_second needs key_column and fill='none'"),
    ({"key_purge_freq_in_second": 60, "key_column": None}, "key_purge_freq_in_second needs key_column"),
])
def test_bad_arguments_fail_at_definition_naming_the_node_and_value(session, kw, message):
    g = session.stream_graph(f"bad{next(_names)}")
    src = g.source("bad_in", schema={**SCHEMA, "d": "date"})
    args = {"time_cut_points": MINUTE_CUTS, "metrics": METRICS, "time_column": "t", "key_column": "k", **kw}
    with pytest.raises(hw.GraphDefinitionError, match=message) as err:
        src.time_bucket_engine(**args)
    assert "time_bucket_engine 'time_bucket_bad_in'" in str(err.value)


def test_the_engine_round_trips_through_the_plan_document(session):
    g = graph(session, time_cut_points=[dt.time(9, 30), "09:45:00"], fill=2.5, closed="right")
    again = hw.StreamGraph.from_json(session, g.to_json())
    assert again.to_json() == g.to_json()
    assert "'09:30:00', '09:45:00'" in g.explain()


def test_rows_of_an_emitted_window_are_counted_as_late(session, tmp_path):
    from headwater.dataplane.engine_stats import engine_rows

    day = pd.Timestamp("2026-11-25")
    at = [day + pd.Timedelta(hours=9, minutes=m) for m in (30.5, 36.0, 31.0, 32.0)]  # 09:31 and 09:32: too late
    rows = pd.DataFrame({"t": at, "k": ["a"] * 4, "v": [1.0, 2.0, 3.0, 4.0]})
    runner = LocalRunner(graph(session).plan(), tmp_path)
    runner.append("t", rows)
    runner.run_until_idle()
    [stat] = engine_rows(runner.physical, tmp_path / "checkpoints")
    assert stat["late_rows"] == 2 and stat["keys"] == 1
