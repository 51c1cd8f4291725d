"""cross_sectional_engine (Orca C.9): the reference's documented example, an independent pandas reference that
holds for any grouping of appends into micro-batches, and clear errors at definition."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.engines.base import KeyTable

SCHEMA = {"sym": "string", "price": "double", "volume": "long"}
METRICS = ["avg(price) as avg_price", "sum(volume) as volume", "sum(price * volume) as notional",
           "count(price) as n"]
EXAMPLE = pd.DataFrame({"sym": ["A", "B", "A", "B", "B", "A"], "price": [10, 20, 10.1, 20.1, 20.2, 10.2],
                        "volume": [20, 10, 20, 30, 40, 20]})
EXAMPLE_OUT = [(10, 20, 200, 1), (15, 30, 400, 2), (15.05, 30, 402, 2), (15.1, 50, 805, 2), (15.15, 60, 1010, 2),
               (15.2, 60, 1012, 2)]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("xs"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def graph(session: hw.Session, name: str, **kw):
    g = session.stream_graph(name)
    g.source(f"{name}_in", schema=SCHEMA).cross_sectional_engine(metrics=METRICS, key_column="sym", **kw) \
        .sink(f"{name}_out")
    return g


def values(frame: pd.DataFrame) -> list[tuple]:
    return [tuple(round(float(v), 6) for v in row) for row in frame[["avg_price", "volume", "notional", "n"]].values]


def test_the_documented_per_row_example(session):
    out = graph(session, "rows", triggering_pattern="per_row").run_local({"rows_in": EXAMPLE})["rows_out"]
    assert values(out) == [tuple(float(v) for v in row) for row in EXAMPLE_OUT]


def test_the_documented_per_batch_example_emits_once_per_append(session):
    out = graph(session, "batches").run_local({"batches_in": [EXAMPLE.iloc[:3], EXAMPLE.iloc[3:]]})["batches_out"]
    assert values(out) == [tuple(float(v) for v in EXAMPLE_OUT[i]) for i in (2, 5)]


def reference(appends: list[pd.DataFrame]) -> list[tuple]:
    """Per append: every key's latest row, then the metrics over them (NULLs skipped)."""
    latest: dict[str, tuple[float, float]] = {}
    out = []
    for frame in appends:
        for row in frame.itertuples(index=False):
            latest[row.sym] = (row.price, row.volume)
        price = pd.Series([p for p, _ in latest.values()], dtype=float)
        volume = pd.Series([v for _, v in latest.values()], dtype=float)
        out.append((round(price.mean(), 6), round(volume.sum(min_count=1), 6),
                    round((price * volume).sum(min_count=1), 6), float(price.count())))
    return out


def random_appends(seed: int, n_appends: int) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(n_appends):
        n = int(rng.integers(1, 8))
        frame = pd.DataFrame({"sym": rng.choice(["a", "b", "c", "d"], n), "price": rng.integers(1, 100, n) / 4,
                              "volume": rng.integers(1, 50, n)})
        frame.loc[rng.random(n) < 0.15, "price"] = np.nan
        frames.append(frame)
    return frames


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), steps=st.lists(st.booleans(), min_size=12, max_size=12))
def test_any_grouping_of_appends_into_micro_batches_gives_one_row_per_append(session, seed, steps):
    appends = random_appends(seed, 12)
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(graph(session, "prop").plan(), Path(tmp))
        for frame, step in zip(appends, steps, strict=True):
            runner.append("prop_in", frame)
            if step:  # a micro-batch now; otherwise the next one covers several appends
                runner.step()
        runner.run_until_idle()
        got = runner.read("prop_out")
    pd.testing.assert_frame_equal(pd.DataFrame(values(got)), pd.DataFrame(reference(appends)))


@pytest.mark.parametrize(("kw", "message"), [
    ({"key_column": "nope"}, "key_column 'nope' is not an input column"),
    ({"triggering_pattern": "sometimes"}, "triggering_pattern must be one of per_batch, per_row, interval, key_count, "
                                          "data_interval"),
    ({"metrics": ["first(price) as p"]}, "has no order across keys"),
    ({"use_system_time": False}, "takes the output time from time_column"),
    ({"metrics": ["sym"]}, "the name repeats an output column"),
    ({"metrics": ["rank(sum(price)) as r"]}, "rank a row expression"),
    ({"metrics": ["sum(rank(price)) as r"]}, "rank inside an aggregate"),
])
def test_bad_arguments_fail_at_definition(session, kw, message):
    src = session.stream_graph("bad").source("bad_in", schema=SCHEMA)
    args = {"metrics": METRICS, "key_column": "sym", **kw}
    with pytest.raises(hw.GraphDefinitionError, match=message):
        src.cross_sectional_engine(**args).sink("bad_out").graph.plan()


def test_a_cross_section_asked_to_run_in_parallel_is_refused(session):
    src = session.stream_graph("par").source("par_in", schema=SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match=r"after parallelize\('sym', 2\).*in one task"):
        src.parallelize("sym", 2).cross_sectional_engine(metrics=METRICS, key_column="sym")


def test_context_by_groups_and_data_time(session):
    g = session.stream_graph("ctx")
    (g.source("ctx_in", schema={"t": "timestamp", "sym": "string", "sector": "string", "price": "double"})
       .cross_sectional_engine(metrics=["avg(price) as avg_price", "count(price) as n"], key_column="sym",
                               context_by_column="sector", time_column="t", use_system_time=False)
       .sink("ctx_out"))
    t = pd.Timestamp("2026-11-25 10:00")
    first = pd.DataFrame({"t": [t, t], "sym": ["a", "b"], "sector": ["x", "y"], "price": [1.0, 3.0]})
    second = pd.DataFrame({"t": [t + pd.Timedelta("1s")], "sym": ["c"], "sector": ["x"], "price": [5.0]})
    out = g.run_local({"ctx_in": [first, second]})["ctx_out"]
    assert out.to_dict("list") == {
        "time": [t, t, t + pd.Timedelta("1s"), t + pd.Timedelta("1s")], "sector": ["x", "y", "x", "y"],
        "avg_price": [1.0, 3.0, 3.0, 3.0], "n": [1, 1, 2, 1]}


def updated_groups_reference(rows: pd.DataFrame) -> list[tuple]:
    """Per row: the groups whose members changed (the row's group, and the key's previous group), each
    aggregated over its keys' latest rows."""
    latest: dict[str, tuple[str, float]] = {}
    out = []
    for row in rows.itertuples(index=False):
        touched = {row.sector} | ({latest[row.sym][0]} if row.sym in latest else set())
        latest[row.sym] = (row.sector, row.price)
        members = pd.DataFrame(latest.values(), columns=["sector", "price"])
        for sector in sorted(touched & set(members["sector"])):
            prices = members.loc[members["sector"] == sector, "price"]
            out.append((sector, round(prices.mean(), 9), len(prices)))
    return out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), cuts=st.lists(st.integers(1, 39), max_size=4, unique=True))
def test_updated_context_groups_only_emits_the_changed_groups_for_any_split(session, seed, cuts):
    rng = np.random.default_rng(seed)
    rows = pd.DataFrame({"sym": rng.choice(list("abcdef"), 40), "sector": rng.choice(["x", "y", "z"], 40),
                         "price": rng.integers(1, 100, 40).astype(float)})
    g = session.stream_graph("upd")
    (g.source("upd_in", schema={"sym": "string", "sector": "string", "price": "double"})
       .cross_sectional_engine(metrics=["avg(price) as avg_price", "count(price) as n"], key_column="sym",
                               context_by_column="sector", triggering_pattern="per_row",
                               updated_context_groups_only=True)
       .sink("upd_out"))
    bounds = [0, *sorted(cuts), len(rows)]
    out = g.run_local({"upd_in": [rows.iloc[a:b] for a, b in itertools.pairwise(bounds)]})["upd_out"]
    got = [(s, round(a, 9), int(n)) for s, a, n in out[["sector", "avg_price", "n"]].itertuples(index=False)]
    assert got == updated_groups_reference(rows)


def test_updated_context_groups_only_needs_context_by_column(session):
    src = session.stream_graph("upd_bad").source("upd_bad_in", schema=SCHEMA)
    with pytest.raises(hw.GraphDefinitionError, match=r"updated_context_groups_only.*context_by_column"):
        src.cross_sectional_engine(metrics=METRICS, key_column="sym", updated_context_groups_only=True)


def rank_reference(latest: pd.Series) -> pd.Series:
    """0-based ranks, ties share the lowest, NULL stays NULL (DolphinDB's rank)."""
    return latest.rank(method="min") - 1


def test_per_key_metrics_give_one_row_per_key_with_ranks_and_repeated_aggregates(session):
    g = session.stream_graph("ranks")
    (g.source("ranks_in", schema=SCHEMA)
       .cross_sectional_engine(metrics=["price", "rank(price) as r", "rank(volume, ascending=false) as rv",
                                        "price - avg(price) as dev", "rank(price, percent=true) as pct"],
                               key_column="sym", triggering_pattern="per_row")
       .sink("ranks_out"))
    rng = np.random.default_rng(4)
    rows = pd.DataFrame({"sym": rng.choice(list("abcdef"), 40), "price": rng.integers(1, 6, 40).astype(float),
                         "volume": rng.integers(1, 4, 40)})
    rows.loc[[3, 17], "price"] = np.nan
    out = g.run_local({"ranks_in": rows})["ranks_out"]
    assert out.columns.tolist() == ["time", "sym", "price", "r", "rv", "dev", "pct"]
    latest: dict[str, tuple[float, int]] = {}
    want = []
    for row in rows.itertuples(index=False):  # per row: every key's latest row, in key order of first sight
        latest[row.sym] = (row.price, row.volume)
        section = pd.DataFrame.from_dict(latest, orient="index", columns=["price", "volume"])
        r = rank_reference(section.price)
        want += [(sym, p, r[sym], (-section.volume).rank(method="min")[sym] - 1, p - section.price.mean(),
                  (r[sym] + 1) / section.price.count()) for sym, p in section.price.items()]
    got = list(zip(out.sym, out.price, out.r, out.rv, out.dev, out.pct, strict=True))
    assert len(got) == len(want) > 100
    np.testing.assert_allclose(np.array([g[1:] for g in got], float), np.array([w[1:] for w in want], float))
    assert [g[0] for g in got] == [w[0] for w in want]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), steps=st.lists(st.booleans(), min_size=12, max_size=12),
       crash=st.one_of(st.none(), st.integers(0, 11)))
def test_ranks_per_append_for_any_grouping_and_a_kill(session, seed, steps, crash):
    appends = random_appends(seed, 12)
    g = session.stream_graph("rank_prop")
    (g.source("rank_prop_in", schema=SCHEMA)
       .cross_sectional_engine(metrics=["rank(price) as r", "volume * 1.0 / sum(volume) as share"], key_column="sym")
       .sink("rank_prop_out"))
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(g.plan(), Path(tmp))
        for i, (frame, step) in enumerate(zip(appends, steps, strict=True)):
            runner.append("rank_prop_in", frame)
            if crash == i:
                runner.step(crash_after_tasks=1)  # ran and saved its state, never committed: replayed
            if step:
                runner.step()
        runner.run_until_idle()
        got = runner.read("rank_prop_out")
    latest: dict[str, tuple[float, float]] = {}
    want = []
    for frame in appends:  # per append: every key's latest row, ranked; in the order keys were first seen
        for row in frame.itertuples(index=False):
            latest[row.sym] = (row.price, row.volume)
        section = pd.DataFrame.from_dict(latest, orient="index", columns=["price", "volume"])
        r = rank_reference(section.price)
        want += [(sym, r[sym], section.volume[sym] / section.volume.sum()) for sym in section.index]
    assert [g[0] for g in zip(got.sym)] == [w[0] for w in want]
    np.testing.assert_allclose(got[["r", "share"]].to_numpy(float), np.array([w[1:] for w in want], float))


def test_a_null_integer_key_is_a_key_of_its_own_and_stays_null(session):
    """A NULL in an integer key column used to fail the output (NaN into an int64 column)."""
    g = session.stream_graph("null_keys")
    (g.source("null_keys_in", schema={"id": "long", "price": "double"})
       .cross_sectional_engine(metrics=["price", "rank(price) as r"], key_column="id", triggering_pattern="per_row")
       .sink("null_keys_out"))
    rows = pd.DataFrame({"id": pd.array([1, None, 7, None, 1], dtype="Int64"), "price": [1.0, 2.0, 3.0, 4.0, 5.0]})
    out = g.run_local({"null_keys_in": rows})["null_keys_out"]
    latest: dict = {}
    want = []
    for key, price in zip(rows["id"].tolist(), rows["price"], strict=True):
        latest[None if pd.isna(key) else int(key)] = price
        ranks = rank_reference(pd.Series(list(latest.values())))
        want += [(k, p, r) for (k, p), r in zip(latest.items(), ranks, strict=True)]
    got = [(None if pd.isna(k) else int(k), p, r) for k, p, r in zip(out["id"].astype(object), out["price"], out["r"],
                                                                      strict=True)]
    assert got == want and None in {k for k, _, _ in got}


def test_integer_keys_batched_with_a_null_stay_exact():
    """Past 2**53 a float cannot hold every integer: keys must not go through one (pandas did, given a NULL)."""
    big = 2**53 + 1
    table = KeyTable()
    slots = table.slots_from_arrow([pa.array([big, None, big - 1, big], pa.int64())])
    assert slots.tolist() == [0, 1, 2, 0]
    assert table.column(slots, 0, 1, pa.int64()).to_pylist() == [big, None, big - 1, big]
    pair = KeyTable()
    both = pair.slots_from_arrow([pa.array([big, None, big], pa.int64()), pa.array(["a", "a", "b"])])
    assert both.tolist() == [0, 1, 2]
    assert pair.column(both, 0, 2, pa.int64()).to_pylist() == [big, None, big]
