"""Column conversions and row-wise evaluation shared by the engines.

Inside an engine, numeric, boolean and temporal values are float64 NumPy arrays with
NaN as NULL (microsecond timestamps are exact in float64 until the year 2255), and
strings are object arrays with None as NULL. Arrow is the format at the edges.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.errors import clip
from headwater.expr import Call, Col, Expr, Lit
from headwater.types import ARROW_TYPES

Array = np.ndarray


def to_numpy(column: pa.Array | pa.ChunkedArray, type_name: str) -> Array:
    """Convert an Arrow column to the engine representation for ``type_name``."""
    if type_name == "string":
        return np.asarray(column.to_pandas(), dtype=object)
    if type_name == "timestamp":
        column = column.cast(pa.timestamp("us")).cast(pa.int64())
    elif type_name == "date":
        column = column.cast(pa.int32())
    elif type_name == "bool":
        column = column.cast(pa.int8())
    # integers beyond 2**53 round to the nearest double, as everywhere in the float64 evaluator
    return np.asarray(column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)


DAY_US = 86_400_000_000


def times_us(column: pa.Array | pa.ChunkedArray, type_name: str) -> np.ndarray:
    """A ``timestamp`` or ``date`` column (no NULLs) as exact int64 microseconds since the epoch."""
    if type_name == "date":
        return np.asarray(column.cast(pa.int32()).to_numpy(zero_copy_only=False), dtype=np.int64) * DAY_US
    return np.asarray(column.cast(pa.timestamp("us")).cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def to_arrow(values: Array, type_name: str) -> pa.Array:
    """Convert an engine array back to an Arrow array of ``type_name`` (NaN becomes NULL)."""
    if type_name == "string":
        return pa.array(values, type=pa.string(), from_pandas=True)
    values = np.asarray(values, dtype=np.float64)
    if type_name == "double":
        return pa.array(values, type=pa.float64(), from_pandas=True)  # NaN -> NULL in C++, 5x faster than a mask
    mask = np.isnan(values)
    if type_name == "float":
        return pa.array(values.astype(np.float32), type=pa.float32(), mask=mask)
    filled = np.where(mask, 0, values)
    if type_name == "bool":
        return pa.array(filled != 0, type=pa.bool_(), mask=mask)
    ints = np.rint(filled).astype(np.int64)
    if type_name == "timestamp":
        return pa.array(ints, type=pa.int64(), mask=mask).cast(pa.timestamp("us"))
    if type_name == "date":
        return pa.array(ints.astype(np.int32), type=pa.int32(), mask=mask).cast(pa.date32())
    return pa.array(ints, type=pa.int64(), mask=mask).cast(ARROW_TYPES[type_name])


def _round_half_away(x: Array, digits: int) -> Array:
    scale = 10.0**digits
    return np.sign(x) * np.floor(np.abs(x) * scale + 0.5) / scale


def _null_to_nan(x: Array) -> Array:
    """Division by zero gives NULL, as in DolphinDB, rather than +-inf."""
    x = np.asarray(x, dtype=np.float64)
    x[np.isinf(x)] = np.nan
    return x


def _truthy(x: Array) -> Array:
    return np.where(np.isnan(x), np.nan, (x != 0).astype(np.float64))


def _compare(op: Callable[[Any, Any], Any], a: Array, b: Array, *, equality: bool) -> Array:
    """DolphinDB comparisons: NULL equals NULL and sorts below every value."""
    if a.dtype == object or b.dtype == object:
        sa = pd.Series(a, dtype=object)
        sb = pd.Series(b, dtype=object) if np.ndim(b) else pd.Series([b] * len(sa), dtype=object)
        na, nb = sa.isna().to_numpy(), sb.isna().to_numpy()
        both = ~na & ~nb
        out = np.zeros(len(sa), dtype=np.float64)
        if both.any():
            out[both] = np.asarray(op(sa[both].to_numpy(), sb[both].to_numpy()), dtype=np.float64)
        if equality:
            out[na & nb] = float(op(0, 0))
            out[na ^ nb] = float(op(0, 1))
        else:
            out[na & ~nb] = float(op(0, 1))
            out[~na & nb] = float(op(1, 0))
            out[na & nb] = float(op(0, 0))
        return out
    na, nb = np.isnan(a), np.isnan(b)
    low = -np.inf
    with np.errstate(invalid="ignore"):
        out = op(np.where(na, low, a), np.where(nb, low, b)).astype(np.float64)
    if equality:
        out = np.where(na & nb, float(op(0, 0)), np.where(na ^ nb, float(op(0, 1)), out))
    return out


def _and(a: Array, b: Array) -> Array:
    ta, tb = _truthy(a), _truthy(b)
    out = np.where((ta == 0) | (tb == 0), 0.0, np.where(np.isnan(ta) | np.isnan(tb), np.nan, 1.0))
    return out


def _or(a: Array, b: Array) -> Array:
    ta, tb = _truthy(a), _truthy(b)
    return np.where((ta == 1) | (tb == 1), 1.0, np.where(np.isnan(ta) | np.isnan(tb), np.nan, 0.0))


def _iif(c: Array, a: Array, b: Array) -> Array:
    tc = _truthy(c)
    if a.dtype == object or b.dtype == object:
        out = np.where(tc == 1, a, b).astype(object)
        out[np.isnan(tc)] = None
        return out
    return np.where(np.isnan(tc), np.nan, np.where(tc == 1, a, b))


def _is_null(x: Array) -> Array:
    if x.dtype == object:
        return pd.isna(pd.Series(x)).to_numpy().astype(np.float64)
    return np.isnan(x).astype(np.float64)


SCALAR_KERNELS: dict[str, Callable[..., Array]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: _null_to_nan(a / b),
    "floordiv": lambda a, b: _null_to_nan(np.floor(a / b)),
    "mod": lambda a, b: _null_to_nan(np.mod(a, b)),
    "pow": lambda a, b: _null_to_nan(np.power(a, b)),
    "neg": lambda a: -a,
    "abs": np.abs,
    "sqrt": lambda a: np.sqrt(np.where(a < 0, np.nan, a)),
    "log": lambda a: _null_to_nan(np.log(np.where(a < 0, np.nan, a))),
    "exp": np.exp,
    "floor": np.floor,
    "ceil": np.ceil,
    "signum": np.sign,
    "eq": lambda a, b: _compare(np.equal, a, b, equality=True),
    "ne": lambda a, b: _compare(np.not_equal, a, b, equality=True),
    "lt": lambda a, b: _compare(np.less, a, b, equality=False),
    "le": lambda a, b: _compare(np.less_equal, a, b, equality=False),
    "gt": lambda a, b: _compare(np.greater, a, b, equality=False),
    "ge": lambda a, b: _compare(np.greater_equal, a, b, equality=False),
    "and": _and,
    "or": _or,
    "not": lambda a: np.where(np.isnan(a), np.nan, (a == 0).astype(np.float64)),
    "iif": _iif,
    "is_null": _is_null,
    "not_null": lambda a: 1.0 - _is_null(a),
}


def _pricing(name: str, **fixed: Any) -> Callable[..., Array]:
    """A pricing function of :mod:`headwater.kernels.pricing` as a kernel: its parameters are the call's, and a row
    out of its domain gives NULL (imported when first used: Numba loads only then)."""
    def kernel(*args: Array, **params: Any) -> Array:
        from headwater.kernels import pricing

        params.pop("calendar", None)  # checked to be None when the call was built
        if name == "vanilla_option":
            params.pop("method", None)  # only "BS" is accepted
        return getattr(pricing, name)(*args, **fixed, **params, strict=False)

    return kernel


SCALAR_KERNELS.update({name: _pricing(name) for name in (
    "bond_dirty_price", "bond_accr_int", "bond_duration", "bond_convexity", "bond_yield", "vanilla_option")})


def evaluate_scalar(call: Call, args: Sequence[Array]) -> Array:
    """Evaluate one row-wise function over already evaluated argument arrays."""
    if call.func == "round":
        return _round_half_away(args[0], int(call.param("digits", 0)))
    kernel = SCALAR_KERNELS[call.func]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.asarray(kernel(*args, **dict(call.params)))


def literal_array(lit: Lit, n: int) -> Array:
    if isinstance(lit.value, str):
        return np.full(n, lit.value, dtype=object)
    if isinstance(lit.value, dt.date):  # a date constant: days since the epoch, as date columns are
        return np.full(n, float((lit.value - dt.date(1970, 1, 1)).days), dtype=np.float64)
    return np.full(n, np.nan if lit.value is None else float(lit.value), dtype=np.float64)


def evaluate_rowwise(expr: Expr, columns: Mapping[str, Array], n: int) -> Array:
    """Evaluate a stateless expression over a batch of ``n`` rows."""
    if isinstance(expr, Col):
        return columns[expr.name]
    if isinstance(expr, Lit):
        return literal_array(expr, n)
    if isinstance(expr, Call):
        return evaluate_scalar(expr, [evaluate_rowwise(a, columns, n) for a in expr.args])
    raise TypeError(f"cannot evaluate {clip(expr)} row-wise")


def filter_mask(values: Array) -> Array:
    """Rows whose filter value is true (NULL counts as false)."""
    return np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0) != 0
