"""The window join engine: each left row with aggregates of its key's right rows in a window around it (Orca C.15).

For a left row at time t, the window is ``[t + a, t + b]`` (both ends included) for ``window=(a, b)``.
Metrics mix aggregates of right columns (``sum(right.qty)``, ``avg(bid)``) with row expressions of the
left row (``price``, ``avg(bid) - price as edge``); exactly one output row per left row.

A left row's window is computed when the first right row of its key later than its upper end arrives
(each side arrives in time order per key, so the window is then complete: the output is the same for
any interleaving of the inputs). ``max_delayed_time`` (Orca's default 3 s) also computes a waiting
window once any key's right side is that much past its upper end, so a quiet key does not wait forever;
such a window holds what had arrived. ``max_delayed_time=None`` turns that off.

The special window ``(0, 0)``: the right rows from the key's previous left row up to this one, ``[t_prev,
t)`` (``closed="right"``: ``(t_prev, t]``; the key's first left row: everything before it), computed when
a right row at or past ``t`` arrives (``closed="right"``: past ``t``).

``sort_by_time=True`` (Orca's sortByTime) is for inputs in time order across keys: a window is computed
once the right side of *any* key is past it (``max_delayed_time`` then has nothing to add), and the output
is in time order across keys. Its rows must meet in one task, so it cannot follow ``parallelize``.

Rows older than an earlier row of their key on the same side are dropped (with ``sort_by_time``: of any
key). Aggregates and their NULL
rules are the time-series engine's; an empty window gives NULL (``count``: 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from headwater.aggregates.groups import over_groups
from headwater.aggregates.rules import METRIC_AGGREGATES
from headwater.durations import format_duration, to_micros
from headwater.engines.arguments import arg, duration_or_zero, fill_values, optional, signed_duration_pair
from headwater.engines.base import SEQ, EngineKind, KeyTable, Processor
from headwater.engines.columns import evaluate_rowwise, to_arrow, to_numpy
from headwater.engines.joins.base import (
    LEFT,
    RIGHT,
    SLOT,
    TIME,
    JoinEngine,
    Sides,
    concat,
    grow,
    with_work_columns,
)
from headwater.engines.joins.ordering import NO_TIME, RightRows, in_order, in_time_order, newest_time
from headwater.engines.window_metrics import replace_aggregates
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Call, Col, Expr
from headwater.functions import FUNCTIONS
from headwater.types import NUMERIC

LOW, HIGH = "_hw_low", "_hw_high"  # a waiting left row's window, inclusive, in µs


@dataclass(frozen=True)
class WindowJoinEngine(JoinEngine):
    """Parameters of ``window_join_engine`` (validated against both input schemas on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.WINDOW_JOIN
    metric_kinds: ClassVar[frozenset[str]] = frozenset({"scalar", "aggregate", "collect"})
    window: tuple[timedelta, timedelta] = field(default=(timedelta(0), timedelta(0)), metadata=arg(signed_duration_pair))
    max_delayed_time: timedelta | None = field(default=timedelta(seconds=3), metadata=arg(optional(duration_or_zero)))
    closed: str = "left"
    # per output column: what replaces its NULLs (None: keep them)
    null_fill: tuple[Any, ...] = field(default=(), metadata=arg(fill_values))
    sort_by_time: bool = False
    use_system_time: bool = False
    garbage_size: int = 5000  # Orca's cache limit: accepted; right rows no window can reach are purged anyway

    @property
    def needs_one_task(self) -> bool:
        return self.sort_by_time

    def prefix(self) -> list[tuple[str, str]]:
        if self.use_system_time:  # the output time is when the window was computed
            return [(self.time_column or "time", "timestamp")] + [(k, self.left_schema[k]) for k in self.matching_column]
        return super().prefix()

    @property
    def special(self) -> bool:
        """Orca's window 0:0: from the key's previous left row to this one."""
        return self.window == (timedelta(0), timedelta(0))

    def rewrite_metric(self, expr: Expr) -> Expr:
        """Orca's window 0:0 collects a bare right column as an array vector: ``right.qty`` is ``to_array(qty)``."""
        if self.special and isinstance(expr, Col) and self.sources().get(expr.name, (LEFT, ""))[0] == RIGHT:
            return Call("to_array", (expr,))
        return expr

    def check(self) -> None:
        where = self.where
        if self.use_system_time:
            if self.time_column:
                raise GraphDefinitionError(f"{where}: use_system_time=True times rows by their arrival; leave "
                                           f"time_column ({clip(self.time_column)}) out")
            if self.sort_by_time:
                raise GraphDefinitionError(f"{where}: sort_by_time needs event time (use_system_time=False)")
        elif not self.time_column:
            raise GraphDefinitionError(f"{where}: time_column is required unless use_system_time=True")
        if self.window[0] > self.window[1]:
            raise GraphDefinitionError(f"{where}: window {format_duration_signed(self.window[0])}:"
                                       f"{format_duration_signed(self.window[1])} starts after it ends")
        if self.closed not in ("left", "right"):
            raise GraphDefinitionError(f"{where}: closed must be 'left' or 'right', got {clip(self.closed)}")
        if self.max_delayed_time is not None and self.max_delayed_time < timedelta(0):
            raise GraphDefinitionError(f"{where}: max_delayed_time must not be negative")
        self._check_null_fill()
        sources = self.sources()
        for name, expr in self._outputs:
            w = f"{where} metric {clip(name)}"
            nested = [c for c in window_calls(expr) if FUNCTIONS[c.func].kind == "collect" and c is not expr]
            if nested:
                raise GraphDefinitionError(f"{w}: {nested[0]} is an array; it must be the whole metric, "
                                           f"e.g. '{nested[0]} as {name}'")
            for agg in window_calls(expr):
                if FUNCTIONS[agg.func].kind == "collect" and not isinstance(agg.args[0], Col):
                    raise GraphDefinitionError(f"{w}: {agg} collects an expression; to_array takes one right column "
                                               "(compute the expression in a map on the right side first)")
                if agg.func not in METRIC_AGGREGATES and FUNCTIONS[agg.func].kind != "collect":
                    raise GraphDefinitionError(f"{w}: aggregate {agg.func}() is not supported in a window join "
                                               f"(supported: {', '.join(METRIC_AGGREGATES)})")
                left_cols = [c for c in agg.args[0].columns() if sources[c][0] == LEFT]
                if left_cols:
                    raise GraphDefinitionError(f"{w}: {agg} aggregates left column {clip(left_cols[0])}; aggregates "
                                               "run over the right rows of the window (name them right.x)")
            outside = replace_aggregates(expr, {a.key(): i for i, a in enumerate(window_calls(expr))}).columns()
            right_cols = [c for c in outside if not c.startswith("__agg") and sources[c][0] == RIGHT]
            if right_cols:
                raise GraphDefinitionError(f"{w}: right column {clip(right_cols[0])} outside an aggregate; a window "
                                           f"holds many right rows, e.g. 'last({right_cols[0]})', or all of them as "
                                           f"an array, 'to_array({right_cols[0]})'")

    def _check_null_fill(self) -> None:
        if not self.null_fill:
            return
        columns = self.output_schema().columns
        if len(self.null_fill) != len(columns):
            raise GraphDefinitionError(f"{self.where}: null_fill has {len(self.null_fill)} values for the "
                                       f"{len(columns)} output columns ({', '.join(n for n, _ in columns)}); "
                                       "give one per column, None to keep its NULLs")
        for (name, typ), value in zip(columns, self.null_fill, strict=True):
            fits = value is None or (typ == "string" and isinstance(value, str)) or (typ == "bool" and isinstance(
                value, bool)) or (typ in NUMERIC and isinstance(value, int | float) and not isinstance(value, bool))
            if not fits:
                raise GraphDefinitionError(f"{self.where}: null_fill value {clip(value)} does not fit column "
                                           f"{clip(name)} of type {typ}")

    def properties(self) -> dict[str, Any]:
        props = {**super().properties(), "window": f"{format_duration_signed(self.window[0])}:"
                                                   f"{format_duration_signed(self.window[1])}", "closed": self.closed}
        if self.use_system_time:
            props["useSystemTime"] = True
        props["maxDelayedTime"] = None if self.max_delayed_time is None else format_duration(self.max_delayed_time)
        if self.null_fill:
            props["nullFill"] = list(self.null_fill)
        if self.sort_by_time:
            props["sortByTime"] = True
        return props



def window_calls(expr: Expr) -> list[Call]:
    """The calls computed over a window's right rows: aggregates and ``to_array``."""
    return [n for n in expr.walk() if isinstance(n, Call) and FUNCTIONS[n.func].kind in ("aggregate", "collect")]


def format_duration_signed(delta: timedelta) -> str:
    return f"-{format_duration(-delta)}" if delta < timedelta(0) else format_duration(delta) if delta else "0"


class WindowJoinProcessor(Processor, runs=WindowJoinEngine):
    def __init__(self, spec: WindowJoinEngine) -> None:
        self.spec = spec
        self.sides = Sides(spec)
        self.offsets = (to_micros(spec.window[0]), to_micros(spec.window[1]))
        self.delay = None if spec.max_delayed_time is None else to_micros(spec.max_delayed_time)
        aggs: dict[str, Call] = {}
        for _, expr in spec._outputs:
            for agg in window_calls(expr):
                aggs.setdefault(agg.key(), agg)
        self.aggs = list(aggs.values())
        index = {k: i for i, k in enumerate(aggs)}
        self.metrics = [(name, replace_aggregates(expr, index)) for name, expr in spec._outputs]

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "left": None, "right": None, "left_latest": np.empty(0, np.int64),
                "right_latest": np.empty(0, np.int64)}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        sides = self.sides
        keys = KeyTable(state["keys"])
        left, right = sides.layout.split(table)
        left, right, lt, rt = self._times(left, right, batch_time)
        ls, rs = sides.slots(keys, left, LEFT), sides.slots(keys, right, RIGHT)
        left_latest = grow(state["left_latest"], len(keys), NO_TIME)
        right_latest = grow(state["right_latest"], len(keys), NO_TIME)
        previous = left_latest.copy()  # the key's last left time before this batch (the (0, 0) window's start)
        ordered = in_time_order if self.spec.sort_by_time else in_order
        keep_left, keep_right = ordered(ls, lt, left_latest), ordered(rs, rt, right_latest)
        new_left = self._with_windows(left.filter(pa.array(keep_left)), ls[keep_left], lt[keep_left], previous)
        new_right = with_work_columns(right.filter(pa.array(keep_right)), rs[keep_right], rt[keep_right])
        pending = concat([t for t in (state["left"], new_left) if t is not None])
        history = concat([t for t in (state["right"], new_right) if t is not None])

        slots, high = pending[SLOT].to_numpy(), pending[HIGH].to_numpy()
        if self.spec.use_system_time:  # the clock passed the window (0:0: arrival order, every row at once)
            due = np.ones(len(high), dtype=bool) if self.spec.special else round(batch_time * 1e6) > high
        else:
            due = (newest_time(right_latest) if self.spec.sort_by_time else right_latest[slots]) > high
        forced = np.zeros(len(due), dtype=bool)
        if self.delay is not None and len(right_latest) and not (self.spec.sort_by_time or self.spec.use_system_time):
            forced = ~due & (high + self.delay < right_latest.max())
        ready = np.flatnonzero(due | forced)
        rights = RightRows.of(history)
        start = rights.search(slots[ready], pending[LOW].to_numpy()[ready], "left")  # the window's rows:
        end = rights.search(slots[ready], high[ready], "right")  # sorted indices start..end-1
        _, after = rights.around(slots[ready], high[ready])
        batch_end = int(table[SEQ].to_numpy().max()) if table.num_rows else 0
        left_seq = pending[SEQ].to_numpy()[ready]
        trigger = np.where(due[ready], np.maximum(left_seq, np.where(after < 0, -1, rights.seq[np.maximum(after, 0)])),
                           batch_end)
        order = np.lexsort((left_seq, pending[TIME].to_numpy()[ready] if self.spec.sort_by_time else trigger))
        trigger = np.maximum.accumulate(trigger[order]) if len(order) else trigger  # ordered output, ordered keys
        left_rows = pending.take(pa.array(ready[order]))
        aggregates = self._aggregate(history, rights, start[order], end[order])
        stamp = to_arrow(np.full(len(order), batch_time * 1e6), "timestamp") if self.spec.use_system_time else \
            left_rows[self.spec.time_column].combine_chunks()
        out = sides.output(left_rows, None, [stamp, *sides.keys_of(left_rows, None)],
                           trigger, metrics=self.metrics, extra=aggregates)
        waiting = np.ones(pending.num_rows, dtype=bool)
        waiting[ready] = False
        still = pending.filter(pa.array(waiting))
        kept = self._purge(history, still, left_latest)
        return {"keys": keys.keys, "left": still if still.num_rows else None, "right": kept,
                "left_latest": left_latest, "right_latest": right_latest}, self._fill_nulls(out)

    def _times(self, left: pa.Table, right: pa.Table,
               batch_time: float) -> tuple[pa.Table, pa.Table, np.ndarray, np.ndarray]:
        """Each side's rows with a time, and their times in µs. Event time: the time columns (rows without one
        are dropped). System time: the micro-batch's input commit time, the same on replay; a 0:0 window
        counts arrival order instead (``_hw_seq``), so its window is the right rows since the key's
        previous left row in the join input."""
        spec = self.spec
        if not spec.use_system_time:
            assert spec.time_column
            names = (spec.time_column, spec.right_time_column or spec.time_column)
            left, right = left.filter(left[names[0]].is_valid()), right.filter(right[names[1]].is_valid())
            return left, right, self.sides.times(left, names[0], spec.left_schema[names[0]]), \
                self.sides.times(right, names[1], spec.right_schema[names[1]])
        if spec.special:
            return left, right, left[SEQ].to_numpy(), right[SEQ].to_numpy()
        now = round(batch_time * 1e6)
        return left, right, np.full(left.num_rows, now, np.int64), np.full(right.num_rows, now, np.int64)

    def _fill_nulls(self, out: pa.Table) -> pa.Table:
        """Orca's nullFill: each output column's NULLs replaced by its value (None keeps them)."""
        if not self.spec.null_fill or out.num_rows == 0:
            return out
        columns = [column if value is None or column.null_count == 0 else
                   pc.fill_null(column, pa.scalar(value, column.type))
                   for column, value in zip(out.columns, (*self.spec.null_fill, None), strict=True)]
        return pa.table(columns, schema=out.schema)

    def _with_windows(self, rows: pa.Table, slots: np.ndarray, times: np.ndarray, previous: np.ndarray) -> pa.Table:
        """New left rows with their window ``[low, high]`` (µs, inclusive)."""
        if self.spec.special:
            df = pd.DataFrame({"slot": slots, "t": times})
            before = df.groupby("slot", sort=False)["t"].shift(1).to_numpy(np.float64)
            prev = np.where(np.isnan(before), previous[slots].astype(np.float64), before)
            first = prev <= NO_TIME
            prev_us = np.where(first, NO_TIME + 1, np.nan_to_num(prev)).astype(np.int64)
            if self.spec.closed == "left":
                low, high = prev_us, times - 1
            else:
                low, high = np.where(first, prev_us, prev_us + 1), times
        else:
            low, high = times + self.offsets[0], times + self.offsets[1]
        rows = with_work_columns(rows, slots, times)
        return rows.append_column(LOW, pa.array(low, pa.int64())).append_column(HIGH, pa.array(high, pa.int64()))

    def _aggregate(self, history: pa.Table, rights: RightRows, start: np.ndarray,
                   end: np.ndarray) -> dict[str, np.ndarray | pa.Array]:
        """Each aggregate over the right rows ``rights.pos[start:end]`` of each output row, as ``__agg<i>``
        (``to_array``: the rows' values in (time, arrival) order, as an Arrow list array)."""
        m = len(start)
        lengths = np.maximum(end - start, 0)
        owner = np.repeat(np.arange(m), lengths)
        offsets = np.arange(len(owner)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        rows = rights.pos[np.repeat(start, lengths) + offsets]
        sources = self.spec.sources()
        out: dict[str, np.ndarray | pa.Array] = {}
        for i, agg in enumerate(self.aggs):
            if FUNCTIONS[agg.func].kind == "collect":
                side_column = sources[agg.args[0].columns()[0]][1] if isinstance(agg.args[0], Col) else None
                assert side_column is not None  # checked at definition: to_array of one right column
                values = history[side_column].take(pa.array(rows, pa.int64())).combine_chunks()
                bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
                out[f"__agg{i}"] = pa.ListArray.from_arrays(pa.array(bounds, pa.int32()), values)
                continue
            columns = {c: to_numpy(history[sources[c][1]].take(pa.array(rows)), self.sides.scope[c])
                       for c in agg.args[0].columns()}
            values = np.asarray(evaluate_rowwise(agg.args[0], columns, len(rows)), dtype=np.float64)
            out[f"__agg{i}"] = over_groups(values, owner, m, agg.func)
        return out

    def _purge(self, history: pa.Table, waiting: pa.Table, left_latest: np.ndarray) -> pa.Table | None:
        """Keep the right rows a waiting or future left row's window can still reach."""
        if history.num_rows == 0:
            return None
        reach = left_latest + (0 if self.spec.special else self.offsets[0])  # a future left row's lowest bound
        if self.spec.special:
            reach = np.where(left_latest > NO_TIME, left_latest, NO_TIME)
        reach = np.where(left_latest > NO_TIME, reach, NO_TIME)  # a key without left rows keeps everything
        if waiting.num_rows:
            low = pd.Series(waiting[LOW].to_numpy()).groupby(waiting[SLOT].to_numpy()).min()
            reach[low.index.to_numpy()] = np.minimum(reach[low.index.to_numpy()], low.to_numpy())
        keep = history[TIME].to_numpy() >= reach[history[SLOT].to_numpy()]
        kept = history.filter(pa.array(keep))
        return kept if kept.num_rows else None
