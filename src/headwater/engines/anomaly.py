"""The anomaly detection engine: one output row per violated condition (Orca's anomalyDetectionEngine, C.10).

``metrics`` are boolean conditions; each row or window for which one is true gives an output row: time,
keys, ``type`` (the condition's index) and ``metric`` (its text, or its ``anomaly_description``). Three
kinds of condition, by where aggregates appear:

1. **row conditions** (no aggregate: ``qty < 4``, ``qty > prev(qty)``): checked on every row, out-of-order
   rows included; sequence (state) functions such as ``prev`` or ``mavg`` run per key in arrival order, as
   in the reactive state engine;
2. **window conditions** (only aggregates: ``sum(qty) > 5``): checked once per window, when a later row of
   the key closes it, as the time-series engine closes windows (output time: the window's end);
3. **mixed conditions** (``avg(qty) > qty``): each row against its key's last closed window (the one its
   own row may have just closed); nothing before a key's first window closes.

Windows are the time-series engine's (same alignment, ``window`` a multiple of ``step``; rows older than
their key's newest are dropped from windows). A NULL condition counts as false. For each input row, its
window outputs come first, then its row and mixed conditions in ``metrics`` order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.durations import format_duration
from headwater.engines.arguments import arg, columns, duration, metric_list, optional
from headwater.engines.base import (
    SEQ,
    EngineKind,
    KeyTable,
    OneInputEngine,
    Processor,
    resolve_columns,
    resolve_expr,
)
from headwater.engines.columns import evaluate_rowwise, filter_mask, to_numpy
from headwater.engines.reactive_state import MetricDag
from headwater.engines.time_series import TimeSeriesEngine
from headwater.engines.window_metrics import aggregates_of, replace_aggregates
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Alias, Call, Col, Expr
from headwater.functions import FUNCTIONS, expand_aggregates, infer_type
from headwater.types import TEMPORAL, Schema

ROW, WINDOW, MIXED = "row", "window", "mixed"
NOT_IN_CONDITIONS = frozenset({"iterate", "linear_time_trend", "talib_null"})  # Orca refuses these here


def _check_sequence_functions(metric: Expr, *, where: str) -> None:
    """Sequence (state) functions run per key over rows, so they and aggregates do not nest either way."""
    for node in metric.walk():
        if not (isinstance(node, Call) and node.func in FUNCTIONS):
            continue
        kind = FUNCTIONS[node.func].kind
        if kind == "state" and node.func in NOT_IN_CONDITIONS:
            raise GraphDefinitionError(f"{where}: {node.func}() cannot be used in an anomaly condition (as in Orca)")
        inner = [n for a in node.args for n in a.walk() if isinstance(n, Call) and n.func in FUNCTIONS
                 and FUNCTIONS[n.func].kind == ("aggregate" if kind == "state" else "state")]
        if kind in ("state", "aggregate") and inner:
            raise GraphDefinitionError(f"{where}: {inner[0]} inside {node}: sequence functions and aggregates "
                                       "cannot be nested in each other")


@dataclass(frozen=True)
class AnomalyDetectionEngine(OneInputEngine):
    """Parameters of ``anomaly_detection_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.ANOMALY_DETECTION
    metrics: tuple[Expr, ...] = field(metadata=arg(metric_list))
    time_column: str
    key_column: tuple[str, ...] = field(default=(), metadata=arg(columns))
    window: timedelta | None = field(default=None, metadata=arg(optional(duration)))
    step: timedelta | None = field(default=None, metadata=arg(optional(duration)))
    garbage_size: int = 2000
    round_time: bool = True
    anomaly_description: tuple[str, ...] = field(default=(), metadata=arg(columns))
    _kinds: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        schema = self.input_schema
        (time_col,) = resolve_columns((self.time_column,), schema, what="time_column", where=where)
        if schema[time_col] not in TEMPORAL:
            raise GraphDefinitionError(f"{where}: time_column {clip(time_col)} has type {schema[time_col]}; "
                                       "expected timestamp or date")
        object.__setattr__(self, "time_column", time_col)
        object.__setattr__(self, "key_column", resolve_columns(self.key_column, schema, what="key_column", where=where))
        if not self.metrics:
            raise GraphDefinitionError(f"{where}: metrics is empty; e.g. metrics=['qty < 4', 'sum(qty) > 5']")
        kinds, resolved = [], []
        for i, metric in enumerate(self.metrics):
            w = f"{where} metric {i} {clip(metric)}"
            if isinstance(metric, Alias):
                raise GraphDefinitionError(f"{w}: a condition has no output name; describe it with anomaly_description")
            metric = expand_aggregates(metric)
            typ = infer_type(metric, schema, where=w, kinds=frozenset({"scalar", "aggregate", "state"}))
            if typ != "bool":
                raise GraphDefinitionError(f"{w}: a condition must be true or false, got a {typ}; e.g. 'qty < 4'")
            aggs = aggregates_of(metric)
            if any(aggregates_of(a.args[0]) for a in aggs):
                raise GraphDefinitionError(f"{w}: aggregates cannot be nested")
            _check_sequence_functions(metric, where=w)
            outside = replace_aggregates(metric, {a.key(): i for i, a in enumerate(aggs)}).columns()
            kinds.append(ROW if not aggs else MIXED if any(not c.startswith("__agg") for c in outside) else WINDOW)
            resolved.append(resolve_expr(metric, schema))
        if any(k != ROW for k in kinds) and (self.window is None or self.step is None):
            raise GraphDefinitionError(f"{where}: conditions with aggregates need window and step, "
                                       "e.g. window='3s', step='3s'")
        if self.anomaly_description and len(self.anomaly_description) != len(self.metrics):
            raise GraphDefinitionError(f"{where}: anomaly_description has {len(self.anomaly_description)} entries for "
                                       f"{len(self.metrics)} metrics; give one per metric")
        object.__setattr__(self, "metrics", tuple(resolved))
        object.__setattr__(self, "_kinds", tuple(kinds))
        try:
            engine = self.window_engine()
        except GraphDefinitionError as exc:  # window/step mismatch, named as this engine
            raise GraphDefinitionError(str(exc).replace("time_series_engine", "anomaly_detection_engine")) from None
        if engine is None and (self.window is not None or self.step is not None):
            raise GraphDefinitionError(f"{where}: window and step apply only to conditions with aggregates")

    def aggregates(self) -> list[Call]:
        out: dict[str, Call] = {}
        for metric in self.metrics:
            for agg in aggregates_of(metric):
                out.setdefault(agg.key(), agg)
        return list(out.values())

    def window_engine(self) -> TimeSeriesEngine | None:
        """The time-series engine that computes the conditions' aggregates per window (None: no aggregates)."""
        aggs = self.aggregates()
        if not aggs:
            return None
        assert self.window is not None and self.step is not None
        return TimeSeriesEngine(
            name=self.name, input_schema=self.input_schema, window=self.window, step=self.step,
            metrics=tuple(Alias(a, (f"agg__{i}",)) for i, a in enumerate(aggs)), time_column=self.time_column,
            key_column=self.key_column, round_time=self.round_time)

    def output_schema(self) -> Schema:
        schema = self.input_schema
        cols = [(self.time_column, schema[self.time_column])] + [(k, schema[k]) for k in self.key_column]
        return Schema(tuple([*cols, ("type", "int"), ("metric", "string")]))

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {"metrics": [str(m) for m in self.metrics], "timeColumn": self.time_column,
                                 "keyColumn": list(self.key_column)}
        if self.window is not None and self.step is not None:
            props.update(windowSize=format_duration(self.window), step=format_duration(self.step))
        if self.anomaly_description:
            props["anomalyDescription"] = list(self.anomaly_description)
        return props



class AnomalyDetectionProcessor(Processor, runs=AnomalyDetectionEngine):
    def __init__(self, spec: AnomalyDetectionEngine) -> None:
        self.spec = spec
        self.out_schema = spec.output_schema().to_arrow().append(pa.field(SEQ, pa.int64()))
        engine = spec.window_engine()
        self.windows = engine.processor() if engine is not None else None
        aggs = spec.aggregates()
        index = {a.key(): i for i, a in enumerate(aggs)}
        self.n_aggs = len(aggs)
        self.mixed = MIXED in spec._kinds  # only mixed conditions read each row's latest window
        self.checks = [replace_aggregates(m, index) for m in spec.metrics]  # aggregates read as __agg<i>
        self.texts = list(spec.anomaly_description) or [str(m) for m in spec.metrics]
        # row and mixed conditions, evaluated per key in arrival order (sequence functions such as prev keep state)
        self.rows = MetricDag([c for c, kind in zip(self.checks, spec._kinds, strict=True) if kind != WINDOW])

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "windows": self.windows.new_state() if self.windows else None,
                "last": np.empty((0, self.n_aggs)), "rows": self.rows.new_state()}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec = self.spec
        table = table.filter(table[spec.time_column].is_valid())
        keys = KeyTable(state["keys"])
        slots = keys.slots_from_arrow([table[k] for k in spec.key_column]) if spec.key_column and table.num_rows \
            else np.zeros(table.num_rows, dtype=np.int64)
        grown = max(max(len(keys), 1) - len(state["last"]), 0)
        last = np.vstack([state["last"], np.full((grown, self.n_aggs), np.nan)])
        seq = table[SEQ].to_numpy()
        pieces: list[tuple[pa.Table, np.ndarray, int, int]] = []  # rows, their seq, phase (window 0, row 1), type
        windows_state, row_aggs = state["windows"], np.full((table.num_rows, self.n_aggs), np.nan)
        if self.windows is not None and table.num_rows:
            windows_state, closed = self.windows.process(state["windows"], table, batch_time=batch_time)
            found, window_slots = self._closed(closed, keys)
            if self.mixed:
                row_aggs = self._latest_windows(found, window_slots, closed[SEQ].to_numpy(), slots, seq, last)
            self._keep_last(found, window_slots, last)
            values = {f"__agg{i}": found[:, i] for i in range(self.n_aggs)}
            for i, (check, kind) in enumerate(zip(self.checks, spec._kinds, strict=True)):
                if kind == WINDOW:
                    hit = filter_mask(evaluate_rowwise(check, values, closed.num_rows))
                    pieces.append((closed.filter(pa.array(hit)), closed[SEQ].to_numpy()[hit], 0, i))
        rows_state = state.get("rows", self.rows.new_state())  # states saved before sequence functions lack it
        if table.num_rows and self.rows.nodes:
            columns: dict[str, Any] = {f"__agg{i}": row_aggs[:, i] for i in range(self.n_aggs)}
            for node in self.rows.nodes:
                if isinstance(node, Col) and node.name not in columns:
                    columns[node.name] = to_numpy(table[node.name], spec.input_schema[node.name])
            rows_state, evaluated = self.rows.evaluate(columns, table.num_rows, slots, max(len(keys), 1), rows_state)
            for i, (check, kind) in enumerate(zip(self.checks, spec._kinds, strict=True)):
                if kind != WINDOW:
                    hit = filter_mask(self.rows.value_of(evaluated, check))
                    pieces.append((table.filter(pa.array(hit)), seq[hit], 1, i))
        out = self._output(pieces)
        return {"keys": keys.keys, "windows": windows_state, "last": last, "rows": rows_state}, out

    def _latest_windows(self, values: np.ndarray, window_slots: np.ndarray, window_seq: np.ndarray,
                        slots: np.ndarray, seq: np.ndarray, last: np.ndarray) -> np.ndarray:
        """Each row's key's last closed window aggregates (a window its own row closed counts), from ``last``
        (before this batch) and this batch's closed windows."""
        out = last[slots].copy()
        if len(values):
            rows = pd.DataFrame({SEQ: seq, "slot": slots, "row": np.arange(len(seq))})
            found = pd.merge_asof(rows.sort_values(SEQ), pd.DataFrame({SEQ: window_seq, "slot": window_slots,
                                                                         "w": np.arange(len(values))}),
                                  on=SEQ, by="slot", direction="backward")
            has = found["w"].notna().to_numpy()
            out[found["row"].to_numpy()[has]] = values[found["w"].to_numpy()[has].astype(np.int64)]
        return out

    def _keep_last(self, values: np.ndarray, window_slots: np.ndarray, last: np.ndarray) -> None:
        """Updates ``last``: each key's latest closed window aggregates."""
        if len(values):
            last_of_key = pd.Series(np.arange(len(values))).groupby(window_slots).max()
            last[last_of_key.index.to_numpy()] = values[last_of_key.to_numpy()]

    def _closed(self, closed: pa.Table, keys: KeyTable) -> tuple[np.ndarray, np.ndarray]:
        """The closed windows' aggregates (one row each) and their keys' slots."""
        values = np.column_stack([closed[f"agg__{i}"].to_numpy(zero_copy_only=False).astype(np.float64)
                                  for i in range(self.n_aggs)]) if closed.num_rows else np.empty((0, self.n_aggs))
        key_names = self.spec.key_column
        window_slots = keys.slots_from_arrow([closed[k] for k in key_names]) if key_names and closed.num_rows \
            else np.zeros(closed.num_rows, dtype=np.int64)
        return values, window_slots

    def _output(self, pieces: list[tuple[pa.Table, np.ndarray, int, int]]) -> pa.Table:
        spec = self.spec
        names = [spec.time_column, *spec.key_column]
        parts, order = [], []
        for rows, seq, phase, i in pieces:
            if rows.num_rows == 0:
                continue
            arrays = [rows[n] for n in names] + [pa.array(np.full(rows.num_rows, i), pa.int32()),
                                                 pa.array([self.texts[i]] * rows.num_rows, pa.string()),
                                                 pa.array(seq, pa.int64())]
            parts.append(pa.table(arrays, schema=self.out_schema))
            order.append(np.column_stack([seq, np.full(len(seq), phase), np.full(len(seq), i)]))
        if not parts:
            return self.out_schema.empty_table()
        keys = np.vstack(order)
        return pa.concat_tables(parts).take(pa.array(np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))))
