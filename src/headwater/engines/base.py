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

from headwater.errors import GraphDefinitionError, clip
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

        The output has the engine's output columns plus ``_hw_seq``, the order key of
        each output row (the sequence number of the input row that produced it).
        ``batch_time`` (seconds since the epoch) is when the micro-batch's input was committed: the same
        on every replay of the batch. An engine that acts on processing time (key purge) uses it, never
        the wall clock, so a replayed batch leaves exactly the same state.
        """

    def process_routed(self, state: Any, table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[Any, pa.Table, np.ndarray | None]:
        """:meth:`process`, and which input rows it dropped as late: a boolean mask over ``table``'s rows, or
        None when it drops none. The data plane calls this, and writes those rows to the engine's
        ``late_rows_table`` if it has one; engines that drop late rows derive from :class:`LateRowsProcessor`."""
        state, out = self.process(state, table, batch_time=batch_time)
        return state, out, None

    def stats(self, state: Any) -> dict[str, int]:
        """Counters of one task's state for ``stream_engine_stat``: ``keys`` (groups kept) and ``late_rows``
        (rows dropped as late or out of order) where the engine has them."""
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

    @property
    def late_rows_fqn(self) -> str | None:
        """The public table the engine's late rows go to (engines with a ``late_rows_table``), else None."""
        return getattr(self, "late_rows_table", None)


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
    """Maps key values to dense slots 0..n-1 in first-seen order; slots index kernel state arrays."""

    def __init__(self, keys: Sequence[Any] = ()) -> None:
        self.keys: list[Any] = list(keys)
        self._index = pd.Index(self.keys, dtype=object)

    def __len__(self) -> int:
        return len(self.keys)

    def slots(self, key_columns: Sequence[np.ndarray]) -> np.ndarray:
        """Slot of each row's key, adding unseen keys at the end."""
        if len(key_columns) == 1:
            values = pd.Index(key_columns[0], dtype=object)
        else:
            values = pd.Index(list(zip(*key_columns, strict=True)), dtype=object, tupleize_cols=False)
        found = self._index.get_indexer(values)
        missing = found < 0
        if missing.any():
            new = pd.unique(values[missing])
            self.keys.extend(new.tolist())
            self._index = pd.Index(self.keys, dtype=object, tupleize_cols=False)
            found[missing] = self._index.get_indexer(values[missing])
        return found.astype(np.int64)

    def slots_from_arrow(self, columns: Sequence[pa.ChunkedArray | pa.Array]) -> np.ndarray:
        """Like :meth:`slots` for Arrow key columns; one key column is looked up once per distinct value."""
        if len(columns) == 1:
            column = columns[0]
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            encoded = column.dictionary_encode(null_encoding="encode")  # NULL is a key of its own
            uniques = np.asarray(encoded.dictionary.to_pandas(), dtype=object)
            indices = encoded.indices.to_numpy(zero_copy_only=False)
            return self.slots([uniques])[indices]
        return self.slots([np.asarray(c.to_pandas(), dtype=object) for c in columns])

    def values(self, slots: np.ndarray, column: int, n_columns: int) -> np.ndarray:
        """The key column ``column`` of each slot in ``slots``."""
        keys = np.empty(len(self.keys), dtype=object)
        keys[:] = [k[column] if n_columns > 1 else k for k in self.keys]
        return keys[slots]
