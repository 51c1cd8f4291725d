"""The crypto order book engine: per-symbol books from full snapshots plus incremental updates (Orca's
``cryptoOrderBookEngine``, reference C.19).

Each input row is a snapshot (``isIncremental`` false: the book is replaced) or an incremental update (each
price level is set to its quantity, a quantity of 0 removes it). ``update_rule`` says how update ids keep a
book in step with the exchange:

- ``direct``: no ids; snapshots replace, updates apply (to an empty book before the first snapshot).
- ``general``: ``prevUpdateId``/``updateId``; an update applies when its ``prevUpdateId`` is the book's id.
- ``binance_spot``: ``firstUpdateId`` U / ``lastUpdateId`` u (Binance's spot procedure): an update with
  ``u <= id`` is stale, one with ``U <= id + 1 <= u`` applies, one with ``U > id + 1`` leaves a gap.
- ``binance_futures``: U / u / ``prevLastUpdateId`` pu (Binance's USD-M futures procedure): the first
  update after a snapshot applies when ``U <= id <= u`` (``u < id``: stale), each later one when
  ``pu == id`` (``u <= id``: stale; otherwise a gap).

A snapshot's id is its ``updateId`` (general) or ``lastUpdateId`` (Binance). Every symbol keeps the
incremental updates of the last ``caching_interval`` of event time (its cache); a snapshot replaces the book
(unless it is older than a book in step: stale) and replays the cache through the rule, silently skipping
what the snapshot already holds, so a snapshot fetched while updates stream in catches up. A gap puts the
book out of step: later updates are only cached until the next snapshot.

Rows that make a book give one output row each: the input row, with the four book columns replaced by the
book's best ``depth`` levels (asks by rising price, bids by falling price). The error cases (1 stale, 2 gap,
3 timeout, 4 crossed book) are rows of the ``error_table`` (:data:`ERROR_SCHEMA`), committed with the
output. Time is the stream's event time, never the wall clock, so a replay gives the same rows: a symbol times out
when its stream task's newest event time passes its last book by more than ``timeout`` (its own rows or others').

>>> import pandas as pd, headwater as hw, tempfile
>>> s = hw.connect(tempfile.mkdtemp(), start_spark=False)
>>> s.use_catalog("doc")
>>> g = s.stream_graph("books")
>>> schema = {"sym": "string", "incr": "bool", "time": "timestamp", "askPrice": "double[]", "askQty": "double[]",
...           "bidPrice": "double[]", "bidQty": "double[]"}
>>> _ = (g.source("depth", schema=schema)
...       .crypto_order_book_engine(input_col_map={"symbol": "sym", "isIncremental": "incr", "eventTime": "time"},
...                                 depth=2).sink("book"))
>>> rows = pd.DataFrame({"sym": ["BTC", "BTC"], "incr": [False, True],
...                      "time": pd.to_datetime(["2025-01-01 00:00:00", "2025-01-01 00:00:01"]),
...                      "askPrice": [[101.0, 102.0, 103.0], [101.0]], "askQty": [[1.0, 2.0, 3.0], [0.0]],
...                      "bidPrice": [[100.0, 99.0], [100.5]], "bidQty": [[1.0, 2.0], [4.0]]})
>>> book = g.run_local({"depth": rows})["book"]
>>> [p.tolist() for p in book["askPrice"]], [p.tolist() for p in book["bidPrice"]]
([[101.0, 102.0], [102.0, 103.0]], [[100.0, 99.0], [100.5, 100.0]])
>>> s.close()
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwater.durations import format_duration, parse_duration, to_micros
from headwater.engines.arguments import Argument, arg
from headwater.engines.base import SEQ, EngineKind, KeyedState, KeyTable, OneInputEngine, Processor
from headwater.errors import GraphDefinitionError, SchemaError, clip
from headwater.kernels.base.checks import snake_case
from headwater.types import Schema

MAX_DEPTH = 5_000  # of depth and cached_depth: Binance's deepest REST snapshot
MAX_LEVELS = 5_000  # price levels in one array of one input row
MAX_BOOK_LEVELS = 20_000  # levels a side of one book; beyond, the farthest from the best price are dropped
MAX_CACHED_UPDATES = 10_000  # incremental updates cached per symbol; beyond, the oldest are dropped
MAX_SYMBOLS = 100_000  # entries of a per-symbol depth or cached_depth dict
MAX_INTERVAL = timedelta(days=1)  # of caching_interval and timeout

RULES = ("direct", "general", "binance_spot", "binance_futures")
BASE_FIELDS = ("symbol", "isIncremental", "eventTime", "askPrice", "askQty", "bidPrice", "bidQty")
RULE_FIELDS: dict[str, tuple[str, ...]] = {
    "direct": (),
    "general": ("prevUpdateId", "updateId"),
    "binance_spot": ("firstUpdateId", "lastUpdateId"),
    "binance_futures": ("firstUpdateId", "lastUpdateId", "prevLastUpdateId"),
}
ALL_FIELDS = (*BASE_FIELDS, "prevUpdateId", "updateId", "firstUpdateId", "lastUpdateId", "prevLastUpdateId")
BOOK_FIELDS = ("askPrice", "askQty", "bidPrice", "bidQty")
FIELD_TYPES: dict[str, tuple[str, ...]] = {
    "symbol": ("string",), "isIncremental": ("bool",), "eventTime": ("timestamp",),
    **{f: ("double[]",) for f in BOOK_FIELDS},
    **{f: ("long", "int") for f in ALL_FIELDS[len(BASE_FIELDS):]},
}

ERROR_SCHEMA = Schema((("symbol", "string"), ("eventTime", "timestamp"), ("code", "int"), ("reason", "string")))
"""The error table's columns: the symbol, the event time of the row that raised the error, its code and reason."""
STALE, GAP, TIMEOUT, CROSSED = 1, 2, 3, 4
REASONS = {STALE: "stale", GAP: "gap", TIMEOUT: "timeout", CROSSED: "crossed"}


_FIELD_NAMES = {**{f.lower(): f for f in ALL_FIELDS}, **{snake_case(f): f for f in ALL_FIELDS}}


def _int_value(value: Any, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 1 <= value <= MAX_DEPTH:
        raise GraphDefinitionError(f"{where}: {what} must be an int in 1..{MAX_DEPTH}, got {clip(value)}")
    return int(value)


def _depths(value: Any, where: str, what: str) -> int | tuple[tuple[str, int], ...]:
    """An int, or a dict (or its pairs) of symbol to int, as the spec keeps it: the pairs sorted."""
    if isinstance(value, Mapping):
        value = tuple(value.items())
    if isinstance(value, tuple | list) and not isinstance(value, str):
        if not 1 <= len(value) <= MAX_SYMBOLS:
            raise GraphDefinitionError(f"{where}: {what} as a dict needs 1..{MAX_SYMBOLS} symbols, got {len(value)}")
        pairs = []
        for pair in value:
            if not isinstance(pair, tuple | list) or len(pair) != 2 or not isinstance(pair[0], str):
                raise GraphDefinitionError(f"{where}: {what} as a dict maps symbols (strings) to ints, got "
                                           f"{clip(pair)}; e.g. {{'BTCUSDT': 10, 'ETHUSDT': 5}}")
            pairs.append((pair[0], _int_value(pair[1], where, f"{what}[{pair[0]!r}]")))
        if len({k for k, _ in pairs}) != len(pairs):
            raise GraphDefinitionError(f"{where}: {what} names a symbol twice")
        return tuple(sorted(pairs))
    return _int_value(value, where, what)


def depth_argument(a: Argument) -> int | tuple[tuple[str, int], ...]:
    return _depths(a.value, a.engine, a.name)


def cached_depth_argument(a: Argument) -> int | tuple[tuple[str, int], ...] | None:
    return None if a.value is None else _depths(a.value, a.engine, a.name)


def column_map(a: Argument) -> tuple[tuple[str, str], ...]:
    """``input_col_map`` (engine field → input column) as pairs, field names in Orca's spelling."""
    if a.value is None:
        return ()
    if not isinstance(a.value, Mapping):
        raise GraphDefinitionError(f"{a.where}: expected a dict of engine field to input column, got "
                                   f"{clip(a.value)}; e.g. {{'symbol': 'sym', 'eventTime': 'time'}}")
    if len(a.value) > len(ALL_FIELDS):
        raise GraphDefinitionError(f"{a.where}: {len(a.value)} entries; the engine has {len(ALL_FIELDS)} fields")
    pairs = []
    for key, column in a.value.items():
        name = _FIELD_NAMES.get(key.lower()) if isinstance(key, str) else None
        if name is None:
            raise GraphDefinitionError(f"{a.where}: {clip(key)} is not a field of the engine; fields: "
                                       f"{', '.join(ALL_FIELDS)}")
        if not isinstance(column, str):
            raise GraphDefinitionError(f"{a.where}[{name!r}] must be an input column name, got {clip(column)}")
        pairs.append((name, column))
    if len({k for k, _ in pairs}) != len(pairs):
        raise GraphDefinitionError(f"{a.where}: a field is mapped twice (spelt two ways)")
    return tuple(pairs)


def update_rule_argument(a: Argument) -> str:
    """``"direct"``, ``"general"``, ``"binance_spot"``, ``"binance_futures"`` (Orca's ``"Binance-spot"`` too)."""
    rule = a.value.strip().lower().replace("-", "_") if isinstance(a.value, str) else None
    if rule not in RULES:
        raise GraphDefinitionError(f"{a.where}: expected one of {', '.join(RULES)}, got {clip(a.value)}")
    return rule


def _milliseconds(a: Argument, *, off: bool) -> timedelta | None:
    """Orca's int milliseconds, or a duration (``"5s"``); with ``off``, None or -1 turns it off."""
    value = a.value
    if off and (value is None or (isinstance(value, int) and not isinstance(value, bool) and value == -1)):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if value > to_micros(MAX_INTERVAL) // 1000:
            raise GraphDefinitionError(f"{a.where}: at most {format_duration(MAX_INTERVAL)} "
                                       f"({to_micros(MAX_INTERVAL) // 1000} ms), got {clip(value)}")
        value = timedelta(milliseconds=value) if value > 0 else f"{value}ms"
    delta = parse_duration(value, where=a.where)
    if delta > MAX_INTERVAL:
        raise GraphDefinitionError(f"{a.where}: at most {format_duration(MAX_INTERVAL)}, got {clip(a.value)}")
    return delta


def caching_interval_argument(a: Argument) -> timedelta | None:
    return _milliseconds(a, off=False)


def timeout_argument(a: Argument) -> timedelta | None:
    return _milliseconds(a, off=True)


@dataclass(frozen=True)
class CryptoOrderBookEngine(OneInputEngine):
    """Parameters of ``crypto_order_book_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.CRYPTO_ORDER_BOOK
    side_table_argument: ClassVar[str] = "error_table"
    side_table_role: ClassVar[str] = "errors"
    depth: int | tuple[tuple[str, int], ...] = field(metadata=arg(depth_argument))
    input_col_map: tuple[tuple[str, str], ...] = field(default=(), metadata=arg(column_map))
    update_rule: str = field(default="direct", metadata=arg(update_rule_argument))
    error_table: str | None = None  # the FQN of the table the error rows go to
    caching_interval: timedelta = field(default=timedelta(seconds=5), metadata=arg(caching_interval_argument))
    timeout: timedelta | None = field(default=None, metadata=arg(timeout_argument))
    cached_depth: int | tuple[tuple[str, int], ...] | None = field(default=None,
                                                                   metadata=arg(cached_depth_argument))

    def validate(self) -> None:
        where = self.where
        if self.update_rule not in RULES:
            raise GraphDefinitionError(f"{where}: update_rule must be one of {', '.join(RULES)}, "
                                       f"got {clip(self.update_rule)}")
        _depths(self.depth, where, "depth")
        if self.cached_depth is not None:
            _depths(self.cached_depth, where, "cached_depth")
        for what, value in (("caching_interval", self.caching_interval), ("timeout", self.timeout)):
            if value is not None and (not isinstance(value, timedelta) or not timedelta(0) < value <= MAX_INTERVAL):
                raise GraphDefinitionError(f"{where}: {what} must be a duration in (0, "
                                           f"{format_duration(MAX_INTERVAL)}], got {clip(value)}")
        needed = (*BASE_FIELDS, *RULE_FIELDS[self.update_rule])
        given = dict(self.input_col_map)
        extra = [f for f in given if f not in needed]
        if extra:
            raise GraphDefinitionError(f"{where}: input_col_map maps {extra[0]!r}, which update_rule "
                                       f"{self.update_rule!r} does not read; its fields: {', '.join(needed)}")
        schema, resolved = self.input_schema, []
        for name in needed:
            column = given.get(name, name)
            real = schema.lookup(column)
            if real is None and name not in given:
                real = schema.lookup(snake_case(name))
            if real is None:
                raise GraphDefinitionError(
                    f"{where}: field {name!r} ({'mapped to ' + repr(column) if name in given else 'not in input_col_map'})"
                    f" is no input column; map it, e.g. input_col_map={{{name!r}: 'my_column'}} (input columns: "
                    f"{', '.join(schema.names)})")
            if schema[real] not in FIELD_TYPES[name]:
                raise SchemaError(f"{where}: field {name!r} is column {real!r} of type {schema[real]}; expected "
                                  f"{' or '.join(FIELD_TYPES[name])}")
            resolved.append((name, real))
        columns = [c for _, c in resolved]
        twice = sorted({c for c in columns if columns.count(c) > 1})
        if twice:
            raise GraphDefinitionError(f"{where}: column(s) {twice} are mapped to more than one field")
        object.__setattr__(self, "input_col_map", tuple(resolved))

    def output_schema(self) -> Schema:
        return self.input_schema

    def side_table_schema(self, input_schema: Schema) -> Schema:
        return ERROR_SCHEMA

    def properties(self) -> dict[str, Any]:
        def plain(value: Any) -> Any:
            return dict(value) if isinstance(value, tuple) else value

        return {"inputColMap": dict(self.input_col_map), "depth": plain(self.depth), "updateRule": self.update_rule,
                "cachingInterval": to_micros(self.caching_interval) // 1000,
                "timeout": -1 if self.timeout is None else to_micros(self.timeout) // 1000,
                "cachedDepth": plain(self.cached_depth), "errorTable": self.error_table}


class _Book:
    """One symbol's state: its book, the book's id, whether it is in step, its cache of recent updates."""

    __slots__ = ("asks", "bids", "book_time", "cache", "fresh", "id", "synced", "timed_out")

    def __init__(self, first_time: int) -> None:
        self.bids: dict[float, float] = {}
        self.asks: dict[float, float] = {}
        self.id: int | None = None
        self.synced = False  # the book follows the exchange's (a snapshot, then contiguous updates)
        self.fresh = False  # binance_futures: no update applied since the snapshot
        self.book_time = first_time  # event time (us) of the last book made (or of the symbol's first row)
        self.timed_out = False  # a timeout was reported since that book
        # recent incremental updates: (time, first id, last id, prev id, bid prices, qtys, ask prices, qtys)
        self.cache: list[tuple[Any, ...]] = []

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, s) for s in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state, strict=True):
            setattr(self, name, value)


def _apply(side: dict[float, float], prices: Sequence[Any], qtys: Sequence[Any]) -> None:
    for p, q in zip(prices, qtys, strict=True):
        if p is None or q is None or p != p or q != q:  # NULL or NaN
            continue
        if q <= 0:
            side.pop(p, None)
        else:
            side[p] = q


def _best(side: dict[float, float], depth: int, *, bids: bool) -> list[float]:
    """The ``depth`` best prices of a side, best first (a sort in C beats a heap in Python on small books)."""
    if len(side) <= 4 * depth + 2_000:
        return sorted(side, reverse=bids)[:depth]
    return (heapq.nlargest if bids else heapq.nsmallest)(depth, side)


def _trim(side: dict[float, float], *, bids: bool) -> None:
    """Keep the :data:`MAX_BOOK_LEVELS` levels nearest the best price."""
    if len(side) > MAX_BOOK_LEVELS:
        keep = (heapq.nlargest if bids else heapq.nsmallest)(MAX_BOOK_LEVELS, side)
        kept = {p: side[p] for p in keep}
        side.clear()
        side.update(kept)


class _Deadlines:
    """The books of one stream task that can still time out, soonest deadline first (a heap rebuilt per micro-batch
    from the books: derived, never saved). A book's deadline is its ``book_time`` plus the timeout; a book made
    since it was queued is queued again at its new deadline when the old one comes up."""

    def __init__(self, books: np.ndarray, timeout: int) -> None:
        self.books, self.timeout = books, timeout
        self.heap = [(book.book_time + timeout, slot) for slot, book in enumerate(books.tolist())
                     if book is not None and not book.timed_out]
        heapq.heapify(self.heap)
        self.queued = {slot for _, slot in self.heap}

    def watch(self, slot: int) -> None:
        """The book at ``slot`` is new or was made: it can time out again."""
        if slot not in self.queued:
            self.queued.add(slot)
            heapq.heappush(self.heap, (self.books[slot].book_time + self.timeout, slot))

    def expire(self, now: int) -> list[int]:
        """The slots of the books whose deadline the stream time ``now`` passed, marked timed out."""
        expired, heap = [], self.heap
        while heap and heap[0][0] < now:
            deadline, slot = heapq.heappop(heap)
            book = self.books[slot]
            if not book.timed_out and book.book_time + self.timeout > deadline:  # made since: a later deadline
                heapq.heappush(heap, (book.book_time + self.timeout, slot))
                continue
            self.queued.discard(slot)
            if not book.timed_out:
                book.timed_out = True
                expired.append(slot)
        return expired


class CryptoOrderBookProcessor(Processor, runs=CryptoOrderBookEngine):
    def __init__(self, spec: CryptoOrderBookEngine) -> None:
        self.spec = spec
        self.columns = dict(spec.input_col_map)
        self.rule = spec.update_rule
        self.interval = to_micros(spec.caching_interval)
        self.timeout = None if spec.timeout is None else to_micros(spec.timeout)
        cached = spec.cached_depth
        self.cached_depths = cached if isinstance(cached, int) or cached is None else dict(cached)
        self.out_arrow = spec.input_schema.to_arrow().append(pa.field(SEQ, pa.int64()))
        depths = spec.depth
        self.depth_of = (lambda symbol: depths) if isinstance(depths, int) else dict(depths).get

    def new_state(self) -> KeyedState:
        return KeyedState(KeyTable(), {"book": np.empty(0, dtype=object)}, {"dropped": 0})

    def stats(self, state: Any) -> dict[str, int]:
        """``keys``: symbols with a book; ``late_rows``: updates dropped as stale or out of order, and rows skipped
        (a NULL in a field the engine reads, or prices without their quantities)."""
        return {"keys": len(state.keys), "late_rows": int(state.rest.get("dropped", 0))}

    def process(self, state: KeyedState, table: pa.Table, *, batch_time: float = 0.0) -> tuple[KeyedState, pa.Table]:
        state, out, _ = self.process_routed(state, table, batch_time=batch_time)
        return state, out

    def _ids(self, table: pa.Table) -> tuple[list[Any], list[Any], list[Any]]:
        """Each row's (first, last, prev) update ids as the rule names them (None where it has none)."""
        n = table.num_rows
        none = [None] * n

        def ids(name: str) -> list[Any]:
            return table[self.columns[name]].to_pylist() if name in self.columns else none

        if self.rule == "general":
            return none, ids("updateId"), ids("prevUpdateId")
        return ids("firstUpdateId"), ids("lastUpdateId"), ids("prevLastUpdateId")

    def process_routed(self, state: KeyedState, table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[KeyedState, pa.Table, pa.Table | None]:
        n = table.num_rows
        if n == 0:
            return state, self.out_arrow.empty_table(), None
        c = self.columns
        symbols = table[c["symbol"]].to_pylist()
        incremental = table[c["isIncremental"]].to_pylist()
        times = pc.cast(table[c["eventTime"]], pa.int64()).to_pylist()
        books = {f: table[c[f]].to_pylist() for f in BOOK_FIELDS}
        first, last, prev = self._ids(table)
        # the door's limit: a row of more levels is skipped and counted, as a malformed row is (failing the batch
        # would stop the graph for good: the row stays in its append-only input)
        too_wide = np.zeros(n, dtype=bool)
        for f in BOOK_FIELDS:
            too_wide |= pc.fill_null(pc.list_value_length(table[c[f]]), 0).to_numpy() > MAX_LEVELS
        keep, depths = [], []
        dropped = 0
        for i in range(n):
            depth = self.depth_of(symbols[i]) if symbols[i] is not None else None
            if depth is None:
                continue  # an unlisted symbol (or NULL): no book, no output, no error
            needs_ids = self.rule != "direct" and (last[i] is None or (incremental[i] and (
                prev[i] is None if self.rule == "general" else
                first[i] is None or (self.rule == "binance_futures" and prev[i] is None))))
            unpaired = any(len(books[p][i] or ()) != len(books[q][i] or ())
                           for p, q in (("bidPrice", "bidQty"), ("askPrice", "askQty")))
            if incremental[i] is None or times[i] is None or needs_ids or unpaired or too_wide[i]:
                dropped += 1
                continue
            keep.append(i)
            depths.append(depth)
        if not keep:
            state.rest = {**state.rest, "dropped": int(state.rest.get("dropped", 0)) + dropped}
            return state, self.out_arrow.empty_table(), None
        slots = state.keys.slots([np.array([symbols[i] for i in keep], dtype=object)])
        column = state.columns["book"]
        if len(column) < len(state.keys):
            grown = np.empty(len(state.keys), dtype=object)
            grown[: len(column)] = column
            state.columns["book"] = column = grown
        out_rows: list[int] = []
        out_books: dict[str, list[list[float]]] = {f: [] for f in BOOK_FIELDS}
        errors: list[tuple[str, int, int]] = []
        # timeouts: the task's stream time is the newest event time it took in; passing a book's deadline (its
        # book's time plus the timeout) reports the book's symbol, whether its own row or another's moved it
        deadlines = _Deadlines(column, self.timeout) if self.timeout is not None else None
        clock = state.rest.get("clock")
        timed_out: list[int] = []
        for i, slot, depth in zip(keep, slots.tolist(), depths, strict=True):
            symbol, t = symbols[i], times[i]
            if deadlines is not None and (clock is None or t > clock):
                clock = t
                for late in deadlines.expire(t):
                    errors.append((state.keys.keys[late], t, TIMEOUT))
                    timed_out.append(late)
            book = column[slot]
            if book is None:
                book = column[slot] = _Book(t)
                if deadlines is not None:
                    deadlines.watch(slot)
            row = (t, first[i], last[i], prev[i], books["bidPrice"][i] or [], books["bidQty"][i] or [],
                   books["askPrice"][i] or [], books["askQty"][i] or [])
            codes: list[int] = []
            made = self._snapshot(book, row, codes) if not incremental[i] else \
                self._update(book, row, codes, self._cached_depth(symbol))
            if made:
                out_rows.append(i)
                bids, asks = _best(book.bids, depth, bids=True), _best(book.asks, depth, bids=False)
                out_books["bidPrice"].append(bids)
                out_books["bidQty"].append([book.bids[p] for p in bids])
                out_books["askPrice"].append(asks)
                out_books["askQty"].append([book.asks[p] for p in asks])
                book.book_time, book.timed_out = max(book.book_time, t), False
                if deadlines is not None:
                    deadlines.watch(slot)
                if bids and asks and bids[0] >= asks[0]:
                    codes.append(CROSSED)
            dropped += sum(code in (STALE, GAP) for code in codes)
            errors.extend((symbol, t, code) for code in codes)
        state.touch(slots)
        if timed_out:
            state.touch(np.array(timed_out, dtype=np.int64))
        state.rest = {**state.rest, "dropped": int(state.rest.get("dropped", 0)) + dropped}
        if clock is not None:
            state.rest["clock"] = clock
        out = table.take(pa.array(out_rows, pa.int64())).select(list(self.out_arrow.names))
        for f in BOOK_FIELDS:
            index = out.schema.get_field_index(c[f])
            out = out.set_column(index, out.schema.field(index), pa.array(out_books[f], pa.list_(pa.float64())))
        return state, out.cast(self.out_arrow), self._error_rows(errors)

    @staticmethod
    def _error_rows(errors: list[tuple[str, int, int]]) -> pa.Table | None:
        if not errors:
            return None
        symbol, t, code = zip(*errors, strict=True)
        return pa.table([pa.array(symbol, pa.string()), pa.array(t, pa.int64()).cast(pa.timestamp("us")),
                         pa.array(code, pa.int32()), pa.array([REASONS[c] for c in code], pa.string())],
                        schema=ERROR_SCHEMA.to_arrow())

    # -- the rules ------------------------------------------------------------------------------------------
    def _snapshot(self, book: _Book, row: tuple[Any, ...], codes: list[int]) -> bool:
        """A full snapshot: replace the book (rules with ids: unless it is older than a book in step), then replay
        the cache. Whether it made a book (one in step)."""
        if self.rule != "direct":
            if book.synced and book.id is not None and row[2] < book.id:
                codes.append(STALE)
                return False
            book.id, book.synced, book.fresh = row[2], True, True
        book.bids, book.asks = {}, {}
        _apply(book.bids, row[4], row[5])
        _apply(book.asks, row[6], row[7])
        _trim(book.bids, bids=True)
        _trim(book.asks, bids=False)
        for cached in book.cache:
            verdict = self._verdict(book, cached)
            if verdict == GAP:
                codes.append(GAP)
                book.synced = False
                break
            if verdict != STALE:  # what the snapshot holds already is skipped, not reported
                self._apply_update(book, cached)
        return book.synced or self.rule == "direct"

    def _cached_depth(self, symbol: str) -> int | None:
        """The levels of an update's arrays that its symbol's cache keeps (None: all)."""
        depths = self.cached_depths
        return depths.get(symbol) if isinstance(depths, dict) else depths

    def _update(self, book: _Book, row: tuple[Any, ...], codes: list[int], cached_depth: int | None) -> bool:
        """An incremental update: cached, then applied if the book is in step and the rule lets it. Whether it
        made a book."""
        if self.rule == "direct":
            self._apply_update(book, row)
            return True
        self._cache(book, row, cached_depth)
        if not book.synced:
            return False  # waiting for a snapshot
        verdict = self._verdict(book, row)
        if verdict:
            codes.append(verdict)
            if verdict == GAP:
                book.synced = False
            return False
        self._apply_update(book, row)
        return True

    def _verdict(self, book: _Book, row: tuple[Any, ...]) -> int:
        """0 when ``row`` follows the book, :data:`STALE` when the book holds it already, :data:`GAP` otherwise."""
        first, last, prev = row[1], row[2], row[3]
        current = book.id
        assert current is not None
        if self.rule == "binance_futures" and book.fresh:
            return STALE if last < current else 0 if first <= current else GAP
        if last <= current:
            return STALE
        if self.rule == "binance_spot":
            return 0 if first <= current + 1 else GAP
        return 0 if prev == current else GAP

    def _apply_update(self, book: _Book, row: tuple[Any, ...]) -> None:
        _apply(book.bids, row[4], row[5])
        _apply(book.asks, row[6], row[7])
        _trim(book.bids, bids=True)
        _trim(book.asks, bids=False)
        if self.rule != "direct":
            book.id, book.fresh = row[2], False

    def _cache(self, book: _Book, row: tuple[Any, ...], depth: int | None) -> None:
        """Keep ``row`` in the symbol's cache (its arrays cut to ``depth`` levels), and only the updates within
        ``caching_interval`` of it (and at most :data:`MAX_CACHED_UPDATES`)."""
        cache = book.cache
        if depth is not None:
            row = (*row[:4], *(a[:depth] for a in row[4:]))
        cache.append(row)
        t = row[0]
        start = 0
        while start < len(cache) and t - cache[start][0] > self.interval:
            start += 1
        start = max(start, len(cache) - MAX_CACHED_UPDATES)
        if start:
            del cache[:start]
