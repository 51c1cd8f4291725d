"""Two-column moving and cumulative state functions: ``mcorr``, ``mcovar``, ``mcovarp``, ``mbeta``, ``mslr``,
``mwsum``, ``mwavg`` and ``cumcorr``, ``cumcovar``, ``cumcovarp``, ``cumbeta``, ``cumwsum``, ``cumwavg``.

A row counts only when both of its values are non-NULL; ``min_periods`` counts
such pairs. ``mbeta(y, x)``, ``mslr(y, x)`` and ``cumbeta(y, x)`` regress their
first column on the second. The cum-functions run the moving kernels with
``window == 0``. The co-moments (``pair_moment``) live in
:mod:`headwater.kernels.base.numeric`, shared with ``linear_time_trend``.

Example:
    >>> import numpy as np
    >>> op = MovingPairMoment("mcorr", window=3)
    >>> x = np.array([1.0, 2.0, 3.0, 4.0, 6.0])
    >>> y = np.array([2.0, 4.0, 7.0, 8.0, 7.0])
    >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x, y])
    >>> np.round(out, 4).tolist()
    [nan, nan, 0.9934, 0.9608, -0.189]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from headwater.kernels.base.checks import check_moving, check_name, resolve_min_periods
from headwater.kernels.base.numeric import (
    BETA,
    CORR,
    COVAR,
    COVARP,
    SLR,
    kahan_add,
    pair_moment_layout,
    run_pair_moment,
)
from headwater.kernels.base.operators import ArrayOp, Field, State, StateOpSpec, f64, i64

__all__ = ["SPECS", "CumPairMoment", "CumWeighted", "MovingPairMoment", "MovingWeighted"]


# Operations of weighted_sum.
WSUM, WAVG = 0, 1


_MOMENT_OPS = {"corr": CORR, "covar": COVAR, "covarp": COVARP, "beta": BETA, "slr": SLR}


def _regressor_last(args: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    # Columns are (y, x) for beta and slr; correlation and covariance are symmetric.
    first, second = args
    return second, first


@dataclass(frozen=True)
class MovingPairMoment(ArrayOp):
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
        check_moving(self, self._NAMES)
        object.__setattr__(self, "n_outputs", 2 if self.name == "mslr" else 1)

    def _layout(self) -> dict[str, Field]:
        return pair_moment_layout(self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        x, y = _regressor_last(args)
        minp, full_only = resolve_min_periods(self.min_periods)
        return run_pair_moment(_MOMENT_OPS[self.name[1:]], st, slots, x, y, self.window, minp, full_only)


@dataclass(frozen=True)
class CumPairMoment(ArrayOp):
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
        check_name("CumPairMoment", self.name, self._NAMES)

    def _layout(self) -> dict[str, Field]:
        return pair_moment_layout(0)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        x, y = _regressor_last(args)
        return run_pair_moment(_MOMENT_OPS[self.name[3:]], st, slots, x, y, 0, 1, False)


def _weighted_layout(width: int) -> dict[str, Field]:
    return {
        "ring_x": f64(shape=(width,)), "ring_w": f64(shape=(width,)), "n_rows": i64(), "wpos": i64(),
        "nobs": i64(), "n_inf": i64(), "s_xw": f64(0.0), "c_xw": f64(0.0), "s_w": f64(0.0), "c_w": f64(0.0),
    }  # fmt: skip


def _weighted(
    op: int, st: State, slots: np.ndarray, args: list[np.ndarray], window: int, minp: int, full_only: bool
) -> list[np.ndarray]:
    x, w = args
    return [
        weighted_sum(
            op, slots, x, w, window, minp, full_only, st["ring_x"], st["ring_w"], st["n_rows"], st["wpos"],
            st["nobs"], st["n_inf"], st["s_xw"], st["c_xw"], st["s_w"], st["c_w"],
        )
    ]  # fmt: skip


@dataclass(frozen=True)
class MovingWeighted(ArrayOp):
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

    _OPS: ClassVar[dict[str, int]] = {"mwsum": WSUM, "mwavg": WAVG}

    def __post_init__(self) -> None:
        check_moving(self, tuple(self._OPS))

    def _layout(self) -> dict[str, Field]:
        return _weighted_layout(self.window)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        minp, full_only = resolve_min_periods(self.min_periods)
        return _weighted(self._OPS[self.name], st, slots, args, self.window, minp, full_only)


@dataclass(frozen=True)
class CumWeighted(ArrayOp):
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

    _OPS: ClassVar[dict[str, int]] = {"cumwsum": WSUM, "cumwavg": WAVG}

    def __post_init__(self) -> None:
        check_name("CumWeighted", self.name, tuple(self._OPS))

    def _layout(self) -> dict[str, Field]:
        return _weighted_layout(0)

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return _weighted(self._OPS[self.name], st, slots, args, 0, 1, False)


# ---------------------------------------------------------------- kernels


@njit(cache=True, error_model="numpy")
def weighted_sum(
    op, slots, x, w, window, minp, full_only, ring_x, ring_w, n_rows, wpos, nobs, n_inf, s_xw, c_xw, s_w, c_w
):  # pragma: no cover - numba
    """wsum (sum of x*w) / wavg (sum of x*w over sum of w) of the key's valid pairs, Kahan-compensated."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        r = n_rows[k]
        xv = x[i]
        wv = w[i]
        if window > 0:
            pos = wpos[k]
            if r >= window:
                ox = ring_x[k, pos]
                ow = ring_w[k, pos]
                if ox == ox and ow == ow:
                    nobs[k] -= 1
                    p = ox * ow
                    if np.isfinite(p) and np.isfinite(ow):
                        kahan_add(k, -p, s_xw, c_xw)
                        kahan_add(k, -ow, s_w, c_w)
                    else:
                        n_inf[k] -= 1
            ring_x[k, pos] = xv
            ring_w[k, pos] = wv
            wpos[k] = pos + 1 if pos + 1 < window else 0
        if xv == xv and wv == wv:
            nobs[k] += 1
            p = xv * wv
            if np.isfinite(p) and np.isfinite(wv):
                kahan_add(k, p, s_xw, c_xw)
                kahan_add(k, wv, s_w, c_w)
            else:
                n_inf[k] += 1
        n_rows[k] = r + 1
        cnt = nobs[k]
        if cnt == n_inf[k]:
            # no finite pair left: drop accumulated rounding error
            s_xw[k] = 0.0
            c_xw[k] = 0.0
            s_w[k] = 0.0
            c_w[k] = 0.0
        if cnt == 0 or cnt < minp or (full_only and r + 1 < window) or n_inf[k] > 0:
            out[i] = np.nan
        elif op == WSUM:
            out[i] = s_xw[k]
        else:
            out[i] = s_xw[k] / s_w[k] if s_w[k] != 0.0 else np.nan
    return out


# ---------------------------------------------------------------- specs


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


_XY, _YX, _XW = ("x", "y"), ("y", "x"), ("x", "w")

SPECS: tuple[StateOpSpec, ...] = (
    *(_moving_pair_spec(n, _YX if n in ("mbeta", "mslr") else _XY, MovingPairMoment)
      for n in MovingPairMoment._NAMES),
    *(_moving_pair_spec(n, _XW, MovingWeighted) for n in MovingWeighted._OPS),
    *(_cum_pair_spec(n, _YX if n == "cumbeta" else _XY, CumPairMoment) for n in CumPairMoment._NAMES),
    *(_cum_pair_spec(n, _XW, CumWeighted) for n in CumWeighted._OPS),
)  # fmt: skip
