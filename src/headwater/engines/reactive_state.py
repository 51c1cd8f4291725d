"""The reactive state engine: one output row per input row, from the row and its key's state.

Metrics compile into a DAG whose nodes are unique by canonical text, so a shared
sub-expression (``ewm_mean(close, span=12)`` used by two metrics) runs once per row.
Every node is evaluated a whole column at a time: row-wise nodes with NumPy, state
nodes with the vectorised kernels of :mod:`headwater.state.ops`, which walk the batch
in arrival order and keep per-key state. Because each state function is causal per
key, evaluating node by node over the batch equals evaluating row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from headwater.engines.base import SEQ, EngineSpec, KeyTable, Processor, metric_outputs
from headwater.engines.columns import evaluate_scalar, filter_mask, literal_array, to_arrow, to_numpy
from headwater.errors import GraphDefinitionError
from headwater.expr import Call, Col, Expr, Item, Lit
from headwater.functions import FUNCTIONS, infer_type
from headwater.types import Schema

RSE_KINDS = frozenset({"scalar", "state"})


@dataclass(frozen=True)
class ReactiveStateEngine(EngineSpec):
    """Parameters of ``reactive_state_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[str] = "REACTIVE_STATE_ENGINE"
    name: str
    input_schema: Schema
    metrics: tuple[Expr, ...]
    key_column: tuple[str, ...] = ()
    filter: Expr | None = None
    keep_order: bool = True
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"reactive_state_engine {self.name!r}"
        if not self.metrics:
            raise GraphDefinitionError(f"{where}: metrics is empty; e.g. metrics=['time', 'ema(close, 20) as ema20']")
        keys = []
        for k in self.key_column:
            real = self.input_schema.lookup(k)
            if real is None:
                raise GraphDefinitionError(
                    f"{where}: key_column {k!r} is not an input column (input columns: {', '.join(self.input_schema.names)})"
                )
            keys.append(real)
        object.__setattr__(self, "key_column", tuple(keys))
        outputs = metric_outputs(self.metrics, where=where)
        clash = [n for n, _ in outputs if n in keys]
        if clash:
            raise GraphDefinitionError(
                f"{where}: metric name(s) {clash} repeat the key column, which is already the first output column"
            )
        for name, expr in outputs:
            infer_type(expr, self.input_schema, where=f"{where} metric {name!r}", kinds=RSE_KINDS)
        if self.filter is not None:
            infer_type(self.filter, self.input_schema, where=f"{where} filter", kinds=RSE_KINDS)
        object.__setattr__(self, "_outputs", tuple(outputs))

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.key_column

    def output_schema(self, input_schema: Schema | None = None) -> Schema:
        schema = self.input_schema
        cols = [(k, schema[k]) for k in self.key_column]
        where = f"reactive_state_engine {self.name!r}"
        cols += [(n, infer_type(e, schema, where=where, kinds=RSE_KINDS)) for n, e in self._outputs]
        return Schema(tuple(cols))

    def properties(self) -> dict[str, Any]:
        return {
            "metrics": [str(m) for m in self.metrics],
            "keyColumn": list(self.key_column),
            "filter": None if self.filter is None else str(self.filter),
            "keepOrder": self.keep_order,
        }

    def processor(self, input_schema: Schema | None = None) -> ReactiveStateProcessor:
        return ReactiveStateProcessor(self)


def _resolve(expr: Expr, schema: Schema) -> Expr:
    """Replace column names by their real (case-correct) spelling."""
    if isinstance(expr, Col):
        return Col(schema.lookup(expr.name) or expr.name)
    if isinstance(expr, Call):
        return Call(expr.func, tuple(_resolve(a, schema) for a in expr.args), expr.params)
    if isinstance(expr, Item):
        return Item(_resolve(expr.expr, schema), expr.index)
    return expr


class MetricDag:
    """Unique expression nodes in evaluation order, with a kernel for each state node."""

    def __init__(self, roots: Sequence[Expr]) -> None:
        from headwater.state.ops import make_state_op

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
                raise TypeError(f"unsupported node {node!r}")
        return new_state, values

    def value_of(self, values: list[np.ndarray], expr: Expr) -> np.ndarray:
        return values[self.index[expr.key()]]


class ReactiveStateProcessor(Processor):
    def __init__(self, spec: ReactiveStateEngine) -> None:
        self.spec = spec
        schema = spec.input_schema
        self.outputs = [(n, _resolve(e, schema)) for n, e in spec._outputs]
        self.filter = None if spec.filter is None else _resolve(spec.filter, schema)
        roots = [e for _, e in self.outputs] + ([self.filter] if self.filter is not None else [])
        self.dag = MetricDag(roots)
        self.out_schema = spec.output_schema()
        self.needed = sorted({c for r in roots for c in r.columns()})

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "ops": self.dag.new_state()}

    def process(self, state: dict[str, Any], table: pa.Table) -> tuple[dict[str, Any], pa.Table]:
        n = table.num_rows
        if n == 0:
            return state, self.empty_output()
        schema = self.spec.input_schema
        keys = KeyTable(state["keys"])
        key_arrays = [to_numpy(table[k], "string" if schema[k] == "string" else schema[k]) for k in self.spec.key_column]
        slots = keys.slots(key_arrays) if key_arrays else np.zeros(n, dtype=np.int64)
        n_keys = max(len(keys), 1)
        columns = {c: to_numpy(table[c], schema[c]) for c in self.needed}
        ops_state, values = self.dag.evaluate(columns, n, slots, n_keys, state["ops"])
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
        return {"keys": keys.keys, "ops": ops_state}, out

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def empty_output(self) -> pa.Table:
        return self._arrow_schema().empty_table()
