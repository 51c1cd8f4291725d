"""Aggregates over groups of rows, and their mergeable partials (the summaries of :mod:`.rules`).

:func:`over_groups` is the one-shot form (session windows, window joins, cross-sections): each group's
aggregate of its rows. The calendar windows keep :data:`Partials` instead, one per (key, pane), made by
:func:`partials_of_rows`, combined by :func:`merge_partials` and turned into values by :func:`finals`.

A partial is a dict of equally long arrays: its key columns, "rows", "fseq"/"lseq" (first and last arrival),
and per aggregate i its summary "x{i}", "n{i}", "z{i}".

>>> import numpy as np
>>> over_groups(np.array([1.0, 2.0, np.nan, 4.0]), np.array([0, 1, 1, 0]), 3, "sum").tolist()
[5.0, 2.0, nan]
>>> parts = partials_of_rows(np.array([0, 0, 1]), 2, {"pane": np.array([0, 0, 1])}, np.array([0, 1, 2]),
...                          [np.array([1.0, 2.0, 4.0])], ["sum"])
>>> merged = merge_partials(parts, {"pane": np.zeros(2, np.int64)}, ["sum"])
>>> finals(merged, ["sum"])[0].tolist()
[7.0]
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from headwater.aggregates.rules import CATALOG, add, finish_all, merge
from headwater.kernel_inputs import read_only

Partials = dict[str, np.ndarray]


def over_groups(values: np.ndarray, group: np.ndarray, n_groups: int, func: str) -> np.ndarray:
    """Each group's ``func`` of ``values`` (NaN = NULL), the rows of a group counting in their order here
    (``group``: each row's, from 0 to ``n_groups - 1``; -1: in none). A group without rows is NULL (count 0)."""
    order, starts = _by_group(read_only(group, np.int64), n_groups)
    seq = np.arange(len(values), dtype=np.int64)
    x, n, z = _summarise(CATALOG[func].code, order, starts, read_only(values, np.float64), seq)
    return finish_all(CATALOG[func].code, x, n, z)


def packed_keys(keys: Sequence[np.ndarray]) -> np.ndarray | None:
    """Each row of the (non-empty) integer ``keys`` as one int64 that sorts like the row; None when the keys'
    ranges are too wide for that."""
    bounds = [(int(k.min()), int(k.max())) for k in keys]
    if np.prod([float(hi - lo + 1) for lo, hi in bounds]) > 2.0**62:
        return None
    packed = keys[0] - bounds[0][0]
    for k, (lo, hi) in zip(keys[1:], bounds[1:], strict=True):
        packed *= hi - lo + 1
        packed += k
        packed -= lo
    return packed


def empty_partials(names: Sequence[str], funcs: Sequence[str]) -> Partials:
    out: Partials = {name: np.empty(0, np.int64) for name in (*names, "rows", "fseq", "lseq")}
    for i in range(len(funcs)):
        out.update({f"x{i}": np.empty(0), f"n{i}": np.empty(0, np.int64), f"z{i}": np.empty(0)})
    return out


def partials_of_rows(group: np.ndarray, n_groups: int, keys: dict[str, np.ndarray], seq: np.ndarray,
                     args: Sequence[np.ndarray], funcs: Sequence[str]) -> Partials:
    """One partial per group of rows (``group``: each row's, from 0 to ``n_groups - 1`` with none empty, or -1
    for a row in none; ``keys``: columns equal within a group, kept with its partial; ``args``: each aggregate's
    argument, NaN = NULL). A group's rows count in ``seq`` order."""
    if n_groups == 0:
        return empty_partials(list(keys), funcs)
    group, seq = read_only(group, np.int64), read_only(seq, np.int64)
    order, starts = _by_group(group, n_groups)
    if (seq[1:] < seq[:-1]).any() and not _ascend_in_groups(seq[order], starts):  # rows not in arrival order
        order = order[np.lexsort((seq[order], group[order]))]
    ends = _last_in_group(starts, len(order))
    out: Partials = {name: k[order[starts]] for name, k in keys.items()}
    out.update(rows=np.diff(np.append(starts, len(order))), fseq=seq[order[starts]], lseq=seq[order[ends]])
    for i, (func, a) in enumerate(zip(funcs, args, strict=True)):
        out[f"x{i}"], out[f"n{i}"], out[f"z{i}"] = _summarise(CATALOG[func].code, order, starts,
                                                              read_only(a, np.float64), seq)
    return out


def merge_partials(parts: Partials, keys: dict[str, np.ndarray], funcs: Sequence[str], *,
                   rows: np.ndarray | None = None) -> Partials:
    """Combine the partials at ``rows`` (positions in ``parts``, repeats allowed; by default all) that share
    ``keys`` (one value per position in ``rows``) into one each, in arrival order."""
    if rows is None:
        rows = np.arange(len(parts["rows"]))
    if len(rows) == 0:
        return empty_partials(list(keys), funcs)
    fseq = parts["fseq"][rows]
    order, starts = _groups(list(keys.values()), fseq)
    at = rows[order]  # the sorted partials' positions in ``parts``
    out: Partials = {name: k[order[starts]] for name, k in keys.items()}
    out.update(rows=np.add.reduceat(parts["rows"][at], starts), fseq=fseq[order[starts]],
               lseq=np.maximum.reduceat(parts["lseq"][at], starts))
    for i, func in enumerate(funcs):
        out[f"x{i}"], out[f"n{i}"], out[f"z{i}"] = _merge_runs(
            CATALOG[func].code, at, starts, parts[f"x{i}"], parts[f"n{i}"], parts[f"z{i}"])
    return out


def finals(parts: Partials, funcs: Sequence[str]) -> list[np.ndarray]:
    """Each aggregate's value from merged partials (NULL = NaN)."""
    return [finish_all(CATALOG[func].code, parts[f"x{i}"], parts[f"n{i}"], parts[f"z{i}"])
            for i, func in enumerate(funcs)]


@numba.njit(cache=True)
def _summarise(code, order, starts, values, seq):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """The summary of each group of rows ``order[starts[g]:starts[g + 1]]``."""
    m = len(starts)
    x, n, z = np.zeros(m), np.zeros(m, dtype=np.int64), np.zeros(m)
    for g in range(m):
        hi = starts[g + 1] if g + 1 < m else len(order)
        a, b, c = 0.0, 0, 0.0
        for j in range(starts[g], hi):
            r = order[j]
            a, b, c = add(code, a, b, c, values[r], seq[r])
        x[g], n[g], z[g] = a, b, c
    return x, n, z


@numba.njit(cache=True)
def _merge_runs(code, at, starts, x, n, z):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """The merged summary of each run of summaries ``at[starts[g]:starts[g + 1]]``."""
    m = len(starts)
    mx, mn, mz = np.zeros(m), np.zeros(m, dtype=np.int64), np.zeros(m)
    for g in range(m):
        hi = starts[g + 1] if g + 1 < m else len(at)
        a, b, c = 0.0, 0, 0.0
        for j in range(starts[g], hi):
            p = at[j]
            a, b, c = merge(code, a, b, c, x[p], n[p], z[p])
        mx[g], mn[g], mz[g] = a, b, c
    return mx, mn, mz


@numba.njit(cache=True)
def _by_group(group, n_groups):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """The positions of the elements of ``group`` in a group (from 0 to ``n_groups - 1``; -1: none), stably
    sorted by it, and where each group starts among them: a counting sort."""
    starts = np.zeros(n_groups + 1, dtype=np.int64)
    for g in group:
        if g >= 0:
            starts[g + 1] += 1
    starts = np.cumsum(starts)
    at = starts[:-1].copy()
    order = np.empty(starts[-1], dtype=np.int64)
    for i in range(len(group)):
        g = group[i]
        if g >= 0:
            order[at[g]] = i
            at[g] += 1
    return order, starts[:-1]


def _starts(sorted_keys: Sequence[np.ndarray]) -> np.ndarray:
    """Where each run of equal (sorted) keys starts."""
    change = np.zeros(len(sorted_keys[0]), dtype=bool)
    change[0] = True
    for k in sorted_keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def _ascend_in_groups(values: np.ndarray, starts: np.ndarray, *, strictly: bool = False) -> bool:
    """Whether ``values`` ascend within each group (the groups start at ``starts``)."""
    down = values[1:] <= values[:-1] if strictly else values[1:] < values[:-1]
    down[starts[1:] - 1] = False
    return not down.any()


def _groups(keys: Sequence[np.ndarray], then: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort (non-empty) ``keys`` then ``then`` (ties in input order); return the order and where each group of
    equal keys starts in it."""
    packed = packed_keys(keys)
    if packed is not None:
        # ``then`` mostly ascends in each group already (rows and partials come in arrival order): then a
        # stable sort by the keys alone is the same order, and cheaper
        order = np.argsort(packed, kind="stable")
        starts = _starts([packed[order]])
        if _ascend_in_groups(then[order], starts):
            return order, starts
        order = np.lexsort((then, packed))
        return order, _starts([packed[order]])
    order = np.lexsort([then, *reversed(keys)])
    return order, _starts([k[order] for k in keys])


def _last_in_group(starts: np.ndarray, n: int) -> np.ndarray:
    return np.append(starts[1:], n) - 1
