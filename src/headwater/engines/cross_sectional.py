"""The cross-sectional engine: aggregates over the latest row of every key (Orca's crossSectionalEngine, C.9).

The engine keeps each key's latest row. On each trigger it evaluates ``metrics`` — aggregates of row
expressions, combined row-wise (``sum(price * volume) / sum(volume) as vwap``) — over all keys' latest rows
and emits one row (one per group with ``context_by_column``). Triggers:

- ``per_batch`` (Orca's default ``perBatch``): once per append to the input table (an input version), so
  the output does not depend on how appends are grouped into micro-batches;
- ``per_row``: once per input row.

Output time: the micro-batch's input commit time (``use_system_time=True``, Orca's default "system time";
the same on every replay, unlike the wall clock; appends processed in one micro-batch share it) or the
triggering row's ``time_column``. Aggregates skip NULLs (``count`` counts
non-NULL values; the others of no value are NULL); ``std``/``var`` are sample statistics. Every key must
meet in one task, so the engine cannot follow ``parallelize``.

>>> import pyarrow as pa
>>> from headwater.engines.base import SEQ
>>> from headwater.parse import parse_metric
>>> from headwater.types import Schema
>>> spec = CrossSectionalEngine(name="x", input_schema=Schema.parse({"sym": "string", "price": "double"}),
...                             metrics=(parse_metric("avg(price) as avg_price"),), key_column=("sym",),
...                             triggering_pattern="per_row")
>>> p = spec.processor()
>>> state, out = p.process(p.new_state(), pa.table({"sym": ["A", "B", "A"], "price": [10.0, 20.0, 12.0],
...                                                 SEQ: [0, 1, 2]}))
>>> out["avg_price"].to_pylist()
[10.0, 15.0, 16.0]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from headwater.engines.base import (
    SEQ,
    EngineKind,
    EngineSpec,
    KeyTable,
    Processor,
    metric_outputs,
    resolve_columns,
)
from headwater.engines.columns import to_arrow, to_numpy
from headwater.engines.window_metrics import WindowMetrics, aggregates_of, check_window_metrics, metric_types
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.types import Schema

TRIGGERS = ("per_batch", "per_row")
AGGREGATES = ("count", "sum", "avg", "max", "min", "std", "var")  # first/last have no order across keys
PLANNED_TRIGGERS = ("interval", "key_count", "data_interval")
SEQ_SHIFT = 32  # _hw_seq = (input version << 32) | row: the append a row came in


@dataclass(frozen=True)
class CrossSectionalEngine(EngineSpec):
    """Parameters of ``cross_sectional_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.CROSS_SECTIONAL
    name: str
    input_schema: Schema
    metrics: tuple[Expr, ...]
    key_column: tuple[str, ...]
    triggering_pattern: str = "per_batch"
    time_column: str | None = None
    use_system_time: bool = True
    context_by_column: str | None = None
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"cross_sectional_engine {clip(self.name)}"
        schema = self.input_schema
        if self.triggering_pattern in PLANNED_TRIGGERS:
            raise GraphDefinitionError(f"{where}: triggering_pattern {self.triggering_pattern!r} is not built yet; "
                                       f"use one of {', '.join(TRIGGERS)}")
        if self.triggering_pattern not in TRIGGERS:
            raise GraphDefinitionError(f"{where}: triggering_pattern must be one of {', '.join(TRIGGERS)}, got "
                                       f"{clip(self.triggering_pattern)}")
        if not self.key_column:
            raise GraphDefinitionError(f"{where}: key_column is required: the engine keeps the latest row per key")
        keys = resolve_columns(self.key_column, schema, what="key_column", where=where)
        object.__setattr__(self, "key_column", keys)
        if self.time_column is not None:
            (time_col,) = resolve_columns((self.time_column,), schema, what="time_column", where=where)
            if schema[time_col] != "timestamp":
                raise GraphDefinitionError(f"{where}: time_column {clip(time_col)} has type {schema[time_col]}; "
                                           "expected timestamp")
            object.__setattr__(self, "time_column", time_col)
        elif not self.use_system_time:
            raise GraphDefinitionError(f"{where}: use_system_time=False takes the output time from time_column; "
                                       "name one")
        if self.context_by_column is not None:
            (ctx,) = resolve_columns((self.context_by_column,), schema, what="context_by_column", where=where)
            object.__setattr__(self, "context_by_column", ctx)
        if not self.metrics:
            raise GraphDefinitionError(f"{where}: metrics is empty; e.g. metrics=['avg(price) as avg_price']")
        outputs = metric_outputs(self.metrics, where=where)
        taken = {"time", *([self.context_by_column] if self.context_by_column else [])}
        check_window_metrics(outputs, schema, where=where, taken=taken)
        for _, expr in outputs:
            for agg in aggregates_of(expr):
                if agg.func not in AGGREGATES:
                    raise GraphDefinitionError(f"{where}: {agg} has no order across keys; use "
                                               f"{', '.join(AGGREGATES)}")
        object.__setattr__(self, "_outputs", tuple(outputs))

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.key_column

    def output_schema(self, input_schema: Schema | None = None) -> Schema:
        cols = [("time", "timestamp")]
        if self.context_by_column:
            cols.append((self.context_by_column, self.input_schema[self.context_by_column]))
        where = f"cross_sectional_engine {clip(self.name)}"
        return Schema(tuple(cols + metric_types(self._outputs, self.input_schema, where=where)))

    def properties(self) -> dict[str, Any]:
        return {"metrics": [str(m) for m in self.metrics], "keyColumn": list(self.key_column),
                "triggeringPattern": self.triggering_pattern, "timeColumn": self.time_column,
                "useSystemTime": self.use_system_time, "contextByColumn": self.context_by_column}

    def processor(self, input_schema: Schema | None = None) -> CrossSectionalProcessor:
        return CrossSectionalProcessor(self)


def _aggregate(func: str, values: np.ndarray) -> float:
    """One aggregate over the keys' values (NaN = NULL, skipped)."""
    present = values[~np.isnan(values)]
    if func == "count":
        return float(len(present))
    if len(present) == 0:
        return float("nan")
    match func:
        case "sum":
            return float(present.sum())
        case "avg":
            return float(present.mean())
        case "max":
            return float(present.max())
        case "min":
            return float(present.min())
        case "std":
            return float(present.std(ddof=1)) if len(present) > 1 else float("nan")
        case "var":
            return float(present.var(ddof=1)) if len(present) > 1 else float("nan")
    raise GraphDefinitionError(f"cross_sectional_engine: aggregate {func!r} is not supported; use "
                               f"{', '.join(AGGREGATES)}")


class CrossSectionalProcessor(Processor):
    def __init__(self, spec: CrossSectionalEngine) -> None:
        self.spec = spec
        self.out_schema = spec.output_schema()
        first_metric = 2 if spec.context_by_column else 1
        self.metrics = WindowMetrics(spec._outputs, spec.input_schema,
                                     [t for _, t in self.out_schema.columns[first_metric:]])

    def new_state(self) -> dict[str, Any]:
        # per key slot: each aggregate's argument in the key's latest row, and its context group
        return {"keys": [], "args": np.empty((0, len(self.metrics.aggs))), "context": []}

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec = self.spec
        n = table.num_rows
        if n == 0:
            return state, self._arrow_schema().empty_table()
        keys = KeyTable(state["keys"])
        slots = keys.slots_from_arrow([table[k] for k in spec.key_column])
        args = np.column_stack(self.metrics.arguments(table)) if self.metrics.aggs else np.empty((n, 0))
        latest = np.full((len(keys), args.shape[1]), np.nan)
        latest[: len(state["args"])] = state["args"]
        context = list(state["context"]) + [None] * (len(keys) - len(state["context"]))
        row_context = table[spec.context_by_column].to_pylist() if spec.context_by_column else None
        seqs = table[SEQ].to_numpy()
        if spec.triggering_pattern == "per_row":
            ends = np.arange(1, n + 1)
        else:  # one trigger per append: the last row of each input version
            versions = seqs >> SEQ_SHIFT
            ends = np.flatnonzero(np.append(versions[1:] != versions[:-1], True)) + 1
        times = to_numpy(table[spec.time_column], "timestamp") if spec.time_column else None
        out_time, out_context, out_values, out_seq = [], [], [], []
        start = 0
        for end in ends:  # each trigger: take in its rows (a key's later row wins), then aggregate
            latest[slots[start:end]] = args[start:end]
            if row_context is not None:
                for i in range(start, end):
                    context[slots[i]] = row_context[i]
            seen = np.zeros(len(keys), dtype=bool)
            seen[np.unique(slots[:end])] = True
            seen[: len(state["args"])] = True
            when = batch_time * 1e6 if spec.use_system_time or times is None else times[end - 1]
            groups = [None] if row_context is None else sorted({context[s] for s in np.flatnonzero(seen)},
                                                               key=lambda g: (g is None, g))
            for group in groups:
                members = seen if group is None and row_context is None else \
                    seen & np.array([c == group for c in context], dtype=bool)
                out_time.append(when)
                out_context.append(group)
                out_values.append([_aggregate(a.func, latest[members, j]) for j, a in enumerate(self.metrics.aggs)])
                out_seq.append(seqs[end - 1])
            start = end
        new_state = {"keys": keys.keys, "args": latest, "context": context}
        m = len(out_seq)
        values = np.array(out_values, dtype=np.float64).reshape(m, len(self.metrics.aggs))
        arrays: list[pa.Array] = [to_arrow(np.asarray(out_time, dtype=np.float64), "timestamp")]
        if spec.context_by_column:
            arrays.append(pa.array(out_context, type=spec.input_schema.to_arrow().field(spec.context_by_column).type))
        arrays.extend(self.metrics.results([values[:, j] for j in range(values.shape[1])], m))
        arrays.append(pa.array(out_seq, type=pa.int64()))
        return new_state, pa.table(arrays, schema=self._arrow_schema())
