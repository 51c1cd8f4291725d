"""What every engine provides, and the per-task key table.

An engine spec is an immutable, validated description (parameters, metrics). Given
its input schema it reports its output schema and builds a :class:`Processor`: the
pure-Python/NumPy object that turns one stream task's micro-batch into output rows
while carrying explicit, picklable state. The Spark layer only moves batches and
state; streaming == batch is therefore testable without Spark.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.errors import GraphDefinitionError, SchemaError, clip
from headwater.expr import Alias, Call, Col, Expr, Item
from headwater.functions import default_name, expand_aggregates
from headwater.types import Schema


class EngineKind(StrEnum):
    """Every engine Headwater runs, as Orca names its type in a graph's JSON."""

    TIME_SERIES = "TIME_SERIES_ENGINE"
    SESSION_WINDOW = "SESSION_WINDOW_ENGINE"
    TIME_BUCKET = "TIME_BUCKET_ENGINE"
    DAILY_TIME_SERIES = "DAILY_TIME_SERIES_ENGINE"
    CROSS_SECTIONAL = "CROSS_SECTIONAL_ENGINE"
    REACTIVE_STATE = "REACTIVE_STATE_ENGINE"
    NARROW_REACTIVE_STATE = "NARROW_REACTIVE_STATE_ENGINE"
    DUAL_OWNERSHIP_REACTIVE_STATE = "DUAL_OWNERSHIP_REACTIVE_STATE_ENGINE"
    REACTIVE_STATELESS = "REACTIVE_STATELESS_ENGINE"
    ANOMALY_DETECTION = "ANOMALY_DETECTION_ENGINE"
    RULE = "RULE_ENGINE"
    ASOF_JOIN = "ASOF_JOIN_ENGINE"
    WINDOW_JOIN = "WINDOW_JOIN_ENGINE"
    EQUAL_JOIN = "EQUAL_JOIN_ENGINE"
    LOOKUP_JOIN = "LOOKUP_JOIN_ENGINE"
    LEFT_SEMI_JOIN = "LEFT_SEMI_JOIN_ENGINE"
    SNAPSHOT_JOIN = "SNAPSHOT_JOIN_ENGINE"
    PRICING = "PRICING_ENGINE"
    CRYPTO_ORDER_BOOK = "CRYPTO_ORDER_BOOK_ENGINE"
    UDF = "UDF_ENGINE"
    TIMER = "TIMER_ENGINE"


SEQ = "_hw_seq"  # total order of rows within a stream (append order); reserved name


class Processor(abc.ABC):
    """Runs one engine over the micro-batches of one stream task: ``class P(Processor, runs=SomeEngine)`` makes
    ``P(spec)`` what ``SomeEngine.processor()`` returns."""

    def __init_subclass__(cls, *, runs: type[EngineSpec] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if runs is not None:
            runs.processor_type = cls

    @abc.abstractmethod
    def new_state(self) -> Any:
        """State before the first row."""

    @abc.abstractmethod
    def process(self, state: Any, table: pa.Table, *, batch_time: float = 0.0) -> tuple[Any, pa.Table]:
        """Consume ``table`` (input columns + ``_hw_seq``, in stream order); return new state and output.

        It may change ``state`` in place (a replay starts from the saved snapshot, never from that object).

        The output has the engine's output columns plus ``_hw_seq``, the order key of
        each output row (the sequence number of the input row that produced it).
        ``batch_time`` (seconds since the epoch) is when the micro-batch's input was committed: the same
        on every replay of the batch. An engine that acts on processing time (key purge) uses it, never
        the wall clock, so a replayed batch leaves exactly the same state.
        """

    def process_routed(self, state: Any, table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[Any, pa.Table, np.ndarray | pa.Table | None]:
        """:meth:`process`, and the rows it routes aside: which input rows it dropped as late (a boolean mask over
        ``table``'s rows), or rows of its own in its side table's schema (an engine's error rows), or None when
        there are none. The data plane calls this, and writes those rows to the engine's side table
        (:attr:`EngineSpec.late_rows_fqn`) if it has one; engines that drop late rows derive from
        :class:`LateRowsProcessor`."""
        state, out = self.process(state, table, batch_time=batch_time)
        return state, out, None

    def stats(self, state: Any) -> dict[str, int]:
        """Counters of one task's state for ``stream_engine_stat``: ``keys`` (groups kept) and ``late_rows``
        (rows dropped as late or out of order) where the engine has them."""
        if isinstance(state, KeyedState):
            return {"keys": len(state.keys)}
        if not isinstance(state, dict):
            return {}
        out = {"keys": len(state["keys"])} if isinstance(state.get("keys"), list) else {}
        if isinstance(state.get("late_rows"), int):
            out["late_rows"] = state["late_rows"]
        return out

    def control(self, state: Any, op: Mapping[str, Any]) -> Any:
        """Apply a change the user asked for while the graph runs (e.g. the rule engine's ``update_rule``) to
        one task's state; the change is kept in the state snapshots. Engines without such changes refuse."""
        raise GraphDefinitionError(f"this engine accepts no changes while it runs (asked: {clip(op.get('op'))})")


class LateRowsProcessor(Processor):
    """A processor that drops late rows: it implements :meth:`process_routed`, and ``process`` is that without
    the mask."""

    def process(self, state: Any, table: pa.Table, *, batch_time: float = 0.0) -> tuple[Any, pa.Table]:
        state, out, _ = self.process_routed(state, table, batch_time=batch_time)
        return state, out

    @abc.abstractmethod
    def process_routed(self, state: Any, table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[Any, pa.Table, np.ndarray | None]:
        """:meth:`Processor.process_routed`."""


@dataclass(frozen=True)
class EngineSpec(abc.ABC):
    """Base of engine descriptions; subclasses are frozen dataclasses that validate themselves in :meth:`validate`."""

    kind: ClassVar[EngineKind]
    processor_type: ClassVar[Callable[[Any], Processor]]  # set by ``class P(Processor, runs=TheEngine)``
    name: str

    def __post_init__(self) -> None:
        check_flags(self, where=self.where)
        self.validate()
        try:  # the outputs' names pass Schema's one check (unique, also across case); say which engine failed it
            self.output_schema()
        except SchemaError as exc:
            if str(exc).startswith(self.where):
                raise
            raise SchemaError(f"{self.where}: output {exc}") from None

    @property
    def where(self) -> str:
        """The engine as errors name it: ``time_series_engine 'bars'``."""
        return f"{self.kind.lower()} {clip(self.name)}"

    @abc.abstractmethod
    def validate(self) -> None:
        """Check the parameters (against the input schema); store names in their real spelling."""

    @abc.abstractmethod
    def output_schema(self) -> Schema: ...

    def processor(self) -> Processor:
        """What runs the engine over one stream task's micro-batches, with its state."""
        return type(self).processor_type(self)

    @abc.abstractmethod
    def properties(self) -> dict[str, Any]:
        """JSON-ready parameters, shown by explain() and stored with the graph."""

    side_table_argument: ClassVar[str] = "late_rows_table"
    """The argument naming the engine's side table, where the rows it routes aside go: its late rows (the time
    engines' ``late_rows_table``) or its error rows (the order book engine's ``error_table``)."""
    side_table_role: ClassVar[str] = "late_rows"  # the side table's TableRole

    @property
    def late_rows_fqn(self) -> str | None:
        """The public table the engine's late (or error) rows go to (its side table), else None."""
        value = getattr(self, self.side_table_argument, None)
        return value if isinstance(value, str) else None

    def side_table_schema(self, input_schema: Schema) -> Schema:
        """The columns of the side table: the engine's input columns (late rows), unless the engine says."""
        return input_schema


@dataclass(frozen=True)
class OneInputEngine(EngineSpec):
    """An engine over one input stream (the joins have two)."""

    input_schema: Schema


def check_flags(spec: Any, *, where: str) -> None:
    """Every ``bool`` option of an engine spec (a dataclass) is True or False: a truthy ``"no"`` must not
    switch one on."""
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if f.type in ("bool", bool) and not isinstance(value, bool):
            raise GraphDefinitionError(f"{where}: {f.name} must be True or False, got {clip(value)}")


def resolve_columns(names: Sequence[str], schema: Schema, *, what: str, where: str) -> tuple[str, ...]:
    """The real spelling of each column name (Orca matches names case-insensitively), or a clear error."""
    out = []
    for name in names:
        real = schema.lookup(name)
        if real is None:
            raise GraphDefinitionError(
                f"{where}: {what} {clip(name)} is not an input column (input columns: {', '.join(schema.names)})"
            )
        out.append(real)
    return tuple(out)


def resolve_expr(expr: Expr, schema: Schema) -> Expr:
    """``expr`` with column references in their real (case-correct) spelling."""
    if isinstance(expr, Col):
        return Col(schema.lookup(expr.name) or expr.name)
    if isinstance(expr, Call):
        return Call(expr.func, tuple(resolve_expr(a, schema) for a in expr.args), expr.params)
    if isinstance(expr, Item):
        return Item(resolve_expr(expr.expr, schema), expr.index)
    return expr


def metric_outputs(metrics: Sequence[Expr], *, where: str, aggregates: bool = True) -> list[tuple[str, Expr]]:
    """Flatten metrics into (output name, expression) pairs, checking names are unique; with ``aggregates``
    (engines that aggregate), ``wavg``, ``wsum``, ... are written with the basic aggregates
    (:func:`~headwater.functions.expand_aggregates`)."""
    out: list[tuple[str, Expr]] = []
    for m in metrics:
        if isinstance(m, Alias):
            out.extend(zip(m.names, m.outputs(), strict=True))
        else:
            out.append((default_name(m, where=where), m))
    if aggregates:
        out = [(name, expand_aggregates(expr)) for name, expr in out]
    names = [n for n, _ in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise GraphDefinitionError(f"{where}: output column name(s) {dupes} appear more than once; rename with 'as'")
    return out


class KeyTable:
    """Maps key values to dense slots 0..n-1 in first-seen order; slots index kernel state arrays.

    Lookups cost the batch's distinct keys, not the table's size, and new keys are added in place: a table kept
    across micro-batches (in a :class:`KeyedState`) is never rebuilt. NaN keys are one key, as in pandas.

    >>> table = KeyTable()
    >>> table.slots([np.array(["a", "b", "a"], dtype=object)]).tolist(), table.slots([np.array(["c", "a"])]).tolist()
    ([0, 1, 0], [2, 0])
    >>> table.keys
    ['a', 'b', 'c']
    """

    def __init__(self, keys: Sequence[Any] = ()) -> None:
        self.keys: list[Any] = list(keys)
        self._slot: dict[Any, int] = dict(zip(_canonical(self.keys), range(len(self.keys)), strict=True))

    def __len__(self) -> int:
        return len(self.keys)

    def __reduce__(self) -> tuple[Any, ...]:
        return KeyTable, (self.keys,)  # the index is rebuilt when loaded: a snapshot holds the keys once

    def extend(self, keys: Sequence[Any]) -> None:
        """Add ``keys``, none of them in the table yet, at the end."""
        for key, canonical in zip(keys, _canonical(keys), strict=True):
            self._slot[canonical] = len(self.keys)
            self.keys.append(key)

    def slots(self, key_columns: Sequence[np.ndarray]) -> np.ndarray:
        """Slot of each row's key, adding unseen keys at the end."""
        if len(key_columns) == 1:
            values = np.asarray(key_columns[0], dtype=object)
        else:
            values = pd.Index(list(zip(*key_columns, strict=True)), dtype=object, tupleize_cols=False)
        codes, uniques = pd.factorize(values)  # NaN and None rows get -1: they are looked up one by one
        found = self._slots_of(list(uniques))[np.maximum(codes, 0)] if len(uniques) else codes.astype(np.int64)
        missing = np.flatnonzero(codes < 0)
        if missing.size:
            found[missing] = self._slots_of([values[i] for i in missing.tolist()])
        return found

    def _slots_of(self, uniques: list[Any]) -> np.ndarray:
        """The slot of each distinct key (unseen ones added in order)."""
        canonical = _canonical(uniques)
        get = self._slot.get
        found = np.fromiter((get(k, -1) for k in canonical), dtype=np.int64, count=len(canonical))
        for i in np.flatnonzero(found < 0).tolist():
            slot = self._slot.get(canonical[i])  # listed twice (NaN rows looked up one by one)
            if slot is None:
                slot = self._slot[canonical[i]] = len(self.keys)
                self.keys.append(uniques[i])
            found[i] = slot
        return found

    def slots_from_arrow(self, columns: Sequence[pa.ChunkedArray | pa.Array]) -> np.ndarray:
        """Like :meth:`slots` for Arrow key columns; one key column is looked up once per distinct value."""
        if len(columns) == 1:
            column = columns[0]
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            encoded = column.dictionary_encode(null_encoding="encode")  # NULL is a key of its own
            indices = encoded.indices.to_numpy(zero_copy_only=False)
            return self._slots_of(_key_values(encoded.dictionary).tolist())[indices]
        return self.slots([_key_values(c) for c in columns])

    def column(self, slots: np.ndarray, column: int, n_columns: int, arrow_type: pa.DataType) -> pa.Array:
        """The key column ``column`` (of ``n_columns``) of each slot in ``slots``, as an Arrow array of
        ``arrow_type``; a NULL key (NaN in the table, whatever the type) is NULL again, except in a float column.

        >>> KeyTable([1, float("nan")]).column(np.array([1, 0]), 0, 1, pa.int64()).to_pylist()
        [None, 1]
        """
        unique, where = np.unique(slots, return_inverse=True)
        keys = np.empty(len(unique), dtype=object)
        keys[:] = [self.keys[s][column] if n_columns > 1 else self.keys[s] for s in unique.tolist()]
        return pa.array(keys[where], type=arrow_type, from_pandas=not pa.types.is_floating(arrow_type))


KEYED_STATE_FORMAT = 1  # of KeyedState's snapshot and changelog records; a newer one is refused when read


class KeyedState:
    """An engine's state whose bulk is per key, so that a micro-batch saves only the keys it touched.

    ``columns`` hold one row per key slot (first axis ``len(keys)``); ``rest`` is the small remainder, saved
    whole. A processor calls :meth:`touch` with the slots a batch changed, and :meth:`renumber` when it drops
    or reorders slots (key purge). The state store (:mod:`headwater.dataplane.snapshots`) then saves
    :meth:`changes` (those keys' rows) instead of the whole state, and :meth:`apply` replays them.

    >>> state = KeyedState(KeyTable(["a", "b"]), {"total": np.array([1.0, 2.0])}, {})
    >>> state.saved()
    >>> state.columns["total"][state.keys.slots([np.array(["b"])])] += 5.0
    >>> state.touch(state.keys.slots([np.array(["b"])]))
    >>> state.changes()["slots"].tolist()
    [1]
    """

    def __init__(self, keys: KeyTable, columns: dict[str, np.ndarray], rest: dict[str, Any]) -> None:
        self.keys, self.columns, self.rest = keys, columns, rest
        self._touched: list[np.ndarray] = []  # since the last save: slots changed,
        self._saved_keys = 0  # the key count then,
        self._renumbered = True  # and whether slots were renumbered (or never saved): the next save is whole

    def __reduce__(self) -> tuple[Any, ...]:
        return _keyed_state, (KEYED_STATE_FORMAT, self.keys.keys, self.columns, self.rest)

    def touch(self, slots: np.ndarray) -> None:
        """Mark the rows of ``slots`` changed (new keys are changed without being marked)."""
        self._touched.append(np.asarray(slots, dtype=np.int64))

    def renumber(self) -> None:
        """Slots were dropped or reordered: the next save writes the whole state."""
        self._renumbered = True

    def saved(self) -> None:
        """The store saved (or loaded) this state: changes count from here."""
        self._touched, self._saved_keys, self._renumbered = [], len(self.keys), False

    def changes(self) -> dict[str, Any] | None:
        """What changed since :meth:`saved`, as one changelog record; None when only a whole save will do."""
        if self._renumbered:
            return None
        fresh = np.arange(self._saved_keys, len(self.keys), dtype=np.int64)
        slots = np.unique(np.concatenate([*self._touched, fresh]))
        return {"format": KEYED_STATE_FORMAT, "keys": len(self.keys), "new_keys": self.keys.keys[self._saved_keys:],
                "slots": slots, "rows": {name: column[slots] for name, column in self.columns.items()},
                "rest": self.rest}

    def apply(self, record: Mapping[str, Any]) -> None:
        """Replay a changelog record made by :meth:`changes` on the state it was made from."""
        _check_format(record.get("format"))
        if record["keys"] != len(self.keys) + len(record["new_keys"]) or set(record["rows"]) != set(self.columns):
            raise ValueError("a state changelog record does not follow the state it is applied to")
        self.keys.extend(record["new_keys"])
        slots, n = record["slots"], len(self.keys)
        for name, rows in record["rows"].items():
            column = self.columns[name]
            if len(column) < n:
                grown = np.empty((n, *column.shape[1:]), dtype=column.dtype)
                grown[: len(column)] = column
                self.columns[name] = column = grown
            column[slots] = rows
        self.rest = record["rest"]


def _keyed_state(version: int, keys: list[Any], columns: dict[str, np.ndarray], rest: dict[str, Any]) -> KeyedState:
    _check_format(version)
    return KeyedState(KeyTable(keys), columns, rest)


def _check_format(version: Any) -> None:
    if version != KEYED_STATE_FORMAT:
        raise ValueError(f"engine state of format {version!r}: this Headwater reads format {KEYED_STATE_FORMAT} "
                         "(saved by a newer version?)")


_NAN = float("nan")


def _key_values(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An Arrow key column as Python values; NULL is NaN (as keys always stored it), integers stay exact."""
    if pa.types.is_integer(column.type) and column.null_count:
        values = np.empty(len(column), dtype=object)
        values[:] = [_NAN if v is None else v for v in column.to_pylist()]  # pandas would make them floats
        return values
    return np.asarray(column.to_pandas(), dtype=object)


def _canonical(keys: Sequence[Any]) -> list[Any]:
    """``keys`` with every NaN (alone or in a tuple) the same object: a dict then finds NaN keys as one key."""
    def one(key: Any) -> Any:
        if isinstance(key, float) and key != key:
            return _NAN
        if isinstance(key, tuple):
            return tuple(one(k) for k in key)
        return key

    return [k if type(k) is str else one(k) for k in keys]
