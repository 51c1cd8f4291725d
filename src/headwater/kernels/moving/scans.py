"""Moving functions that look at the whole window on every row, O(window) per row.

``mrank``, ``mmed``, ``mpercentile`` and ``mmad`` keep a sorted copy of the window
(insert and delete are a binary search and a memmove); ``mskew``, ``mkurtosis``,
``mprod`` and ``mmax_positive_streak`` rescan it. See :mod:`headwater.kernels.moving`
for the window rules.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numba import njit

from headwater.kernels.base.buffers import ring_layout, ring_push, ring_push_count
from headwater.kernels.base.checks import (
    check_bool,
    check_choice,
    check_min_periods,
    check_moving,
    check_name,
    check_percent,
    check_window,
    resolve_min_periods,
)
from headwater.kernels.base.numeric import INTERPOLATIONS, TIES, interpolated_quantile, tied_rank
from headwater.kernels.base.operators import ArrayOp, Field, State, StateOp, StateOpSpec, f64

__all__ = ["SPECS", "MovingMad", "MovingMoments", "MovingPercentile", "MovingRank", "MovingScan"]


# Operations of sorted_window, window_scan and moving_moments.
RANK, PCTL, MAD_MEAN, MAD_MEDIAN = 0, 1, 2, 3
PROD, POS_STREAK = 0, 1
SKEW, KURT = 0, 1


class _SortedWindowOp(ArrayOp):
    """A count window that keeps a sorted copy of its non-NULL values: O(window) per row (a memmove)."""

    window: int

    def _layout(self) -> dict[str, Field]:
        return {**ring_layout(self.window), "srt": f64(shape=(self.window,))}

    def _sorted(
        self, st: State, slots: np.ndarray, x: np.ndarray, op: int, min_periods: int | None, *,
        ascending: bool = True, ignore_na: bool = True, ties: int = 0, percent: bool = False, q: float = 0.5,
        interpolation: int = 0,
    ) -> list[np.ndarray]:  # fmt: skip
        minp, full_only = resolve_min_periods(min_periods)
        return [
            sorted_window(
                op, slots, x, self.window, minp, full_only, ascending, ignore_na, ties, percent, q, interpolation,
                st["ring"], st["srt"], st["n_rows"], st["wpos"], st["nobs"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class MovingRank(_SortedWindowOp):
    """``mrank(x, ascending, window, ignore_na=True, ties_method='min', percent=False, min_periods=None)``.

    The 0-based rank of the current row within its window (``percent``: rank+1
    over the number of ranked values, as pandas' ``pct``). With ``ignore_na=False``
    NULLs take part and rank lowest; otherwise a NULL row outputs NULL.
    ``min_periods`` counts non-NULL values. O(window) per row.

    Example:
        >>> import numpy as np
        >>> op = MovingRank(ascending=False, window=3)
        >>> x = np.array([3, 2, 4, 4, 4, np.nan, 1])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, 0.0, 0.0, 0.0, nan, 1.0]
    """

    ascending: bool
    window: int
    ignore_na: bool = True
    ties_method: str = "min"
    percent: bool = False
    min_periods: int | None = None
    name = "mrank"

    def __post_init__(self) -> None:
        for flag in ("ascending", "ignore_na", "percent"):
            check_bool(self.name, flag, getattr(self, flag))
        check_window(self.name, self.window)
        check_choice(self.name, "ties_method", self.ties_method, TIES)
        check_min_periods(self.name, self.min_periods, self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return self._sorted(
            st, slots, args[0], RANK, self.min_periods, ascending=self.ascending, ignore_na=self.ignore_na,
            ties=TIES[self.ties_method], percent=self.percent,
        )  # fmt: skip


@dataclass(frozen=True)
class MovingPercentile(_SortedWindowOp):
    """``mpercentile(x, percent, window, interpolation='linear')`` and ``mmed(x, window)``.

    ``percent`` is in [0, 100]; ``interpolation`` as numpy/pandas (linear, lower,
    higher, nearest, midpoint). O(window) per row.

    Example:
        >>> import numpy as np
        >>> op = MovingPercentile("mpercentile", window=3, percent=25, interpolation="lower")
        >>> x = np.array([2.0, 1, 3, 7, 6, 5, 4])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, 1.0, 1.0, 3.0, 5.0, 4.0]
    """

    name: str
    window: int
    percent: float = 50.0
    interpolation: str = "linear"
    min_periods: int | None = None

    def __post_init__(self) -> None:
        check_name("MovingPercentile", self.name, ("mmed", "mpercentile"))
        check_window(self.name, self.window)
        check_percent(self.name, self.percent)
        check_choice(self.name, "interpolation", self.interpolation, INTERPOLATIONS)
        check_min_periods(self.name, self.min_periods, self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return self._sorted(
            st, slots, args[0], PCTL, self.min_periods, q=float(self.percent) / 100,
            interpolation=INTERPOLATIONS[self.interpolation],
        )  # fmt: skip


@dataclass(frozen=True)
class MovingMad(_SortedWindowOp):
    """``mmad(x, window, use_median=False)``: mean(|x − mean(x)|), or med(|x − med(x)|). O(window) per row.

    Example:
        >>> import numpy as np
        >>> op = MovingMad(window=3, use_median=True)
        >>> x = np.array([7.0, 4, 6, 0, -5, 32])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(6, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, 1.0, 2.0, 5.0, 5.0]
    """

    window: int
    use_median: bool = False
    min_periods: int | None = None
    name = "mmad"

    def __post_init__(self) -> None:
        check_window(self.name, self.window)
        check_bool(self.name, "use_median", self.use_median)
        check_min_periods(self.name, self.min_periods, self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return self._sorted(st, slots, args[0], MAD_MEDIAN if self.use_median else MAD_MEAN, self.min_periods)


class _RescanOp(ArrayOp):
    """A count window kept in a ring and rescanned on every row: O(window) per row."""

    window: int
    min_periods: int | None

    def _layout(self) -> dict[str, Field]:
        return ring_layout(self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        minp, full_only = resolve_min_periods(self.min_periods)
        return [self._rescan(slots, args[0], minp, full_only, st["ring"], st["n_rows"], st["wpos"], st["nobs"])]

    @abc.abstractmethod
    def _rescan(self, slots: np.ndarray, x: np.ndarray, minp: int, full_only: bool, *ring: np.ndarray) -> np.ndarray:
        """Run the kernel over the rows; ``ring``: the state arrays of :func:`ring_layout`."""


@dataclass(frozen=True)
class MovingScan(_RescanOp):
    """``mprod`` and ``mmax_positive_streak`` (largest sum of consecutive positive values in the window).

    Both scan the window per row (O(window)); in a streak a NULL counts as a
    non-positive value, as in DolphinDB's examples.

    Example:
        >>> import numpy as np
        >>> op = MovingScan("mmax_positive_streak", window=5)
        >>> x = np.array([1, -1, 1, -2, 10, 3, 3, 9, 0, 6, 5], dtype=float)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(11, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, nan, nan, 10.0, 13.0, 16.0, 25.0, 25.0, 15.0, 12.0]
    """

    name: str
    window: int
    min_periods: int | None = None

    _OPS: ClassVar[dict[str, int]] = {"mprod": PROD, "mmax_positive_streak": POS_STREAK}

    def __post_init__(self) -> None:
        check_moving(self, tuple(self._OPS))

    def _rescan(self, slots: np.ndarray, x: np.ndarray, minp: int, full_only: bool, *ring: np.ndarray) -> np.ndarray:
        return window_scan(self._OPS[self.name], slots, x, self.window, minp, full_only, *ring)


@dataclass(frozen=True)
class MovingMoments(_RescanOp):
    """``mskew(x, window, biased=True)`` and ``mkurtosis(x, window, biased=True)``, O(window) per row.

    DolphinDB's definitions: biased skewness m3/m2^1.5 and moment kurtosis
    m4/m2² (3 for a normal sample, not excess); ``biased=False`` applies the
    sample corrections (pandas' ``skew()`` and ``kurt() + 3``). Skewness needs 2
    values (3 unbiased), kurtosis 3 (4 unbiased); a window of equal values or
    holding an infinite value outputs NULL.

    Example:
        >>> import numpy as np
        >>> op = MovingMoments("mskew", window=3)
        >>> x = np.array([1.0, 2, 3, 10, 100, 4, 3])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> np.round(out, 6).tolist()
        [nan, nan, 0.0, 0.665469, 0.69381, 0.697217, 0.706851]
    """

    name: str
    window: int
    biased: bool = True
    min_periods: int | None = None

    _OPS: ClassVar[dict[str, int]] = {"mskew": SKEW, "mkurtosis": KURT}

    def __post_init__(self) -> None:
        check_moving(self, tuple(self._OPS))
        check_bool(self.name, "biased", self.biased)

    def _rescan(self, slots: np.ndarray, x: np.ndarray, minp: int, full_only: bool, *ring: np.ndarray) -> np.ndarray:
        return moving_moments(self._OPS[self.name], slots, x, self.window, minp, full_only, self.biased, *ring)


# ---------------------------------------------------------------- kernels


@njit(cache=True, inline="always", error_model="numpy")
def _bisect_left(row, cnt, v):  # pragma: no cover - numba
    lo, hi = 0, cnt
    while lo < hi:
        mid = (lo + hi) >> 1
        if row[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always", error_model="numpy")
def _bisect_right(row, cnt, v):  # pragma: no cover - numba
    lo, hi = 0, cnt
    while lo < hi:
        mid = (lo + hi) >> 1
        if row[mid] <= v:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, error_model="numpy")
def sorted_window(
    op, slots, x, window, minp, full_only, ascending, ignore_na, ties, percent, q, interpolation,
    ring, srt, n_rows, wpos, nobs,
):  # pragma: no cover - numba  # fmt: skip
    """mrank / mpercentile / mmad over the last ``window`` rows, keeping a sorted copy of the window.

    Insert and delete are a binary search plus a shift of the sorted copy
    (O(window) per row, a memmove); the percentile is then O(1), the rank
    O(log window) and the mean or median absolute deviation O(window).
    """
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        old, r, _ = ring_push(ring, n_rows, wpos, k, v, window)
        row = srt[k]
        cnt = nobs[k]
        if old == old:
            j = _bisect_left(row, cnt, old)
            for t in range(j, cnt - 1):
                row[t] = row[t + 1]
            cnt -= 1
        if v == v:
            j = _bisect_right(row, cnt, v)
            for t in range(cnt, j, -1):
                row[t] = row[t - 1]
            row[j] = v
            cnt += 1
        nobs[k] = cnt
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            out[i] = np.nan
            continue
        if op == RANK:
            n_null = min(r + 1, window) - cnt
            if v == v:
                lo = _bisect_left(row, cnt, v)
                eq = _bisect_right(row, cnt, v) - lo
                before = lo if ascending else cnt - lo - eq
                if ascending and not ignore_na:
                    before += n_null  # NULL ranks lowest
            elif ignore_na:
                out[i] = np.nan
                continue
            else:
                eq = n_null
                before = 0 if ascending else cnt
            rank = tied_rank(before, eq, ties)
            total = cnt if ignore_na else cnt + n_null
            out[i] = (rank + 1.0) / total if percent else rank
        elif op == PCTL:
            h = q * (cnt - 1)
            idx = int(h)
            hi_v = row[idx + 1] if idx + 1 < cnt else row[idx]
            out[i] = interpolated_quantile(row[idx], hi_v, h - idx, idx, interpolation)
        elif op == MAD_MEAN:
            s = 0.0
            for t in range(cnt):
                s += row[t]
            mean = s / cnt
            d = 0.0
            for t in range(cnt):
                d += abs(row[t] - mean)
            out[i] = d / cnt
        else:  # MAD_MEDIAN: merge the deviations on both sides of the median in increasing order
            a = (cnt - 1) // 2
            med = (row[a] + row[cnt // 2]) / 2.0
            lo_i = a
            hi_i = a + 1
            want_lo = (cnt - 1) // 2
            want_hi = cnt // 2
            m_lo = 0.0
            res = 0.0
            for t in range(want_hi + 1):
                if hi_i >= cnt or (lo_i >= 0 and med - row[lo_i] <= row[hi_i] - med):
                    dev = med - row[lo_i]
                    lo_i -= 1
                else:
                    dev = row[hi_i] - med
                    hi_i += 1
                if t == want_lo:
                    m_lo = dev
                if t == want_hi:
                    res = (m_lo + dev) / 2.0
            out[i] = res
    return out


@njit(cache=True, error_model="numpy")
def window_scan(op, slots, x, window, minp, full_only, ring, n_rows, wpos, nobs):  # pragma: no cover - numba
    """mprod / mmax_positive_streak by scanning the ring oldest to newest (O(window) per row)."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        _, r, _ = ring_push_count(ring, n_rows, wpos, nobs, k, x[i], window)
        pos = wpos[k]
        cnt = nobs[k]
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            out[i] = np.nan
            continue
        lim = min(r + 1, window)
        start = pos if r + 1 >= window else 0
        if op == PROD:
            acc = 1.0
            for t in range(lim):
                e = ring[k, (start + t) % window]
                if e == e:
                    acc *= e
            out[i] = acc
        else:
            cur = 0.0
            best = 0.0
            for t in range(lim):
                e = ring[k, (start + t) % window]
                if e > 0:  # a NULL ends a streak like a non-positive value
                    cur += e
                    if cur > best:
                        best = cur
                else:
                    cur = 0.0
            out[i] = best
    return out


@njit(cache=True, error_model="numpy")
def moving_moments(
    op, slots, x, window, minp, full_only, biased, ring, n_rows, wpos, nobs
):  # pragma: no cover
    """mskew / mkurtosis (moment kurtosis, not excess) from two passes over the window: O(window) per row.

    Add/remove updates of third and fourth moments lose most digits when a large
    value leaves the window, so the central moments are recomputed each row. A
    window of equal values (zero variance) or holding an infinite value outputs NULL.
    """
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        _, r, _ = ring_push_count(ring, n_rows, wpos, nobs, k, x[i], window)
        cnt = nobs[k]
        out[i] = np.nan
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window):
            continue
        if cnt < (2 if op == SKEW else 3) + (0 if biased else 1):
            continue
        total = 0.0
        finite = True
        for e in ring[k, : min(r + 1, window)]:
            if e == e:
                if np.isinf(e):
                    finite = False
                    break
                total += e
        if not finite:
            continue
        mu = total / cnt
        s2 = s3 = s4 = 0.0
        for e in ring[k, : min(r + 1, window)]:
            if e == e:
                d = e - mu
                d2 = d * d
                s2 += d2
                s3 += d2 * d
                s4 += d2 * d2
        nf = float(cnt)
        if op == SKEW:
            den = s2 * np.sqrt(s2)
            if den > 0.0:  # zero for a constant window; may underflow for a tiny spread
                g = np.sqrt(nf) * s3 / den
                out[i] = g if biased else g * np.sqrt(nf * (nf - 1.0)) / (nf - 2.0)
        else:
            den = s2 * s2
            if den > 0.0:
                b = nf * s4 / den
                if biased:
                    out[i] = b
                else:
                    out[i] = ((nf * nf - 1.0) * b - 3.0 * (nf - 1.0) ** 2) / ((nf - 2.0) * (nf - 3.0)) + 3.0
    return out


# ---------------------------------------------------------------- specs


def _moments_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: MovingMoments(name, p["window"], p.get("biased", True), p.get("min_periods"))


SPECS: tuple[StateOpSpec, ...] = (
    StateOpSpec(
        "mrank",
        "mrank(x, ascending, window, ignore_na=True, ties_method='min', percent=False, min_periods=None)",
        ("ascending", "window", "ignore_na", "ties_method", "percent", "min_periods"), ("ascending", "window"),
        lambda p: MovingRank(
            p["ascending"], p["window"], p.get("ignore_na", True), p.get("ties_method", "min"),
            p.get("percent", False), p.get("min_periods"),
        ),
    ),
    StateOpSpec(
        "mmed", "mmed(x, window, min_periods=None)", ("window", "min_periods"), ("window",),
        lambda p: MovingPercentile("mmed", p["window"], min_periods=p.get("min_periods")),
    ),
    StateOpSpec(
        "mpercentile", "mpercentile(x, percent, window, interpolation='linear', min_periods=None)",
        ("percent", "window", "interpolation", "min_periods"), ("percent", "window"),
        lambda p: MovingPercentile(
            "mpercentile", p["window"], p["percent"], p.get("interpolation", "linear"), p.get("min_periods")
        ),
    ),
    StateOpSpec(
        "mmad", "mmad(x, window, use_median=False, min_periods=None)", ("window", "use_median", "min_periods"),
        ("window",), lambda p: MovingMad(p["window"], p.get("use_median", False), p.get("min_periods")),
    ),
    *(
        StateOpSpec(
            n, f"{n}(x, window, biased=True, min_periods=None)", ("window", "biased", "min_periods"),
            ("window",), _moments_builder(n),
        )
        for n in MovingMoments._OPS
    ),
    StateOpSpec(
        "mprod", "mprod(x, window, min_periods=None)", ("window", "min_periods"), ("window",),
        lambda p: MovingScan("mprod", p["window"], p.get("min_periods")),
    ),
    StateOpSpec(
        "mmax_positive_streak", "mmax_positive_streak(x, window)", ("window",), ("window",),
        lambda p: MovingScan("mmax_positive_streak", p["window"]), result="same",
    ),
)  # fmt: skip
