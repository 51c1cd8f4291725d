"""anomaly_detection_engine (Orca C.10): the documented example, an independent row-by-row reference for any
split into appends and after a kill, and clear errors for bad arguments."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.errors import GraphDefinitionError

SCHEMA = {"time": "timestamp", "sym": "string", "qty": "long"}
CONDITIONS = ["sum(qty) > 5", "avg(qty) > qty", "qty < 4"]
T0 = pd.Timestamp("2026-11-25 09:30")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("anomaly"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_names = iter(range(10**6))


def graph(session: hw.Session, **kw):
    g = session.stream_graph(f"a{next(_names)}")
    g.source("t", schema=SCHEMA).anomaly_detection_engine(**{"metrics": CONDITIONS, "time_column": "time",
                                                             "key_column": "sym", **kw}).sink("out")
    return g


def test_the_documented_example(session):
    g = graph(session, window="3ms", step="3ms")
    rows = pd.DataFrame({"time": [T0 + pd.Timedelta(milliseconds=m) for m in (2, 3, 4, 5, 6, 7)],
                         "sym": list("ABABAB"), "qty": [6, 5, 4, 3, 2, 1]})
    out = g.run_local({"t": rows})["out"]
    ms = ((out.time - T0) / pd.Timedelta(milliseconds=1)).astype(int).tolist()
    assert list(zip(ms, out.sym, out.type, strict=True)) == [(3, "A", 0), (4, "A", 1), (5, "B", 2), (6, "A", 1),
                                                             (6, "A", 2), (6, "B", 0), (7, "B", 1), (7, "B", 2)]
    assert out.metric.tolist()[:3] == CONDITIONS[:1] + CONDITIONS[1:3]


def lt(a: float, b: float) -> bool:
    """Orca's comparison: NULL is the smallest value."""
    return (-np.inf if np.isnan(a) else a) < (-np.inf if np.isnan(b) else b)


def reference(rows: pd.DataFrame, step: pd.Timedelta, *, with_prev: bool = False) -> list[tuple]:
    """Per row in order, per key: close the key's window when the row is at or past its end, then check the row.
    ``with_prev``: also ``qty < prev(qty)`` (type 3) and ``avg(qty) > prev(qty)`` (type 4)."""
    out, window, last, previous = [], {}, {}, {}
    for row in rows.itertuples():
        start = row.time.floor(step)
        open_ = window.get(row.sym)
        if open_ is not None and row.time >= open_[0] + step:
            values = pd.Series(open_[1], dtype=float)
            total, mean = values.sum(min_count=1), values.mean()
            if lt(5, total):
                out.append((open_[0] + step, row.sym, 0))
            last[row.sym] = mean
            open_ = None
        if open_ is None:
            open_ = window[row.sym] = (start, [])
        open_[1].append(np.nan if pd.isna(row.qty) else float(row.qty))
        qty = np.nan if pd.isna(row.qty) else float(row.qty)
        if row.sym in last and lt(qty, last[row.sym]):
            out.append((row.time, row.sym, 1))
        if lt(qty, 4):
            out.append((row.time, row.sym, 2))
        if with_prev:
            prev = previous.get(row.sym, np.nan)
            if lt(qty, prev):
                out.append((row.time, row.sym, 3))
            if row.sym in last and lt(prev, last[row.sym]):
                out.append((row.time, row.sym, 4))
            previous[row.sym] = qty
    return out


def make_rows(seed: int, n: int = 120) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    time = T0 + pd.to_timedelta(np.cumsum(rng.choice([0, 500, 1000, 1500], n)), unit="ms")
    qty = pd.array(rng.integers(0, 9, n), dtype="Int64")
    qty[rng.random(n) < 0.05] = pd.NA
    return pd.DataFrame({"time": time, "sym": rng.choice(["a", "b", "c"], n), "qty": qty})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 119), max_size=6, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 6)))
def test_any_split_into_appends_and_a_kill_give_the_reference(session, tmp_path_factory, seed, cuts, crash):
    rows = make_rows(seed)
    runner = LocalRunner(graph(session, window="2s", step="2s").plan(), tmp_path_factory.mktemp("p"))
    bounds = [0, *sorted(cuts), len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        runner.append("t", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)  # ran, saved its state, never committed: replayed next
        runner.step()
    out = runner.read("out")
    want = reference(rows, pd.Timedelta(seconds=2))
    assert len(want) > 20
    assert list(zip(out.time, out.sym, out.type, strict=True)) == want


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 119), max_size=6, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 6)))
def test_sequence_functions_in_conditions_keep_their_state_per_key(session, tmp_path_factory, seed, cuts, crash):
    """C.10's row condition ``lt(qty, prev(qty))`` and a mixed one with a sequence function, for any split and a kill."""
    rows = make_rows(seed)
    g = graph(session, window="2s", step="2s", metrics=[*CONDITIONS, "lt(qty, prev(qty))", "avg(qty) > prev(qty)"])
    runner = LocalRunner(g.plan(), tmp_path_factory.mktemp("p"))
    bounds = [0, *sorted(cuts), len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        runner.append("t", rows.iloc[a:b])
        if crash == i:
            runner.step(crash_after_tasks=1)
        runner.step()
    out = runner.read("out")
    want = reference(rows, pd.Timedelta(seconds=2), with_prev=True)
    assert sum(1 for w in want if w[2] == 3) > 10 and sum(1 for w in want if w[2] == 4) > 5
    assert list(zip(out.time, out.sym, out.type, strict=True)) == want


@pytest.mark.parametrize(("kw", "message"), [
    ({"metrics": ["qty + 1"]}, "must be true or false, got a long"),
    ({"metrics": ["mavg(sum(qty), 2) > 1"], "window": "3s", "step": "3s"}, "cannot be nested in each other"),
    ({"metrics": ["sum(prev(qty)) > 1"], "window": "3s", "step": "3s"}, "cannot be nested in each other"),
    ({"metrics": ["iterate(qty, 1, 0.5) > 1"]}, r"iterate\(\) cannot be used in an anomaly condition"),
    ({"metrics": ["linear_time_trend(qty, 3) > 1"]}, r"has 2 outputs; an operator takes one, e.g. .*\[0\]"),
    ({"metrics": ["sum(qty) > 5"]}, "need window and step"),
    ({"metrics": ["sum(qty) > 5"], "window": "3s", "step": "2s"}, "anomaly_detection_engine .* multiple of step"),
    ({"metrics": ["qty < 4"], "window": "3s", "step": "3s"}, "apply only to conditions with aggregates"),
    ({"metrics": ["nope < 4"]}, "unknown column 'nope'"),
    ({"time_column": "qty"}, "has type long; expected timestamp"),
    ({"anomaly_description": ["one"], "window": "3s", "step": "3s"}, "one per metric"),
    ({"metrics": []}, "metrics is empty"),
])
def test_bad_arguments_fail_at_definition_naming_the_node_and_value(session, kw, message):
    with pytest.raises((GraphDefinitionError, hw.errors.SchemaError), match=message) as info:
        graph(session, **kw)
    assert "anomaly_detection" in str(info.value)


def test_descriptions_replace_the_condition_text(session):
    g = graph(session, metrics=["qty < 4"], anomaly_description=["small trade"])
    out = g.run_local({"t": pd.DataFrame({"time": [T0], "sym": ["a"], "qty": [1]})})["out"]
    assert out[["type", "metric"]].to_dict("list") == {"type": [0], "metric": ["small trade"]}
