"""Numba helpers and kernels that more than one family uses.

- ``kahan_add``: compensated running sums (moving sums, ``sma``, ``trima``, weighted sums).
- ``interpolated_quantile``: pandas' interpolation rules between two order statistics (``mpercentile``, ``cumpercentile``).
- ``tied_rank``: the rank of a value among ties (``mrank``, ``tmrank``).
- ``buffer_moments``: DolphinDB's skewness and kurtosis of a buffer (tm-functions and TopN).
- ``pair_moment``: correlation, covariance, beta and OLS over count windows by Welford add/remove
  (the pairwise m- and cum-functions, and ``linear_time_trend``); ``window == 0`` means cumulative
  (nothing ever leaves the window, and the rings may have width 0).

Kernels follow the contract of :mod:`headwater.kernels`. Numba's on-disk cache checks only the
file a kernel is defined in, so the kernels of other modules that call these helpers keep their
old compiled code after an edit here: delete the ``__pycache__`` folders under
``src/headwater/kernels`` when you change this file.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from headwater.kernels.base.operators import Field, State, f64, i64


@njit(cache=True, inline="always")
def kahan_add(k, v, total, comp):  # pragma: no cover - numba
    y = v - comp[k]
    t = total[k] + y
    comp[k] = (t - total[k]) - y
    total[k] = t


@njit(cache=True, inline="always")
def extend_run(v, run_v, run_n):  # pragma: no cover - numba
    """The run of equal values (value, length) after adding ``v`` to the run ``(run_v, run_n)``.

    A window whose values are one run has exactly zero variance, whatever the rounding of the sums.
    """
    if v == run_v:
        return run_v, run_n + 1
    return v, 1


# ---------------------------------------------------------------- quantiles


I_LINEAR, I_LOWER, I_HIGHER, I_NEAREST, I_MIDPOINT = 0, 1, 2, 3, 4


INTERPOLATIONS = {
    "linear": I_LINEAR, "lower": I_LOWER, "higher": I_HIGHER, "nearest": I_NEAREST,
    "midpoint": I_MIDPOINT,
}  # fmt: skip


@njit(cache=True, inline="always", error_model="numpy")
def interpolated_quantile(lo_v, hi_v, frac, idx, interpolation):  # pragma: no cover - numba
    """pandas' rolling quantile rules between the idx-th and (idx+1)-th smallest values."""
    if frac == 0.0 or interpolation == I_LOWER:
        return lo_v
    if interpolation == I_LINEAR:
        return lo_v + (hi_v - lo_v) * frac
    if interpolation == I_HIGHER:
        return hi_v
    if interpolation == I_MIDPOINT:
        return (lo_v + hi_v) / 2.0
    # nearest, ties to the even index like round()
    if frac == 0.5:
        return lo_v if idx % 2 == 0 else hi_v
    return lo_v if frac < 0.5 else hi_v


# ---------------------------------------------------------------- ranks


RANK_MIN, RANK_MAX, RANK_AVERAGE = 0, 1, 2


TIES = {"min": RANK_MIN, "max": RANK_MAX, "average": RANK_AVERAGE}
"""The codes of ``ties_method``, how equal values rank."""


@njit(cache=True, inline="always")
def tied_rank(before, equal, ties):  # pragma: no cover - numba
    """The 0-based rank of a value with ``before`` values ranked ahead of it and ``equal`` ties (itself included)."""
    if ties == RANK_MIN:
        return float(before)
    if ties == RANK_MAX:
        return float(before + equal - 1)
    return before + (equal - 1) / 2.0


# ---------------------------------------------------------------- moments


@njit(cache=True)
def buffer_moments(a, m, kurt, biased):  # pragma: no cover - numba
    """DolphinDB ``skew`` / ``kurtosis`` (not excess) of a[:m] by two passes."""
    if m == 0:
        return np.nan
    lo = a[0]
    hi = a[0]
    total = 0.0
    for j in range(m):
        total += a[j]
        lo = min(lo, a[j])
        hi = max(hi, a[j])
    if lo == hi:  # constant (or a single value): the ratios are 0/0
        return np.nan
    mean = total / m
    m2 = 0.0
    m3 = 0.0
    m4 = 0.0
    for j in range(m):
        d = a[j] - mean
        d2 = d * d
        m2 += d2
        m3 += d2 * d
        m4 += d2 * d2
    m2 /= m
    m3 /= m
    m4 /= m
    if not kurt:
        g1 = m3 / m2**1.5
        if biased:
            return g1
        return np.nan if m < 3 else g1 * np.sqrt(m * (m - 1.0)) / (m - 2.0)
    g2 = m4 / (m2 * m2)
    if biased:
        return np.nan if m < 3 else g2
    if m < 4:
        return np.nan
    return ((m + 1.0) * (g2 - 3.0) + 6.0) * (m - 1.0) / ((m - 2.0) * (m - 3.0)) + 3.0


# ---------------------------------------------------------------- co-moments over count windows


# Operations of pair_moment.
CORR, COVAR, COVARP, BETA, SLR = 0, 1, 2, 3, 4


@njit(cache=True, inline="always", error_model="numpy")
def _pair_add(
    k, xv, yv, nobs, n_inf, mean_x, mean_y, m2x, m2y, cxy, run_x, run_xn, run_y, run_yn
):  # pragma: no cover
    nobs[k] += 1
    if not (np.isfinite(xv) and np.isfinite(yv)):
        n_inf[k] += 1
        return
    m = nobs[k] - n_inf[k]
    dx = xv - mean_x[k]
    mean_x[k] += dx / m
    dy = yv - mean_y[k]
    mean_y[k] += dy / m
    m2x[k] += dx * (xv - mean_x[k])
    m2y[k] += dy * (yv - mean_y[k])
    cxy[k] += dx * (yv - mean_y[k])
    run_x[k], run_xn[k] = extend_run(xv, run_x[k], run_xn[k])
    run_y[k], run_yn[k] = extend_run(yv, run_y[k], run_yn[k])


@njit(cache=True, inline="always", error_model="numpy")
def _pair_remove(k, xv, yv, nobs, n_inf, mean_x, mean_y, m2x, m2y, cxy):  # pragma: no cover
    m = nobs[k] - n_inf[k]
    nobs[k] -= 1
    if not (np.isfinite(xv) and np.isfinite(yv)):
        n_inf[k] -= 1
        return
    if m <= 1:
        mean_x[k] = 0.0
        mean_y[k] = 0.0
        m2x[k] = 0.0
        m2y[k] = 0.0
        cxy[k] = 0.0
        return
    dx = xv - mean_x[k]
    mean_x[k] -= dx / (m - 1)
    dy = yv - mean_y[k]
    mean_y[k] -= dy / (m - 1)
    m2x[k] -= dx * (xv - mean_x[k])
    m2y[k] -= dy * (yv - mean_y[k])
    cxy[k] -= dx * (yv - mean_y[k])


@njit(cache=True, error_model="numpy")
def _pair_refresh(k, ring_x, ring_y, mean_x, mean_y, m2x, m2y, cxy):  # pragma: no cover - numba
    """Recompute the co-moment sums of the window's finite pairs exactly (two passes over the ring)."""
    c = 0
    sx = 0.0
    sy = 0.0
    w = ring_x.shape[1]
    for j in range(w):
        a = ring_x[k, j]
        b = ring_y[k, j]
        if np.isfinite(a) and np.isfinite(b):
            c += 1
            sx += a
            sy += b
    mx = sx / c if c else 0.0
    my = sy / c if c else 0.0
    vx = vy = cv = 0.0
    for j in range(w):
        a = ring_x[k, j]
        b = ring_y[k, j]
        if np.isfinite(a) and np.isfinite(b):
            vx += (a - mx) * (a - mx)
            vy += (b - my) * (b - my)
            cv += (a - mx) * (b - my)
    mean_x[k] = mx
    mean_y[k] = my
    m2x[k] = vx
    m2y[k] = vy
    cxy[k] = cv


@njit(cache=True, error_model="numpy")
def pair_moment(
    op, slots, x, y, window, minp, full_only, row_x,
    ring_x, ring_y, n_rows, wpos, nobs, n_inf, mean_x, mean_y, m2x, m2y, cxy, run_x, run_xn, run_y, run_yn,
):  # pragma: no cover - numba  # fmt: skip
    """Correlation, covariance, beta and OLS (``op``) of y on x by Welford add/remove per key.

    ``row_x`` replaces x by the key's row counter (used by ``linear_time_trend``);
    the intercept is then reported at the window's first row. A window holding an
    infinite value outputs NULL. Each time the ring wraps the sums are recomputed
    from the window (amortised O(1)), so rounding drift never outlives one window
    length. Returns (out, slope); slope is empty unless op == SLR.
    """
    n = x.shape[0]
    out = np.empty(n)
    slope = np.empty(n if op == SLR else 0)
    for i in range(n):
        k = slots[i]
        r = n_rows[k]
        xv = float(r) if row_x else x[i]
        yv = y[i]
        if window > 0:
            pos = wpos[k]
            if r >= window:
                ox = ring_x[k, pos]
                oy = ring_y[k, pos]
                if ox == ox and oy == oy:
                    _pair_remove(k, ox, oy, nobs, n_inf, mean_x, mean_y, m2x, m2y, cxy)
            ring_x[k, pos] = xv
            ring_y[k, pos] = yv
            wpos[k] = pos + 1 if pos + 1 < window else 0
        if xv == xv and yv == yv:
            _pair_add(k, xv, yv, nobs, n_inf, mean_x, mean_y, m2x, m2y, cxy, run_x, run_xn, run_y, run_yn)
        n_rows[k] = r + 1
        if window > 0 and wpos[k] == 0:
            # once per window length: drop the rounding drift of add/remove (amortised O(1))
            _pair_refresh(k, ring_x, ring_y, mean_x, mean_y, m2x, m2y, cxy)
        m = nobs[k]
        res = np.nan
        beta = np.nan
        if m >= minp and m > 0 and not (full_only and r + 1 < window) and n_inf[k] == 0:
            const_x = run_xn[k] >= m
            const_y = run_yn[k] >= m
            vx = 0.0 if const_x else max(m2x[k], 0.0)
            vy = 0.0 if const_y else max(m2y[k], 0.0)
            c = 0.0 if (const_x or const_y) else cxy[k]
            if op == COVAR:
                if m >= 2:
                    res = c / (m - 1)
            elif op == COVARP:
                res = c / m
            elif op == CORR:
                den = np.sqrt(vx) * np.sqrt(vy)  # vx * vy may underflow
                if m >= 2 and den > 0.0:
                    res = min(max(c / den, -1.0), 1.0)
            elif m >= 2 and vx > 0.0:  # BETA, SLR
                beta = c / vx
                if op == BETA:
                    res = beta
                else:
                    mx = mean_x[k]
                    if row_x:
                        mx -= r + 1 - min(r + 1, window)
                    res = mean_y[k] - beta * mx
        out[i] = res
        if op == SLR:
            slope[i] = beta
    return out, slope


def pair_moment_layout(width: int) -> dict[str, Field]:
    return {
        "ring_x": f64(shape=(width,)), "ring_y": f64(shape=(width,)), "n_rows": i64(), "wpos": i64(),
        "nobs": i64(), "n_inf": i64(), "mean_x": f64(0.0), "mean_y": f64(0.0), "m2x": f64(0.0),
        "m2y": f64(0.0), "cxy": f64(0.0), "run_x": f64(), "run_xn": i64(), "run_y": f64(), "run_yn": i64(),
    }  # fmt: skip


def run_pair_moment(
    op: int, st: State, slots: np.ndarray, x: np.ndarray, y: np.ndarray, window: int, minp: int,
    full_only: bool, row_x: bool = False,
) -> list[np.ndarray]:  # fmt: skip
    out, slope = pair_moment(
        op, slots, x, y, window, minp, full_only, row_x,
        st["ring_x"], st["ring_y"], st["n_rows"], st["wpos"], st["nobs"], st["n_inf"], st["mean_x"],
        st["mean_y"], st["m2x"], st["m2y"], st["cxy"], st["run_x"], st["run_xn"], st["run_y"], st["run_yn"],
    )  # fmt: skip
    return [out, slope] if op == SLR else [out]
