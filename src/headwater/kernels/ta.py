"""TA-lib style moving averages and trends: ``ema``, ``wilder``, ``gema``, ``sma``, ``wma``, ``dema``,
``tema``, ``t3``, ``trima``, ``kama``, ``ma`` and ``linear_time_trend``.

They follow TA-lib's NULL rule: NULL rows output NULL and are left out of the
key's sequence, so leading NULLs are skipped and the first ``lookback`` values
after them output NULL (``ema(..., warmup=True)`` outputs from the first value).
``ma(x, window, ma_type)`` picks one of the others by TA-lib's MA_Type code.

Example:
    >>> import numpy as np
    >>> op = Ma(window=3, ma_type=0)  # sma
    >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1,
    ...                    [np.array([np.nan, 1.0, 2.0, 3.0, 6.0])])
    >>> out.tolist()
    [nan, nan, nan, 2.0, 3.6666666666666665]
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numba import njit

from headwater.kernels.base.buffers import ring_push, ring_slot
from headwater.kernels.base.checks import bad, check_bool, check_float, check_int, check_name, check_window
from headwater.kernels.base.numeric import SLR, kahan_add, pair_moment_layout, run_pair_moment
from headwater.kernels.base.operators import (
    ArrayOp,
    DelegateOp,
    Field,
    KernelOp,
    State,
    StateOp,
    StateOpSpec,
    build_op,
    f64,
    i64,
)

__all__ = [
    "MA_TYPES",
    "SPECS",
    "Kama",
    "LinearTimeTrend",
    "Ma",
    "TaCascade",
    "TaEma",
    "TaMovingAverage",
    "Trima",
]


# Operations of ta_window.
TA_SMA, TA_WMA = 0, 1


@dataclass(frozen=True)
class TaEma(KernelOp):
    """TA-lib style exponential averages ``ema``, ``wilder`` and ``gema``, per key.

    Leading NULLs are skipped and stay NULL. The first ``window - 1`` non-NULL
    values output NULL; the ``window``-th outputs the seed, the simple mean of
    the first ``window`` non-NULL values; afterwards ``e = α·x + (1-α)·e``, with
    α = 2/(window+1) for ``ema``, 1/window for ``wilder`` and ``alpha`` for ``gema``.
    A NULL after the start outputs NULL and leaves the state unchanged (TA-lib's
    rule), so the recursion continues from the last non-NULL value.

    ``ema(..., warmup=True)`` outputs from the first value on:
    ``e_0 = x_0`` and ``e_k = a·x_k + (1-a)·e_{k-1}`` with ``a = 2/(min(k, window)+1)``
    (k counts non-NULL values), which reproduces DolphinDB's documented output.

    Example:
        >>> import numpy as np
        >>> op = TaEma("ema", window=3)
        >>> x = np.array([12.1, 12.2, 12.6, 12.8, 11.9, 11.6, 11.2])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> np.round(out, 5).tolist()
        [nan, nan, 12.3, 12.55, 12.225, 11.9125, 11.55625]
    """

    name: str
    window: int
    alpha: float | None = None
    warmup: bool = False

    _NAMES: ClassVar[tuple[str, ...]] = ("ema", "wilder", "gema")

    def __post_init__(self) -> None:
        check_name("TaEma", self.name, self._NAMES)
        check_window(self.name, self.window)
        if self.name == "gema":
            if self.alpha is None:
                raise bad(
                    self.name, "alpha", None, "a number in (0, 1)", "e.g. gema(x, window=10, alpha=0.2)"
                )
            check_float(self.name, "alpha", self.alpha, lambda a: 0 < a < 1, "a number in (0, 1)")
        elif self.alpha is not None:
            raise bad(
                self.name, "alpha", self.alpha, "no alpha", f"{self.name} derives alpha from window; use gema"
            )
        check_bool(self.name, "warmup", self.warmup)
        if self.warmup and self.name != "ema":
            raise bad(self.name, "warmup", self.warmup, "False", "only ema supports warmup=True")

    @property
    def effective_alpha(self) -> float:
        """The smoothing factor α of the recursion."""
        if self.name == "ema":
            return 2.0 / (self.window + 1)
        if self.name == "wilder":
            return 1.0 / self.window
        assert self.alpha is not None
        return float(self.alpha)

    def _layout(self) -> dict[str, Field]:
        return {"ema": f64(), "count": i64(), "total": f64(0.0)}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return ta_ema(
            slots, x, self.window, self.effective_alpha, self.warmup, st["ema"], st["count"], st["total"]
        )


@dataclass(frozen=True)
class TaMovingAverage(KernelOp):
    """TA-lib style ``sma`` (simple) and ``wma`` (linearly weighted) moving averages, per key.

    The window holds the last ``window`` non-NULL values; the NULL rules are those
    of :class:`TaEma` (leading NULLs stay NULL, the first ``window - 1`` values
    output NULL, a later NULL outputs NULL and leaves the state alone). ``wma``
    weights the newest value ``window`` and the oldest 1 and costs O(window) per row.

    Example:
        >>> import numpy as np
        >>> op = TaMovingAverage("wma", window=3)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1,
        ...                    [np.array([np.nan, 1.0, 2.0, 3.0, 6.0])])
        >>> np.round(out, 6).tolist()
        [nan, nan, nan, 2.333333, 4.333333]
    """

    name: str
    window: int

    _OPS: ClassVar[dict[str, int]] = {"sma": TA_SMA, "wma": TA_WMA}

    def __post_init__(self) -> None:
        check_name("TaMovingAverage", self.name, tuple(self._OPS))
        check_window(self.name, self.window)

    def _layout(self) -> dict[str, Field]:
        return {
            "ring": f64(shape=(self.window,)), "count": i64(), "wpos": i64(),
            "total": f64(0.0), "comp": f64(0.0),
        }  # fmt: skip

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return ta_window(
            self._OPS[self.name], slots, x, self.window,
            st["ring"], st["count"], st["wpos"], st["total"], st["comp"],
        )  # fmt: skip


class _TaOp(ArrayOp):
    """A TA-lib style operator: NULL rows output NULL and never reach the kernel."""

    @abc.abstractmethod
    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        """Run the kernel over the non-NULL rows only."""

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        (x,) = args
        keep = x == x
        if keep.all():
            return self._ta_kernel(st, slots, x)
        outs = []
        for res in self._ta_kernel(st, slots[keep], x[keep]):
            full = np.full(x.shape[0], np.nan)
            full[keep] = res
            outs.append(full)
        return outs


@dataclass(frozen=True)
class TaCascade(_TaOp):
    """``dema``, ``tema`` and ``t3(x, window, vfactor=0.7)``: combinations of repeated TA-lib EMAs.

    ``e1 = ema(x, window)``, ``e2 = ema(e1, window)``, ... each seeded by the
    simple mean of its first ``window`` inputs, as TA-lib does;
    ``dema = 2·e1 − e2``, ``tema = 3·e1 − 3·e2 + e3`` and ``t3`` is Tillson's
    combination of e3..e6 with volume factor ``vfactor``. So the first
    2·(window−1), 3·(window−1) and 6·(window−1) non-NULL values output NULL.

    Example:
        >>> import numpy as np
        >>> op = TaCascade("dema", window=3)
        >>> x = np.array([12.1, 12.2, 12.6, 12.8, 11.9, 11.6, 11.2])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> np.round(out, 6).tolist()
        [nan, nan, nan, nan, 12.091667, 11.689583, 11.266667]
    """

    name: str
    window: int
    vfactor: float | None = None

    _LEVELS: ClassVar[dict[str, int]] = {"dema": 2, "tema": 3, "t3": 6}

    def __post_init__(self) -> None:
        check_name("TaCascade", self.name, tuple(self._LEVELS))
        check_window(self.name, self.window)
        if self.name == "t3":
            if self.vfactor is None:
                object.__setattr__(self, "vfactor", 0.7)
            check_float(self.name, "vfactor", self.vfactor, lambda v: 0 <= v <= 1, "a number in [0, 1]")
        elif self.vfactor is not None:
            raise bad(self.name, "vfactor", self.vfactor, "no vfactor", "only t3 takes a volume factor")

    def coefficients(self) -> np.ndarray:
        """Weights of e1, e2, ... in the result."""
        if self.name == "dema":
            return np.array([2.0, -1.0])
        if self.name == "tema":
            return np.array([3.0, -3.0, 1.0])
        v = float(self.vfactor)  # type: ignore[arg-type]
        c1 = -v * v * v
        c2 = 3 * v * v + 3 * v * v * v
        c3 = -6 * v * v - 3 * v - 3 * v * v * v
        c4 = 1 + 3 * v + v * v * v + 3 * v * v
        return np.array([0.0, 0.0, c4, c3, c2, c1])

    def _layout(self) -> dict[str, Field]:
        levels = self._LEVELS[self.name]
        return {
            "count": i64(shape=(levels,)),
            "ema": f64(shape=(levels,)),
            "total": f64(0.0, shape=(levels,)),
        }

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        alpha = 2.0 / (self.window + 1)
        return [
            ema_cascade(
                slots, x, self.window, alpha, self.coefficients(), st["count"], st["ema"], st["total"]
            )
        ]


@dataclass(frozen=True)
class Trima(_TaOp):
    """TA-lib ``trima``: triangular moving average (an SMA of an SMA), O(1) per row.

    For an odd window both SMAs span (window+1)/2 values; for an even one
    window/2 and window/2+1. The first window−1 non-NULL values output NULL.

    Example:
        >>> import numpy as np
        >>> op = Trima(window=4)  # weights 1, 2, 2, 1
        >>> x = np.array([1.0, 2.0, 3.0, 10.0, 4.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x])
        >>> np.round(out, 4).tolist()
        [nan, nan, nan, 3.5, 5.3333]
    """

    window: int
    name = "trima"

    def __post_init__(self) -> None:
        check_window(self.name, self.window)

    def periods(self) -> tuple[int, int]:
        """Periods of the inner and the outer SMA."""
        if self.window % 2:
            half = (self.window + 1) // 2
            return half, half
        return self.window // 2, self.window // 2 + 1

    def _layout(self) -> dict[str, Field]:
        p1, p2 = self.periods()
        return {
            "ring1": f64(shape=(p1,)), "ring2": f64(shape=(p2,)), "count": i64(shape=(2,)),
            "total": f64(0.0, shape=(2,)), "comp": f64(0.0, shape=(2,)),
        }  # fmt: skip

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        p1, p2 = self.periods()
        return [trima(slots, x, p1, p2, st["ring1"], st["ring2"], st["count"], st["total"], st["comp"])]


@dataclass(frozen=True)
class Kama(_TaOp):
    """TA-lib ``kama``: Kaufman's adaptive moving average (fast period 2, slow 30).

    The efficiency ratio compares the move over the last ``window`` values with
    the sum of their absolute changes; the first ``window`` non-NULL values
    output NULL (TA-lib's lookback). O(1) per row.

    Example:
        >>> import numpy as np
        >>> op = Kama(window=5)
        >>> x = np.array([51.65, 81.18, 43.37, 11.26, 82.79, 13.4, 81.87])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> np.round(out, 6).tolist()
        [nan, nan, nan, nan, nan, 81.006144, 81.009907]
    """

    window: int
    name = "kama"

    def __post_init__(self) -> None:
        check_window(self.name, self.window)

    def _layout(self) -> dict[str, Field]:
        return {"ring": f64(shape=(self.window + 1,)), "count": i64(), "sum_roc": f64(0.0), "prev": f64()}

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        return [kama(slots, x, self.window, st["ring"], st["count"], st["sum_roc"], st["prev"])]


@dataclass(frozen=True)
class LinearTimeTrend(_TaOp):
    """``linear_time_trend(x, window)`` -> (intercept, slope) of x regressed on 0..window-1.

    The regressor is the position within the window of the last ``window``
    non-NULL values (TA-lib's LINEARREG_INTERCEPT / LINEARREG_SLOPE); the first
    window−1 non-NULL values output NULL. O(1) per row.

    Example:
        >>> import numpy as np
        >>> op = LinearTimeTrend(window=3)
        >>> x = np.array([3.0, 3.0, 5.0, 7.0, 8.0])
        >>> _, (a, b) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x])
        >>> np.round(a, 4).tolist(), np.round(b, 4).tolist()
        ([nan, nan, 2.6667, 3.0, 5.1667], [nan, nan, 1.0, 2.0, 1.5])
    """

    window: int
    name = "linear_time_trend"
    n_outputs = 2

    def __post_init__(self) -> None:
        check_window(self.name, self.window)

    def _layout(self) -> dict[str, Field]:
        return pair_moment_layout(self.window)

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        return run_pair_moment(SLR, st, slots, x, x, self.window, 1, True, row_x=True)


MA_TYPES: dict[int, str] = {
    0: "sma",
    1: "ema",
    2: "wma",
    3: "dema",
    4: "tema",
    5: "trima",
    6: "kama",
    8: "t3",
}
"""TA-lib's MA_Type codes accepted by ``ma`` (7, MAMA, is not supported)."""


@dataclass(frozen=True)
class Ma(DelegateOp):
    """``ma(x, window, ma_type)``: the TA-lib moving average chosen by ``ma_type`` (see :data:`MA_TYPES`).

    ``t3`` uses vfactor 0.7, as TA-lib's MA does; ``window=1`` returns x for
    every type, as TA-lib copies its input then.

    Example:
        >>> import numpy as np
        >>> op = Ma(window=3, ma_type=1)  # ema
        >>> x = np.array([12.1, 12.2, 12.6, 12.8])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1, [x])
        >>> np.round(out, 4).tolist()
        [nan, nan, 12.3, 12.55]
    """

    window: int
    ma_type: int
    name = "ma"
    n_args = 1

    def __post_init__(self) -> None:
        check_window(self.name, self.window)
        choices = ", ".join(f"{k}={v}" for k, v in MA_TYPES.items())
        if self.ma_type == 7 and not isinstance(self.ma_type, bool):
            raise bad(
                self.name, "ma_type", 7, f"one of {choices}",
                "7 is TA-lib's MAMA, which takes fast/slow limits instead of a window and is not supported",
            )  # fmt: skip
        check_int(self.name, "ma_type", self.ma_type, 0, 8, f"valid types: {choices}")
        inner = "sma" if self.window == 1 else MA_TYPES[self.ma_type]
        object.__setattr__(self, "inner", build_op(_BY_NAME[inner], {"window": self.window}))


# ---------------------------------------------------------------- kernels


@njit(cache=True)
def ta_ema(slots, x, window, alpha, warmup, ema, count, total):  # pragma: no cover - numba
    """TA-lib style EMA per key; NULL rows output NULL and leave the state alone."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v != v:
            out[i] = np.nan
            continue
        c = count[k] + 1
        count[k] = c
        if warmup:
            if c == 1:
                e = v
            else:
                a = 2.0 / c if c <= window else alpha
                e = a * v + (1.0 - a) * ema[k]
            ema[k] = e
            out[i] = e
        elif c < window:
            total[k] += v
            out[i] = np.nan
        elif c == window:
            e = (total[k] + v) / window
            ema[k] = e
            out[i] = e
        else:
            e = alpha * v + (1.0 - alpha) * ema[k]
            ema[k] = e
            out[i] = e
    return out


@njit(cache=True)
def ta_window(op, slots, x, window, ring, count, wpos, total, comp):  # pragma: no cover - numba
    """TA-lib style ``sma`` / ``wma`` over the last ``window`` non-NULL values of each key.

    NULL rows output NULL and leave the state alone. ``sma`` keeps a
    Kahan-compensated running sum; ``wma`` recomputes its weighted sum from the
    ring (O(window) per row) because a running weighted sum drifts.
    """
    n = x.shape[0]
    out = np.empty(n)
    denom = window * (window + 1) / 2.0
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v != v:
            out[i] = np.nan
            continue
        old, r, _ = ring_push(ring, count, wpos, k, v, window)
        if op == TA_SMA:
            if r >= window:
                kahan_add(k, -old, total, comp)
            kahan_add(k, v, total, comp)
        if r + 1 < window:
            out[i] = np.nan
        elif op == TA_SMA:
            out[i] = total[k] / window
        else:
            # after the write, the next slot to write holds the oldest value (weight 1)
            p = wpos[k]
            acc = 0.0
            for j in range(window):
                acc += (j + 1) * ring[k, ring_slot(p + j, window)]
            out[i] = acc / denom
    return out


# The kernels below never see NULLs: the operators drop NULL rows (TA-lib's rule, as
# ta_ema and ta_window do themselves) and scatter NULL back into their outputs.


@njit(cache=True, error_model="numpy")
def ema_cascade(slots, x, window, alpha, coef, count, ema, total):  # pragma: no cover - numba
    """``sum(coef[j] * EMA_j)`` where EMA_0 = ema(x) and EMA_j = ema(EMA_{j-1}), each TA-lib seeded.

    Level j first outputs after ``(j + 1) * (window - 1) + 1`` values (dema, tema, t3).
    """
    n = x.shape[0]
    levels = coef.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        done = True
        for j in range(levels):
            c = count[k, j] + 1
            count[k, j] = c
            if c < window:
                total[k, j] += v
                done = False
                break
            e = (total[k, j] + v) / window if c == window else alpha * v + (1.0 - alpha) * ema[k, j]
            ema[k, j] = e
            v = e
        if done:
            acc = 0.0
            for j in range(levels):
                acc += coef[j] * ema[k, j]
            out[i] = acc
        else:
            out[i] = np.nan
    return out


@njit(cache=True, inline="always")
def _kahan_window_push(k, v, count, ring, total, comp):  # pragma: no cover - numba
    """Add ``v`` to key k's Kahan-summed window of its last ``ring.shape[1]`` values; return its count."""
    c = count[k]
    pos = c % ring.shape[1]
    if c >= ring.shape[1]:
        kahan_add(k, -ring[k, pos], total, comp)
    kahan_add(k, v, total, comp)
    ring[k, pos] = v
    count[k] = c + 1
    return c + 1


@njit(cache=True, error_model="numpy")
def trima(slots, x, p1, p2, ring1, ring2, count, total, comp):  # pragma: no cover - numba
    """TA-lib TRIMA as an SMA of period ``p2`` over an SMA of period ``p1`` (Kahan-compensated sums).

    ``count``, ``total`` and ``comp`` have one column per level.
    """
    n = x.shape[0]
    out = np.empty(n)
    n1, t1, c1 = count[:, 0], total[:, 0], comp[:, 0]
    n2, t2, c2 = count[:, 1], total[:, 1], comp[:, 1]
    for i in range(n):
        k = slots[i]
        v = x[i]
        c = _kahan_window_push(k, v, n1, ring1, t1, c1)
        if c < p1:
            out[i] = np.nan
            continue
        c = _kahan_window_push(k, t1[k] / p1, n2, ring2, t2, c2)
        out[i] = t2[k] / p2 if c >= p2 else np.nan
    return out


@njit(cache=True, error_model="numpy")
def kama(slots, x, window, ring, count, sum_roc, prev):  # pragma: no cover - numba
    """TA-lib KAMA (fast 2, slow 30), the same updates as ta_KAMA.c; ring holds the last window+1 values."""
    n = x.shape[0]
    out = np.empty(n)
    const_max = 2.0 / (30.0 + 1.0)
    const_diff = 2.0 / (2.0 + 1.0) - const_max
    size = window + 1
    for i in range(n):
        k = slots[i]
        v = x[i]
        c = count[k]  # values seen before this one
        pos = c % size
        if c == 0:
            ring[k, pos] = v
            count[k] = 1
            out[i] = np.nan
            continue
        last = ring[k, (c - 1) % size]
        if c <= window:
            sum_roc[k] += abs(v - last)
            ring[k, pos] = v
            count[k] = c + 1
            if c < window:
                out[i] = np.nan
                continue
            trailing = ring[k, 0]
            period_roc = v - trailing
            kp = last  # the previous price seeds KAMA
        else:
            trailing_prev = ring[k, pos]  # x[t - window - 1], about to be overwritten
            trailing = ring[k, (c - window) % size]
            sum_roc[k] -= abs(trailing_prev - trailing)
            sum_roc[k] += abs(v - last)
            ring[k, pos] = v
            count[k] = c + 1
            period_roc = v - trailing
            kp = prev[k]
        s = sum_roc[k]
        # TA-lib's test: a monotone rise or a flat window is fully efficient
        er = 1.0 if s <= period_roc or -1e-8 < s < 1e-8 else abs(period_roc / s)
        sc = er * const_diff + const_max
        sc *= sc
        kp = (v - kp) * sc + kp
        prev[k] = kp
        out[i] = kp
    return out


# ---------------------------------------------------------------- specs


def _ta_ma_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TaMovingAverage(name, p["window"])


def _ta_cascade_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TaCascade(name, p["window"], p.get("vfactor"))


SPECS: tuple[StateOpSpec, ...] = (
    StateOpSpec(
        "ema", "ema(x, window, warmup=False)", ("window", "warmup"), ("window",),
        lambda p: TaEma("ema", p["window"], warmup=p.get("warmup", False)),
    ),
    StateOpSpec("wilder", "wilder(x, window)", ("window",), ("window",), lambda p: TaEma("wilder", p["window"])),
    StateOpSpec(
        "gema", "gema(x, window, alpha)", ("window", "alpha"), ("window", "alpha"),
        lambda p: TaEma("gema", p["window"], p["alpha"]),
    ),
    *(
        StateOpSpec(n, f"{n}(x, window)", ("window",), ("window",), _ta_ma_builder(n))
        for n in TaMovingAverage._OPS
    ),
    StateOpSpec("dema", "dema(x, window)", ("window",), ("window",), _ta_cascade_builder("dema")),
    StateOpSpec("tema", "tema(x, window)", ("window",), ("window",), _ta_cascade_builder("tema")),
    StateOpSpec(
        "t3", "t3(x, window, vfactor=0.7)", ("window", "vfactor"), ("window",), _ta_cascade_builder("t3")
    ),
    StateOpSpec("trima", "trima(x, window)", ("window",), ("window",), lambda p: Trima(p["window"])),
    StateOpSpec("kama", "kama(x, window)", ("window",), ("window",), lambda p: Kama(p["window"])),
    StateOpSpec(
        "ma", "ma(x, window, ma_type)", ("window", "ma_type"), ("window", "ma_type"),
        lambda p: Ma(p["window"], p["ma_type"]),
    ),
    StateOpSpec(
        "linear_time_trend", "linear_time_trend(x, window)", ("window",), ("window",),
        lambda p: LinearTimeTrend(p["window"]), n_outputs=2,
    ),
)  # fmt: skip

_BY_NAME = {spec.name: spec for spec in SPECS}  # ma builds the average it names from these
