"""daily_time_series_engine's options shared with time_series_engine (force_trigger_time, use_system_time,
update_time, several windows, round_time, sub_window): small worked examples and clear errors. The per-row reference,
for any split of the input into appends and after a kill, is in ``test_daily_time_series.py``."""

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
from headwater.engines.daily_time_series import DailyTimeSeriesEngine
from headwater.parse import parse_metric
from headwater.storage.table_log import commit_time
from headwater.types import Schema
from tests.support.daily_reference import CALENDARS, METRICS, SCHEMA, ZERO, M, Reference, make_rows

_names = itertools.count()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("daily_options"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def trades(*rows) -> pd.DataFrame:
    return pd.DataFrame({"time": pd.to_datetime([f"2026-01-05 {t}" for t, _, _ in rows]),
                         "sym": [s for _, s, _ in rows], "volume": [float(v) for _, _, v in rows]})


def bars(session, **kw):
    g = session.stream_graph(f"opt{next(_names)}")
    (g.source("trades", schema={"time": "timestamp", "sym": "string", "volume": "double"})
      .daily_time_series_engine(**{"window": "60s", "step": "60s", "metrics": ["sum(volume) as volume"],
                                   "time_column": "time", "key_column": "sym", "session_begin": ["09:30", "13:00"],
                                   "session_end": ["11:30", "15:00"], **kw})
      .sink("bars"))
    return g


def table(out: pd.DataFrame) -> list[tuple]:
    return [(t.strftime("%H:%M:%S"), sym, v) for t, sym, v in out.itertuples(index=False)]


def test_force_trigger_time_a_row_of_another_key_closes_a_quiet_keys_window(session, tmp_path):
    runner = LocalRunner(bars(session, force_trigger_time="15s").plan(), tmp_path)
    runner.append("trades", trades(("09:30:10", "A", 1), ("09:30:20", "B", 2), ("09:31:14", "B", 4)))
    runner.run_until_idle()
    assert table(runner.read("bars")) == [("09:31:00", "B", 2.0)]  # B's own row; A's window ended only 14 s ago
    # B at 09:31:15 forces A's [09:30, 09:31); A's 09:30:50 is then late; A's 09:31:20 closes nothing of its own
    runner.append("trades", trades(("09:31:15", "B", 8), ("09:30:50", "A", 16), ("09:31:20", "A", 32),
                                   ("09:32:00", "A", 64)))
    runner.run_until_idle()
    assert table(runner.read("bars"))[1:] == [("09:31:00", "A", 1.0), ("09:32:00", "A", 32.0)]


# ---- use_system_time ---------------------------------------------------------------------------------------

def system_time_processor(calendar: str = "day", **kw):
    spec = DailyTimeSeriesEngine(name="sys", input_schema=Schema.parse({"k": "string", "v": "double"}),
                                 window=dt.timedelta(seconds=60), step=dt.timedelta(seconds=60),
                                 metrics=tuple(parse_metric(m) for m in METRICS), time_column=None, key_column=("k",),
                                 session_begin=tuple(CALENDARS[calendar]["begin"]),
                                 session_end=tuple(CALENDARS[calendar]["end"]), use_system_time=True, **kw)
    return spec.processor()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 119), min_size=1, max_size=30, unique=True),
       gaps=st.lists(st.sampled_from([0.0004, 0.3, 5.25, 20.0, 61.0, 400.0, 86_000.0]), min_size=31, max_size=31),
       calendar=st.sampled_from(["day", "night"]))
def test_system_time_rows_take_their_batch_commit_time(seed, cuts, gaps, calendar):
    """Each micro-batch's rows are at its commit time (ms): the event-time reference over those times, with a
    row of any key closing every window that ended (a forced trigger of 0)."""
    rows = make_rows(seed, calendar, n=120)[["k", "v"]]
    start = (pd.Timestamp("2026-01-05") + CALENDARS[calendar]["first_row"]).timestamp()
    bounds = [0, *sorted(cuts), len(rows)]
    commits = start + np.cumsum(gaps[:len(bounds) - 1])
    p = system_time_processor(calendar)
    state, outs = p.new_state(), []
    for (a, b), batch_time in zip(itertools.pairwise(bounds), commits, strict=True):
        table = pa.Table.from_pandas(rows.iloc[a:b], preserve_index=False).append_column(
            SEQ, pa.array(np.arange(a, b), pa.int64()))
        state, out = p.process(state, table, batch_time=float(batch_time))
        outs.append(out.drop_columns([SEQ]).to_pandas())
    got = pd.concat(outs, ignore_index=True).rename(columns={"time": "t"})
    times = np.repeat([int(c * 1000) for c in commits], np.diff(bounds))
    stamped = rows.assign(t=pd.to_datetime(times, unit="ms"))[["t", "k", "v"]]
    want = Reference(CALENDARS[calendar], window=M, step=M, kick=ZERO, purge=True).run(stamped)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, atol=1e-9)


def test_system_time_after_a_kill_uses_the_same_commit_times(session, tmp_path):
    """Real commits: a killed micro-batch is replayed with its commit's time, so the output is the windows of
    the commit times, each emitted by the first later commit (100 ms windows, one session all day)."""
    g = session.stream_graph(f"opt{next(_names)}")
    (g.source("ticks", schema={"k": "string", "v": "double"})
      .daily_time_series_engine(window="100ms", step="100ms", metrics=["sum(v) as total"], key_column="k",
                                use_system_time=True)
      .sink("out"))
    runner = LocalRunner(g.plan(), tmp_path)
    rng = np.random.default_rng(7)
    batches = [pd.DataFrame({"k": rng.choice(["a", "b"], 3), "v": rng.integers(0, 9, 3).astype(float)})
               for _ in range(12)]
    for i, batch in enumerate(batches):
        runner.append("ticks", batch)
        if i % 4 == 1:
            runner.step(crash_after_tasks=1)
        runner.step()
    assert runner.read("out").columns.tolist() == ["time", "k", "total"]
    stamps = [int(commit_time(runner.tables["ticks"].path, v + 1) * 1000) for v in range(len(batches))]
    rows = pd.concat([b.assign(end=(s // 100 + 1) * 100) for b, s in zip(batches, stamps, strict=True)])
    sums = rows.groupby(["end", "k"]).v.sum()
    want = [(end, k, total) for (end, k), total in sums.items() if end <= stamps[-1]]
    got = [(t.value // 1_000_000, k, total) for t, k, total in runner.read("out").itertuples(index=False)]
    assert got == want and len(want) >= 1


def test_system_time_arguments(session):
    with pytest.raises(hw.GraphDefinitionError, match=r"use_system_time=True cuts windows .* leave time_column out"):
        bars(session, use_system_time=True)
    with pytest.raises(hw.GraphDefinitionError, match="use_system_time excludes force_trigger_time, update_time and accepted_delay"):
        bars(session, use_system_time=True, time_column=None, force_trigger_time="1s")
    with pytest.raises(hw.GraphDefinitionError, match="use_system_time excludes"):
        bars(session, use_system_time=True, time_column=None, accepted_delay="1s")
    with pytest.raises(hw.GraphDefinitionError, match="time_column is required"):
        bars(session, time_column=None)


# ---- update_time -------------------------------------------------------------------------------------------

def test_update_time_orcas_example_1_into_a_keyed_table(session, tmp_path):
    """The docs' example 1 as Orca runs it (update_time=2 s, merge_session_end, a keyed output table): the last
    emission per (time, sym) is Orca's final table, except the 15:00 windows: Orca shows 30 and 49 there from
    its wall-clock flush (rows unprocessed for 2 x updateTime); here, as in time_series_engine, only a later
    row emits, so they stand at the rows before 15:00:00 until a row closes them."""
    rows = trades(("09:25:31", "A", 8), ("09:26:01", "B", 10), ("09:30:02", "A", 26), ("09:30:10", "B", 14),
                  ("11:29:46", "A", 30), ("11:29:50", "B", 11), ("11:30:00", "A", 14), ("11:30:00", "B", 4),
                  ("13:00:10", "A", 16), ("13:00:12", "B", 9), ("14:59:56", "A", 20), ("14:59:58", "B", 20),
                  ("15:00:00", "A", 10), ("15:00:00", "B", 29))
    out = bars(session, update_time="2s", merge_session_end=True).run_local({"trades": rows})["bars"]
    # A at 09:30:02 is in a later period than 09:25:31 (before the session: at its begin): 8 first, then 34
    assert table(out)[:3] == [("09:31:00", "A", 8.0), ("09:31:00", "B", 10.0), ("09:31:00", "A", 34.0)]
    keyed = out.groupby(["time", "sym"]).volume.last().reset_index()
    assert table(keyed) == [("09:31:00", "A", 34.0), ("09:31:00", "B", 24.0), ("11:30:00", "A", 44.0),
                            ("11:30:00", "B", 15.0), ("13:01:00", "A", 16.0), ("13:01:00", "B", 9.0),
                            ("15:00:00", "A", 20.0), ("15:00:00", "B", 20.0)]


# ---- several windows (Orca's vector windowSize) --------------------------------------------------------------

SEVERAL = {M: ["sum(v) as total1", "first(v) as f1"], 3 * M: ["sum(v) as total3", "std(v) as sd3", "count(v) as n3"]}


def several_reference(rows: pd.DataFrame, calendar: str, **kw) -> pd.DataFrame:
    """One reference run per window size, joined on (closing row, time, key): a size without a window there
    gives NULLs."""
    merged = None
    for window, metrics in SEVERAL.items():
        names = {m.split(" as ")[1][:-1]: m.split(" as ")[1] for m in metrics}  # reference column -> output
        frame = Reference(CALENDARS[calendar], window=window, step=M, purge=True, **kw).run(rows, triggers=True)
        frame = frame[["trigger", "t", "k", *names]].rename(columns=names)
        merged = frame if merged is None else merged.merge(frame, on=["trigger", "t", "k"], how="outer")
    assert merged is not None
    return merged.sort_values(["trigger", "t", "k"], kind="stable").drop(columns="trigger").reset_index(drop=True)


def several_graph(session, calendar: str, **kw):
    g = session.stream_graph(f"opt{next(_names)}")
    (g.source("t", schema=SCHEMA)
      .daily_time_series_engine(window=[f"{w.seconds}s" for w in SEVERAL], step="60s", metrics=list(SEVERAL.values()),
                                time_column="t", key_column="k", session_begin=CALENDARS[calendar]["begin"],
                                session_end=CALENDARS[calendar]["end"], **kw)
      .sink("out"))
    return g


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 239), max_size=6, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 6)), calendar=st.sampled_from(["day", "night"]),
       closed=st.sampled_from(["left", "right"]), merge=st.booleans(), fill=st.sampled_from([None, "ffill"]),
       kick=st.sampled_from([None, pd.Timedelta(seconds=40)]))
def test_several_windows_equal_the_reference_for_any_split_and_a_kill(session, tmp_path_factory, seed, cuts, crash,
                                                                      calendar, closed, merge, fill, kick):
    rows = make_rows(seed, calendar)
    kw = {"closed": closed, "merge_session_end": merge, **({"fill": fill} if fill else {}),
          **({"force_trigger_time": kick} if kick is not None else {})}
    runner = LocalRunner(several_graph(session, calendar, **kw).plan(), tmp_path_factory.mktemp("several"))
    for i, (a, b) in enumerate(itertools.pairwise([0, *sorted(cuts), len(rows)])):
        runner.append("t", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)  # ran, saved its state, never committed: replayed next
        runner.step()
    got = runner.read("out")
    want = several_reference(rows, calendar, closed=closed, merge=merge, fill=fill, kick=kick)
    assert got.columns.tolist() == ["t", "k", "total1", "f1", "total3", "sd3", "n3"]
    assert fill is not None or want.total1.isna().any()  # rows where only the 3-minute window closed (fill emits all)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, atol=1e-9)


def test_several_windows_a_row_is_late_only_when_every_size_dropped_it(session):
    g = several_graph(session, "day", late_rows_table="late")
    rows = pd.DataFrame({"t": pd.to_datetime(["2026-01-05 09:31:10", "2026-01-05 09:32:10", "2026-01-05 09:30:30",
                                              "2026-01-05 09:34:10", "2026-01-05 09:30:40"]),
                         "k": "a", "v": [1.0, 2.0, 4.0, 8.0, 16.0]})
    out = g.run_local({"t": rows})
    # 09:30:30: its 1-minute window [09:30, 09:31) closed at 09:31:10, but the sliding 3-minute window ending
    # 09:33 (from the session's begin, 09:30) is open: it counts there. 09:34:10 closes that one too, so
    # 09:30:40 is late for both sizes
    assert out["late"].v.tolist() == [16.0]
    assert out["out"].total3.dropna().tolist() == [1.0, 7.0, 3.0]  # windows ending 09:32, 09:33, 09:34


def test_several_windows_arguments(session):
    with pytest.raises(hw.GraphDefinitionError, match="with 2 windows, metrics must be a list of 2 lists"):
        bars(session, window=["60s", "120s"], metrics=["sum(volume) as v"])
    with pytest.raises(hw.GraphDefinitionError, match=r"several windows exclude use_window_start_time \(Orca's rule\)"):
        bars(session, window=["60s", "120s"], metrics=[["sum(volume) as a"], ["sum(volume) as b"]],
             use_window_start_time=True)
    with pytest.raises(hw.GraphDefinitionError, match="window 90s must be a multiple of step 1min"):
        bars(session, window=["60s", "90s"], metrics=[["sum(volume) as a"], ["sum(volume) as b"]])


def test_the_options_round_trip_through_the_plan_document(session):
    for g in (several_graph(session, "night", force_trigger_time="5s"), bars(session, update_time="10s"),
              bars(session, time_column=None, use_system_time=True), bars(session, sub_window="5s:25s")):
        again = hw.StreamGraph.from_json(session, g.to_json())
        assert again.to_json() == g.to_json()


# ---- round_time --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("step", ["60s", "2h"])
def test_round_time_has_no_effect_windows_start_at_session_begins(session, step):
    """time_series_engine's round_time picks the alignment of the first window from the first row's time (for a
    2 h step: the hour with round_time, else the minute); here windows start at each session's begin, whatever
    the first row: both settings give the same windows, for a 09:30 session too (not on an even hour)."""
    calendar = {"session_begin": ["09:30"], "session_end": ["17:30"]} if step == "2h" else {}
    rows = make_rows(11, "day").rename(columns={"t": "time", "k": "sym", "v": "volume"})
    rows = rows.assign(time=rows.time + (pd.Timedelta(minutes=7) if step == "2h" else pd.Timedelta(0)))
    outs = [bars(session, window=step, step=step, round_time=flag, **calendar).run_local({"trades": rows})["bars"]
            for flag in (True, False)]
    pd.testing.assert_frame_equal(outs[0], outs[1])
    assert len(outs[0]) > 3
    if step == "2h":
        assert sorted(set(outs[0].time.dt.strftime("%H:%M"))) <= ["11:30", "13:30", "15:30", "17:30"]
    with pytest.raises(hw.GraphDefinitionError, match="round_time must be True or False, got 'yes'"):
        bars(session, round_time="yes")


# ---- sub_window ---------------------------------------------------------------------------------------------

def test_sub_window_aggregates_the_first_10_seconds_of_each_minute(session):
    """Orca's example of subWindow=0s:10s, on sessions: the row before the opening counts as at 09:30:00 (in
    the sub-window); 09:30:12 closes [09:30, 09:31) and is not in it; the row at 11:30:00 belongs to the next
    session's first window (merge_session_end=False), as at 13:00:00."""
    rows = trades(("09:25:31", "A", 1), ("09:30:02", "A", 2), ("09:30:12", "A", 4), ("09:30:55", "A", 8),
                  ("09:31:05", "A", 16), ("09:31:10", "A", 32), ("11:29:59", "A", 64), ("11:30:00", "A", 128),
                  ("13:00:10", "A", 256))
    out = bars(session, sub_window=("0s", "10s")).run_local({"trades": rows})["bars"]
    assert table(out) == [("09:31:00", "A", 3.0), ("09:32:00", "A", 16.0), ("13:01:00", "A", 128.0)]
    # a sub-window inside the minute: 09:30:40 closes [09:30:20, 09:30:40) and is not in it
    rows = trades(("09:29:00", "A", 1), ("09:30:20", "A", 2), ("09:30:39", "A", 4), ("09:30:40", "A", 8),
                  ("09:31:30", "A", 16), ("09:31:45", "A", 32))
    out = bars(session, sub_window="20s:40s", use_window_start_time=True).run_local({"trades": rows})["bars"]
    assert table(out) == [("09:30:00", "A", 6.0), ("09:31:00", "A", 16.0)]
