"""Metrics of the window engines (time-series, session): aggregates of row expressions, combined row-wise.

``max(price) - min(price) as range`` is split into the aggregates a window accumulates (``max(price)``,
``min(price)``) and the expression evaluated on their results per emitted window (``__agg0 - __agg1``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa

from headwater.engines.base import metric_outputs, resolve_columns, resolve_expr
from headwater.engines.columns import evaluate_rowwise, to_arrow, to_numpy
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Call, Col, Expr, Lit
from headwater.functions import FUNCTIONS, infer_type
from headwater.types import NUMERIC, TEMPORAL, Schema

WINDOW_KINDS = frozenset({"scalar", "aggregate"})


def aggregates_of(expr: Expr) -> list[Call]:
    return [n for n in expr.walk() if isinstance(n, Call) and FUNCTIONS[n.func].kind == "aggregate"]


def _check_inside_aggregates(expr: Expr, *, where: str) -> None:
    if isinstance(expr, Col):
        raise GraphDefinitionError(
            f"{where}: column {clip(expr.name)} is used outside an aggregate; a window engine outputs one row per "
            f"window, e.g. 'last({expr.name}) as {expr.name}'"
        )
    if isinstance(expr, Call) and FUNCTIONS[expr.func].kind != "aggregate":
        for a in expr.args:
            _check_inside_aggregates(a, where=where)


def replace_aggregates(expr: Expr, index: dict[str, int]) -> Expr:
    if isinstance(expr, Call):
        if expr.key() in index:
            return Col(f"__agg{index[expr.key()]}")
        return Call(expr.func, tuple(replace_aggregates(a, index) for a in expr.args), expr.params)
    return expr


def check_window_metrics(outputs: Sequence[tuple[str, Expr]], schema: Schema, *, where: str,
                         taken: set[str]) -> None:
    """Each metric: a name not taken by the time or key columns, aggregates of numeric row expressions only."""
    for name, expr in outputs:
        w = f"{where} metric {clip(name)}"
        if name in taken:
            raise GraphDefinitionError(f"{w}: the name repeats the time or key column; rename it with 'as'")
        typ = infer_type(expr, schema, where=w, kinds=WINDOW_KINDS)
        _check_inside_aggregates(expr, where=w)
        for agg in aggregates_of(expr):
            arg_type = infer_type(agg.args[0], schema, where=w, kinds=WINDOW_KINDS)
            if arg_type not in NUMERIC and arg_type != "bool":
                raise GraphDefinitionError(f"{w}: {agg} aggregates a {arg_type} column; only numeric columns are supported")
        if typ == "string":
            raise GraphDefinitionError(f"{w}: string results are not supported in a window engine metric")


def metric_types(outputs: Sequence[tuple[str, Expr]], schema: Schema, *, where: str) -> list[tuple[str, str]]:
    return [(n, infer_type(e, schema, where=where, kinds=WINDOW_KINDS)) for n, e in outputs]


SYSTEM_TIME = "time"  # the output time column of a window engine on system time (it has no time column)


def resolve_window_engine(spec: Any, *, where: str) -> None:
    """Check a window engine's time column, key columns and metrics against its input schema; store them
    resolved on ``spec`` (a frozen dataclass with ``input_schema``, ``time_column``, ``key_column``,
    ``metrics``, ``_outputs`` and optionally ``use_system_time``), or raise :class:`GraphDefinitionError`
    naming the node and the value."""
    schema: Schema = spec.input_schema
    if getattr(spec, "use_system_time", False):
        if spec.time_column is not None:
            raise GraphDefinitionError(f"{where}: use_system_time=True cuts windows by the micro-batches' commit "
                                       f"time; leave time_column out (got {clip(spec.time_column)})")
        time_col = SYSTEM_TIME
    else:
        if spec.time_column is None:
            raise GraphDefinitionError(f"{where}: time_column is required (or use_system_time=True)")
        if not isinstance(spec.time_column, str):
            raise GraphDefinitionError(
                f"{where}: time_column must be one column name, got {clip(spec.time_column)}. Orca's (date, time) "
                "pair needs a time-of-day column type, which stream tables (Delta) do not have: store one timestamp "
                "column, e.g. df['time'] = df['date'] + df['time_of_day'] before appending")
        found = schema.lookup(spec.time_column)
        if found is None:
            raise GraphDefinitionError(f"{where}: time_column {clip(spec.time_column)} is not an input column "
                                       f"(input columns: {', '.join(schema.names)})")
        if schema[found] not in TEMPORAL:
            raise GraphDefinitionError(f"{where}: time_column {clip(found)} has type {schema[found]}; "
                                       "expected timestamp or date")
        time_col = found
    keys = resolve_columns(spec.key_column, schema, what="key_column", where=where)
    if not spec.metrics:
        raise GraphDefinitionError(f"{where}: metrics is empty; e.g. metrics=['sum(volume) as volume']")
    outputs = metric_outputs(spec.metrics, where=where)
    check_window_metrics(outputs, schema, where=where, taken={time_col, *keys})
    if time_col == SYSTEM_TIME and SYSTEM_TIME in keys:
        raise GraphDefinitionError(f"{where}: key column {SYSTEM_TIME!r} clashes with the output time column; "
                                   "rename it with a map")
    if time_col != SYSTEM_TIME or spec.time_column is not None:
        object.__setattr__(spec, "time_column", time_col)
    object.__setattr__(spec, "key_column", keys)
    object.__setattr__(spec, "_outputs", tuple(outputs))


class WindowEngine:
    """What the window engines' specs share (frozen dataclasses checked by :func:`resolve_window_engine`)."""

    def output_schema(self: Any) -> Schema:
        """The time column, the key columns, then one column per metric."""
        schema: Schema = self.input_schema
        time = (SYSTEM_TIME, "timestamp") if self.time_column is None else (self.time_column, schema[self.time_column])
        cols = [time] + [(k, schema[k]) for k in self.key_column]
        return Schema(tuple(cols + metric_types(self._outputs, schema, where=self.where)))


class WindowMetrics:
    """The aggregates a window keeps (``aggs``) and how each metric is computed from their results."""

    def __init__(self, outputs: Sequence[tuple[str, Expr]], schema: Schema, out_types: Sequence[str],
                 *, fills: Sequence[str | float] = ()) -> None:
        self.schema = schema
        self.fills = list(fills) or ["none"] * len(outputs)  # per metric: none, null, ffill or a value
        self.aggs: list[Call] = []
        index: dict[str, int] = {}
        self.post: list[tuple[str, Expr]] = []
        for name, expr in outputs:
            expr = resolve_expr(expr, schema)
            for agg in aggregates_of(expr):
                if agg.key() not in index:
                    index[agg.key()] = len(self.aggs)
                    self.aggs.append(agg)
            self.post.append((name, replace_aggregates(expr, index)))
        self.out_types = list(out_types)
        self.needed = sorted({c for a in self.aggs for c in a.args[0].columns()})

    def arguments(self, table: pa.Table) -> list[np.ndarray]:
        """Each aggregate's argument over the rows of ``table``, as float64 (NULL = NaN)."""
        n = table.num_rows
        columns = {c: to_numpy(table[c], self.schema[c]) for c in self.needed}
        return [np.asarray(evaluate_rowwise(a.args[0], columns, n), dtype=np.float64) for a in self.aggs]

    def results(self, values: Sequence[np.ndarray], m: int, *, empty: np.ndarray | None = None) -> list[pa.Array]:
        """The metric columns of ``m`` emitted windows from their aggregates' ``values``.

        ``empty`` marks filled windows, whose ``values`` are the previous window's (``ffill``): a metric
        filled with ``null`` or a value gets that instead (Orca fills the metric's result, not its inputs).
        """
        agg_columns: Mapping[str, np.ndarray] = {f"__agg{i}": np.asarray(v, dtype=np.float64)
                                                 for i, v in enumerate(values)}
        arrays = []
        for (_, expr), typ, fill in zip(self.post, self.out_types, self.fills, strict=True):
            if isinstance(expr, Lit):
                out = np.full(m, np.nan if expr.value is None else float(expr.value))
            else:
                out = evaluate_rowwise(expr, agg_columns, m)
            if empty is not None and fill not in ("none", "ffill") and empty.any():
                out = np.where(empty, np.nan if fill == "null" else float(fill), np.asarray(out, dtype=np.float64))
            arrays.append(to_arrow(out, typ))
        return arrays


class SeveralWindows:
    """Orca's vector ``windowSize`` on a window engine spec (fields ``window``, a duration or a tuple of them,
    ``metric_windows`` and ``_outputs``): one window size per metric list."""

    window: Any
    metric_windows: tuple[int, ...]
    _outputs: tuple[tuple[str, Expr], ...]

    @property
    def windows(self) -> tuple[timedelta, ...]:
        return self.window if isinstance(self.window, tuple) else (self.window,)

    def metric_groups(self) -> list[tuple[timedelta, list[int]]]:
        """Each window with the positions of its metrics."""
        of = self.metric_windows or (0,) * len(self._outputs)
        return [(w, [p for p, i in enumerate(of) if i == index]) for index, w in enumerate(self.windows)]

    def check_several_windows(self, where: str) -> bool:
        """Check the windows and their metric lists; True when there are several (the engine then refuses the
        options that do not combine with them)."""
        if not isinstance(self.window, tuple):
            if self.metric_windows:
                raise GraphDefinitionError(f"{where}: metric_windows needs several windows")
            return False
        if not self.window:
            raise GraphDefinitionError(f"{where}: window is an empty list; give one or more durations")
        if sorted(set(self.metric_windows)) != list(range(len(self.window))) or \
                len(self.metric_windows) != len(self._outputs):
            raise GraphDefinitionError(
                f"{where}: with {len(self.window)} windows, metrics must be a list of {len(self.window)} lists, "
                "one (non-empty) per window; e.g. window=['1m', '5m'], metrics=[['sum(v) as v1'], ['sum(v) as v5']]")
        return True
