"""Per-key incremental state operators: doc examples, pandas references, streaming == batch."""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Callable, Sequence
from typing import Any
from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.errors import GraphDefinitionError, UnknownFunctionError
from headwater.kernels.base.operators import StateOp
from headwater.kernels.moving.running import MovingExtreme
from headwater.kernels.registry import STATE_OPS, make_state_op

NAN = math.nan


def run_batches(op: StateOp, keys: Sequence[int], x: np.ndarray, splits: Sequence[int] = ()) -> np.ndarray:
    """Feed ``x`` in batches cut at ``splits``, giving each key a slot on first sight like the engine."""
    slot_of: dict[int, int] = {}
    slots = np.array([slot_of.setdefault(int(k), len(slot_of)) for k in keys], dtype=np.int64)
    bounds = [0, *sorted(splits), len(x)]
    state = op.init_state()
    outs = []
    for a, b in itertools.pairwise(bounds):
        n_keys = int(slots[:b].max()) + 1 if b else 0
        state, (out,) = op.run(state, slots[a:b], n_keys, [x[a:b]])
        assert out.dtype == np.float64 and out.shape == (b - a,)
        outs.append(out)
    return np.concatenate(outs) if outs else np.empty(0)


def one_key(name: str, x: Sequence[float], **params: Any) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    return run_batches(make_state_op(name, params), [0] * len(arr), arr)


def close(got: np.ndarray, expected: Sequence[float], decimals: int | None = None) -> None:
    if decimals is not None:
        got = np.round(got, decimals)
    np.testing.assert_allclose(got, np.asarray(expected, dtype=np.float64), rtol=1e-12, atol=0)


# ---------------------------------------------------------------- documented examples

DOC_EXAMPLES: list[tuple[str, list[float], dict[str, Any], list[float], int | None]] = [
    ("msum", [2, 1, 3, 7, 6, 5, 4], {"window": 3}, [NAN, NAN, 6, 11, 16, 18, 15], None),
    ("msum", [2, 1, 3, 7, 6, 5, 4, 9, 8, 10], {"window": 3}, [NAN, NAN, 6, 11, 16, 18, 15, 18, 21, 27], None),
    ("msum", [2, 1, 3, NAN, 6, 5, 4], {"window": 3}, [NAN, NAN, 6, 4, 9, 11, 15], None),
    ("msum", [2, 1, 3, NAN, 6, 5, 4], {"window": 3, "min_periods": 1}, [2, 3, 6, 4, 9, 11, 15], None),
    ("mavg", [7, 4, 6, NAN, -5, 32, 9, 8], {"window": 4}, [NAN, NAN, NAN, 5.67, 1.67, 11, 12, 11], 2),
    ("mmax", [2, 1, 3, NAN, 6, 5, 4], {"window": 3}, [NAN, NAN, 3, 3, 6, 6, 6], None),
    ("mcount", [7, 4, 5, 8, 9], {"window": 3}, [1, 2, 3, 3, 3], None),
    ("mcount", [7, 4, 5, 8, 9], {"window": 3, "min_periods": 2}, [NAN, 2, 3, 3, 3], None),
    ("mcount", [1, 2, 3, NAN, 5], {"window": 3}, [1, 2, 3, 2, 2], None),
    ("mcount", [1, 2, 3, NAN, 5], {"window": 3, "min_periods": 3}, [NAN, NAN, 3, NAN, NAN], None),
    # mfirst/mlast docs use a 3s window over one row per second: a count window that starts partial
    ("mfirst", [2, 1, 3, NAN, 6, 5, 4], {"window": 3, "min_periods": 1}, [2, 2, 2, 1, 3, NAN, 6], None),
    ("mlast", [2, 1, 3, NAN, 6, 5, 4], {"window": 3, "min_periods": 1}, [2, 1, 3, NAN, 6, 5, 4], None),
    ("cumsum", [1, 1, 2, 3, 4, 5, NAN, 8, 9, 1, 3], {}, [1, 2, 4, 7, 11, 16, 16, 24, 33, 34, 37], None),
    ("cumcount", [1, 2, NAN, 3, 4, NAN, 5, 6], {}, [1, 2, 2, 3, 4, 4, 5, 6], None),
    ("cumcount", [5, 6, NAN, NAN, 8], {}, [1, 2, 2, 2, 3], None),
    ("ema", [12.1, 12.2, 12.6, 12.8, 11.9, 11.6, 11.2], {"window": 3},
     [NAN, NAN, 12.3, 12.55, 12.225, 11.9125, 11.55625], 10),
    ("ema", [12.1, 12.2, 12.6, 12.8, 11.9, 11.6, 11.2], {"window": 3, "warmup": True},
     [12.1, 12.2, 12.4667, 12.6333, 12.2667, 11.9333, 11.5667], 4),
    ("wilder", [12.1, 12.2, 12.6, 12.8, 11.9], {"window": 3}, [NAN, NAN, 12.3, 12.4667, 12.2778], 4),
    ("ewm_mean", [0, 1, 2, NAN, 4], {"com": 0.5}, [0, 0.75, 1.615385, 1.615385, 3.670213], 6),
    ("ewm_mean", [0, 1, 2, NAN, 4], {"com": 0.5, "ignore_na": True}, [0, 0.75, 1.615385, 1.615385, 3.225], 6),
    # equal leading values still add weight (pandas 2.x): weights 1/4, 1/2, 1
    ("ewm_mean", [1, 1, 2], {"com": 1}, [1, 1, 11 / 7], None),
    ("mimax", [1.2, 2, NAN, 6, -1, 6], {"window": 3}, [NAN, NAN, 1, 2, 1, 0], None),
    ("mimax", [1.2, 2, NAN, 6, -1, 6], {"window": 3, "min_periods": 1}, [0, 1, 1, 2, 1, 0], None),
    ("mimax_last", [1.2, 2, NAN, -1, 6, -1], {"window": 3}, [NAN, NAN, 1, 0, 2, 1], None),
    ("prev_state", [1, 2.2, NAN, 2.2, 2.3, 1, 1.2], {}, [NAN, 1, 2.2, 2.2, 2.2, 2.3, 1], None),
    ("prev_state", [1.0, 1.1, 1.0, 0.9], {}, [NAN, 1, 1.1, 1], None),
    ("prev_state", [5.5, 4.2, 1.6, 1.8], {}, [NAN, 5.5, 4.2, 1.6], None),
    ("ratios", [3, 12, 0, -5, 32], {}, [NAN, 4, 0, NAN, -6.4], None),
    ("ratios", [2, 3, 6, NAN, 28, 7], {}, [NAN, 1.5, 2, NAN, NAN, 0.25], None),
    ("percent_change", [1, 2, 3], {}, [NAN, 1, 0.5], None),
    ("percent_change", list(range(1, 11)), {"n": 3},
     [NAN, NAN, NAN, 3, 1.5, 1, 0.75, 0.6, 0.5, 0.428571428571429], None),
]  # fmt: skip


@pytest.mark.parametrize(("name", "x", "params", "expected", "decimals"), DOC_EXAMPLES)
def test_documented_example(
    name: str, x: list[float], params: dict[str, Any], expected: list[float], decimals: int | None
) -> None:
    close(one_key(name, x, **params), expected, decimals)


def test_ta_null_after_start_outputs_null_and_keeps_state() -> None:
    with_null = one_key("ema", [1, 2, 3, NAN, 4, 5], window=2)
    without = one_key("ema", [1, 2, 3, 4, 5], window=2)
    close(with_null, [NAN, 1.5, 2.5, NAN, *without[3:]])
    # leading NULLs stay NULL and do not count towards the window
    close(one_key("wilder", [NAN, NAN, 3, 6, 9], window=2), [NAN, NAN, NAN, 4.5, 6.75])


def test_infinities_enter_and_leave_windows() -> None:
    inf = math.inf
    close(one_key("msum", [1, inf, 2, 3, -inf, inf, 4, 5], window=2), [NAN, inf, inf, 5, -inf, NAN, inf, 9])
    close(one_key("mavg", [1, inf, 2, 3], window=2), [NAN, inf, inf, 2.5])
    close(one_key("mstd", [1, inf, 2, 4], window=2), [NAN, NAN, NAN, math.sqrt(2)])
    close(one_key("mmax", [1, -inf, 2], window=2), [NAN, 1, 2])


def test_constant_window_has_exactly_zero_variance() -> None:
    x = [0.1, 0.7, 0.3, 0.3, 0.3, NAN, 0.3]
    out = one_key("mvar", x, window=3)
    assert out[4] == 0.0 and out[5] == 0.0 and out[6] == 0.0


def test_moving_variance_is_accurate_on_large_offsets() -> None:
    rng = np.random.default_rng(7)
    x = 1e6 + rng.normal(0, 0.01, 3000)
    out = one_key("mvar", x, window=50)
    exact = np.var(np.lib.stride_tricks.sliding_window_view(x, 50), axis=1, ddof=1)
    np.testing.assert_allclose(out[49:], exact, rtol=1e-6)


# ---------------------------------------------------------------- pandas references


def _frame(seed: int, n: int = 600, n_keys: int = 5) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(0, 3, n), 1)
    x[rng.random(n) < 0.25] = np.nan
    x[100:110] = 1.5  # a run of equal values
    keys = rng.integers(0, n_keys, n)
    keys[:4] = 0  # key 0 starts with NULLs
    x[:4] = np.nan
    return pd.DataFrame({"key": keys, "x": x})


def _rolling_ref(agg: str, window: int, min_periods: int | None) -> Callable[[pd.Series], pd.Series]:
    def ref(s: pd.Series) -> pd.Series:
        nobs = s.notna().astype(float).rolling(window, min_periods=1).sum()
        pos = np.arange(len(s))
        roll = s.rolling(window, min_periods=1)
        if agg == "count":
            val = nobs
        elif agg in ("var", "std"):
            val = getattr(roll, agg)(ddof=1)
        elif agg in ("varp", "stdp"):
            val = getattr(roll, agg[:3])(ddof=0)
        elif agg.startswith("i"):
            pick = np.nanargmax if agg.startswith("imax") else np.nanargmin
            if agg.endswith("_last"):
                val = roll.apply(lambda a: len(a) - 1 - pick(a[::-1]), raw=True)
            else:
                val = roll.apply(pick, raw=True)
        elif agg == "first":
            val = s.shift(window - 1)
            val[pos < window - 1] = s.iloc[0]
        elif agg == "last":
            val = s
        else:
            val = getattr(roll, "mean" if agg == "avg" else agg)()
        ok = nobs >= (min_periods or 1)
        if min_periods is None and agg != "count":
            ok &= pos >= window - 1
        return val.where(ok)

    return ref


def _ta_ref(window: int, alpha: float) -> Callable[[pd.Series], pd.Series]:
    def ref(s: pd.Series) -> pd.Series:
        v = s.dropna()
        out = pd.Series(np.nan, index=s.index)
        if len(v) >= window:
            seq = pd.Series([v.iloc[:window].mean(), *v.iloc[window:]])
            out[v.index[window - 1 :]] = seq.ewm(alpha=alpha, adjust=False).mean().to_numpy()
        return out

    return ref


def _ta_ma_ref(window: int, weighted: bool) -> Callable[[pd.Series], pd.Series]:
    weights = np.arange(1, window + 1) / (window * (window + 1) / 2)

    def ref(s: pd.Series) -> pd.Series:
        v = s.dropna()
        roll = v.rolling(window)
        avg = roll.apply(lambda a: a @ weights, raw=True) if weighted else roll.mean()
        return avg.reindex(s.index)

    return ref


def _prev_state_ref(s: pd.Series) -> pd.Series:
    # state id: a new state starts at every non-NULL value that differs from the previous row
    starts = s.notna() & (s != s.shift())
    state_value = s.where(starts)
    prev_of_start = state_value.dropna().shift().reindex(s.index)
    out = prev_of_start.where(starts).ffill().where(s.notna())
    return out.fillna(s.ffill().where(s.isna()))


def _div(num: pd.Series, den: pd.Series) -> pd.Series:
    return (num / den).where(den != 0)


REFERENCES: list[tuple[str, dict[str, Any], Callable[[pd.Series], pd.Series]]] = [
    *(
        ("ewm_mean", {"com": 1.5, "adjust": adj, "ignore_na": ign, "min_periods": mp},
         lambda s, adj=adj, ign=ign, mp=mp: s.ewm(com=1.5, adjust=adj, ignore_na=ign, min_periods=mp).mean())
        for adj in (True, False) for ign in (True, False) for mp in (0, 3)
    ),
    ("ewm_mean", {"span": 20, "adjust": False}, lambda s: s.ewm(span=20, adjust=False).mean()),
    ("ewm_mean", {"half_life": 4.5}, lambda s: s.ewm(halflife=4.5).mean()),
    ("ewm_mean", {"alpha": 0.3, "ignore_na": True}, lambda s: s.ewm(alpha=0.3, ignore_na=True).mean()),
    ("ewm_mean", {"alpha": 1.0}, lambda s: s.ewm(alpha=1.0).mean()),
    *(
        (f"ewm_{f}", {"com": 1.5, "adjust": adj, "ignore_na": ign, "min_periods": mp, "bias": bias},
         lambda s, f=f, adj=adj, ign=ign, mp=mp, bias=bias:
             getattr(s.ewm(com=1.5, adjust=adj, ignore_na=ign, min_periods=mp), f)(bias=bias))
        for f in ("var", "std") for adj in (True, False) for ign in (True, False)
        for mp, bias in ((0, False), (3, True))
    ),
    ("ewm_std", {"span": 10}, lambda s: s.ewm(span=10).std()),
    ("ema", {"window": 5}, _ta_ref(5, 2 / 6)),
    ("ema", {"window": 1}, _ta_ref(1, 1.0)),
    ("wilder", {"window": 4}, _ta_ref(4, 1 / 4)),
    ("gema", {"window": 3, "alpha": 0.2}, _ta_ref(3, 0.2)),
    *((n, {"window": w}, _ta_ma_ref(w, n == "wma")) for n in ("sma", "wma") for w in (1, 4)),
    *(
        (f"m{agg}", {"window": w, "min_periods": mp}, _rolling_ref(agg, w, mp))
        for agg in ("sum", "avg", "count", "max", "min", "std", "var", "stdp", "varp", "first", "last",
                    "imax", "imin", "imax_last", "imin_last")
        for w, mp in ((1, None), (3, None), (4, 2), (10, None), (10, 10))
    ),
    # windows above MovingExtreme.scan_limit use the monotonic deque
    ("mmax", {"window": 65}, _rolling_ref("max", 65, None)),
    ("mmin", {"window": 100, "min_periods": 5}, _rolling_ref("min", 100, 5)),
    *((f"m{agg}", {"window": 70}, _rolling_ref(agg, 70, None)) for agg in ("imax", "imin_last")),
    ("prev", {}, lambda s: s.shift(1)),
    ("move", {"k": 3}, lambda s: s.shift(3)),
    ("deltas", {}, lambda s: s - s.shift(1)),
    ("deltas", {"n": 4}, lambda s: s - s.shift(4)),
    ("ratios", {}, lambda s: _div(s, s.shift(1))),
    ("percent_change", {"n": 2}, lambda s: _div(s, s.shift(2)) - 1),
    ("ffill", {}, lambda s: s.ffill()),
    ("ffill", {"limit": 1}, lambda s: s.ffill(limit=1)),
    ("cumsum", {}, lambda s: s.cumsum().ffill()),
    ("cumavg", {}, lambda s: s.cumsum().ffill() / s.notna().cumsum()),
    ("cummax", {}, lambda s: s.cummax().ffill()),
    ("cummin", {}, lambda s: s.cummin().ffill()),
    ("cumcount", {}, lambda s: s.notna().cumsum().astype(float)),
    ("cumprod", {}, lambda s: s.cumprod().ffill()),
    ("cumfirst_not", {}, lambda s: s.bfill().iloc[:1].reindex(s.index).ffill().where(s.notna().cumsum() > 0)),
    ("cumlast_not", {}, lambda s: s.ffill()),
    ("cumvar", {}, lambda s: s.expanding().var()),
    ("cumvarp", {}, lambda s: s.expanding().var(ddof=0)),
    ("cumstd", {}, lambda s: s.expanding().std()),
    ("cumstdp", {}, lambda s: s.expanding().std(ddof=0)),
    ("prev_state", {}, lambda s: _prev_state_ref(s)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "params", "ref"),
    REFERENCES,
    ids=[f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items())}" for n, p, _ in REFERENCES],
)
@pytest.mark.parametrize("seed", [1, 2])
def test_matches_pandas_reference_per_key(
    name: str, params: dict[str, Any], ref: Callable[[pd.Series], pd.Series], seed: int
) -> None:
    df = _frame(seed)
    expected = df.groupby("key")["x"].transform(ref).to_numpy(dtype=np.float64)
    op = make_state_op(name, params)
    x = df["x"].to_numpy()
    splits = np.sort(np.random.default_rng(seed).choice(len(x), 7, replace=False))
    for cuts in ((), splits):
        got = run_batches(op, df["key"].to_numpy(), x, cuts)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True)


@settings(max_examples=150, deadline=None)
@given(
    ref_case=st.sampled_from(REFERENCES),
    rows=st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from([NAN, NAN, 0.0, 1.0, 1.0, 2.0, -1.0, 0.5])),
        min_size=1, max_size=30,
    ),
)  # fmt: skip
def test_matches_pandas_on_small_discrete_data(
    ref_case: tuple[str, dict[str, Any], Callable[[pd.Series], pd.Series]], rows: list[tuple[int, float]]
) -> None:
    # few distinct values: equal neighbours, zeros and constant windows are common
    name, params, ref = ref_case
    df = pd.DataFrame(rows, columns=["key", "x"])
    with np.errstate(all="ignore"):
        expected = df.groupby("key")["x"].transform(ref).to_numpy(dtype=np.float64)
        got = run_batches(make_state_op(name, params), df["key"].to_numpy(), df["x"].to_numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=f"{name}{params}")


# This module covers two whole families and the one-column core of three more; the rest of those
# (ewm_cov, dema, cummed, ...) is covered by test_state_functions_pairwise.py.
CORE_OPS = {
    n for n, spec in STATE_OPS.items()
    if spec.build.__module__ in ("headwater.kernels.moving.running", "headwater.kernels.shift")
} | {
    "ewm_mean", "ewm_var", "ewm_std", "ema", "wilder", "gema", "sma", "wma", "cumsum", "cumavg", "cummax",
    "cummin", "cumcount", "cumprod", "cumfirst_not", "cumlast_not", "cumvar", "cumvarp", "cumstd", "cumstdp",
}  # fmt: skip


def test_every_registered_function_has_a_pandas_reference() -> None:
    # the other families have their own test modules
    assert len(CORE_OPS) == 42
    assert {n for n, _, _ in REFERENCES} == CORE_OPS


# ---------------------------------------------------------------- streaming == batch

PROPERTY_CONFIGS: list[tuple[str, dict[str, Any]]] = [
    ("ewm_mean", {"com": 2.0}),
    ("ewm_mean", {"span": 3, "adjust": False, "ignore_na": True, "min_periods": 2}),
    ("ema", {"window": 3}),
    ("ema", {"window": 2, "warmup": True}),
    ("wilder", {"window": 2}),
    ("gema", {"window": 3, "alpha": 0.4}),
    ("ewm_var", {"com": 2.0}),
    ("ewm_std", {"alpha": 0.5, "adjust": False, "ignore_na": True, "bias": True}),
    ("sma", {"window": 3}),
    ("wma", {"window": 2}),
    *((n, {"window": w}) for n in ("msum", "mavg", "mcount", "mstd", "mvar", "mstdp", "mvarp",
                                   "mmax", "mmin", "mfirst", "mlast", "mimax", "mimin", "mimax_last",
                                   "mimin_last") for w in (1, 3)),
    *((n, {"window": 4, "min_periods": 2}) for n in ("msum", "mstd", "mmax", "mmin", "mfirst")),
    ("prev", {}),
    ("move", {"k": 2}),
    ("deltas", {"n": 2}),
    ("ratios", {}),
    ("percent_change", {}),
    ("ffill", {}),
    ("ffill", {"limit": 2}),
    *((n, {}) for n in ("cumsum", "cumavg", "cummax", "cummin", "cumcount", "cumprod", "cumfirst_not",
                        "cumlast_not", "cumvar", "cumvarp", "cumstd", "cumstdp", "prev_state")),
]  # fmt: skip

_values = st.one_of(
    st.just(NAN),
    st.floats(-50, 50, allow_nan=False),
    st.sampled_from([0.0, 1.0, 1.0, 2.5, math.inf, -math.inf]),
)


@st.composite
def _batches(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[int]]:
    n = draw(st.integers(0, 60))
    x = np.array(draw(st.lists(_values, min_size=n, max_size=n)), dtype=np.float64)
    keys = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), dtype=np.int64)
    splits = draw(st.lists(st.integers(0, n), max_size=5))
    return x, keys, sorted(splits)


def test_property_configs_cover_every_function() -> None:
    assert {n for n, _ in PROPERTY_CONFIGS} == CORE_OPS


@settings(max_examples=60, deadline=None)
@given(data=_batches())
def test_streaming_equals_batch(data: tuple) -> None:
    # one draw feeds every operator: Hypothesis' own cost per example dominates the kernels'
    x, keys, splits = data
    for name, params in PROPERTY_CONFIGS:
        op = make_state_op(name, params)
        with np.errstate(all="ignore"):
            batch = run_batches(op, keys, x)
            streamed = run_batches(op, keys, x, splits)
        np.testing.assert_array_equal(streamed, batch, err_msg=f"{name}{params}")


@settings(max_examples=40, deadline=None)
@given(data=_batches(), window=st.integers(1, 6), min_periods=st.one_of(st.none(), st.integers(1, 6)))
def test_moving_extremes_deque_equals_scan(data: tuple, window: int, min_periods: int | None) -> None:
    x, keys, splits = data
    params = {"window": window, "min_periods": min(min_periods, window) if min_periods else None}
    for name in MovingExtreme._NAMES:
        op = make_state_op(name, params)
        scanned = run_batches(op, keys, x)
        with patch.object(MovingExtreme, "scan_limit", 0):
            assert op._layout()["dq_idx"].shape == (window,)
            np.testing.assert_array_equal(run_batches(op, keys, x, splits), scanned)


# ---------------------------------------------------------------- state contract


@pytest.mark.parametrize(("name", "params"), PROPERTY_CONFIGS[::3])
def test_state_is_snapshot_safe_and_picklable(name: str, params: dict[str, Any]) -> None:
    op = make_state_op(name, params)
    init = op.init_state()
    assert all(a.shape[0] == 0 for a in init.values())
    df = _frame(3, n=200, n_keys=3)
    slots, x = df["key"].to_numpy(), df["x"].to_numpy()
    s1, (o1,) = op.run(init, slots[:100], 3, [x[:100]])
    frozen = {k: v.copy() for k, v in s1.items()}
    _, (o2,) = op.run(s1, slots[100:], 3, [x[100:]])
    # the caller's old dict is untouched and can be replayed, also after a pickle round trip
    assert all(np.array_equal(frozen[k], s1[k], equal_nan=True) for k in s1)
    restored = pickle.loads(pickle.dumps(s1))
    _, (o3,) = op.run(restored, slots[100:], 3, [x[100:]])
    np.testing.assert_array_equal(o2, o3)
    np.testing.assert_array_equal(np.concatenate([o1, o2]), run_batches(op, slots, x))


def test_new_keys_grow_state() -> None:
    op = make_state_op("msum", {"window": 2})
    st0, (out,) = op.run(op.init_state(), np.array([0, 0]), 1, [np.array([1.0, 2.0])])
    assert st0["ring"].shape == (1, 2)
    st1, (out,) = op.run(st0, np.array([1, 0, 1]), 2, [np.array([5.0, 3.0, 6.0])])
    assert st1["ring"].shape == (2, 2)
    close(out, [NAN, 5, 11])


def test_run_rejects_bad_batches() -> None:
    op = make_state_op("prev", {})
    with pytest.raises(ValueError, match="key slots"):
        op.run(op.init_state(), np.array([0, 2]), 2, [np.zeros(2)])
    with pytest.raises(ValueError, match="column arguments"):
        op.run(op.init_state(), np.array([0]), 1, [])
    state, _ = op.run(op.init_state(), np.array([0, 1]), 2, [np.zeros(2)])
    with pytest.raises(ValueError, match="less than"):
        op.run(state, np.array([0]), 1, [np.zeros(1)])
    with pytest.raises(ValueError, match="another operator"):
        make_state_op("move", {"k": 3}).run(state, np.array([0]), 2, [np.zeros(1)])


# ---------------------------------------------------------------- parameter validation


@pytest.mark.parametrize("name", ["msum", "mmax", "mfirst", "mstd", "ema"])
@pytest.mark.parametrize("window", [0, -3, 102_401, 2.5, True])
def test_window_out_of_range_is_rejected(name: str, window: Any) -> None:
    with pytest.raises(GraphDefinitionError, match=rf"{name}.*window={window!r}.*\[1, 102400\]"):
        make_state_op(name, {"window": window})


def test_max_window_is_accepted_and_runs() -> None:
    values = [np.array([3.0, 1.0, 2.0])]
    op = make_state_op("mmax", {"window": 102_400, "min_periods": 1})
    assert op.run(op.init_state(), np.array([0, 0, 0]), 1, values)[1][0].tolist() == [3.0, 3.0, 3.0]
    full_window = make_state_op("mmax", {"window": 102_400})  # min_periods defaults to the window: not reached
    assert np.isnan(full_window.run(full_window.init_state(), np.array([0, 0, 0]), 1, values)[1][0]).all()


@pytest.mark.parametrize(("name", "params"), [("move", {"k": 0}), ("move", {"k": -1}), ("deltas", {"n": -2})])
def test_non_causal_shift_is_rejected(name: str, params: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not causal"):
        make_state_op(name, params)


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("ewm_mean", {}, "exactly one of com=, span=, half_life= or alpha="),
        ("ewm_mean", {"com": 1, "span": 3}, "exactly one of"),
        ("ewm_mean", {"alpha": 0}, r"alpha=0 is invalid; expected a number in \(0, 1\]"),
        ("ewm_mean", {"span": 0.5}, "span"),
        ("ewm_mean", {"com": 1, "adjust": "yes"}, "adjust"),
        ("ewm_mean", {"com": 1, "halfLife": 2}, "did you mean half_life="),
        ("msum", {"window": 3, "minPeriods": 2}, "did you mean min_periods="),
        ("msum", {"window": 3, "min_periods": 4}, "must not exceed window=3"),
        ("msum", {"window": 3, "min_periods": 0}, "min_periods=0"),
        ("msum", {}, "missing required parameter window="),
        ("gema", {"window": 3, "alpha": 1.5}, r"alpha=1.5 is invalid"),
        ("ffill", {"limit": 0}, "limit=0"),
        ("prev", {"k": 1}, "valid parameters: none"),
    ],
)
def test_bad_parameters_are_explained(name: str, params: dict[str, Any], fragment: str) -> None:
    with pytest.raises(GraphDefinitionError, match=fragment):
        make_state_op(name, params)


def test_unknown_function_lists_choices() -> None:
    with pytest.raises(UnknownFunctionError, match=r"did you mean 'ewm_mean'.*Supported: .*msum"):
        make_state_op("ewmMean", {})


def test_none_parameters_mean_default() -> None:
    assert make_state_op("msum", {"window": 3, "min_periods": None}) == make_state_op("msum", {"window": 3})
    assert make_state_op("ewm_mean", {"span": 3, "com": None}) == make_state_op("ewm_mean", {"com": 1.0})
