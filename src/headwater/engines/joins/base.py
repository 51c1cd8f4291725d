"""What every join engine shares: the one input table both sides are merged into, and metrics over two sides.

A join task has two inputs, but Headwater's data plane (offsets, snapshots, exactly-once commits, replay)
reads one table per subgraph. So a join reads a private **join input** table that both sides append to
(``DStream.asof_join_engine`` declares it): the left side's rows and the right side's rows, each tagged
with its side, in the order their commits landed. That commit order is durable, so a replayed
micro-batch sees both inputs interleaved exactly as the first time; no clock decides it.

The join input's columns are positional, so the two sides' names never clash: ``side`` (0 left, 1 right),
``k0..`` the matching columns (shared: a parallel join partitions both sides by them), ``l0..`` the
left's other columns and ``r0..`` the right's. A row carries NULL in the other side's columns.

Metrics are row expressions over both sides. A name means the left's column when the left has it, else
the right's; ``left.x`` and ``right.x`` say which side explicitly (Orca: unqualified names default to the
left table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from headwater.engines.base import SEQ, EngineSpec, KeyTable, metric_outputs, resolve_columns, resolve_expr
from headwater.engines.columns import evaluate_rowwise, times_us, to_arrow, to_numpy
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Col, Expr, Lit
from headwater.functions import infer_type
from headwater.types import TEMPORAL, Schema

SIDE = "side"
LEFT, RIGHT = 0, 1
SLOT, TIME, ARRIVAL = "_hw_slot", "_hw_time", "_hw_arrival"  # working columns of the engines' caches
DAY_US = 86_400_000_000


@dataclass(frozen=True)
class JoinLayout:
    """How the two sides' columns sit in the join input table, and how to take a batch of it apart."""

    left: Schema
    right: Schema
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]

    @property
    def left_rest(self) -> tuple[str, ...]:
        return tuple(n for n in self.left.names if n not in self.left_keys)

    @property
    def right_rest(self) -> tuple[str, ...]:
        return tuple(n for n in self.right.names if n not in self.right_keys)

    def merged(self) -> Schema:
        cols = [(SIDE, "int")] + [(f"k{i}", self.left[k]) for i, k in enumerate(self.left_keys)]
        cols += [(f"l{i}", self.left[c]) for i, c in enumerate(self.left_rest)]
        cols += [(f"r{i}", self.right[c]) for i, c in enumerate(self.right_rest)]
        return Schema(tuple(cols))

    def feeder(self, side: int) -> tuple[tuple[str, Expr], ...]:
        """The map that puts one side's rows into the join input (the other side's columns NULL)."""
        keys = self.left_keys if side == LEFT else self.right_keys
        out: list[tuple[str, Expr]] = [(SIDE, Lit(side))]
        out += [(f"k{i}", Col(k)) for i, k in enumerate(keys)]
        out += [(f"l{i}", Col(c) if side == LEFT else Lit(None)) for i, c in enumerate(self.left_rest)]
        out += [(f"r{i}", Col(c) if side == RIGHT else Lit(None)) for i, c in enumerate(self.right_rest)]
        return tuple(out)

    def split(self, table: pa.Table) -> tuple[pa.Table, pa.Table]:
        """The batch's left rows and right rows, each with its own column names and ``_hw_seq``."""
        side = table[SIDE].to_numpy(zero_copy_only=False)
        out = []
        for which, schema, keys, rest, prefix in ((LEFT, self.left, self.left_keys, self.left_rest, "l"),
                                                  (RIGHT, self.right, self.right_keys, self.right_rest, "r")):
            rows = table.filter(pa.array(side == which))
            names = {**{f"k{i}": k for i, k in enumerate(keys)}, **{f"{prefix}{i}": c for i, c in enumerate(rest)}}
            columns = {names[n]: rows[n] for n in rows.column_names if n in names}
            arrays = [columns[n] for n in schema.names] + [rows[SEQ]]
            out.append(pa.table(arrays, schema=schema.to_arrow().append(pa.field(SEQ, pa.int64()))))
        return out[0], out[1]


def _pair(value: Any, what: str, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Orca's ``x``, ``[x, y]`` (same on both sides) or ``[[left...], [right...]]`` (names that differ)."""
    if isinstance(value, str):
        return (value,), (value,)
    items = tuple(value) if isinstance(value, Sequence) else ()
    if len(items) == 2 and all(not isinstance(v, str) and isinstance(v, Sequence) for v in items):
        left, right = tuple(items[0]), tuple(items[1])
        if len(left) != len(right) or not left:
            raise GraphDefinitionError(f"{where}: {what} {clip(value)} must list as many left columns as right ones")
        return left, right
    if not items or not all(isinstance(v, str) for v in items):
        raise GraphDefinitionError(f"{where}: {what} must be a column name, a list of names, or "
                                   f"[[left names], [right names]]; got {clip(value)}")
    return items, items


def time_pair(value: Any, where: str) -> tuple[str, str]:
    """``time_column``: one name for both sides, or ``[left, right]``."""
    if isinstance(value, str):
        return value, value
    items = tuple(value) if isinstance(value, Sequence) else ()
    if len(items) != 2 or not all(isinstance(v, str) for v in items):
        raise GraphDefinitionError(f"{where}: time_column must be a name or [left name, right name], got {clip(value)}")
    return items[0], items[1]


@dataclass(frozen=True)
class JoinEngine(EngineSpec):
    """Fields and checks common to the join engines; subclasses add theirs and a processor."""

    prefix_time: ClassVar[bool] = True  # output starts with the left time column
    metric_kinds: ClassVar[frozenset[str]] = frozenset({"scalar"})  # the window join adds aggregates
    left_schema: Schema
    right_schema: Schema
    metrics: tuple[Expr, ...]
    matching_column: tuple[str, ...]
    right_matching_column: tuple[str, ...]
    time_column: str | None = None
    right_time_column: str | None = None
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        left = resolve_columns(self.matching_column, self.left_schema, what="matching column", where=f"{where} (left)")
        right = resolve_columns(self.right_matching_column, self.right_schema, what="matching column",
                                where=f"{where} (right)")
        for lk, rk in zip(left, right, strict=True):
            if self.left_schema[lk] != self.right_schema[rk]:
                raise GraphDefinitionError(f"{where}: matching column {clip(lk)} is {self.left_schema[lk]} on the left "
                                           f"but {clip(rk)} is {self.right_schema[rk]} on the right; cast one side in a map")
        object.__setattr__(self, "matching_column", left)
        object.__setattr__(self, "right_matching_column", right)
        for attr, schema, side in (("time_column", self.left_schema, "left"), ("right_time_column", self.right_schema, "right")):
            name = getattr(self, attr)
            if name is None:
                continue
            (real,) = resolve_columns((name,), schema, what="time_column", where=f"{where} ({side})")
            if schema[real] not in TEMPORAL:
                raise GraphDefinitionError(f"{where}: time_column {clip(real)} ({side}) has type {schema[real]}; "
                                           "expected timestamp or date")
            object.__setattr__(self, attr, real)
        if self.time_column and self.right_time_column and \
                self.left_schema[self.time_column] != self.right_schema[self.right_time_column]:
            raise GraphDefinitionError(f"{where}: time columns {clip(self.time_column)} and {clip(self.right_time_column)} "
                                       "have different types on the two sides")
        if not self.metrics:
            raise GraphDefinitionError(f"{where}: metrics is empty; e.g. metrics=['price', 'right.bid as bid']")
        outputs = [(name, self.rewrite_metric(expr)) for name, expr in metric_outputs(self.metrics, where=where)]
        scope = self.scope()
        taken = {n for n, _ in self.prefix()}
        for name, expr in outputs:
            if name in taken:
                raise GraphDefinitionError(f"{where} metric {clip(name)}: the name repeats a time or matching column "
                                           "of the output; rename it with 'as'")
            infer_type(expr, scope, where=f"{where} metric {clip(name)}", kinds=self.metric_kinds)
        object.__setattr__(self, "_outputs", tuple((n, resolve_expr(e, scope)) for n, e in outputs))
        self._check_garbage_size()
        self.check()

    def _check_garbage_size(self) -> None:
        """A garbage_size (the engines that take one) is a positive int."""
        size = getattr(self, "garbage_size", 1)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise GraphDefinitionError(f"{self.where}: garbage_size must be a positive int, got {clip(size)}")

    def check(self) -> None:
        """Engine-specific checks (subclasses)."""

    def rewrite_metric(self, expr: Expr) -> Expr:
        """A named metric as the engine computes it (subclasses: e.g. a window's bare right column as an array)."""
        return expr

    @property
    def needs_one_task(self) -> bool:
        """Whether every key must meet in one task (``sort_by_time``: one time order across all keys)."""
        return False

    @property
    def layout(self) -> JoinLayout:
        return JoinLayout(self.left_schema, self.right_schema, self.matching_column, self.right_matching_column)

    @property
    def input_schema(self) -> Schema:
        return self.layout.merged()

    def scope(self) -> Schema:
        """The names a metric may use: left columns, right-only columns, and ``left.x`` / ``right.x``."""
        lower = {n.lower() for n in self.left_schema.names}
        cols = list(self.left_schema.columns)
        cols += [(n, t) for n, t in self.right_schema.columns if n.lower() not in lower]
        cols += [(f"left.{n}", t) for n, t in self.left_schema.columns]
        cols += [(f"right.{n}", t) for n, t in self.right_schema.columns]
        return Schema(tuple(cols))

    def sources(self) -> dict[str, tuple[int, str]]:
        """Each name of :meth:`scope` -> (side, column of that side)."""
        lower_left = {n.lower(): n for n in self.left_schema.names}
        lower_right = {n.lower(): n for n in self.right_schema.names}
        out: dict[str, tuple[int, str]] = {}
        for name in self.scope().names:
            low = name.lower()
            if low.startswith("right."):
                out[name] = (RIGHT, lower_right[low[6:]])
            elif low.startswith("left."):
                out[name] = (LEFT, lower_left[low[5:]])
            elif low in lower_left:
                out[name] = (LEFT, lower_left[low])
            else:
                out[name] = (RIGHT, lower_right[low])
        return out

    def prefix(self) -> list[tuple[str, str]]:
        """Output columns before the metrics: the left time column (when the engine has one), the keys."""
        cols = [(self.time_column, self.left_schema[self.time_column])] if self.prefix_time and self.time_column else []
        return cols + [(k, self.left_schema[k]) for k in self.matching_column]

    def output_schema(self) -> Schema:
        scope = self.scope()
        metric_types = [(n, infer_type(e, scope, where=self.where, kinds=self.metric_kinds)) for n, e in self._outputs]
        return Schema(tuple(self.prefix() + metric_types))

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {"metrics": [str(m) for m in self.metrics],
                                 "matchingColumn": [list(self.matching_column), list(self.right_matching_column)]}
        if self.time_column:
            props["timeColumn"] = [self.time_column, self.right_time_column or self.time_column]
        return props


class Sides:
    """Row-level helpers a join processor needs: key slots, times, metrics and the output table."""

    def __init__(self, spec: JoinEngine) -> None:
        self.spec = spec
        self.layout = spec.layout
        self.out_schema = spec.output_schema()
        self.arrow_schema = self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))
        scope = spec.scope()
        self.source = spec.sources()  # scope name -> (side, column)
        self.scope = scope

    def empty(self) -> pa.Table:
        return self.arrow_schema.empty_table()

    def slots(self, keys: KeyTable, rows: pa.Table, side: int) -> np.ndarray:
        names = self.layout.left_keys if side == LEFT else self.layout.right_keys
        if rows.num_rows == 0:
            return np.empty(0, dtype=np.int64)
        return keys.slots_from_arrow([rows[k] for k in names])

    @staticmethod
    def times(rows: pa.Table, column: str, type_name: str) -> np.ndarray:
        if rows.num_rows == 0:
            return np.empty(0, dtype=np.int64)
        return times_us(rows[column], type_name)

    def output(self, left: pa.Table | None, right: pa.Table | None, prefix: Sequence[pa.Array],
               seq: np.ndarray, *, metrics: Sequence[tuple[str, Expr]] | None = None,
               extra: Mapping[str, np.ndarray | pa.Array] | None = None) -> pa.Table:
        """Output rows: ``prefix`` columns, then each metric over the aligned ``left`` and ``right`` rows (either
        may be None: that side's columns are all NULL), then ``_hw_seq``. ``metrics`` replaces the spec's
        (e.g. with aggregates read from ``extra`` columns)."""
        n = len(seq)
        if n == 0:
            return self.empty()
        sides = {LEFT: left, RIGHT: right}
        schemas = {LEFT: self.spec.left_schema, RIGHT: self.spec.right_schema}

        def column(name: str) -> pa.Array:
            side, col = self.source[name]
            rows = sides[side]
            if rows is None:
                return pa.nulls(n, schemas[side].to_arrow().field(col).type)
            data = rows[col]
            return data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data

        arrays: list[pa.Array] = list(prefix)
        types = self.out_schema.to_arrow()
        for name, expr in (self.spec._outputs if metrics is None else metrics):
            typ = types.field(name).type
            if isinstance(expr, Col) and expr.name in self.source:
                arrays.append(column(expr.name).cast(typ))
                continue
            computed = extra.get(expr.name) if isinstance(expr, Col) and extra is not None else None
            if isinstance(computed, pa.Array):
                arrays.append(computed.cast(typ))  # computed as Arrow already (a window's array vector)
                continue
            values = {c: extra[c] if extra is not None and c in extra else to_numpy(column(c), self.scope[c])
                      for c in expr.columns()}
            arrays.append(to_arrow(evaluate_rowwise(expr, values, n), self.out_schema[name]))
        arrays.append(pa.array(seq, pa.int64()))
        return pa.table(arrays, schema=self.arrow_schema)

    def keys_of(self, left: pa.Table | None, right: pa.Table | None) -> list[pa.Array]:
        """The output's matching columns: the left's values, or the right's where there is no left row."""
        out = []
        for lk, rk in zip(self.layout.left_keys, self.layout.right_keys, strict=True):
            if left is None:
                assert right is not None
                values = right[rk]
            elif right is None:
                values = left[lk]
            else:
                values = pc.coalesce(left[lk], right[rk])
            out.append(values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values)
        return out


def with_work_columns(rows: pa.Table, slots: np.ndarray, times: np.ndarray | None = None,
                      arrival: float | None = None) -> pa.Table:
    """``rows`` with the cache's working columns: key slot, time in µs, the batch time it arrived in."""
    rows = rows.append_column(SLOT, pa.array(slots, pa.int64()))
    if times is not None:
        rows = rows.append_column(TIME, pa.array(times, pa.int64()))
    if arrival is not None:
        rows = rows.append_column(ARRIVAL, pa.array(np.full(rows.num_rows, arrival), pa.float64()))
    return rows


def concat(tables: Sequence[pa.Table]) -> pa.Table:
    return pa.concat_tables([t for t in tables if t is not None], promote_options="permissive") \
        if len(tables) > 1 else tables[0]


def frame(rows: pa.Table, *columns: str) -> pd.DataFrame:
    """The cache's working columns as a DataFrame (one row per cached row, ``pos`` = its position)."""
    data = {c: rows[c].to_numpy(zero_copy_only=False) for c in columns}
    data["pos"] = np.arange(rows.num_rows, dtype=np.int64)
    return pd.DataFrame(data)


def grow(values: np.ndarray, size: int, fill: int) -> np.ndarray:
    """A per-slot array extended to ``size`` slots (new keys get ``fill``)."""
    if len(values) >= size:
        return values
    return np.concatenate([values, np.full(size - len(values), fill, dtype=values.dtype)])

