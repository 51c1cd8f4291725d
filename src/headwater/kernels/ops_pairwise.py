"""Two-argument, TA-lib and order-statistic state functions of the reactive state engine.

The contract is that of :mod:`headwater.kernels.ops` (read its module docstring):
per-key state arrays with the key slot as first axis, copied once per ``run``;
NaN is NULL; results do not depend on how rows are split into batches.

Two-argument functions (``mcorr(x, y, window)``, ``mbeta(y, x, window)``,
``cumwavg(x, w)``, ``ewm_cov(x, y, span=...)``, ...) use a row only when both of
its values are non-NULL; ``min_periods`` counts such pairs. TA-lib functions
(``dema``, ``tema``, ``t3``, ``trima``, ``kama``, ``ma``, ``linear_time_trend``)
follow the rule of ``ema``/``sma``: NULL rows output NULL and are left out of
the key's sequence, so leading NULLs are skipped and the first ``lookback``
values after them output NULL.

Example:
    >>> import numpy as np
    >>> from headwater.kernels.ops import make_state_op
    >>> op = make_state_op("mcorr", {"window": 3})
    >>> x = np.array([1.0, 2.0, 3.0, 4.0, 6.0])
    >>> y = np.array([2.0, 4.0, 7.0, 8.0, 7.0])
    >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x, y])
    >>> np.round(out, 4).tolist()
    [nan, nan, 0.9934, 0.9608, -0.189]
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from headwater.kernels import kernels_pairwise as kp
from headwater.kernels.ops import (
    LayoutOp,
    State,
    StateOp,
    StateOpSpec,
    _bad,
    _check_batch,
    _check_bool,
    _check_float,
    _check_int,
    _check_name,
    _check_window,
    _ewm_com,
    _f64,
    _Field,
    _grown_copy,
    _i64,
    make_state_op,
    register,
)

__all__ = [
    "CumNunique",
    "CumPairMoment",
    "CumPercentile",
    "CumSimple",
    "CumWeighted",
    "EwmCov",
    "Kama",
    "LinearTimeTrend",
    "Ma",
    "MovingMad",
    "MovingMoments",
    "MovingPairMoment",
    "MovingPercentile",
    "MovingRank",
    "MovingScan",
    "MovingWeighted",
    "TaCascade",
    "Trima",
]


class _ArrayOp(LayoutOp):
    """One-column operators by default; pair functions set ``n_args = 2``."""

    n_args = 1


def _check_min_periods(func: str, min_periods: int | None, window: int) -> None:
    if min_periods is not None:
        _check_int(
            func, "min_periods", min_periods, 1, window, f"min_periods must not exceed window={window}"
        )


def _minp(min_periods: int | None) -> tuple[int, bool]:
    """(min_periods, full_only): without min_periods the first window-1 rows of a key are NULL."""
    return (1, True) if min_periods is None else (min_periods, False)


# ---------------------------------------------------------------- two-argument functions


def _pair_moment_layout(width: int) -> dict[str, _Field]:
    return {
        "ring_x": _f64(shape=(width,)), "ring_y": _f64(shape=(width,)), "n_rows": _i64(), "wpos": _i64(),
        "nobs": _i64(), "n_inf": _i64(), "mean_x": _f64(0.0), "mean_y": _f64(0.0), "m2x": _f64(0.0),
        "m2y": _f64(0.0), "cxy": _f64(0.0), "run_x": _f64(), "run_xn": _i64(), "run_y": _f64(), "run_yn": _i64(),
    }  # fmt: skip


def _pair_moment(
    op: int, st: State, slots: np.ndarray, x: np.ndarray, y: np.ndarray, window: int, minp: int,
    full_only: bool, row_x: bool = False,
) -> list[np.ndarray]:  # fmt: skip
    out, slope = kp.pair_moment(
        op, slots, x, y, window, minp, full_only, row_x,
        st["ring_x"], st["ring_y"], st["n_rows"], st["wpos"], st["nobs"], st["n_inf"], st["mean_x"],
        st["mean_y"], st["m2x"], st["m2y"], st["cxy"], st["run_x"], st["run_xn"], st["run_y"], st["run_yn"],
    )  # fmt: skip
    return [out, slope] if op == kp.SLR else [out]


_MOMENT_OPS = {"corr": kp.CORR, "covar": kp.COVAR, "covarp": kp.COVARP, "beta": kp.BETA, "slr": kp.SLR}


def _regressor_last(args: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    # Columns are (y, x) for beta and slr; correlation and covariance are symmetric.
    first, second = args
    return second, first


@dataclass(frozen=True)
class MovingPairMoment(_ArrayOp):
    """``mcorr(x, y)``, ``mcovar(x, y)`` (sample), ``mcovarp(x, y)`` (population),
    ``mbeta(y, x)`` (OLS slope of y on x) and ``mslr(y, x)`` -> (intercept, slope) over count windows.

    Pairs are added and removed in O(1) (Welford co-moments). A window whose x
    (or y) values are all equal has exactly zero variance: ``mcorr`` and ``mbeta``
    output NULL there, the covariances 0. A window holding an infinite value
    outputs NULL. ``mcovar``/``mcorr``/``mbeta``/``mslr`` need two pairs.

    Example:
        >>> import numpy as np
        >>> op = MovingPairMoment("mslr", window=3)
        >>> y, x = np.array([1.0, 3.0, 5.0, 6.0]), np.array([0.0, 1.0, 2.0, 3.0])
        >>> _, (intercept, slope) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1, [y, x])
        >>> np.round(intercept, 4).tolist(), np.round(slope, 4).tolist()
        ([nan, nan, 1.0, 1.6667], [nan, nan, 2.0, 1.5])
    """

    name: str
    window: int
    min_periods: int | None = None
    n_args = 2

    _NAMES: ClassVar[tuple[str, ...]] = ("mcorr", "mcovar", "mcovarp", "mbeta", "mslr")

    def __post_init__(self) -> None:
        _check_name("MovingPairMoment", self.name, self._NAMES)
        _check_window(self.name, self.window)
        _check_min_periods(self.name, self.min_periods, self.window)
        object.__setattr__(self, "n_outputs", 2 if self.name == "mslr" else 1)

    def _layout(self) -> dict[str, _Field]:
        return _pair_moment_layout(self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        x, y = _regressor_last(args)
        minp, full_only = _minp(self.min_periods)
        return _pair_moment(_MOMENT_OPS[self.name[1:]], st, slots, x, y, self.window, minp, full_only)


@dataclass(frozen=True)
class CumPairMoment(_ArrayOp):
    """``cumcorr(x, y)``, ``cumcovar(x, y)``, ``cumcovarp(x, y)`` and ``cumbeta(y, x)`` per key.

    Rows where either value is NULL output the previous result.

    Example:
        >>> import numpy as np
        >>> op = CumPairMoment("cumcovar")
        >>> x, y = np.array([1.0, 2.0, np.nan, 4.0]), np.array([1.0, 3.0, 5.0, 5.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1, [x, y])
        >>> np.round(out, 4).tolist()
        [nan, 1.0, 1.0, 3.0]
    """

    name: str
    n_args = 2

    _NAMES: ClassVar[tuple[str, ...]] = ("cumcorr", "cumcovar", "cumcovarp", "cumbeta")

    def __post_init__(self) -> None:
        _check_name("CumPairMoment", self.name, self._NAMES)

    def _layout(self) -> dict[str, _Field]:
        return _pair_moment_layout(0)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        x, y = _regressor_last(args)
        return _pair_moment(_MOMENT_OPS[self.name[3:]], st, slots, x, y, 0, 1, False)


def _weighted_layout(width: int) -> dict[str, _Field]:
    return {
        "ring_x": _f64(shape=(width,)), "ring_w": _f64(shape=(width,)), "n_rows": _i64(), "wpos": _i64(),
        "nobs": _i64(), "n_inf": _i64(), "s_xw": _f64(0.0), "c_xw": _f64(0.0), "s_w": _f64(0.0), "c_w": _f64(0.0),
    }  # fmt: skip


def _weighted(
    op: int, st: State, slots: np.ndarray, args: list[np.ndarray], window: int, minp: int, full_only: bool
) -> list[np.ndarray]:
    x, w = args
    return [
        kp.weighted_sum(
            op, slots, x, w, window, minp, full_only, st["ring_x"], st["ring_w"], st["n_rows"], st["wpos"],
            st["nobs"], st["n_inf"], st["s_xw"], st["c_xw"], st["s_w"], st["c_w"],
        )
    ]  # fmt: skip


@dataclass(frozen=True)
class MovingWeighted(_ArrayOp):
    """``mwsum(x, w)`` (sum of x·w) and ``mwavg(x, w)`` (sum of x·w / sum of w) over count windows.

    O(1) per row with Kahan-compensated sums; ``mwavg`` is NULL when the weights
    sum to 0, and a window holding an infinite value outputs NULL.

    Example:
        >>> import numpy as np
        >>> op = MovingWeighted("mwavg", window=2)
        >>> x, w = np.array([1.0, 3.0, 5.0]), np.array([1.0, 3.0, np.nan])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(3, dtype=np.int64), 1, [x, w])
        >>> out.tolist()
        [nan, 2.5, 3.0]
    """

    name: str
    window: int
    min_periods: int | None = None
    n_args = 2

    _OPS: ClassVar[dict[str, int]] = {"mwsum": kp.WSUM, "mwavg": kp.WAVG}

    def __post_init__(self) -> None:
        _check_name("MovingWeighted", self.name, tuple(self._OPS))
        _check_window(self.name, self.window)
        _check_min_periods(self.name, self.min_periods, self.window)

    def _layout(self) -> dict[str, _Field]:
        return _weighted_layout(self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        minp, full_only = _minp(self.min_periods)
        return _weighted(self._OPS[self.name], st, slots, args, self.window, minp, full_only)


@dataclass(frozen=True)
class CumWeighted(_ArrayOp):
    """``cumwsum(x, w)`` and ``cumwavg(x, w)``; rows with a NULL output the previous result.

    Example:
        >>> import numpy as np
        >>> op = CumWeighted("cumwsum")
        >>> x, w = np.array([1.0, 3.0, 5.0]), np.array([2.0, np.nan, 1.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(3, dtype=np.int64), 1, [x, w])
        >>> out.tolist()
        [2.0, 2.0, 7.0]
    """

    name: str
    n_args = 2

    _OPS: ClassVar[dict[str, int]] = {"cumwsum": kp.WSUM, "cumwavg": kp.WAVG}

    def __post_init__(self) -> None:
        _check_name("CumWeighted", self.name, tuple(self._OPS))

    def _layout(self) -> dict[str, _Field]:
        return _weighted_layout(0)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return _weighted(self._OPS[self.name], st, slots, args, 0, 1, False)


@dataclass(frozen=True)
class EwmCov(_ArrayOp):
    """pandas-compatible ``ewm_cov(x, y)`` / ``ewm_corr(x, y)`` (DolphinDB ``ewmCov`` / ``ewmCorr``).

    Equal to ``x.ewm(com=com, adjust=..., ignore_na=..., min_periods=...).cov(y, bias=bias)``
    (or ``.corr(y)``) of each key's rows; a row is an observation when both values
    are non-NULL. ``make_state_op`` also accepts ``span``, ``half_life`` or ``alpha``.
    ``ewm_corr`` takes no ``bias``: it cancels out of a correlation.

    Example:
        >>> import numpy as np
        >>> op = EwmCov("ewm_cov", com=0.5)
        >>> x, y = np.array([0.0, 1.0, 2.0]), np.array([0.0, 2.0, 3.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(3, dtype=np.int64), 1, [x, y])
        >>> np.round(out, 6).tolist()
        [nan, 1.0, 1.115385]
    """

    name: str
    com: float
    adjust: bool = True
    ignore_na: bool = False
    min_periods: int = 0
    bias: bool = False
    n_args = 2

    def __post_init__(self) -> None:
        _check_name("EwmCov", self.name, ("ewm_cov", "ewm_corr"))
        _check_float(self.name, "com", self.com, lambda v: 0 <= v < math.inf, "a finite number >= 0")
        for flag in ("adjust", "ignore_na", "bias"):
            _check_bool(self.name, flag, getattr(self, flag))
        _check_int(self.name, "min_periods", self.min_periods, 0)
        if self.name == "ewm_corr" and self.bias:
            raise _bad(
                self.name, "bias", self.bias, "False",
                "bias scales covariance and both variances alike, so it cancels out of a correlation; drop it",
            )  # fmt: skip

    def _layout(self) -> dict[str, _Field]:
        return {
            "mean_x": _f64(), "mean_y": _f64(), "cov": _f64(0.0), "var_x": _f64(0.0), "var_y": _f64(0.0),
            "sum_wt": _f64(1.0), "sum_wt2": _f64(1.0), "old_wt": _f64(1.0), "nobs": _i64(),
        }  # fmt: skip

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        x, y = args
        out = kp.ewm_cov(
            slots, x, y, float(self.com), self.adjust, self.ignore_na, self.bias, max(self.min_periods, 1),
            self.name == "ewm_corr", st["mean_x"], st["mean_y"], st["cov"], st["var_x"], st["var_y"],
            st["sum_wt"], st["sum_wt2"], st["old_wt"], st["nobs"],
        )  # fmt: skip
        return [out]


# ---------------------------------------------------------------- TA-lib family


class _TaOp(_ArrayOp):
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
        _check_name("TaCascade", self.name, tuple(self._LEVELS))
        _check_window(self.name, self.window)
        if self.name == "t3":
            if self.vfactor is None:
                object.__setattr__(self, "vfactor", 0.7)
            _check_float(self.name, "vfactor", self.vfactor, lambda v: 0 <= v <= 1, "a number in [0, 1]")
        elif self.vfactor is not None:
            raise _bad(self.name, "vfactor", self.vfactor, "no vfactor", "only t3 takes a volume factor")

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

    def _layout(self) -> dict[str, _Field]:
        levels = self._LEVELS[self.name]
        return {
            "count": _i64(shape=(levels,)),
            "ema": _f64(shape=(levels,)),
            "total": _f64(0.0, shape=(levels,)),
        }

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        alpha = 2.0 / (self.window + 1)
        return [
            kp.ema_cascade(
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
        _check_window(self.name, self.window)

    def periods(self) -> tuple[int, int]:
        """Periods of the inner and the outer SMA."""
        if self.window % 2:
            half = (self.window + 1) // 2
            return half, half
        return self.window // 2, self.window // 2 + 1

    def _layout(self) -> dict[str, _Field]:
        p1, p2 = self.periods()
        return {
            "ring1": _f64(shape=(p1,)), "ring2": _f64(shape=(p2,)), "count": _i64(shape=(2,)),
            "total": _f64(0.0, shape=(2,)), "comp": _f64(0.0, shape=(2,)),
        }  # fmt: skip

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        p1, p2 = self.periods()
        return [kp.trima(slots, x, p1, p2, st["ring1"], st["ring2"], st["count"], st["total"], st["comp"])]


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
        _check_window(self.name, self.window)

    def _layout(self) -> dict[str, _Field]:
        return {"ring": _f64(shape=(self.window + 1,)), "count": _i64(), "sum_roc": _f64(0.0), "prev": _f64()}

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        return [kp.kama(slots, x, self.window, st["ring"], st["count"], st["sum_roc"], st["prev"])]


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
        _check_window(self.name, self.window)

    def _layout(self) -> dict[str, _Field]:
        return _pair_moment_layout(self.window)

    def _ta_kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> list[np.ndarray]:
        return _pair_moment(kp.SLR, st, slots, x, x, self.window, 1, True, row_x=True)


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
class Ma(StateOp):
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
        _check_window(self.name, self.window)
        choices = ", ".join(f"{k}={v}" for k, v in MA_TYPES.items())
        if self.ma_type == 7 and not isinstance(self.ma_type, bool):
            raise _bad(
                self.name, "ma_type", 7, f"one of {choices}",
                "7 is TA-lib's MAMA, which takes fast/slow limits instead of a window and is not supported",
            )  # fmt: skip
        _check_int(self.name, "ma_type", self.ma_type, 0, 8, f"valid types: {choices}")
        inner = "sma" if self.window == 1 else MA_TYPES[self.ma_type]
        object.__setattr__(self, "_inner", make_state_op(inner, {"window": self.window}))

    @property
    def inner(self) -> StateOp:
        """The operator that does the work."""
        op: StateOp = self.__dict__["_inner"]
        return op

    def init_state(self) -> dict[str, np.ndarray]:
        return self.inner.init_state()

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        return self.inner.run(state, slots, n_keys, args)


# ---------------------------------------------------------------- order statistics

_INTERPOLATIONS = {
    "linear": kp.I_LINEAR, "lower": kp.I_LOWER, "higher": kp.I_HIGHER, "nearest": kp.I_NEAREST,
    "midpoint": kp.I_MIDPOINT,
}  # fmt: skip
_TIES = {"min": kp.TIES_MIN, "max": kp.TIES_MAX, "average": kp.TIES_AVG}


def _check_choice(func: str, param: str, value: Any, choices: dict[str, int]) -> int:
    if not isinstance(value, str) or value not in choices:
        raise _bad(func, param, value, f"one of {', '.join(map(repr, choices))}", "")
    return choices[value]


def _check_percent(func: str, value: Any) -> float:
    return _check_float(func, "percent", value, lambda p: 0 <= p <= 100, "a number in [0, 100]")


def _ring_layout(window: int) -> dict[str, _Field]:
    return {"ring": _f64(shape=(window,)), "n_rows": _i64(), "wpos": _i64(), "nobs": _i64()}


class _SortedWindowOp(_ArrayOp):
    """A count window that keeps a sorted copy of its non-NULL values: O(window) per row (a memmove)."""

    window: int

    def _layout(self) -> dict[str, _Field]:
        return {**_ring_layout(self.window), "srt": _f64(shape=(self.window,))}

    def _sorted(
        self, st: State, slots: np.ndarray, x: np.ndarray, op: int, min_periods: int | None, *,
        ascending: bool = True, ignore_na: bool = True, ties: int = 0, percent: bool = False, q: float = 0.5,
        interpolation: int = 0,
    ) -> list[np.ndarray]:  # fmt: skip
        minp, full_only = _minp(min_periods)
        return [
            kp.sorted_window(
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
            _check_bool(self.name, flag, getattr(self, flag))
        _check_window(self.name, self.window)
        _check_choice(self.name, "ties_method", self.ties_method, _TIES)
        _check_min_periods(self.name, self.min_periods, self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return self._sorted(
            st, slots, args[0], kp.RANK, self.min_periods, ascending=self.ascending, ignore_na=self.ignore_na,
            ties=_TIES[self.ties_method], percent=self.percent,
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
        _check_name("MovingPercentile", self.name, ("mmed", "mpercentile"))
        _check_window(self.name, self.window)
        _check_percent(self.name, self.percent)
        _check_choice(self.name, "interpolation", self.interpolation, _INTERPOLATIONS)
        _check_min_periods(self.name, self.min_periods, self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return self._sorted(
            st, slots, args[0], kp.PCTL, self.min_periods, q=float(self.percent) / 100,
            interpolation=_INTERPOLATIONS[self.interpolation],
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
        _check_window(self.name, self.window)
        _check_bool(self.name, "use_median", self.use_median)
        _check_min_periods(self.name, self.min_periods, self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return self._sorted(
            st, slots, args[0], kp.MAD_MEDIAN if self.use_median else kp.MAD_MEAN, self.min_periods
        )


@dataclass(frozen=True)
class MovingScan(_ArrayOp):
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

    _OPS: ClassVar[dict[str, int]] = {"mprod": kp.PROD, "mmax_positive_streak": kp.POS_STREAK}

    def __post_init__(self) -> None:
        _check_name("MovingScan", self.name, tuple(self._OPS))
        _check_window(self.name, self.window)
        _check_min_periods(self.name, self.min_periods, self.window)

    def _layout(self) -> dict[str, _Field]:
        return _ring_layout(self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        minp, full_only = _minp(self.min_periods)
        return [
            kp.window_scan(
                self._OPS[self.name], slots, args[0], self.window, minp, full_only,
                st["ring"], st["n_rows"], st["wpos"], st["nobs"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class MovingMoments(_ArrayOp):
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

    _OPS: ClassVar[dict[str, int]] = {"mskew": kp.SKEW, "mkurtosis": kp.KURT}

    def __post_init__(self) -> None:
        _check_name("MovingMoments", self.name, tuple(self._OPS))
        _check_window(self.name, self.window)
        _check_bool(self.name, "biased", self.biased)
        _check_min_periods(self.name, self.min_periods, self.window)

    def _layout(self) -> dict[str, _Field]:
        return _ring_layout(self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        minp, full_only = _minp(self.min_periods)
        return [
            kp.moving_moments(
                self._OPS[self.name], slots, args[0], self.window, minp, full_only, self.biased,
                st["ring"], st["n_rows"], st["wpos"], st["nobs"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class CumSimple(_ArrayOp):
    """``cum_positive_streak(x)`` and ``cummdd(x, ratio=True)`` per key.

    ``cum_positive_streak``: the running sum of the current streak of positive
    values, 0 on a non-positive or NULL value. ``cummdd``: the running maximum
    drawdown, (peak − x)/peak with ``ratio`` (NULL rows and a zero peak are
    skipped) or peak − x without; 0 at the first value.

    Example:
        >>> import numpy as np
        >>> op = CumSimple("cummdd")
        >>> x = np.array([36.0, 96, 42, 100, 59, 86, 25, 64, 72])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(9, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [0.0, 0.0, 0.5625, 0.5625, 0.5625, 0.5625, 0.75, 0.75, 0.75]
    """

    name: str
    ratio: bool = True

    _OPS: ClassVar[dict[str, int]] = {"cum_positive_streak": 0, "cummdd": 1}

    def __post_init__(self) -> None:
        _check_name("CumSimple", self.name, tuple(self._OPS))
        _check_bool(self.name, "ratio", self.ratio)

    def _layout(self) -> dict[str, _Field]:
        return {"acc": _f64(0.0 if self.name == "cum_positive_streak" else math.nan), "peak": _f64()}

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return [kp.cum_simple(self._OPS[self.name], slots, args[0], self.ratio, st["acc"], st["peak"])]


def _pow2(n: int, floor: int = 8) -> int:
    return max(floor, 1 << max(int(n) - 1, 0).bit_length())


def _regrown(func: str, state: State, name: str, n_keys: int, width: int, fill: float | int) -> np.ndarray:
    """A copy of the growable ``state[name]`` with ``n_keys`` rows and at least ``width`` columns."""
    old = state.get(name)
    if old is None or old.ndim != 2:
        raise ValueError(
            f"state function {func!r}: state array {name!r} is missing or not 2-D; "
            "was the state made by another operator or parameter set?"
        )
    new = np.full((n_keys, max(width, old.shape[1])), fill, dtype=old.dtype)
    new[: old.shape[0], : old.shape[1]] = old
    return new


@dataclass(frozen=True)
class CumPercentile(StateOp):
    """``cumpercentile(x, percent, interpolation='linear')`` and ``cummed(x)`` per key.

    Two heaps split the key's values at the percentile, so a row costs
    O(log n). The state keeps every non-NULL value of the key: it grows with the
    key's history (each key's arrays are as wide as the longest one needs).

    Example:
        >>> import numpy as np
        >>> op = CumPercentile("cummed")
        >>> x = np.array([5.0, 1, np.nan, 3, 2])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [5.0, 3.0, 3.0, 3.0, 2.5]
    """

    name: str
    percent: float = 50.0
    interpolation: str = "linear"
    n_args = 1

    _FIXED: ClassVar[dict[str, _Field]] = {"n_lo": _i64(), "n_hi": _i64(), "last": _f64()}

    def __post_init__(self) -> None:
        _check_name("CumPercentile", self.name, ("cummed", "cumpercentile"))
        _check_percent(self.name, self.percent)
        _check_choice(self.name, "interpolation", self.interpolation, _INTERPOLATIONS)

    def init_state(self) -> dict[str, np.ndarray]:
        empty: State = {n: np.full((0, *f.shape), f.fill, dtype=f.dtype) for n, f in self._FIXED.items()}
        return {**empty, "lo": np.full((0, 8), np.nan), "hi": np.full((0, 8), np.nan)}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (x,) = _check_batch(self.name, self.n_args, slots, n_keys, args)
        st = _grown_copy(self.name, self._FIXED, state, n_keys)
        q = float(self.percent) / 100
        # widest heap any key needs by the end of the batch (each may hold one extra value while rebalancing)
        n_end = st["n_lo"] + st["n_hi"] + np.bincount(slots_[x == x], minlength=n_keys)
        want = np.floor(q * np.maximum(n_end - 1, 0)) + 1
        lo_need = int(np.minimum(n_end, want + 1).max(initial=0))
        hi_need = int(np.minimum(n_end, n_end - want + 1).max(initial=0))
        st["lo"] = _regrown(self.name, state, "lo", n_keys, _pow2(lo_need), np.nan)
        st["hi"] = _regrown(self.name, state, "hi", n_keys, _pow2(hi_need), np.nan)
        out = kp.cum_percentile(
            slots_,
            x,
            q,
            _INTERPOLATIONS[self.interpolation],
            st["lo"],
            st["hi"],
            st["n_lo"],
            st["n_hi"],
            st["last"],
        )
        return st, [out]


@dataclass(frozen=True)
class CumNunique(StateOp):
    """``cumnunique(x, ignore_null=False)``: the number of distinct values of the key so far.

    NULL counts as one value unless ``ignore_null``. Each key keeps an
    open-addressing hash set of its distinct values (O(1) per row); the state
    grows with the number of distinct values (each key's table is as wide as the
    fullest one needs).

    Example:
        >>> import numpy as np
        >>> op = CumNunique()
        >>> x = np.array([np.nan, 1, 2, -6, 0, 1, 2])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0]
    """

    ignore_null: bool = False
    name = "cumnunique"
    n_args = 1

    _FIXED: ClassVar[dict[str, _Field]] = {"count": _i64(), "has_null": _i64()}

    def __post_init__(self) -> None:
        _check_bool(self.name, "ignore_null", self.ignore_null)

    def init_state(self) -> dict[str, np.ndarray]:
        empty: State = {n: np.full((0, *f.shape), f.fill, dtype=f.dtype) for n, f in self._FIXED.items()}
        return {**empty, "table": np.full((0, 8), kp._EMPTY, dtype=np.int64)}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (x,) = _check_batch(self.name, self.n_args, slots, n_keys, args)
        st = _grown_copy(self.name, self._FIXED, state, n_keys)
        table = _regrown(self.name, state, "table", n_keys, 8, kp._EMPTY)
        bits = (x + 0.0).view(np.int64)  # + 0.0 turns -0.0 into 0.0: equal values, equal bits
        out = np.empty(x.shape[0])
        start = 0
        while True:
            start = kp.nunique_insert(
                slots_, x, bits, start, self.ignore_null, table, st["count"], st["has_null"], out
            )
            if start == x.shape[0]:
                break
            bigger = np.full((n_keys, 2 * table.shape[1]), kp._EMPTY, dtype=np.int64)
            kp.rehash(table, bigger)
            table = bigger
        st["table"] = table
        return st, [out]


# ---------------------------------------------------------------- registry


def _moving_pair_spec(
    name: str, cols: tuple[str, str], cls: type[MovingPairMoment | MovingWeighted]
) -> StateOpSpec:
    return StateOpSpec(
        name, f"{name}({', '.join(cols)}, window, min_periods=None)", ("window", "min_periods"), ("window",),
        lambda p: cls(name, p["window"], p.get("min_periods")), columns=cols,
        n_outputs=2 if name == "mslr" else 1,
    )  # fmt: skip


def _cum_pair_spec(name: str, cols: tuple[str, str], cls: type[CumPairMoment | CumWeighted]) -> StateOpSpec:
    return StateOpSpec(name, f"{name}({', '.join(cols)})", (), (), lambda p: cls(name), columns=cols)


def _ewm_cov_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: EwmCov(
        name, _ewm_com(p, name), p.get("adjust", True), p.get("ignore_na", False),
        p.get("min_periods", 0), p.get("bias", False),
    )  # fmt: skip


def _ta_cascade_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TaCascade(name, p["window"], p.get("vfactor"))


def _moments_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: MovingMoments(name, p["window"], p.get("biased", True), p.get("min_periods"))


def _specs() -> list[StateOpSpec]:
    xy, yx, xw = ("x", "y"), ("y", "x"), ("x", "w")
    ewm_params = ("com", "span", "half_life", "alpha", "adjust", "ignore_na", "min_periods", "bias")
    return [
        *(_moving_pair_spec(n, yx if n in ("mbeta", "mslr") else xy, MovingPairMoment)
          for n in MovingPairMoment._NAMES),
        *(_moving_pair_spec(n, xw, MovingWeighted) for n in MovingWeighted._OPS),
        *(_cum_pair_spec(n, yx if n == "cumbeta" else xy, CumPairMoment) for n in CumPairMoment._NAMES),
        *(_cum_pair_spec(n, xw, CumWeighted) for n in CumWeighted._OPS),
        *(
            StateOpSpec(
                n,
                f"{n}(x, y, com=|span=|half_life=|alpha=, adjust=True, ignore_na=False, min_periods=0"
                + (", bias=False)" if n == "ewm_cov" else ")"),
                ewm_params, (), _ewm_cov_builder(n), columns=xy,
            )
            for n in ("ewm_cov", "ewm_corr")
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
        StateOpSpec("cummed", "cummed(x)", (), (), lambda p: CumPercentile("cummed")),
        StateOpSpec(
            "cumpercentile", "cumpercentile(x, percent, interpolation='linear')", ("percent", "interpolation"),
            ("percent",), lambda p: CumPercentile("cumpercentile", p["percent"], p.get("interpolation", "linear")),
        ),
        StateOpSpec(
            "cumnunique", "cumnunique(x, ignore_null=False)", ("ignore_null",), (),
            lambda p: CumNunique(p.get("ignore_null", False)), result="long",
        ),
        StateOpSpec(
            "cum_positive_streak", "cum_positive_streak(x)", (), (), lambda p: CumSimple("cum_positive_streak"),
            result="same",
        ),
        StateOpSpec("cummdd", "cummdd(x, ratio=True)", ("ratio",), (), lambda p: CumSimple("cummdd", p.get("ratio", True))),
    ]  # fmt: skip


register(*_specs())
