"""``late_rows_table``: the rows a time engine drops as late go to a table the user names, with the engine's
input columns, exactly once (any split into appends, a crash and replay), and are still counted."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner

SCHEMA = {"t": "timestamp", "k": "string", "v": "double"}
T0 = pd.Timestamp("2026-11-25 09:30")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("late"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def make_rows(seed: int, n: int = 120) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = T0 + pd.to_timedelta(np.cumsum(rng.choice([1, 2, 3, 12], n)), unit="s")
    frame = pd.DataFrame({"t": t, "k": rng.choice(["a", "b", "c"], n), "v": np.arange(n, dtype=float)})
    late = rng.random(n) < 0.15  # out of order: 40 s in the past
    frame.loc[late, "t"] = frame.loc[late, "t"] - pd.Timedelta(seconds=40)
    return frame


def older_than_their_key(rows: pd.DataFrame) -> pd.DataFrame:
    """The session window engine's late rows: older than an earlier kept row of their key."""
    latest: dict[str, pd.Timestamp] = {}
    late = []
    for i, row in enumerate(rows.itertuples(index=False)):
        if row.k in latest and row.t < latest[row.k]:
            late.append(i)
        else:
            latest[row.k] = row.t
    return rows.iloc[late].reset_index(drop=True)


def session_graph(session: hw.Session, name: str) -> hw.StreamGraph:
    g = session.stream_graph(name)
    (g.source(f"{name}_in", schema=SCHEMA)
      .session_window_engine(session_gap="10s", metrics=["sum(v) as total"], time_column="t", key_column="k",
                             late_rows_table=f"{name}_late")
      .sink(f"{name}_out"))
    return g


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 119), max_size=5, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 5)))
def test_session_window_late_rows_reach_the_table_once(session, tmp_path_factory, seed, cuts, crash):
    rows = make_rows(seed)
    runner = LocalRunner(session_graph(session, "sw").plan(), tmp_path_factory.mktemp("sw"))
    bounds = [0, *sorted(cuts), len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        runner.append("sw_in", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)  # ran and wrote its files, never committed: replayed next
        runner.step()
    want = older_than_their_key(rows)
    assert len(want) > 3
    pd.testing.assert_frame_equal(runner.read("sw_late"), want, check_dtype=False)


def test_the_table_must_be_the_engines_own(session):
    g = session.stream_graph("own")
    src = g.source("own_in", schema=SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match="late_rows_table 'own_in' is already a table of this graph"):
        src.session_window_engine(session_gap="10s", metrics=["sum(v) as total"], time_column="t", key_column="k",
                                  late_rows_table="own_in")


def minute_rows(seed: int, n: int = 150) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = T0 + pd.to_timedelta(np.cumsum(rng.choice([5, 10, 20], n)), unit="s")
    frame = pd.DataFrame({"t": t, "k": rng.choice(["a", "b"], n), "v": np.arange(n, dtype=float)})
    late = rng.random(n) < 0.15  # two minutes in the past: usually in a window already emitted for the key
    frame.loc[late, "t"] = frame.loc[late, "t"] - pd.Timedelta(minutes=2)
    return frame


def emitted_window_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The time-series engine's late rows (1-minute windows, no accepted delay): a row whose key's window
    holding it was emitted, i.e. earlier than the key's open window."""
    open_start: dict[str, pd.Timestamp] = {}
    late = []
    for i, row in enumerate(rows.itertuples(index=False)):
        start = row.t.floor("1min")
        if row.k in open_start and start < open_start[row.k]:
            late.append(i)
        elif row.k not in open_start or start > open_start[row.k]:
            open_start[row.k] = start  # the key's earlier windows close
    return rows.iloc[late].reset_index(drop=True)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 149), max_size=5, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 5)))
def test_time_series_late_rows_reach_the_table_once(session, tmp_path_factory, seed, cuts, crash):
    rows = minute_rows(seed)
    g = session.stream_graph("ts")
    (g.source("ts_in", schema=SCHEMA)
      .time_series_engine(window="1m", step="1m", metrics=["sum(v) as total"], time_column="t", key_column="k",
                          late_rows_table="ts_late")
      .sink("ts_out"))
    runner = LocalRunner(g.plan(), tmp_path_factory.mktemp("ts"))
    bounds = [0, *sorted(cuts), len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        runner.append("ts_in", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)
        runner.step()
    want = emitted_window_rows(rows)
    assert len(want) > 3
    pd.testing.assert_frame_equal(runner.read("ts_late"), want, check_dtype=False)


@pytest.mark.parametrize("engine", ["time_bucket", "daily_time_series"])
def test_calendar_engines_route_rows_of_emitted_windows(session, engine):
    day = pd.Timestamp("2026-11-25")
    times = ["09:31", "09:33", "09:36", "09:32", "09:41", "09:34:30", "09:38", "08:00"]
    rows = pd.DataFrame({"t": [day + pd.Timedelta(f"{t}:00" if t.count(":") == 1 else t) for t in times],
                         "k": "a", "v": np.arange(len(times), dtype=float)})
    g = session.stream_graph(f"cal_{engine}")
    src = g.source(f"cal_{engine}_in", schema=SCHEMA)
    metrics, table = ["sum(v) as total"], f"cal_{engine}_late"
    if engine == "time_bucket":
        stream = src.time_bucket_engine(time_cut_points=["09:30", "09:35", "09:40", "09:45"], metrics=metrics,
                                        time_column="t", key_column="k", closed="right", late_rows_table=table)
    else:
        stream = src.daily_time_series_engine(window="5m", step="5m", metrics=metrics, time_column="t",
                                              key_column="k", session_begin="09:30", session_end="10:00",
                                              late_rows_table=table)
    stream.sink(f"cal_{engine}_out")
    out = g.run_local({f"cal_{engine}_in": [rows.iloc[:4], rows.iloc[4:]]})
    # 09:36 closes the 09:30-09:35 window, 09:41 the 09:35-09:40 one: 09:32, 09:34:30 and 09:38 arrive after
    # their window was emitted. 08:00 is before the first cut point, in no bucket: dropped, not late; the
    # daily engine puts rows before a session's begin into its first window, emitted by then: late
    late = out[table]["t"].dt.strftime("%H:%M:%S").tolist()
    assert late == ["09:32:00", "09:34:30", "09:38:00", *([] if engine == "time_bucket" else ["08:00:00"])]
    assert out[table]["v"].tolist() == [3.0, 5.0, 6.0, *([] if engine == "time_bucket" else [7.0])]
