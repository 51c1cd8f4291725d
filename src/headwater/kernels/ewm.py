"""Exponentially weighted state functions: ``ewm_mean``, ``ewm_var``, ``ewm_std``, ``ewm_cov``, ``ewm_corr``.

pandas-compatible (DolphinDB ``ewmMean``, ``ewmVar``, ...): each takes exactly one
of ``com``, ``span``, ``half_life`` or ``alpha``, and ``adjust``, ``ignore_na``,
``min_periods`` (and ``bias``) as pandas does. The kernels repeat pandas' own
arithmetic (window/aggregations.pyx), so results match it to the last bit. The
two-column ones use a row only when both of its values are non-NULL.

TA-lib's exponential averages (``ema``, ``wilder``, ``gema``, ``dema``...) are in
:mod:`headwater.kernels.ta`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numba import njit

from headwater.errors import GraphDefinitionError
from headwater.kernels.base.checks import bad, check_bool, check_float, check_int, check_name
from headwater.kernels.base.operators import Field, KernelOp, LayoutOp, State, StateOp, StateOpSpec, f64, i64

__all__ = ["SPECS", "EwmCov", "EwmMean", "EwmVar"]


@dataclass(frozen=True)
class EwmMean(KernelOp):
    """pandas-compatible ``ewm_mean`` (DolphinDB ``ewmMean``), per key.

    Equal to ``Series.ewm(com=com, adjust=..., ignore_na=..., min_periods=...).mean()``
    of each key's rows. A NULL row outputs the previous value; with ``ignore_na=False``
    it still decays the weight of older values. ``make_state_op`` also accepts
    ``span``, ``half_life`` or ``alpha`` and converts them to ``com`` as pandas does.

    Example:
        >>> import numpy as np
        >>> op = EwmMean(com=0.5)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1,
        ...                    [np.array([0.0, 1.0, 2.0, np.nan, 4.0])])
        >>> np.round(out, 6).tolist()
        [0.0, 0.75, 1.615385, 1.615385, 3.670213]
    """

    com: float
    adjust: bool = True
    ignore_na: bool = False
    min_periods: int = 0
    name = "ewm_mean"

    def __post_init__(self) -> None:
        _check_ewm(self, ("adjust", "ignore_na"))

    def _layout(self) -> dict[str, Field]:
        return {"weighted": f64(), "old_wt": f64(1.0), "nobs": i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        minp = max(self.min_periods, 1)  # pandas never reports before the first observation
        return ewm_mean(
            slots, x, float(self.com), self.adjust, self.ignore_na, minp,
            st["weighted"], st["old_wt"], st["nobs"],
        )  # fmt: skip


def _check_com(func: str, com: Any) -> float:
    return check_float(func, "com", com, lambda c: 0 <= c < math.inf, "a finite number >= 0")


def _check_ewm(op: EwmMean | _EwmMoment, flags: tuple[str, ...]) -> None:
    """The checks of every EWM operator: ``com``, the boolean ``flags`` and ``min_periods``."""
    _check_com(op.name, op.com)
    for flag in flags:
        check_bool(op.name, flag, getattr(op, flag))
    check_int(op.name, "min_periods", op.min_periods, 0)


def _ewm_com(params: dict[str, Any], func: str = "ewm_mean") -> float:
    """Center of mass from exactly one of com / span / half_life / alpha, with pandas' formulas."""
    given = [p for p in ("com", "span", "half_life", "alpha") if p in params]
    if len(given) != 1:
        raise GraphDefinitionError(
            f"state function {func!r}: pass exactly one of com=, span=, half_life= or alpha=; "
            f"got {', '.join(given) or 'none'}. E.g. {func}(x, span=20)"
        )
    (p,) = given
    v = params[p]
    if p == "com":
        return _check_com(func, v)
    if p == "span":
        span = check_float(func, p, v, lambda s: 1 <= s < math.inf, "a finite number >= 1")
        return (span - 1) / 2
    if p == "half_life":
        hl = check_float(func, p, v, lambda h: 0 < h < math.inf, "a finite number > 0")
        return 1 / (1 - np.exp(np.log(0.5) / hl)) - 1
    alpha = check_float(func, p, v, lambda a: 0 < a <= 1, "a number in (0, 1]")
    return (1 - alpha) / alpha


@dataclass(frozen=True)
class _EwmMoment(LayoutOp):
    """The parameters and checks of the EWM (co-)moments, :class:`EwmVar` and :class:`EwmCov`."""

    name: str
    com: float
    adjust: bool = True
    ignore_na: bool = False
    min_periods: int = 0
    bias: bool = False
    n_args = 1

    _NAMES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        check_name(type(self).__name__, self.name, self._NAMES)
        _check_ewm(self, ("adjust", "ignore_na", "bias"))


@dataclass(frozen=True)
class EwmVar(_EwmMoment):
    """pandas-compatible ``ewm_var`` / ``ewm_std`` (DolphinDB ``ewmVar`` / ``ewmStd``), per key.

    Equal to ``Series.ewm(com=com, ...).var(bias=bias)`` (or ``.std``) of each key's
    rows; parameters as for :class:`EwmMean`, plus ``bias`` (False: unbiased).

    Example:
        >>> import numpy as np
        >>> op = EwmVar("ewm_var", com=0.5)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(3, dtype=np.int64), 1,
        ...                    [np.array([0.0, 1.0, 2.0])])
        >>> np.round(out, 6).tolist()
        [nan, 0.5, 0.846154]
    """

    _NAMES: ClassVar[tuple[str, ...]] = ("ewm_var", "ewm_std")

    def _layout(self) -> dict[str, Field]:
        return {
            "mean": f64(), "cov": f64(0.0), "sum_wt": f64(1.0), "sum_wt2": f64(1.0),
            "old_wt": f64(1.0), "nobs": i64(),
        }  # fmt: skip

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return [
            ewm_var(
                slots, args[0], float(self.com), self.adjust, self.ignore_na, self.bias, max(self.min_periods, 1),
                self.name == "ewm_std", st["mean"], st["cov"], st["sum_wt"], st["sum_wt2"], st["old_wt"],
                st["nobs"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class EwmCov(_EwmMoment):
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

    n_args = 2

    _NAMES: ClassVar[tuple[str, ...]] = ("ewm_cov", "ewm_corr")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.name == "ewm_corr" and self.bias:
            raise bad(
                self.name, "bias", self.bias, "False",
                "bias scales covariance and both variances alike, so it cancels out of a correlation; drop it",
            )  # fmt: skip

    def _layout(self) -> dict[str, Field]:
        return {
            "mean_x": f64(), "mean_y": f64(), "cov": f64(0.0), "var_x": f64(0.0), "var_y": f64(0.0),
            "sum_wt": f64(1.0), "sum_wt2": f64(1.0), "old_wt": f64(1.0), "nobs": i64(),
        }  # fmt: skip

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        x, y = args
        out = ewm_cov(
            slots, x, y, float(self.com), self.adjust, self.ignore_na, self.bias, max(self.min_periods, 1),
            self.name == "ewm_corr", st["mean_x"], st["mean_y"], st["cov"], st["var_x"], st["var_y"],
            st["sum_wt"], st["sum_wt2"], st["old_wt"], st["nobs"],
        )  # fmt: skip
        return [out]


# ---------------------------------------------------------------- kernels

# What a row does to a key's EWM state (see _ewm_row).
_EWM_KEEP, _EWM_DECAY, _EWM_ADD, _EWM_FIRST = 0, 1, 2, 3


@njit(cache=True, inline="always")
def _ewm_weights(com, adjust):  # pragma: no cover - numba
    """pandas' decay factor ``1 - alpha`` and the weight of a new observation."""
    alpha = 1.0 / (1.0 + com)
    return 1.0 - alpha, 1.0 if adjust else alpha


@njit(cache=True, inline="always")
def _ewm_row(k, is_obs, started, ignore_na, nobs):  # pragma: no cover - numba
    """Count an observation of key k and say what the row does to its state.

    Before the first observation (``started`` False) a NULL leaves the state as it
    is and an observation starts it (_EWM_FIRST). After it, an observation is
    added (_EWM_ADD) and a NULL decays the old weights unless ``ignore_na``.
    """
    if is_obs:
        nobs[k] += 1
    if started:
        if is_obs:
            return _EWM_ADD
        return _EWM_KEEP if ignore_na else _EWM_DECAY
    return _EWM_FIRST if is_obs else _EWM_KEEP


@njit(cache=True, inline="always")
def _ewm_mean_step(m, cur, ow, new_wt):  # pragma: no cover - numba
    """The weighted mean after adding ``cur`` with weight ``new_wt`` to ``m`` of weight ``ow``."""
    if m != cur:  # keeps a constant series exactly constant
        m = (ow * m + new_wt * cur) / (ow + new_wt)
    return m


@njit(cache=True, inline="always")
def _ewm_comoment(c, ow, new_wt, old_ma, ma, a, old_mb, mb, b):  # pragma: no cover - numba
    """pandas' ewmcov update of a co-moment ``c`` of (a, b) whose means moved from old_m* to m*."""
    return (ow * (c + (old_ma - ma) * (old_mb - mb)) + new_wt * ((a - ma) * (b - mb))) / (ow + new_wt)


@njit(cache=True, inline="always")
def _ewm_age(k, act, f, new_wt, adjust, sum_wt, sum_wt2, old_wt):  # pragma: no cover - numba
    """Decay key k's weights by ``f`` and, on _EWM_ADD, add ``new_wt``; return the decayed old weight.

    A row that keeps or starts the state leaves the weights alone (and returns 0).
    """
    if act == _EWM_KEEP or act == _EWM_FIRST:  # noqa: SIM109 - Numba compiles `in` on a tuple slowly
        return 0.0
    sw = sum_wt[k] * f
    sw2 = sum_wt2[k] * (f * f)
    ow = old_wt[k] * f
    decayed = ow
    if act == _EWM_ADD:
        sw += new_wt
        sw2 += new_wt * new_wt
        ow += new_wt
        if not adjust:
            sw /= ow
            sw2 /= ow * ow
            ow = 1.0
    sum_wt[k] = sw
    sum_wt2[k] = sw2
    old_wt[k] = ow
    return decayed


@njit(cache=True, inline="always")
def _ewm_moment(c, n_obs, minp, bias, sw, sw2):  # pragma: no cover - numba
    """An EWM co-moment ``c`` as pandas reports it: NULL below ``minp`` observations, else biased or
    with pandas' bias correction (NULL while that is undefined)."""
    if n_obs < minp:
        return np.nan
    if bias:
        return c
    num = sw * sw
    den = num - sw2
    return (num / den) * c if den > 0 else np.nan


@njit(cache=True)
def ewm_mean(slots, x, com, adjust, ignore_na, minp, weighted, old_wt, nobs):  # pragma: no cover - numba
    """pandas ``Series.ewm(com=...).mean()`` per key; state: weighted, old_wt, nobs."""
    n = x.shape[0]
    out = np.empty(n)
    # Same arithmetic as pandas' window/aggregations.pyx so results match to the last bit.
    f, new_wt = _ewm_weights(com, adjust)
    for i in range(n):
        k = slots[i]
        cur = x[i]
        w = weighted[k]
        act = _ewm_row(k, cur == cur, w == w, ignore_na, nobs)
        if act == _EWM_FIRST:
            w = cur
        elif act != _EWM_KEEP:
            ow = old_wt[k] * f
            if act == _EWM_ADD:
                w = _ewm_mean_step(w, cur, ow, new_wt)
                ow = ow + new_wt if adjust else 1.0
            old_wt[k] = ow
        weighted[k] = w
        out[i] = w if nobs[k] >= minp else np.nan
    return out


@njit(cache=True)
def ewm_var(
    slots, x, com, adjust, ignore_na, bias, minp, take_sqrt, mean, cov, sum_wt, sum_wt2, old_wt, nobs
):  # pragma: no cover - numba
    """pandas ``Series.ewm(com=...).var(bias=...)`` (or ``.std``) per key."""
    n = x.shape[0]
    out = np.empty(n)
    # Same arithmetic as pandas' ewmcov with x = y.
    f, new_wt = _ewm_weights(com, adjust)
    for i in range(n):
        k = slots[i]
        cur = x[i]
        m = mean[k]
        act = _ewm_row(k, cur == cur, m == m, ignore_na, nobs)
        ow = _ewm_age(k, act, f, new_wt, adjust, sum_wt, sum_wt2, old_wt)
        if act == _EWM_FIRST:
            m = cur
        elif act == _EWM_ADD:
            old_m = m
            m = _ewm_mean_step(old_m, cur, ow, new_wt)
            cov[k] = _ewm_comoment(cov[k], ow, new_wt, old_m, m, cur, old_m, m, cur)
        mean[k] = m
        res = _ewm_moment(cov[k], nobs[k], minp, bias, sum_wt[k], sum_wt2[k])
        if take_sqrt and res == res:
            res = np.sqrt(res) if res > 0 else 0.0
        out[i] = res
    return out


@njit(cache=True, error_model="numpy")
def ewm_cov(
    slots, x, y, com, adjust, ignore_na, bias, minp, corr,
    mean_x, mean_y, cov, var_x, var_y, sum_wt, sum_wt2, old_wt, nobs,
):  # pragma: no cover - numba  # fmt: skip
    """pandas ``Series.ewm(com=...).cov(other, bias=...)`` or ``.corr(other)`` per key.

    The same arithmetic as pandas' ``ewmcov`` (window/aggregations.pyx); ``corr``
    divides the biased covariance by the square root of the biased variances.
    """
    n = x.shape[0]
    out = np.empty(n)
    f, new_wt = _ewm_weights(com, adjust)
    for i in range(n):
        k = slots[i]
        cx = x[i]
        cy = y[i]
        mx = mean_x[k]
        act = _ewm_row(k, cx == cx and cy == cy, mx == mx, ignore_na, nobs)
        if act == _EWM_FIRST:
            mx = cx
            mean_y[k] = cy
        elif act != _EWM_KEEP:
            ow = _ewm_age(k, act, f, new_wt, adjust, sum_wt, sum_wt2, old_wt)
            if act == _EWM_ADD:
                old_mx = mx
                old_my = mean_y[k]
                mx = _ewm_mean_step(old_mx, cx, ow, new_wt)
                my = _ewm_mean_step(old_my, cy, ow, new_wt)
                cov[k] = _ewm_comoment(cov[k], ow, new_wt, old_mx, mx, cx, old_my, my, cy)
                if corr:
                    var_x[k] = _ewm_comoment(var_x[k], ow, new_wt, old_mx, mx, cx, old_mx, mx, cx)
                    var_y[k] = _ewm_comoment(var_y[k], ow, new_wt, old_my, my, cy, old_my, my, cy)
                mean_y[k] = my
        mean_x[k] = mx
        if corr and nobs[k] >= minp:
            d = np.sqrt(var_x[k]) * np.sqrt(var_y[k])
            res = cov[k] / d if d > 0.0 else np.nan
        else:
            res = _ewm_moment(cov[k], nobs[k], minp, bias, sum_wt[k], sum_wt2[k])
        out[i] = res
    return out


# ---------------------------------------------------------------- specs


def _ewm_builder(cls: type[_EwmMoment], name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: cls(
        name, _ewm_com(p, name), p.get("adjust", True), p.get("ignore_na", False),
        p.get("min_periods", 0), p.get("bias", False),
    )  # fmt: skip


_EWM_PARAMS = ("com", "span", "half_life", "alpha", "adjust", "ignore_na", "min_periods", "bias")

SPECS: tuple[StateOpSpec, ...] = (
    StateOpSpec(
        "ewm_mean",
        "ewm_mean(x, com=|span=|half_life=|alpha=, adjust=True, ignore_na=False, min_periods=0)",
        ("com", "span", "half_life", "alpha", "adjust", "ignore_na", "min_periods"),
        (),
        lambda p: EwmMean(
            _ewm_com(p), p.get("adjust", True), p.get("ignore_na", False), p.get("min_periods", 0)
        ),
    ),
    *(
        StateOpSpec(
            n,
            f"{n}(x, com=|span=|half_life=|alpha=, adjust=True, ignore_na=False, min_periods=0, bias=False)",
            _EWM_PARAMS,
            (),
            _ewm_builder(EwmVar, n),
        )
        for n in ("ewm_var", "ewm_std")
    ),
    *(
        StateOpSpec(
            n,
            f"{n}(x, y, com=|span=|half_life=|alpha=, adjust=True, ignore_na=False, min_periods=0"
            + (", bias=False)" if n == "ewm_cov" else ")"),
            _EWM_PARAMS, (), _ewm_builder(EwmCov, n), columns=("x", "y"),
        )
        for n in ("ewm_cov", "ewm_corr")
    ),
)  # fmt: skip
