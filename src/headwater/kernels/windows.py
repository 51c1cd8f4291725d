"""Incremental per-key event-time window aggregation (DolphinDB ``timeSeriesEngine`` semantics).

One :class:`WindowAggregator` processes micro-batches holding rows of many keys at once.
All state lives in a dict of plain numpy arrays whose first axis is the key slot, so it
pickles, checkpoints and grows cheaply; the output is identical for any split of the
input into batches because rows are processed one by one in arrival order and every
decision depends only on the carried state.

Semantics (reference: orca-semantics.md, part C.1):

* Windows of a key start at ``left0 + k * step`` and last ``window``, with
  ``left0 = floor(x / align) * align + step - window`` where ``x`` is the key's first
  row time; the key's first window is the first one that contains ``x``.
* ``closed="left"`` windows are ``[start, end)``, ``closed="right"`` windows are
  ``(start, end]``; for the latter ``x - 1`` is aligned, so a first row exactly on a
  boundary opens the window that ends there (as it would with ``closed="left"`` one
  unit later).
* A window is emitted by the first row of the same key with time ``>= end +
  accepted_delay`` (``> end + accepted_delay`` for ``closed="right"``); that row is not
  part of it. A key without later rows keeps its last window open forever.
* A row is dropped when every window containing it has already been emitted (this
  includes rows earlier than the key's first window); otherwise it counts for the
  windows still open, so rows late by less than ``accepted_delay`` are kept.
* Sliding windows (``window = m * step``) keep ``m + ceil(accepted_delay / step)``
  pane accumulators per key and merge the ``m`` panes of a window when it is emitted.
  No raw rows are stored.
* ``first``/``last`` follow arrival order (as DolphinDB's buffered rows do), also across
  panes, and include NULLs; ``first_not_null``/``last_not_null`` skip them. All other
  aggregates skip NULLs: ``sum``/``avg``/``max``/... of a window without non-NULL
  values is NULL, ``count`` is 0. ``std``/``var`` are sample statistics (NULL below two
  values), ``stdp``/``varp`` population ones.
* Empty windows between the key's first window and the trigger row are skipped with
  ``fill="none"``; otherwise they are emitted with every aggregate NULL (``"null"``,
  ``count`` included, as DolphinDB does), with the values of the previous emitted
  window (``"ffill"``), or with the given number.
* Output order: by trigger row; windows emitted by one row in ascending time.

Example:
    >>> import numpy as np
    >>> agg = WindowAggregator(WindowSpec(window=60, step=60), ["sum", "count"])
    >>> state = agg.init_state()
    >>> state, out = agg.run(state, np.array([0, 0, 0]), 1, np.array([10, 40, 61]),
    ...                      [np.array([1.0, 2.0, 4.0]), np.array([1.0, np.nan, 4.0])])
    >>> out.times.tolist(), out.values[0].tolist(), out.values[1].tolist(), out.trigger_rows.tolist()
    ([60], [3.0], [1.0], [2])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numba
import numpy as np

from headwater.aggregates.rules import CATALOG, FIRST, FIRST_NOT, LAST, LAST_NOT, add, finish, merge
from headwater.errors import ExecutionError, GraphDefinitionError
from headwater.kernel_inputs import read_only

AGGREGATES: tuple[str, ...] = tuple(name for name, agg in CATALOG.items() if agg.mergeable)
_CODES: dict[str, int] = {name: CATALOG[name].code for name in AGGREGATES}

FILL_MODES: tuple[str, ...] = ("none", "null", "ffill")
MAX_OUTPUT_WINDOWS = 50_000_000  # per micro-batch: a far-future time with fill would otherwise exhaust memory
MAX_PANES = 100_000  # step-long panes kept per key (window / step, plus those an accepted delay reaches)
_FILL_NONE, _FILL_NULL, _FILL_FFILL, _FILL_VALUE = 0, 1, 2, 3


@dataclass(frozen=True)
class WindowSpec:
    """Describe tumbling (``window == step``) or sliding (``window = m * step``) event-time windows.

    All durations are integers in the unit of the row times (Headwater passes microseconds).

    Example:
        >>> WindowSpec(window=120_000_000, step=60_000_000).panes
        2
        >>> WindowSpec(window=90, step=60)
        Traceback (most recent call last):
        ...
        headwater.errors.GraphDefinitionError: window spec: window 90 must be a multiple of step 60; e.g. window=120, step=60
    """

    window: int
    step: int
    closed: str = "left"
    accepted_delay: int = 0
    use_window_start_time: bool = False
    fill: str | float = "none"
    align: int | None = None
    force_trigger: int | None = None
    update: int | None = None
    sub_window: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        for name in ("window", "step"):
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise GraphDefinitionError(
                    f"window spec: {name} must be a positive integer, got {value!r}; e.g. {name}=60_000_000"
                )
        if self.window % self.step:
            raise GraphDefinitionError(
                f"window spec: window {self.window} must be a multiple of step {self.step}; "
                f"e.g. window={2 * self.step}, step={self.step}"
            )
        if self.closed not in ("left", "right"):
            raise GraphDefinitionError(
                f"window spec: closed must be one of 'left', 'right', got {self.closed!r}"
            )
        if not _is_int(self.accepted_delay) or self.accepted_delay < 0:
            raise GraphDefinitionError(
                f"window spec: accepted_delay must be a non-negative integer, got {self.accepted_delay!r}"
            )
        if self.buffered_panes > MAX_PANES:
            raise GraphDefinitionError(
                f"window spec: the window (and accepted delay) span {self.buffered_panes:,} steps, over the limit "
                f"of {MAX_PANES:,}: each key keeps every aggregate's partial result per step; use a longer step"
            )
        if self.align is not None and (not _is_int(self.align) or self.align <= 0):
            raise GraphDefinitionError(
                f"window spec: align must be a positive integer or None (= step), got {self.align!r}"
            )
        self._check_triggers()
        if isinstance(self.fill, str):
            if self.fill not in FILL_MODES:
                raise GraphDefinitionError(
                    f"window spec: fill must be one of {', '.join(map(repr, FILL_MODES))} or a number, "
                    f"got {self.fill!r}"
                )
        elif isinstance(self.fill, bool) or not isinstance(self.fill, int | float | np.integer | np.floating):
            raise GraphDefinitionError(
                f"window spec: fill must be one of {', '.join(map(repr, FILL_MODES))} or a number, "
                f"got {self.fill!r} of type {type(self.fill).__name__}"
            )

    def _check_triggers(self) -> None:
        for name in ("force_trigger", "update"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise GraphDefinitionError(f"window spec: {name} must be a non-negative integer or None, got {value!r}")
        if self.force_trigger is not None and (self.update is not None or self.accepted_delay):
            raise GraphDefinitionError("window spec: force_trigger excludes update and accepted_delay (Orca's rule)")
        if self.update is not None:
            if self.accepted_delay:
                raise GraphDefinitionError("window spec: update excludes accepted_delay (Orca's rule)")
            if self.window != self.step:
                raise GraphDefinitionError(
                    f"window spec: update needs tumbling windows (window == step), got window {self.window}, "
                    f"step {self.step}"
                )
            if self.update and self.step % self.update:
                raise GraphDefinitionError(f"window spec: update {self.update} must divide step {self.step}")
        if self.sub_window is not None:
            lo, hi = self.sub_window
            if not (_is_int(lo) and _is_int(hi) and 0 <= lo < hi <= self.window):
                raise GraphDefinitionError(
                    f"window spec: sub_window must be (lo, hi) with 0 <= lo < hi <= window {self.window}, "
                    f"got {self.sub_window!r}"
                )
            if self.window != self.step or self.update:
                raise GraphDefinitionError(
                    "window spec: sub_window needs tumbling windows (window == step) and no update > 0"
                )

    @property
    def close_offset(self) -> int:
        """Where a window closes, from its start: its end, or the end of its sub-window."""
        return self.window if self.sub_window is None else self.sub_window[1]

    @property
    def panes(self) -> int:
        """Number of ``step``-long panes in one window."""
        return self.window // self.step

    @property
    def buffered_panes(self) -> int:
        """Pane accumulators kept per key: one window plus the panes an accepted delay can reach."""
        return self.panes + -(-self.accepted_delay // self.step)

    @property
    def alignment(self) -> int:
        """Alignment size of the first window (``align``, or ``step`` when unset)."""
        return self.step if self.align is None else self.align


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclass
class WindowOutput:
    """Windows emitted by one :meth:`WindowAggregator.run` call, in emission order."""

    slots: np.ndarray
    times: np.ndarray
    values: list[np.ndarray] = field(default_factory=list)
    trigger_rows: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    # a filled window (no rows of its own); ``final`` is False for an update of a window still open
    empty: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.bool_))
    final: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.bool_))
    # per input row of the run: dropped as late (every window holding it had been emitted)
    dropped: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.bool_))

    def __len__(self) -> int:
        return len(self.slots)


class WindowAggregator:
    """Aggregate rows of many keys into per-key event-time windows, incrementally.

    ``aggregates[i]`` is applied to ``args[i]`` of :meth:`run`. The input state is never
    modified, so a failed micro-batch can be retried with the previous state.

    Example:
        >>> import numpy as np
        >>> agg = WindowAggregator(WindowSpec(window=60, step=60, accepted_delay=5), ["sum"])
        >>> state = agg.init_state()
        >>> rows = [(10, 10.0), (40, 20.0), (62, 1.0), (55, 30.0), (66, 2.0)]
        >>> t, v = (np.array(c) for c in zip(*rows))
        >>> state, out = agg.run(state, np.zeros(5, dtype=np.int64), 1, t, [v])
        >>> out.times.tolist(), out.values[0].tolist(), out.trigger_rows.tolist()
        ([60], [60.0], [4])
    """

    def __init__(self, spec: WindowSpec, aggregates: Sequence[str]) -> None:
        if isinstance(aggregates, str):
            aggregates = [aggregates]
        unknown = [a for a in aggregates if a not in _CODES]
        if unknown:
            raise GraphDefinitionError(
                f"window aggregator: unknown aggregate(s) {', '.join(map(repr, unknown))}; "
                f"expected one of {', '.join(AGGREGATES)}"
            )
        self.spec = spec
        self.aggregates: tuple[str, ...] = tuple(aggregates)
        self._codes = np.array([_CODES[a] for a in self.aggregates], dtype=np.int64)
        if isinstance(spec.fill, str):
            self._fill_mode = {"none": _FILL_NONE, "null": _FILL_NULL, "ffill": _FILL_FFILL}[spec.fill]
            self._fill_value = math.nan
        else:
            self._fill_mode = _FILL_VALUE
            self._fill_value = float(spec.fill)

    def __repr__(self) -> str:
        return f"WindowAggregator({self.spec!r}, {list(self.aggregates)!r})"

    def init_state(self) -> dict[str, np.ndarray]:
        """Return the state of zero keys."""
        return self._empty_state(0)

    def _empty_state(self, n_keys: int) -> dict[str, np.ndarray]:
        # pane j of a key covers [wstart + j * step, wstart + (j + 1) * step)
        r, a = self.spec.buffered_panes, len(self.aggregates)
        return {
            "init": np.zeros(n_keys, dtype=np.int8),
            "wstart": np.zeros(n_keys, dtype=np.int64),  # start of the next window to emit
            "seq": np.zeros(n_keys, dtype=np.int64),  # arrival counter: orders first/last across panes
            "pane_rows": np.zeros((n_keys, r), dtype=np.int64),
            # each aggregate's summary per pane (headwater.aggregates.rules): x and z, then n
            "acc_f": np.zeros((n_keys, a, 2, r), dtype=np.float64),
            "acc_i": np.zeros((n_keys, a, r), dtype=np.int64),
            "summaries": np.ones(n_keys, dtype=np.int8),  # marks the summaries' layout (see _old_summaries)
            "last_out": np.full((n_keys, a), np.nan, dtype=np.float64),
            "pending": np.zeros(n_keys, dtype=np.int8),  # rows added since the window was last emitted
            "mark": np.zeros(n_keys, dtype=np.int64),  # update period of the last row added
            "late": np.zeros(n_keys, dtype=np.int64),  # rows dropped: every window holding them was emitted
        }

    def run(
        self,
        state: dict[str, np.ndarray],
        slots: np.ndarray,
        n_keys: int,
        times: np.ndarray,
        args: list[np.ndarray],
    ) -> tuple[dict[str, np.ndarray], WindowOutput]:
        """Process one micro-batch and return the new state and the windows it closed.

        Args:
            state: state returned by :meth:`init_state` or a previous :meth:`run`; not modified.
            slots: int64 key slot of each row, in ``[0, n_keys)``.
            n_keys: number of key slots known so far; the state grows to it (never shrinks).
            times: int64 event time of each row.
            args: one float64 array per aggregate (NaN = NULL), each as long as ``times``.
        """
        slots = read_only(slots, np.int64)
        times = read_only(times, np.int64)
        n = len(times)
        if len(args) != len(self.aggregates):
            raise ValueError(
                f"{self!r}.run: got {len(args)} argument arrays for {len(self.aggregates)} aggregates; "
                "pass one array per aggregate"
            )
        if len(slots) != n or any(len(a) != n for a in args):
            raise ValueError(
                f"{self!r}.run: slots, times and args must have one entry per row; got lengths "
                f"slots={len(slots)}, times={n}, args={[len(a) for a in args]}"
            )
        if n and (slots.min() < 0 or slots.max() >= n_keys):
            raise ValueError(
                f"{self!r}.run: slots must lie in [0, n_keys={n_keys}), got range "
                f"[{slots.min()}, {slots.max()}]; grow n_keys when new keys arrive"
            )
        x = np.empty((len(args), n), dtype=np.float64)
        for i, a in enumerate(args):
            x[i] = a
        new = self._grown_copy(state, n_keys)
        spec = self.spec
        n_aggs = len(self.aggregates)
        cap = n + 16
        # the output buffers: each window's key slot, time label, trigger row, values and (empty, final) flags
        outs: tuple[np.ndarray, ...] = (
            np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64),
            np.empty((cap, n_aggs), dtype=np.float64), np.empty((cap, 2), dtype=np.bool_),
        )  # fmt: skip
        close_off, force, update = spec.close_offset, spec.force_trigger, spec.update
        sub_lo = 0 if spec.sub_window is None else spec.sub_window[0]
        dropped = np.zeros(n, dtype=np.bool_)
        row, n_out = 0, 0
        while True:
            row, n_out = _run_kernel(
                np.int64(row),
                np.int64(n_out),
                slots,
                times,
                x,
                self._codes,
                np.int64(spec.window),
                np.int64(spec.step),
                np.int64(spec.accepted_delay),
                np.int64(spec.alignment),
                np.int64(spec.panes),
                np.int64(self._fill_mode),
                np.float64(self._fill_value),
                bool(spec.use_window_start_time),
                np.int64(1 if spec.closed == "right" else 0),
                np.int64(close_off),
                np.int64(sub_lo),
                np.int64(-1 if force is None else force),
                np.int64(-1 if update is None else update),
                np.int64(self._force_due(new) if force is not None else 0),
                new["init"],
                new["wstart"],
                new["seq"],
                new["pane_rows"],
                new["acc_f"],
                new["acc_i"],
                new["last_out"],
                new["pending"],
                new["mark"],
                new["late"],
                dropped,
                outs,
            )
            if row == n:
                break
            # output buffers full (sliding windows or fill can emit several windows per row): grow, resume
            s, t = int(slots[row]), int(times[row])
            if cap >= MAX_OUTPUT_WINDOWS or self._windows_due(new, s, t) > MAX_OUTPUT_WINDOWS:
                raise ExecutionError(
                    f"window aggregator: the row at {t} (key slot {s}) would emit more than {MAX_OUTPUT_WINDOWS:,} "
                    "windows in one micro-batch (a time far past its key's previous rows, with fill or sliding "
                    "windows); correct the row's time, or use fill='none'"
                )
            grown = min(cap * 2, MAX_OUTPUT_WINDOWS)
            outs = tuple(np.concatenate([a, np.empty((grown - cap, *a.shape[1:]), dtype=a.dtype)]) for a in outs)
            cap = grown
        o_slot, o_time, o_trig, o_vals, o_flags = outs
        out = WindowOutput(
            slots=o_slot[:n_out].copy(),
            times=o_time[:n_out].copy(),
            values=[o_vals[:n_out, i].copy() for i in range(n_aggs)],
            trigger_rows=o_trig[:n_out].copy(),
            empty=o_flags[:n_out, 0].copy(),
            final=o_flags[:n_out, 1].copy(),
            dropped=dropped,
        )
        if update == 0 and n:
            out = _concat_outputs(out, self._flush_pending(new, trigger_row=n - 1))
        return new, out

    def keep_keys(self, state: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
        """The state of the keys where ``keep`` is True, renumbered in order (key purge)."""
        return {name: array[keep] for name, array in self._grown_copy(state, len(state["init"])).items()}

    def _windows_due(self, state: dict[str, np.ndarray], slot: int, time: int) -> int:
        """How many windows of key ``slot`` a row at ``time`` closes when every window is emitted (a fill); 0
        without a fill, where a run of empty windows is skipped at once. Checked before the output buffers grow,
        so that a time far past its key's rows fails at once instead of after growing them to the limit."""
        if self._fill_mode == _FILL_NONE or state["init"][slot] != 1:
            return 0
        first = int(state["wstart"][slot]) + self.spec.close_offset + self.spec.accepted_delay
        return 0 if time < first else (time - first) // self.spec.step + 1

    def _force_due(self, state: dict[str, np.ndarray]) -> int:
        """The earliest close point of any key's next window: a forced trigger closes it, empty or not."""
        live = state["init"] == 1
        if not live.any():
            return int(np.iinfo(np.int64).max)
        return int(state["wstart"][live].min()) + self.spec.close_offset

    def _flush_pending(self, state: dict[str, np.ndarray], *, trigger_row: int) -> WindowOutput:
        """``update == 0``: every key with rows not yet emitted emits its open window, at the batch's end."""
        keys = np.flatnonzero(state["pending"])
        vals = np.empty((len(keys), len(self.aggregates)), dtype=np.float64)
        for o, s in enumerate(keys):
            _merge_window(s, self.spec.panes, self._codes, state["acc_f"], state["acc_i"], vals, o)
        state["pending"][keys] = 0
        wstart = state["wstart"][keys]
        return WindowOutput(
            slots=keys.astype(np.int64),
            times=wstart if self.spec.use_window_start_time else wstart + self.spec.window,
            values=[vals[:, i].copy() for i in range(len(self.aggregates))],
            trigger_rows=np.full(len(keys), trigger_row, dtype=np.int64),
            empty=np.zeros(len(keys), dtype=np.bool_),
            final=np.zeros(len(keys), dtype=np.bool_),
        )

    def _grown_copy(self, state: dict[str, np.ndarray], n_keys: int) -> dict[str, np.ndarray]:
        template = self._empty_state(0)
        have = len(state["init"]) if "init" in state else 0
        if "summaries" not in state and "acc_i" in state:
            state = _old_summaries(state, self._codes)
        state = {**{name: np.zeros((have, *a.shape[1:]), a.dtype) for name, a in template.items()
                    if name in _ADDED_LATER}, **state}
        missing = set(template) - set(state)
        if missing:
            raise ValueError(
                f"{self!r}.run: state lacks {sorted(missing)}; pass the dict returned by init_state() or run()"
            )
        if n_keys < have:
            raise ValueError(f"{self!r}.run: n_keys={n_keys} is smaller than the {have} keys in the state")
        for name, empty in template.items():
            if state[name].shape[1:] != empty.shape[1:] or len(state[name]) != have:
                raise ValueError(
                    f"{self!r}.run: state[{name!r}] has shape {state[name].shape}, expected "
                    f"({have}, {', '.join(map(str, empty.shape[1:]))}); was it made by another spec?"
                )
        extra = self._empty_state(n_keys - have)
        return {name: np.concatenate([state[name], extra[name]]) for name in template}


# state written by an older version lacks these; their zero value is right for it
_ADDED_LATER = frozenset({"pending", "mark", "late"})


def _old_summaries(state: dict[str, np.ndarray], codes: np.ndarray) -> dict[str, np.ndarray]:
    """State written before the panes held the aggregates' shared summaries: there, first/last kept neither
    their count nor their arrival (``pane_seq`` did, per pane) and first_not/last_not their arrival + 1 as count."""
    acc_f, acc_i = state["acc_f"].copy(), state["acc_i"].copy()
    for a, code in enumerate(codes):
        if code in (FIRST, LAST):
            acc_i[:, a] = state["pane_rows"]
            acc_f[:, a, 1] = state["pane_seq"][:, 0 if code == FIRST else 1]
        elif code in (FIRST_NOT, LAST_NOT):
            acc_f[:, a, 1] = np.maximum(acc_i[:, a] - 1, 0)
            acc_i[:, a] = acc_i[:, a] > 0
    return {**state, "acc_f": acc_f, "acc_i": acc_i, "summaries": np.ones(len(state["init"]), np.int8)}


def _concat_outputs(a: WindowOutput, b: WindowOutput) -> WindowOutput:
    return WindowOutput(
        slots=np.concatenate([a.slots, b.slots]),
        times=np.concatenate([a.times, b.times]),
        values=[np.concatenate([x, y]) for x, y in zip(a.values, b.values, strict=True)],
        trigger_rows=np.concatenate([a.trigger_rows, b.trigger_rows]),
        empty=np.concatenate([a.empty, b.empty]),
        final=np.concatenate([a.final, b.final]),
        dropped=a.dropped,  # b: windows flushed at the batch's end, no rows of its own
    )


@numba.njit(cache=True, inline="always", error_model="numpy")
def _retire_panes(s, k, pane_rows, acc_f, acc_i):  # type: ignore[no-untyped-def]
    """Drop the first ``k`` panes of key ``s``: pane j takes the content of pane j + k."""
    # a shift of contiguous rows beats a ring buffer: merges become plain, vectorisable loops
    hi = pane_rows.shape[1] - 1
    while hi >= 0 and pane_rows[s, hi] == 0:
        hi -= 1
    if hi < 0:
        return  # all panes are empty (and zero) already
    keep = max(hi + 1 - k, 0)
    for j in range(keep):
        pane_rows[s, j] = pane_rows[s, j + k]
    for j in range(keep, hi + 1):
        pane_rows[s, j] = 0
    for a in range(acc_i.shape[1]):
        for j in range(keep):
            acc_f[s, a, 0, j] = acc_f[s, a, 0, j + k]
            acc_f[s, a, 1, j] = acc_f[s, a, 1, j + k]
            acc_i[s, a, j] = acc_i[s, a, j + k]
        for j in range(keep, hi + 1):
            acc_f[s, a, 0, j] = 0.0
            acc_f[s, a, 1, j] = 0.0
            acc_i[s, a, j] = 0


@numba.njit(cache=True, inline="always", error_model="numpy")
def _add_row(s, r, q, x, i, codes, pane_rows, acc_f, acc_i):  # type: ignore[no-untyped-def]
    """Add row ``i`` (arrival ``q``) to pane ``r`` of key ``s``."""
    pane_rows[s, r] += 1
    for a in range(codes.shape[0]):
        acc_f[s, a, 0, r], acc_i[s, a, r], acc_f[s, a, 1, r] = add(
            codes[a], acc_f[s, a, 0, r], acc_i[s, a, r], acc_f[s, a, 1, r], x[a, i], q)


@numba.njit(cache=True, inline="always", error_model="numpy")
def _merge_window(s, m, codes, acc_f, acc_i, out, o):  # type: ignore[no-untyped-def]
    """Write the aggregates of the window made of panes 0..m-1 of key ``s`` to ``out[o]``."""
    for a in range(codes.shape[0]):
        x, n, z = 0.0, 0, 0.0
        for j in range(m):
            x, n, z = merge(codes[a], x, n, z, acc_f[s, a, 0, j], acc_i[s, a, j], acc_f[s, a, 1, j])
        out[o, a] = finish(codes[a], x, n, z)


@numba.njit(cache=True, inline="always")
def _emit(outs, no, s, label, i, empty, final):  # type: ignore[no-untyped-def]
    """Write output ``no``'s key slot ``s``, time ``label``, trigger row ``i`` and flags (its values are in place)."""
    o_slot, o_time, o_trig, _, o_flags = outs
    o_slot[no] = s
    o_time[no] = label
    o_trig[no] = i
    o_flags[no, 0] = empty
    o_flags[no, 1] = final


@numba.njit(cache=True, inline="always", error_model="numpy")
def _close(  # type: ignore[no-untyped-def]
    s, n_close, i, no, codes, step, m, fill_mode, fill_value, label_off,
    wstart, pane_rows, acc_f, acc_i, last_out, pending, outs,
):
    """Emit the next ``n_close`` windows of key ``s`` (trigger row ``i``); return the outputs written and
    whether every window went out (False: the output buffers are full; the state holds what was emitted)."""
    o_vals = outs[3]
    n_aggs = codes.shape[0]
    n_panes = pane_rows.shape[1]
    done = 0
    while done < n_close:
        rows = 0
        for j in range(m):
            rows += pane_rows[s, j]
        if rows == 0 and fill_mode == _FILL_NONE:
            # jump over the whole run of empty windows at once (a key may go quiet for days)
            adv = n_close - done
            for j in range(m, n_panes):
                if pane_rows[s, j] > 0:
                    adv = min(adv, j - m + 1)
                    break
            _retire_panes(s, adv, pane_rows, acc_f, acc_i)
            wstart[s] += adv * step
            done += adv
            continue
        if no == o_vals.shape[0]:
            return no, False
        if rows > 0:
            _merge_window(s, m, codes, acc_f, acc_i, o_vals, no)
        else:
            for a in range(n_aggs):
                if fill_mode == _FILL_NULL:
                    o_vals[no, a] = np.nan
                elif fill_mode == _FILL_FFILL:
                    o_vals[no, a] = last_out[s, a]
                else:
                    o_vals[no, a] = fill_value
        for a in range(n_aggs):
            last_out[s, a] = o_vals[no, a]
        _emit(outs, no, s, wstart[s] + label_off, i, rows == 0, True)
        no += 1
        pending[s] = 0
        _retire_panes(s, 1, pane_rows, acc_f, acc_i)
        wstart[s] += step
        done += 1
    return no, True


@numba.njit(cache=True, error_model="numpy")
def _run_kernel(  # type: ignore[no-untyped-def]
    row,
    n_out,
    slots,
    times,
    x,
    codes,
    window,
    step,
    delay,
    align,
    m,
    fill_mode,
    fill_value,
    use_start,
    shift,
    close_off,
    sub_lo,
    force,
    update,
    due,
    init,
    wstart,
    seq,
    pane_rows,
    acc_f,
    acc_i,
    last_out,
    pending,
    mark,
    late,
    dropped,
    outs,
):
    """Process rows from ``row`` on; return where it stopped (a full output buffer) and the outputs written.

    Stopping between two windows of one row is safe: resuming recomputes the row's pending
    windows from the state, which already reflects the emitted ones. ``force``/``update`` < 0 are off;
    ``due`` is a lower bound of the keys' next close points: a forced trigger closes empty windows too, so a
    key's rows for them are dropped as late whichever key's row came first.
    """
    n = slots.shape[0]
    n_keys = init.shape[0]
    n_panes = pane_rows.shape[1]
    label_off = 0 if use_start else window
    no = n_out
    o_vals = outs[3]
    for i in range(row, n):
        s = slots[i]
        if force >= 0 and times[i] - force >= due:
            # a row of any key forces the other keys' windows that closed ``force`` before it
            limit = times[i] - force
            due = np.iinfo(np.int64).max
            for k in range(n_keys):
                if init[k] == 0:
                    continue
                if k != s and limit >= wstart[k] + close_off:
                    no, ok = _close(k, (limit - close_off - wstart[k]) // step + 1, i, no, codes, step, m,
                                    fill_mode, fill_value, label_off, wstart, pane_rows, acc_f, acc_i,
                                    last_out, pending, outs)
                    if not ok:
                        return i, no
                due = min(due, wstart[k] + close_off)
        # (start, end] over t is [start, end) over t - 1, with the same labels
        t = times[i] - shift
        if init[s] == 0:
            left0 = (t // align) * align + step - window
            first_pane = (t - left0) // step
            wstart[s] = left0 + (first_pane - m + 1) * step
            init[s] = 1
            if force >= 0:
                due = min(due, wstart[s] + close_off)
        if t >= wstart[s] + close_off + delay:
            n_close = (t - delay - close_off - wstart[s]) // step + 1
            no, ok = _close(s, n_close, i, no, codes, step, m, fill_mode, fill_value, label_off, wstart,
                            pane_rows, acc_f, acc_i, last_out, pending, outs)
            if not ok:
                return i, no
        j = (t - wstart[s]) // step
        if update > 0 and pending[s] == 1 and j >= 0 and (t - wstart[s]) // update > mark[s]:
            # emit on update: the open window over the rows before this one, as it enters a new period
            if no == o_vals.shape[0]:
                return i, no
            _merge_window(s, m, codes, acc_f, acc_i, o_vals, no)
            _emit(outs, no, s, wstart[s] + label_off, i, False, False)
            no += 1
            pending[s] = 0
        q = seq[s]
        seq[s] = q + 1
        if j < 0:
            late[s] += 1  # every window holding this row was already emitted
            dropped[i] = True
            continue
        if j >= n_panes:  # cannot happen (the row would have closed that window); guards the raw writes
            raise RuntimeError("window aggregator: pane index out of range")
        if close_off < window or sub_lo > 0:
            offset = t - wstart[s] - j * step
            if offset < sub_lo or offset >= close_off:
                continue  # outside the sub-window
        _add_row(s, j, q, x, i, codes, pane_rows, acc_f, acc_i)
        if update >= 0:
            pending[s] = 1
            if update > 0:
                mark[s] = (t - wstart[s]) // update
    return n, no
