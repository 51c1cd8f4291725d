"""The rule engine: each row checked against a set of rules chosen by one of its columns (Orca's ruleEngine, C.11).

``rule_sets`` maps a value of ``rule_set_column`` to a list of conditions; the set under ``None`` is the
default, used for rows whose value has no set of its own (and for every row without ``rule_set_column``).
``policy="shortcut"``: the output column ``result`` is the index of the first rule that fails (NULL when
all pass); ``policy="all"``: ``result`` is every rule's outcome (a ``bool[]``). A NULL outcome counts as
a failure. The output is ``output_columns`` then ``result``; the engine is stateless except for rule
changes.

Rules change while the graph runs: ``session.update_rule(engine, key, rules)`` adds or replaces a set,
``session.delete_rule(engine, key)`` removes one (not the default). A change is kept in the engine's
state snapshots, so it survives a stop, a crash and a restart, and applies from the next micro-batch on.

>>> import pyarrow as pa
>>> from headwater.engines.base import SEQ
>>> from headwater.types import Schema
>>> spec = RuleEngine(name="r", input_schema=Schema.parse({"sym": "long", "value": "double"}),
...                   rule_sets=((1, ("value > 1",)), (None, ("value > 10",))), output_columns=("sym",),
...                   rule_set_column="sym")
>>> p = spec.processor()
>>> _, out = p.process(p.new_state(), pa.table({"sym": [1, 2], "value": [2.0, 5.0], SEQ: [0, 1]}))
>>> out.to_pydict()["result"]  # sym 1 passes its rule; sym 2 falls back to the default and fails rule 0
[None, 0]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwater.engines.arguments import Argument, arg, as_tuple
from headwater.engines.base import SEQ, EngineKind, OneInputEngine, Processor, resolve_columns, resolve_expr
from headwater.engines.columns import evaluate_rowwise, filter_mask, to_numpy
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.functions import infer_type
from headwater.parse import to_metric
from headwater.types import INTEGRAL, Schema

POLICIES = ("shortcut", "all")
RESULT = "result"


def _key(value: Any, type_name: str | None, where: str) -> Any:
    """A rule set's key, checked against the rule set column's type (None: the default set)."""
    if value is None:
        return None
    if type_name == "string" and isinstance(value, str):
        return value
    if type_name in INTEGRAL and isinstance(value, int) and not isinstance(value, bool):
        return value
    raise GraphDefinitionError(f"{where}: rule set key {clip(value)} does not fit rule_set_column of type "
                               f"{type_name or '(none: only the default set, key None, applies)'}")


def compile_rules(rules: Any, schema: Schema, *, where: str) -> tuple[Expr, ...]:
    """Conditions (strings or expressions) checked against ``schema``: each true or false."""
    if isinstance(rules, str | Expr) or not isinstance(rules, list | tuple) or not rules:
        raise GraphDefinitionError(f"{where}: rules must be a non-empty list of conditions, got {clip(rules)}")
    out = []
    for i, rule in enumerate(rules):
        expr = to_metric(rule, where=f"{where} rule {i}")
        typ = infer_type(expr, schema, where=f"{where} rule {i} {clip(expr)}", kinds=frozenset({"scalar"}))
        if typ != "bool":
            raise GraphDefinitionError(f"{where} rule {i} {clip(expr)}: a rule must be true or false, got a {typ}")
        out.append(resolve_expr(expr, schema))
    return tuple(out)


def _rule_sets(a: Argument) -> tuple[tuple[Any, tuple[Any, ...]], ...]:
    """``{key: rules}``, a rule alone standing for a list of one."""
    if not isinstance(a.value, Mapping):
        raise GraphDefinitionError(f"rule_engine: rule_sets must be a dict of key to rules, got {clip(a.value)}")
    return tuple((k, tuple(v) if isinstance(v, list | tuple) else (v,)) for k, v in a.value.items())


@dataclass(frozen=True)
class RuleEngine(OneInputEngine):
    """Parameters of ``rule_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.RULE
    # (key or None, conditions); compiled on creation
    rule_sets: tuple[tuple[Any, tuple[Any, ...]], ...] = field(metadata=arg(_rule_sets))
    output_columns: tuple[str, ...] = field(metadata=arg(lambda a: as_tuple(a.value, f"rule_engine {a.name}")))
    policy: str = "shortcut"
    rule_set_column: str | None = None
    _sets: dict[Any, tuple[Expr, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def validate(self) -> None:
        where, schema = self.where, self.input_schema
        if self.policy not in POLICIES:
            raise GraphDefinitionError(f"{where}: policy must be one of {', '.join(POLICIES)}, got {clip(self.policy)}")
        if self.rule_set_column is not None:
            (column,) = resolve_columns((self.rule_set_column,), schema, what="rule_set_column", where=where)
            if schema[column] != "string" and schema[column] not in INTEGRAL:
                raise GraphDefinitionError(f"{where}: rule_set_column {clip(column)} has type {schema[column]}; "
                                           "expected string or an integer type")
            object.__setattr__(self, "rule_set_column", column)
        object.__setattr__(self, "output_columns", resolve_columns(self.output_columns, schema, what="output column",
                                                                  where=where))
        if RESULT in self.output_columns:
            raise GraphDefinitionError(f"{where}: output column {RESULT!r} would clash with the engine's result column")
        sets: dict[Any, tuple[Expr, ...]] = {}
        for key, rules in self.rule_sets:
            k = _key(key, schema[self.rule_set_column] if self.rule_set_column else None, where)
            if k in sets:
                raise GraphDefinitionError(f"{where}: rule set {clip(k)} is given twice")
            sets[k] = compile_rules(rules, schema, where=f"{where} rule set {clip(k)}")
        if None not in sets:
            raise GraphDefinitionError(f"{where}: the default rule set (key None) is required; e.g. "
                                       "rule_sets={None: ['price > 0']}")
        object.__setattr__(self, "rule_sets", tuple((k, v) for k, v in sets.items()))
        object.__setattr__(self, "_sets", sets)

    def output_schema(self) -> Schema:
        cols = [(c, self.input_schema[c]) for c in self.output_columns]
        return Schema(tuple([*cols, (RESULT, "int" if self.policy == "shortcut" else "bool[]")]))

    def properties(self) -> dict[str, Any]:
        return {"ruleSets": {str(k): [str(r) for r in v] for k, v in self.rule_sets},
                "outputColumns": list(self.output_columns), "policy": self.policy,
                "ruleSetColumn": self.rule_set_column}

    def check_control(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """A rule change, validated: ``{"op": "update_rule", "key": k, "rules": [...]}`` or ``{"op": "delete_rule",
        "key": k}``; returns it with the rules as text."""
        kind = op.get("op")
        key = _key(op.get("key"), self.input_schema[self.rule_set_column] if self.rule_set_column else None, self.where)
        if kind == "update_rule":
            rules = compile_rules(op.get("rules"), self.input_schema, where=f"{self.where} rule set {clip(key)}")
            return {"op": kind, "key": key, "rules": [str(r) for r in rules]}
        if kind == "delete_rule":
            if key is None:
                raise GraphDefinitionError(f"{self.where}: the default rule set (key None) cannot be deleted")
            return {"op": kind, "key": key}
        raise GraphDefinitionError(f"{self.where}: unknown rule change {clip(kind)}; expected update_rule or delete_rule")



class RuleProcessor(Processor, runs=RuleEngine):
    def __init__(self, spec: RuleEngine) -> None:
        self.spec = spec
        self.out_schema = spec.output_schema().to_arrow().append(pa.field(SEQ, pa.int64()))
        self._compiled: dict[str, dict[Any, tuple[Expr, ...]]] = {}

    def new_state(self) -> dict[str, Any]:
        return {"changes": []}  # rule changes in order: [op, key, rules as text]

    def control(self, state: dict[str, Any], op: Mapping[str, Any]) -> dict[str, Any]:
        change = self.spec.check_control(op)
        return {"changes": [*state["changes"], [change["op"], change["key"], change.get("rules")]]}

    def rule_sets(self, state: dict[str, Any]) -> dict[Any, tuple[Expr, ...]]:
        """The spec's rule sets with the state's changes applied (compiled once per distinct change list)."""
        signature = repr(state["changes"])
        if signature not in self._compiled:
            sets = dict(self.spec._sets)
            for op, key, rules in state["changes"]:
                if op == "update_rule":
                    sets[key] = compile_rules(rules, self.spec.input_schema, where=self.spec.where)
                else:
                    sets.pop(key, None)
            self._compiled = {signature: sets}
        return self._compiled[signature]

    def chosen_sets(self, table: pa.Table, keys: list[Any]) -> np.ndarray:
        """Each row's rule set, as its position in ``keys``: a value without a set of its own (or NULL) takes
        the default set (key None)."""
        column, default = self.spec.rule_set_column, keys.index(None)
        integral = column is not None and self.spec.input_schema[column] in INTEGRAL
        named = [k for k in keys if k is not None and (not integral or -2**63 <= k < 2**63)]  # others match no row
        if column is None or not named or table.num_rows == 0:
            return np.full(table.num_rows, default, dtype=np.int64)
        values = table[column]
        if integral:
            values, value_set = values.cast(pa.int64()), pa.array(named, pa.int64())
        else:
            value_set = pa.array(named, values.type)
        found = pc.fill_null(pc.index_in(values, value_set=value_set), -1).to_numpy(zero_copy_only=False)
        positions = np.array([keys.index(k) for k in named], dtype=np.int64)
        return np.where(found < 0, default, positions[found])

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec, n = self.spec, table.num_rows
        sets = self.rule_sets(state)
        keys = list(sets)
        chosen = self.chosen_sets(table, keys)
        failed = np.full(n, -1, dtype=np.int64)  # shortcut: index of the first failing rule
        offsets = np.zeros(n + 1, dtype=np.int32)  # all: row r's outcomes are flat[offsets[r]:offsets[r + 1]]
        np.cumsum(np.array([len(sets[k]) for k in keys], dtype=np.int32)[chosen], out=offsets[1:])
        flat = np.empty(offsets[-1], dtype=bool)
        for i, key in enumerate(keys):
            rows = np.flatnonzero(chosen == i)
            if len(rows) == 0:
                continue
            subset = table.take(pa.array(rows))
            results = np.empty((len(rows), len(sets[key])), dtype=bool)
            for j, rule in enumerate(sets[key]):
                values = {c: to_numpy(subset[c], spec.input_schema[c]) for c in rule.columns()}
                results[:, j] = filter_mask(evaluate_rowwise(rule, values, len(rows)))
            failed[rows] = np.where(results.all(axis=1), -1, np.argmin(results, axis=1))
            if spec.policy == "all":
                flat[offsets[rows][:, None] + np.arange(results.shape[1])] = results
        arrays = [table[c] for c in spec.output_columns]
        if spec.policy == "shortcut":
            arrays.append(pa.array(failed, pa.int32(), mask=failed < 0))
        else:
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat)))
        return state, pa.table([*arrays, table[SEQ]], schema=self.out_schema)
