"""Numba kernels behind :mod:`headwater.kernels.ops`.

Every kernel walks one micro-batch row by row in arrival order, reads and
updates the per-key state arrays *in place* at ``slots[i]`` and returns one
float64 output per row. NaN is NULL everywhere. The Python wrappers in
``ops.py`` own validation, state growth and copying; kernels trust their input.

Because each row only sees the state left by the rows before it, any split of
the rows into batches gives bit-identical results to one batch.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Operation codes shared with ops.py (one kernel serves a family of functions).
MSUM, MAVG, MCOUNT = 0, 1, 2
SHIFT_MOVE, SHIFT_DELTA, SHIFT_RATIO, SHIFT_PCT = 0, 1, 2, 3
CUM_SUM, CUM_AVG, CUM_MAX, CUM_MIN, CUM_COUNT, CUM_PROD, CUM_FIRST, CUM_LAST = 0, 1, 2, 3, 4, 5, 6, 7
TA_SMA, TA_WMA = 0, 1


@njit(cache=True)
def ewm_mean(slots, x, com, adjust, ignore_na, minp, weighted, old_wt, nobs):  # pragma: no cover - numba
    """pandas ``Series.ewm(com=...).mean()`` per key; state: weighted, old_wt, nobs."""
    n = x.shape[0]
    out = np.empty(n)
    # Same arithmetic as pandas' window/aggregations.pyx so results match to the last bit.
    alpha = 1.0 / (1.0 + com)
    old_wt_factor = 1.0 - alpha
    new_wt = 1.0 if adjust else alpha
    for i in range(n):
        k = slots[i]
        cur = x[i]
        is_obs = cur == cur
        if is_obs:
            nobs[k] += 1
        w = weighted[k]
        if w == w:
            if is_obs or not ignore_na:
                ow = old_wt[k] * old_wt_factor
                if is_obs:
                    if w != cur:  # keeps a constant series exactly constant
                        w = (ow * w + new_wt * cur) / (ow + new_wt)
                    ow = ow + new_wt if adjust else 1.0
                old_wt[k] = ow
        elif is_obs:
            w = cur
        weighted[k] = w
        out[i] = w if nobs[k] >= minp else np.nan
    return out


@njit(cache=True)
def ewm_var(
    slots, x, com, adjust, ignore_na, bias, minp, take_sqrt, mean, cov, sum_wt, sum_wt2, old_wt, nobs
):  # pragma: no cover - numba
    """pandas ``Series.ewm(com=...).var(bias=...)`` (or ``.std``) per key."""
    n = x.shape[0]
    out = np.empty(n)
    # Same arithmetic as pandas' ewmcov with x = y.
    alpha = 1.0 / (1.0 + com)
    f = 1.0 - alpha
    new_wt = 1.0 if adjust else alpha
    for i in range(n):
        k = slots[i]
        cur = x[i]
        is_obs = cur == cur
        if is_obs:
            nobs[k] += 1
        m = mean[k]
        if m == m:
            if is_obs or not ignore_na:
                sw = sum_wt[k] * f
                sw2 = sum_wt2[k] * (f * f)
                ow = old_wt[k] * f
                if is_obs:
                    old_m = m
                    if m != cur:  # keeps a constant series exactly constant
                        m = (ow * old_m + new_wt * cur) / (ow + new_wt)
                    cov[k] = (
                        ow * (cov[k] + (old_m - m) * (old_m - m)) + new_wt * ((cur - m) * (cur - m))
                    ) / (ow + new_wt)
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
            m = cur
        mean[k] = m
        if nobs[k] < minp:
            res = np.nan
        elif bias:
            res = cov[k]
        else:
            num = sum_wt[k] * sum_wt[k]
            den = num - sum_wt2[k]
            res = (num / den) * cov[k] if den > 0 else np.nan
        if take_sqrt and res == res:
            res = np.sqrt(res) if res > 0 else 0.0
        out[i] = res
    return out


@njit(cache=True)
def ta_ema(slots, x, window, alpha, warmup, ema, count, total):  # pragma: no cover - numba
    """TA-lib style EMA per key; NULL rows output NULL and leave the state alone."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v != v:
            out[i] = np.nan
            continue
        c = count[k] + 1
        count[k] = c
        if warmup:
            if c == 1:
                e = v
            else:
                a = 2.0 / c if c <= window else alpha
                e = a * v + (1.0 - a) * ema[k]
            ema[k] = e
            out[i] = e
        elif c < window:
            total[k] += v
            out[i] = np.nan
        elif c == window:
            e = (total[k] + v) / window
            ema[k] = e
            out[i] = e
        else:
            e = alpha * v + (1.0 - alpha) * ema[k]
            ema[k] = e
            out[i] = e
    return out


@njit(cache=True)
def ta_window(op, slots, x, window, ring, count, wpos, total, comp):  # pragma: no cover - numba
    """TA-lib style ``sma`` / ``wma`` over the last ``window`` non-NULL values of each key.

    NULL rows output NULL and leave the state alone. ``sma`` keeps a
    Kahan-compensated running sum; ``wma`` recomputes its weighted sum from the
    ring (O(window) per row) because a running weighted sum drifts.
    """
    n = x.shape[0]
    out = np.empty(n)
    denom = window * (window + 1) / 2.0
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v != v:
            out[i] = np.nan
            continue
        c = count[k] + 1
        count[k] = c
        p = wpos[k]
        if op == TA_SMA:
            if c > window:
                _kahan_add(k, -ring[k, p], total, comp)
            _kahan_add(k, v, total, comp)
        ring[k, p] = v
        p = p + 1 if p + 1 < window else 0
        wpos[k] = p
        if c < window:
            out[i] = np.nan
        elif op == TA_SMA:
            out[i] = total[k] / window
        else:
            # after the write, slot p holds the oldest value (weight 1)
            acc = 0.0
            for j in range(window):
                idx = p + j
                if idx >= window:
                    idx -= window
                acc += (j + 1) * ring[k, idx]
            out[i] = acc / denom
    return out


@njit(cache=True, inline="always")
def _kahan_add(k, v, total, comp):  # pragma: no cover - numba
    y = v - comp[k]
    t = total[k] + y
    comp[k] = (t - total[k]) - y
    total[k] = t


@njit(cache=True)
def moving_sum(
    op, slots, x, window, minp, full_only, ring, n_rows, wpos, nobs, total, comp, n_pinf, n_ninf
):  # pragma: no cover - numba
    """msum / mavg / mcount over the last ``window`` rows of each key (Kahan-compensated)."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        r = n_rows[k]
        pos = wpos[k]
        if r >= window:
            old = ring[k, pos]
            if old == old:
                nobs[k] -= 1
                if old == np.inf:
                    n_pinf[k] -= 1
                elif old == -np.inf:
                    n_ninf[k] -= 1
                else:
                    _kahan_add(k, -old, total, comp)
        ring[k, pos] = v
        if v == v:
            nobs[k] += 1
            if v == np.inf:
                n_pinf[k] += 1
            elif v == -np.inf:
                n_ninf[k] += 1
            else:
                _kahan_add(k, v, total, comp)
        n_rows[k] = r + 1
        wpos[k] = pos + 1 if pos + 1 < window else 0
        cnt = nobs[k]
        if cnt - n_pinf[k] - n_ninf[k] == 0:
            # no finite value left: drop accumulated rounding error
            total[k] = 0.0
            comp[k] = 0.0
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            out[i] = np.nan
        elif op == MCOUNT:
            out[i] = cnt
        else:
            if n_pinf[k] > 0 and n_ninf[k] > 0:
                s = np.nan
            elif n_pinf[k] > 0:
                s = np.inf
            elif n_ninf[k] > 0:
                s = -np.inf
            else:
                s = total[k]
            out[i] = s if op == MSUM else s / cnt
    return out


@njit(cache=True)
def moving_var(
    slots,
    x,
    window,
    minp,
    full_only,
    ddof,
    take_sqrt,
    ring,
    n_rows,
    wpos,
    nobs,
    n_inf,
    mean,
    ssqdm,
    run_val,
    run_len,
):  # pragma: no cover - numba
    """mvar / mstd (ddof=1) and mvarp / mstdp (ddof=0) by Welford add/remove per key."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        r = n_rows[k]
        pos = wpos[k]
        if r >= window:
            old = ring[k, pos]
            if old == old:
                nobs[k] -= 1
                if np.isinf(old):
                    n_inf[k] -= 1
                else:
                    m = nobs[k] - n_inf[k]
                    if m == 0:
                        mean[k] = 0.0
                        ssqdm[k] = 0.0
                    else:
                        delta = old - mean[k]
                        mean[k] -= delta / m
                        ssqdm[k] -= delta * (old - mean[k])
        ring[k, pos] = v
        if v == v:
            nobs[k] += 1
            if np.isinf(v):
                n_inf[k] += 1
            else:
                m = nobs[k] - n_inf[k]
                delta = v - mean[k]
                mean[k] += delta / m
                ssqdm[k] += delta * (v - mean[k])
                # Track runs of equal values so a constant window reports exactly 0.
                if v == run_val[k]:
                    run_len[k] += 1
                else:
                    run_val[k] = v
                    run_len[k] = 1
        n_rows[k] = r + 1
        wpos[k] = pos + 1 if pos + 1 < window else 0
        cnt = nobs[k]
        if cnt == 0 or cnt < minp or cnt <= ddof or (full_only and r + 1 < window) or n_inf[k] > 0:
            out[i] = np.nan
        else:
            var = 0.0 if run_len[k] >= cnt else max(ssqdm[k], 0.0) / (cnt - ddof)
            out[i] = np.sqrt(var) if take_sqrt else var
    return out


@njit(cache=True)
def moving_extreme(
    slots, x, window, minp, full_only, is_max, want_index, keep_first, use_deque,
    ring, n_rows, wpos, nobs, dq_idx, dq_head, dq_len,
):  # pragma: no cover - numba  # fmt: skip
    """mmax / mmin, or with ``want_index`` the position of the extreme within the window.

    ``keep_first`` picks the oldest of equal extremes (mimax), otherwise the newest
    (mimax_last). Small windows scan the ring per row (branch-light and
    cache-friendly); large ones keep a per-key monotonic deque of ring indices
    (amortised O(1) per row).
    """
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        r = n_rows[k]
        p = wpos[k]
        head = dq_head[k] if use_deque else 0
        length = dq_len[k] if use_deque else 0
        if r >= window:
            old = ring[k, p]
            if old == old:
                nobs[k] -= 1
            # The slot being overwritten holds the oldest row; if it is in the deque it is the front.
            if use_deque and length > 0 and dq_idx[k, head] == p:
                head = head + 1 if head + 1 < window else 0
                length -= 1
        ring[k, p] = v
        if v == v:
            nobs[k] += 1
            if use_deque:
                while length > 0:
                    back = head + length - 1
                    if back >= window:
                        back -= window
                    bv = ring[k, dq_idx[k, back]]
                    # an equal older value stays in front when the first occurrence wins
                    if bv == v:
                        if keep_first:
                            break
                    elif (bv > v) if is_max else (bv < v):
                        break
                    length -= 1
                tail = head + length
                if tail >= window:
                    tail -= window
                dq_idx[k, tail] = p
                length += 1
        if use_deque:
            dq_head[k] = head
            dq_len[k] = length
        n_rows[k] = r + 1
        p = p + 1 if p + 1 < window else 0
        wpos[k] = p
        cnt = nobs[k]
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            out[i] = np.nan
            continue
        start = p if r + 1 >= window else 0  # ring slot of the window's oldest row
        lim = min(r + 1, window)
        if use_deque:
            best = dq_idx[k, head]
        elif not want_index:
            # NaN compares false, so NULLs are skipped without a branch of their own
            row = ring[k]
            if is_max:
                m = -np.inf
                for j in range(lim):
                    if row[j] > m:
                        m = row[j]
            else:
                m = np.inf
                for j in range(lim):
                    if row[j] < m:
                        m = row[j]
            out[i] = m
            continue
        else:
            best = -1
            bv = 0.0
            for j in range(lim):
                idx = start + j
                if idx >= window:
                    idx -= window
                e = ring[k, idx]
                if e != e:
                    continue
                if best < 0 or ((e > bv) if is_max else (e < bv)) or (e == bv and not keep_first):
                    best = idx
                    bv = e
        if want_index:
            d = best - start
            out[i] = d + window if d < 0 else d
        else:
            out[i] = ring[k, best]
    return out


@njit(cache=True)
def moving_pick(
    slots, x, window, minp, full_only, pick_first, ring, n_rows, wpos, nobs
):  # pragma: no cover - numba
    """mfirst / mlast: the oldest / newest row of the window, NULL included."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        r = n_rows[k]
        pos = wpos[k]
        if r >= window:
            old = ring[k, pos]
            if old == old:
                nobs[k] -= 1
        ring[k, pos] = v
        if v == v:
            nobs[k] += 1
        n_rows[k] = r + 1
        wpos[k] = pos + 1 if pos + 1 < window else 0
        if nobs[k] < minp or (full_only and r + 1 < window):
            out[i] = np.nan
        elif pick_first:
            out[i] = ring[k, wpos[k]] if r + 1 >= window else ring[k, 0]
        else:
            out[i] = v
    return out


@njit(cache=True)
def shift(op, slots, x, lag, ring, wpos):  # pragma: no cover - numba
    """move / deltas / ratios / percent_change against the row ``lag`` rows back."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        pos = wpos[k]
        before = ring[k, pos]  # NaN until the key has seen `lag` rows
        ring[k, pos] = v
        wpos[k] = pos + 1 if pos + 1 < lag else 0
        if op == SHIFT_MOVE:
            out[i] = before
        elif op == SHIFT_DELTA:
            out[i] = v - before
        elif before == 0.0:
            out[i] = np.nan  # DolphinDB: division by zero is NULL
        elif op == SHIFT_RATIO:
            out[i] = v / before
        else:
            out[i] = v / before - 1.0
    return out


@njit(cache=True)
def ffill(slots, x, limit, last, gap):  # pragma: no cover - numba
    """Forward fill with at most ``limit`` consecutive fills (limit < 0: unlimited)."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v == v:
            last[k] = v
            gap[k] = 0
            out[i] = v
        else:
            g = gap[k] + 1
            if limit >= 0 and g > limit:
                out[i] = np.nan
            else:
                gap[k] = g
                out[i] = last[k]
    return out


@njit(cache=True)
def cumulative(op, slots, x, acc, count):  # pragma: no cover - numba
    """cumsum / cumavg / cummax / cummin / cumcount / cumprod; NULL rows carry the last result."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        c = count[k]
        if v == v:
            if c == 0:
                a = v
            elif op == CUM_MAX:
                a = max(acc[k], v)
            elif op == CUM_MIN:
                a = min(acc[k], v)
            elif op == CUM_PROD:
                a = acc[k] * v
            elif op == CUM_FIRST:
                a = acc[k]
            elif op == CUM_LAST:
                a = v
            elif op == CUM_COUNT:
                a = 0.0
            else:  # CUM_SUM, CUM_AVG
                a = acc[k] + v
            acc[k] = a
            c += 1
            count[k] = c
        if op == CUM_COUNT:
            out[i] = c
        elif c == 0:
            out[i] = np.nan
        elif op == CUM_AVG:
            out[i] = acc[k] / c
        else:
            out[i] = acc[k]
    return out


@njit(cache=True)
def cum_var(slots, x, ddof, take_sqrt, count, mean, ssqdm):  # pragma: no cover - numba
    """cumvar / cumstd (ddof=1) and cumvarp / cumstdp (ddof=0) by Welford; NULL rows carry."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        c = count[k]
        if v == v:
            c += 1
            count[k] = c
            delta = v - mean[k]
            mean[k] += delta / c
            ssqdm[k] += delta * (v - mean[k])
        if c == 0 or c <= ddof:
            out[i] = np.nan
        else:
            var = max(ssqdm[k], 0.0) / (c - ddof)
            out[i] = np.sqrt(var) if take_sqrt else var
    return out


@njit(cache=True)
def prev_state(slots, x, last, run_prev, in_run):  # pragma: no cover - numba
    """DolphinDB ``prevState``: runs of equal non-NULL values are states; NULL ends a run."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v != v:
            out[i] = last[k]
            in_run[k] = 0
        else:
            if not (in_run[k] and v == last[k]):
                run_prev[k] = last[k]
                last[k] = v
                in_run[k] = 1
            out[i] = run_prev[k]
    return out
