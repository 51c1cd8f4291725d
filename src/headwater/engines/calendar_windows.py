"""Windows laid out on the clock of each day: the machinery of the time-bucket and daily time-series engines.

Both engines cut every (trading) day into the same sequence of *panes*, intervals given as offsets from
the day's midnight, and close a key's pane when a row of that key at or past the pane's closing instant
arrives. What differs is only the layout (:class:`DayLayout`): the time-bucket engine's panes are the
intervals between its cut points (one pane per window); the daily time-series engine's panes are the
``step``-long slices of its sessions, a window being ``window / step`` consecutive panes of one session.

Rules shared by both engines (:class:`CalendarWindowProcessor`):

* Row times are the time column's own clock (microseconds since the epoch, no time zone). A row belongs
  to the pane whose interval holds it, or to none (then it is not aggregated; it still closes panes).
* A key's pane closes at the first row of that key at or past the pane's closing instant (+
  ``accepted_delay``). The row is aggregated first when the pane holds it, so a pane whose closing
  instant is inside it (the time-bucket engine's inclusive right edge) is emitted by its own last row.
* Forced closes (optional): a row closes every key's panes through the last session that ended long enough
  before it (forced session ends; keys seen later included), or the other keys' windows that ended long
  enough before it (the time-series engine's forced trigger; keys seen so far).
* A row is dropped when every window that would hold it has already been emitted for its key (rows out
  of order per key; rows tying with a window that closed on its own last row).
* ``fill``: empty windows are emitted too, filled with NULL, the previous window's values (``ffill``) or
  a number — but only on a day on which the key already had a window: from the key's first window of a
  day to the day's last window. Days without a row of the key emit nothing.
* Output: one row per window, ordered by the row that closed it (``_hw_seq``), then time, then key.

Aggregates are kept per (key, pane) as mergeable partial results (first/last with their arrival order,
sums, counts, extremes, and count/mean/M2 for ``std``/``var``; :mod:`headwater.aggregates.groups`),
never as raw rows.

>>> layout = DayLayout.from_panes(lo=[0, 60], hi=[60, 120], close_at=[60, 120], out_end=[60, 120])
>>> day, pane, in_pane = layout.locate(np.array([30, 90, 150]))
>>> pane.tolist(), in_pane.tolist(), layout.closes_through(np.array([59, 60, 86_400_000_000]), 0).tolist()
([0, 1, 1], [True, True, False], [-1, 0, 1])
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from headwater.aggregates.groups import (
    Partials,
    empty_partials,
    finals,
    merge_partials,
    packed_keys,
    partials_of_rows,
)
from headwater.engines.base import SEQ, KeyTable, LateRowsProcessor
from headwater.engines.columns import times_us, to_arrow
from headwater.engines.window_metrics import WindowMetrics
from headwater.errors import GraphDefinitionError, clip
from headwater.types import Schema

DAY_US = 86_400_000_000
MINUTE_US = 60_000_000
SECOND_US = 1_000_000
NONE = np.iinfo(np.int64).min // 4  # "no pane"; far from overflow when a pane index is added to it

_TIME_OF_DAY = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?")


def parse_time_of_day(value: Any, *, where: str) -> tuple[int, str, int]:
    """A time of day (``"09:30"``, ``"09:30:00"``, ``"09:30:00.5"`` or ``datetime.time``) as
    (microseconds after midnight, canonical text, precision in microseconds).

    The precision is the unit of the value as written: a minute for ``"HH:MM"``, a second for
    ``"HH:MM:SS"`` and for a ``datetime.time`` (DolphinDB's MINUTE and SECOND types), a microsecond when
    fractional seconds are given.

    >>> parse_time_of_day("09:05", where="w")
    (32700000000, '09:05', 60000000)
    >>> parse_time_of_day(dt.time(9, 5), where="w")
    (32700000000, '09:05:00', 1000000)
    """
    if isinstance(value, dt.time):
        if value.tzinfo is not None:
            raise GraphDefinitionError(f"{where}: {clip(value)} has a time zone; give a naive time of day")
        text = value.strftime("%H:%M:%S") + (f".{value.microsecond:06d}" if value.microsecond else "")
        return parse_time_of_day(text, where=where)
    match = _TIME_OF_DAY.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise GraphDefinitionError(
            f"{where}: cannot read {clip(value)} as a time of day; expected 'HH:MM', 'HH:MM:SS' or a datetime.time, "
            "e.g. '09:30'")
    hours, minutes = int(match[1]), int(match[2])
    seconds = int(match[3]) if match[3] is not None else 0
    if hours > 23 or minutes > 59 or seconds > 59:
        raise GraphDefinitionError(f"{where}: {clip(value)} is not a time of day (00:00 to 23:59:59)")
    us = ((hours * 60 + minutes) * 60 + seconds) * SECOND_US
    if match[3] is None:
        return us, f"{hours:02d}:{minutes:02d}", MINUTE_US
    if match[4] is None:
        return us, f"{hours:02d}:{minutes:02d}:{seconds:02d}", SECOND_US
    fraction = match[4].ljust(6, "0")
    return us + int(fraction), f"{hours:02d}:{minutes:02d}:{seconds:02d}.{fraction}", 1


def time_of_day_text(value: Any, *, where: str) -> str:
    """The canonical text of a time of day (what engine specs store, so plans stay plain JSON)."""
    return parse_time_of_day(value, where=where)[1]


Ints = Sequence[int] | np.ndarray  # pane offsets: a list, or numpy for a day of many panes


class DayLayout:
    """The panes of one day, as offsets (µs) from the day's midnight; the same every day.

    Pane ``k`` holds the row times ``t`` with ``lo[k] <= t - shift - day_start < hi[k]`` and closes at the
    first row at or past ``close_at[k] + shift`` (+ the accepted delay); ``out_end``/``out_start`` are the
    output times of the window ending with pane ``k``, ``due`` where the time-series engine's forced trigger
    counts from (default ``out_end``); ``first``/``last`` the first and last pane of its session. A day's
    territory is ``[start, start + 24h)``: where the day begins for the row mapping (sessions may run past
    midnight). ``shift`` (1 µs) turns ``(lo, hi]`` windows into ``[lo, hi)``
    ones. Panes are numbered across days: global pane ``day * K + k``.
    """

    def __init__(self, *, lo: Ints, hi: Ints, close_at: Ints, out_end: Ints,
                 out_start: Ints, first: Ints, last: Ints, start: int = 0,
                 shift: int = 0, session_end: Ints = (), session_last: Ints = (),
                 due: Ints | None = None) -> None:
        self.lo = np.asarray(lo, dtype=np.int64)
        self.hi = np.asarray(hi, dtype=np.int64)
        self.close_at = np.asarray(close_at, dtype=np.int64)
        self.out_end = np.asarray(out_end, dtype=np.int64)
        self.due = self.out_end if due is None else np.asarray(due, dtype=np.int64)
        self.out_start = np.asarray(out_start, dtype=np.int64)
        self.first = np.asarray(first, dtype=np.int64)
        self.last = np.asarray(last, dtype=np.int64)
        self.start = int(start)
        self.shift = int(shift)
        self.session_end = np.asarray(session_end, dtype=np.int64)  # real session ends (for forced closes)
        self.session_last = np.asarray(session_last, dtype=np.int64)
        self.panes = len(self.lo)

    @classmethod
    def from_panes(cls, *, lo: Sequence[int], hi: Sequence[int], close_at: Sequence[int], out_end: Sequence[int],
                   out_start: Sequence[int] | None = None) -> DayLayout:
        """One window per pane (output start: ``out_start``, by default where the pane starts)."""
        k = len(lo)
        return cls(lo=lo, hi=hi, close_at=close_at, out_end=out_end, out_start=lo if out_start is None else out_start,
                   first=range(k), last=range(k))

    def _day_offset(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        day = np.floor_divide(t - self.start, DAY_US)
        return day, t - day * DAY_US

    def locate(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each row time's day, global pane and whether a pane holds it."""
        day, offset = self._day_offset(times - self.shift)
        k = np.searchsorted(self.lo, offset, side="right") - 1
        in_pane = (k >= 0) & (offset < self.hi[np.clip(k, 0, None)])
        return day, day * self.panes + k, in_pane

    def closes_through(self, times: np.ndarray, delay: int) -> np.ndarray:
        """The last global pane a row at each time closes (its closing instant + ``delay`` is at or before)."""
        day, offset = self._day_offset(times - self.shift - delay)
        return day * self.panes + np.searchsorted(self.close_at, offset, side="right") - 1

    def ends_through(self, times: np.ndarray, after: int) -> np.ndarray:
        """The last pane whose window is due (``due``: its end, or its sub-window's) at least ``after`` before
        each time."""
        day, offset = self._day_offset(times - after)
        return day * self.panes + np.searchsorted(self.due, offset, side="right") - 1

    def forces_through(self, times: np.ndarray, after: int) -> np.ndarray:
        """The last pane of the last session that ended at least ``after`` before each time."""
        day, offset = self._day_offset(times - self.shift - after)
        j = np.searchsorted(self.session_end - self.shift, offset, side="right") - 1
        return day * self.panes + np.where(j >= 0, self.session_last[np.clip(j, 0, None)], -1)


# ---- the per-row pass: which rows count, which windows close, and when ----------------------------------------

@numba.njit(cache=True, inline="always")
def _window_end(q, m, n_panes, last):  # type: ignore[no-untyped-def]
    """The last window (by its last pane) that holds pane ``q``: m panes on, within q's session."""
    d = q // n_panes
    return min(q + m - 1, d * n_panes + last[q - d * n_panes])


@numba.njit(cache=True)
def _close(s, to, trig, m, first, last, fill, closed, last_emit, pend, pend_n, part_of, out,
           no):  # type: ignore[no-untyped-def]
    """Emit key ``s``'s windows ending at panes up to ``to`` into ``out`` (see :func:`_calendar_pass`); return
    the new output count."""
    n_panes = first.shape[0]
    big = np.iinfo(np.int64).max
    start = big
    if pend_n[s] > 0:
        start = pend[s, 0]
    if fill and last_emit[s] != NONE:
        start = min(start, last_emit[s] + 1)
    p = max(closed[s] + 1, start)
    while p <= to:
        d = p // n_panes
        wlo = max(p - m + 1, d * n_panes + first[p - d * n_panes])
        nonempty = False
        nxt = big
        for j in range(pend_n[s]):
            q = pend[s, j]
            if wlo <= q <= p:
                nonempty = True
            elif q > p and q < nxt:
                nxt = q
        if nonempty:
            out[3, no] = 0
        elif fill and last_emit[s] != NONE and last_emit[s] // n_panes == d:
            out[3, no] = 1
        else:
            if nxt == big:
                break
            p = nxt  # nothing to emit before the next pane with rows
            continue
        out[0, no] = s
        out[1, no] = p
        out[2, no] = trig
        no += 1
        last_emit[s] = p
        p += 1
    if to > closed[s]:
        closed[s] = to
    k = 0  # retire the panes every window of which is now emitted
    while k < pend_n[s] and _window_end(pend[s, k], m, n_panes, last) <= closed[s]:
        k += 1
    if k:
        for j in range(pend_n[s] - k):
            pend[s, j] = pend[s, j + k]
            part_of[s, j] = part_of[s, j + k]
        pend_n[s] -= k
    return no


@numba.njit(cache=True)
def _idle(s, fill, closed, last_emit, pend_n, n_panes, last):  # type: ignore[no-untyped-def]
    """Nothing of key ``s`` is left to emit: no pane with rows, and (with fill) its last day is done."""
    if pend_n[s] > 0:
        return False
    if not fill or last_emit[s] == NONE:
        return True
    d = last_emit[s] // n_panes
    return closed[s] >= d * n_panes + n_panes - 1


@numba.njit(cache=True)
def _room(no, worst, out):  # type: ignore[no-untyped-def]
    """The output buffer, grown so that ``worst`` more windows fit after the first ``no``."""
    if no + worst <= out.shape[1]:
        return out
    grown = np.empty((out.shape[0], 2 * (no + worst)), dtype=np.int64)
    grown[:, :no] = out[:, :no]
    return grown


@numba.njit(cache=True)
def _calendar_pass(slots, pane, in_pane, close_to, force_to, kick_to, update, per, day, first, last, m, fill,
                   purge_daily, closed, last_emit, last_day, mark, pend, pend_n, glob):  # type: ignore[no-untyped-def]
    """Run the rows of one micro-batch in order; mutate the per-key state; return for each row the number of
    windows emitted before it was taken (-1: the row does not count; a window holds only the rows taken before
    it was emitted) and its partial (the rows of one key and pane taken between the same two emissions; numbered
    from 0 in order of their first rows), the number of partials, and the windows emitted (key slot, last pane,
    index of the row that closed it, filled).
    The windows are written to the rows of one buffer: numba counts references to an array reassigned in the
    loop (to grow it) at every row, so one buffer costs a quarter of four.

    ``force_to``: the pane through which a row closes every key's windows, keys seen later included (forced
    session ends); ``kick_to``: the pane through which it closes the windows of the other keys seen so far
    (the time-series engine's forced trigger). ``update`` (tumbling windows): each row's pane and update period
    as ``pane * per + period``; a row in a later period of the pane than its key's previous row (``mark``)
    first emits the window over the rows before it (emit on update, as in the time-series engine)."""
    n = slots.shape[0]
    n_keys = closed.shape[0]
    n_panes = first.shape[0]
    width = pend.shape[1]
    taken = np.full(n, -1, dtype=np.int64)
    part = np.full(n, -1, dtype=np.int64)
    part_of = np.full(pend.shape, -1, dtype=np.int64)  # the partial of each pending pane, if it has one yet
    part_epoch = np.empty(n, dtype=np.int64)
    n_parts = 0
    cap = n + 16
    out = np.empty((4, cap), dtype=np.int64)  # rows: key slot, last pane, closing row, filled
    no = 0
    worst = (width + 1) * n_panes + width * m + 1  # most windows one close of one key can emit
    big = np.iinfo(np.int64).max
    due = big  # a lower bound of the first pane a kick could close (keys not seen yet have none)
    for k in range(n_keys):
        if closed[k] != NONE:
            due = min(due, closed[k] + 1)
    for i in range(n):
        s = slots[i]
        d = day[i]
        if purge_daily and d > glob[1]:
            # a new day: keys with nothing left to emit restart from scratch (memory only; see the module)
            if glob[1] != NONE:
                for k in range(n_keys):
                    if last_day[k] < d and _idle(k, fill, closed, last_emit, pend_n, n_panes, last):
                        closed[k] = NONE
                        last_emit[k] = NONE
                        mark[k] = NONE
            glob[1] = d
        if closed[s] < glob[0]:
            closed[s] = glob[0]  # a key first seen (or restarted) after a forced close
        if d > last_day[s]:
            last_day[s] = d
        if kick_to[i] >= due:
            # as in the time-series engine: a row forces the other keys' windows that ended long enough before
            due = big
            for k in range(n_keys):
                if closed[k] == NONE:
                    continue
                if k != s and kick_to[i] > closed[k]:
                    out = _room(no, worst, out)
                    no = _close(k, kick_to[i], i, m, first, last, fill, closed, last_emit, pend, pend_n, part_of,
                                out, no)
                due = min(due, closed[k] + 1)
        if in_pane[i]:
            q = pane[i]
            if _window_end(q, m, n_panes, last) > closed[s]:
                if update[i] != NONE:
                    if mark[s] != NONE and update[i] // per == mark[s] // per and update[i] > mark[s]:
                        out = _room(no, 1, out)
                        out[0, no] = s
                        out[1, no] = q
                        out[2, no] = i
                        out[3, no] = 0
                        no += 1
                    mark[s] = update[i]
                taken[i] = no
                j = 0
                while j < pend_n[s] and pend[s, j] < q:
                    j += 1
                if j == pend_n[s] or pend[s, j] != q:
                    if pend_n[s] == width:
                        raise RuntimeError("calendar windows: more open panes than the state holds")
                    for k in range(pend_n[s], j, -1):
                        pend[s, k] = pend[s, k - 1]
                        part_of[s, k] = part_of[s, k - 1]
                    pend[s, j] = q
                    part_of[s, j] = -1
                    pend_n[s] += 1
                if part_of[s, j] < 0 or part_epoch[part_of[s, j]] != no:
                    part_of[s, j] = n_parts
                    part_epoch[n_parts] = no
                    n_parts += 1
                part[i] = part_of[s, j]
        targets = 0
        if close_to[i] > closed[s]:
            targets = 1
        if force_to[i] > glob[0]:
            glob[0] = force_to[i]
            targets = 1 + n_keys
        for t in range(targets):
            k = s if t == 0 else t - 1
            to = close_to[i] if t == 0 else glob[0]
            if to <= closed[k] or (t > 0 and closed[k] == NONE):
                continue  # a key not seen yet takes glob[0] when it is: marked closed now, a kick would close it
            out = _room(no, worst, out)
            no = _close(k, to, i, m, first, last, fill, closed, last_emit, pend, pend_n, part_of, out, no)
        if closed[s] != NONE:
            due = min(due, closed[s] + 1)  # a key seen for the first time can be kicked from now on
    return taken, part, n_parts, out[0, :no], out[1, :no], out[2, :no], out[3, :no]


def _window_keys(slot: np.ndarray, pane: np.ndarray) -> np.ndarray:
    """Each (key slot, pane) pair as one int64, equal for equal pairs; by pane first, as rows come in time order
    (looking up nearly sorted values is faster)."""
    keys = packed_keys([pane, slot])
    if keys is None:  # panes too far apart: number them densely
        keys = packed_keys([np.unique(pane, return_inverse=True)[1], slot])
    assert keys is not None
    return keys


# ---- the processor -------------------------------------------------------------------------------------------

def check_key_purge_freq(freq: Any, key_column: Sequence[str], fill: Any, *, where: str) -> None:
    """``key_purge_freq_in_second``: a positive number of seconds, with key columns and no fill (as in Orca)."""
    if freq is None:
        return
    if isinstance(freq, bool) or not isinstance(freq, int | float) or not freq > 0:
        raise GraphDefinitionError(
            f"{where}: key_purge_freq_in_second must be a positive number of seconds, got {clip(freq)}")
    if not key_column or fill != "none":
        raise GraphDefinitionError(
            f"{where}: key_purge_freq_in_second needs key_column and fill='none' (as in Orca); got "
            f"key_column={list(key_column)}, fill={clip(fill)}")


class CalendarWindowProcessor(LateRowsProcessor):
    """Run a calendar-window engine (spec with ``input_schema``, ``time_column``, ``key_column``,
    ``_outputs``, ``output_schema()``) over micro-batches; see the module docstring for the rules. Without a
    time column (system time) a row's time is its micro-batch's input commit time, in milliseconds.
    ``metrics``: the positions of the spec's metrics to compute (default: all)."""

    def __init__(self, spec: Any, layout: DayLayout, *, panes_per_window: int = 1, delay: int = 0,
                 fill: str | float = "none", force_after: int | None = None, kick_after: int | None = None,
                 update: int | None = None, purge_daily: bool = False, purge_every: float | None = None,
                 use_window_start_time: bool = False, max_open_panes: int = 2,
                 metrics: Sequence[int] | None = None) -> None:
        self.spec = spec
        self.layout = layout
        n_keys = len(spec.key_column)
        full = spec.output_schema()
        positions = range(len(spec._outputs)) if metrics is None else metrics
        self.out_schema: Schema = Schema(full.columns[:1 + n_keys] + tuple(full.columns[1 + n_keys + p] for p in positions))
        self.metrics = WindowMetrics([spec._outputs[p] for p in positions], spec.input_schema,
                                     [t for _, t in self.out_schema.columns[1 + n_keys:]])
        self.funcs = [a.func for a in self.metrics.aggs]
        self.m = panes_per_window
        self.delay = delay
        self.fill = fill
        self.force_after = force_after
        self.kick_after = kick_after  # a row closes the other keys' windows that ended this long before it
        self.update = update  # µs: emit on update (tumbling windows)
        self.purge_daily = purge_daily
        self.purge_every = purge_every
        self.use_window_start_time = use_window_start_time
        self.width = max_open_panes

    def new_state(self) -> dict[str, Any]:
        a = len(self.funcs)
        return {"keys": [], "closed": np.empty(0, np.int64), "last_emit": np.empty(0, np.int64),
                "last_day": np.empty(0, np.int64), "mark": np.empty(0, np.int64),
                "pend": np.empty((0, self.width), np.int64),
                "pend_n": np.empty(0, np.int64), "last_out": np.empty((0, a), np.float64),
                "glob": np.array([NONE, NONE], dtype=np.int64), "last_purge": None,
                "panes": empty_partials(["slot", "pane"], self.funcs)}

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def _grown(self, state: dict[str, Any], n_keys: int) -> dict[str, np.ndarray]:
        have = len(state["closed"])
        extra = n_keys - have
        return {
            "closed": np.concatenate([state["closed"], np.full(extra, NONE, np.int64)]),
            "last_emit": np.concatenate([state["last_emit"], np.full(extra, NONE, np.int64)]),
            "last_day": np.concatenate([state["last_day"], np.full(extra, NONE, np.int64)]),
            # state written before update periods lacks it: no key had a row in an update period yet
            "mark": np.concatenate([state.get("mark", np.full(have, NONE, np.int64)), np.full(extra, NONE, np.int64)]),
            "pend": np.concatenate([state["pend"], np.zeros((extra, self.width), np.int64)]),
            "pend_n": np.concatenate([state["pend_n"], np.zeros(extra, np.int64)]),
            "last_out": np.concatenate([state["last_out"], np.full((extra, len(self.funcs)), np.nan)]),
        }

    def process_routed(self, state: dict[str, Any], table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table, np.ndarray | None]:
        """The late rows: in a window already emitted for their key. Rows outside every window (before the
        first cut point or session, after the last) and rows with a NULL time are dropped, not late."""
        spec = self.spec
        if spec.time_column is None:
            valid = np.ones(table.num_rows, dtype=np.bool_)
        else:
            valid = table[spec.time_column].is_valid().to_numpy(zero_copy_only=False)
            if not valid.all():
                table = table.filter(pa.array(valid))
        n = table.num_rows
        if n == 0:
            return state, self._arrow_schema().empty_table(), None
        keys = KeyTable(state["keys"])
        key_columns = [table[k] for k in spec.key_column]
        slots = keys.slots_from_arrow(key_columns) if key_columns else np.zeros(n, dtype=np.int64)
        per_key = self._grown(state, max(len(keys), 1))
        glob = state["glob"].copy()
        last_purge = state["last_purge"]
        if self.purge_every is not None:
            if last_purge is None:
                last_purge = batch_time
            elif batch_time - last_purge >= self.purge_every:
                # Orca's keyPurgeFreqInSec on the batch's commit time (the same on replay): idle keys restart
                idle = per_key["pend_n"] == 0
                per_key["closed"][idle] = NONE
                per_key["last_emit"][idle] = NONE
                per_key["mark"][idle] = NONE
                last_purge = batch_time
        if spec.time_column is None:  # system time: the input's commit time, in milliseconds as Orca's
            times = np.full(n, int(batch_time * 1000) * 1000, dtype=np.int64)
        else:
            times = times_us(table[spec.time_column], "timestamp")
        layout = self.layout
        day, pane, in_pane = layout.locate(times)
        close_to = layout.closes_through(times, self.delay)
        force_to = (layout.forces_through(times, self.force_after) if self.force_after is not None
                    else np.full(n, NONE, dtype=np.int64))
        kick_to = (layout.ends_through(times, self.kick_after) if self.kick_after is not None
                   else np.full(n, NONE, dtype=np.int64))
        per = 1
        update = np.full(n, NONE, dtype=np.int64)
        if self.update is not None:
            # a row's update period counts from its window's start (rows before a session: at its begin)
            per = int((layout.out_end - layout.out_start).max()) // self.update + 2
            k = np.clip(pane - day * layout.panes, 0, layout.panes - 1)
            since = np.maximum(times - layout.shift - day * DAY_US - layout.out_start[k], 0)
            update = np.where(in_pane, pane * per + since // self.update, NONE)
        taken, part, n_parts, o_slot, o_pane, o_trig, o_filled = _calendar_pass(
            slots, pane, in_pane.astype(np.int8), close_to, force_to, kick_to, update, np.int64(per), day,
            layout.first, layout.last, np.int64(self.m), self.fill != "none", self.purge_daily, per_key["closed"],
            per_key["last_emit"], per_key["last_day"], per_key["mark"], per_key["pend"], per_key["pend_n"], glob)
        seq = table[SEQ].to_numpy().astype(np.int64, copy=False)
        # partials per key, pane and "taken before emission e" epoch: a window sees only rows taken before it
        parts = partials_of_rows(part, n_parts, {"slot": slots, "pane": pane, "epoch": taken}, seq,
                                 self.metrics.arguments(table), self.funcs)
        old = _with_counts(state["panes"], self.funcs)
        parts = {name: np.concatenate([old[name], parts[name]]) if name in old
                 else np.concatenate([np.full(len(old["rows"]), -1, np.int64), parts[name]]) for name in parts}
        out = self._emitted(parts, per_key, o_slot, o_pane, o_trig, o_filled, seq, keys)
        # keep the panes a window still to be emitted holds (chosen before merging: far fewer to merge)
        q = parts["pane"]
        k = len(layout.first)
        d = np.floor_divide(q, k)
        window_end = np.minimum(q + self.m - 1, d * k + layout.last[q - d * k])
        open_panes = np.flatnonzero(window_end > per_key["closed"][parts["slot"]])
        panes = merge_partials(parts, {"slot": parts["slot"][open_panes], "pane": parts["pane"][open_panes]},
                               self.funcs, rows=open_panes)
        late = in_pane & (taken < 0)  # in a window, but one already emitted for its key
        new_state = {"keys": keys.keys, **per_key, "glob": glob, "last_purge": last_purge, "panes": panes,
                     "late_rows": int(state.get("late_rows", 0)) + int(np.count_nonzero(late))}
        if (self.purge_daily or self.purge_every is not None) and spec.key_column:
            new_state = self._compact(new_state)
        dropped = None
        if late.any():
            dropped = np.zeros(len(valid), dtype=np.bool_)
            dropped[valid] = late
        return new_state, out, dropped

    def _emitted(self, parts: Partials, per_key: dict[str, np.ndarray], o_slot: np.ndarray, o_pane: np.ndarray,
                 o_trig: np.ndarray, o_filled: np.ndarray, seq: np.ndarray, keys: KeyTable) -> pa.Table:
        m_out = len(o_slot)
        if m_out == 0:
            return self._arrow_schema().empty_table()
        a = len(self.funcs)
        values = np.full((m_out, a), np.nan)
        full = o_filled == 0
        if full.any():
            # each emitted window from the partials of its panes (a pane counts for the m windows ending at it)
            k = len(self.layout.first)
            q = parts["pane"]
            d = np.floor_divide(q, k)
            last_pane = d * k + self.layout.last[q - d * k]
            # each partial once per window holding its pane ...
            index = np.concatenate([np.flatnonzero(q + step <= last_pane) for step in range(self.m)])
            window = q[index] + np.repeat(np.arange(self.m), [np.count_nonzero(q + step <= last_pane)
                                                              for step in range(self.m)])
            # ... for each emission of that window after the partial's rows were taken (a window is emitted
            # more than once with update periods: each time over the rows taken before)
            emitted = np.flatnonzero(full)
            e, segment, ends = self._emissions_of(emitted, o_slot, o_pane, parts["slot"][index], window,
                                                  parts["epoch"][index])
            keep = segment >= 0
            merged = merge_partials(parts, {"e": segment[keep]}, self.funcs, rows=index[keep])
            reps = ends[merged["e"]] - merged["e"] + 1
            if (reps > 1).any():  # an emission holds the segments of every earlier emission of its window
                copies = np.repeat(np.arange(len(merged["e"])), reps)
                later = np.arange(len(copies)) - np.repeat(np.cumsum(reps) - reps, reps)
                merged = merge_partials(merged, {"e": merged["e"][copies] + later}, self.funcs, rows=copies)
            for i, v in enumerate(finals(merged, self.funcs)):
                values[e[merged["e"]], i] = v
        filled = ~full
        if filled.any():
            if self.fill == "null":
                pass
            elif self.fill == "ffill":
                source = pd.Series(np.where(full, np.arange(m_out), np.nan)).groupby(o_slot).ffill().to_numpy()
                copied = filled & ~np.isnan(source)
                values[copied] = values[source[copied].astype(np.int64)]
                from_state = filled & np.isnan(source)
                values[from_state] = per_key["last_out"][o_slot[from_state]]
            else:
                values[filled] = float(self.fill)
        last_rows = pd.Series(np.arange(m_out)).groupby(o_slot).last()
        per_key["last_out"][last_rows.index.to_numpy(np.int64)] = values[last_rows.to_numpy(np.int64)]
        k = len(self.layout.first)
        d = np.floor_divide(o_pane, k)
        offsets = (self.layout.out_start if self.use_window_start_time else self.layout.out_end)[o_pane - d * k]
        out_times = d * DAY_US + offsets
        spec = self.spec
        schema = spec.input_schema.to_arrow()
        arrays: list[pa.Array] = [to_arrow(out_times.astype(np.float64), "timestamp")]
        for i, key in enumerate(spec.key_column):
            arrays.append(keys.column(o_slot, i, len(spec.key_column), schema.field(key).type))
        arrays.extend(self.metrics.results([values[:, i] for i in range(a)], m_out))
        arrays.append(pa.array(seq[o_trig], type=pa.int64()))
        out = pa.table(arrays, schema=self._arrow_schema())
        if spec.key_column:
            # windows closed by one row: by time, then key (slot numbers depend on purges, keys do not)
            order = pc.sort_indices(out, sort_keys=[(SEQ, "ascending"), (self.out_schema.names[0], "ascending")]
                                            + [(key, "ascending") for key in spec.key_column])
            out = out.take(order)
        return out

    @staticmethod
    def _emissions_of(emitted: np.ndarray, o_slot: np.ndarray, o_pane: np.ndarray, slot: np.ndarray,
                      window: np.ndarray, epoch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The emissions ``emitted`` (output indices) ordered by window, then output index: ``e``; for each
        partial (of key ``slot``, counting for ``window``, its rows taken when ``epoch`` windows had been
        emitted) the position of the first of them it counts for (-1: none); for each position, the last
        position of its window's emissions."""
        n_emitted = len(emitted)
        windows = _window_keys(np.concatenate([o_slot[emitted], slot]), np.concatenate([o_pane[emitted], window]))
        order = np.argsort(windows[:n_emitted], kind="stable")  # ``emitted`` ascends: by window, then output index
        e, sorted_windows = emitted[order], windows[:n_emitted][order]
        first = np.append(True, sorted_windows[1:] != sorted_windows[:-1])
        uniques, group = sorted_windows[first], np.cumsum(first) - 1
        width = np.int64(len(o_slot) + 2)
        ends = np.searchsorted(group, group, side="right") - 1
        w = np.searchsorted(uniques, windows[n_emitted:])
        w[uniques[np.minimum(w, len(uniques) - 1)] != windows[n_emitted:]] = -1
        j = np.searchsorted(group * width + e + 1, w * width + epoch + 1, side="left")
        found = (w >= 0) & (j < len(e))
        found[found] &= group[j[found]] == w[found]
        return e, np.where(found, j, -1), ends

    def _compact(self, state: dict[str, Any]) -> dict[str, Any]:
        """Drop keys in their initial state (restarted by a purge): the same as keys never seen."""
        fresh = (state["closed"] == NONE) & (state["last_emit"] == NONE) & (state["pend_n"] == 0)
        if not fresh.any():
            return state
        keep = ~fresh
        remap = np.cumsum(keep) - 1
        panes = {**state["panes"], "slot": remap[state["panes"]["slot"]]}
        return {**state, "keys": [k for k, kept in zip(state["keys"], keep, strict=True) if kept],
                **{name: state[name][keep] for name in ("closed", "last_emit", "last_day", "mark", "pend", "pend_n",
                                                 "last_out")},
                "panes": panes}


def _with_counts(panes: Partials, funcs: Sequence[str]) -> Partials:
    """Partials written before the aggregates library (:mod:`headwater.aggregates.rules`) kept a float count
    "y{i}" of non-NULL values for every aggregate, and first/last no arrival of their own (the partial's
    "fseq"/"lseq" served): now the summaries' "n{i}" and, for first/last, the rows and that arrival in "z{i}"."""
    if "y0" not in panes:
        return panes
    out = {name: a for name, a in panes.items() if not (name[0] == "y" and name[1:].isdigit())}
    for i, func in enumerate(funcs):
        out[f"n{i}"] = panes[f"y{i}"].astype(np.int64)
        if func in ("first", "last"):
            out[f"n{i}"] = panes["rows"].astype(np.int64)
            out[f"z{i}"] = panes["fseq" if func == "first" else "lseq"].astype(np.float64)
    return out
