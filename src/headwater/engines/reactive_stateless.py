"""The reactive stateless engine: spreadsheet-style cells and formulas (Orca C.8).

Input rows set cells: the key columns, joined with ``:``, name a cell (``product_A:factor1``)
and ``value_column`` holds its new value. Each formula computes an output cell from other cells
(inputs or other formulas' outputs). After every micro-batch, each formula that depends directly
or transitively on a cell the batch touched is recomputed, in dependency order, and emitted —
even when its value did not change; a missing input gives NULL. ``trigger_on`` restricts a
formula to updates of one cell, ``filter=(low, high)`` suppresses results outside the range.

Difference from Orca: Orca emits per ingested append; Headwater per micro-batch, which may hold
several appends (each emitted value is still the one after the whole batch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from headwater.engines.arguments import Argument, arg, columns
from headwater.engines.base import SEQ, EngineKind, OneInputEngine, Processor
from headwater.engines.columns import evaluate_rowwise
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.functions import infer_type
from headwater.parse import parse_expr
from headwater.types import NUMERIC, Schema


@dataclass(frozen=True)
class Formula:
    """``output = formula`` where the formula's variables name cells: ``{"A": "product_A:factor1"}``."""

    output: str
    formula: Expr
    variables: tuple[tuple[str, str], ...]
    trigger_on: str | None = None
    filter: tuple[float, float] | None = None

    @classmethod
    def parse(cls, spec: Mapping[str, Any], *, where: str) -> Formula:
        try:
            output, text = spec["output"], spec["formula"]
        except KeyError as missing:
            raise GraphDefinitionError(
                f"{where}: each metric needs 'output' and 'formula', missing {missing}; e.g. "
                "{'output': 'B:value', 'formula': 'A + B', 'variables': {'A': 'A:f1', 'B': 'B:f1'}}"
            ) from None
        formula = text if isinstance(text, Expr) else parse_expr(text, where=f"{where} formula {clip(text)}")
        variables = dict(spec.get("variables", {}))
        unknown = [c for c in formula.columns() if c not in variables]
        if unknown:
            raise GraphDefinitionError(f"{where}: formula {formula} uses {unknown} without a cell in 'variables'")
        infer_type(formula, Schema(tuple((v, "double") for v in variables)), where=where, kinds=frozenset({"scalar"}))
        flt = spec.get("filter")
        return cls(output, formula, tuple(sorted(variables.items())), spec.get("trigger_on"),
                   None if flt is None else (float(flt[0]), float(flt[1])))

    @property
    def cells(self) -> set[str]:
        return {cell for _, cell in self.variables}


def _formulas(a: Argument) -> tuple[Formula, ...]:
    return formulas_from(a.value, where=a.engine)


def _range(a: Argument) -> tuple[float, float] | None:
    return None if a.value is None else (float(a.value[0]), float(a.value[1]))


@dataclass(frozen=True)
class ReactiveStatelessEngine(OneInputEngine):
    """Parameters of ``reactive_stateless_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.REACTIVE_STATELESS
    formulas: tuple[Formula, ...] = field(metadata=arg(_formulas, name="metrics"))
    key_column: tuple[str, ...] = field(metadata=arg(columns))
    value_column: str
    time_column: str | None = None
    filter: tuple[float, float] | None = field(default=None, metadata=arg(_range))
    _order: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        for c in (*self.key_column, self.value_column, *([self.time_column] if self.time_column else [])):
            if c not in self.input_schema:
                raise GraphDefinitionError(f"{where}: column {clip(c)} is not an input column {self.input_schema}")
        if self.input_schema[self.value_column] not in NUMERIC:
            raise GraphDefinitionError(f"{where}: value_column {clip(self.value_column)} must be numeric")
        outputs = [f.output for f in self.formulas]
        if len(set(outputs)) != len(outputs):
            raise GraphDefinitionError(f"{where}: output cells repeat: {outputs}")
        for f in self.formulas:
            if len(f.output.split(":")) != len(self.key_column):
                raise GraphDefinitionError(
                    f"{where}: output cell {clip(f.output)} must have {len(self.key_column)} parts joined by ':'"
                )
        object.__setattr__(self, "_order", self._topological(where))

    def _topological(self, where: str) -> tuple[int, ...]:
        producer = {f.output: i for i, f in enumerate(self.formulas)}
        order: list[int] = []
        state: dict[int, int] = {}

        def visit(i: int, path: list[str]) -> None:
            if state.get(i) == 2:
                return
            if state.get(i) == 1:
                raise GraphDefinitionError(f"{where}: formulas form a cycle through {' -> '.join(path)}")
            state[i] = 1
            for cell in sorted(self.formulas[i].cells):
                if cell in producer:
                    visit(producer[cell], [*path, cell])
            state[i] = 2
            order.append(i)

        for i in range(len(self.formulas)):
            visit(i, [self.formulas[i].output])
        return tuple(order)

    def output_schema(self) -> Schema:
        cols = [(k, "string") for k in self.key_column]
        if self.time_column:
            cols.append((self.time_column, self.input_schema[self.time_column]))
        return Schema((*cols, ("value", "double")))

    def properties(self) -> dict[str, Any]:
        return {"formulas": [f"{f.output} = {f.formula}" for f in self.formulas], "keyColumn": list(self.key_column),
                "valueColumn": self.value_column}



class ReactiveStatelessProcessor(Processor, runs=ReactiveStatelessEngine):
    def __init__(self, spec: ReactiveStatelessEngine) -> None:
        self.spec = spec
        self.schema = spec.output_schema().to_arrow().append(pa.field(SEQ, pa.int64()))

    def new_state(self) -> dict[str, float]:
        return {}

    def _affected(self, touched: set[str]) -> list[int]:
        """Formulas to recompute, in dependency order, given the cells a batch touched."""
        changed, out = set(touched), []
        for i in self.spec._order:
            f = self.spec.formulas[i]
            hit = (f.trigger_on in changed) if f.trigger_on else bool(f.cells & changed)
            if hit:
                out.append(i)
                changed.add(f.output)
        return out

    def process(self, state: dict[str, float], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, float], pa.Table]:
        spec = self.spec
        if table.num_rows == 0:
            return state, self.schema.empty_table()
        cells = dict(state)
        parts = [table[k].cast(pa.string()).to_pylist() for k in spec.key_column]
        values = table[spec.value_column].cast(pa.float64()).to_numpy(zero_copy_only=False)
        touched = set()
        for i, cell in enumerate(":".join("" if p is None else p for p in row) for row in zip(*parts, strict=True)):
            cells[cell] = float(values[i])
            touched.add(cell)
        rows: list[tuple[str, float]] = []
        for i in self._affected(touched):
            f = spec.formulas[i]
            env = {var: np.array([cells.get(cell, np.nan)]) for var, cell in f.variables}
            value = float(evaluate_rowwise(f.formula, env, 1)[0])
            cells[f.output] = value
            low_high = f.filter or spec.filter
            if low_high is not None and not (low_high[0] <= value <= low_high[1]):
                continue
            rows.append((f.output, value))
        seq = int(table[SEQ][table.num_rows - 1].as_py())
        columns: list[Any] = [[r[0].split(":")[j] for r in rows] for j in range(len(spec.key_column))]
        if spec.time_column:
            latest = max(table[spec.time_column].to_pylist(), key=lambda v: (v is not None, v))
            columns.append([latest] * len(rows))
        columns.append(pa.array(np.array([r[1] for r in rows], dtype=np.float64), from_pandas=True))  # NaN -> NULL
        columns.append([seq] * len(rows))
        return cells, pa.table(columns, schema=self.schema)


def formulas_from(metrics: Sequence[Mapping[str, Any]], *, where: str) -> tuple[Formula, ...]:
    if not metrics:
        raise GraphDefinitionError(f"{where}: metrics is empty")
    return tuple(Formula.parse(m, where=where) for m in metrics)
