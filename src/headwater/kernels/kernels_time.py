"""Numba kernels behind :mod:`headwater.kernels.ops_time`.

Same contract as :mod:`headwater.kernels.kernels`: every kernel walks one
micro-batch row by row in arrival order, updates per-key state arrays in place
at ``slots[i]`` and writes one float64 output per row; NaN is NULL everywhere.

Kernels whose per-key buffers can fill up (a time window, for one) take a
start row and return the row at which they stopped because a key's buffer is
full while it may still grow; the wrapper widens the buffers and calls again
from that row.
Re-running a row from its start is harmless: everything a kernel did for that
row before stopping (evicting expired rows) is idempotent.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Time-window operations (one kernel serves them all).
TM_SUM, TM_SUM2, TM_AVG, TM_COUNT, TM_WSUM, TM_WAVG = 0, 1, 2, 3, 4, 5
TM_VAR, TM_VARP, TM_STD, TM_STDP = 6, 7, 8, 9
TM_COVAR, TM_COVARP, TM_CORR, TM_BETA = 10, 11, 12, 13
TM_MAX, TM_MIN, TM_FIRST, TM_LAST, TM_MOVE = 14, 15, 16, 17, 18
TM_PROD, TM_MED, TM_PERCENTILE, TM_RANK, TM_SKEW, TM_KURT = 19, 20, 21, 22, 23, 24

# Aggregates over the rows a TopN window selects.
TOP_SUM, TOP_AVG, TOP_VAR, TOP_VARP, TOP_STD, TOP_STDP = 0, 1, 2, 3, 4, 5
TOP_SKEW, TOP_KURT, TOP_CORR, TOP_COVAR, TOP_BETA, TOP_WSUM, TOP_COVARP = 6, 7, 8, 9, 10, 11, 12
TIES_OLDEST, TIES_LATEST, TIES_ALL = 0, 1, 2

# Rank ties and percentile interpolation.
RANK_MIN, RANK_MAX, RANK_AVERAGE = 0, 1, 2
INTERP_LINEAR, INTERP_LOWER, INTERP_HIGHER, INTERP_NEAREST, INTERP_MIDPOINT = 0, 1, 2, 3, 4

# Width of the per-key accumulator row of each time-window operation.
KS = 5  # compensated sum: total, compensation, +inf count, -inf count, NaN count


def acc_layout(op: int) -> np.ndarray:
    """Initial accumulator row of a time-window operation (its length is the width)."""
    if op <= TM_COUNT:
        return np.zeros(KS + 1)  # sum, then the count of non-NULL values
    if op <= TM_WAVG:
        return np.zeros(2 * KS + 1)  # sum of x*y, sum of y, pair count
    if op <= TM_STDP:
        return np.array([0.0, 0.0, 0.0, 0.0, np.nan, 0.0])  # nobs, n_inf, mean, ssqdm, run value, run length
    if op <= TM_BETA:
        # n, n_inf, mean a, mean b, c_ab, s_aa, s_bb, run a (value, length), run b (value, length)
        return np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, np.nan, 0.0, np.nan, 0.0])
    return np.zeros(0)


# ---------------------------------------------------------------- compensated sums


@njit(cache=True, inline="always")
def _ks_add(acc, k, c, q, sign):  # pragma: no cover - numba
    """Add (sign=1) or remove (sign=-1) the term q of the compensated sum at columns c..c+4."""
    if q != q:
        acc[k, c + 4] += sign
    elif q == np.inf:
        acc[k, c + 2] += sign
    elif q == -np.inf:
        acc[k, c + 3] += sign
    else:
        y = sign * q - acc[k, c + 1]
        t = acc[k, c] + y
        acc[k, c + 1] = (t - acc[k, c]) - y
        acc[k, c] = t


@njit(cache=True, inline="always")
def _ks_settle(acc, k, c, n_terms):  # pragma: no cover - numba
    # no finite term left: drop accumulated rounding error
    if n_terms - acc[k, c + 2] - acc[k, c + 3] - acc[k, c + 4] == 0:
        acc[k, c] = 0.0
        acc[k, c + 1] = 0.0


@njit(cache=True, inline="always")
def _ks_value(acc, k, c):  # pragma: no cover - numba
    if acc[k, c + 4] > 0 or (acc[k, c + 2] > 0 and acc[k, c + 3] > 0):
        return np.nan
    if acc[k, c + 2] > 0:
        return np.inf
    if acc[k, c + 3] > 0:
        return -np.inf
    return acc[k, c]


# ---------------------------------------------------------------- running moments


@njit(cache=True, inline="always")
def _var_update(acc, k, v, sign):  # pragma: no cover - numba
    """Welford add (sign=1) / remove (sign=-1) of v; columns: nobs, n_inf, mean, ssqdm, run value, run length."""
    if v != v:
        return
    acc[k, 0] += sign
    if np.isinf(v):
        acc[k, 1] += sign
        return
    m = acc[k, 0] - acc[k, 1]
    if sign > 0:
        delta = v - acc[k, 2]
        acc[k, 2] += delta / m
        acc[k, 3] += delta * (v - acc[k, 2])
        # a trailing run of equal values that covers the window means variance exactly 0
        if v == acc[k, 4]:
            acc[k, 5] += 1.0
        else:
            acc[k, 4] = v
            acc[k, 5] = 1.0
    elif m == 0:
        acc[k, 2] = 0.0
        acc[k, 3] = 0.0
    else:
        delta = v - acc[k, 2]
        acc[k, 2] -= delta / m
        acc[k, 3] -= delta * (v - acc[k, 2])


@njit(cache=True, inline="always")
def _pair_update(acc, k, a, b, sign):  # pragma: no cover - numba
    """Bivariate Welford add / remove of the pair (a, b); both must be non-NULL to count."""
    if a != a or b != b:
        return
    acc[k, 0] += sign
    if np.isinf(a) or np.isinf(b):
        acc[k, 1] += sign
        return
    m = acc[k, 0] - acc[k, 1]
    if sign > 0:
        da = a - acc[k, 2]
        db = b - acc[k, 3]
        acc[k, 2] += da / m
        acc[k, 3] += db / m
        acc[k, 4] += da * (b - acc[k, 3])
        acc[k, 5] += da * (a - acc[k, 2])
        acc[k, 6] += db * (b - acc[k, 3])
        if a == acc[k, 7]:
            acc[k, 8] += 1.0
        else:
            acc[k, 7] = a
            acc[k, 8] = 1.0
        if b == acc[k, 9]:
            acc[k, 10] += 1.0
        else:
            acc[k, 9] = b
            acc[k, 10] = 1.0
    elif m == 0:
        for c in range(2, 7):
            acc[k, c] = 0.0
    else:
        da = a - acc[k, 2]
        db = b - acc[k, 3]
        acc[k, 2] -= da / m
        acc[k, 3] -= db / m
        acc[k, 4] -= da * (b - acc[k, 3])
        acc[k, 5] -= da * (a - acc[k, 2])
        acc[k, 6] -= db * (b - acc[k, 3])


@njit(cache=True, inline="always")
def _tw_update(op, acc, k, a, b, sign):  # pragma: no cover - numba
    """Add or remove one row's contribution to the running accumulators of ``op``."""
    if op <= TM_COUNT:
        if a == a:
            acc[k, KS] += sign
            _ks_add(acc, k, 0, a * a if op == TM_SUM2 else a, sign)
            _ks_settle(acc, k, 0, acc[k, KS])
    elif op <= TM_WAVG:
        if a == a and b == b:
            acc[k, 2 * KS] += sign
            _ks_add(acc, k, 0, a * b, sign)
            _ks_add(acc, k, KS, b, sign)
            _ks_settle(acc, k, 0, acc[k, 2 * KS])
            _ks_settle(acc, k, KS, acc[k, 2 * KS])
    elif op <= TM_STDP:
        _var_update(acc, k, a, sign)
    elif op <= TM_BETA:
        _pair_update(acc, k, a, b, sign)


@njit(cache=True, inline="always")
def _tw_running(op, acc, k):  # pragma: no cover - numba
    """Result of an operation kept in running accumulators."""
    if op <= TM_COUNT:
        cnt = acc[k, KS]
        if op == TM_COUNT:
            return cnt
        if cnt == 0:
            return np.nan
        s = _ks_value(acc, k, 0)
        return s / cnt if op == TM_AVG else s
    if op <= TM_WAVG:
        if acc[k, 2 * KS] == 0:
            return np.nan
        s = _ks_value(acc, k, 0)
        if op == TM_WSUM:
            return s
        w = _ks_value(acc, k, KS)
        return np.nan if w == 0 else s / w
    if op <= TM_STDP:
        cnt = acc[k, 0]
        ddof = 1 if op in (TM_VAR, TM_STD) else 0
        if cnt == 0 or cnt <= ddof or acc[k, 1] > 0:
            return np.nan
        var = 0.0 if acc[k, 5] >= cnt else max(acc[k, 3], 0.0) / (cnt - ddof)
        return np.sqrt(var) if op in (TM_STD, TM_STDP) else var
    # pairs
    m = acc[k, 0]
    if acc[k, 1] > 0 or m == 0:
        return np.nan
    const_a = acc[k, 8] >= m
    const_b = acc[k, 10] >= m
    cab = 0.0 if const_a or const_b else acc[k, 4]
    if op == TM_COVARP:
        return cab / m
    if m < 2:
        return np.nan
    if op == TM_COVAR:
        return cab / (m - 1)
    sbb = 0.0 if const_b else acc[k, 6]
    if op == TM_BETA:
        return np.nan if sbb <= 0 else cab / sbb
    saa = 0.0 if const_a else acc[k, 5]
    if saa <= 0 or sbb <= 0:
        return np.nan
    r = cab / np.sqrt(saa * sbb)
    return min(1.0, max(-1.0, r))


# ---------------------------------------------------------------- whole-window statistics


@njit(cache=True)
def _percentile_sorted(a, m, pct, interp):  # pragma: no cover - numba
    """Percentile ``pct`` (0..100) of the sorted a[:m], NumPy's definitions of the interpolations."""
    if m == 0:
        return np.nan
    pos = pct / 100.0 * (m - 1)
    lo = int(np.floor(pos))
    hi = min(lo + 1, m - 1)
    frac = pos - lo
    if interp == INTERP_LOWER:
        return a[lo]
    if interp == INTERP_HIGHER:
        return a[hi] if frac > 0 else a[lo]
    if interp == INTERP_NEAREST:
        return a[int(np.rint(pos))]
    if interp == INTERP_MIDPOINT:
        return (a[lo] + a[hi]) / 2.0 if frac > 0 else a[lo]
    if frac == 0:
        return a[lo]
    return a[lo] + (a[hi] - a[lo]) * frac


@njit(cache=True)
def _moments(a, m, kurt, biased):  # pragma: no cover - numba
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


@njit(cache=True)
def _rank(
    ring_x, k, start, count, cap, v, ascending, ignore_na, ties, as_percent
):  # pragma: no cover - numba
    """0-based rank of v among the window's values; NULL is the smallest value when not ignored."""
    if v != v and ignore_na:
        return np.nan
    before = 0  # values ranked strictly ahead of v
    equal = 0
    total = 0
    for j in range(count):
        e = ring_x[k, (start + j) % cap]
        if e != e:
            if ignore_na:
                continue
            total += 1
            if v != v:
                equal += 1
            elif not ascending:
                pass  # NULL is last when descending
            else:
                before += 1
            continue
        total += 1
        if v != v:
            if not ascending:
                before += 1
        elif e == v:
            equal += 1
        elif (e < v) if ascending else (e > v):
            before += 1
    if ties == RANK_MIN:
        r = float(before)
    elif ties == RANK_MAX:
        r = float(before + equal - 1)
    else:
        r = before + (equal - 1) / 2.0
    return (r + 1.0) / total if as_percent else r


@njit(cache=True)
def _tw_scan(op, ring_x, k, start, count, cap, v, params, buf):  # pragma: no cover - numba
    """Result of an operation that looks at the whole window."""
    if op == TM_RANK:
        return _rank(
            ring_x, k, start, count, cap, v, params[0] != 0, params[1] != 0, int(params[2]), params[3] != 0
        )
    m = 0
    for j in range(count):
        e = ring_x[k, (start + j) % cap]
        if e == e:
            buf[m] = e
            m += 1
    if m == 0:
        return np.nan
    if op == TM_PROD:
        p = 1.0
        for j in range(m):
            p *= buf[j]
        return p
    if op in (TM_SKEW, TM_KURT):
        return _moments(buf, m, op == TM_KURT, params[0] != 0)
    srt = np.sort(buf[:m])
    if op == TM_MED:
        return _percentile_sorted(srt, m, 50.0, INTERP_LINEAR)
    return _percentile_sorted(srt, m, params[0], int(params[1]))


# ---------------------------------------------------------------- time windows


@njit(cache=True, inline="always")
def _tw_evict(
    op, k, cap, ring_t, ring_a, ring_b, start, count, prev, acc, dq, dq_head, dq_len, use_dq
):  # pragma: no cover - numba
    """Drop the oldest row of key k's window; it becomes tmove's candidate."""
    s = start[k]
    p = s % cap
    _tw_update(op, acc, k, ring_a[k, p], ring_b[k, p], -1.0)
    prev[k, 0] = ring_t[k, p]
    prev[k, 1] = ring_a[k, p]
    if use_dq and dq_len[k] > 0 and dq[k, dq_head[k]] == s:
        dq_head[k] = dq_head[k] + 1 if dq_head[k] + 1 < cap else 0
        dq_len[k] -= 1
    start[k] = s + 1
    count[k] -= 1


@njit(cache=True)
def time_window(
    op, slots, t, a, b, w, params, i0, max_rows, out,
    ring_t, ring_a, ring_b, start, count, last_t, prev, acc, dq, dq_head, dq_len,
):  # pragma: no cover - numba  # fmt: skip
    """tm-functions over the window (T_i - w, T_i] of each key; returns the row it stopped at.

    A key's ring holds the rows still inside its window (absolute row number s at
    slot s % cap). A row whose time is NULL or earlier than the key's last time
    outputs NULL and is not stored. When a ring is full the kernel stops so the
    wrapper can widen it, unless it is already ``max_rows`` wide: then the oldest
    row leaves early.
    """
    n = slots.shape[0]
    cap = ring_t.shape[1]
    use_dq = op in (TM_MAX, TM_MIN)
    is_max = op == TM_MAX
    buf = np.empty(cap)
    for i in range(i0, n):
        k = slots[i]
        ti = t[i]
        lt = last_t[k]
        if ti != ti or ti < lt:
            out[i] = np.nan
            continue
        lim = ti - w
        while count[k] > 0 and ring_t[k, start[k] % cap] <= lim:
            _tw_evict(
                op, k, cap, ring_t, ring_a, ring_b, start, count, prev, acc, dq, dq_head, dq_len, use_dq
            )
        if count[k] == cap:
            if cap < max_rows:
                return i
            _tw_evict(
                op, k, cap, ring_t, ring_a, ring_b, start, count, prev, acc, dq, dq_head, dq_len, use_dq
            )
        s = start[k] + count[k]
        p = s % cap
        va = a[i]
        ring_t[k, p] = ti
        ring_a[k, p] = va
        ring_b[k, p] = b[i]
        count[k] += 1
        last_t[k] = ti
        _tw_update(op, acc, k, va, b[i], 1.0)
        if use_dq and va == va:
            length = dq_len[k]
            head = dq_head[k]
            while length > 0:
                back = head + length - 1
                if back >= cap:
                    back -= cap
                bv = ring_a[k, dq[k, back] % cap]
                if (bv > va) if is_max else (bv < va):
                    break
                length -= 1
            tail = head + length
            if tail >= cap:
                tail -= cap
            dq[k, tail] = s
            dq_len[k] = length + 1
        if op <= TM_BETA:
            out[i] = _tw_running(op, acc, k)
        elif use_dq:
            out[i] = ring_a[k, dq[k, dq_head[k]] % cap] if dq_len[k] > 0 else np.nan
        elif op == TM_FIRST:
            out[i] = ring_a[k, start[k] % cap]
        elif op == TM_LAST:
            out[i] = va
        elif op == TM_MOVE:
            out[i] = prev[k, 1] if prev[k, 0] <= lim else np.nan
        else:
            out[i] = _tw_scan(op, ring_a, k, start[k], count[k], cap, va, params, buf)
    return n


@njit(cache=True)
def widen_ring(old, new, start, count):  # pragma: no cover - numba
    """Copy the live rows of every key from a ring of width old.shape[1] to one of new.shape[1]."""
    c0 = old.shape[1]
    c1 = new.shape[1]
    for k in range(old.shape[0]):
        for s in range(start[k], start[k] + count[k]):
            new[k, s % c1] = old[k, s % c0]


@njit(cache=True)
def widen_deque(old, new, head, length):  # pragma: no cover - numba
    """Copy every key's deque to the front of a wider one (the caller sets head to 0)."""
    c0 = old.shape[1]
    for k in range(old.shape[0]):
        for j in range(length[k]):
            p = head[k] + j
            new[k, j] = old[k, p - c0 if p >= c0 else p]


# ---------------------------------------------------------------- TopN


@njit(cache=True)
def _select_top(key, xs, ys, m, top, ties, selx, sely, chosen):  # pragma: no cover - numba
    """Pick the first ``top`` of the m rows by ascending key (stable); returns how many were picked.

    Rows are given oldest first. Rows tied with the last place are taken from the
    oldest, from the latest, or all of them. ``chosen`` flags the picked rows.
    """
    for j in range(m):
        chosen[j] = False
    if m <= top:
        for j in range(m):
            chosen[j] = True
    else:
        order = np.argsort(key[:m], kind="mergesort")
        edge = key[order[top - 1]]
        lo = top - 1
        while lo > 0 and key[order[lo - 1]] == edge:
            lo -= 1
        hi = top
        while hi < m and key[order[hi]] == edge:
            hi += 1
        for j in range(lo):
            chosen[order[j]] = True
        need = top - lo
        if ties == TIES_ALL:
            for j in range(lo, hi):
                chosen[order[j]] = True
        elif ties == TIES_OLDEST:
            for j in range(lo, lo + need):
                chosen[order[j]] = True
        else:
            for j in range(hi - need, hi):
                chosen[order[j]] = True
    c = 0
    for j in range(m):
        if chosen[j]:
            selx[c] = xs[j]
            sely[c] = ys[j]
            c += 1
    return c


@njit(cache=True)
def _aggregate(op, xs, ys, m, biased, buf):  # pragma: no cover - numba
    """Aggregate of the picked rows; NULL x (or x, y pairs with a NULL) are skipped."""
    c = 0
    if op >= TOP_CORR:
        for j in range(m):
            if xs[j] == xs[j] and ys[j] == ys[j]:
                c += 1
        if c == 0:
            return np.nan
        if op == TOP_WSUM:
            total = 0.0
            for j in range(m):
                if xs[j] == xs[j] and ys[j] == ys[j]:
                    total += xs[j] * ys[j]
            return total
        if c < 2:
            return 0.0 if op == TOP_COVARP else np.nan
        mx = 0.0
        my = 0.0
        for j in range(m):
            if xs[j] == xs[j] and ys[j] == ys[j]:
                mx += xs[j]
                my += ys[j]
        mx /= c
        my /= c
        sxy = 0.0
        sxx = 0.0
        syy = 0.0
        for j in range(m):
            if xs[j] == xs[j] and ys[j] == ys[j]:
                dx = xs[j] - mx
                dy = ys[j] - my
                sxy += dx * dy
                sxx += dx * dx
                syy += dy * dy
        if op == TOP_COVAR:
            return sxy / (c - 1)
        if op == TOP_COVARP:
            return sxy / c
        if op == TOP_BETA:  # regression of x on y (DolphinDB's documented outputs)
            return np.nan if syy <= 0 else sxy / syy
        if sxx <= 0 or syy <= 0:
            return np.nan
        return min(1.0, max(-1.0, sxy / np.sqrt(sxx * syy)))
    for j in range(m):
        if xs[j] == xs[j]:
            buf[c] = xs[j]
            c += 1
    if c == 0:
        return np.nan
    if op in (TOP_SKEW, TOP_KURT):
        return _moments(buf, c, op == TOP_KURT, biased)
    total = 0.0
    for j in range(c):
        total += buf[j]
    if op == TOP_SUM:
        return total
    mean = total / c
    if op == TOP_AVG:
        return mean
    ddof = 1 if op in (TOP_VAR, TOP_STD) else 0
    if c <= ddof:
        return np.nan
    same = True
    for j in range(1, c):
        if buf[j] != buf[0]:
            same = False
            break
    ss = 0.0
    if not same:
        for j in range(c):
            d = buf[j] - mean
            ss += d * d
    var = ss / (c - ddof)
    return np.sqrt(var) if op in (TOP_STD, TOP_STDP) else var


@njit(cache=True)
def moving_top_n(
    op, slots, x, y, s, window, top, ascending, ties, biased, ring_x, ring_y, ring_s, n_rows, wpos
):  # pragma: no cover - numba
    """mTopN: aggregate the ``top`` rows of the last ``window`` rows, ranked by s (NULL s ignored)."""
    n = slots.shape[0]
    out = np.empty(n)
    key = np.empty(window)
    xs = np.empty(window)
    ys = np.empty(window)
    selx = np.empty(window)
    sely = np.empty(window)
    chosen = np.empty(window, dtype=np.bool_)
    buf = np.empty(window)
    for i in range(n):
        k = slots[i]
        p = wpos[k]
        ring_x[k, p] = x[i]
        ring_y[k, p] = y[i]
        ring_s[k, p] = s[i]
        r = n_rows[k] + 1
        n_rows[k] = r
        p = p + 1 if p + 1 < window else 0
        wpos[k] = p
        first = p if r >= window else 0  # slot of the oldest row
        m = 0
        for j in range(min(r, window)):
            idx = first + j
            if idx >= window:
                idx -= window
            sv = ring_s[k, idx]
            if sv == sv:
                key[m] = sv if ascending else -sv
                xs[m] = ring_x[k, idx]
                ys[m] = ring_y[k, idx]
                m += 1
        c = _select_top(key, xs, ys, m, top, ties, selx, sely, chosen)
        out[i] = _aggregate(op, selx, sely, c, biased, buf) if c > 0 else np.nan
    return out


@njit(cache=True)
def cum_top_n(
    op, slots, x, y, s, top, ascending, ties, biased, i0, max_rows, out, buf_s, buf_x, buf_y, length, last
):  # pragma: no cover - numba
    """cumTopN: only the rows that can still be picked are kept, oldest first; returns the stop row."""
    n = slots.shape[0]
    cap = buf_s.shape[1]
    key = np.empty(cap)
    xs = np.empty(cap)
    ys = np.empty(cap)
    selx = np.empty(cap)
    sely = np.empty(cap)
    chosen = np.empty(cap, dtype=np.bool_)
    tmp = np.empty(cap)
    for i in range(i0, n):
        k = slots[i]
        sv = s[i]
        if sv != sv:
            out[i] = last[k]
            continue
        m = length[k]
        if m == cap:
            if cap < max_rows:
                return i
            for j in range(m - 1):  # full at the cap: the oldest row leaves
                buf_s[k, j] = buf_s[k, j + 1]
                buf_x[k, j] = buf_x[k, j + 1]
                buf_y[k, j] = buf_y[k, j + 1]
            m -= 1
        buf_s[k, m] = sv
        buf_x[k, m] = x[i]
        buf_y[k, m] = y[i]
        m += 1
        for j in range(m):
            key[j] = buf_s[k, j] if ascending else -buf_s[k, j]
            xs[j] = buf_x[k, j]
            ys[j] = buf_y[k, j]
        c = _select_top(key, xs, ys, m, top, ties, selx, sely, chosen)
        # rows not picked now can never be picked later: keep the picked ones, oldest first
        kept = 0
        for j in range(m):
            if chosen[j]:
                buf_s[k, kept] = buf_s[k, j]
                buf_x[k, kept] = buf_x[k, j]
                buf_y[k, kept] = buf_y[k, j]
                kept += 1
        length[k] = kept
        res = _aggregate(op, selx, sely, c, biased, tmp) if c > 0 else np.nan
        last[k] = res
        out[i] = res
    return n


@njit(cache=True)
def time_top_n(
    op, slots, t, x, y, s, w, top, ascending, ties, biased, i0, max_rows, out,
    ring_t, ring_x, ring_y, ring_s, start, count, last_t,
):  # pragma: no cover - numba  # fmt: skip
    """tmTopN: aggregate the ``top`` rows of the window (T_i - w, T_i], ranked by s; returns the stop row.

    Rows are kept as in :func:`time_window`: a row whose time is NULL or earlier than
    the key's last time outputs NULL and is not stored; a full ring stops the kernel
    unless it is ``max_rows`` wide, when the oldest row leaves early.
    """
    n = slots.shape[0]
    cap = ring_t.shape[1]
    key = np.empty(cap)
    xs = np.empty(cap)
    ys = np.empty(cap)
    selx = np.empty(cap)
    sely = np.empty(cap)
    chosen = np.empty(cap, dtype=np.bool_)
    buf = np.empty(cap)
    for i in range(i0, n):
        k = slots[i]
        ti = t[i]
        if ti != ti or ti < last_t[k]:
            out[i] = np.nan
            continue
        lim = ti - w
        while count[k] > 0 and ring_t[k, start[k] % cap] <= lim:
            start[k] += 1
            count[k] -= 1
        if count[k] == cap:
            if cap < max_rows:
                return i
            start[k] += 1
            count[k] -= 1
        p = (start[k] + count[k]) % cap
        ring_t[k, p] = ti
        ring_x[k, p] = x[i]
        ring_y[k, p] = y[i]
        ring_s[k, p] = s[i]
        count[k] += 1
        last_t[k] = ti
        m = 0
        for j in range(count[k]):
            idx = (start[k] + j) % cap
            sv = ring_s[k, idx]
            if sv == sv:
                key[m] = sv if ascending else -sv
                xs[m] = ring_x[k, idx]
                ys[m] = ring_y[k, idx]
                m += 1
        c = _select_top(key, xs, ys, m, top, ties, selx, sely, chosen)
        out[i] = _aggregate(op, selx, sely, c, biased, buf) if c > 0 else np.nan
    return n


# ---------------------------------------------------------------- financial helpers


@njit(cache=True)
def dynamic_group(
    slots, cum, prev_cum, member, prev_member, n_groups, count_only, totals
):  # pragma: no cover - numba
    """dynamicGroupCumsum / dynamicGroupCumcount; returns one output row per group slot of ``totals``."""
    n = slots.shape[0]
    width = totals.shape[1]
    out = np.empty((width, n))
    for i in range(n):
        k = slots[i]
        g = member[i]
        pg = prev_member[i]
        g_ok = g == g and g == np.floor(g) and 0 <= g < n_groups
        pg_ok = pg == pg and pg == np.floor(pg) and 0 <= pg < n_groups
        if g_ok:
            gi = int(g)
            v = 1.0 if count_only else (cum[i] if cum[i] == cum[i] else 0.0)
            pv = 1.0 if count_only else (prev_cum[i] if prev_cum[i] == prev_cum[i] else 0.0)
            if not pg_ok:
                totals[k, gi] += v
            elif int(pg) == gi:
                if not count_only:
                    totals[k, gi] += v - pv  # the entity stays in its group; its value moved on
            else:
                totals[k, gi] += v
                totals[k, int(pg)] -= pv
        for c in range(width):
            out[c, i] = totals[k, c] if c < n_groups else np.nan
    return out


@njit(cache=True)
def range_count(
    slots, v, null, i0, max_rows, out, stack_v, stack_i, depth, rows, wall, seen
):  # pragma: no cover - numba
    """topRange on transformed values: consecutive preceding values strictly below v; returns the stop row.

    A monotonic stack keeps the candidates for "the nearest earlier value >= v".
    ``wall`` is the row of the last candidate dropped at the cap; counts stop there.
    """
    n = slots.shape[0]
    cap = stack_v.shape[1]
    for i in range(i0, n):
        k = slots[i]
        vi = v[i]
        d = depth[k]
        while d > 0 and stack_v[k, d - 1] < vi:
            d -= 1  # only the local depth moves: stopping below leaves the state as it was
        if d == cap:
            if cap < max_rows:
                return i
            wall[k] = stack_i[k, 0]
            for j in range(d - 1):
                stack_v[k, j] = stack_v[k, j + 1]
                stack_i[k, j] = stack_i[k, j + 1]
            d -= 1
        idx = rows[k]
        rows[k] = idx + 1
        below = stack_i[k, d - 1] if d > 0 else wall[k]
        stack_v[k, d] = vi
        stack_i[k, d] = idx
        depth[k] = d + 1
        if null[i] and not seen[k]:
            out[i] = np.nan  # leading NULLs stay NULL
        else:
            if not null[i]:
                seen[k] = 1
            out[i] = idx - below - 1
    return n


@njit(cache=True)
def true_range(slots, high, low, close, prev_close):  # pragma: no cover - numba
    """max(|H-L|, |H-prevC|, |prevC-L|); NULL on a key's first row or when an input is NULL."""
    n = slots.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        pc = prev_close[k]
        h = high[i]
        lo = low[i]
        out[i] = max(abs(h - lo), abs(h - pc), abs(pc - lo))
        if pc != pc or h != h or lo != lo:
            out[i] = np.nan
        prev_close[k] = close[i]
    return out


@njit(cache=True)
def sumbars(slots, x, threshold, i0, max_rows, out, ring, start, count):  # pragma: no cover - numba
    """Rows needed, counting back from the current one, for the sum of x to reach the threshold (0: never).

    NULL and negative values add 0. Only the rows of the last answer are kept:
    since values are non-negative, the next answer is at most one more.
    """
    n = slots.shape[0]
    cap = ring.shape[1]
    for i in range(i0, n):
        k = slots[i]
        if count[k] == cap:
            if cap < max_rows:
                return i
            start[k] += 1
            count[k] -= 1
        v = x[i]
        s = start[k] + count[k]
        ring[k, s % cap] = v if v > 0 else 0.0
        count[k] += 1
        total = 0.0
        need = 0
        for j in range(count[k]):
            total += ring[k, (s - j) % cap]
            if total >= threshold:
                need = j + 1
                break
        out[i] = need
        if need > 0:
            start[k] = s - need + 1
            count[k] = need
    return n


@njit(cache=True)
def iterate(slots, x, coeff, ring, wpos):  # pragma: no cover - numba
    """x_n = coeff · (last len(coeff) results, oldest first) + input_n; NULL input: NULL, state kept."""
    n = slots.shape[0]
    m = coeff.shape[0]
    out = np.empty(n)
    for i in range(n):
        v = x[i]
        if v != v:
            out[i] = np.nan
            continue
        k = slots[i]
        p = wpos[k]
        acc = v
        for j in range(m):
            idx = p + j
            if idx >= m:
                idx -= m
            acc += coeff[j] * ring[k, idx]
        ring[k, p] = acc  # the oldest result makes room for the newest
        wpos[k] = p + 1 if p + 1 < m else 0
        out[i] = acc
    return out
