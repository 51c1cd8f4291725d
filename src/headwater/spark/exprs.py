"""Compile row-wise Headwater expressions to Spark columns (maps stay in the JVM)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from headwater.expr import Call, Col, Expr, Lit

_BINARY: dict[str, Callable[[Column, Column], Column]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: F.try_divide(a.cast("double"), b),
    "mod": lambda a, b: F.when(b != 0, a % b),
    "floordiv": lambda a, b: F.floor(F.try_divide(a.cast("double"), b)),
    "pow": lambda a, b: F.pow(a, b),
    "eq": lambda a, b: a.eqNullSafe(b),
    "ne": lambda a, b: ~a.eqNullSafe(b),
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
}
_UNARY: dict[str, Callable[[Column], Column]] = {
    "neg": lambda a: -a,
    "not": lambda a: ~a,
    "abs": F.abs,
    "sqrt": lambda a: F.when(a >= 0, F.sqrt(a)),
    "log": lambda a: F.when(a > 0, F.log(a)),
    "exp": F.exp,
    "floor": F.floor,
    "ceil": F.ceil,
    "signum": lambda a: F.signum(a).cast("long"),
    "is_null": lambda a: a.isNull(),
    "not_null": lambda a: a.isNotNull(),
}


def to_column(expr: Expr) -> Column:
    """The Spark column computing ``expr`` row by row."""
    if isinstance(expr, Col):
        return F.col(expr.name)
    if isinstance(expr, Lit):
        return F.lit(expr.value)
    if isinstance(expr, Call):
        args = [to_column(a) for a in expr.args]
        if expr.func in _BINARY:
            return _BINARY[expr.func](*args)
        if expr.func in _UNARY:
            return _UNARY[expr.func](*args)
        if expr.func == "round":
            return F.round(args[0].cast("double"), int(expr.param("digits", 0)))
        if expr.func == "iif":
            return F.when(args[0], args[1]).otherwise(args[2])
    raise NotImplementedError(f"no Spark lowering for {expr}")


SUPPORTED: frozenset[Any] = frozenset([*_BINARY, *_UNARY, "round", "iif"])
