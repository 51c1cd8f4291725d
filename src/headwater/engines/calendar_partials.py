"""Partial aggregates of the calendar-window engines: mergeable per-(key, pane) summaries of rows.

A partial is a dict of equally long arrays: its key columns, "rows", "fseq"/"lseq" (first and last arrival),
and per aggregate i "x{i}", "y{i}", "z{i}": first/last: the value; sum/avg/count: the sum of non-NULL values
and their count; max/min: the extreme and the count; std/var: the mean, the count and the sum of squared
deviations (merged with Chan et al.'s formula).

>>> import numpy as np
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

Partials = dict[str, np.ndarray]


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


def _group_numbers(starts: np.ndarray, n: int) -> np.ndarray:
    return np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))


def _last_in_group(starts: np.ndarray, n: int) -> np.ndarray:
    return np.append(starts[1:], n) - 1


def empty_partials(names: Sequence[str], funcs: Sequence[str]) -> Partials:
    out: Partials = {name: np.empty(0, np.int64) for name in (*names, "rows", "fseq", "lseq")}
    for i in range(len(funcs)):
        out.update({f"x{i}": np.empty(0), f"y{i}": np.empty(0), f"z{i}": np.empty(0)})
    return out


@numba.njit(cache=True)
def _by_group(group, n_groups):  # type: ignore[no-untyped-def]
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


def partials_of_rows(group: np.ndarray, n_groups: int, keys: dict[str, np.ndarray], seq: np.ndarray,
                     args: Sequence[np.ndarray], funcs: Sequence[str]) -> Partials:
    """One partial per group of rows (``group``: each row's, from 0 to ``n_groups - 1`` with none empty, or -1
    for a row in none; ``keys``: columns equal within a group, kept with its partial; ``args``: each aggregate's
    argument, NaN = NULL). A group's rows count in ``seq`` order."""
    if n_groups == 0:
        return empty_partials(list(keys), funcs)
    order, starts = _by_group(group, n_groups)
    if (seq[1:] < seq[:-1]).any() and not _ascend_in_groups(seq[order], starts):  # rows not in arrival order
        order = order[np.lexsort((seq[order], group[order]))]
    n = len(order)
    ends = _last_in_group(starts, n)
    sizes = np.diff(np.append(starts, n))
    out: Partials = {name: k[order[starts]] for name, k in keys.items()}
    out.update(rows=sizes, fseq=seq[order[starts]], lseq=seq[order[ends]])
    # each argument column sorted once for all its aggregates: its values, their NULLs as 0 and their counts
    sorted_args: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    for i, (func, a) in enumerate(zip(funcs, args, strict=True)):
        if id(a) not in sorted_args:
            v = a[order]
            valid = ~np.isnan(v)
            if valid.all():
                sorted_args[id(a)] = v, valid, v, sizes.astype(np.float64)
            else:
                sorted_args[id(a)] = (v, valid, np.where(valid, v, 0.0),
                                      np.add.reduceat(valid.astype(np.float64), starts))
        v, valid, zeroed, count = sorted_args[id(a)]
        x, z = np.full(len(starts), np.nan), np.zeros(len(starts))
        if func == "first":
            x = v[starts]
        elif func == "last":
            x = v[ends]
        elif func in ("sum", "avg", "count"):
            x = np.add.reduceat(zeroed, starts)
        elif func == "max":
            x = np.fmax.reduceat(v, starts)
        elif func == "min":
            x = np.fmin.reduceat(v, starts)
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                x = np.add.reduceat(zeroed, starts) / count
            z = np.add.reduceat(np.where(valid, (v - x[group[order]]) ** 2, 0.0), starts)
        out[f"x{i}"], out[f"y{i}"], out[f"z{i}"] = x, count, z
    return out


def merge_partials(parts: Partials, keys: dict[str, np.ndarray], funcs: Sequence[str], *,
                   rows: np.ndarray | None = None) -> Partials:
    """Combine the partials at ``rows`` (positions in ``parts``, repeats allowed; by default all) that share
    ``keys`` (one value per position in ``rows``) into one each."""
    if rows is None:
        rows = np.arange(len(parts["rows"]))
    n = len(rows)
    if n == 0:
        return empty_partials(list(keys), funcs)
    fseq = parts["fseq"][rows]
    order, starts = _groups(list(keys.values()), fseq)
    at = rows[order]  # the sorted partials' positions in ``parts``
    lseq = parts["lseq"][at]
    out: Partials = {name: k[order[starts]] for name, k in keys.items()}
    out.update(rows=np.add.reduceat(parts["rows"][at], starts), fseq=fseq[order[starts]],
               lseq=np.maximum.reduceat(lseq, starts))
    by_last = None
    for i, func in enumerate(funcs):
        count = np.add.reduceat(parts[f"y{i}"][at], starts)
        mx, mz = np.full(len(starts), np.nan), np.zeros(len(starts))
        if func == "first":
            mx = parts[f"x{i}"][at[starts]]  # the partial that arrived first
        elif func == "last":
            if by_last is None:  # the partial that arrived last (ties: the last of them in input order)
                if _ascend_in_groups(lseq, starts, strictly=True):
                    by_last = at[_last_in_group(starts, n)]
                else:
                    last_order, last_starts = _groups(list(keys.values()), parts["lseq"][rows])
                    by_last = rows[last_order[_last_in_group(last_starts, n)]]
            mx = parts[f"x{i}"][by_last]
        elif func in ("sum", "avg", "count"):
            mx = np.add.reduceat(parts[f"x{i}"][at], starts)
        elif func == "max":
            mx = np.fmax.reduceat(parts[f"x{i}"][at], starts)
        elif func == "min":
            mx = np.fmin.reduceat(parts[f"x{i}"][at], starts)
        else:
            x, y, z = (parts[f"{c}{i}"][at] for c in "xyz")
            with np.errstate(invalid="ignore", divide="ignore"):
                mx = np.add.reduceat(np.where(y > 0, y * x, 0.0), starts) / count
            spread = np.where(y > 0, y * (x - mx[_group_numbers(starts, n)]) ** 2, 0.0)
            mz = np.add.reduceat(z + spread, starts)
        out[f"x{i}"], out[f"y{i}"], out[f"z{i}"] = mx, count, mz
    return out


def finals(parts: Partials, funcs: Sequence[str]) -> list[np.ndarray]:
    """Each aggregate's value from merged partials (NULL = NaN)."""
    values = []
    for i, func in enumerate(funcs):
        x, y, z = parts[f"x{i}"], parts[f"y{i}"], parts[f"z{i}"]
        with np.errstate(invalid="ignore", divide="ignore"):
            if func in ("first", "last"):
                v = x
            elif func == "count":
                v = y
            elif func in ("sum", "max", "min"):
                v = np.where(y > 0, x, np.nan)
            elif func == "avg":
                v = np.where(y > 0, x / y, np.nan)
            else:
                var = np.where(y >= 2, np.maximum(z, 0.0) / (y - 1), np.nan)
                v = np.sqrt(var) if func == "std" else var
        values.append(np.asarray(v, dtype=np.float64))
    return values
