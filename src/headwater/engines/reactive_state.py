"""The reactive state engine: one output row per input row, from the row and its key's state.

Metrics compile into a DAG whose nodes are unique by canonical text, so a shared
sub-expression (``ewm_mean(close, span=12)`` used by two metrics) runs once per row.
Every node is evaluated a whole column at a time: row-wise nodes with NumPy, state
nodes with the vectorised kernels of :mod:`headwater.kernels`, which walk the batch
in arrival order and keep per-key state. Because each state function is causal per
key, evaluating node by node over the batch equals evaluating row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from headwater.durations import format_duration
from headwater.engines.arguments import arg, as_given, columns, duration, expression, metric_list, optional
from headwater.engines.base import (
    SEQ,
    EngineKind,
    KeyedState,
    KeyTable,
    OneInputEngine,
    Processor,
    metric_outputs,
    resolve_columns,
    resolve_expr,
)
from headwater.engines.columns import (
    evaluate_rowwise,
    evaluate_scalar,
    filter_mask,
    literal_array,
    to_arrow,
    to_numpy,
)
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Call, Col, Expr, Item, Lit
from headwater.functions import FUNCTIONS, infer_type
from headwater.types import Schema

RSE_KINDS = frozenset({"scalar", "state"})


@dataclass(frozen=True)
class ReactiveStateEngine(OneInputEngine):
    """Parameters of ``reactive_state_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.REACTIVE_STATE
    metrics: tuple[Expr, ...] = field(metadata=arg(metric_list))
    key_column: tuple[str, ...] = field(default=(), metadata=arg(columns))
    filter: Expr | None = field(default=None, metadata=arg(expression))
    keep_order: bool = True
    key_purge_filter: Expr | None = field(default=None, metadata=arg(expression))
    key_purge_freq: timedelta | None = field(default=None, metadata=arg(optional(duration)))
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        if (self.key_purge_filter is None) != (self.key_purge_freq is None):
            raise GraphDefinitionError(
                f"{where}: pass both key_purge_filter= and key_purge_freq= (or neither); "
                "e.g. key_purge_filter='volume == 0', key_purge_freq='60s'"
            )
        if not self.metrics:
            raise GraphDefinitionError(f"{where}: metrics is empty; e.g. metrics=['time', 'ema(close, 20) as ema20']")
        keys = resolve_columns(self.key_column, self.input_schema, what="key_column", where=where)
        object.__setattr__(self, "key_column", keys)
        outputs = metric_outputs(self.metrics, where=where, aggregates=False)
        clash = [n for n, _ in outputs if n in keys]
        if clash:
            raise GraphDefinitionError(
                f"{where}: metric name(s) {clash} repeat the key column, which is already the first output column"
            )
        for name, expr in outputs:
            infer_type(expr, self.input_schema, where=f"{where} metric {clip(name)}", kinds=RSE_KINDS)
        if self.filter is not None:
            infer_type(self.filter, self.input_schema, where=f"{where} filter", kinds=RSE_KINDS)
        object.__setattr__(self, "_outputs", tuple(outputs))
        if self.key_purge_filter is not None:
            if not self.key_column:
                raise GraphDefinitionError(f"{where}: key purging needs key_column")
            infer_type(self.key_purge_filter, self.output_schema(), where=f"{where} key_purge_filter",
                       kinds=frozenset({"scalar"}))

    def output_schema(self) -> Schema:
        schema = self.input_schema
        cols = [(k, schema[k]) for k in self.key_column]
        cols += [(n, infer_type(e, schema, where=self.where, kinds=RSE_KINDS)) for n, e in self._outputs]
        return Schema(tuple(cols))

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {
            "metrics": [str(m) for m in self.metrics],
            "keyColumn": list(self.key_column),
            "filter": None if self.filter is None else str(self.filter),
            "keepOrder": self.keep_order,
        }
        if self.key_purge_filter is not None and self.key_purge_freq is not None:
            props["keyPurgeFilter"] = str(self.key_purge_filter)
            props["keyPurgeFreq"] = format_duration(self.key_purge_freq)
        return props




class MetricDag:
    """Unique expression nodes in evaluation order, with a kernel for each state node."""

    def __init__(self, roots: Sequence[Expr]) -> None:
        from headwater.kernels.registry import make_state_op

        self.nodes: list[Expr] = []
        self.index: dict[str, int] = {}
        self.state_ops: dict[int, Any] = {}
        for root in roots:
            for node in root.walk():
                k = node.key()
                if k in self.index:
                    continue
                self.index[k] = len(self.nodes)
                if isinstance(node, Call) and FUNCTIONS[node.func].kind == "state":
                    self.state_ops[len(self.nodes)] = make_state_op(node.func, dict(node.params))
                self.nodes.append(node)

    def new_state(self) -> dict[int, Any]:
        return {i: op.init_state() for i, op in self.state_ops.items()}

    def evaluate(
        self, columns: dict[str, np.ndarray], n: int, slots: np.ndarray, n_keys: int, state: dict[int, Any]
    ) -> tuple[dict[int, Any], list[np.ndarray]]:
        values: list[np.ndarray] = []
        new_state = dict(state)
        for i, node in enumerate(self.nodes):
            if isinstance(node, Col):
                values.append(columns[node.name])
            elif isinstance(node, Lit):
                values.append(literal_array(node, n))
            elif isinstance(node, Item):  # one output of a multi-output state function
                values.append(values[self.index[node.expr.key()]][node.index])
            elif isinstance(node, Call):
                args = [values[self.index[a.key()]] for a in node.args]
                if i in self.state_ops:
                    float_args = [np.asarray(a, dtype=np.float64) for a in args]
                    new_state[i], outs = self.state_ops[i].run(state[i], slots, n_keys, float_args)
                    values.append(outs[0] if len(outs) == 1 else outs)
                else:
                    values.append(evaluate_scalar(node, args))
            else:
                raise TypeError(f"unsupported node {clip(node)}")
        return new_state, values

    def value_of(self, values: list[np.ndarray], expr: Expr) -> np.ndarray:
        return values[self.index[expr.key()]]


class ReactiveStateProcessor(Processor, runs=ReactiveStateEngine):
    def __init__(self, spec: ReactiveStateEngine) -> None:
        self.spec = spec
        schema = spec.input_schema
        self.outputs = [(n, resolve_expr(e, schema)) for n, e in spec._outputs]
        self.filter = None if spec.filter is None else resolve_expr(spec.filter, schema)
        roots = [e for _, e in self.outputs] + ([self.filter] if self.filter is not None else [])
        self.dag = MetricDag(roots)
        self.out_schema = spec.output_schema()
        self.needed = sorted({c for r in roots for c in r.columns()})

        self.purge_columns = sorted(set(spec.key_purge_filter.columns())) if spec.key_purge_filter is not None else []

    def new_state(self) -> KeyedState:
        return KeyedState(KeyTable(), _flat(self.dag.new_state()), {"last_purge": None})

    def process(self, state: KeyedState | dict[str, Any], table: pa.Table, *,
                batch_time: float = 0.0) -> tuple[KeyedState, pa.Table]:
        if isinstance(state, dict):  # as saved by 0.1.0
            last = {f"last/{c}": v for c, v in state["last"].items()}
            state = KeyedState(KeyTable(state["keys"]), {**_flat(state["ops"]), **last}, {"last_purge": state["last_purge"]})
        n = table.num_rows
        if n == 0:
            return state, self.empty_output()
        schema = self.spec.input_schema
        keys = state.keys
        key_columns = [table[k] for k in self.spec.key_column]
        slots = keys.slots_from_arrow(key_columns) if key_columns else np.zeros(n, dtype=np.int64)
        n_keys = max(len(keys), 1)
        columns = {c: to_numpy(table[c], schema[c]) for c in self.needed}
        ops_state, values = self.dag.evaluate(columns, n, slots, n_keys, _nested(state.columns)["ops"])
        arrays: list[pa.Array | pa.ChunkedArray] = [table[k] for k in self.spec.key_column]
        for (_name, expr), (_, typ) in zip(self.outputs, self.out_schema.columns[len(self.spec.key_column):], strict=True):
            if isinstance(expr, Col):
                arrays.append(table[expr.name])  # pass-through keeps exact values and types
            else:
                arrays.append(to_arrow(self.dag.value_of(values, expr), typ))
        arrays.append(table[SEQ])
        out = pa.table(arrays, schema=self._arrow_schema())
        if self.filter is not None:
            out = out.filter(pa.array(filter_mask(self.dag.value_of(values, self.filter))))
        state.columns.update(_flat(ops_state))
        state.touch(slots)
        if self.purge_columns:
            self._purge(state, slots, pa.table(arrays[:-1], schema=self.out_schema.to_arrow()), batch_time)
        return state, out

    def _purge(self, state: KeyedState, slots: np.ndarray, out: pa.Table, batch_time: float) -> None:
        """Orca's key purge: drop keys whose latest output matches the filter, if they are >= 10% of keys.

        Runs after a batch's output is computed, so a replayed batch still yields identical rows.
        """
        n_keys = len(state.keys)
        # remember each key's latest output values of the columns the filter reads
        last_row = np.full(n_keys, -1, dtype=np.int64)
        last_row[slots[::-1]] = np.arange(len(slots) - 1, -1, -1)
        seen = np.flatnonzero(last_row >= 0)
        for c in self.purge_columns:
            typ = self.out_schema[c]
            values = to_numpy(out[c], typ)
            old = state.columns.get(f"last/{c}", np.full(0, np.nan if typ != "string" else None, dtype=values.dtype))
            grown = np.full(n_keys, np.nan if typ != "string" else None, dtype=values.dtype)
            grown[: len(old)] = old
            grown[seen] = values[last_row[seen]]
            state.columns[f"last/{c}"] = grown
        now = batch_time  # the input's commit time, not the wall clock: replays purge identically
        last_purge = state.rest["last_purge"]
        if last_purge is not None:
            assert self.spec.key_purge_freq is not None and self.spec.key_purge_filter is not None
            if now - last_purge < self.spec.key_purge_freq.total_seconds():
                return
            last = _nested(state.columns).get("last", {})
            purge = filter_mask(evaluate_rowwise(self.spec.key_purge_filter, last, n_keys))
            if purge.sum() >= max(1, 0.1 * n_keys):
                keep = ~purge
                state.keys = KeyTable([k for k, kept in zip(state.keys.keys, keep, strict=True) if kept])
                state.columns = {name: column[keep] for name, column in state.columns.items()}
                state.renumber()
        state.rest = {"last_purge": now}

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def empty_output(self) -> pa.Table:
        return self._arrow_schema().empty_table()


@dataclass(frozen=True)
class NarrowReactiveStateEngine(ReactiveStateEngine):
    """``narrow_reactive_state_engine``: the reactive state engine with long output.

    Each input row gives one output row per computed metric: key columns, the
    pass-through columns, ``metricName`` and ``value`` (Orca C.6).
    """

    kind: ClassVar[EngineKind] = EngineKind.NARROW_REACTIVE_STATE
    metric_names: tuple[str, ...] = field(default=(), metadata=arg(as_given(tuple)))

    def validate(self) -> None:
        super().validate()
        where = self.where
        computed = [n for n, e in self._outputs if not isinstance(e, Col)]
        if len(computed) != len(self.metric_names):
            raise GraphDefinitionError(
                f"{where}: {len(computed)} computed metrics need {len(computed)} metric_names, got "
                f"{len(self.metric_names)} {list(self.metric_names)}"
            )
        for name, expr in self._outputs:
            if not isinstance(expr, Col) and infer_type(expr, self.input_schema, where=where, kinds=RSE_KINDS) == "string":
                raise GraphDefinitionError(f"{where}: metric {clip(name)} is a string; narrow output values are numbers")

    def output_schema(self) -> Schema:
        wide = super().output_schema()
        keep = [(n, t) for n, t in wide.columns[len(self.key_column):] if isinstance(dict(self._outputs)[n], Col)]
        return Schema(tuple([*wide.columns[: len(self.key_column)], *keep, ("metricName", "string"), ("value", "double")]))

    def properties(self) -> dict[str, Any]:
        return {**super().properties(), "metricNames": list(self.metric_names)}



class NarrowProcessor(ReactiveStateProcessor, runs=NarrowReactiveStateEngine):
    def __init__(self, spec: NarrowReactiveStateEngine) -> None:
        wide = ReactiveStateEngine(spec.name, spec.input_schema, spec.metrics, spec.key_column, spec.filter,
                                   spec.keep_order, spec.key_purge_filter, spec.key_purge_freq)
        super().__init__(wide)
        self.narrow = spec
        self.narrow_schema = spec.output_schema()

    def empty_output(self) -> pa.Table:
        return self.narrow_schema.to_arrow().append(pa.field(SEQ, pa.int64())).empty_table()

    def process(self, state: KeyedState | dict[str, Any], table: pa.Table, *,
                batch_time: float = 0.0) -> tuple[KeyedState, pa.Table]:
        state, wide = super().process(state, table, batch_time=batch_time)
        if wide.num_rows == 0:
            return state, self.empty_output()
        spec = self.narrow
        fixed = [n for n in self.narrow_schema.names if n not in ("metricName", "value")]
        computed = [n for n, e in spec._outputs if not isinstance(e, Col)]
        m, n = len(computed), wide.num_rows
        take = np.repeat(np.arange(n), m)  # row-major: each input row, then its metrics in order
        columns = [wide[c].take(take) for c in fixed]
        names = pa.array(np.tile(np.array(spec.metric_names, dtype=object), n), pa.string())
        values = np.column_stack([wide[c].cast(pa.float64()).to_numpy(zero_copy_only=False) for c in computed]).ravel()
        out = pa.table([*columns, names, pa.array(values, pa.float64(), from_pandas=True), wide[SEQ].take(take)],
                       schema=self.empty_output().schema)
        return state, out


@dataclass(frozen=True)
class DualOwnershipReactiveStateEngine(OneInputEngine):
    """``dual_ownership_reactive_state_engine``: two reactive state engines over one input, keyed differently.

    Output (Orca C.7): common key columns, key_column1-only, key_column2-only, metrics1, metrics2 — one row per
    input row, always in input order.
    """

    kind: ClassVar[EngineKind] = EngineKind.DUAL_OWNERSHIP_REACTIVE_STATE
    metrics1: tuple[Expr, ...] = field(metadata=arg(metric_list))
    metrics2: tuple[Expr, ...] = field(metadata=arg(metric_list))
    key_column1: tuple[str, ...] = field(metadata=arg(columns))
    key_column2: tuple[str, ...] = field(metadata=arg(columns))

    def validate(self) -> None:
        self._engines()  # validates both halves
        names = self.output_schema().names  # validates unique names
        del names

    def _engines(self) -> tuple[ReactiveStateEngine, ReactiveStateEngine]:
        return (ReactiveStateEngine(f"{self.name}.1", self.input_schema, self.metrics1, self.key_column1),
                ReactiveStateEngine(f"{self.name}.2", self.input_schema, self.metrics2, self.key_column2))

    def output_schema(self) -> Schema:
        e1, e2 = self._engines()
        s1, s2 = e1.output_schema(), e2.output_schema()
        k1, k2 = e1.key_column, e2.key_column
        common = [k for k in k1 if k in k2]
        cols = [(k, self.input_schema[k]) for k in [*common, *[k for k in k1 if k not in common],
                                                    *[k for k in k2 if k not in common]]]
        cols += list(s1.columns[len(k1):]) + list(s2.columns[len(k2):])
        try:
            return Schema(tuple(cols))
        except Exception as exc:
            raise GraphDefinitionError(f"dual_ownership_reactive_state_engine {clip(self.name)}: {exc}") from None

    def properties(self) -> dict[str, Any]:
        return {"metrics1": [str(m) for m in self.metrics1], "metrics2": [str(m) for m in self.metrics2],
                "keyColumn1": list(self.key_column1), "keyColumn2": list(self.key_column2)}



class DualOwnershipProcessor(Processor, runs=DualOwnershipReactiveStateEngine):
    def __init__(self, spec: DualOwnershipReactiveStateEngine) -> None:
        e1, e2 = spec._engines()
        self.first, self.second = e1.processor(), e2.processor()
        self.spec = spec
        self.schema = spec.output_schema().to_arrow().append(pa.field(SEQ, pa.int64()))

    def new_state(self) -> dict[str, Any]:
        return {"first": self.first.new_state(), "second": self.second.new_state()}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        s1, out1 = self.first.process(state["first"], table, batch_time=batch_time)
        s2, out2 = self.second.process(state["second"], table, batch_time=batch_time)
        columns = {**{n: out2[n] for n in out2.column_names}, **{n: out1[n] for n in out1.column_names}}
        out = pa.table([columns[f.name] if f.name in columns else table[f.name] for f in self.schema],
                       schema=self.schema)
        return {"first": s1, "second": s2}, out


def _flat(ops: dict[int, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The state functions' per-key arrays as a :class:`KeyedState`'s columns, ``ops/<node>/<array>`` (beside
    them, ``last/<column>`` holds the key purge's latest outputs)."""
    return {f"ops/{i}/{name}": arr for i, arrays in ops.items() for name, arr in arrays.items()}


def _nested(columns: dict[str, np.ndarray]) -> dict[str, dict[Any, Any]]:
    """The inverse of :func:`_flat`: ``{"ops": {node: {array: values}}, "last": {column: values}}``."""
    out: dict[str, dict[Any, Any]] = {"ops": {}, "last": {}}
    for name, column in columns.items():
        kind, rest = name.split("/", 1)
        if kind == "ops":
            node, array = rest.split("/", 1)
            out["ops"].setdefault(int(node), {})[array] = column
        else:
            out["last"][rest] = column
    return out
