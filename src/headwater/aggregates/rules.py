"""Every aggregate's rules, stated once: its name, code and result type, and how one summary of rows is
built, merged and finished.

A **summary** of rows is three numbers per aggregate, ``(x, n, z)``:

* ``first``/``last``: the first/last row's value, the rows (NULLs count), that row's arrival number;
* ``first_not``/``last_not``: the first/last non-NULL value, the non-NULL values, that value's arrival;
* ``sum``/``avg``, ``sum2``, ``prod``: the sum, the sum of squares, the product; the non-NULL values; --;
* ``count``: --, the non-NULL values, --;
* ``max``/``min``: the extreme, the non-NULL values, --;
* ``std``/``var``/``stdp``/``varp``: the mean, the non-NULL values, the sum of squared deviations.

The rules, the same in every engine and every form:

* ``first``/``last`` keep NULLs (the first row's value, NULL or not); every other aggregate skips them.
* Over no values an aggregate is NULL, except ``count``: 0.
* ``std``/``var`` are sample statistics (NULL below two values), ``stdp``/``varp`` population ones (NULL
  below one). Their moments are Welford's running mean and squared deviations (exact 0 for equal values,
  no cancellation on prices), merged with Chan et al.'s formula; a variance is never below 0.
* Values are DOUBLE while they are aggregated: a ``sum`` of LONGs is exact up to 2**53 and is then cast to
  the metric's type (``result``); no aggregate wraps around.

Example:
    >>> x, n, z = 0.0, 0, 0.0
    >>> for seq, v in enumerate([2.0, float("nan"), 4.0]):
    ...     x, n, z = add(VAR, x, n, z, v, seq)
    >>> finish(VAR, x, n, z), finish(COUNT, x, n, z)
    (2.0, 2.0)
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from headwater.errors import GraphDefinitionError

(FIRST, LAST, FIRST_NOT, LAST_NOT, SUM, SUM2, AVG, COUNT, MAX, MIN, STD, VAR, STDP, VARP,
 RANGE, MED, PROD) = range(17)  # fmt: skip


@dataclass(frozen=True)
class Aggregate:
    """One aggregate: ``result`` is its type ("same": the argument's, "sum": LONG for integers, else DOUBLE);
    ``ordered``: it depends on the rows' arrival order; ``mergeable``: it has a summary (see the module)."""

    name: str
    code: int
    result: str
    ordered: bool = False
    mergeable: bool = True


CATALOG: dict[str, Aggregate] = {a.name: a for a in (
    Aggregate("first", FIRST, "same", ordered=True),
    Aggregate("last", LAST, "same", ordered=True),
    Aggregate("first_not", FIRST_NOT, "same", ordered=True),
    Aggregate("last_not", LAST_NOT, "same", ordered=True),
    Aggregate("sum", SUM, "sum"),
    Aggregate("sum2", SUM2, "double"),
    Aggregate("avg", AVG, "double"),
    Aggregate("count", COUNT, "long"),
    Aggregate("max", MAX, "same"),
    Aggregate("min", MIN, "same"),
    Aggregate("std", STD, "double"),
    Aggregate("var", VAR, "double"),
    Aggregate("stdp", STDP, "double"),
    Aggregate("varp", VARP, "double"),
    Aggregate("range", RANGE, "double", mergeable=False),
    Aggregate("med", MED, "double", mergeable=False),
    Aggregate("prod", PROD, "double"),
)}

METRIC_AGGREGATES: tuple[str, ...] = ("first", "last", "max", "min", "sum", "count", "avg", "std", "var",
                                      "stdp", "varp")
"""The aggregates an engine's metrics may name (``sum(price)``); every window, session, calendar, join and
cross-sectional engine accepts each of them (the cross-section all but the ordered ones)."""


def code_of(func: str, *, where: str, accepted: tuple[str, ...] = METRIC_AGGREGATES) -> int:
    """The code of aggregate ``func``, or a clear error naming what ``where`` accepts."""
    if func not in accepted or func not in CATALOG:
        raise GraphDefinitionError(f"{where}: aggregate {func!r} is not supported; use {', '.join(accepted)}")
    return CATALOG[func].code


@numba.njit(cache=True, inline="always")
def add(code, x, n, z, v, seq):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """The summary ``(x, n, z)`` of some rows with one more row of value ``v`` (NaN = NULL) arrived at ``seq``."""
    if code == FIRST:
        return (v, n + 1, float(seq)) if n == 0 else (x, n + 1, z)
    if code == LAST:
        return v, n + 1, float(seq)
    if v != v:
        return x, n, z
    if n == 0:  # whatever x and z hold then (a kernel may keep NULL there), one value starts the summary
        return (v * v if code == SUM2 else v), 1, (float(seq) if code in (FIRST_NOT, LAST_NOT) else 0.0)
    if code == FIRST_NOT:
        return x, n + 1, z
    if code == LAST_NOT:
        return v, n + 1, float(seq)
    if code == MAX:
        return (v if v > x else x), n + 1, z
    if code == MIN:
        return (v if v < x else x), n + 1, z
    if code == SUM2:
        return x + v * v, n + 1, z
    if code == PROD:
        return x * v, n + 1, z
    if code in (STD, VAR, STDP, VARP):
        k = n + 1
        d = v - x
        mean = x + d / k
        return mean, k, z + d * (v - mean)
    return x + v, n + 1, z  # SUM, AVG, COUNT


@numba.njit(cache=True, inline="always")
def merge(code, x, n, z, xb, nb, zb):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """The summary of two summaries' rows together."""
    if nb == 0:
        return x, n, z
    if n == 0:
        return xb, nb, zb
    if code in (FIRST, FIRST_NOT):
        return (x, n + nb, z) if z <= zb else (xb, n + nb, zb)
    if code in (LAST, LAST_NOT):
        return (xb, n + nb, zb) if zb >= z else (x, n + nb, z)
    if code == MAX:
        return max(x, xb), n + nb, z
    if code == MIN:
        return min(x, xb), n + nb, z
    if code == PROD:
        return x * xb, n + nb, z
    if code in (STD, VAR, STDP, VARP):
        tot = n + nb
        d = xb - x
        return x + d * nb / tot, tot, z + zb + d * d * n * nb / tot
    return x + xb, n + nb, z


@numba.njit(cache=True, inline="always")
def finish(code, x, n, z):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """The aggregate's value from its summary (NaN = NULL)."""
    if code == COUNT:
        return float(n)
    if n == 0:
        return np.nan
    if code == AVG:
        return x / n
    if code in (STD, VAR, STDP, VARP):
        ddof = 1 if code in (STD, VAR) else 0
        if n <= ddof:
            return np.nan
        var = max(z, 0.0) / (n - ddof)
        return np.sqrt(var) if code in (STD, STDP) else var
    return x


@numba.njit(cache=True)
def finish_all(code, x, n, z):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """:func:`finish` of each summary of the arrays ``x``, ``n``, ``z``."""
    out = np.empty(len(x))
    for i in range(len(x)):
        out[i] = finish(code, x[i], n[i], z[i])
    return out
