"""The pricing engine: each row priced by the formula its security type selects (Orca's pricingEngine, C.18).

``security_type`` lists type codes and ``method`` one formula per code (an expression, usually a pricing
function: ``bond_dirty_price(...)``, ``vanilla_option(...)``; any row-wise expression will do). A row whose
``type_column`` value is ``security_type[i]`` gets ``method[i]``; a row of another type (or NULL) gets NULL.
A formula's column names are looked up in the input first, then in ``security_reference`` (a static table of
per-instrument terms joined to each row by ``key_column``; ``security_reference.X`` names its column ``X``
even where the input has one), and what is neither is a constant of the formula. A row whose key has no
reference row sees NULL terms.

Output (Orca leaves it undocumented; Headwater's choice): ``time_column``, ``type_column``, ``key_column`` (if
given), ``result`` (double: the formula's value) and then ``extra_metrics`` (row-wise expressions over the same
columns, named as metrics are). The engine is stateless.

>>> import pyarrow as pa
>>> from headwater.engines.base import SEQ
>>> from headwater.parse import to_metric
>>> from headwater.types import Schema
>>> spec = PricingEngine(name="p", input_schema=Schema.parse({"t": "timestamp", "kind": "int", "x": "double"}),
...                      time_column="t", type_column="kind", security_type=(1, 2),
...                      method=(to_metric("x * 2", where="m"), to_metric("x + 1", where="m")))
>>> p = spec.processor()
>>> _, out = p.process(p.new_state(), pa.table({"t": pa.array([0, 0, 0], pa.timestamp("us")), "kind": [1, 2, 3],
...                                             "x": [1.0, 1.0, 1.0], SEQ: [0, 1, 2]}))
>>> out.to_pydict()["result"]
[2.0, 2.0, None]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.engines.arguments import Argument, arg
from headwater.engines.base import SEQ, EngineKind, OneInputEngine, Processor, metric_outputs, resolve_columns
from headwater.engines.columns import evaluate_rowwise, to_arrow, to_numpy
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Alias, Call, Col, Expr, Item
from headwater.functions import infer_type
from headwater.parse import to_metrics
from headwater.types import INTEGRAL, NUMERIC, Schema

RESULT = "result"
REFERENCE = "security_reference"
REFERENCE_PREFIXES = ("security_reference.", "securityReference.")
MAX_REFERENCE_ROWS = 1_000_000
"""Most rows ``security_reference`` may have: it travels inside the graph's plan."""
MAX_METHODS = 1_000


def _security_types(a: Argument) -> tuple[int, ...]:
    value = a.value
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not value or not all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value):
        raise GraphDefinitionError(f"{a.where} must be a non-empty list of integer type codes, got {clip(value)}")
    return tuple(int(v) for v in value)


def _methods(a: Argument) -> tuple[Expr, ...]:
    return to_metrics(a.value, where=a.where)


def _reference(a: Argument) -> Any:
    """``security_reference`` (a pandas DataFrame or an Arrow table) as the two fields that store it: its schema and
    its rows."""
    value = a.value
    if value is None:
        return None
    if isinstance(value, pd.DataFrame):
        value = pa.Table.from_pandas(value, preserve_index=False)
    if not isinstance(value, pa.Table):
        raise GraphDefinitionError(f"{a.where} must be a pandas DataFrame or an Arrow table, got {clip(value)}")
    if value.num_rows > MAX_REFERENCE_ROWS:
        raise GraphDefinitionError(f"{a.where} has {value.num_rows} rows; at most {MAX_REFERENCE_ROWS} (it travels "
                                   "with the graph's plan); give a smaller table")
    schema = Schema.from_arrow(value.schema, where=a.where)
    table = value.cast(schema.to_arrow())
    if a.field == "reference_schema":
        return tuple(schema)
    return tuple(tuple(row.values()) for row in table.to_pylist())


@dataclass(frozen=True)
class PricingEngine(OneInputEngine):
    """Parameters of ``pricing_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.PRICING
    time_column: str
    type_column: str
    security_type: tuple[int, ...] = field(metadata=arg(_security_types))
    method: tuple[Expr, ...] = field(metadata=arg(_methods))
    reference_schema: tuple[tuple[str, str], ...] | None = field(default=None,
                                                                 metadata=arg(_reference, name=REFERENCE))
    reference_rows: tuple[tuple[Any, ...], ...] | None = field(default=None, metadata=arg(_reference, name=REFERENCE))
    key_column: str | None = None
    extra_metrics: tuple[Expr, ...] = field(default=(), metadata=arg(lambda a: to_metrics(a.value or (), where=a.where)))
    _methods: tuple[Expr, ...] = field(default=(), init=False, repr=False, compare=False)
    _extras: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    @property
    def reference(self) -> Schema | None:
        return None if self.reference_schema is None else Schema(tuple(self.reference_schema))

    @property
    def scope(self) -> Schema:
        """The columns formulas see: the input's, then the reference's the input lacks, then every reference
        column again under ``security_reference.``."""
        cols = list(self.input_schema)
        ref = self.reference
        if ref is not None:
            cols += [(n, t) for n, t in ref if self.input_schema.lookup(n) is None]
            cols += [(f"{REFERENCE}.{n}", t) for n, t in ref]
        return Schema(tuple(cols))

    def validate(self) -> None:
        where, schema = self.where, self.input_schema
        time, kind = resolve_columns((self.time_column, self.type_column), schema, what="column", where=where)
        object.__setattr__(self, "time_column", time)
        object.__setattr__(self, "type_column", kind)
        if schema[kind] not in INTEGRAL:
            raise GraphDefinitionError(f"{where}: type_column {clip(kind)} has type {schema[kind]}; expected an "
                                       "integer type (security_type holds integer codes)")
        if len(self.method) != len(self.security_type):
            raise GraphDefinitionError(f"{where}: {len(self.security_type)} security types but {len(self.method)} "
                                       "methods; give one method per security type, in the same order")
        if len(self.method) > MAX_METHODS:
            raise GraphDefinitionError(f"{where}: {len(self.method)} methods; at most {MAX_METHODS}")
        if len(set(self.security_type)) != len(self.security_type):
            raise GraphDefinitionError(f"{where}: security_type {list(self.security_type)} lists a type twice")
        if (self.reference_schema is None) != (self.key_column is None):
            raise GraphDefinitionError(f"{where}: give both security_reference and key_column, or neither (the "
                                       "reference table is joined to each row by key_column)")
        if self.key_column is not None:
            self._validate_key()
        scope = self.scope
        methods = []
        for i, m in enumerate(self.method):
            w = f"{where} method {i} {clip(m)}"
            if isinstance(m, Alias):
                raise GraphDefinitionError(f"{w}: a method gives the {RESULT!r} column; leave out 'as'")
            expr = _resolve(m, scope)
            typ = infer_type(expr, scope, where=w, kinds=frozenset({"scalar"}))
            if typ not in NUMERIC and typ != "bool":
                raise GraphDefinitionError(f"{w}: a method must give a number, got a {typ}")
            methods.append(expr)
        object.__setattr__(self, "_methods", tuple(methods))
        extras = []
        fixed = [time, kind, RESULT, *([self.key_column] if self.key_column else [])]
        for name, e in metric_outputs(self.extra_metrics, where=where, aggregates=False):
            expr = _resolve(e, scope)
            infer_type(expr, scope, where=f"{where} extra metric {clip(name)}", kinds=frozenset({"scalar"}))
            if name in fixed:
                raise GraphDefinitionError(f"{where}: extra metric {clip(name)} would clash with the output column of "
                                           "that name; rename it with 'as'")
            extras.append((name, expr))
        object.__setattr__(self, "_extras", tuple(extras))

    def _validate_key(self) -> None:
        where, ref, given = self.where, self.reference, self.key_column
        assert ref is not None and given is not None
        (key,) = resolve_columns((given,), self.input_schema, what="key_column", where=where)
        ref_key = ref.lookup(key)
        if ref_key is None:
            raise GraphDefinitionError(f"{where}: key_column {clip(key)} is not a column of security_reference "
                                       f"(its columns: {', '.join(ref.names)})")
        a, b = self.input_schema[key], ref[ref_key]
        if not (a == b or (a in INTEGRAL and b in INTEGRAL)):
            raise GraphDefinitionError(f"{where}: key_column {clip(key)} is a {a} in the input but a {b} in "
                                       "security_reference; give both the same type")
        keys = [row[ref.names.index(ref_key)] for row in self.reference_rows or ()]
        if len(set(keys)) != len(keys):
            raise GraphDefinitionError(f"{where}: security_reference has a key of {clip(key)} on more than one row; "
                                       "give one row per instrument")
        object.__setattr__(self, "key_column", key)

    def output_schema(self) -> Schema:
        cols = [(self.time_column, self.input_schema[self.time_column]),
                (self.type_column, self.input_schema[self.type_column])]
        if self.key_column is not None:
            cols.append((self.key_column, self.input_schema[self.key_column]))
        cols.append((RESULT, "double"))
        scope = self.scope
        cols += [(n, infer_type(e, scope, where=self.where, kinds=frozenset({"scalar"}))) for n, e in self._extras]
        return Schema(tuple(cols))

    def properties(self) -> dict[str, Any]:
        ref = self.reference
        return {"timeColumn": self.time_column, "typeColumn": self.type_column,
                "securityType": list(self.security_type), "method": [str(m) for m in self.method],
                "securityReference": None if ref is None else {"columns": ref.to_dict(),
                                                               "rows": len(self.reference_rows or ())},
                "keyColumn": self.key_column, "extraMetrics": [str(m) for m in self.extra_metrics]}


def _resolve(expr: Expr, scope: Schema) -> Expr:
    """``expr`` with its columns in their real spelling; ``securityReference.X`` is ``security_reference.X``."""
    if isinstance(expr, Alias):
        return Alias(_resolve(expr.expr, scope), expr.names) if isinstance(expr.expr, Expr) else expr
    if isinstance(expr, Col):
        name = expr.name
        for prefix in REFERENCE_PREFIXES:
            if name.startswith(prefix):
                name = f"{REFERENCE}.{name[len(prefix):]}"
        return Col(scope.lookup(name) or name)
    if isinstance(expr, Call):
        return Call(expr.func, tuple(_resolve(a, scope) for a in expr.args), expr.params)
    if isinstance(expr, Item):
        return Item(_resolve(expr.expr, scope), expr.index)
    return expr


class PricingProcessor(Processor, runs=PricingEngine):
    def __init__(self, spec: PricingEngine) -> None:
        self.spec = spec
        self.scope = spec.scope
        self.out_schema = spec.output_schema().to_arrow().append(pa.field(SEQ, pa.int64()))
        self.reference: dict[str, np.ndarray] = {}
        self.index: pd.Index | None = None
        ref = spec.reference
        if ref is not None and spec.key_column is not None:
            rows = spec.reference_rows or ()
            table = pa.table({n: pa.array([r[i] for r in rows], type=pa.field(n, t).type)
                              for i, (n, t) in enumerate(zip(ref.names, ref.to_arrow().types, strict=True))})
            for n, t in ref:
                values = to_numpy(table[n], t)
                self.reference[f"{REFERENCE}.{n}"] = values
                if spec.input_schema.lookup(n) is None:
                    self.reference[n] = values
            self.index = pd.Index(np.asarray(table[ref.lookup(spec.key_column) or spec.key_column].to_pylist(),
                                             dtype=object))

    def new_state(self) -> dict[str, Any]:
        return {}

    def _columns(self, table: pa.Table, names: set[str]) -> dict[str, np.ndarray]:
        """The columns a formula needs: the input's, and the reference's gathered by each row's key."""
        spec, n = self.spec, table.num_rows
        out: dict[str, np.ndarray] = {}
        rows = None
        for name in names:
            if spec.input_schema.lookup(name) == name and name in table.column_names:
                out[name] = to_numpy(table[name], spec.input_schema[name])
                continue
            if rows is None:
                assert self.index is not None and spec.key_column is not None
                keys = np.asarray(table[spec.key_column].to_pylist(), dtype=object)
                rows = self.index.get_indexer(keys)
            values = self.reference[name]
            gathered = values[np.maximum(rows, 0)] if len(values) else np.full(n, None if values.dtype == object
                                                                                else np.nan, dtype=values.dtype)
            if values.dtype == object:
                gathered = gathered.copy()
                gathered[rows < 0] = None
            else:
                gathered = np.where(rows < 0, np.nan, gathered)
            out[name] = gathered
        return out

    def process(self, state: dict[str, Any], table: pa.Table, *,
                batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec, n = self.spec, table.num_rows
        result = np.full(n, np.nan)
        kinds = to_numpy(table[spec.type_column], spec.input_schema[spec.type_column])
        for code, method in zip(spec.security_type, spec._methods, strict=True):
            rows = np.flatnonzero(kinds == code)
            if len(rows) == 0:
                continue
            subset = table.take(pa.array(rows))
            values = self._columns(subset, set(method.columns()))
            result[rows] = evaluate_rowwise(method, values, len(rows))
        arrays = [table[spec.time_column], table[spec.type_column]]
        if spec.key_column is not None:
            arrays.append(table[spec.key_column])
        arrays.append(to_arrow(result, "double"))
        out_types = spec.output_schema()
        for name, expr in spec._extras:
            values = self._columns(table, set(expr.columns()))
            if isinstance(expr, Col) and expr.name in table.column_names:
                arrays.append(table[expr.name])
            else:
                arrays.append(to_arrow(evaluate_rowwise(expr, values, n), out_types[name]))
        return state, pa.table([*arrays, table[SEQ]], schema=self.out_schema)
