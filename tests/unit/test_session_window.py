"""session_window_engine (Orca C.3): an independent per-row pandas reference, equal for any split of the
input into appends, and clear errors for bad arguments."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw

GAP = pd.Timedelta(seconds=10)
METRICS = ["sum(v) as total", "count(v) as n", "max(v) - min(v) as rng", "first(v) as f", "avg(v) as mean"]


def reference(rows: pd.DataFrame, gap: pd.Timedelta, *, start_time: bool = True,
              force: pd.Timedelta | None = None, update: pd.Timedelta | None = None,
              appends: list[int] | None = None) -> pd.DataFrame:
    """Row by row, per key, as C.3 describes it (NULL times skipped, rows older than an earlier one dropped);
    with ``force``, a kept row of any key at or past a session's end + ``force`` closes it. ``update`` > 0: a
    row in a later period (from its session's start) than the session's previous row emits the session so
    far; ``update`` == 0: the end of each append (``appends``: the index of each append's last row) emits the
    open sessions that grew in it."""
    out, sessions, latest = [], {}, {}
    grew: set[str] = set()

    def emit(key, session, trigger):
        v = pd.Series([r.v for r in session], dtype=float)
        out.append({"t": session[0].t if start_time else session[-1].t + gap, "k": key,
                    "total": v.sum(min_count=1), "n": v.count(), "rng": v.max() - v.min(), "f": v.iloc[0],
                    "mean": v.mean(), "trigger": trigger})
        session.clear()

    def period(session, t):
        return (t - session[0].t) // update

    for i, row in enumerate(rows.itertuples(index=False)):
        if not pd.isna(row.t) and not (row.k in latest and row.t < latest[row.k]):
            if force is not None:
                for key, open_session in sessions.items():
                    if key != row.k and open_session and row.t >= open_session[-1].t + gap + force:
                        emit(key, open_session, i)
                        grew.discard(key)
            session = sessions.setdefault(row.k, [])
            if session and row.t - session[-1].t >= gap:
                emit(row.k, session, i)
            elif session and update and period(session, row.t) > period(session, session[-1].t):
                emit(row.k, list(session), i)  # the session so far, still open
            session.append(row)
            grew.add(row.k)
            latest[row.k] = row.t
        if update is not None and not update and i in (appends or []):
            for key in sorted(grew):
                if sessions[key]:
                    emit(key, list(sessions[key]), i)
            grew.clear()
    frame = pd.DataFrame(out, columns=["t", "k", "total", "n", "rng", "f", "mean", "trigger"])
    return frame.sort_values("trigger", kind="stable").drop(columns="trigger").reset_index(drop=True)


def graph(session: hw.Session, name: str, **kw):
    g = session.stream_graph(name)
    (g.source(f"{name}_in", schema={"t": "timestamp", "k": "string", "v": "double"})
       .session_window_engine(session_gap=kw.pop("gap", "10s"), metrics=METRICS, time_column="t", key_column="k", **kw)
       .sink(f"{name}_out"))
    return g


def make_rows(seed: int, n: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    steps = rng.choice([1, 2, 3, 12, 30], n, p=[0.4, 0.3, 0.1, 0.15, 0.05])  # seconds; >= 10 breaks a session
    t = pd.Timestamp("2026-11-25 09:30") + pd.to_timedelta(np.cumsum(steps), unit="s")
    frame = pd.DataFrame({"t": t, "k": rng.choice(["a", "b", "c"], n), "v": rng.integers(0, 50, n).astype(float)})
    frame.loc[rng.random(n) < 0.05, "v"] = np.nan
    late = rng.random(n) < 0.05  # out of order: 40 s in the past
    frame.loc[late, "t"] = frame.loc[late, "t"] - pd.Timedelta(seconds=40)
    frame.loc[rng.random(n) < 0.02, "t"] = pd.NaT
    return frame


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("sessions"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def sort(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["k", "t"], kind="stable").reset_index(drop=True)


def test_sessions_equal_the_reference(session):
    rows = make_rows(1)
    got = graph(session, "whole").run_local({"whole_in": rows})["whole_out"]
    want = reference(rows, GAP)
    assert len(want) > 20
    pd.testing.assert_frame_equal(sort(got), sort(want), check_dtype=False)


def test_output_time_can_be_the_session_end(session):
    rows = make_rows(2)
    got = graph(session, "ends", use_session_start_time=False).run_local({"ends_in": rows})["ends_out"]
    pd.testing.assert_frame_equal(sort(got), sort(reference(rows, GAP, start_time=False)), check_dtype=False)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 199), max_size=6, unique=True))
def test_any_split_into_appends_gives_the_same_sessions(session, seed, cuts):
    rows = make_rows(seed, 200)
    bounds = [0, *sorted(cuts), len(rows)]
    parts = [rows.iloc[a:b] for a, b in itertools.pairwise(bounds)]
    got = graph(session, "split").run_local({"split_in": parts})["split_out"]
    pd.testing.assert_frame_equal(sort(got), sort(reference(rows, GAP)), check_dtype=False)


def every_column(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(list(frame.columns), kind="stable").reset_index(drop=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 199), max_size=6, unique=True),
       update=st.sampled_from([0, 1, 3, 7]), force=st.sampled_from([None, 5]))
def test_update_time_emits_growing_sessions_as_the_reference(session, seed, cuts, update, force):
    rows = make_rows(seed, 200)
    bounds = [0, *sorted(cuts), len(rows)]
    parts = [rows.iloc[a:b] for a, b in itertools.pairwise(bounds)]
    kw = {"update_time": f"{update}s", **({"force_trigger_time": f"{force}s"} if force is not None else {})}
    got = graph(session, "upd", **kw).run_local({"upd_in": parts})["upd_out"]
    want = reference(rows, GAP, update=pd.Timedelta(seconds=update), appends=[b - 1 for b in bounds[1:]],
                     force=None if force is None else pd.Timedelta(seconds=force))
    assert len(want) > len(reference(rows, GAP, force=None if force is None else pd.Timedelta(seconds=force)))
    pd.testing.assert_frame_equal(every_column(got), every_column(want), check_dtype=False, rtol=1e-9)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 199), max_size=6, unique=True),
       force=st.sampled_from([0, 5, 40]))
def test_force_trigger_time_closes_quiet_sessions_alike_for_any_split(session, seed, cuts, force):
    rows = make_rows(seed, 200)
    bounds = [0, *sorted(cuts), len(rows)]
    parts = [rows.iloc[a:b] for a, b in itertools.pairwise(bounds)]
    got = graph(session, "forced", force_trigger_time=f"{force}s").run_local({"forced_in": parts})["forced_out"]
    want = reference(rows, GAP, force=pd.Timedelta(seconds=force))
    pd.testing.assert_frame_equal(sort(got), sort(want), check_dtype=False)


def test_force_trigger_time_emits_the_last_session_of_a_quiet_key(session):
    t0 = pd.Timestamp("2026-11-25 09:30")
    rows = pd.DataFrame({"t": [t0, t0 + pd.Timedelta("2s"), t0 + pd.Timedelta("14s"), t0 + pd.Timedelta("40s")],
                         "k": ["a", "a", "b", "b"], "v": [1.0, 2.0, 4.0, 8.0]})
    plain = graph(session, "quiet").run_local({"quiet_in": rows})["quiet_out"]
    # b's row at 40 s closes b's session [14 s] by the gap; a's session [0 s, 2 s] never sees another row of a
    assert plain[["k", "total"]].values.tolist() == [["b", 4.0]]
    forced = graph(session, "quiet_forced", force_trigger_time="20s").run_local({"quiet_forced_in": rows})
    # 40 s is past a's end (2 s + 10 s gap) + 20 s: the same row closes a's session too
    assert sorted(forced["quiet_forced_out"][["k", "total"]].values.tolist()) == [["a", 3.0], ["b", 4.0]]


@pytest.mark.parametrize(("kw", "message"), [
    ({"gap": "0s"}, "session_gap"),
    ({"time_column": "nope"}, "time_column 'nope' is not an input column"),
    ({"time_column": "v"}, "has type double; expected timestamp"),
    ({"key_column": "kk"}, "key_column 'kk' is not an input column"),
    ({"metrics": ["v"]}, "column 'v' is used outside an aggregate"),
    ({"metrics": []}, "metrics is empty"),
    ({"force_trigger_time": "-1s"}, "force_trigger_time"),
    ({"update_time": "1s", "use_session_start_time": False}, "update_time .* needs use_session_start_time=True"),
])
def test_bad_arguments_fail_at_definition_naming_the_node_and_value(session, kw, message):
    g = session.stream_graph("bad")
    src = g.source("bad_in", schema={"t": "timestamp", "k": "string", "v": "double"})
    args = {"session_gap": kw.pop("gap", "10s"), "metrics": METRICS, "time_column": "t", "key_column": "k", **kw}
    with pytest.raises(hw.GraphDefinitionError, match=message) as err:
        src.session_window_engine(**args)
    assert "session_window_engine 'session_window_bad_in'" in str(err.value) or "session_gap" in str(err.value)


def test_out_of_order_rows_are_counted_in_the_engine_stats(session, tmp_path):
    from headwater.dataplane.engine_stats import engine_rows
    from headwater.dataplane.local import LocalRunner

    rows = make_rows(5)
    runner = LocalRunner(graph(session, "counted").plan(), tmp_path)
    for a, b in itertools.pairwise([0, 100, 101, 250, len(rows)]):
        runner.append("counted_in", rows.iloc[a:b])
        runner.step()
    valid = rows.dropna(subset=["t"])
    late = (valid.t < valid.groupby("k").t.cummax().groupby(valid.k).shift(1)).sum()
    [stat] = engine_rows(runner.physical, tmp_path / "checkpoints")
    assert stat["late_rows"] == late > 0
    assert stat["keys"] == valid.k.nunique()


def test_system_time_sessions_follow_the_micro_batches_commit_times():
    from datetime import timedelta

    import pyarrow as pa

    from headwater.engines.base import SEQ
    from headwater.engines.session_window import SessionWindowEngine
    from headwater.parse import parse_metric
    from headwater.types import Schema

    spec = SessionWindowEngine(name="s", input_schema=Schema.parse({"k": "string", "v": "double"}),
                               session_gap=timedelta(seconds=5), metrics=(parse_metric("sum(v) as total"),),
                               time_column=None, key_column=("k",), use_system_time=True)
    assert spec.output_schema().names == ("time", "k", "total")
    p = spec.processor()
    state, totals = p.new_state(), []
    for batch_time, ks, vs in [(100.0, ["a", "b"], [1.0, 2.0]), (103.0, ["a"], [4.0]), (109.5, ["a", "b"], [8.0, 16.0])]:
        table = pa.table({"k": ks, "v": vs, SEQ: np.arange(len(ks)) + int(batch_time * 10) * 100})
        state, out = p.process(state, table, batch_time=batch_time)
        totals += list(zip(out["k"].to_pylist(), out["total"].to_pylist(), strict=True))
    # at 109.5 s: a's session (100 s, 103 s) and b's (100 s) are over 5 s old; their new rows start new sessions
    assert sorted(totals) == [("a", 5.0), ("b", 2.0)]


def test_system_time_and_a_time_column_are_exclusive(session):
    g = session.stream_graph("sys_both")
    src = g.source("sys_both_in", schema={"t": "timestamp", "k": "string", "v": "double"})
    with pytest.raises(hw.GraphDefinitionError, match=r"use_system_time=True .* leave time_column out"):
        src.session_window_engine(session_gap="5s", metrics=["sum(v) as total"], time_column="t", key_column="k",
                                  use_system_time=True)
