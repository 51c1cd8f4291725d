"""Higher-order state functions, talib and the iterators: doc examples, independent references, streaming == batch."""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Callable, Sequence
from typing import Any
from unittest.mock import patch

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.engines.base import SEQ
from headwater.engines.reactive_state import ReactiveStateEngine
from headwater.errors import ExecutionError, GraphDefinitionError
from headwater.kernels.base.operators import StateOp
from headwater.kernels.higher_order.aggregates import AGGREGATES, Moving, Segmentby
from headwater.kernels.higher_order.iterators import COMBINERS
from headwater.kernels.registry import STATE_OPS, make_state_op
from headwater.parse import to_metric
from headwater.types import Schema
from tests.support.state_functions import run_batches

NAN = math.nan
HIGHER_NAMES = {n for n, s in STATE_OPS.items() if s.build.__module__.startswith("headwater.kernels.higher_order.")}




def one_key(name: str, *cols: Sequence[float], **params: Any) -> np.ndarray:
    (out,) = run_batches(make_state_op(name, params), [0] * len(cols[0]), cols)
    return out


def close(got: np.ndarray, expected: Sequence[float], decimals: int | None = None) -> None:
    if decimals is not None:
        got = np.round(got, decimals)
    np.testing.assert_allclose(got, np.asarray(expected, dtype=np.float64), rtol=1e-12, atol=1e-12)


def per_key(keys: np.ndarray, cols: Sequence[np.ndarray], ref: Callable[..., np.ndarray]) -> np.ndarray:
    """Apply a one-key reference to every key's rows and put the results back in row order."""
    out = np.full(len(keys), NAN)
    for k in np.unique(keys):
        rows = np.flatnonzero(keys == k)
        out[rows] = ref(*(c[rows] for c in cols))
    return out


def _frame(seed: int, n: int = 400, n_keys: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(0, 3, n), 1)
    x[rng.random(n) < 0.25] = np.nan
    x[100:108] = 1.5  # a run of equal values
    keys = rng.integers(0, n_keys, n)
    keys[:4] = 0
    x[:4] = np.nan  # key 0 starts with NULLs
    seg = rng.choice([0.0, 1.0, NAN], n, p=[0.45, 0.45, 0.1])
    return pd.DataFrame({"key": keys, "x": x, "seg": seg})


def _splits(seed: int, n: int) -> list[int]:
    return sorted(np.random.default_rng(seed).choice(n, 6, replace=False).tolist())


# ---------------------------------------------------------------- group 1: segmentby, moving, window, accumulate

DOC_EXAMPLES: list[tuple[str, list[list[float]], dict[str, Any], list[float], int | None]] = [
    ("segmentby", [[1, 2, 3, 0, 3, 2, 1, 4, 5], [1, 1, 1, -1, -1, -1, 1, 1, 1]], {"func": "cumsum"},
     [1, 3, 6, 0, 3, 5, 1, 5, 10], None),
    # the m-function examples of D.2 are moving() with the matching aggregate
    ("moving", [[2, 1, 3, 7, 6, 5, 4]], {"window": 3, "func": "sum"}, [NAN, NAN, 6, 11, 16, 18, 15], None),
    ("moving", [[2, 1, 3, NAN, 6, 5, 4]], {"window": 3, "func": "sum"}, [NAN, NAN, 6, 4, 9, 11, 15], None),
    ("moving", [[2, 1, 3, NAN, 6, 5, 4]], {"window": 3, "func": "sum", "min_periods": 1},
     [2, 3, 6, 4, 9, 11, 15], None),
    ("moving", [[7, 4, 6, NAN, -5, 32, 9, 8]], {"window": 4, "func": "avg"},
     [NAN, NAN, NAN, 5.67, 1.67, 11, 12, 11], 2),
    ("moving", [[2, 1, 3, NAN, 6, 5, 4]], {"window": 3, "func": "max"}, [NAN, NAN, 3, 3, 6, 6, 6], None),
    ("moving", [[7, 4, 5, 8, 9]], {"window": 3, "func": "count", "min_periods": 1}, [1, 2, 3, 3, 3], None),
    # window(min, 5 4 NULL -1 2 4, 1:3) -> [-1,-1,-1,2,4,]: the causal mirror image reads the input backwards
    ("window", [[4, 2, -1, NAN, 4, 5]], {"d1": -3, "d2": -1, "func": "min"}, [NAN, 4, 2, -1, -1, -1], None),
    # accumulate(+, X) is cumsum(X) (cum-function doc example); init starts the fold
    ("accumulate", [[1, 1, 2, 3, 4, 5, NAN, 8, 9, 1, 3]], {"func": "add"},
     [1, 2, 4, 7, 11, 16, 16, 24, 33, 34, 37], None),
    ("accumulate", [[1, 2, 3]], {"func": "add", "init": 10}, [11, 13, 16], None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "cols", "params", "expected", "decimals"), DOC_EXAMPLES)
def test_documented_example(
    name: str, cols: list[list[float]], params: dict[str, Any], expected: list[float], decimals: int | None
) -> None:
    close(one_key(name, *cols, **params), expected, decimals)


def test_segmentby_treats_a_run_of_null_segments_as_one_segment() -> None:
    x = [1, 2, 3, 4, 5, NAN, 7]
    seg = [NAN, NAN, 1, 1, NAN, NAN, NAN]
    close(one_key("segmentby", x, seg, func="cumsum"), [1, 3, 3, 7, 5, 5, 12])
    close(one_key("segmentby", x, seg, func="cumcount"), [1, 2, 1, 2, 1, 1, 2])


def _cum_ref(func: str) -> Callable[[pd.Series], pd.Series]:
    refs: dict[str, Callable[[pd.Series], pd.Series]] = {
        "cumsum": lambda s: s.cumsum().ffill(),
        "cumavg": lambda s: s.cumsum().ffill() / s.notna().cumsum(),
        "cummax": lambda s: s.cummax().ffill(),
        "cummin": lambda s: s.cummin().ffill(),
        "cumcount": lambda s: s.notna().cumsum().astype(float),
        "cumvar": lambda s: s.expanding().var(),
        "cumvarp": lambda s: s.expanding().var(ddof=0),
        "cumstd": lambda s: s.expanding().std(),
        "cumstdp": lambda s: s.expanding().std(ddof=0),
    }
    return refs[func]


def _segment_ids(df: pd.DataFrame) -> pd.Series:
    prev = df.groupby("key")["seg"].shift()
    first = ~df.duplicated("key")
    same = (df["seg"] == prev) | (df["seg"].isna() & prev.isna())
    return (first | ~same).astype(int).groupby(df["key"]).cumsum()


@pytest.mark.parametrize("func", sorted(Segmentby._FUNCS))
@pytest.mark.parametrize("seed", [1, 2])
def test_segmentby_matches_pandas_per_key_and_segment(func: str, seed: int) -> None:
    df = _frame(seed)
    df["run"] = _segment_ids(df)
    expected = df.groupby(["key", "run"])["x"].transform(_cum_ref(func)).to_numpy(dtype=np.float64)
    op = make_state_op("segmentby", {"func": func})
    for cuts in ((), _splits(seed, len(df))):
        (got,) = run_batches(op, df["key"], [df["x"], df["seg"]], cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("func", sorted(Segmentby._FUNCS))
def test_segmentby_with_one_segment_equals_the_cumulative_function(func: str) -> None:
    df = _frame(5)
    (got,) = run_batches(make_state_op("segmentby", {"func": func}), df["key"], [df["x"], np.zeros(len(df))])
    (want,) = run_batches(make_state_op(func, {}), df["key"], [df["x"]])
    np.testing.assert_array_equal(got, want)


_NP_AGGS: dict[str, Callable[[np.ndarray], float]] = {
    "sum": np.sum, "sum2": lambda v: float(np.sum(v * v)), "avg": np.mean, "count": len, "max": np.max,
    "min": np.min, "range": np.ptp, "std": lambda v: np.std(v, ddof=1) if len(v) > 1 else NAN,
    "var": lambda v: np.var(v, ddof=1) if len(v) > 1 else NAN, "stdp": np.std, "varp": np.var,
    "med": np.median, "prod": np.prod, "first_not": lambda v: v[0], "last_not": lambda v: v[-1],
}  # fmt: skip


def _window_ref(
    agg: str, a: int, b: int, min_periods: int, full_only: bool
) -> Callable[[np.ndarray], np.ndarray]:
    """Aggregate rows [i - a, i - b] with NumPy, independently of the kernels."""

    def ref(x: np.ndarray) -> np.ndarray:
        out = np.full(len(x), NAN)
        for i in range(len(x)):
            if i - b < 0 or (full_only and i < a):
                continue
            w = x[max(0, i - a) : i - b + 1]
            vals = w[~np.isnan(w)]
            if len(vals) < min_periods:
                continue
            if agg in ("first", "last"):
                out[i] = w[0] if agg == "first" else w[-1]
            elif agg == "count" or len(vals):
                out[i] = _NP_AGGS[agg](vals)
        return out

    return ref


MOVING_CASES = [(3, None), (4, 2), (1, None), (6, 6)]


@pytest.mark.parametrize("agg", sorted(AGGREGATES))
@pytest.mark.parametrize(("window", "min_periods"), MOVING_CASES)
@pytest.mark.parametrize("fast_path", [True, False])
def test_moving_matches_numpy_reference(
    agg: str, window: int, min_periods: int | None, fast_path: bool
) -> None:
    df = _frame(3)
    keys, x = df["key"].to_numpy(), df["x"].to_numpy()
    ref = _window_ref(agg, window - 1, 0, min_periods or 1, min_periods is None)
    expected = per_key(keys, [x], ref)
    op = make_state_op("moving", {"window": window, "func": agg, "min_periods": min_periods})
    with patch.object(Moving, "fast_path", fast_path):
        for cuts in ((), _splits(3, len(x))):
            (got,) = run_batches(op, keys, [x], cuts)
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize(("agg", "pandas_agg"), [("sum", "sum"), ("avg", "mean"), ("std", "std"),
                                                 ("var", "var"), ("med", "median"), ("max", "max")])  # fmt: skip
def test_moving_with_min_periods_matches_pandas_rolling(agg: str, pandas_agg: str) -> None:
    # pandas' min_periods counts non-NULL values, as DolphinDB's does
    df = _frame(4)
    expected = df.groupby("key")["x"].transform(lambda s: getattr(s.rolling(5, min_periods=2), pandas_agg)())
    (got,) = run_batches(
        make_state_op("moving", {"window": 5, "func": agg, "min_periods": 2}), df["key"], [df["x"]]
    )
    np.testing.assert_allclose(got, expected.to_numpy(), rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize("agg", sorted(AGGREGATES))
@pytest.mark.parametrize(("d1", "d2"), [(-3, -1), (-2, 0), (0, 0), (-4, -4), (-1, -1)])
def test_window_matches_numpy_reference(agg: str, d1: int, d2: int) -> None:
    df = _frame(6)
    keys, x = df["key"].to_numpy(), df["x"].to_numpy()
    expected = per_key(keys, [x], _window_ref(agg, -d1, -d2, 0, False))
    op = make_state_op("window", {"d1": d1, "d2": d2, "func": agg})
    for cuts in ((), _splits(6, len(x))):
        (got,) = run_batches(op, keys, [x], cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


def test_window_ending_at_the_current_row_is_moving_without_a_minimum() -> None:
    df = _frame(7)
    (got,) = run_batches(make_state_op("window", {"d1": -4, "d2": 0, "func": "sum"}), df["key"], [df["x"]])
    (want,) = run_batches(make_state_op("msum", {"window": 5, "min_periods": 1}), df["key"], [df["x"]])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, equal_nan=True)


def _fold_ref(func: str, init: float | None) -> Callable[[np.ndarray], np.ndarray]:
    ops: dict[str, Callable[[float, float], float]] = {
        "add": lambda a, v: a + v, "sub": lambda a, v: a - v, "mul": lambda a, v: a * v, "max": max, "min": min,
    }  # fmt: skip

    def ref(x: np.ndarray) -> np.ndarray:
        acc, out = init, []
        for v in x:
            if not math.isnan(v):
                acc = v if acc is None else ops[func](acc, v)
            out.append(NAN if acc is None else acc)
        return np.array(out)

    return ref


@pytest.mark.parametrize("func", ["add", "sub", "mul", "max", "min"])
@pytest.mark.parametrize("init", [None, 2.0])
def test_accumulate_matches_a_python_fold(func: str, init: float | None) -> None:
    df = _frame(8, n=200)
    x = np.clip(df["x"].to_numpy(), -2, 2)  # keeps products finite
    expected = per_key(df["key"].to_numpy(), [x], _fold_ref(func, init))
    op = make_state_op("accumulate", {"func": func, "init": init})
    for cuts in ((), _splits(8, len(x))):
        (got,) = run_batches(op, df["key"], [x], cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize(("func", "cum"), [("add", "cumsum"), ("mul", "cumprod"), ("max", "cummax"),
                                           ("min", "cummin"), ("sum", "cumsum"), ("prod", "cumprod")])  # fmt: skip
def test_accumulate_equals_the_cumulative_function(func: str, cum: str) -> None:
    df = _frame(9, n=200)
    x = np.clip(df["x"].to_numpy(), -2, 2)
    (got,) = run_batches(make_state_op("accumulate", {"func": func}), df["key"], [x])
    (want,) = run_batches(make_state_op(cum, {}), df["key"], [x])
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- group 2: talib, talib_null


def test_talib_documented_example() -> None:
    x = [NAN, NAN, NAN, 1, 2, 3, 4, 5, 6, NAN, 8, 9]
    close(one_key("talib", x, func="msum", window=3), [NAN] * 5 + [6, 9, 12, 15, 11, 14, 17])


def _talib_ref(inner: Callable[[pd.Series], pd.Series]) -> Callable[[np.ndarray], np.ndarray]:
    def ref(x: np.ndarray) -> np.ndarray:
        out = np.full(len(x), NAN)
        valid = np.flatnonzero(~np.isnan(x))
        if len(valid):
            out[valid[0] :] = inner(pd.Series(x[valid[0] :])).to_numpy()
        return out

    return ref


def _rolling(window: int, agg: str, min_periods: int | None = None) -> Callable[[pd.Series], pd.Series]:
    def ref(s: pd.Series) -> pd.Series:
        val = getattr(s.rolling(window, min_periods=min_periods or 1), agg)()
        if min_periods is None:
            val[np.arange(len(s)) < window - 1] = NAN
        return val

    return ref


TALIB_CASES: list[tuple[dict[str, Any], Callable[[pd.Series], pd.Series]]] = [
    ({"func": "msum", "window": 3}, _rolling(3, "sum")),
    ({"func": "mavg", "window": 4, "min_periods": 2}, _rolling(4, "mean", 2)),
    ({"func": "mmax", "window": 1}, _rolling(1, "max")),
    ({"func": "cumsum"}, lambda s: s.cumsum().ffill()),
    ({"func": "prev"}, lambda s: s.shift()),
]


@pytest.mark.parametrize(("params", "inner"), TALIB_CASES, ids=[str(p) for p, _ in TALIB_CASES])
@pytest.mark.parametrize("seed", [1, 2])
def test_talib_matches_pandas_after_the_leading_nulls(
    params: dict[str, Any], inner: Callable[[pd.Series], pd.Series], seed: int
) -> None:
    df = _frame(seed)
    keys, x = df["key"].to_numpy(), df["x"].to_numpy()
    expected = per_key(keys, [x], _talib_ref(inner))
    op = make_state_op("talib", params)
    for cuts in ((), _splits(seed, len(x))):
        (got,) = run_batches(op, keys, [x], cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


def test_talib_of_a_function_that_skips_leading_nulls_changes_nothing() -> None:
    df = _frame(3)
    (got,) = run_batches(make_state_op("talib", {"func": "ema", "window": 3}), df["key"], [df["x"]])
    (want,) = run_batches(make_state_op("ema", {"window": 3}), df["key"], [df["x"]])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", [1, 2])
def test_talib_null_matches_pandas(seed: int) -> None:
    df = _frame(seed)
    df["y"] = df["seg"].where(np.random.default_rng(seed).random(len(df)) < 0.8)
    started = (df["x"].notna() & df["y"].notna()).astype(int).groupby(df["key"]).cummax().astype(bool)
    op = make_state_op("talib_null", {})
    for cuts in ((), _splits(seed, len(df))):
        got_x, got_y = run_batches(op, df["key"], [df["x"], df["y"]], cuts)
        np.testing.assert_array_equal(got_x, df["x"].where(started).to_numpy())
        np.testing.assert_array_equal(got_y, df["y"].where(started).to_numpy())


# ---------------------------------------------------------------- group 3: the iterators


def test_state_iterate_documented_example() -> None:
    # two keys (sym A then B), val0 = 1..12, val1 = 10: initial window 3, msum over 3, coeff (0.5, 0.5)
    op = make_state_op(
        "state_iterate",
        {"initial_window": 3, "iterate_func": "msum", "iterate_window": 3, "combine_coeff": (0.5, 0.5)},
    )
    keys = [0] * 6 + [1] * 6
    (out,) = run_batches(op, keys, [np.arange(1, 13.0), np.full(12, 10.0)])
    close(out, [10, 10, 10, 17, 21, 27, 10, 10, 10, 20, 25.5, 33.75])
    # the same rows interleaved and cut into batches
    order = [0, 6, 1, 7, 2, 3, 8, 9, 4, 10, 5, 11]
    (mixed,) = run_batches(
        op, [keys[i] for i in order], [np.arange(1, 13.0)[order], np.full(12, 10.0)], [3, 4, 9]
    )
    close(mixed, out[order])


def test_conditional_iterate_documented_example() -> None:
    # val0 = take(1 3 6, 10), cond = val0 > 5, true value val1 = 10, false branch msum over 3
    val0 = np.resize([1.0, 3, 6], 10)
    out = one_key("conditional_iterate", val0 > 5, np.full(10, 10.0), false_iter_func="msum", func_window=3)
    close(out, [NAN, NAN, 10, 10, 20, 10, 40, 70, 10, 120])


def _history_op(func: str, window: int | None) -> StateOp:
    if func in ("msum", "mavg", "mmax", "mmin", "mcount"):
        return make_state_op(func, {"window": window})
    return make_state_op("move", {"k": window}) if func == "move" else make_state_op(func, {})


def _iterate_ref(kind: str, func: str, window: int | None, **kw: Any) -> Callable[..., np.ndarray]:
    """The documented recursion, literally: f(out)[k-1] runs the registered function over all outputs so far."""
    hist = _history_op(func, window)

    def f_of_out(out: list[float]) -> float:
        if not out:
            return NAN
        (values,) = run_batches(hist, [0] * len(out), [out])
        return float(values[-1])

    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out: list[float] = []
        for k in range(len(a)):
            if kind == "state":
                c0, c1 = kw["coeff"]
                out.append(b[k] if k < kw["initial_window"] else c0 * a[k] + c1 * f_of_out(out))
            else:
                out.append(b[k] if a[k] == a[k] and a[k] != 0 else f_of_out(out))
        return np.array(out)

    return ref


ITER_FUNCS = [("msum", 3), ("mavg", 2), ("mmax", 3), ("mmin", 1), ("mcount", 3), ("move", 2), ("move", 1),
              ("cumfirst_not", None), ("cumlast_not", None), ("ffill", None)]  # fmt: skip


def _iter_frame(seed: int) -> pd.DataFrame:
    df = _frame(seed, n=150, n_keys=3)
    df["x"] = np.clip(df["x"], -3, 3)
    df["cond"] = df["seg"]  # 0 / 1 / NULL
    df["initial"] = np.where(np.random.default_rng(seed).random(len(df)) < 0.1, NAN, df.index % 7)
    return df


@pytest.mark.parametrize(("func", "window"), ITER_FUNCS)
@pytest.mark.parametrize("initial_window", [1, 3])
def test_state_iterate_matches_the_literal_recursion(
    func: str, window: int | None, initial_window: int
) -> None:
    df = _iter_frame(initial_window)
    coeff = (0.7, 0.4)
    ref = _iterate_ref("state", func, window, coeff=coeff, initial_window=initial_window)
    expected = per_key(df["key"].to_numpy(), [df["x"].to_numpy(), df["initial"].to_numpy()], ref)
    op = make_state_op("state_iterate", {"initial_window": initial_window, "iterate_func": func,
                                         "iterate_window": window, "combine_coeff": coeff})  # fmt: skip
    for cuts in ((), _splits(initial_window, len(df))):
        (got,) = run_batches(op, df["key"], [df["x"], df["initial"]], cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


@pytest.mark.parametrize(("func", "window"), ITER_FUNCS)
def test_conditional_iterate_matches_the_literal_recursion(func: str, window: int | None) -> None:
    df = _iter_frame(4)
    expected = per_key(df["key"].to_numpy(), [df["cond"].to_numpy(), df["x"].to_numpy()],
                       _iterate_ref("cond", func, window))  # fmt: skip
    op = make_state_op("conditional_iterate", {"false_iter_func": func, "func_window": window})
    for cuts in ((), _splits(4, len(df))):
        (got,) = run_batches(op, df["key"], [df["cond"], df["x"]], cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


def _nan_or(vals: np.ndarray, f: Callable[[np.ndarray], float]) -> float:
    v = vals[~np.isnan(vals)]
    return f(v) if len(v) else NAN


PY_COMBINERS: dict[str, Callable[[np.ndarray, float], float]] = {
    "sum_add": lambda last, x: _nan_or(last, np.sum) + x,
    "avg_add": lambda last, x: _nan_or(last, np.mean) + x,
    "prod_mul": lambda last, x: _nan_or(last, np.prod) * x,
    "max": lambda last, x: _nan_or(np.append(last, x), np.max),
    "min": lambda last, x: _nan_or(np.append(last, x), np.min),
}


def _generic_ref(window: int, fn: Callable[[np.ndarray, float], float]) -> Callable[..., np.ndarray]:
    def ref(x: np.ndarray, initial: np.ndarray) -> np.ndarray:
        out: list[float] = []
        for k in range(len(x)):
            if window == 0:
                out.append(fn(np.array([out[-1] if out else initial[k]]), x[k]))
            elif k < window:
                out.append(initial[k])
            else:
                out.append(fn(np.array(out[k - window :]), x[k]))
        return np.array(out)

    return ref


@pytest.mark.parametrize("combiner", sorted(PY_COMBINERS))
@pytest.mark.parametrize("window", [0, 1, 3])
@pytest.mark.parametrize("as_callable", [False, True])
def test_generic_state_iterate_matches_a_python_loop(combiner: str, window: int, as_callable: bool) -> None:
    df = _iter_frame(5)
    fn = PY_COMBINERS[combiner]
    # a NULL x makes a NULL output (see the NULL test below), which would hide most of the comparison
    x = np.clip(df["x"].fillna(0.25).to_numpy(), -1.1, 1.1)
    initial = df["initial"].to_numpy()
    if combiner == "prod_mul":  # products of past outputs must shrink, not overflow
        x, initial = np.clip(x, -1, 1), initial / 7
    expected = per_key(df["key"].to_numpy(), [x, initial], _generic_ref(window, fn))
    assert np.isfinite(expected).sum() > len(df) // 2
    op = make_state_op("generic_state_iterate", {"window": window, "func": fn if as_callable else combiner})
    for cuts in ((), _splits(5, len(df))):
        (got,) = run_batches(op, df["key"], [x, initial], cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


def test_generic_state_iterate_nulls() -> None:
    # window 0: a NULL x gives a NULL output, and the next row iterates on it
    close(one_key("generic_state_iterate", [1, NAN, 2], [0, 0, 0], window=0, func="sum_add"), [1, NAN, NAN])
    # window 2: combiners skip NULL outputs; the first two rows are the initial values, NULL included
    out = one_key("generic_state_iterate", [9, 9, NAN, 1, 1], [NAN, 2, 5, 5, 5], window=2, func="sum_add")
    close(out, [NAN, 2, NAN, 3, 4])


def test_generic_state_iterate_callable_errors_name_the_function() -> None:
    def broken(last: np.ndarray, x: float) -> float:
        raise ZeroDivisionError("boom")

    op = make_state_op("generic_state_iterate", {"window": 0, "func": broken})
    with pytest.raises(ExecutionError, match=r"func=<function .*broken.* raised ZeroDivisionError: boom"):
        op.run(op.init_state(), np.zeros(1, dtype=np.int64), 1, [np.ones(1), np.ones(1)])


def test_iterate_functions_accept_dolphindb_names() -> None:
    op = make_state_op("conditional_iterate", {"false_iter_func": "cumlastNot"})
    assert op == make_state_op("conditional_iterate", {"false_iter_func": "cumlast_not"})


def _last_plus(last: np.ndarray, x: float) -> float:
    return float(last[-1] + x)


# ---------------------------------------------------------------- streaming == batch (all groups)

PROPERTY_CONFIGS: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    *(("segmentby", {"func": f}, ("x", "s")) for f in Segmentby._FUNCS),
    *(("moving", {"window": w, "func": a, "min_periods": mp}, ("x",))
      for a in AGGREGATES for w, mp in ((3, None), (4, 2))),
    *(("window", {"d1": d1, "d2": d2, "func": a}, ("x",)) for a in ("sum", "med", "first", "count")
      for d1, d2 in ((-3, -1), (-2, 0))),
    *(("accumulate", {"func": f, "init": i}, ("x",)) for f in ("add", "sub", "max") for i in (None, 1.0)),
    ("talib", {"func": "msum", "window": 3}, ("x",)),
    ("talib", {"func": "mavg", "window": 2, "min_periods": 1}, ("x",)),
    ("talib", {"func": "ema", "window": 2}, ("x",)),
    ("talib", {"func": "cummax"}, ("x",)),
    ("talib_null", {}, ("x", "s")),
    *(("state_iterate", {"initial_window": 2, "iterate_func": f, "iterate_window": w, "combine_coeff": (0.5, 0.5)},
       ("x", "s")) for f, w in ITER_FUNCS),
    *(("conditional_iterate", {"false_iter_func": f, "func_window": w}, ("s", "x")) for f, w in ITER_FUNCS[::2]),
    *(("generic_state_iterate", {"window": w, "func": f}, ("x", "s")) for f in COMBINERS for w in (0, 2)),
    ("generic_state_iterate", {"window": 2, "func": _last_plus}, ("x", "s")),
]  # fmt: skip


def test_property_configs_cover_every_function() -> None:
    assert len(HIGHER_NAMES) == 9
    assert {n for n, _, _ in PROPERTY_CONFIGS} == HIGHER_NAMES


_values = st.one_of(
    st.just(NAN),
    st.floats(-50, 50, allow_nan=False),
    st.sampled_from([0.0, 1.0, 1.0, 2.5, math.inf, -math.inf]),
)


@st.composite
def _batches(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], np.ndarray, list[int]]:
    n = draw(st.integers(0, 50))
    x = np.array(draw(st.lists(_values, min_size=n, max_size=n)), dtype=np.float64)
    s = np.array(draw(st.lists(st.sampled_from([0.0, 1.0, NAN]), min_size=n, max_size=n)), dtype=np.float64)
    keys = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    splits = draw(st.lists(st.integers(0, n), max_size=5))
    return {"x": x, "s": s}, keys, sorted(splits)


@settings(max_examples=60, deadline=None)
@given(data=_batches())
def test_streaming_equals_batch(data: tuple) -> None:
    cols, keys, splits = data
    for name, params, columns in PROPERTY_CONFIGS:
        op = make_state_op(name, params)
        args = [cols[c] for c in columns]
        with np.errstate(all="ignore"):
            batch = run_batches(op, keys, args)
            streamed = run_batches(op, keys, args, splits)
        for b, s in zip(batch, streamed, strict=True):
            np.testing.assert_array_equal(s, b, err_msg=f"{name}{params}")


@pytest.mark.parametrize(("name", "params", "columns"), PROPERTY_CONFIGS[::4])
def test_state_is_snapshot_safe_and_picklable(
    name: str, params: dict[str, Any], columns: tuple[str, ...]
) -> None:
    op = make_state_op(name, params)
    init = op.init_state()
    assert all(a.shape[0] == 0 for a in init.values())
    df = _frame(3, n=200, n_keys=3)
    slots = df["key"].to_numpy()
    args = [df["x" if c == "x" else "seg"].to_numpy() for c in columns]
    s1, _o1 = op.run(init, slots[:100], 3, [a[:100] for a in args])
    frozen = {k: v.copy() for k, v in s1.items()}
    _, o2 = op.run(s1, slots[100:], 3, [a[100:] for a in args])
    assert all(np.array_equal(frozen[k], s1[k], equal_nan=True) for k in s1)
    _, o3 = op.run(pickle.loads(pickle.dumps(s1)), slots[100:], 3, [a[100:] for a in args])
    for a, b in zip(o2, o3, strict=True):
        np.testing.assert_array_equal(a, b)


def test_moving_fast_path_state_differs_from_the_scan_but_both_are_keyed() -> None:
    op = make_state_op("moving", {"window": 3, "func": "sum"})
    assert all(k.startswith("inner.") for k in op.init_state())
    with patch.object(Moving, "fast_path", False):
        assert set(op.init_state()) == {"ring", "n_rows", "wpos"}


# ---------------------------------------------------------------- parameter validation


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("segmentby", {"func": "cumprod"}, r"func='cumprod' is invalid; expected one of 'cumsum'"),
        ("segmentby", {}, "missing required parameter func="),
        ("moving", {"window": 3, "func": "mode"}, r"func='mode' is invalid; expected one of 'first', .*'sum'"),
        ("moving", {"window": 0, "func": "sum"}, r"window=0 is invalid"),
        ("moving", {"window": 3, "func": "sum", "min_periods": 4}, "must not exceed window=3"),
        ("moving", {"window": 3, "func": "sum", "minPeriods": 1}, "did you mean min_periods="),
        ("window", {"d1": -2, "d2": 1, "func": "sum"}, "d2=1 looks at later rows, which is not causal"),
        ("window", {"d1": 0, "d2": -1, "func": "sum"}, r"d1=0 is invalid; expected an integer <= d2=-1"),
        ("window", {"d1": -2.5, "d2": 0, "func": "sum"}, r"d1=-2.5 is invalid"),
        ("window", {"d1": -200_000, "d2": 0, "func": "sum"}, "too large"),
        ("accumulate", {"func": "div"}, r"func='div' is invalid; expected one of 'add'"),
        ("accumulate", {"func": "add", "init": "zero"}, r"init='zero' is invalid; expected a finite number"),
        (
            "talib",
            {"func": "nope"},
            r"func='nope' is invalid; expected the name of a one-column.*usable: .*msum",
        ),
        ("talib", {"func": "mcorr", "window": 3}, "one-column, one-output"),
        ("talib", {"func": "linear_time_trend", "window": 3}, "one-column, one-output"),
        ("talib", {"func": "talib"}, "one-column, one-output"),
        ("talib", {"func": "msum"}, r"talib': func='msum': .*missing required parameter window="),
        ("talib", {"func": "msum", "window": 3, "alpha": 0.5}, r"func='msum': .*unknown parameter alpha="),
        ("talib", {"func": "msum", "window": 3, "top": 2}, r"unknown parameter top=2"),
        *(
            ("state_iterate", {"initial_window": 1, "combine_coeff": (1, 1), **p}, frag)
            for p, frag in [
                (
                    {"iterate_func": "mmed", "iterate_window": 3},
                    r"iterate_func='mmed' is invalid; expected one of 'msum'",
                ),
                ({"iterate_func": "msum"}, r"iterate_window=None is invalid; expected the window of msum"),
                ({"iterate_func": "msum", "iterate_window": 0}, r"iterate_window=0 is invalid"),
                ({"iterate_func": "ffill", "iterate_window": 2}, "ffill takes no window"),
                ({"iterate_func": "move", "iterate_window": 0}, "do not exist yet"),
                ({"iterate_func": "move", "iterate_window": -1}, "do not exist yet"),
                ({"iterate_func": "tmsum", "iterate_window": 3}, "iterate_func='tmsum' is invalid"),
            ]
        ),
        (
            "state_iterate",
            {"initial_window": 0, "iterate_func": "ffill", "combine_coeff": (1, 1)},
            "initial_window=0",
        ),
        (
            "state_iterate",
            {"initial_window": 1, "iterate_func": "ffill", "combine_coeff": (1,)},
            "two finite numbers",
        ),
        (
            "state_iterate",
            {"initial_window": 1, "iterate_func": "ffill", "combine_coeff": "0.5 0.5"},
            "combine_coeff",
        ),
        (
            "state_iterate",
            {"initial_window": 1, "iterate_func": "ffill"},
            "missing required parameter combine_coeff=",
        ),
        ("conditional_iterate", {"false_iter_func": "mavg"}, r"func_window=None is invalid"),
        ("generic_state_iterate", {"window": -1, "func": "sum_add"}, r"window=-1 is invalid"),
        (
            "generic_state_iterate",
            {"window": 1, "func": "nope"},
            r"one of 'sum_add', .* or pass a Python callable",
        ),
    ],
)
def test_bad_parameters_are_explained(name: str, params: dict[str, Any], fragment: str) -> None:
    with pytest.raises(GraphDefinitionError, match=fragment):
        make_state_op(name, params)


def test_camel_case_function_names_are_accepted() -> None:
    assert make_state_op("moving", {"window": 3, "func": "firstNot"}) == Moving(3, "first_not")


# ---------------------------------------------------------------- end to end


def _engine_out(metrics: Sequence[Any], df: pd.DataFrame, cuts: Sequence[int]) -> pd.DataFrame:
    schema = Schema.parse({"sym": "string", "x": "double", "seg": "double"})
    engine = ReactiveStateEngine(name="higher", input_schema=schema,
                                 metrics=tuple(to_metric(m, where="t") for m in metrics), key_column=("sym",))  # fmt: skip
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.append_column(SEQ, pa.array(np.arange(len(df), dtype=np.int64)))
    proc = engine.processor()
    state, outs = proc.new_state(), []
    for a, b in itertools.pairwise([0, *cuts, len(df)]):
        state, out = proc.process(state, table.slice(a, b - a))
        outs.append(out)
    return pa.concat_tables(outs).to_pandas().sort_values(SEQ).reset_index(drop=True)


def test_higher_order_functions_run_in_the_reactive_state_engine() -> None:
    from headwater.functions import generic_state_iterate, moving, segmentby, state_iterate

    assert str(segmentby("x", "seg", "cumsum")) == "segmentby(x, seg, func='cumsum')"
    assert str(moving("x", 3, "med")) == "moving(x, window=3, func='med')"
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"sym": list("abcab" * 8), "x": np.round(rng.normal(size=40), 2),
                       "seg": rng.integers(0, 2, 40).astype(float)})  # fmt: skip
    df.loc[[0, 1, 7], "x"] = NAN
    metrics = [
        "segmentby(x, seg, func='cumsum') as s",
        moving("x", 3, "med", min_periods=2).alias("m"),
        "window(x, -2, -1, 'max') as w",
        "accumulate(x, 'max') as a",
        "talib(x, func='msum', window=3) as t",
        "talib_null(x, seg) as n1, n2",
        "conditional_iterate(seg > 0, x, 'msum', func_window=2) as c",
        state_iterate("x", "seg", 2, "mavg", (0.5, 0.5), iterate_window=2).alias("si"),
        generic_state_iterate("x", "seg", 1, _last_plus).alias("g"),
    ]
    expected = {
        "s": ("segmentby", ("x", "seg"), {"func": "cumsum"}),
        "m": ("moving", ("x",), {"window": 3, "func": "med", "min_periods": 2}),
        "w": ("window", ("x",), {"d1": -2, "d2": -1, "func": "max"}),
        "a": ("accumulate", ("x",), {"func": "max"}),
        "t": ("talib", ("x",), {"func": "msum", "window": 3}),
        "c": ("conditional_iterate", ("pos", "x"), {"false_iter_func": "msum", "func_window": 2}),
        "si": (
            "state_iterate",
            ("x", "seg"),
            {"initial_window": 2, "iterate_func": "mavg", "iterate_window": 2, "combine_coeff": (0.5, 0.5)},
        ),
        "g": ("generic_state_iterate", ("x", "seg"), {"window": 1, "func": _last_plus}),
    }
    df["pos"] = (df["seg"] > 0).astype(float)
    for cuts in ((), (1, 17, 18)):
        out = _engine_out(metrics, df.drop(columns="pos"), cuts)
        for col, (name, columns, params) in expected.items():
            (want,) = run_batches(make_state_op(name, params), df["sym"].map(ord), [df[c] for c in columns])
            np.testing.assert_allclose(
                out[col].to_numpy(float), want, rtol=1e-12, equal_nan=True, err_msg=col
            )
