"""Numba kernels behind :mod:`headwater.kernels.ops_pairwise`.

Same contract as :mod:`headwater.kernels.kernels`: each kernel walks one
micro-batch row by row in arrival order, updates the per-key state arrays in
place at ``slots[i]`` and returns float64 outputs, one value per row. NaN is
NULL. Validation, state growth and copying live in the Python wrappers.

Two-argument kernels use a pair only when both values are non-NULL. Moving
kernels take ``window > 0``; ``window == 0`` means cumulative (nothing ever
leaves the window, and the ring arrays may have width 0).

Kernels compile with numpy's error model: a float division by zero gives
inf/NaN instead of raising, and every result that could divide by a zero or
underflowed denominator checks it first.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from headwater.kernels.kernels import _kahan_add

# Operation codes shared with ops_pairwise.py.
CORR, COVAR, COVARP, BETA, SLR = 0, 1, 2, 3, 4
WSUM, WAVG = 0, 1


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
    # Runs of equal values let a constant window report exactly zero (co)variance.
    if xv == run_x[k]:
        run_xn[k] += 1
    else:
        run_x[k] = xv
        run_xn[k] = 1
    if yv == run_y[k]:
        run_yn[k] += 1
    else:
        run_y[k] = yv
        run_yn[k] = 1


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


@njit(cache=True, error_model="numpy")
def weighted_sum(
    op, slots, x, w, window, minp, full_only, ring_x, ring_w, n_rows, wpos, nobs, n_inf, s_xw, c_xw, s_w, c_w
):  # pragma: no cover - numba
    """wsum (sum of x*w) / wavg (sum of x*w over sum of w) of the key's valid pairs, Kahan-compensated."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        r = n_rows[k]
        xv = x[i]
        wv = w[i]
        if window > 0:
            pos = wpos[k]
            if r >= window:
                ox = ring_x[k, pos]
                ow = ring_w[k, pos]
                if ox == ox and ow == ow:
                    nobs[k] -= 1
                    p = ox * ow
                    if np.isfinite(p) and np.isfinite(ow):
                        _kahan_add(k, -p, s_xw, c_xw)
                        _kahan_add(k, -ow, s_w, c_w)
                    else:
                        n_inf[k] -= 1
            ring_x[k, pos] = xv
            ring_w[k, pos] = wv
            wpos[k] = pos + 1 if pos + 1 < window else 0
        if xv == xv and wv == wv:
            nobs[k] += 1
            p = xv * wv
            if np.isfinite(p) and np.isfinite(wv):
                _kahan_add(k, p, s_xw, c_xw)
                _kahan_add(k, wv, s_w, c_w)
            else:
                n_inf[k] += 1
        n_rows[k] = r + 1
        cnt = nobs[k]
        if cnt == n_inf[k]:
            # no finite pair left: drop accumulated rounding error
            s_xw[k] = 0.0
            c_xw[k] = 0.0
            s_w[k] = 0.0
            c_w[k] = 0.0
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window) or n_inf[k] > 0:
            out[i] = np.nan
        elif op == WSUM:
            out[i] = s_xw[k]
        else:
            out[i] = s_xw[k] / s_w[k] if s_w[k] != 0.0 else np.nan
    return out


@njit(cache=True, error_model="numpy")
def ewm_cov(
    slots, x, y, com, adjust, ignore_na, bias, minp, corr,
    mean_x, mean_y, cov, var_x, var_y, sum_wt, sum_wt2, old_wt, nobs,
):  # pragma: no cover - numba  # fmt: skip
    """pandas ``Series.ewm(com=...).cov(other, bias=...)`` or ``.corr(other)`` per key.

    The same arithmetic as pandas' ``ewmcov`` (window/aggregations.pyx); ``corr``
    divides the biased covariance by the square root of the biased variances.
    """
    n = x.shape[0]
    out = np.empty(n)
    alpha = 1.0 / (1.0 + com)
    f = 1.0 - alpha
    new_wt = 1.0 if adjust else alpha
    for i in range(n):
        k = slots[i]
        cx = x[i]
        cy = y[i]
        is_obs = cx == cx and cy == cy
        if is_obs:
            nobs[k] += 1
        mx = mean_x[k]
        if mx == mx:
            if is_obs or not ignore_na:
                sw = sum_wt[k] * f
                sw2 = sum_wt2[k] * (f * f)
                ow = old_wt[k] * f
                if is_obs:
                    old_mx = mx
                    old_my = mean_y[k]
                    my = old_my
                    if mx != cx:  # keeps a constant series exactly constant
                        mx = (ow * old_mx + new_wt * cx) / (ow + new_wt)
                    if my != cy:
                        my = (ow * old_my + new_wt * cy) / (ow + new_wt)
                    den = ow + new_wt
                    cov[k] = (
                        ow * (cov[k] + (old_mx - mx) * (old_my - my)) + new_wt * ((cx - mx) * (cy - my))
                    ) / den
                    if corr:
                        var_x[k] = (
                            ow * (var_x[k] + (old_mx - mx) * (old_mx - mx)) + new_wt * ((cx - mx) * (cx - mx))
                        ) / den
                        var_y[k] = (
                            ow * (var_y[k] + (old_my - my) * (old_my - my)) + new_wt * ((cy - my) * (cy - my))
                        ) / den
                    mean_y[k] = my
                    sw += new_wt
                    sw2 += new_wt * new_wt
                    ow += new_wt
                    if not adjust:
                        sw /= ow
                        sw2 /= ow * ow
                        ow = 1.0
                sum_wt[k] = sw
                sum_wt2[k] = sw2
                old_wt[k] = ow
        elif is_obs:
            mx = cx
            mean_y[k] = cy
        mean_x[k] = mx
        if nobs[k] < minp:
            res = np.nan
        elif corr:
            d = np.sqrt(var_x[k]) * np.sqrt(var_y[k])
            res = cov[k] / d if d > 0.0 else np.nan
        elif bias:
            res = cov[k]
        else:
            num = sum_wt[k] * sum_wt[k]
            den2 = num - sum_wt2[k]
            res = (num / den2) * cov[k] if den2 > 0 else np.nan
        out[i] = res
    return out


# ---------------------------------------------------------------- TA-lib family
# These kernels never see NULLs: the wrappers drop NULL rows (TA-lib's rule, as
# for ema/sma in kernels.py) and scatter NULL back into their outputs.


@njit(cache=True, error_model="numpy")
def ema_cascade(slots, x, window, alpha, coef, count, ema, total):  # pragma: no cover - numba
    """``sum(coef[j] * EMA_j)`` where EMA_0 = ema(x) and EMA_j = ema(EMA_{j-1}), each TA-lib seeded.

    Level j first outputs after ``(j + 1) * (window - 1) + 1`` values (dema, tema, t3).
    """
    n = x.shape[0]
    levels = coef.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        done = True
        for j in range(levels):
            c = count[k, j] + 1
            count[k, j] = c
            if c < window:
                total[k, j] += v
                done = False
                break
            e = (total[k, j] + v) / window if c == window else alpha * v + (1.0 - alpha) * ema[k, j]
            ema[k, j] = e
            v = e
        if done:
            acc = 0.0
            for j in range(levels):
                acc += coef[j] * ema[k, j]
            out[i] = acc
        else:
            out[i] = np.nan
    return out


@njit(cache=True, error_model="numpy")
def trima(slots, x, p1, p2, ring1, ring2, count, total, comp):  # pragma: no cover - numba
    """TA-lib TRIMA as an SMA of period ``p2`` over an SMA of period ``p1`` (Kahan-compensated sums).

    ``count``, ``total`` and ``comp`` have one column per level.
    """
    n = x.shape[0]
    out = np.empty(n)
    t1 = total[:, 0]
    c1 = comp[:, 0]
    t2 = total[:, 1]
    c2 = comp[:, 1]
    for i in range(n):
        k = slots[i]
        v = x[i]
        c = count[k, 0]
        pos = c % p1
        if c >= p1:
            _kahan_add(k, -ring1[k, pos], t1, c1)
        _kahan_add(k, v, t1, c1)
        ring1[k, pos] = v
        count[k, 0] = c + 1
        if c + 1 < p1:
            out[i] = np.nan
            continue
        s = t1[k] / p1
        c = count[k, 1]
        pos = c % p2
        if c >= p2:
            _kahan_add(k, -ring2[k, pos], t2, c2)
        _kahan_add(k, s, t2, c2)
        ring2[k, pos] = s
        count[k, 1] = c + 1
        out[i] = t2[k] / p2 if c + 1 >= p2 else np.nan
    return out


@njit(cache=True, error_model="numpy")
def kama(slots, x, window, ring, count, sum_roc, prev):  # pragma: no cover - numba
    """TA-lib KAMA (fast 2, slow 30), the same updates as ta_KAMA.c; ring holds the last window+1 values."""
    n = x.shape[0]
    out = np.empty(n)
    const_max = 2.0 / (30.0 + 1.0)
    const_diff = 2.0 / (2.0 + 1.0) - const_max
    size = window + 1
    for i in range(n):
        k = slots[i]
        v = x[i]
        c = count[k]  # values seen before this one
        pos = c % size
        if c == 0:
            ring[k, pos] = v
            count[k] = 1
            out[i] = np.nan
            continue
        last = ring[k, (c - 1) % size]
        if c <= window:
            sum_roc[k] += abs(v - last)
            ring[k, pos] = v
            count[k] = c + 1
            if c < window:
                out[i] = np.nan
                continue
            trailing = ring[k, 0]
            period_roc = v - trailing
            kp = last  # the previous price seeds KAMA
        else:
            trailing_prev = ring[k, pos]  # x[t - window - 1], about to be overwritten
            trailing = ring[k, (c - window) % size]
            sum_roc[k] -= abs(trailing_prev - trailing)
            sum_roc[k] += abs(v - last)
            ring[k, pos] = v
            count[k] = c + 1
            period_roc = v - trailing
            kp = prev[k]
        s = sum_roc[k]
        # TA-lib's test: a monotone rise or a flat window is fully efficient
        er = 1.0 if s <= period_roc or -1e-8 < s < 1e-8 else abs(period_roc / s)
        sc = er * const_diff + const_max
        sc *= sc
        kp = (v - kp) * sc + kp
        prev[k] = kp
        out[i] = kp
    return out


# ---------------------------------------------------------------- order statistics on count windows

RANK, PCTL, MAD_MEAN, MAD_MEDIAN = 0, 1, 2, 3
PROD, POS_STREAK = 0, 1
SKEW, KURT = 0, 1
TIES_MIN, TIES_MAX, TIES_AVG = 0, 1, 2
I_LINEAR, I_LOWER, I_HIGHER, I_NEAREST, I_MIDPOINT = 0, 1, 2, 3, 4


@njit(cache=True, inline="always", error_model="numpy")
def _bisect_left(row, cnt, v):  # pragma: no cover - numba
    lo, hi = 0, cnt
    while lo < hi:
        mid = (lo + hi) >> 1
        if row[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always", error_model="numpy")
def _bisect_right(row, cnt, v):  # pragma: no cover - numba
    lo, hi = 0, cnt
    while lo < hi:
        mid = (lo + hi) >> 1
        if row[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always", error_model="numpy")
def _quantile(lo_v, hi_v, frac, idx, interpolation):  # pragma: no cover - numba
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


@njit(cache=True, error_model="numpy")
def sorted_window(
    op, slots, x, window, minp, full_only, ascending, ignore_na, ties, percent, q, interpolation,
    ring, srt, n_rows, wpos, nobs,
):  # pragma: no cover - numba  # fmt: skip
    """mrank / mpercentile / mmad over the last ``window`` rows, keeping a sorted copy of the window.

    Insert and delete are a binary search plus a shift of the sorted copy
    (O(window) per row, a memmove); the percentile is then O(1), the rank
    O(log window) and the mean or median absolute deviation O(window).
    """
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        r = n_rows[k]
        pos = wpos[k]
        row = srt[k]
        cnt = nobs[k]
        if r >= window:
            old = ring[k, pos]
            if old == old:
                j = _bisect_left(row, cnt, old)
                for t in range(j, cnt - 1):
                    row[t] = row[t + 1]
                cnt -= 1
        ring[k, pos] = v
        if v == v:
            j = _bisect_right(row, cnt, v)
            for t in range(cnt, j, -1):
                row[t] = row[t - 1]
            row[j] = v
            cnt += 1
        nobs[k] = cnt
        n_rows[k] = r + 1
        wpos[k] = pos + 1 if pos + 1 < window else 0
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            out[i] = np.nan
            continue
        if op == RANK:
            n_null = min(r + 1, window) - cnt
            if v == v:
                lo = _bisect_left(row, cnt, v)
                eq = _bisect_right(row, cnt, v) - lo
                before = lo if ascending else cnt - lo - eq
                if ascending and not ignore_na:
                    before += n_null  # NULL ranks lowest
            elif ignore_na:
                out[i] = np.nan
                continue
            else:
                eq = n_null
                before = 0 if ascending else cnt
            if ties == TIES_MIN:
                rank = float(before)
            elif ties == TIES_MAX:
                rank = float(before + eq - 1)
            else:
                rank = before + (eq - 1) / 2.0
            total = cnt if ignore_na else cnt + n_null
            out[i] = (rank + 1.0) / total if percent else rank
        elif op == PCTL:
            h = q * (cnt - 1)
            idx = int(h)
            hi_v = row[idx + 1] if idx + 1 < cnt else row[idx]
            out[i] = _quantile(row[idx], hi_v, h - idx, idx, interpolation)
        elif op == MAD_MEAN:
            s = 0.0
            for t in range(cnt):
                s += row[t]
            mean = s / cnt
            d = 0.0
            for t in range(cnt):
                d += abs(row[t] - mean)
            out[i] = d / cnt
        else:  # MAD_MEDIAN: merge the deviations on both sides of the median in increasing order
            a = (cnt - 1) // 2
            med = (row[a] + row[cnt // 2]) / 2.0
            lo_i = a
            hi_i = a + 1
            want_lo = (cnt - 1) // 2
            want_hi = cnt // 2
            m_lo = 0.0
            res = 0.0
            for t in range(want_hi + 1):
                if hi_i >= cnt or (lo_i >= 0 and med - row[lo_i] <= row[hi_i] - med):
                    dev = med - row[lo_i]
                    lo_i -= 1
                else:
                    dev = row[hi_i] - med
                    hi_i += 1
                if t == want_lo:
                    m_lo = dev
                if t == want_hi:
                    res = (m_lo + dev) / 2.0
            out[i] = res
    return out


@njit(cache=True, error_model="numpy")
def window_scan(op, slots, x, window, minp, full_only, ring, n_rows, wpos, nobs):  # pragma: no cover - numba
    """mprod / mmax_positive_streak by scanning the ring oldest to newest (O(window) per row)."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        r = n_rows[k]
        pos = wpos[k]
        if r >= window and ring[k, pos] == ring[k, pos]:
            nobs[k] -= 1
        ring[k, pos] = v
        if v == v:
            nobs[k] += 1
        n_rows[k] = r + 1
        pos = pos + 1 if pos + 1 < window else 0
        wpos[k] = pos
        cnt = nobs[k]
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            out[i] = np.nan
            continue
        lim = min(r + 1, window)
        start = pos if r + 1 >= window else 0
        if op == PROD:
            acc = 1.0
            for t in range(lim):
                e = ring[k, (start + t) % window]
                if e == e:
                    acc *= e
            out[i] = acc
        else:
            cur = 0.0
            best = 0.0
            for t in range(lim):
                e = ring[k, (start + t) % window]
                if e > 0:  # a NULL ends a streak like a non-positive value
                    cur += e
                    if cur > best:
                        best = cur
                else:
                    cur = 0.0
            out[i] = best
    return out


@njit(cache=True, error_model="numpy")
def moving_moments(
    op, slots, x, window, minp, full_only, biased, ring, n_rows, wpos, nobs
):  # pragma: no cover
    """mskew / mkurtosis (moment kurtosis, not excess) from two passes over the window: O(window) per row.

    Add/remove updates of third and fourth moments lose most digits when a large
    value leaves the window, so the central moments are recomputed each row. A
    window of equal values (zero variance) or holding an infinite value outputs NULL.
    """
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        r = n_rows[k]
        pos = wpos[k]
        if r >= window and ring[k, pos] == ring[k, pos]:
            nobs[k] -= 1
        ring[k, pos] = v
        if v == v:
            nobs[k] += 1
        n_rows[k] = r + 1
        wpos[k] = pos + 1 if pos + 1 < window else 0
        cnt = nobs[k]
        out[i] = np.nan
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            continue
        if cnt < (2 if op == SKEW else 3) + (0 if biased else 1):
            continue
        total = 0.0
        finite = True
        for e in ring[k, : min(r + 1, window)]:
            if e == e:
                if np.isinf(e):
                    finite = False
                    break
                total += e
        if not finite:
            continue
        mu = total / cnt
        s2 = s3 = s4 = 0.0
        for e in ring[k, : min(r + 1, window)]:
            if e == e:
                d = e - mu
                d2 = d * d
                s2 += d2
                s3 += d2 * d
                s4 += d2 * d2
        nf = float(cnt)
        if op == SKEW:
            den = s2 * np.sqrt(s2)
            if den > 0.0:  # zero for a constant window; may underflow for a tiny spread
                g = np.sqrt(nf) * s3 / den
                out[i] = g if biased else g * np.sqrt(nf * (nf - 1.0)) / (nf - 2.0)
        else:
            den = s2 * s2
            if den > 0.0:
                b = nf * s4 / den
                if biased:
                    out[i] = b
                else:
                    out[i] = ((nf * nf - 1.0) * b - 3.0 * (nf - 1.0) ** 2) / ((nf - 2.0) * (nf - 3.0)) + 3.0
    return out


# ---------------------------------------------------------------- cumulative order statistics


@njit(cache=True, error_model="numpy")
def cum_simple(op, slots, x, ratio, acc, peak):  # pragma: no cover - numba
    """cum_positive_streak (op 0) and cummdd (op 1)."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if op == 0:
            # a NULL ends a streak like a non-positive value (as in mmax_positive_streak)
            acc[k] = acc[k] + v if v > 0 else 0.0
        elif v == v:
            p = peak[k]
            if p != p:
                peak[k] = v
                acc[k] = 0.0
            else:
                if v > p:
                    p = v
                    peak[k] = p
                if ratio:
                    if p != 0.0:
                        dd = (p - v) / p
                        if dd > acc[k]:
                            acc[k] = dd
                elif p - v > acc[k]:
                    acc[k] = p - v
        out[i] = acc[k]
    return out


@njit(cache=True, inline="always", error_model="numpy")
def _heap_push(h, size, v):  # pragma: no cover - numba
    """Push v onto the max-heap h[:size]."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if h[parent] >= v:
            break
        h[j] = h[parent]
        j = parent
    h[j] = v


@njit(cache=True, inline="always", error_model="numpy")
def _heap_pop(h, size):  # pragma: no cover - numba
    """Remove and return the top of the max-heap h[:size]."""
    top = h[0]
    last = h[size - 1]
    size -= 1
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and h[c + 1] > h[c]:
            c += 1
        if h[c] <= last:
            break
        h[j] = h[c]
        j = c
    if size > 0:
        h[j] = last
    return top


@njit(cache=True, error_model="numpy")
def cum_percentile(slots, x, q, interpolation, lo, hi, n_lo, n_hi, last):  # pragma: no cover - numba
    """Running percentile from two heaps: ``lo`` (max-heap of the smallest values) and ``hi``
    (max-heap of the negated largest ones), O(log n) per row. NULL rows repeat the last result.
    """
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v == v:
            a = n_lo[k]
            b = n_hi[k]
            if a > 0 and v <= lo[k, 0]:
                _heap_push(lo[k], a, v)
                a += 1
            else:
                _heap_push(hi[k], b, -v)
                b += 1
            cnt = a + b
            h = q * (cnt - 1)
            idx = int(h)
            want = idx + 1  # the lower heap holds the idx+1 smallest values
            if a > want:
                _heap_push(hi[k], b, -_heap_pop(lo[k], a))
                a -= 1
                b += 1
            elif a < want:
                _heap_push(lo[k], a, -_heap_pop(hi[k], b))
                a += 1
                b -= 1
            n_lo[k] = a
            n_hi[k] = b
            lo_v = lo[k, 0]
            hi_v = -hi[k, 0] if b > 0 else lo_v
            last[k] = _quantile(lo_v, hi_v, h - idx, idx, interpolation)
        out[i] = last[k]
    return out


_EMPTY = 0x7FF8000000000000  # the bits of NaN: never a stored value


@njit(cache=True, inline="always", error_model="numpy")
def _hash(b, mask):  # pragma: no cover - numba
    h = b ^ (b >> 31)
    h *= 0x7FB5D329728EA185
    h ^= h >> 27
    h *= 0x1CE4E5B9BF58476D
    h ^= h >> 33
    return h & mask


@njit(cache=True, error_model="numpy")
def nunique_insert(
    slots, x, bits, start, ignore_null, table, count, has_null, out
):  # pragma: no cover - numba
    """cumnunique over rows ``start..``: an open-addressing set of value bits per key.

    Returns the row at which a key's table would pass half full (the caller grows
    every table and calls again from there), or ``len(x)`` when done.
    """
    n = x.shape[0]
    cap = table.shape[1]
    mask = cap - 1
    for i in range(start, n):
        k = slots[i]
        if x[i] != x[i]:
            if not ignore_null:
                has_null[k] = 1
        else:
            if 2 * (count[k] + 1) > cap:
                return i
            b = bits[i]
            j = _hash(b, mask)
            while True:
                t = table[k, j]
                if t == _EMPTY:
                    table[k, j] = b
                    count[k] += 1
                    break
                if t == b:
                    break
                j = (j + 1) & mask
        out[i] = count[k] + has_null[k]
    return n


@njit(cache=True, error_model="numpy")
def rehash(old, new):  # pragma: no cover - numba
    """Insert every stored value of ``old`` into the empty tables ``new``."""
    mask = new.shape[1] - 1
    for k in range(old.shape[0]):
        for j in range(old.shape[1]):
            b = old[k, j]
            if b != _EMPTY:
                p = _hash(b, mask)
                while new[k, p] != _EMPTY:
                    p = (p + 1) & mask
                new[k, p] = b
