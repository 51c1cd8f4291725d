"""cross_sectional_engine's data-time triggers (Orca C.9): key_count (with (c1, c2) and last_batch_only),
data_interval (windows aligned like the time-series engine's) and key_filter. Each against the reference's
documented example where it gives one, an independent row-by-row reference for any split into appends, any
grouping into micro-batches and a kill, and clear errors at definition."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.engines.base import SEQ
from headwater.engines.cross_sectional import CrossSectionalEngine
from headwater.errors import GraphDefinitionError, SchemaError
from headwater.parse import parse_metric
from headwater.types import Schema

SCHEMA = {"time": "timestamp", "sym": "string", "sector": "string", "price": "double", "volume": "long"}
METRICS = ["avg(price) as avg_price", "sum(volume) as volume", "count(price) as n"]
T0 = pd.Timestamp("2026-11-25 09:30")
US = pd.Timedelta(microseconds=1)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("xs_triggers"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_names = iter(range(10**6))


def graph(session: hw.Session, schema: dict[str, str] | None = None, **kw: Any) -> hw.StreamGraph:
    g = session.stream_graph(f"x{next(_names)}")
    args = {"metrics": METRICS, "key_column": "sym", "time_column": "time", **kw}
    g.source("t", schema=schema or SCHEMA).cross_sectional_engine(**args).sink("out")
    return g


def rows(*spec: tuple[Any, ...]) -> pd.DataFrame:
    """``(seconds after T0, sym, price[, volume])`` tuples as input rows."""
    return pd.DataFrame({"time": [T0 + pd.Timedelta(seconds=r[0]) for r in spec], "sym": [r[1] for r in spec],
                         "sector": ["s"] * len(spec), "price": [float(r[2]) for r in spec],
                         "volume": [r[3] if len(r) > 3 else 1 for r in spec]})


def outputs(frame: pd.DataFrame) -> list[tuple]:
    """(microseconds after T0, avg_price, volume, n) per output row, NULL as None."""
    return [(int((t - T0) / US), None if pd.isna(a) else round(float(a), 6), None if pd.isna(v) else int(v), int(n))
            for t, a, v, n in zip(frame.time, frame.avg_price, frame.volume, frame.n, strict=True)]


# -- key_count ----------------------------------------------------------------------------------------------


def test_the_documented_key_count_example_with_last_batch_only(session):
    """Orca's example 3 (its aggregate metric): 10 keys at 09:30:00 in one insert, then 5 keys at 09:30:01;
    triggering_interval=5 and last_batch_only: one result per timestamp, the second over its 5 keys only."""
    t0, t1 = pd.Timestamp("2018-01-01 09:30:00"), pd.Timestamp("2018-01-01 09:30:01")
    first = pd.DataFrame({"time": [t0] * 10, "sym": [f"A{i}" for i in range(1, 11)], "volume": range(1, 11)})
    second = pd.DataFrame({"time": [t1] * 5, "sym": [f"A{i}" for i in range(1, 6)], "volume": range(6, 11)})
    schema = {"time": "timestamp", "sym": "string", "volume": "long"}
    for last_batch_only, total in ((True, 40), (False, 40 + 6 + 7 + 8 + 9 + 10)):
        g = graph(session, schema, metrics=["sum(volume) as factor2"], triggering_pattern="key_count",
                  triggering_interval=5, last_batch_only=last_batch_only)
        out = g.run_local({"t": [first, second]})["out"]
        assert out.to_dict("list") == {"time": [t0, t1], "factor2": [55, total]}


def test_a_timestamp_short_of_c1_keys_waits_for_c2_keys_of_the_next(session):
    g = graph(session, triggering_pattern="key_count", triggering_interval=(3, 2))
    appends = [rows((1, "a", 1), (1, "b", 2)),  # t1: 2 keys of 3, waits
               rows((2, "a", 10)),  # t2 held back: 1 key of c2=2
               rows((1, "c", 3)),  # t1 reaches 3 keys: computed without t2's row, then t2 taken in
               rows((2, "b", 20)),  # t2: 2 keys of 3, waits
               rows((3, "a", 100), (3, "b", 200)),  # t3 reaches c2=2 keys: t2 computed
               rows((4, "a", 1000)),  # t4 held back
               rows((5, "a", 7)),  # a third timestamp: t3 computed, t4 taken in, t5 held back
               rows((4, "b", 2000)),  # a late row of the waiting timestamp still counts
               rows((3, "c", 5))]  # older than the newest timestamp taken in: dropped
    out = g.run_local({"t": appends})["out"]
    assert outputs(out) == [(1_000_000, 2.0, 3, 3), (2_000_000, 11.0, 3, 3), (3_000_000, 101.0, 3, 3)]


def test_rows_of_a_computed_timestamp_update_the_cross_section_without_a_second_result(session):
    g = graph(session, triggering_pattern="key_count", triggering_interval=2)
    appends = [rows((1, "a", 1), (1, "b", 3)), rows((1, "c", 5)), rows((2, "a", 7)), rows((2, "b", 9))]
    out = g.run_local({"t": appends})["out"]
    assert outputs(out) == [(1_000_000, 2.0, 2, 2), (2_000_000, 7.0, 3, 3)]


def test_key_count_counts_keys_not_rows(session):
    g = graph(session, triggering_pattern="key_count", triggering_interval=2)
    out = g.run_local({"t": [rows((1, "a", 1), (1, "a", 3)), rows((1, "b", 5))]})["out"]
    assert outputs(out) == [(1_000_000, 4.0, 2, 2)]


def key_count_reference(appends: list[pd.DataFrame], c1: int, c2: int, last_batch_only: bool,
                        key_filter: bool) -> list[tuple]:
    """Orca's keyCount read literally, one insert at a time, each cut into runs of one timestamp."""
    table: dict[str, tuple] = {}  # sym -> (time, price, volume)
    waiting: dict[str, tuple] = {}  # rows of a newer timestamp held back
    state = {"cur": None, "done": False, "next": None}
    out = []

    def compute() -> None:
        keep = [(p, v) for _, p, v in table.values() if not key_filter or v > 10]
        price = pd.Series([p for p, _ in keep], dtype=float)
        volume = pd.Series([v for _, v in keep], dtype=float)
        out.append((int((state["cur"] - T0) / US), None if price.count() == 0 else round(price.mean(), 6),
                    None if volume.count() == 0 else int(volume.sum()), int(price.count())))
        state["done"] = True

    def keys_at_cur() -> int:
        return sum(1 for t, _, _ in table.values() if t == state["cur"])

    def start(t: pd.Timestamp) -> None:
        state.update(cur=t, done=False)
        if last_batch_only:
            table.clear()

    def take_waiting() -> None:
        start(state["next"])
        table.update(waiting)
        waiting.clear()
        state["next"] = None
        if keys_at_cur() >= c1:
            compute()

    for frame in appends:
        frame = frame[frame.time.notna()]
        for t, run in itertools.groupby(frame.itertuples(index=False), key=lambda r: r.time):
            run_rows = {r.sym: (t, r.price, r.volume) for r in run}
            if state["cur"] is None:
                start(t)
            if t == state["cur"]:
                table.update(run_rows)
                if not state["done"] and keys_at_cur() >= c1:
                    compute()
                    if state["next"] is not None:
                        take_waiting()
            elif t < state["cur"] or (state["next"] is not None and t < state["next"]):
                continue
            else:
                if state["next"] is not None and t > state["next"]:
                    compute()
                    take_waiting()
                if state["done"]:
                    start(t)
                    table.update(run_rows)
                    if keys_at_cur() >= c1:
                        compute()
                else:
                    state["next"] = t
                    waiting.update(run_rows)
                    if len(waiting) >= c2:
                        compute()
                        take_waiting()
    return out


def snapshots(seed: int, n_times: int = 14) -> pd.DataFrame:
    """Rows of up to six keys per timestamp (some keys twice), a few late rows and NULL times."""
    rng = np.random.default_rng(seed)
    parts = []
    for i in range(n_times):
        syms = list(rng.choice(list("abcdef"), int(rng.integers(1, 7)), replace=True))
        times = [T0 + pd.Timedelta(seconds=2 * i)] * len(syms)
        if i > 1 and rng.random() < 0.3:  # a late row, maybe between a waiting timestamp and the next
            syms.append(str(rng.choice(list("abcdef"))))
            times.append(T0 + pd.Timedelta(seconds=int(rng.integers(2 * i - 3, 2 * i))))
        parts.append(pd.DataFrame({"time": times, "sym": syms}))
    frame = pd.concat(parts, ignore_index=True)
    n = len(frame)
    frame.loc[rng.random(n) < 0.03, "time"] = pd.NaT
    price = rng.integers(1, 100, n) / 4
    price[rng.random(n) < 0.1] = np.nan
    return frame.assign(sector="s", price=price, volume=rng.integers(1, 30, n))


def run_in_micro_batches(g: hw.StreamGraph, tmp_path: Any, appends: list[pd.DataFrame], steps: list[bool],
                         crash: int | None) -> pd.DataFrame:
    """Each frame one append; a micro-batch after the appends ``steps`` marks (the others wait for the next
    one); the micro-batch after append ``crash`` is killed before its commit and replayed."""
    runner = LocalRunner(g.plan(), tmp_path)
    for i, frame in enumerate(appends):
        runner.append("t", frame)
        if crash == i:
            runner.step(crash_after_tasks=1)  # ran, saved its state, never committed
        if steps[i % len(steps)]:
            runner.step()
    runner.run_until_idle()
    return runner.read("out")


def split(frame: pd.DataFrame, cuts: list[int]) -> list[pd.DataFrame]:
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(frame)}), len(frame)]
    return [frame.iloc[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 80), max_size=25),
       steps=st.lists(st.booleans(), min_size=1, max_size=8), crash=st.one_of(st.none(), st.integers(0, 12)),
       counts=st.sampled_from([(1, 1), (3, 1), (4, 2), (6, 3), (7, 1)]), last_batch_only=st.booleans(),
       key_filter=st.booleans())
def test_key_count_equals_the_reference_for_any_split_grouping_and_kill(session, tmp_path_factory, seed, cuts, steps,
                                                                      crash, counts, last_batch_only, key_filter):
    c1, c2 = counts
    appends = split(snapshots(seed), cuts)
    g = graph(session, triggering_pattern="key_count", triggering_interval=c1 if c2 == 1 else (c1, c2),
              last_batch_only=last_batch_only, key_filter="volume > 10" if key_filter else None)
    got = run_in_micro_batches(g, tmp_path_factory.mktemp("kc"), appends, steps, crash)
    want = key_count_reference(appends, c1, c2, last_batch_only, key_filter)
    assert len(want) > 3
    assert outputs(got) == want


# -- data_interval ------------------------------------------------------------------------------------------


def test_data_interval_computes_each_window_with_rows_when_the_first_row_past_its_end_arrives(session):
    g = graph(session, triggering_pattern="data_interval", triggering_interval="1s")
    ticks = rows((0.1, "a", 1), (0.5, "b", 3),  # window [0s, 1s)
                 (1.2, "a", 5),  # past 1s: [0s, 1s) computed at 1s over a=1, b=3 (without this row)
                 (3.5, "b", 7),  # [1s, 2s) computed at 2s; [2s, 3s) had no rows: nothing at 3s
                 (3.2, "a", 9),  # back in time, still the open window [3s, 4s)
                 (2.9, "b", 11),  # a row of a window already computed: dropped
                 (4.0, "c", 13))  # exactly on the end: computes [3s, 4s)
    out = g.run_local({"t": ticks})["out"]
    assert outputs(out) == [(1_000_000, 2.0, 2, 2), (2_000_000, 4.0, 2, 2), (4_000_000, 8.0, 2, 2)]


@pytest.mark.parametrize(("round_time", "first_end"), [(True, "10:01:30"), (False, "10:02:30")])
def test_data_interval_windows_are_aligned_like_the_time_series_engine(session, round_time, first_end):
    """A 90 s interval aligns the first window to 2 min with round_time, to 1 min without (Orca's table, C.1)."""
    g = graph(session, triggering_pattern="data_interval", triggering_interval=timedelta(seconds=90),
              round_time=round_time)
    day = pd.Timestamp("2026-11-25")
    ticks = pd.DataFrame({"time": [day + pd.Timedelta("10:01:10"), day + pd.Timedelta("10:05:00")], "sym": ["a", "a"],
                          "sector": "s", "price": [1.0, 2.0], "volume": [1, 1]})
    out = g.run_local({"t": ticks})["out"]
    assert out.time.tolist() == [day + pd.Timedelta(first_end)]


def data_interval_reference(frame: pd.DataFrame, interval: int, align: int, key_filter: bool) -> list[tuple]:
    """Row by row: windows of ``interval`` microseconds from the first time floored to ``align``."""
    table: dict[str, tuple[float, int]] = {}
    left0 = window = None
    out = []
    for r in frame.itertuples(index=False):
        if pd.isna(r.time):
            continue
        t = int((r.time - T0) / US)
        left0 = t // align * align if left0 is None else left0
        w = (t - left0) // interval
        if window is not None and w < window:
            continue
        if window is not None and w > window:
            keep = [(p, v) for p, v in table.values() if not key_filter or v > 10]
            price = pd.Series([p for p, _ in keep], dtype=float)
            volume = pd.Series([v for _, v in keep], dtype=float)
            out.append((left0 + (window + 1) * interval, None if price.count() == 0 else round(price.mean(), 6),
                        None if volume.count() == 0 else int(volume.sum()), int(price.count())))
        table[r.sym] = (r.price, r.volume)
        window = w
    return out


def ticks(seed: int, n: int = 90) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(rng.choice([0, 300, 700, 1200, 4100], n))
    late = rng.random(n) < 0.1
    offsets[late] -= 2000  # back in time: kept within the open window, dropped before it
    frame = pd.DataFrame({"time": T0 + pd.to_timedelta(offsets, unit="ms"), "sym": rng.choice(list("abcde"), n),
                          "sector": "s", "price": rng.integers(1, 100, n) / 4, "volume": rng.integers(1, 30, n)})
    frame.loc[rng.random(n) < 0.03, "time"] = pd.NaT
    frame.loc[rng.random(n) < 0.1, "price"] = np.nan
    return frame


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), cuts=st.lists(st.integers(1, 89), max_size=12),
       steps=st.lists(st.booleans(), min_size=1, max_size=8), crash=st.one_of(st.none(), st.integers(0, 12)),
       interval=st.sampled_from([("1s", 1_000_000, 1_000_000), ("1500ms", 1_500_000, 2_000_000),
                                 ("7s", 7_000_000, 10_000_000)]), key_filter=st.booleans())
def test_data_interval_equals_the_reference_for_any_split_grouping_and_kill(session, tmp_path_factory, seed, cuts,
                                                                          steps, crash, interval, key_filter):
    """The windows do not depend on how rows are split into appends: the reference sees only the rows."""
    frame = ticks(seed)
    text, length, align = interval  # T0 is a whole minute, so aligning from T0 is aligning from the epoch
    g = graph(session, triggering_pattern="data_interval", triggering_interval=text,
              key_filter="volume > 10" if key_filter else None)
    got = run_in_micro_batches(g, tmp_path_factory.mktemp("di"), split(frame, cuts), steps, crash)
    want = data_interval_reference(frame, length, align, key_filter)
    assert len(want) > 5
    assert outputs(got) == want


# -- key_filter -----------------------------------------------------------------------------------------------


def test_key_filter_keeps_keys_out_by_their_latest_row(session):
    """A key whose latest row fails the filter is left out until a later row of it passes; with
    context_by_column, a group without passing keys emits nothing."""
    g = graph(session, metrics=["sum(volume) as volume", "count(price) as n"], triggering_pattern="per_row",
              key_filter="price > 0 and sym != 'z'", context_by_column="sector", use_system_time=False)
    ticks = pd.DataFrame({"time": [T0] * 5, "sym": ["a", "b", "a", "z", "a"], "sector": ["x", "y", "x", "x", "x"],
                          "price": [1.0, 2.0, -1.0, 5.0, 3.0], "volume": [1, 10, 100, 1000, 10000]})
    out = g.run_local({"t": ticks})["out"]
    assert list(zip(out.sector, out.volume, out.n, strict=True)) == [
        ("x", 1, 1),  # a
        ("x", 1, 1), ("y", 10, 1),  # b
        ("y", 10, 1),  # a fails: its sector has no key left
        ("y", 10, 1),  # z never passes
        ("x", 10000, 1), ("y", 10, 1)]  # a passes again


def test_rows_out_of_order_or_without_time_are_counted_in_the_state():
    spec = CrossSectionalEngine(name="x", input_schema=Schema.parse(SCHEMA), metrics=(parse_metric("avg(price)"),),
                                key_column=("sym",), triggering_pattern="key_count", triggering_interval=2,
                                time_column="time", use_system_time=False)
    p = spec.processor()
    t = [T0 + pd.Timedelta(seconds=s) for s in (2, 1, 3)] + [None]
    state, out = p.process(p.new_state(), pa.table({
        "time": pa.array(t, pa.timestamp("us")), "sym": ["a", "b", "a", "b"], "sector": ["s"] * 4,
        "price": [1.0, 2.0, 3.0, 4.0], "volume": [1, 2, 3, 4], SEQ: [0, 1, 2, 3]}))
    assert state["trigger_dropped"] == 2  # 09:30:01 after 09:30:02, and the NULL time
    assert p.stats(state)["late_rows"] == 2
    assert out["avg_price"].to_pylist() == [1.0]  # 09:30:02, computed when 09:30:03 arrived


def test_interval_computes_each_window_of_commit_time_once_as_it_stood_at_its_end():
    spec = CrossSectionalEngine(name="x", input_schema=Schema.parse({"sym": "string", "price": "double"}),
                                metrics=(parse_metric("avg(price) as avg_price"), parse_metric("count(price) as n")),
                                key_column=("sym",), triggering_pattern="interval",
                                triggering_interval=timedelta(seconds=1))
    p = spec.processor()
    state, emitted = p.new_state(), []
    for batch_time, syms, prices in [(100.2, ["a", "b"], [1.0, 3.0]), (100.7, ["a"], [5.0]),
                                     (101.4, ["c"], [9.0]), (103.1, ["b"], [1.0])]:
        seq = np.arange(len(syms)) + (int(batch_time * 10) << 32)
        state, out = p.process(state, pa.table({"sym": syms, "price": prices, SEQ: seq}), batch_time=batch_time)
        seconds = out["time"].cast(pa.int64()).to_numpy() / 1e6  # naive UTC microseconds
        emitted += list(zip(seconds.tolist(), out["avg_price"].to_pylist(), out["n"].to_pylist(), strict=True))
    # the window [100 s, 101 s) computed at 101.4 over a=5, b=3; [101 s, 102 s) at 103.1 over a, b, c
    assert emitted == [(101.0, 4.0, 2), (102.0, 17 / 3, 3)]


def test_new_arguments_round_trip_through_the_plan_document(session):
    for kw in ({"triggering_pattern": "key_count", "triggering_interval": (4, 2), "last_batch_only": True,
                "key_filter": "volume > 10"},
               {"triggering_pattern": "data_interval", "triggering_interval": "1500ms", "round_time": False}):
        g = graph(session, **kw)
        again = hw.StreamGraph.from_json(session, g.to_json())
        assert again.to_json() == g.to_json()
        assert again.explain() == g.explain()


@pytest.mark.parametrize(("kw", "message"), [
    ({"triggering_pattern": "interval"}, "'interval' needs triggering_interval, a positive duration of system time"),
    ({"triggering_pattern": "interval", "triggering_interval": 1000}, "bare number 1000.*'1s'"),
    ({"triggering_pattern": "interval", "triggering_interval": "1s", "use_system_time": False},
     "'interval' works on system time"),
    ({"triggering_pattern": "key_count", "time_column": None, "triggering_interval": 3},
     "'key_count' works on data time; name the time_column"),
    ({"triggering_pattern": "key_count", "triggering_interval": 3, "use_system_time": True},
     "pass use_system_time=False"),
    ({"triggering_pattern": "key_count"}, "needs triggering_interval, a key count"),
    ({"triggering_pattern": "key_count", "triggering_interval": 0}, r"a key count \(an int >= 1\).*got 0"),
    ({"triggering_pattern": "key_count", "triggering_interval": 2.5}, "got 2.5"),
    ({"triggering_pattern": "key_count", "triggering_interval": (3, 5)}, r"\(3, 5\): c2 must be less than c1"),
    ({"triggering_pattern": "key_count", "triggering_interval": (5, "2s")},
     r"\(5, '2s'\): Orca waits the duration on the wall clock.*replay"),
    ({"triggering_pattern": "key_count", "triggering_interval": (5, timedelta(seconds=2))}, "wall clock"),
    ({"triggering_pattern": "data_interval"}, "needs triggering_interval, a positive duration"),
    ({"triggering_pattern": "data_interval", "triggering_interval": 1000}, "bare number 1000.*'1s'"),
    ({"triggering_pattern": "data_interval", "triggering_interval": "-1s"}, "triggering_interval: duration must be"),
    ({"triggering_pattern": "per_row", "triggering_interval": 3}, "applies to key_count and data_interval.*got 3"),
    ({"last_batch_only": True}, "last_batch_only=True needs triggering_pattern='key_count'"),
    ({"key_filter": "price + 1"}, "key_filter 'price \\+ 1': must be true or false.*got a double"),
    ({"key_filter": "nope > 1"}, "unknown column 'nope'"),
    ({"key_filter": "sum(price) > 1"}, "aggregate function sum"),
])
def test_bad_arguments_fail_at_definition_naming_the_node_and_value(session, kw, message):
    with pytest.raises((GraphDefinitionError, SchemaError), match=message) as info:
        graph(session, **kw)
    assert "cross_sectional_engine" in str(info.value)
