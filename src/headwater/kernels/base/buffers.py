"""Per-key buffers that widen on demand, for operators whose state grows with the data.

Time windows, TopN and range counts keep a variable number of rows per key. Their
kernels take a start row and return the row at which they stopped because a key's
buffer was full while it may still grow; :class:`BufferedOp` then widens every
buffer (doubling, up to ``max_rows``) and calls again from that row. Re-running a
row from its start is harmless: everything a kernel did for that row before
stopping (evicting expired rows) is idempotent.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numba import njit

from headwater.kernels.base.checks import MAX_WINDOW
from headwater.kernels.base.operators import Field, State, StateOp, check_batch, f64, grown_copy, i64


class BufferArray(NamedTuple):
    """One state array: ``kind`` says how its second axis behaves."""

    dtype: type
    fill: Any = 0.0
    kind: str = "key"  # key: one value per key | cols: fixed width | ring / deque / prefix: widens
    width: int = 0  # for kind "cols"


_GROWING = ("ring", "deque", "prefix")


class BufferedOp(StateOp):
    """An operator whose per-key buffers widen on demand, up to ``max_rows`` rows.

    Kernels stop at the row whose key has a full buffer; ``run`` widens every
    buffer (doubling, capped at ``max_rows``) and resumes at that row.
    """

    max_rows: ClassVar[int] = MAX_WINDOW
    initial_rows: ClassVar[int] = 8

    @abc.abstractmethod
    def _layout(self) -> dict[str, BufferArray]:
        """Name, dtype, initial value and kind of every state array."""

    @abc.abstractmethod
    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        """Run the kernel from row ``i0``; return the row it stopped at (``len(slots)`` when done)."""

    def _first_width(self) -> int:
        return min(self.initial_rows, self._max_width())

    def _max_width(self) -> int:
        return self.max_rows

    def init_state(self) -> dict[str, np.ndarray]:
        width = self._first_width()
        return {name: np.empty((0, *_shape(a, width)), dtype=a.dtype) for name, a in self._layout().items()}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, cols = check_batch(self.name, self.n_args, slots, n_keys, args)
        layout = self._layout()
        st = grown_buffer_copy(self.name, layout, state, n_keys, self._width_of(state, layout))
        out = np.empty(slots_.shape[0])
        i = 0
        while True:
            i = self._step(st, slots_, cols, out, i)
            if i >= slots_.shape[0]:
                return st, [out]
            st = _widen(layout, st, min(2 * self._width_of(st, layout), self._max_width()))

    def _width_of(self, state: State, layout: dict[str, BufferArray]) -> int:
        for name, a in layout.items():
            if a.kind in _GROWING and name in state and state[name].ndim == 2:
                return int(state[name].shape[1])
        return self._first_width()


def _shape(a: BufferArray, width: int) -> tuple[int, ...]:
    if a.kind == "key":
        return ()
    return (a.width,) if a.kind == "cols" else (width,)


def grown_buffer_copy(func: str, layout: dict[str, BufferArray], state: State, n_keys: int, width: int) -> State:
    """:func:`.operators.grown_buffer_copy` of a buffered layout whose growing arrays are ``width`` wide."""
    fields = {name: Field(_shape(a, width), a.dtype, a.fill) for name, a in layout.items()}
    return grown_copy(func, fields, state, n_keys)


def _widen(layout: dict[str, BufferArray], st: State, width: int) -> State:
    out = dict(st)
    for name, a in layout.items():
        if a.kind not in _GROWING:
            continue
        old = st[name]
        new: np.ndarray = np.full((old.shape[0], width), a.fill, dtype=a.dtype)
        if a.kind == "ring":
            widen_ring(old, new, st["start"], st["count"])
        elif a.kind == "deque":
            widen_deque(old, new, st["dq_head"], st["dq_len"])
            out["dq_head"] = np.zeros_like(st["dq_head"])
        else:
            new[:, : old.shape[1]] = old
        out[name] = new
    return out


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
            new[k, j] = old[k, ring_slot(head[k] + j, c0)]


# ---------------------------------------------------------------- count-window rings
#
# The moving kernels keep each key's last ``window`` rows in ``ring[k, :window]``:
# ``n_rows[k]`` counts the key's rows so far, ``wpos[k]`` is the slot the next row
# goes to (the oldest row once the ring is full), and ``nobs[k]`` (where kept) counts
# the non-NULL values in the window.


def ring_layout(window: int) -> dict[str, Field]:
    """The state arrays of a count window of ``window`` rows: ``ring``, ``n_rows``, ``wpos`` and ``nobs``."""
    return {"ring": f64(shape=(window,)), "n_rows": i64(), "wpos": i64(), "nobs": i64()}


@njit(cache=True, inline="always")
def ring_slot(pos, size):  # pragma: no cover - numba
    """The slot of position ``pos`` (below ``2 * size``) in a ring of ``size`` slots."""
    return pos - size if pos >= size else pos


@njit(cache=True, inline="always")
def ring_advance(wpos, k, size):  # pragma: no cover - numba
    """Return key k's write slot in a ring of ``size`` slots and move it on by one (wrapping)."""
    pos = wpos[k]
    wpos[k] = pos + 1 if pos + 1 < size else 0
    return pos


@njit(cache=True, inline="always")
def ring_push(ring, n_rows, wpos, k, v, window):  # pragma: no cover - numba
    """Append ``v`` to key k's window of ``window`` rows.

    Returns ``(old, r, pos)``: the value leaving the window (NaN while the window is
    not full yet), the key's row count before this row and the slot ``v`` went to.
    """
    r = n_rows[k]
    pos = ring_advance(wpos, k, window)
    old = ring[k, pos] if r >= window else np.nan
    ring[k, pos] = v
    n_rows[k] = r + 1
    return old, r, pos


@njit(cache=True, inline="always")
def ring_push_count(ring, n_rows, wpos, nobs, k, v, window):  # pragma: no cover - numba
    """:func:`ring_push` that also keeps ``nobs[k]``, the number of non-NULL values in the window."""
    old, r, pos = ring_push(ring, n_rows, wpos, k, v, window)
    if old == old:
        nobs[k] -= 1
    if v == v:
        nobs[k] += 1
    return old, r, pos
