"""TopN state functions: an aggregate of the ``top`` rows ranked by ``s``, over a count window
(``m<agg>_top_n``), all rows so far (``cum<agg>_top_n``) or a time window (``tm<agg>_top_n``).

**mTopN** ``m<agg>_top_n(x, [y,] s, window, top, ascending=True, ties_method)``: in
the last ``window`` rows, rows with non-NULL ``s`` are stably sorted by ``s`` and
the first ``top`` are aggregated (NULL ``x`` among them are skipped). When more
rows tie for the last places than there are places, ``ties_method`` takes the
oldest, the latest or all of them. Rows with NULL ``s`` are ignored (DolphinDB
2.00.10+; older versions sorted them first). Output starts at the first row.
``cum<agg>_top_n`` does the same over all rows so far, keeping only the rows that
can still be picked; ``tm<agg>_top_n(t, x, [y,] s, window, top, ...)`` over the
time window of the tm-functions.

Example:
    >>> import numpy as np
    >>> op = CumTopN("cumsum_top_n", top=2)
    >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1,
    ...                    [np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 3.0, np.nan, 1.0])])
    >>> out.tolist()
    [1.0, 3.0, 3.0, 6.0]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
from numba import njit

from headwater.aggregates.rules import AVG, STD, STDP, SUM, VAR, VARP
from headwater.aggregates.values import non_null, over_values
from headwater.kernels.base.buffers import BufferArray, BufferedOp, grown_buffer_copy
from headwater.kernels.base.checks import (
    MAX_WINDOW,
    bad,
    check_bool,
    check_choice,
    check_int,
    check_name,
    window_units,
)
from headwater.kernels.base.numeric import buffer_moments
from headwater.kernels.base.operators import State, StateOp, StateOpSpec, check_batch

__all__ = ["SPECS", "CumTopN", "MovingTopN", "TimeTopN"]


# Aggregates over the rows a TopN window selects, and how ties for the last places are broken.
# (the one-column ones are the aggregates' own codes; the moments and pairs come after every one of those)
TOP_SUM, TOP_AVG, TOP_VAR, TOP_VARP, TOP_STD, TOP_STDP = SUM, AVG, VAR, VARP, STD, STDP
TOP_SKEW, TOP_KURT, TOP_CORR, TOP_COVAR, TOP_BETA, TOP_WSUM, TOP_COVARP = range(100, 107)
TIES_OLDEST, TIES_LATEST, TIES_ALL = 0, 1, 2


_TOP_AGGS: dict[str, int] = {
    "sum": TOP_SUM, "avg": TOP_AVG, "var": TOP_VAR, "varp": TOP_VARP, "std": TOP_STD,
    "stdp": TOP_STDP, "skew": TOP_SKEW, "kurtosis": TOP_KURT, "corr": TOP_CORR,
    "covar": TOP_COVAR, "covarp": TOP_COVARP, "beta": TOP_BETA, "wsum": TOP_WSUM,
}  # fmt: skip
_PAIR_AGGS = ("corr", "beta", "covar", "covarp", "wsum")
_ALL_AGGS = ("sum", "avg", "std", "stdp", "var", "varp", "skew", "kurtosis", *_PAIR_AGGS)
_TIES: dict[str, int] = {"oldest": TIES_OLDEST, "latest": TIES_LATEST, "all": TIES_ALL}


def _top_agg(name: str, prefix: str) -> str:
    return name[len(prefix) : -len("_top_n")]


@dataclass(frozen=True)
class MovingTopN(StateOp):
    """``m<agg>_top_n``: aggregate the first ``top`` of the last ``window`` rows ranked by ``s``.

    Aggregates: ``sum``, ``avg``, ``std``/``var`` (sample), ``stdp``/``varp``,
    ``skew``/``kurtosis`` (``biased=True``), and over ``(x, y)`` pairs ``corr``,
    ``covar``, ``covarp``, ``wsum`` and ``beta`` (``mbeta_top_n(x, y, s, ...)`` regresses ``x`` on
    ``y``, matching DolphinDB's documented outputs). ``ties_method`` defaults to
    ``'oldest'``, except ``'latest'`` for ``mskew_top_n``/``mkurtosis_top_n``
    (DolphinDB's defaults). Costs a sort of the window per row.

    Example:
        >>> import numpy as np
        >>> op = MovingTopN("msum_top_n", window=4, top=2)
        >>> x = np.arange(1, 8, dtype=np.float64)
        >>> s = np.array([0.3, 0.5, 0.1, 0.1, 0.5, 0.2, 0.4])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x, s])
        >>> out.tolist()
        [1.0, 3.0, 4.0, 7.0, 7.0, 7.0, 10.0]
    """

    name: str
    window: int
    top: int
    ascending: bool = True
    ties_method: str | None = None
    biased: bool = True
    n_args: int = field(init=False, repr=False, compare=False)

    _NAMES: ClassVar[tuple[str, ...]] = tuple(f"m{a}_top_n" for a in _ALL_AGGS)

    def __post_init__(self) -> None:
        check_name(type(self).__name__, self.name, self._NAMES)
        check_int(
            self.name, "window", self.window, 1, MAX_WINDOW, f"e.g. {self.name}(x, s, window=20, top=5)"
        )
        check_int(self.name, "top", self.top, 1, self.window, f"top must not exceed window={self.window}")
        _init_top(self, _top_agg(self.name, "m"), "oldest")

    def init_state(self) -> dict[str, np.ndarray]:
        w = self.window
        return {
            "x": np.empty((0, w)), "y": np.empty((0, w)), "s": np.empty((0, w)),
            "n_rows": np.empty(0, dtype=np.int64), "wpos": np.empty(0, dtype=np.int64),
        }  # fmt: skip

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, cols = check_batch(self.name, self.n_args, slots, n_keys, args)
        w = self.window
        layout = {
            "x": BufferArray(np.float64, math.nan, "cols", w), "y": BufferArray(np.float64, math.nan, "cols", w),
            "s": BufferArray(np.float64, math.nan, "cols", w), "n_rows": BufferArray(np.int64, 0), "wpos": BufferArray(np.int64, 0),
        }  # fmt: skip
        st = grown_buffer_copy(self.name, layout, state, n_keys, w)
        x, s = cols[0], cols[-1]
        y = cols[1] if self.n_args == 3 else x
        assert self.ties_method is not None
        out = moving_top_n(
            _TOP_AGGS[_top_agg(self.name, "m")], slots_, x, y, s, w, self.top, self.ascending,
            _TIES[self.ties_method], self.biased, st["x"], st["y"], st["s"], st["n_rows"], st["wpos"],
        )  # fmt: skip
        return st, [out]


def _init_top(op: Any, agg: str, default_ties: str) -> None:
    check_bool(op.name, "ascending", op.ascending)
    check_bool(op.name, "biased", op.biased)
    if agg not in ("skew", "kurtosis") and op.biased is not True:
        raise bad(
            op.name, "biased", op.biased, "no biased", "only the skew and kurtosis TopN functions take it"
        )
    if op.ties_method is None:
        object.__setattr__(op, "ties_method", "latest" if agg in ("skew", "kurtosis") else default_ties)
    check_choice(op.name, "ties_method", op.ties_method, _TIES)
    object.__setattr__(op, "n_args", 3 if agg in _PAIR_AGGS else 2)


@dataclass(frozen=True)
class CumTopN(BufferedOp):
    """``cum<agg>_top_n(x, [y,] s, top, ...)``: TopN over all rows so far, with the aggregates of mTopN.

    A row that is not among the first ``top`` can never be picked later, so a key
    keeps only the picked rows (``top`` of them; with ``ties_method='all'`` every
    row tied for the last place, up to ``MAX_WINDOW``). ``ties_method`` defaults to
    ``'latest'``; a row with NULL ``s`` outputs the previous result.

    Example:
        >>> import numpy as np
        >>> op = CumTopN("cumsum_top_n", top=3)
        >>> x = np.array([2, 1, 4, 3, 4, 3, 1.0])
        >>> s = np.array([5, 8, 1, 1, 1, 3, 1.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x, s])
        >>> out.tolist()
        [2.0, 3.0, 7.0, 9.0, 11.0, 11.0, 8.0]
    """

    name: str
    top: int
    ascending: bool = True
    ties_method: str | None = None
    biased: bool = True
    n_args: int = field(init=False, repr=False, compare=False)

    _NAMES: ClassVar[tuple[str, ...]] = tuple(f"cum{a}_top_n" for a in _ALL_AGGS)

    def __post_init__(self) -> None:
        check_name(type(self).__name__, self.name, self._NAMES)
        check_int(self.name, "top", self.top, 1, MAX_WINDOW, f"e.g. {self.name}(x, s, top=5)")
        _init_top(self, _top_agg(self.name, "cum"), "latest")

    def _first_width(self) -> int:
        return self.top + 1  # enough unless ties_method='all'

    def _max_width(self) -> int:
        return max(self.max_rows, self.top + 1)

    def _layout(self) -> dict[str, BufferArray]:
        nan = math.nan
        layout = {
            "s": BufferArray(np.float64, nan, "prefix"), "x": BufferArray(np.float64, nan, "prefix"),
            "length": BufferArray(np.int64, 0), "last": BufferArray(np.float64, nan),
        }  # fmt: skip
        if self.n_args == 3:
            layout["y"] = BufferArray(np.float64, nan, "prefix")
        return layout

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        assert self.ties_method is not None
        pair = self.n_args == 3
        x, s = cols[0], cols[-1]
        y = cols[1] if pair else x
        return int(
            cum_top_n(
                _TOP_AGGS[_top_agg(self.name, "cum")], slots, x, y, s, self.top, self.ascending,
                _TIES[self.ties_method], self.biased, i0, self._max_width(), out,
                st["s"], st["x"], st["y"] if pair else st["x"], st["length"], st["last"],
            )
        )  # fmt: skip


@dataclass(frozen=True)
class TimeTopN(BufferedOp):
    """``tm<agg>_top_n(t, x, [y,] s, window, top, ...)``: TopN over the time window (t_i - window, t_i].

    The window and the handling of time are those of the tm-functions (a row whose
    time is NULL or goes back outputs NULL and is not stored; ``window`` may be a
    duration such as ``"5m"``); the aggregates, ``s`` and ``ties_method`` are those
    of mTopN, with ``ties_method`` defaulting to ``'latest'`` as for cumTopN.

    Example:
        >>> import numpy as np
        >>> op = TimeTopN("tmsum_top_n", window=3, top=2)
        >>> t = np.array([1, 1, 3, 5, 8, 15, 15, 20.0])
        >>> x = np.array([5, 2, 4, 1, 2, 8, 9, 10.0])
        >>> s = np.array([3, 1, 2, 2, 1, 5, 4, 1.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [t, x, s])
        >>> out.tolist()
        [5.0, 7.0, 6.0, 5.0, 2.0, 8.0, 17.0, 10.0]
    """

    name: str
    window: int | str | timedelta
    top: int
    ascending: bool = True
    ties_method: str | None = None
    biased: bool = True
    n_args: int = field(init=False, repr=False, compare=False)

    _NAMES: ClassVar[tuple[str, ...]] = tuple(f"tm{a}_top_n" for a in _ALL_AGGS)

    def __post_init__(self) -> None:
        check_name(type(self).__name__, self.name, self._NAMES)
        window_units(self.name, self.window)
        check_int(self.name, "top", self.top, 1, MAX_WINDOW, f"e.g. {self.name}(t, x, s, window=20, top=5)")
        _init_top(self, _top_agg(self.name, "tm"), "latest")
        object.__setattr__(self, "n_args", self.n_args + 1)  # the time column

    @property
    def span(self) -> float:
        """The window in the units of the time column (microseconds for a duration)."""
        return window_units(self.name, self.window)

    def _layout(self) -> dict[str, BufferArray]:
        nan = math.nan
        layout = {
            "t": BufferArray(np.float64, nan, "ring"), "x": BufferArray(np.float64, nan, "ring"),
            "s": BufferArray(np.float64, nan, "ring"), "start": BufferArray(np.int64, 0), "count": BufferArray(np.int64, 0),
            "last_t": BufferArray(np.float64, nan),
        }  # fmt: skip
        if self.n_args == 4:
            layout["y"] = BufferArray(np.float64, nan, "ring")
        return layout

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        assert self.ties_method is not None
        pair = self.n_args == 4
        t, x, s = cols[0], cols[1], cols[-1]
        y = cols[2] if pair else x
        return int(
            time_top_n(
                _TOP_AGGS[_top_agg(self.name, "tm")], slots, t, x, y, s, self.span, self.top, self.ascending,
                _TIES[self.ties_method], self.biased, i0, self.max_rows, out,
                st["t"], st["x"], st["y"] if pair else st["x"], st["s"], st["start"], st["count"], st["last_t"],
            )
        )  # fmt: skip


# ---------------------------------------------------------------- kernels


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
    if op >= TOP_CORR:
        c = 0
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
    c = non_null(xs, m, buf)
    if c == 0:
        return np.nan
    if op in (TOP_SKEW, TOP_KURT):
        return buffer_moments(buf, c, op == TOP_KURT, biased)
    return over_values(op, buf, c, buf)


@njit(cache=True, inline="always")
def _top_scratch(cap):  # pragma: no cover - numba
    """Work arrays of a TopN kernel for up to ``cap`` candidates: key, xs, ys, selx, sely, chosen, buf."""
    return (
        np.empty(cap), np.empty(cap), np.empty(cap), np.empty(cap), np.empty(cap),
        np.empty(cap, dtype=np.bool_), np.empty(cap),
    )  # fmt: skip


@njit(cache=True, inline="always")
def _candidate(k, idx, m, ascending, ring_s, ring_x, ring_y, key, xs, ys):  # pragma: no cover - numba
    """Append stored row ``idx`` of key k to the ``m`` candidates unless its s is NULL; return the new count."""
    sv = ring_s[k, idx]
    if sv == sv:
        key[m] = sv if ascending else -sv
        xs[m] = ring_x[k, idx]
        ys[m] = ring_y[k, idx]
        m += 1
    return m


@njit(cache=True)
def moving_top_n(
    op, slots, x, y, s, window, top, ascending, ties, biased, ring_x, ring_y, ring_s, n_rows, wpos
):  # pragma: no cover - numba
    """mTopN: aggregate the ``top`` rows of the last ``window`` rows, ranked by s (NULL s ignored)."""
    n = slots.shape[0]
    out = np.empty(n)
    key, xs, ys, selx, sely, chosen, buf = _top_scratch(window)
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
            m = _candidate(k, idx, m, ascending, ring_s, ring_x, ring_y, key, xs, ys)
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
    key, xs, ys, selx, sely, chosen, tmp = _top_scratch(cap)
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
        for j in range(m):  # every kept s is non-NULL, so all m rows are candidates
            _candidate(k, j, j, ascending, buf_s, buf_x, buf_y, key, xs, ys)
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
    key, xs, ys, selx, sely, chosen, buf = _top_scratch(cap)
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
            m = _candidate(k, (start[k] + j) % cap, m, ascending, ring_s, ring_x, ring_y, key, xs, ys)
        c = _select_top(key, xs, ys, m, top, ties, selx, sely, chosen)
        out[i] = _aggregate(op, selx, sely, c, biased, buf) if c > 0 else np.nan
    return n


# ---------------------------------------------------------------- specs


def _top_spec(cls: type[MovingTopN | CumTopN | TimeTopN], prefix: str, name: str) -> StateOpSpec:
    """The spec of a TopN function: ``cls`` is windowed unless it is :class:`CumTopN`."""
    agg = _top_agg(name, prefix)
    windowed = cls is not CumTopN
    cols = ("x", "y", "s") if agg in _PAIR_AGGS else ("x", "s")
    if cls is TimeTopN:
        cols = ("t", *cols)
    moment = agg in ("skew", "kurtosis")
    required = ("window", "top") if windowed else ("top",)
    params = (*required, *(("biased",) if moment else ()), "ascending", "ties_method")
    ties = "latest" if moment or cls is not MovingTopN else "oldest"
    shown = [*cols, *required, *(("biased=True",) if moment else ()), "ascending=True", f"ties_method={ties!r}"]

    def build(p: dict[str, Any]) -> StateOp:
        rest = (p["top"], p.get("ascending", True), p.get("ties_method"), p.get("biased", True))
        if cls is CumTopN:
            return CumTopN(name, *rest)
        return (TimeTopN if cls is TimeTopN else MovingTopN)(name, p["window"], *rest)

    return StateOpSpec(name, f"{name}({', '.join(shown)})", params, required, build, columns=cols)


SPECS: tuple[StateOpSpec, ...] = (
    *(_top_spec(MovingTopN, "m", n) for n in MovingTopN._NAMES),
    *(_top_spec(CumTopN, "cum", n) for n in CumTopN._NAMES),
    *(_top_spec(TimeTopN, "tm", n) for n in TimeTopN._NAMES),
)
