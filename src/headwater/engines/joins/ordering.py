"""Per-key time order of a join's sides: which rows keep it, and nearest-in-time look-ups of right rows.

Both are single passes compiled with numba: a join task runs them on every micro-batch over all of its
rows (the as-of join looks up each left row's match and the right row that makes it due, the window join
each window's ends), where pandas' grouped ``cummax`` and ``merge_asof`` cost more than the join itself.

>>> latest = np.full(2, NO_TIME)
>>> in_order(np.array([0, 1, 0, 0]), np.array([5, 1, 3, 7]), latest).tolist()
[True, True, False, True]
>>> latest.tolist()
[7, 1]
>>> rights = RightRows(np.array([0, 1, 0]), np.array([10, 10, 20]), np.array([0, 1, 2]))
>>> before, after = rights.around(np.array([0, 0, 1]), np.array([15, 20, 5]))
>>> before.tolist(), after.tolist()  # indices into the rows sorted by (key, time, arrival)
([0, 1, -1], [1, -1, 2])
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from headwater.engines.base import SEQ
from headwater.engines.joins.base import SLOT, TIME
from headwater.kernel_inputs import read_only

NO_TIME = np.iinfo(np.int64).min


@numba.njit(cache=True)
def _keep_in_order(slots, times, latest, keep):  # type: ignore[no-untyped-def]
    for i in range(len(slots)):
        s = slots[i]
        if times[i] >= latest[s]:
            keep[i] = True
            latest[s] = times[i]


def in_order(slots: np.ndarray, times: np.ndarray, latest: np.ndarray) -> np.ndarray:
    """Which rows keep their key's time order: a row older than an earlier row of its key (in this batch
    or before, ``latest`` per slot) is out of order (time engines drop those, Orca C.0). Updates ``latest``."""
    keep = np.zeros(len(slots), dtype=np.bool_)
    _keep_in_order(read_only(slots, np.int64), read_only(times, np.int64), latest, keep)
    return keep


def in_time_order(slots: np.ndarray, times: np.ndarray, latest: np.ndarray) -> np.ndarray:
    """``sort_by_time``: which rows keep their side's time order across all keys (a row older than an earlier
    row of any key is out of order; ``latest`` per slot, whose maximum is the side's newest time so far).
    Updates ``latest``."""
    newest = np.array([newest_time(latest)], dtype=np.int64)
    keep = in_order(np.zeros(len(slots), dtype=np.int64), times, newest)
    np.maximum.at(latest, slots[keep], times[keep])
    return keep


def newest_time(latest: np.ndarray) -> int:
    """The newest time of a side over all keys (``NO_TIME`` before its first row)."""
    return int(latest.max()) if len(latest) else NO_TIME


@numba.njit(cache=True)
def _search(starts, time, slots, probes, right, out):  # type: ignore[no-untyped-def]
    n_slots = len(starts) - 1
    for i in range(len(slots)):
        s = slots[i]
        if s >= n_slots:  # a key without right rows: an empty segment at the end
            out[i] = starts[n_slots]
            continue
        lo, hi, t = starts[s], starts[s + 1], probes[i]
        while lo < hi:
            mid = (lo + hi) // 2
            if time[mid] < t or (right and time[mid] == t):
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo


@numba.njit(cache=True)
def _counting_sort(slots, times, seqs, starts, pos):  # type: ignore[no-untyped-def]
    """Stable order by slot into ``pos``; whether each key's rows were in (time, arrival) order already."""
    at = starts[:-1].copy()
    for i in range(len(slots)):
        s = slots[i]
        j = at[s]
        if j > starts[s]:
            k = pos[j - 1]
            if times[i] < times[k] or (times[i] == times[k] and seqs[i] < seqs[k]):
                return False
        pos[j] = i
        at[s] = j + 1
    return True


class RightRows:
    """Right rows sorted by (key slot, time, arrival), for nearest-in-time look-ups per key.

    ``pos`` maps a sorted index back to the row's position in the arrays given; ``time`` and ``seq`` are in
    sorted order. A side's rows are in time order per key already (out-of-order rows are dropped on arrival),
    so sorting is a stable counting sort by slot; any other input is sorted in full."""

    @classmethod
    def of(cls, cache: pa.Table) -> RightRows:
        """The right rows of a join's cache (its working columns: key slot, time, arrival)."""
        return cls(*(cache[c].to_numpy() for c in (SLOT, TIME, SEQ)))

    def __init__(self, slots: np.ndarray, times: np.ndarray, seqs: np.ndarray) -> None:
        slots, times, seqs = (read_only(a, np.int64) for a in (slots, times, seqs))
        n_slots = int(slots.max()) + 1 if len(slots) else 0
        self.starts = np.zeros(n_slots + 1, dtype=np.int64)
        np.cumsum(np.bincount(slots, minlength=n_slots), out=self.starts[1:])
        pos = np.empty(len(slots), dtype=np.int64)
        if not _counting_sort(slots, times, seqs, self.starts, pos):
            pos = np.lexsort((seqs, times, slots))
        self.pos, self.time, self.seq = pos, times[pos], seqs[pos]

    def search(self, slots: np.ndarray, times: np.ndarray, side: str = "right") -> np.ndarray:
        """Where each probe (slot, time) falls among its key's sorted rows: before the rows at that time
        (``side="left"``) or after them (``"right"``), as an index into the sorted arrays."""
        out = np.empty(len(slots), np.int64)
        _search(self.starts, self.time, read_only(slots, np.int64), read_only(times, np.int64), side == "right", out)
        return out

    def around(self, slots: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each probe (slot, time): the sorted index of its key's last row at or before that time, and
        of its key's first row after it; -1 where there is none."""
        slots = np.asarray(slots, np.int64)
        at = self.search(slots, times, "right")
        last = len(self.starts) - 1
        begin, end = self.starts[np.minimum(slots, last)], self.starts[np.minimum(slots + 1, last)]
        return np.where(at > begin, at - 1, -1), np.where(at < end, at, -1)
