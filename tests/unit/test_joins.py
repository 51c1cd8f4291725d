"""The join engines (Orca C.12–C.14, C.16, C.17) against independent row-by-row references.

Joins whose result does not depend on arrival (as-of, equal, left semi with the first right row) must give
the same rows for any interleaving of the two inputs; the others (lookup, snapshot) join each row with
what came before it in the join input's commit order, for any grouping into micro-batches. Every property
also replays a micro-batch cut off before its commit (a kill).
"""

from __future__ import annotations

import datetime
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
from headwater.errors import GraphDefinitionError, SchemaError

T0 = pd.Timestamp("2026-11-25 09:30")
LEFT = {"time": "timestamp", "sym": "string", "price": "double", "qty": "long"}
RIGHT = {"time": "timestamp", "sym": "string", "bid": "double"}
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("joins"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_names = iter(range(10**6))


def join_graph(session: hw.Session, method: str, **kw):
    """trades (left) joined with quotes (right) into ``out``."""
    n = next(_names)
    g = session.stream_graph(f"j{n}")
    left = g.source("trades", schema=LEFT)
    right = g.source("quotes", schema=RIGHT)
    getattr(left, method)(right, **kw).sink("out")
    return g


def sides(seed: int, n_left: int = 60, n_right: int = 80) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Times increase per key, with ties, a few rows out of order and a few NULL values."""
    rng = np.random.default_rng(seed)

    def side(n: int, value: str) -> pd.DataFrame:
        t = T0 + pd.to_timedelta(np.cumsum(rng.choice([0, 1, 2, 3], n)), unit="s")
        frame = pd.DataFrame({"time": t, "sym": rng.choice(["a", "b", "c"], n)})
        frame[value] = rng.integers(0, 100, n).astype(float)
        late = rng.random(n) < 0.05
        frame.loc[late, "time"] = frame.loc[late, "time"] - pd.Timedelta(seconds=20)
        frame.loc[rng.random(n) < 0.05, value] = np.nan
        return frame

    left = side(n_left, "price")
    left["qty"] = rng.integers(1, 10, n_left)
    return left, side(n_right, "bid")


def in_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that do not go back in time within their key (the time engines drop the others)."""
    latest: dict[str, pd.Timestamp] = {}
    keep = []
    for row in frame.itertuples():
        ok = row.sym not in latest or row.time >= latest[row.sym]
        keep.append(ok)
        if ok:
            latest[row.sym] = row.time
    return frame[keep]


def asof_reference(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    left, right = in_order(left), in_order(right)
    out = []
    for row in left.itertuples():
        mine = right[right.sym == row.sym]
        if not (mine.time > row.time).any():
            continue  # still waiting for its key's right side to move past it
        before = mine[mine.time <= row.time]
        bid = before.bid.iloc[-1] if len(before) else np.nan
        qtime = before.time.iloc[-1] if len(before) else pd.NaT
        out.append({"time": row.time, "sym": row.sym, "price": row.price, "bid": bid, "qtime": qtime})
    return pd.DataFrame(out, columns=["time", "sym", "price", "bid", "qtime"])


def canonical(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.astype({c: object for c in frame.columns}).sort_values(list(frame.columns), key=lambda s: s.astype(str),
                                                                         kind="stable").reset_index(drop=True)


def assert_same(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    pd.testing.assert_frame_equal(canonical(got), canonical(want), check_dtype=False)


def assert_same_in_order(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    as_objects = [f.astype({c: object for c in f.columns}).reset_index(drop=True) for f in (got, want)]
    pd.testing.assert_frame_equal(*as_objects, check_dtype=False)


def split(frame: pd.DataFrame, parts: int) -> list[pd.DataFrame]:
    bounds = np.linspace(0, len(frame), max(1, parts) + 1).astype(int)
    return [frame.iloc[a:b] for a, b in itertools.pairwise(bounds)]


def interleave(runner: LocalRunner, left: pd.DataFrame, right: pd.DataFrame, cuts: list[int], order: list[bool],
               crash_at: int | None = None) -> None:
    """Append each side in chunks (each side's order kept, the two sides interleaved as ``order`` says), a
    micro-batch after each append; the micro-batch after append ``crash_at`` is killed before its commit."""
    chunks = {True: split(left, cuts[0]), False: split(right, cuts[1])}
    sequence = [s for s in order if chunks[s]]
    sequence += [True] * len(chunks[True]) + [False] * len(chunks[False])
    step = 0
    for is_left in sequence:
        if not chunks[is_left]:
            continue
        chunk = chunks[is_left].pop(0)
        if len(chunk):
            runner.append("trades" if is_left else "quotes", chunk)
        if crash_at == step:
            runner.step(crash_after_tasks=1)  # the batch's task ran and saved its state; the commit never happened
        runner.step()
        step += 1
    runner.run_until_idle()


def run(g, tmp_path, left, right, cuts=(1, 1), order=(True, False), crash_at=None) -> pd.DataFrame:
    runner = LocalRunner(g.plan(), tmp_path)
    interleave(runner, left, right, list(cuts), list(order), crash_at)
    return runner.read("out")


ASOF = {"metrics": ["price", "bid", "right.time as qtime"], "matching_column": "sym", "time_column": "time"}


def test_asof_join_matches_the_latest_right_row_at_or_before(session, tmp_path):
    left, right = sides(1)
    got = run(join_graph(session, "asof_join_engine", **ASOF), tmp_path, left, right)
    want = asof_reference(left, right)
    assert len(want) > 30 and want.bid.isna().sum() >= 1
    assert_same(got, want)


@PROPERTY
@given(seed=st.integers(0, 10**6), cuts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       order=st.lists(st.booleans(), max_size=16), crash=st.one_of(st.none(), st.integers(0, 10)))
def test_asof_join_is_the_same_for_any_interleaving_and_after_a_kill(session, tmp_path_factory, seed, cuts, order, crash):
    left, right = sides(seed, 30, 40)
    got = run(join_graph(session, "asof_join_engine", **ASOF), tmp_path_factory.mktemp("p"), left, right, cuts, order, crash)
    assert_same(got, asof_reference(left, right))


def in_global_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows that do not go back in time on their side, any key (``sort_by_time`` drops the others)."""
    return frame[frame.time >= frame.time.cummax().shift(1).fillna(frame.time.min())]


def sorted_asof_reference(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    """sort_by_time: a left row is due once any key's right side is past it; rows in left (= time) order."""
    left, right = in_global_order(left), in_global_order(right)
    out = []
    for row in left.itertuples():
        if not (right.time > row.time).any():
            break  # so is every later left row
        before = right[(right.sym == row.sym) & (right.time <= row.time)]
        out.append({"time": row.time, "sym": row.sym, "price": row.price,
                    "bid": before.bid.iloc[-1] if len(before) else np.nan,
                    "qtime": before.time.iloc[-1] if len(before) else pd.NaT})
    return pd.DataFrame(out, columns=["time", "sym", "price", "bid", "qtime"])


@PROPERTY
@given(seed=st.integers(0, 10**6), cuts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       order=st.lists(st.booleans(), max_size=16), crash=st.one_of(st.none(), st.integers(0, 10)))
def test_asof_join_sort_by_time_outputs_in_time_order_across_keys(session, tmp_path_factory, seed, cuts, order, crash):
    left, right = sides(seed, 30, 40)
    g = join_graph(session, "asof_join_engine", **ASOF, sort_by_time=True)
    got = run(g, tmp_path_factory.mktemp("p"), left, right, cuts, order, crash)
    want = sorted_asof_reference(left, right)
    assert len(want) > 10
    assert got.time.is_monotonic_increasing
    assert_same_in_order(got, want)


def test_sort_by_time_needs_one_task_and_event_time(session):
    g = session.stream_graph("sorted_refused")
    trades, quotes = g.source("trades", schema=LEFT), g.source("quotes", schema=RIGHT)
    with pytest.raises(GraphDefinitionError, match=r"sort_by_time=True orders the output across keys.*parallelize"):
        trades.parallelize("sym", 2).asof_join_engine(quotes, **ASOF, sort_by_time=True)
    with pytest.raises(GraphDefinitionError, match="sort_by_time needs event time and no delayed_time"):
        trades.asof_join_engine(quotes, **ASOF, sort_by_time=True, delayed_time="1s")
    with pytest.raises(GraphDefinitionError, match="every key meets in one task"):
        trades.parallelize("sym", 2).window_join_engine(quotes, window="-1s:0s", **WINDOW, sort_by_time=True)
    assert "sortByTime" in join_graph(session, "asof_join_engine", **ASOF, sort_by_time=True).explain()


def test_asof_join_with_system_time_joins_on_arrival(session, tmp_path):
    g = join_graph(session, "asof_join_engine", metrics=["price", "bid"], matching_column="sym", use_system_time=True)
    q = pd.DataFrame({"time": [T0], "sym": ["a"], "bid": [1.0]})
    t = pd.DataFrame({"time": [T0, T0], "sym": ["a", "b"], "price": [5.0, 6.0], "qty": [1, 1]})
    got = run(g, tmp_path, t, q, order=[False, True])  # quotes first, then trades
    assert got.sym.tolist() == ["a", "b"] and got.bid.tolist()[0] == 1.0 and np.isnan(got.bid.tolist()[1])
    assert got.time.notna().all()  # the micro-batch's commit time


def test_asof_join_delayed_time_forces_a_waiting_row(session, tmp_path):
    g = join_graph(session, "asof_join_engine", delayed_time="5s", **ASOF)
    q = pd.DataFrame({"time": [T0], "sym": ["a"], "bid": [1.0]})
    t = pd.DataFrame({"time": [T0 + pd.Timedelta(seconds=s) for s in (1, 10)], "sym": ["a", "a"], "price": [5.0, 6.0],
                      "qty": [1, 1]})
    got = run(g, tmp_path, t, q, order=[False, True])
    assert got[["price", "bid"]].to_dict("list") == {"price": [5.0], "bid": [1.0]}  # the row at 1 s, 9 s behind


def equal_reference(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    lf = left.dropna(subset=["time"]).drop_duplicates(["sym", "time"])
    rf = right.dropna(subset=["time"]).drop_duplicates(["sym", "time"])
    out = lf.merge(rf, on=["sym", "time"])
    return out[["time", "sym", "price", "bid"]]


EQUAL = {"metrics": ["price", "bid"], "matching_column": "sym", "time_column": "time", "garbage_size": 10**6}


@PROPERTY
@given(seed=st.integers(0, 10**6), cuts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       order=st.lists(st.booleans(), max_size=16), crash=st.one_of(st.none(), st.integers(0, 10)))
def test_equal_join_joins_each_key_and_time_once_for_any_interleaving(session, tmp_path_factory, seed, cuts, order, crash):
    left, right = sides(seed, 40, 40)
    got = run(join_graph(session, "equal_join_engine", **EQUAL), tmp_path_factory.mktemp("p"), left, right, cuts, order,
              crash)
    assert_same(got, equal_reference(left, right))


def semi_reference(left: pd.DataFrame, right: pd.DataFrame) -> pd.DataFrame:
    first = right.drop_duplicates("sym")
    out = left.merge(first, on="sym", suffixes=("", "_r"))
    return out[["sym", "price", "bid"]]


@PROPERTY
@given(seed=st.integers(0, 10**6), cuts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       order=st.lists(st.booleans(), max_size=16), crash=st.one_of(st.none(), st.integers(0, 10)))
def test_left_semi_join_uses_each_keys_first_right_row_for_any_interleaving(session, tmp_path_factory, seed, cuts,
                                                                            order, crash):
    left, right = sides(seed, 30, 8)
    g = join_graph(session, "left_semi_join_engine", metrics=["price", "bid"], matching_column="sym")
    got = run(g, tmp_path_factory.mktemp("p"), left, right, cuts, order, crash)
    assert_same(got, semi_reference(left, right))


def events(seed: int, n: int = 50) -> list[tuple[bool, pd.DataFrame]]:
    """One interleaving of single-row appends: (is_left, row)."""
    left, right = sides(seed, n, n)
    rng = np.random.default_rng(seed)
    order = rng.permutation([True] * n + [False] * n)
    li, ri, out = iter(range(n)), iter(range(n)), []
    for is_left in order:
        out.append((bool(is_left), left.iloc[[next(li)]] if is_left else right.iloc[[next(ri)]]))
    return out


def lookup_reference(evs: list[tuple[bool, pd.DataFrame]], *, by_time: bool) -> pd.DataFrame:
    cache: dict[str, tuple[pd.Timestamp, float]] = {}
    out = []
    for is_left, frame in evs:
        row = next(frame.itertuples())
        if not is_left:
            if by_time and pd.isna(row.time):
                continue
            if not by_time or row.sym not in cache or row.time >= cache[row.sym][0]:
                cache[row.sym] = (row.time, row.bid)
        else:
            out.append({"sym": row.sym, "price": row.price, "bid": cache[row.sym][1] if row.sym in cache else np.nan})
    return pd.DataFrame(out, columns=["sym", "price", "bid"])


def snapshot_reference(evs: list[tuple[bool, pd.DataFrame]], *, inner: bool) -> pd.DataFrame:
    latest: dict[bool, dict[str, pd.Series]] = {True: {}, False: {}}
    out = []
    for is_left, frame in evs:
        row = frame.iloc[0]
        other = latest[not is_left].get(row.sym)
        if other is not None or not inner:
            lrow, rrow = (row, other) if is_left else (other, row)
            out.append({"sym": row.sym, "time": lrow["time"] if lrow is not None else pd.NaT,
                        "right_time": rrow["time"] if rrow is not None else pd.NaT,
                        "price": lrow["price"] if lrow is not None else np.nan,
                        "bid": rrow["bid"] if rrow is not None else np.nan})
        latest[is_left][row.sym] = row
    return pd.DataFrame(out, columns=["sym", "time", "right_time", "price", "bid"])


def replay(g, tmp_path, evs, groups: list[int], crash_at: int | None) -> tuple[pd.DataFrame, list]:
    """Append the events in order, a micro-batch after each group of appends (the one after group
    ``crash_at`` killed before its commit first). Returns the output and the events in the order the join
    saw them: the commit order of its input table, which its feeders write as their micro-batches land."""
    plan = g.plan()
    runner = LocalRunner(plan, tmp_path)
    bounds = list(np.cumsum(groups))
    for i, (is_left, frame) in enumerate(evs):
        runner.append("trades" if is_left else "quotes", frame)
        if i + 1 in bounds:
            if crash_at is not None and bounds.index(i + 1) == crash_at:
                runner.step(crash_after_tasks=1)
            runner.step()
    runner.run_until_idle()
    (joined,) = [t.name for t in plan.tables() if t.private]
    seen = [(row.side == 0, pd.DataFrame({"time": [row.l0], "sym": [row.k0], "price": [row.l1], "qty": [row.l2]})
             if row.side == 0 else pd.DataFrame({"time": [row.r0], "sym": [row.k0], "bid": [row.r1]}))
            for row in runner.read(joined).itertuples()]
    return runner.read("out"), seen


@PROPERTY
@given(seed=st.integers(0, 10**6), groups=st.lists(st.integers(1, 20), min_size=1, max_size=10),
       by_time=st.booleans(), crash=st.one_of(st.none(), st.integers(0, 9)))
def test_lookup_join_joins_each_left_row_with_the_right_side_as_it_stands(session, tmp_path_factory, seed, groups,
                                                                         by_time, crash):
    evs = events(seed, 30)
    kw = {"right_time_column": "time"} if by_time else {}
    g = join_graph(session, "lookup_join_engine", metrics=["price", "bid"], matching_column="sym", **kw)
    got, seen = replay(g, tmp_path_factory.mktemp("p"), evs, groups, crash)
    assert len(seen) == len(evs)
    assert_same(got, lookup_reference(seen, by_time=by_time))


@PROPERTY
@given(seed=st.integers(0, 10**6), groups=st.lists(st.integers(1, 20), min_size=1, max_size=10),
       inner=st.booleans(), crash=st.one_of(st.none(), st.integers(0, 9)))
def test_snapshot_join_joins_each_arrival_with_the_other_sides_latest(session, tmp_path_factory, seed, groups, inner,
                                                                     crash):
    evs = events(seed, 30)
    g = join_graph(session, "snapshot_join_engine", metrics=["price", "bid"], matching_column="sym",
                   time_column="time", is_inner_join=inner)
    got, seen = replay(g, tmp_path_factory.mktemp("p"), evs, groups, crash)
    assert len(seen) == len(evs)
    assert_same(got, snapshot_reference(seen, inner=inner))


def test_lookup_join_with_duplicates_is_inner_and_emits_every_right_row(session, tmp_path):
    g = join_graph(session, "lookup_join_engine", metrics=["price", "bid"], matching_column="sym", keep_duplicates=True)
    q = pd.DataFrame({"time": [T0] * 3, "sym": ["a", "a", "b"], "bid": [1.0, 2.0, 3.0]})
    t = pd.DataFrame({"time": [T0] * 2, "sym": ["a", "c"], "price": [5.0, 6.0], "qty": [1, 1]})
    got = run(g, tmp_path, t, q, order=[False, True])
    assert got.to_dict("list") == {"sym": ["a", "a"], "price": [5.0, 5.0], "bid": [1.0, 2.0]}


def test_a_parallel_join_partitions_both_sides_by_the_matching_column(session, tmp_path):
    n = next(_names)
    g = session.stream_graph(f"j{n}")
    trades, quotes = g.source("trades", schema=LEFT), g.source("quotes", schema=RIGHT)
    trades.parallelize("sym", 3).asof_join_engine(quotes, **ASOF).sync().sink("out")
    join = next(sg for sg in g.plan().subgraphs if sg.task_count == 3)
    assert join.parallelism is not None and join.parallelism.key == "k0"
    left, right = sides(7)
    assert_same(run(g, tmp_path, left, right, cuts=(3, 4), order=[True, False, False, True]),
                asof_reference(left, right))


def test_join_metrics_can_compute_across_sides_and_the_plan_round_trips(session, tmp_path):
    g = join_graph(session, "asof_join_engine", metrics=["price - bid as spread", "qty * price as notional"],
                   matching_column="sym", time_column="time")
    again = type(g).from_json(session, g.to_json())
    assert again.to_json() == g.to_json() and again.explain() == g.explain()
    t = pd.DataFrame({"time": [T0 + pd.Timedelta(seconds=1)], "sym": ["a"], "price": [5.0], "qty": [2]})
    q = pd.DataFrame({"time": [T0, T0 + pd.Timedelta(seconds=2)], "sym": ["a", "a"], "bid": [4.5, 9.0]})
    got = run(g, tmp_path, t, q)
    assert got[["spread", "notional"]].to_dict("list") == {"spread": [0.5], "notional": [10.0]}


def test_join_on_columns_named_differently(session, tmp_path):
    n = next(_names)
    g = session.stream_graph(f"j{n}")
    trades = g.source("trades", schema=LEFT)
    quotes = g.source("quotes", schema={"ts": "timestamp", "symbol": "string", "bid": "double"})
    trades.asof_join_engine(quotes, metrics=["bid"], matching_column=[["sym"], ["symbol"]],
                            time_column=["time", "ts"]).sink("out")
    t = pd.DataFrame({"time": [T0 + pd.Timedelta(seconds=1)], "sym": ["a"], "price": [5.0], "qty": [2]})
    q = pd.DataFrame({"ts": [T0, T0 + pd.Timedelta(seconds=2)], "symbol": ["a", "a"], "bid": [4.5, 9.0]})
    assert run(g, tmp_path, t, q).to_dict("list") == {"time": [T0 + pd.Timedelta(seconds=1)], "sym": ["a"], "bid": [4.5]}


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"matching_column": "nope"}, GraphDefinitionError, "matching column 'nope' is not an input column"),
    ({"matching_column": [["sym"], ["bid"]]}, GraphDefinitionError, "is string on the left but 'bid' is double"),
    ({"time_column": "price"}, GraphDefinitionError, "has type double; expected timestamp"),
    ({"time_column": None}, GraphDefinitionError, "time_column is required"),
    ({"metrics": ["nope"]}, SchemaError, "unknown column 'nope'"),
    ({"metrics": ["sym"]}, GraphDefinitionError, "repeats a time or matching column"),
    ({"metrics": []}, GraphDefinitionError, "metrics is empty"),
    ({"delayed_time": "-1s"}, GraphDefinitionError, "delayed_time"),
])
def test_bad_join_arguments_fail_at_definition_naming_the_node_and_value(session, kw, error, message):
    with pytest.raises(error, match=message) as info:
        join_graph(session, "asof_join_engine", **{**ASOF, **kw})
    assert "asof_join" in str(info.value)


def test_a_parallel_join_by_another_column_and_a_foreign_stream_are_refused(session):
    g = session.stream_graph("refused")
    trades, quotes = g.source("trades", schema=LEFT), g.source("quotes", schema=RIGHT)
    with pytest.raises(GraphDefinitionError, match="must use a matching column"):
        trades.parallelize("price", 2).asof_join_engine(quotes, **ASOF)
    other = session.stream_graph("other").source("quotes", schema=RIGHT)
    with pytest.raises(GraphDefinitionError, match="same stream graph"):
        trades.asof_join_engine(other, **ASOF)


def window_reference(left: pd.DataFrame, right: pd.DataFrame, low: pd.Timedelta | None,
                     high: pd.Timedelta | None, *, sort_by_time: bool = False, arrays: bool = False) -> pd.DataFrame:
    """Per left row: its key's right rows in [t + low, t + high] (None, None: since the key's previous left row,
    [t_prev, t)), once the key's right side has a row past the window (``sort_by_time``: any key's).
    ``arrays``: also the window's bids and quote times as lists (``bids``, ``times``)."""
    ordered = in_global_order if sort_by_time else in_order
    left, right = ordered(left.dropna(subset=["time"])), ordered(right.dropna(subset=["time"]))
    out, previous = [], {}
    for row in left.itertuples():
        mine = right[right.sym == row.sym]
        passing = right if sort_by_time else mine
        if low is None:
            start, end = previous.get(row.sym, pd.Timestamp.min), row.time
            inside = mine[(mine.time >= start) & (mine.time < end)]
            due = (passing.time >= row.time).any()
            previous[row.sym] = row.time
        else:
            inside = mine[(mine.time >= row.time + low) & (mine.time <= row.time + high)]
            due = (passing.time > row.time + high).any()
        if due:
            bids = inside.bid.astype(float)
            out.append({"time": row.time, "sym": row.sym, "price": row.price, "total": bids.sum(min_count=1),
                        "n": bids.count(), "top": bids.max(), "edge": bids.mean() - row.price,
                        "bids": as_list(inside.bid), "times": as_list(inside.time)})
    columns = ["time", "sym", "price", "total", "n", "top", "edge", "bids", "times"]
    return pd.DataFrame(out, columns=columns)[columns if arrays else columns[:-2]]


def as_list(values) -> list:
    """An array vector's values as a plain list (NULL as None), whatever container holds them."""
    def one(v):
        if pd.isna(v):
            return None
        return pd.Timestamp(v).value if isinstance(v, datetime.datetime | np.datetime64) else float(v)

    return [one(v) for v in values]


WINDOW = {"metrics": ["price", "sum(bid) as total", "count(bid) as n", "max(right.bid) as top",
                      "avg(bid) - price as edge"], "matching_column": "sym", "time_column": "time",
          "max_delayed_time": None}


@PROPERTY
@given(seed=st.integers(0, 10**6), cuts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       order=st.lists(st.booleans(), max_size=16), crash=st.one_of(st.none(), st.integers(0, 10)),
       special=st.booleans())
def test_window_join_is_the_same_for_any_interleaving_and_after_a_kill(session, tmp_path_factory, seed, cuts, order,
                                                                       crash, special):
    left, right = sides(seed, 30, 50)
    window = (0, 0) if special else ("-3s", "1s")
    g = join_graph(session, "window_join_engine", window=window, **WINDOW)
    got = run(g, tmp_path_factory.mktemp("p"), left, right, cuts, order, crash)
    want = window_reference(left, right, *((None, None) if special else (pd.Timedelta(seconds=-3), pd.Timedelta(seconds=1))))
    assert len(want) > 5
    assert_same(got, want)


@PROPERTY
@given(seed=st.integers(0, 10**6), cuts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       order=st.lists(st.booleans(), max_size=16), crash=st.one_of(st.none(), st.integers(0, 10)),
       special=st.booleans())
def test_window_join_sort_by_time_outputs_in_time_order_across_keys(session, tmp_path_factory, seed, cuts, order,
                                                                    crash, special):
    left, right = sides(seed, 30, 50)
    g = join_graph(session, "window_join_engine", window=(0, 0) if special else ("-3s", "1s"), **WINDOW,
                   sort_by_time=True)
    got = run(g, tmp_path_factory.mktemp("p"), left, right, cuts, order, crash)
    want = window_reference(left, right, *((None, None) if special else (pd.Timedelta(seconds=-3), pd.Timedelta(seconds=1))),
                            sort_by_time=True)
    assert len(want) > 5
    assert got.time.is_monotonic_increasing
    assert_same_in_order(got, want)


@PROPERTY
@given(seed=st.integers(0, 10**6), cuts=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       order=st.lists(st.booleans(), max_size=16), crash=st.one_of(st.none(), st.integers(0, 10)),
       special=st.booleans())
def test_window_join_collects_right_rows_as_array_vectors(session, tmp_path_factory, seed, cuts, order, crash,
                                                          special):
    """``to_array(bid)``, and in a 0:0 window a bare right column (Orca infers the array vector there)."""
    left, right = sides(seed, 30, 50)
    times = "right.time as times" if special else "to_array(right.time) as times"
    g = join_graph(session, "window_join_engine", window=(0, 0) if special else ("-3s", "1s"),
                   **{**WINDOW, "metrics": [*WINDOW["metrics"], "to_array(bid) as bids", times]})
    got = run(g, tmp_path_factory.mktemp("p"), left, right, cuts, order, crash)
    got["bids"], got["times"] = got.bids.map(as_list), got.times.map(as_list)
    want = window_reference(left, right, *((None, None) if special else (pd.Timedelta(seconds=-3), pd.Timedelta(seconds=1))),
                            arrays=True)
    assert len(want) > 5 and (want.bids.map(len) > 0).any()
    assert_same(got, want)


def test_window_join_array_vectors_are_typed_by_their_element(session):
    g = session.stream_graph("array_types")
    trades, quotes = g.source("trades", schema=LEFT), g.source("quotes", schema=RIGHT)
    joined = trades.window_join_engine(quotes, window=(0, 0), matching_column="sym", time_column="time",
                                       metrics=["price", "right.bid", "to_array(right.time) as times", "count(bid) as n"])
    assert dict(joined.node.schema.columns) == {"time": "timestamp", "sym": "string", "price": "double",
                                                "bid": "double[]", "times": "timestamp[]", "n": "long"}
    assert type(g).from_json(session, g.to_json()).to_json() == g.to_json()  # array types survive the stored plan
    with pytest.raises(GraphDefinitionError, match=r"collect function to_array\(\) cannot be used here"):
        quotes.time_series_engine(window="1s", step="1s", time_column="time", metrics=["to_array(bid) as bids"])


def test_window_join_max_delayed_time_computes_a_quiet_keys_window(session, tmp_path):
    g = join_graph(session, "window_join_engine", window="-1s:0s", metrics=["price", "count(bid) as n"],
                   matching_column="sym", time_column="time", max_delayed_time="5s")
    t = pd.DataFrame({"time": [T0 + pd.Timedelta(seconds=1)] * 2, "sym": ["a", "b"], "price": [1.0, 2.0], "qty": [1, 1]})
    q = pd.DataFrame({"time": [T0, T0 + pd.Timedelta(seconds=30)], "sym": ["a", "b"], "bid": [1.0, 2.0]})
    got = run(g, tmp_path, t, q)  # key a never gets a right row past 1 s; key b's right side is 29 s past
    assert got.sort_values("sym")[["sym", "n"]].to_dict("list") == {"sym": ["a", "b"], "n": [1, 0]}


def test_window_join_null_fill_replaces_each_columns_nulls(session, tmp_path):
    g = join_graph(session, "window_join_engine", **{**WINDOW, "window": "-1s:0s",
                                                     "null_fill": [None, None, None, 0.0, None, -1.0, None]})
    left, right = sides(3, 30, 50)
    got = run(g, tmp_path, left, right)
    want = window_reference(left, right, pd.Timedelta(seconds=-1), pd.Timedelta(0))
    assert want.total.isna().sum() > 3  # empty windows
    assert_same(got, want.fillna({"total": 0.0, "top": -1.0}))


@pytest.mark.parametrize(("kw", "message"), [
    ({"window": "1s:-1s"}, "starts after it ends"),
    ({"window": "5s"}, "window must be 'a:b'"),
    ({"metrics": ["sum(price) as s"]}, "aggregates left column 'price'"),
    ({"metrics": ["bid"]}, "right column 'bid' outside an aggregate"),
    ({"metrics": ["mavg(bid, 3) as m"]}, "cannot be used here"),
    ({"closed": "both"}, "closed must be"),
    ({"null_fill": [None, 0]}, "null_fill has 2 values for the 7 output columns"),
    ({"null_fill": [None, None, None, "x", None, None, None]}, "null_fill value 'x' does not fit column 'total'"),
    ({"metrics": ["bid"]}, r"or all of them as an array, 'to_array\(bid\)'"),
    ({"metrics": ["to_array(bid) as b", "price"], "null_fill": [None, None, [0.0], None]}, "does not fit column 'b'"),
    ({"metrics": ["size(to_array(bid)) as b"]}, "unknown function"),
    ({"metrics": ["to_array(bid) + 1 as b"]}, "is an array"),
    ({"metrics": ["to_array(bid * 2) as b"]}, "to_array takes one right column"),
    ({"metrics": ["to_array(price) as b"]}, "aggregates left column 'price'"),
])
def test_bad_window_join_arguments_fail_at_definition(session, kw, message):
    with pytest.raises((GraphDefinitionError, SchemaError), match=message):
        join_graph(session, "window_join_engine", **{**WINDOW, "window": "-1s:0s", **kw})


def test_the_documented_lookup_join_example(session, tmp_path):
    """C.14: 15 right rows over A, B, C (latest values 13, 14, 15), then 10 left trades: each trade gets the
    latest value of its symbol."""
    g = join_graph(session, "lookup_join_engine", metrics=["price", "bid"], matching_column="sym")
    quotes = pd.DataFrame({"time": [T0 + pd.Timedelta(seconds=i) for i in range(15)],
                           "sym": ["A", "B", "C"] * 5, "bid": [float(v) for v in range(1, 16)]})
    syms = ["A", "B", "C", "A", "B", "C", "A", "B", "C", "A"]
    trades = pd.DataFrame({"time": [T0 + pd.Timedelta(seconds=20 + i) for i in range(10)], "sym": syms,
                           "price": [float(p) for p in range(10)], "qty": [1] * 10})
    got = run(g, tmp_path, trades, quotes, order=[False, True])
    assert got.to_dict("list") == {"sym": syms, "price": [float(p) for p in range(10)],
                                   "bid": [{"A": 13.0, "B": 14.0, "C": 15.0}[s] for s in syms]}


def system_time_join(session, window):
    """A window join on system time over sources without time columns, and its processor."""
    g = session.stream_graph(f"sys{next(_names)}")
    trades = g.source("trades", schema={"sym": "string", "price": "double"})
    quotes = g.source("quotes", schema={"sym": "string", "bid": "double"})
    joined = trades.window_join_engine(quotes, window=window, matching_column="sym", use_system_time=True,
                                       metrics=["price", "sum(bid) as total", "to_array(bid) as bids"])
    spec = joined.node.spec
    return spec, spec.processor()


def join_input(spec, rows: list[tuple[int, str, float]], first_seq: int) -> pa.Table:
    """The join input table of ``(side, sym, value)`` rows, in arrival order."""
    side = [r[0] for r in rows]
    table = pa.table({"side": side, "k0": [r[1] for r in rows], "l0": [r[2] if r[0] == 0 else None for r in rows],
                      "r0": [r[2] if r[0] == 1 else None for r in rows]}, schema=spec.input_schema.to_arrow())
    return table.append_column(SEQ, pa.array(np.arange(len(rows)) + first_seq, pa.int64()))


def test_window_join_on_system_time_computes_a_window_once_the_clock_passes_it(session):
    spec, p = system_time_join(session, "-2s:0s")
    assert spec.output_schema().names == ("time", "sym", "price", "total", "bids")
    state, out = p.new_state(), []
    for batch_time, rows in [(100.0, [(1, "a", 1.0), (0, "a", 10.0)]),  # window [98 s, 100 s]
                             (101.0, [(1, "a", 2.0)]),  # the clock passed 100 s: computed, without the 101 s row
                             (103.5, [(0, "a", 11.0), (1, "a", 4.0)]),  # window [101.5 s, 103.5 s]
                             (104.0, [(1, "b", 8.0)])]:  # a row of any key moves the clock on
        state, rows_out = p.process(state, join_input(spec, rows, int(batch_time * 100)), batch_time=batch_time)
        out += rows_out.drop_columns([SEQ]).to_pylist()
    assert out == [{"time": datetime.datetime.fromtimestamp(101, datetime.UTC).replace(tzinfo=None), "sym": "a",
                    "price": 10.0, "total": 1.0, "bids": [1.0]},
                   {"time": datetime.datetime.fromtimestamp(104, datetime.UTC).replace(tzinfo=None), "sym": "a",
                    "price": 11.0, "total": 4.0, "bids": [4.0]}]


@pytest.mark.parametrize("cut", [1, 3, 5])
def test_window_join_on_system_time_0_0_takes_the_rows_since_the_keys_previous_left_row(session, cut):
    spec, p = system_time_join(session, (0, 0))
    rows = [(1, "a", 1.0), (0, "a", 10.0), (1, "a", 2.0), (1, "b", 9.0), (1, "a", 3.0), (0, "a", 11.0), (0, "a", 12.0),
            (0, "b", 20.0)]
    state, out = p.new_state(), []
    for batch_time, part in [(100.0, rows[:cut]), (101.0, rows[cut:])]:
        state, rows_out = p.process(state, join_input(spec, part, int(batch_time * 100)), batch_time=batch_time)
        out += [(r["sym"], r["price"], r["bids"]) for r in rows_out.to_pylist()]
    assert out == [("a", 10.0, [1.0]), ("a", 11.0, [2.0, 3.0]), ("a", 12.0, []), ("b", 20.0, [9.0])]


def test_window_join_system_time_and_a_time_column_are_exclusive(session):
    g = session.stream_graph("sys_window_refused")
    trades, quotes = g.source("trades", schema=LEFT), g.source("quotes", schema=RIGHT)
    with pytest.raises(GraphDefinitionError, match=r"use_system_time=True times rows by their arrival; leave time_column"):
        trades.window_join_engine(quotes, window="-1s:0s", metrics=["price"], matching_column="sym",
                                  time_column="time", use_system_time=True)
    with pytest.raises(GraphDefinitionError, match="time_column is required unless use_system_time=True"):
        trades.window_join_engine(quotes, window="-1s:0s", metrics=["price"], matching_column="sym")
