"""Numba kernels behind :mod:`headwater.kernels.ops_higher`.

Same contract as :mod:`headwater.kernels.kernels`: every kernel walks one
micro-batch row by row in arrival order, reads and updates per-key state arrays
*in place* at ``slots[i]`` and returns float64 outputs. NaN is NULL. The Python
wrappers own validation, state growth and copying.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Aggregates of moving() and window(); the order is the public list in ops_higher.
(
    AGG_SUM, AGG_SUM2, AGG_AVG, AGG_COUNT, AGG_MAX, AGG_MIN, AGG_RANGE, AGG_STD, AGG_VAR, AGG_STDP,
    AGG_VARP, AGG_MED, AGG_PROD, AGG_FIRST, AGG_LAST, AGG_FIRST_NOT, AGG_LAST_NOT,
) = range(17)  # fmt: skip

# Cumulative functions of segmentby().
SEG_SUM, SEG_AVG, SEG_MAX, SEG_MIN, SEG_COUNT, SEG_VAR, SEG_VARP, SEG_STD, SEG_STDP = range(9)

# Binary folds of accumulate().
ACC_ADD, ACC_SUB, ACC_MUL, ACC_MAX, ACC_MIN = range(5)

# Functions an iterator applies to its own past outputs.
H_MSUM, H_MAVG, H_MMAX, H_MMIN, H_MCOUNT, H_CUMFIRST, H_CUMLAST, H_FFILL, H_MOVE = range(9)

# Built-in combiners of generic_state_iterate().
C_SUM_ADD, C_AVG_ADD, C_MAX, C_MIN, C_PROD_MUL = range(5)


# ---------------------------------------------------------------- moving / window


@njit(cache=True)
def aggregate(op, vals, m, buf):  # pragma: no cover - numba
    """Aggregate ``vals[:m]`` (oldest first, NaN = NULL); ``buf`` is scratch of at least ``m``.

    NULLs are skipped, except by ``first``/``last``; an aggregate of no non-NULL
    values is NULL, except ``count`` (0).
    """
    if m == 0:
        return np.nan
    if op == AGG_FIRST:
        return vals[0]
    if op == AGG_LAST:
        return vals[m - 1]
    nn = 0
    for j in range(m):
        v = vals[j]
        if v == v:
            buf[nn] = v
            nn += 1
    if op == AGG_COUNT:
        return float(nn)
    if nn == 0:
        return np.nan
    if op == AGG_FIRST_NOT:
        return buf[0]
    if op == AGG_LAST_NOT:
        return buf[nn - 1]
    if op in (AGG_SUM, AGG_AVG):
        s = 0.0
        for j in range(nn):
            s += buf[j]
        return s if op == AGG_SUM else s / nn
    if op == AGG_SUM2:
        s = 0.0
        for j in range(nn):
            s += buf[j] * buf[j]
        return s
    if op == AGG_PROD:
        p = 1.0
        for j in range(nn):
            p *= buf[j]
        return p
    if op in (AGG_MAX, AGG_MIN, AGG_RANGE):
        hi = buf[0]
        lo = buf[0]
        for j in range(1, nn):
            if buf[j] > hi:
                hi = buf[j]
            if buf[j] < lo:
                lo = buf[j]
        if op == AGG_MAX:
            return hi
        return lo if op == AGG_MIN else hi - lo
    if op == AGG_MED:
        srt = np.sort(buf[:nn])
        h = nn // 2
        return srt[h] if nn % 2 == 1 else (srt[h - 1] + srt[h]) / 2.0
    # variance family: two passes over the window, exact 0 for equal values
    ddof = 1 if (op in (AGG_STD, AGG_VAR)) else 0
    if nn <= ddof:
        return np.nan
    same = True
    total = 0.0
    for j in range(nn):
        total += buf[j]
        if buf[j] != buf[0]:
            same = False
    if same and np.isfinite(buf[0]):
        return 0.0
    mean = total / nn
    ss = 0.0
    for j in range(nn):
        d = buf[j] - mean
        ss += d * d
    var = ss / (nn - ddof)
    return np.sqrt(var) if (op in (AGG_STD, AGG_STDP)) else var


@njit(cache=True)
def window_agg(
    op, slots, x, a, b, minp, full_only, ring, n_rows, wpos, vals, buf
):  # pragma: no cover - numba
    """Aggregate rows ``[i - a, i - b]`` of each key (``a >= b >= 0``; row i = the current one).

    ``ring`` keeps the last ``a + 1`` rows of a key. A window that starts before
    the key's first row is cut short; an empty one is NULL. ``full_only`` also
    nulls the key's first ``a`` rows; ``minp`` is the least number of non-NULL
    values a window needs. Costs O(a - b) per row (a sort for ``med``).
    """
    n = x.shape[0]
    out = np.empty(n)
    size = a + 1
    for i in range(n):
        k = slots[i]
        r = n_rows[k]
        pos = wpos[k]
        ring[k, pos] = x[i]
        wpos[k] = pos + 1 if pos + 1 < size else 0
        n_rows[k] = r + 1
        hi = r - b
        if hi < 0 or (full_only and r < a):
            out[i] = np.nan
            continue
        lo = r - a if r >= a else 0
        m = hi - lo + 1
        nn = 0
        for j in range(m):
            v = ring[k, (lo + j) % size]
            vals[j] = v
            if v == v:
                nn += 1
        out[i] = np.nan if nn < minp else aggregate(op, vals, m, buf)
    return out


# ---------------------------------------------------------------- segmentby / accumulate


@njit(cache=True)
def segment_cum(op, slots, x, seg, seg_last, n_rows, count, acc, mean, ssqdm):  # pragma: no cover - numba
    """Cumulative function of ``x`` that restarts whenever ``seg`` changes (NULL equals NULL).

    Within a segment the rules of ``cumsum``/``cumvar``/... hold: NULL rows carry
    the last result, rows before the segment's first value are NULL (``cumcount``: 0).
    """
    n = x.shape[0]
    out = np.empty(n)
    is_var = op >= SEG_VAR
    ddof = 1 if (op in (SEG_VAR, SEG_STD)) else 0
    for i in range(n):
        k = slots[i]
        s = seg[i]
        last = seg_last[k]
        if n_rows[k] == 0 or not (s == last or (s != s and last != last)):
            count[k] = 0
            acc[k] = np.nan
            mean[k] = 0.0
            ssqdm[k] = 0.0
            seg_last[k] = s
        n_rows[k] += 1
        v = x[i]
        c = count[k]
        if v == v:
            c += 1
            count[k] = c
            if is_var:
                delta = v - mean[k]
                mean[k] += delta / c
                ssqdm[k] += delta * (v - mean[k])
            elif c == 1:
                acc[k] = v
            elif op == SEG_MAX:
                acc[k] = max(acc[k], v)
            elif op == SEG_MIN:
                acc[k] = min(acc[k], v)
            else:  # SEG_SUM, SEG_AVG, SEG_COUNT (acc unused)
                acc[k] += v
        if op == SEG_COUNT:
            out[i] = c
        elif c == 0:
            out[i] = np.nan
        elif op == SEG_AVG:
            out[i] = acc[k] / c
        elif is_var:
            if c <= ddof:
                out[i] = np.nan
            else:
                var = max(ssqdm[k], 0.0) / (c - ddof)
                out[i] = np.sqrt(var) if (op in (SEG_STD, SEG_STDP)) else var
        else:
            out[i] = acc[k]
    return out


@njit(cache=True)
def accumulate(op, slots, x, acc, has):  # pragma: no cover - numba
    """Running fold ``acc = f(acc, x)``; NULL rows are skipped and output the last result."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v == v:
            if has[k] == 0:
                a = v
                has[k] = 1
            else:
                a = acc[k]
                if op == ACC_ADD:
                    a = a + v
                elif op == ACC_SUB:
                    a = a - v
                elif op == ACC_MUL:
                    a = a * v
                elif op == ACC_MAX:
                    a = a if a >= v else v
                else:
                    a = a if a <= v else v
            acc[k] = a
        out[i] = acc[k] if has[k] else np.nan
    return out


# ---------------------------------------------------------------- talib


@njit(cache=True)
def started_rows(slots, cols, started):  # pragma: no cover - numba
    """Mark rows at or after the key's first row where every column of ``cols`` is non-NULL."""
    n = slots.shape[0]
    out = np.empty(n, dtype=np.bool_)
    for i in range(n):
        k = slots[i]
        if started[k] == 0:
            ok = True
            for c in range(cols.shape[0]):
                v = cols[c, i]
                if v != v:
                    ok = False
                    break
            if ok:
                started[k] = 1
        out[i] = started[k] == 1
    return out


# ---------------------------------------------------------------- iterators


@njit(cache=True)
def _history(op, k, ring, n_out, wpos, first_not, last_not):  # pragma: no cover - numba
    """``iterate_func(out)[j]`` for the key's latest output j, from the outputs kept in ``ring``.

    ``ring`` keeps the last ``size`` outputs: the window of m-functions, or
    ``shift + 1`` for ``move``. The m-functions follow the m-function rules (NULL
    until ``size`` outputs exist, except ``mcount``; NULLs skipped).
    """
    no = n_out[k]
    if no == 0:
        return np.nan
    if op == H_CUMFIRST:
        return first_not[k]
    if op in (H_CUMLAST, H_FFILL):
        return last_not[k]
    size = ring.shape[1]
    if op == H_MOVE:
        # the ring is full once `shift + 1` outputs exist; its oldest slot is the next to write
        return ring[k, wpos[k]] if no >= size else np.nan
    if op != H_MCOUNT and no < size:
        return np.nan
    m = no if no < size else size
    cnt = 0
    s = 0.0
    hi = -np.inf
    lo = np.inf
    p = wpos[k]
    for _ in range(m):
        p = p - 1 if p > 0 else size - 1
        v = ring[k, p]
        if v == v:
            cnt += 1
            s += v
            if v > hi:
                hi = v
            if v < lo:
                lo = v
    if cnt == 0:
        return np.nan
    if op == H_MSUM:
        return s
    if op == H_MAVG:
        return s / cnt
    if op == H_MMAX:
        return hi
    if op == H_MMIN:
        return lo
    return float(cnt)  # H_MCOUNT


@njit(cache=True, inline="always")
def _push(k, v, ring, n_out, wpos, first_not, last_not):  # pragma: no cover - numba
    size = ring.shape[1]
    p = wpos[k]
    ring[k, p] = v
    wpos[k] = p + 1 if p + 1 < size else 0
    n_out[k] += 1
    if v == v:
        last_not[k] = v
        if first_not[k] != first_not[k]:
            first_not[k] = v


@njit(cache=True)
def state_iterate(
    op, slots, x, initial, initial_window, c0, c1, ring, n_out, wpos, first_not, last_not
):  # pragma: no cover - numba
    """``out[k] = initial[k]`` for the key's first ``initial_window`` rows, then ``c0·x[k] + c1·f(out)[k-1]``."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        if n_out[k] < initial_window:
            v = initial[i]
        else:
            v = c0 * x[i] + c1 * _history(op, k, ring, n_out, wpos, first_not, last_not)
        _push(k, v, ring, n_out, wpos, first_not, last_not)
        out[i] = v
    return out


@njit(cache=True)
def conditional_iterate(
    op, slots, cond, true_value, ring, n_out, wpos, first_not, last_not
):  # pragma: no cover - numba
    """``out[k] = true_value[k]`` where ``cond[k]`` is true, else ``f(out)[k-1]``; NULL cond is false."""
    n = cond.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        c = cond[i]
        v = true_value[i] if c == c and c != 0.0 else _history(op, k, ring, n_out, wpos, first_not, last_not)
        _push(k, v, ring, n_out, wpos, first_not, last_not)
        out[i] = v
    return out


@njit(cache=True)
def _combine(op, prev, m, xv):  # pragma: no cover - numba
    """A built-in combiner over ``prev[:m]`` (NULLs skipped) and the row's ``xv``."""
    cnt = 0
    s = 0.0
    p = 1.0
    hi = -np.inf
    lo = np.inf
    for j in range(m):
        v = prev[j]
        if v == v:
            cnt += 1
            s += v
            p *= v
            if v > hi:
                hi = v
            if v < lo:
                lo = v
    if op in (C_MAX, C_MIN):
        if xv == xv:
            cnt += 1
            if xv > hi:
                hi = xv
            if xv < lo:
                lo = xv
        if cnt == 0:
            return np.nan
        return hi if op == C_MAX else lo
    if cnt == 0:
        return np.nan
    if op == C_SUM_ADD:
        return s + xv
    if op == C_AVG_ADD:
        return s / cnt + xv
    return p * xv  # C_PROD_MUL


@njit(cache=True)
def generic_iterate(op, slots, x, initial, window, ring, n_out, wpos, prev):  # pragma: no cover - numba
    """``genericStateIterate`` with a built-in combiner; see :func:`generic_iterate_py` for the rules."""
    n = x.shape[0]
    out = np.empty(n)
    size = ring.shape[1]
    for i in range(n):
        k = slots[i]
        no = n_out[k]
        if window > 0 and no < window:
            v = initial[i]
        else:
            if no == 0:  # window == 0: the first row iterates on its initial value
                prev[0] = initial[i]
                m = 1
            else:
                m = size
                p = wpos[k]
                for j in range(size):  # oldest first
                    prev[j] = ring[k, p]
                    p = p + 1 if p + 1 < size else 0
            v = _combine(op, prev, m, x[i])
        p = wpos[k]
        ring[k, p] = v
        wpos[k] = p + 1 if p + 1 < size else 0
        n_out[k] = no + 1
        out[i] = v
    return out


def generic_iterate_py(fn, slots, x, initial, window, ring, n_out, wpos):
    """``genericStateIterate`` with a Python callable ``fn(last_outputs, x_k) -> float``, per row.

    With ``window == 0`` ``last_outputs`` holds the previous output (the row's
    ``initial`` value on a key's first row); otherwise the key's first ``window``
    rows output ``initial`` and later rows pass the last ``window`` outputs,
    oldest first. Plain Python: one call per row.
    """
    n = x.shape[0]
    out = np.empty(n)
    size = ring.shape[1]
    for i in range(n):
        k = int(slots[i])
        no = int(n_out[k])
        if window > 0 and no < window:
            v = float(initial[i])
        else:
            if no == 0:
                last = np.array([initial[i]])
            else:
                p = int(wpos[k])
                last = np.concatenate((ring[k, p:], ring[k, :p]))
            v = float(fn(last, float(x[i])))
        p = int(wpos[k])
        ring[k, p] = v
        wpos[k] = p + 1 if p + 1 < size else 0
        n_out[k] = no + 1
        out[i] = v
    return out
