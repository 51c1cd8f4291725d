"""``crypto_order_book_engine`` against a naive per-update reference book written here from Binance's "How to manage
a local order book correctly" (spot, USD-M futures) and DolphinDB's cryptoOrderBookEngine page, over generated
update sequences (gaps, stale and future updates, snapshots mid-stream, crossed books, timeouts), each rule,
split into random appends, with a kill before a commit: the same books and the same error rows, once."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane import snapshots
from headwater.dataplane.local import LocalRunner
from headwater.faults import on_fault_point
from headwater.storage.buckets import task_of

SCHEMA = {"sym": "string", "incr": "bool", "t": "timestamp", "askPrice": "double[]", "askQty": "double[]",
          "bidPrice": "double[]", "bidQty": "double[]", "first_id": "long", "last_id": "long", "prev_id": "long", "note": "string"}
BASE_MAP = {"symbol": "sym", "isIncremental": "incr", "eventTime": "t"}
ID_MAPS = {"direct": {}, "general": {"prevUpdateId": "prev_id", "updateId": "last_id"},
           "binance_spot": {"firstUpdateId": "first_id", "lastUpdateId": "last_id"},
           "binance_futures": {"firstUpdateId": "first_id", "lastUpdateId": "last_id", "prevLastUpdateId": "prev_id"}}
T0 = pd.Timestamp("2025-06-01 00:00:00")
BOOK = ["askPrice", "askQty", "bidPrice", "bidQty"]


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("books"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


# -- the reference: one symbol's book, one row at a time ----------------------------------------------------
@dataclass
class RefSymbol:
    seen_at: int  # ms: the symbol's first row, then the time of its latest book
    bids: dict[float, float] = field(default_factory=dict)
    asks: dict[float, float] = field(default_factory=dict)
    update_id: int | None = None
    in_step: bool = False
    just_snapshotted: bool = False
    warned_timeout: bool = False
    recent: list[dict[str, Any]] = field(default_factory=list)  # incremental rows, oldest first


def set_levels(levels: dict[float, float], prices: list[float], qtys: list[float]) -> None:
    for price, qty in zip(prices, qtys, strict=True):
        if qty == 0:
            levels.pop(price, None)
        else:
            levels[price] = qty


def classify(rule: str, book: RefSymbol, row: dict[str, Any]) -> str:
    """'apply', 'old' or 'ahead', as each procedure decides whether an update follows the local book."""
    local = book.update_id
    if rule == "general":  # contiguous ids: an update's previous id is the book's
        if row["last_id"] <= local:
            return "old"
        return "apply" if row["prev_id"] == local else "ahead"
    if rule == "binance_spot":  # u <= id: old; U <= id + 1 <= u: next; U > id + 1: missed updates
        if row["last_id"] <= local:
            return "old"
        return "apply" if row["first_id"] <= local + 1 else "ahead"
    if book.just_snapshotted:  # futures, first event after the snapshot: U <= id <= u (u < id: old)
        if row["last_id"] < local:
            return "old"
        return "apply" if row["first_id"] <= local else "ahead"
    if row["last_id"] <= local:  # futures afterwards: pu must be the previous event's u
        return "old"
    return "apply" if row["prev_id"] == local else "ahead"


def take_update(rule: str, book: RefSymbol, row: dict[str, Any]) -> None:
    set_levels(book.bids, row["bidPrice"], row["bidQty"])
    set_levels(book.asks, row["askPrice"], row["askQty"])
    if rule != "direct":
        book.update_id = row["last_id"]
        book.just_snapshotted = False


def reference(rows: list[dict[str, Any]], rule: str, depth: Any, interval_ms: int, timeout_ms: int | None,
              cached_depth: int | None, task_of: Callable[[str], int] = lambda sym: 0,
              ) -> tuple[list[dict[str, Any]], list[tuple[str, pd.Timestamp, int]]]:
    """``task_of``: the stream task of a symbol. A task's clock is the newest event time of the rows it took in;
    each time it moves, every symbol of the task whose last book is more than the timeout behind it times out."""
    books: dict[str, RefSymbol] = {}
    clocks: dict[int, int] = {}
    out: list[dict[str, Any]] = []
    errors: list[tuple[str, pd.Timestamp, int]] = []
    for row in rows:
        levels = depth if isinstance(depth, int) else depth.get(row["sym"])
        if levels is None:
            continue
        now = int((row["t"] - T0) / pd.Timedelta(milliseconds=1))
        task = task_of(row["sym"])
        if timeout_ms is not None and now > clocks.get(task, now - 1):
            clocks[task] = now
            silent = [(other.seen_at, sym) for sym, other in books.items()
                      if task_of(sym) == task and not other.warned_timeout and now - other.seen_at > timeout_ms]
            for _, sym in sorted(silent):  # the longest silent first
                errors.append((sym, row["t"], 3))
                books[sym].warned_timeout = True
        book = books.setdefault(row["sym"], RefSymbol(seen_at=now))
        found: list[int] = []
        made = False
        if rule == "direct":
            if not row["incr"]:
                book.bids, book.asks = {}, {}
            take_update(rule, book, row)
            made = True
        elif not row["incr"]:
            if book.in_step and row["last_id"] < book.update_id:
                found.append(1)
            else:
                book.bids, book.asks = {}, {}
                set_levels(book.bids, row["bidPrice"], row["bidQty"])
                set_levels(book.asks, row["askPrice"], row["askQty"])
                book.update_id, book.in_step, book.just_snapshotted = row["last_id"], True, True
                for old in book.recent:
                    verdict = classify(rule, book, old)
                    if verdict == "ahead":
                        found.append(2)
                        book.in_step = False
                        break
                    if verdict == "apply":
                        take_update(rule, book, old)
                made = book.in_step
        else:
            kept = dict(row)
            if cached_depth is not None:
                kept.update({c: row[c][:cached_depth] for c in BOOK})
            book.recent.append(kept)
            while now - int((book.recent[0]["t"] - T0) / pd.Timedelta(milliseconds=1)) > interval_ms:
                book.recent.pop(0)
            if book.in_step:
                verdict = classify(rule, book, row)
                if verdict == "apply":
                    take_update(rule, book, row)
                    made = True
                else:
                    found.append(1 if verdict == "old" else 2)
                    book.in_step = book.in_step and verdict == "old"
        if made:
            bids = sorted(book.bids, reverse=True)[:levels]
            asks = sorted(book.asks)[:levels]
            out.append({**row, "bidPrice": bids, "bidQty": [book.bids[p] for p in bids], "askPrice": asks,
                        "askQty": [book.asks[p] for p in asks]})
            book.seen_at, book.warned_timeout = max(book.seen_at, now), False
            if book.bids and book.asks and max(book.bids) >= min(book.asks):
                found.append(4)
        errors.extend((row["sym"], row["t"], code) for code in found)
    return out, errors


# -- generated streams ---------------------------------------------------------------------------------------
PRICES = [float(p) for p in range(95, 106)]
QTYS = [0.0, 1.0, 2.0, 3.5]


def build_stream(pick: Callable[[Sequence[Any]], Any]) -> list[dict[str, Any]]:
    """Rows of two or three symbols (``pick`` chooses each option): each an exchange whose update ids run on, with
    updates lost (a gap), sent again (stale), held back and sent later (ahead, then stale), snapshots of the
    current or an older state, time jumps (timeouts, cache eviction) and overlapping bid and ask prices
    (crossed books)."""
    rows: list[dict[str, Any]] = []
    symbols = pick([("BTC", "ETH"), ("BTC", "ETH", "SOL")])
    current = dict.fromkeys(symbols, 100)
    sent: dict[str, list[dict[str, Any]]] = {s: [] for s in symbols}
    held: list[dict[str, Any]] = []
    clock = 0
    for _ in range(pick(range(5, 46))):
        sym = pick(symbols)
        clock += pick([0, 200, 700, 1500, 2500, 9000])
        action = pick(["next"] * 6 + ["lose", "resend", "hold", "release", "snapshot", "old_snapshot"])
        bids = [(pick(PRICES), pick(QTYS)) for _ in range(pick(range(5)))]
        asks = [(pick(PRICES), pick(QTYS)) for _ in range(pick(range(5)))]
        row = {"sym": sym, "t": T0 + pd.Timedelta(milliseconds=clock), "bidPrice": [p for p, _ in bids],
               "bidQty": [q for _, q in bids], "askPrice": [p for p, _ in asks], "askQty": [q for _, q in asks],
               "note": f"r{len(rows)}"}
        step = pick([1, 2, 3])
        if action in ("next", "lose", "hold"):
            row.update(incr=True, first_id=current[sym] + 1, last_id=current[sym] + step, prev_id=current[sym])
            current[sym] += step
            sent[sym].append(row)
            if action == "lose":
                continue
            if action == "hold":
                held.append(row)
                continue
        elif action == "resend" and sent[sym]:
            row = {**pick(sent[sym]), "t": row["t"], "note": row["note"]}
        elif action == "release" and held:
            row = {**held.pop(0), "t": row["t"], "note": row["note"]}
        elif action == "old_snapshot":
            row.update(incr=False, first_id=None, last_id=current[sym] - step, prev_id=None)
        else:
            row.update(incr=False, first_id=None, last_id=current[sym], prev_id=None)
        rows.append(row)
    return rows


@st.composite
def streams(draw: Any) -> list[dict[str, Any]]:
    return build_stream(lambda options: draw(st.sampled_from(list(options))))


def arrow(rows: list[dict[str, Any]]) -> pa.Table:
    schema = hw.Schema.parse(SCHEMA).to_arrow()
    return pa.table({c: [r.get(c) for r in rows] for c in SCHEMA}, schema=schema)


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return arrow(rows).to_pandas()


def graph(session: hw.Session, name: str, rule: str, *, parallel: bool, **options: Any) -> hw.StreamGraph:
    g = session.stream_graph(name)
    src = g.source(f"{name}_in", schema=SCHEMA)
    if parallel:
        src = src.parallelize("sym", 2)
    src.crypto_order_book_engine(input_col_map={**BASE_MAP, **ID_MAPS[rule]}, update_rule=rule,
                                 error_table=f"{name}_errors", **options).sync().sink(f"{name}_out")
    return g


def tasks_of(parallel: bool) -> Callable[[str], int]:
    """The stream task of each symbol in :func:`graph` (its parallelize hashes the symbol into two)."""
    return (lambda sym: int(task_of([pa.array([sym])], 2)[0])) if parallel else (lambda sym: 0)


def canonical(rows: pd.DataFrame) -> list[tuple[Any, ...]]:
    """Rows as tuples (arrays as lists), per symbol in their order: tasks interleave symbols differently."""
    out = []
    for r in rows.itertuples(index=False):
        out.append(tuple(list(v) if isinstance(v, list | np.ndarray) else (None if v is pd.NaT or
                         (isinstance(v, float) and np.isnan(v)) else v) for v in r))
    return sorted(out, key=lambda r: r[0])  # stable: each symbol's rows keep their order


_graphs = itertools.count()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(rows=streams(), rule=st.sampled_from(sorted(ID_MAPS)), depth=st.sampled_from([1, 3, {"BTC": 2, "SOL": 5}]),
       cached_depth=st.sampled_from([None, 2]), timeout=st.sampled_from([None, 2500]),
       interval=st.sampled_from([1500, 5000]), cuts=st.lists(st.integers(1, 44), max_size=4, unique=True),
       crash=st.one_of(st.none(), st.integers(0, 4)), parallel=st.booleans(), cold=st.booleans())
def test_books_and_errors_equal_the_reference_for_any_appends_and_a_kill(session, tmp_path_factory, rows, rule, depth,
                                                                         cached_depth, timeout, interval, cuts, crash,
                                                                         parallel, cold):
    """``cold``: every micro-batch starts in a fresh process (its state read from the snapshot and its records)."""
    name = f"ob{next(_graphs)}"
    g = graph(session, name, rule, parallel=parallel, depth=depth, cached_depth=cached_depth, timeout=timeout,
              caching_interval=interval)
    runner = LocalRunner(g.plan(), tmp_path_factory.mktemp(name))
    bounds = [0, *sorted(c for c in cuts if c < len(rows)), len(rows)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        runner.append(f"{name}_in", arrow(rows[a:b]))
        if crash == i:
            runner.step(crash_after_tasks=1)  # ran and saved its state, never committed: replayed next
            snapshots._LIVE.clear()  # a killed process keeps nothing in memory
        if cold:
            snapshots._LIVE.clear()
        runner.step()
    want_out, want_errors = reference(rows, rule, depth, interval, timeout, cached_depth, tasks_of(parallel))
    assert canonical(runner.read(f"{name}_out")) == canonical(frame(want_out)[list(SCHEMA)])
    got_errors = runner.read(f"{name}_errors")
    assert list(got_errors.columns) == ["symbol", "eventTime", "code", "reason"]
    assert sorted(zip(got_errors["symbol"], got_errors["eventTime"], got_errors["code"], strict=True),
                  key=lambda e: e[0]) == sorted(want_errors, key=lambda e: e[0])
    reasons = {1: "stale", 2: "gap", 3: "timeout", 4: "crossed"}
    assert [reasons[c] for c in got_errors["code"]] == got_errors["reason"].tolist()


def test_the_generated_streams_reach_every_error_case():
    """The property above is only as good as its inputs: they hit every error code under every rule with ids."""
    seen: dict[str, set[int]] = {rule: set() for rule in ID_MAPS}
    for seed in range(40):
        rng = random.Random(seed)
        rows = build_stream(lambda options: rng.choice(list(options)))  # noqa: B023 (called at once)
        for rule in ID_MAPS:
            _, errors = reference(rows, rule, 3, 5000, 4000, None)
            seen[rule] |= {code for _, _, code in errors}
    assert seen["direct"] == {3, 4}
    assert all(seen[r] == {1, 2, 3, 4} for r in ("general", "binance_spot", "binance_futures")), seen


# -- documented cases, one at a time --------------------------------------------------------------------------
def row(t_ms: int, incr: bool, last: int | None = None, *, first: int | None = None, prev: int | None = None,
        bids: dict[float, float] | None = None, asks: dict[float, float] | None = None,
        sym: str = "BTC") -> dict[str, Any]:
    bids, asks = bids or {}, asks or {}
    return {"sym": sym, "incr": incr, "t": T0 + pd.Timedelta(milliseconds=t_ms), "bidPrice": list(bids),
            "bidQty": list(bids.values()), "askPrice": list(asks), "askQty": list(asks.values()),
            "first_id": first, "last_id": last, "prev_id": prev, "note": f"t{t_ms}"}


def run(session: hw.Session, rule: str, rows: list[dict[str, Any]], **options: Any) -> tuple[list, list]:
    """(output books as (note, bids, asks) with levels as (price, qty) pairs, error rows as (note time, code))."""
    name = f"ob{next(_graphs)}"
    out = graph(session, name, rule, parallel=False, **{"depth": 5, **options}).run_local(
        {f"{name}_in": [arrow(rows[:2]), arrow(rows[2:])]})
    books = [(r.note, list(zip(r.bidPrice, r.bidQty, strict=True)), list(zip(r.askPrice, r.askQty, strict=True)))
             for r in out[f"{name}_out"].itertuples()]
    errors = [(int((r.eventTime - T0) / pd.Timedelta(milliseconds=1)), r.code)
              for r in out[f"{name}_errors"].itertuples()]
    return books, errors


def test_binance_spot_follows_binances_procedure(session):
    """Buffered updates with u <= the snapshot's lastUpdateId are dropped, the first applied has
    U <= lastUpdateId + 1 <= u; then u <= id is stale (1), U > id + 1 a gap (2), after which updates wait."""
    books, errors = run(session, "binance_spot", [
        row(0, True, 103, first=101, bids={100.0: 1.0}),
        row(100, True, 105, first=104, bids={99.0: 2.0}, asks={102.0: 3.0}),
        row(200, False, 103, bids={100.0: 5.0}, asks={101.0: 1.0}),
        row(300, True, 106, first=106, asks={101.0: 0.0}),
        row(400, True, 106, first=105, bids={1.0: 1.0}),
        row(500, True, 110, first=109),
        row(600, True, 111, first=111),
    ])
    assert books == [("t200", [(100.0, 5.0), (99.0, 2.0)], [(101.0, 1.0), (102.0, 3.0)]),
                     ("t300", [(100.0, 5.0), (99.0, 2.0)], [(102.0, 3.0)])]
    assert errors == [(400, 1), (500, 2)]


def test_binance_futures_follows_binances_procedure(session):
    """After the snapshot, u < lastUpdateId is stale, the first applied has U <= lastUpdateId <= u, each later
    one pu == the previous u; otherwise a gap."""
    books, errors = run(session, "binance_futures", [
        row(0, False, 200, bids={100.0: 1.0}, asks={101.0: 1.0}),
        row(100, True, 199, first=195, prev=194, bids={100.0: 9.0}),
        row(200, True, 202, first=198, prev=197, bids={99.0: 2.0}),
        row(300, True, 204, first=203, prev=202, asks={101.0: 4.0}),
        row(400, True, 207, first=206, prev=205, asks={101.0: 0.0}),
    ])
    assert [b[0] for b in books] == ["t0", "t200", "t300"]
    assert books[-1][1:] == ([(100.0, 1.0), (99.0, 2.0)], [(101.0, 4.0)])
    assert errors == [(100, 1), (400, 2)]


@pytest.mark.parametrize(("second_ms", "replayed"), [(1000, True), (1001, False)])
def test_a_snapshot_replays_the_updates_of_the_last_caching_interval(session, second_ms, replayed):
    """general: updates are cached while within caching_interval of the newest; an older snapshot catches up
    through them, or finds a gap where the interval dropped one."""
    books, errors = run(session, "general", [
        row(0, True, 11, prev=10, bids={99.0: 1.0}),
        row(second_ms, True, 12, prev=11, bids={98.0: 1.0}),
        row(second_ms, False, 10, bids={100.0: 1.0}),
    ], caching_interval=1000)
    if replayed:
        assert books == [(f"t{second_ms}", [(100.0, 1.0), (99.0, 1.0), (98.0, 1.0)], [])]
        assert errors == []
    else:
        assert books == []
        assert errors == [(second_ms, 2)]


def test_cached_updates_keep_cached_depth_levels(session):
    books, _ = run(session, "general", [
        row(0, True, 11, prev=10, bids={99.0: 1.0, 98.0: 1.0}),
        row(10, False, 10, bids={100.0: 1.0}),
    ], cached_depth=1)
    assert books == [("t10", [(100.0, 1.0), (99.0, 1.0)], [])]


def test_timeout_and_crossed_book_in_event_time(session):
    """direct: a row more than ``timeout`` of event time after the symbol's last book reports 3 (once, until a
    book is made), a best bid at or above the best ask 4; both books are still output."""
    books, errors = run(session, "direct", [
        row(0, False, bids={100.0: 1.0}, asks={101.0: 1.0}),
        row(1000, True, bids={100.0: 2.0}),
        row(2001, True, bids={101.0: 1.0}),
        row(2002, True, sym="ETH", bids={5.0: 1.0}, asks={4.0: 1.0}),
    ], timeout=1000)
    assert [b[0] for b in books] == ["t0", "t1000", "t2001", "t2002"]
    assert errors == [(2001, 3), (2001, 4), (2002, 4)]  # ETH's first row: its clock starts there


def test_a_symbol_whose_rows_stop_times_out_when_the_streams_time_passes_its_deadline(session):
    """ETH goes silent: BTC's rows move the stream's time past ETH's last book plus the timeout, and ETH is
    reported then, once; its next row makes a book and lets it time out again (BTC's own silence included)."""
    name = f"ob{next(_graphs)}"
    rows = [row(0, False, sym="ETH", bids={5.0: 1.0}), row(500, False, bids={100.0: 1.0}),
            row(1000, True, bids={100.0: 2.0}), row(1600, True, bids={100.0: 3.0}), row(2500, True),
            row(3000, True, sym="ETH", bids={5.0: 2.0}), row(4200, True, bids={99.0: 1.0})]
    out = graph(session, name, "direct", parallel=False, depth=5, timeout=1000).run_local(
        {f"{name}_in": [arrow(rows[:3]), arrow(rows[3:5]), arrow(rows[5:])]})  # the clock crosses micro-batches
    errors = [(r.symbol, int((r.eventTime - T0) / pd.Timedelta(milliseconds=1)), r.reason)
              for r in out[f"{name}_errors"].itertuples()]
    assert errors == [("ETH", 1600, "timeout"), ("BTC", 4200, "timeout"), ("ETH", 4200, "timeout")]
    assert len(out[f"{name}_out"]) == len(rows)  # every row still makes its book


def test_a_symbol_depth_dict_ignores_unlisted_symbols(session):
    books, errors = run(session, "direct", [
        row(0, False, bids={101.0: 1.0}, asks={100.0: 1.0}, sym="ETH"),
        row(1, False, bids={1.0: 1.0, 2.0: 1.0}, asks={3.0: 1.0}),
    ], depth={"BTC": 1})
    assert books == [("t1", [(2.0, 1.0)], [(3.0, 1.0)])]
    assert errors == []


@pytest.mark.parametrize(("options", "message"), [
    ({"depth": 0}, "depth must be an int in 1..5000"),
    ({"depth": 5001}, "depth must be an int in 1..5000"),
    ({"depth": {"BTC": 0}}, r"depth\['BTC'\] must be an int"),
    ({"depth": {}}, "needs 1..100000 symbols"),
    ({"cached_depth": 10**6}, "cached_depth must be an int"),
    ({"update_rule": "binance"}, "expected one of direct, general, binance_spot, binance_futures"),
    ({"input_col_map": {"symbol": "nope"}}, "field 'symbol' .mapped to 'nope'. is no input column"),
    ({"input_col_map": {"price": "note"}}, "'price' is not a field of the engine"),
    ({"input_col_map": {"updateId": "last_id"}}, "maps 'updateId', which update_rule 'direct' does not read"),
    ({"input_col_map": {"symbol": "note", "eventTime": "t", "isIncremental": "incr"}}, None),
    ({"input_col_map": {"symbol": "sym", "eventTime": "t", "isIncremental": "incr", "askQty": "askPrice"}},
     "mapped to more than one field"),
    ({"input_col_map": {"symbol": "sym", "eventTime": "last_id", "isIncremental": "incr"}},
     "field 'eventTime' is column 'last_id' of type long; expected timestamp"),
    ({"caching_interval": 0}, "caching_interval: duration must be positive"),
    ({"caching_interval": 86_400_001}, "at most 24h"),
    ({"timeout": "2d"}, "at most 24h"),
    ({"timeout": -1}, None),
    ({"error_table": "book_in"}, "error_table 'book_in' is already a table of this graph"),
])
def test_definitions_are_checked_on_the_users_line(session, options, message):
    g = session.stream_graph(f"def{next(_graphs)}")
    src = g.source("book_in", schema=SCHEMA)
    arguments = {"depth": 5, "input_col_map": BASE_MAP, **options}
    if message is None:
        src.crypto_order_book_engine(**arguments)
        return
    with pytest.raises(hw.HeadwaterError, match=message):
        src.crypto_order_book_engine(**arguments)


def test_a_row_past_the_level_limit_is_skipped_and_counted_and_the_graph_goes_on(session):
    """The row stays in its append-only input: failing its micro-batch would stop the graph for good."""
    from headwater.engines.order_book import MAX_LEVELS

    wide = row(0, False, bids={float(p): 1.0 for p in range(MAX_LEVELS + 1)})
    books, errors = run(session, "direct", [wide, row(100, False, bids={99.0: 2.0}, asks={101.0: 1.0})])
    assert books == [("t100", [(99.0, 2.0)], [(101.0, 1.0)])] and errors == []
    g = graph(session, f"wide{next(_graphs)}", "direct", parallel=False, depth=5)
    spec = next(n.spec for n in g.logical_graph.nodes.values() if n.type == "CRYPTO_ORDER_BOOK_ENGINE")
    processor = spec.processor()
    state, out, _ = processor.process_routed(processor.new_state(), arrow([wide]))
    assert out.num_rows == 0 and processor.stats(state)["late_rows"] == 1


def test_the_engine_round_trips_through_the_plan_document(session):
    g = graph(session, f"doc{next(_graphs)}", "binance_futures", parallel=True, depth={"BTC": 2, "ETH": 3},
              cached_depth=4, timeout="3s", caching_interval=2000)
    again = hw.StreamGraph.from_json(session, g.to_json())
    assert again.to_json() == g.to_json()
    props = next(n for n in g.logical_graph.nodes.values() if n.type == "CRYPTO_ORDER_BOOK_ENGINE").properties()
    assert props["depth"] == {"BTC": 2, "ETH": 3}
    assert (props["updateRule"], props["cachingInterval"], props["timeout"], props["cachedDepth"]) == \
        ("binance_futures", 2000, 3000, 4)
    assert props["inputColMap"]["prevLastUpdateId"] == "prev_id"
    assert "errors" in g.explain()


def test_a_kill_between_saving_the_state_and_pruning_loses_nothing(session, tmp_path):
    """The process dies right after a micro-batch's state record is written (before its commit): the restarted
    run replays the batch from the files and gives the reference's books and error rows, once."""
    rng = random.Random(3)
    rows = build_stream(lambda options: rng.choice(list(options)))
    name = f"ob{next(_graphs)}"
    g = graph(session, name, "binance_spot", parallel=True, depth=3, timeout=2500, caching_interval=5000)

    def killed() -> None:
        raise SystemExit("killed")

    runner = LocalRunner(g.plan(), tmp_path)
    for i, part in enumerate((rows[:10], rows[10:20], rows[20:])):
        runner.append(f"{name}_in", arrow(part))
        if i == 1:
            with on_fault_point("snapshot.before_prune", killed), pytest.raises(SystemExit):
                runner.step()
            snapshots._LIVE.clear()
        runner.step()
    want_out, want_errors = reference(rows, "binance_spot", 3, 5000, 2500, None)
    assert canonical(runner.read(f"{name}_out")) == canonical(frame(want_out)[list(SCHEMA)])
    got = runner.read(f"{name}_errors")
    assert sorted(zip(got["symbol"], got["eventTime"], got["code"], strict=True)) == sorted(want_errors)
