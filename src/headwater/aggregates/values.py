"""Aggregates over a window of values held in a buffer (oldest first), for kernels that keep the rows
themselves (the reactive engine's ``moving``/``window``, TopN): the rules of :mod:`.rules`, plus the
aggregates that need every value (``range``, ``med``, ``prod``).

>>> import numpy as np
>>> from headwater.aggregates.rules import MED, STD
>>> over_values(STD, np.array([1.0, np.nan, 3.0]), 3, np.empty(3)), over_values(MED, np.array([5.0, 1, 2]), 3, np.empty(3))
(1.4142135623730951, 2.0)
"""

from __future__ import annotations

import numba
import numpy as np

from headwater.aggregates.rules import (
    AVG,
    COUNT,
    FIRST,
    FIRST_NOT,
    LAST,
    LAST_NOT,
    MAX,
    MED,
    MIN,
    PROD,
    RANGE,
    STD,
    STDP,
    SUM,
    SUM2,
    VAR,
    VARP,
    add,
    finish,
)


@numba.njit(cache=True)
def over_values(code, vals, m, buf):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Aggregate ``code`` of ``vals[:m]`` (NaN = NULL); ``buf``: scratch of at least ``m`` values."""
    if code in (RANGE, MED, PROD):
        nn = non_null(vals, m, buf)
        if nn == 0:
            return np.nan
        if code == PROD:
            return fold(PROD, buf, nn)
        if code == RANGE:
            return buf[:nn].max() - buf[:nn].min()
        srt = np.sort(buf[:nn])
        h = nn // 2
        return srt[h] if nn % 2 == 1 else (srt[h - 1] + srt[h]) / 2.0
    # one loop per aggregate, each calling add() with a constant code: the compiler drops the other branches
    if code == FIRST:
        return fold(FIRST, vals, m)
    if code == LAST:
        return fold(LAST, vals, m)
    if code == FIRST_NOT:
        return fold(FIRST_NOT, vals, m)
    if code == LAST_NOT:
        return fold(LAST_NOT, vals, m)
    if code == MAX:
        return fold(MAX, vals, m)
    if code == MIN:
        return fold(MIN, vals, m)
    if code == SUM:
        return fold(SUM, vals, m)
    if code == SUM2:
        return fold(SUM2, vals, m)
    if code == AVG:
        return fold(AVG, vals, m)
    if code == COUNT:
        return fold(COUNT, vals, m)
    if code == STD:
        return fold(STD, vals, m)
    if code == VAR:
        return fold(VAR, vals, m)
    if code == STDP:
        return fold(STDP, vals, m)
    return fold(VARP, vals, m)


@numba.njit(cache=True, inline="always")
def non_null(vals, m, buf):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Copy the non-NULL values of ``vals[:m]`` to the front of ``buf`` (which may be ``vals``); return their count."""
    nn = 0
    for j in range(m):
        if vals[j] == vals[j]:
            buf[nn] = vals[j]
            nn += 1
    return nn


@numba.njit(cache=True, inline="always")
def fold(code, vals, m):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Aggregate ``code`` of ``vals[:m]`` by its rules (:mod:`.rules`), one value after the other."""
    x, n, z = 0.0, 0, 0.0
    for j in range(m):
        x, n, z = add(code, x, n, z, vals[j], j)
    return finish(code, x, n, z)
