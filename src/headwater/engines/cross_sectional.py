"""The cross-sectional engine: aggregates over the latest row of every key (Orca's crossSectionalEngine, C.9).

The engine keeps each key's latest row. On each trigger it evaluates ``metrics`` — aggregates of row
expressions, combined row-wise (``sum(price * volume) / sum(volume) as vwap``) — over all keys' latest rows
that pass ``key_filter`` and emits one row (one per group with ``context_by_column``). Triggers:

- ``per_batch`` (Orca's default ``perBatch``): once per append to the input table (an input version), so
  the output does not depend on how appends are grouped into micro-batches;
- ``per_row``: once per input row;
- ``key_count`` (data time): the cross-section of a timestamp ``t`` is computed once, when the number of
  keys whose latest row is at ``t`` reaches ``triggering_interval``, or when a newer timestamp arrives.
  The rows of one timestamp in one append are taken in together (Orca counts per insert call). With
  ``triggering_interval=(c1, c2)`` a timestamp short of ``c1`` keys waits: the rows of the next timestamp
  are held back until they reach ``c2`` keys (or a third timestamp arrives), and late rows of the waiting
  timestamp still count. Rows older than the newest timestamp taken in are dropped. ``last_batch_only``
  keeps only the keys of the newest timestamp;
- ``data_interval`` (data time): windows of ``triggering_interval`` aligned like the time-series
  engine's; the first row at or past a window's end computes the cross-section as it stood before that
  row, with the window's end as output time. Only windows that received rows emit; rows of a window
  already computed are dropped;
- ``interval`` (system time): the same windows over the micro-batches' input commit time, which every row
  of a micro-batch shares: the first micro-batch committed past a window's end computes the cross-section
  as it stood at that end, with the end as output time. Orca's timer also fires when no row comes; here
  the next micro-batch does, so a replay computes the same rows.

Output time: the micro-batch's input commit time (``use_system_time=True``, Orca's default "system time";
the same on every replay, unlike the wall clock; appends processed in one micro-batch share it), or data
time: the triggering row's ``time_column`` (``per_batch``/``per_row``), the timestamp computed
(``key_count``), the window's end (``data_interval``, ``interval``). The wall-clock wait of ``key_count``'s
``(c1, duration)`` is refused: a replay after a restart must compute the same rows.
Aggregates skip NULLs (``count`` counts non-NULL values; the others of no value are NULL); ``std``/``var``
are sample statistics. Every key must meet in one task, so the engine cannot follow ``parallelize``.

>>> import pyarrow as pa
>>> from headwater.engines.base import SEQ
>>> from headwater.parse import parse_metric
>>> from headwater.types import NUMERIC, Schema
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

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.aggregates.groups import over_groups
from headwater.aggregates.rules import CATALOG, METRIC_AGGREGATES
from headwater.durations import format_duration, parse_duration, to_micros
from headwater.engines.arguments import Argument, arg, columns, expression, metric_list
from headwater.engines.base import (
    SEQ,
    EngineKind,
    KeyTable,
    OneInputEngine,
    Processor,
    metric_outputs,
    resolve_columns,
    resolve_expr,
)
from headwater.engines.columns import evaluate_rowwise, filter_mask, to_arrow, to_numpy
from headwater.engines.time_series import alignment_micros
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Call, Col, Expr, Lit
from headwater.functions import FUNCTIONS, infer_type
from headwater.types import NUMERIC, Schema

TRIGGERS = ("per_batch", "per_row", "interval", "key_count", "data_interval")
DATA_TIME_TRIGGERS = ("key_count", "data_interval")
AGGREGATES = tuple(f for f in METRIC_AGGREGATES if not CATALOG[f].ordered)  # first/last: no order across keys
SEQ_SHIFT = 32  # _hw_seq = (input version << 32) | row: the append a row came in

TriggeringInterval = int | tuple[Any, ...] | timedelta | None


def triggering_interval_arg(a: Argument) -> TriggeringInterval:
    """``triggering_interval`` as given to ``cross_sectional_engine``, in the engine's form: a ``timedelta``
    for ``data_interval`` (from ``"1s"`` or a ``timedelta``), a count or a pair of counts for ``key_count``."""
    value, what = a.value, a.where
    if value is None:
        return None
    if a.arguments["triggering_pattern"] in ("data_interval", "interval"):
        if isinstance(value, int | float) and not isinstance(value, bool):
            raise GraphDefinitionError(
                f"{what}: got the bare number {clip(value)}; give a duration of the time column, e.g. '1s' (Orca "
                "counts it in the time column's unit: its 1000 on a TIMESTAMP column is '1s')")
        return parse_duration(value, where=what)
    if isinstance(value, list):
        return tuple(value)
    return value


def system_time_arg(a: Argument) -> bool:
    """``use_system_time``; None: True unless the triggering pattern works on data time."""
    return a.arguments["triggering_pattern"] not in DATA_TIME_TRIGGERS if a.value is None else a.value


def _is_count(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and bool(value >= 1)


@dataclass(frozen=True)
class CrossSectionalEngine(OneInputEngine):
    """Parameters of ``cross_sectional_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.CROSS_SECTIONAL
    metrics: tuple[Expr, ...] = field(metadata=arg(metric_list))
    key_column: tuple[str, ...] = field(metadata=arg(columns))
    triggering_pattern: str = "per_batch"
    time_column: str | None = None
    use_system_time: bool = field(default=True, metadata=arg(system_time_arg))
    context_by_column: str | None = None
    triggering_interval: TriggeringInterval = field(default=None, metadata=arg(triggering_interval_arg))
    last_batch_only: bool = False
    round_time: bool = True
    key_filter: Expr | None = field(default=None, metadata=arg(expression))
    updated_context_groups_only: bool = False
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        schema = self.input_schema
        self._check_trigger(where)
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
        elif self.triggering_pattern in DATA_TIME_TRIGGERS:
            raise GraphDefinitionError(f"{where}: triggering_pattern {self.triggering_pattern!r} works on data time; "
                                       "name the time_column, e.g. time_column='time'")
        elif not self.use_system_time:
            raise GraphDefinitionError(f"{where}: use_system_time=False takes the output time from time_column; "
                                       "name one")
        if self.context_by_column is not None:
            (ctx,) = resolve_columns((self.context_by_column,), schema, what="context_by_column", where=where)
            object.__setattr__(self, "context_by_column", ctx)
        elif self.updated_context_groups_only:
            raise GraphDefinitionError(f"{where}: updated_context_groups_only=True computes only the context groups "
                                       "updated since the last output; name the groups with context_by_column")
        if self.key_filter is not None:
            w = f"{where} key_filter {clip(str(self.key_filter))}"
            typ = infer_type(self.key_filter, schema, where=w, kinds=frozenset({"scalar"}))
            if typ != "bool":
                raise GraphDefinitionError(f"{w}: must be true or false for each key's latest row, got a {typ}; "
                                           "e.g. key_filter='volume > 0'")
            object.__setattr__(self, "key_filter", resolve_expr(self.key_filter, schema))
        if not self.metrics:
            raise GraphDefinitionError(f"{where}: metrics is empty; e.g. metrics=['avg(price) as avg_price']")
        outputs = [(name, resolve_expr(expr, schema)) for name, expr in metric_outputs(self.metrics, where=where)]
        taken = {"time", *([self.context_by_column] if self.context_by_column else [])}
        if any(_per_key(expr) for _, expr in outputs):
            taken |= set(keys)
        for name, expr in outputs:
            check_cross_metric(name, expr, schema, where=where, taken=taken)
        object.__setattr__(self, "_outputs", tuple(outputs))

    def _check_trigger(self, where: str) -> None:
        pattern, interval = self.triggering_pattern, self.triggering_interval
        if pattern == "interval":
            if not isinstance(interval, timedelta) or interval <= timedelta(0):
                raise GraphDefinitionError(f"{where}: triggering_pattern 'interval' needs triggering_interval, a "
                                           f"positive duration of system time, e.g. '1s'; got {clip(interval)}")
            if not self.use_system_time:
                raise GraphDefinitionError(f"{where}: triggering_pattern 'interval' works on system time (the "
                                           "micro-batches' input commit time): leave use_system_time=True")
            return
        if pattern not in TRIGGERS:
            raise GraphDefinitionError(f"{where}: triggering_pattern must be one of {', '.join(TRIGGERS)}, got "
                                       f"{clip(pattern)}")
        if self.last_batch_only and pattern != "key_count":
            raise GraphDefinitionError(f"{where}: last_batch_only=True needs triggering_pattern='key_count' (it keeps "
                                       f"the keys of the newest timestamp only), got {pattern!r}")
        if pattern not in DATA_TIME_TRIGGERS:
            if interval is not None:
                raise GraphDefinitionError(f"{where}: triggering_interval applies to key_count and data_interval, not "
                                           f"{pattern!r}; got {clip(interval)}")
            return
        if self.use_system_time:
            raise GraphDefinitionError(f"{where}: triggering_pattern {pattern!r} works on data time: pass "
                                       "use_system_time=False (the output time is data time)")
        if pattern == "data_interval":
            if not isinstance(interval, timedelta) or interval <= timedelta(0):
                raise GraphDefinitionError(f"{where}: triggering_pattern 'data_interval' needs triggering_interval, a "
                                           f"positive duration of data time, e.g. '1s'; got {clip(interval)}")
            return
        if isinstance(interval, tuple) and len(interval) == 2 and isinstance(interval[1], str | timedelta):
            raise GraphDefinitionError(
                f"{where}: triggering_interval {clip(interval)}: Orca waits the duration on the wall clock before "
                "computing a timestamp short of c1 keys, so the rows computed would depend on when they arrived and "
                "a replay after a restart would differ; give the second element as a key count c2 < c1, e.g. "
                f"triggering_interval=({clip(interval[0])}, 1)")
        counts = interval if isinstance(interval, tuple) else (interval,)
        if not 1 <= len(counts) <= 2 or not all(_is_count(c) for c in counts):
            raise GraphDefinitionError(f"{where}: triggering_pattern 'key_count' needs triggering_interval, a key count "
                                       f"(an int >= 1) or a pair (c1, c2) of counts with c2 < c1; got {clip(interval)}")
        if len(counts) == 2 and counts[1] >= counts[0]:
            raise GraphDefinitionError(f"{where}: triggering_interval {clip(interval)}: c2 must be less than c1")
        object.__setattr__(self, "triggering_interval", tuple(int(c) for c in counts) if len(counts) == 2
                           else int(counts[0]))

    @property
    def per_key(self) -> bool:
        """Metrics with per-key values (a column outside aggregates, ``rank``): one output row per key (Orca's
        ``context by`` form), aggregates repeated on each."""
        return any(_per_key(expr) for _, expr in self._outputs)

    def output_schema(self) -> Schema:
        cols = [("time", "timestamp")]
        if self.context_by_column:
            cols.append((self.context_by_column, self.input_schema[self.context_by_column]))
        if self.per_key:
            cols += [(k, self.input_schema[k]) for k in self.key_column]
        return Schema(tuple(cols + [(n, infer_type(e, self.input_schema, where=self.where, kinds=CROSS_KINDS))
                                    for n, e in self._outputs]))

    def properties(self) -> dict[str, Any]:
        interval = self.triggering_interval
        return {"metrics": [str(m) for m in self.metrics], "keyColumn": list(self.key_column),
                "triggeringPattern": self.triggering_pattern,
                "triggeringInterval": format_duration(interval) if isinstance(interval, timedelta) else
                list(interval) if isinstance(interval, tuple) else interval,
                "timeColumn": self.time_column, "useSystemTime": self.use_system_time,
                "contextByColumn": self.context_by_column, "lastBatchOnly": self.last_batch_only,
                "roundTime": self.round_time, "keyFilter": None if self.key_filter is None else str(self.key_filter),
                # absent when False, so graphs stored before it existed resume with an unchanged plan
                **({"updatedContextGroupsOnly": True} if self.updated_context_groups_only else {})}



CROSS_KINDS = frozenset({"scalar", "aggregate", "cross_section"})


def _is_kind(node: Expr, kind: str) -> bool:
    return isinstance(node, Call) and node.func in FUNCTIONS and FUNCTIONS[node.func].kind == kind


def _outside_aggregates(expr: Expr) -> list[Expr]:
    """The parts of ``expr`` evaluated per key: columns and ``rank`` calls outside aggregates."""
    if isinstance(expr, Col) or _is_kind(expr, "cross_section"):
        return [expr]
    if isinstance(expr, Call) and not _is_kind(expr, "aggregate"):
        return [part for a in expr.args for part in _outside_aggregates(a)]
    return []


def _per_key(expr: Expr) -> bool:
    return bool(_outside_aggregates(expr))


def check_cross_metric(name: str, expr: Expr, schema: Schema, *, where: str, taken: set[str]) -> None:
    """A cross-sectional metric: aggregates over the keys, ``rank`` and numeric columns of each key's latest row."""
    w = f"{where} metric {clip(name)}"
    if name in taken:
        raise GraphDefinitionError(f"{w}: the name repeats an output column ({', '.join(sorted(taken))}); rename it "
                                   "with 'as' (key columns are in the output already)")
    typ = infer_type(expr, schema, where=w, kinds=CROSS_KINDS)
    if typ == "string":
        raise GraphDefinitionError(f"{w}: string results are not supported in a cross-sectional metric")
    for node in expr.walk():
        if _is_kind(node, "aggregate"):
            assert isinstance(node, Call)
            if node.func not in AGGREGATES:
                raise GraphDefinitionError(f"{w}: {node} has no order across keys; use {', '.join(AGGREGATES)}")
            if any(_is_kind(n, "cross_section") for n in node.args[0].walk()):
                raise GraphDefinitionError(f"{w}: {node} aggregates a rank; rank inside an aggregate is not supported")
        if _is_kind(node, "cross_section"):
            assert isinstance(node, Call)
            inner = [n for n in node.args[0].walk() if _is_kind(n, "aggregate") or _is_kind(n, "cross_section")]
            if inner:
                raise GraphDefinitionError(f"{w}: {node} ranks {inner[0]}; rank a row expression, e.g. rank(price)")
    for part in _outside_aggregates(expr):
        if isinstance(part, Col) and schema[part.name] not in NUMERIC and schema[part.name] != "bool":
            raise GraphDefinitionError(f"{w}: column {clip(part.name)} of type {schema[part.name]} is used outside an "
                                       "aggregate; only numeric columns can be (key columns are in the output already)")


class CrossMetrics:
    """What the engine keeps of each key's latest row — each aggregate's argument, each ``rank``'s argument and
    each column used outside aggregates: one float64 column each — and how each metric is computed from them."""

    def __init__(self, outputs: Sequence[tuple[str, Expr]], schema: Schema, out_types: Sequence[str]) -> None:
        self.schema, self.out_types = schema, list(out_types)
        self.aggs: list[Call] = []
        self.ranks: list[Call] = []
        self.columns: list[str] = []
        self.post: list[Expr] = [self._replace(expr) for _, expr in outputs]
        self.exprs: list[Expr] = [a.args[0] for a in self.aggs] + [r.args[0] for r in self.ranks] + \
            [Col(c) for c in self.columns]
        self.needed = sorted({c for e in self.exprs for c in e.columns()})

    def _replace(self, expr: Expr) -> Expr:
        if _is_kind(expr, "aggregate") or _is_kind(expr, "cross_section"):
            assert isinstance(expr, Call)
            found = self.aggs if _is_kind(expr, "aggregate") else self.ranks
            keys = [c.key() for c in found]
            if expr.key() not in keys:
                found.append(expr)
                keys.append(expr.key())
            return Col(f"__{'agg' if found is self.aggs else 'rank'}{keys.index(expr.key())}")
        if isinstance(expr, Col):
            if expr.name not in self.columns:
                self.columns.append(expr.name)
            return Col(f"__col{self.columns.index(expr.name)}")
        if isinstance(expr, Call):
            return Call(expr.func, tuple(self._replace(a) for a in expr.args), expr.params)
        return expr

    @property
    def width(self) -> int:
        return len(self.exprs)

    def arguments(self, table: pa.Table) -> np.ndarray:
        """One row per input row, one float64 column per kept value (NaN = NULL)."""
        n = table.num_rows
        columns = {c: to_numpy(table[c], self.schema[c]) for c in self.needed}
        values = [np.asarray(evaluate_rowwise(e, columns, n), dtype=np.float64) for e in self.exprs]
        return np.column_stack(values) if values else np.empty((n, 0))

    def evaluate(self, kept: np.ndarray, per_key: bool) -> list[np.ndarray]:
        """The metrics over one cross-section (``kept``: its keys' values, a row per key): one value, or with
        ``per_key`` one value per key."""
        n_aggs, n_ranks = len(self.aggs), len(self.ranks)
        m = len(kept) if per_key else 1
        env: dict[str, np.ndarray] = {f"__agg{j}": np.full(m, over_groups(kept[:, j], np.zeros(len(kept), np.int64), 1, a.func)[0])
                                      for j, a in enumerate(self.aggs)}
        for r, call in enumerate(self.ranks):
            env[f"__rank{r}"] = _rank(kept[:, n_aggs + r], **dict(call.params))
        for c in range(len(self.columns)):
            env[f"__col{c}"] = kept[:, n_aggs + n_ranks + c]
        return [np.full(m, np.nan if e.value is None else float(e.value)) if isinstance(e, Lit)
                else np.asarray(evaluate_rowwise(e, env, m), dtype=np.float64) for e in self.post]


def _rank(values: np.ndarray, ascending: bool = True, percent: bool = False) -> np.ndarray:
    """DolphinDB's rank: 0-based, ties share the lowest rank, NULL ranks NULL."""
    out = np.full(len(values), np.nan)
    present = ~np.isnan(values)
    if present.any():
        v = values[present] if ascending else -values[present]
        ranks = pd.Series(v).rank(method="min").to_numpy() - 1
        out[present] = (ranks + 1) / present.sum() if percent else ranks
    return out


class _Section:
    """One task's cross-section while a micro-batch runs: per key slot, its latest row's aggregate arguments,
    context group, key-filter outcome and time, and whether the key is in the cross-section at all."""

    def __init__(self, state: dict[str, Any], n_keys: int, n_aggs: int, context: bool) -> None:
        old = len(state["args"])
        self.args = np.full((n_keys, n_aggs), np.nan)
        self.args[:old] = state["args"]
        self.present = np.zeros(n_keys, dtype=bool)
        self.present[:old] = state.get("present", np.ones(old, dtype=bool))
        self.passes = np.ones(n_keys, dtype=bool)
        self.passes[:old] = state.get("passes", np.ones(old, dtype=bool))
        self.time = np.full(n_keys, np.nan)
        self.time[:old] = state.get("time", np.full(old, np.nan))
        self.context: list[Any] | None = (list(state["context"]) + [None] * (n_keys - len(state["context"]))
                                          if context else None)
        self.touched: set[Any] = set(state.get("touched", ()))  # context groups updated since the last output

    def put(self, slots: np.ndarray, args: np.ndarray, passes: np.ndarray, times: np.ndarray,
            context: list[Any] | None) -> None:
        """Take in rows (in arrival order): a key's last row wins."""
        if len(slots) == 0:
            return
        last_of = np.full(len(self.args), -1, dtype=np.int64)
        np.maximum.at(last_of, slots, np.arange(len(slots)))  # each slot's last row; linear, unlike a sort
        keys = np.flatnonzero(last_of >= 0)
        last = last_of[keys]
        if self.context is not None and context is not None:  # a key that changes group changes both groups
            self.touched.update(self.context[k] for k in keys[self.present[keys]].tolist())
            self.touched.update(context[i] for i in last.tolist())
        self.args[keys] = args[last]
        self.passes[keys] = passes[last]
        self.time[keys] = times[last]
        self.present[keys] = True
        if self.context is not None and context is not None:
            for k, i in zip(keys.tolist(), last.tolist(), strict=True):
                self.context[k] = context[i]

    def keys_at(self, t: float) -> int:
        """How many keys have their latest row at time ``t``."""
        return int(np.count_nonzero(self.present & (self.time == t)))

    def clear(self) -> None:
        self.present[:] = False

    def state(self, keys: list[Any]) -> dict[str, Any]:
        return {"keys": keys, "args": self.args, "context": self.context or [], "present": self.present,
                "passes": self.passes, "time": self.time, "touched": sorted(self.touched, key=lambda g: (g is None, g))}


class CrossSectionalProcessor(Processor, runs=CrossSectionalEngine):
    def __init__(self, spec: CrossSectionalEngine) -> None:
        self.spec = spec
        self.out_schema = spec.output_schema()
        first_metric = 2 if spec.context_by_column else 1
        first_metric += len(spec.key_column) if spec.per_key else 0
        self.metrics = CrossMetrics(spec._outputs, spec.input_schema, [t for _, t in self.out_schema.columns[first_metric:]])
        interval = spec.triggering_interval
        if spec.triggering_pattern == "key_count":
            assert isinstance(interval, int | tuple)
            self.c1, self.c2 = interval if isinstance(interval, tuple) else (interval, 1)
        if isinstance(interval, timedelta):
            self.window = to_micros(interval)
            self.align = alignment_micros(self.window, round_time=spec.round_time)

    def new_state(self) -> dict[str, Any]:
        # per key slot: each aggregate's argument in the key's latest row, its context group, ...; see _Section
        return {"keys": [], "args": np.empty((0, self.metrics.width)), "context": []}

    def stats(self, state: dict[str, Any]) -> dict[str, int]:
        """``late_rows``: rows the data-time triggers dropped (older than the cross-section, or a NULL time)."""
        return {"keys": len(state["keys"]), "late_rows": int(state.get("trigger_dropped", 0))}

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec = self.spec
        n = table.num_rows
        if n == 0:
            return state, self._arrow_schema().empty_table()
        keys = KeyTable(state["keys"])
        rows = _Rows(self, table, keys.slots_from_arrow([table[k] for k in spec.key_column]))
        section = _Section(state, len(keys), self.metrics.width, spec.context_by_column is not None)
        out = _Output(self, section, keys)
        trigger = {k: v for k, v in state.items() if k.startswith("trigger_")}
        match spec.triggering_pattern:
            case "key_count":
                trigger = self._key_count(trigger, rows, section, out)
            case "data_interval":
                trigger = self._data_interval(trigger, rows, section, out)
            case "interval":  # data_interval's windows over system time: every row at the batch's commit time
                rows.times = np.full(n, float(int(batch_time * 1e6)))
                trigger = self._data_interval(trigger, rows, section, out)
            case pattern:
                if pattern == "per_row":
                    ends = np.arange(1, n + 1)
                else:  # one trigger per append: the last row of each input version
                    versions = rows.seqs >> SEQ_SHIFT
                    ends = np.flatnonzero(np.append(versions[1:] != versions[:-1], True)) + 1
                start = 0
                for end in ends:
                    rows.put_into(section, np.arange(start, end))
                    when = batch_time * 1e6 if spec.use_system_time or spec.time_column is None else rows.times[end - 1]
                    out.compute(when, rows.seqs[end - 1])
                    start = end
        return {**section.state(keys.keys), **trigger}, out.table()

    def _key_count(self, st: dict[str, Any], rows: _Rows, section: _Section, out: _Output) -> dict[str, Any]:
        """Runs of rows with one time in one append, each taken in at once; see the module's docstring.

        ``cur``: the newest timestamp taken into the cross-section, ``fired`` whether it was computed;
        ``next`` and ``held``: the rows of a newer timestamp held back while ``cur`` waits for c1 keys."""
        cur: float | None = st.get("trigger_cur")
        fired: bool = st.get("trigger_fired", False)
        nxt: float | None = st.get("trigger_next")
        held: list[tuple[Any, ...]] = list(st.get("trigger_held", []))  # (slot, args, passes, time, context)
        dropped: int = st.get("trigger_dropped", 0)
        last_batch_only = self.spec.last_batch_only

        def fire(seq: int) -> None:
            nonlocal fired
            out.compute(cur, seq)
            fired = True

        def check(seq: int) -> None:
            if not fired and cur is not None and section.keys_at(cur) >= self.c1:
                fire(seq)

        def advance(t: float) -> None:
            nonlocal cur, fired
            cur, fired = t, False
            if last_batch_only:
                section.clear()

        def promote(seq: int) -> None:
            nonlocal nxt, held
            assert nxt is not None
            advance(nxt)
            if held:
                slots, args, passes, times, context = (list(c) for c in zip(*held, strict=True))
                section.put(np.array(slots, dtype=np.int64),
                            np.array(args, dtype=np.float64).reshape(len(slots), section.args.shape[1]),
                            np.array(passes, dtype=bool), np.array(times), context)
            nxt, held = None, []
            check(seq)

        times, seqs = rows.times, rows.seqs
        index = np.flatnonzero(~np.isnan(times))
        dropped += len(times) - len(index)  # rows without a time
        for run in _runs(index, seqs[index] >> SEQ_SHIFT, times[index]):
            t_run, first, last = float(times[run[0]]), int(seqs[run[0]]), int(seqs[run[-1]])
            if cur is None:
                advance(t_run)
            assert cur is not None
            if t_run < cur or (nxt is not None and t_run < nxt and t_run != cur):
                dropped += len(run)  # out of order: older than the newest timestamp taken in
                continue
            if t_run == cur:
                rows.put_into(section, run)
                check(last)
                if fired and nxt is not None:
                    promote(last)
                continue
            if nxt is not None and t_run > nxt:  # a third timestamp: the waiting one is computed now
                fire(first)
                promote(first)
            if fired:
                advance(t_run)
                rows.put_into(section, run)
                check(last)
                continue
            nxt = t_run  # cur waits for c1 keys; hold this timestamp's rows back
            held.extend(rows.held(run))
            if len({h[0] for h in held}) >= self.c2:
                fire(last)
                promote(last)
        return {"trigger_cur": cur, "trigger_fired": fired, "trigger_next": nxt, "trigger_held": held,
                "trigger_dropped": dropped}

    def _data_interval(self, st: dict[str, Any], rows: _Rows, section: _Section, out: _Output) -> dict[str, Any]:
        """Rows by window of data time (``window`` long, from ``left0``, the aligned first row's time)."""
        left0: int | None = st.get("trigger_left0")
        open_window: int | None = st.get("trigger_window")  # index of the window the latest rows are in
        dropped: int = st.get("trigger_dropped", 0)
        index = np.flatnonzero(~np.isnan(rows.times))
        dropped += len(rows.times) - len(index)  # rows without a time
        if len(index) == 0:
            return {"trigger_left0": left0, "trigger_window": open_window, "trigger_dropped": dropped}
        t = rows.times[index].astype(np.int64)
        if left0 is None:
            left0 = int(t[0] // self.align * self.align)
        w = (t - left0) // self.window
        newest = np.maximum.accumulate(np.concatenate([[w[0] if open_window is None else open_window], w]))[:-1]
        keep = w >= newest  # a row of a window already computed is dropped
        dropped += int(np.count_nonzero(~keep))
        for run in _runs(np.flatnonzero(keep), w[keep]):
            window = int(w[run[0]])
            if open_window is not None and window > open_window:  # the first row past the window's end
                out.compute(float(left0 + (open_window + 1) * self.window), int(rows.seqs[index[run[0]]]))
            rows.put_into(section, index[run])
            open_window = window
        return {"trigger_left0": left0, "trigger_window": open_window, "trigger_dropped": dropped}


def _runs(index: np.ndarray, *keys: np.ndarray) -> list[np.ndarray]:
    """``index`` cut into runs where none of ``keys`` (each aligned with ``index``) changes."""
    if len(index) == 0:
        return []
    change = np.zeros(len(index) - 1, dtype=bool)
    for key in keys:
        change |= key[1:] != key[:-1]
    return np.split(index, np.flatnonzero(change) + 1)


class _Rows:
    """A micro-batch's rows as the engine reads them: key slots, aggregate arguments, key-filter outcomes,
    times (microseconds, NaN = NULL), context values and order."""

    def __init__(self, processor: CrossSectionalProcessor, table: pa.Table, slots: np.ndarray) -> None:
        spec, n = processor.spec, table.num_rows
        self.slots = slots
        self.args = processor.metrics.arguments(table)
        self.context = table[spec.context_by_column].to_pylist() if spec.context_by_column else None
        self.times = to_numpy(table[spec.time_column], "timestamp") if spec.time_column else np.full(n, np.nan)
        self.seqs = table[SEQ].to_numpy()
        if spec.key_filter is None:
            self.passes = np.ones(n, dtype=bool)
        else:
            columns = {c: to_numpy(table[c], spec.input_schema[c]) for c in spec.key_filter.columns()}
            self.passes = filter_mask(evaluate_rowwise(spec.key_filter, columns, n))

    def put_into(self, section: _Section, rows: np.ndarray) -> None:
        section.put(self.slots[rows], self.args[rows], self.passes[rows], self.times[rows],
                    None if self.context is None else [self.context[i] for i in rows.tolist()])

    def held(self, rows: np.ndarray) -> list[tuple[Any, ...]]:
        """``rows`` as plain values, to be kept in the state until they are taken in."""
        return [(int(self.slots[i]), self.args[i].tolist(), bool(self.passes[i]), float(self.times[i]),
                 None if self.context is None else self.context[i]) for i in rows.tolist()]


class _Output:
    """The rows a micro-batch emits: one per trigger (per context group), or one per key with per-key metrics."""

    def __init__(self, processor: CrossSectionalProcessor, section: _Section, keys: KeyTable) -> None:
        self.processor, self.section, self.keys = processor, section, keys
        self.time: list[float] = []
        self.context: list[Any] = []
        self.slots: list[np.ndarray] = []
        self.values: list[list[np.ndarray]] = []
        self.seq: list[int] = []
        self.rows = 0

    def compute(self, when: Any, seq: Any) -> None:
        """The metrics over the cross-section as it stands: keys present and passing the key filter."""
        section, metrics = self.section, self.processor.metrics
        per_key = self.processor.spec.per_key
        members = section.present & section.passes
        if section.context is None:
            groups: list[tuple[Any, np.ndarray]] = [(None, members)]
        else:
            context = np.empty(len(section.context), dtype=object)
            context[:] = section.context
            values = sorted({context[s] for s in np.flatnonzero(members)}, key=lambda g: (g is None, g))
            if self.processor.spec.updated_context_groups_only:
                values = [g for g in values if g in section.touched]
            groups = [(g, members & np.array([c == g for c in context], dtype=bool)) for g in values]
            section.touched.clear()
        for group, rows in groups:
            slots = np.flatnonzero(rows)
            if per_key and len(slots) == 0:
                continue
            n = len(slots) if per_key else 1
            self.time += [float(when)] * n
            self.context += [group] * n
            self.slots.append(slots if per_key else np.full(1, -1))
            self.values.append(metrics.evaluate(section.args[slots], per_key))
            self.seq += [int(seq)] * n
            self.rows += n

    def table(self) -> pa.Table:
        processor = self.processor
        spec = processor.spec
        arrays: list[pa.Array] = [to_arrow(np.asarray(self.time, dtype=np.float64), "timestamp")]
        if spec.context_by_column:
            arrays.append(pa.array(self.context, type=spec.input_schema.to_arrow().field(spec.context_by_column).type))
        if spec.per_key:
            slots = np.concatenate(self.slots) if self.slots else np.empty(0, dtype=np.int64)
            schema = spec.input_schema.to_arrow()
            for i, k in enumerate(spec.key_column):
                arrays.append(self.keys.column(slots, i, len(spec.key_column), schema.field(k).type))
        for j, typ in enumerate(processor.metrics.out_types):
            column = np.concatenate([v[j] for v in self.values]) if self.values else np.empty(0)
            arrays.append(to_arrow(column, typ))
        arrays.append(pa.array(self.seq, type=pa.int64()))
        return pa.table(arrays, schema=processor._arrow_schema())
