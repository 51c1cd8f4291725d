"""Incremental per-key state operators of the reactive state engine.

A stream task holds many keys. Each micro-batch delivers the rows of all its
keys in arrival order; a :class:`StateOp` processes the whole batch in one
Numba loop, indexing compact per-key state arrays by key slot. Results do not
depend on how rows are split into batches (streaming == batch), and NaN means
NULL in every input, output and state array.

Semantics follow DolphinDB's state functions (reference part D); names are the
snake_case of DolphinDB's (``ewmMean`` -> ``ewm_mean``, ``percentChange`` ->
``percent_change``), and so are parameter names (``minPeriods`` ->
``min_periods``, ``halfLife`` -> ``half_life``). ``STATE_OPS`` lists them all.

``run`` copies the state once per call (O(n_keys x window) for window
functions) and updates the copy in place, so the caller's dict stays a valid
snapshot of the last committed batch. For big windows and small batches that
copy, not the kernel, dominates; prefer larger micro-batches there.

Example:
    >>> import numpy as np
    >>> op = make_state_op("msum", {"window": 3})
    >>> state, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1,
    ...                        [np.array([2.0, 1.0, 3.0, 7.0])])
    >>> out.tolist()
    [nan, nan, 6.0, 11.0]
"""

from __future__ import annotations

import abc
import difflib
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, NamedTuple

import numpy as np

from headwater.errors import GraphDefinitionError, UnknownFunctionError
from headwater.kernels import kernels

__all__ = [
    "MAX_WINDOW",
    "STATE_OPS",
    "CumVar",
    "Cumulative",
    "EwmMean",
    "EwmVar",
    "Ffill",
    "LayoutOp",
    "MovingExtreme",
    "MovingPick",
    "MovingSum",
    "MovingVar",
    "PrevState",
    "Shift",
    "StateOp",
    "StateOpSpec",
    "TaEma",
    "TaMovingAverage",
    "make_state_op",
]

MAX_WINDOW = 102_400
"""Largest moving window DolphinDB allows in streaming engines."""

State = dict[str, np.ndarray]


class StateOp(abc.ABC):
    """One stateful operator instance (e.g. ``ewm_mean(x, span=20)``) over all keys of a stream task."""

    name: str
    n_args: int
    n_outputs: int = 1

    @abc.abstractmethod
    def init_state(self) -> dict[str, np.ndarray]:
        """Return the state for zero keys; the first axis of every array is the key slot."""

    @abc.abstractmethod
    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        """Process one batch; return the new state and one float64 array per output.

        ``slots`` holds the key slot (``0..n_keys-1``) of every row; keys first seen
        in this batch have slots at the end, and the state grows to ``n_keys``.
        The arrays of ``state`` are never modified, so a caller may keep it as the
        snapshot of the previous batch.
        """


class _Field(NamedTuple):
    shape: tuple[int, ...]  # per-key shape (after the key axis)
    dtype: type
    fill: float


def _f64(fill: float = math.nan, shape: tuple[int, ...] = ()) -> _Field:
    return _Field(shape, np.float64, fill)


def _i64(shape: tuple[int, ...] = ()) -> _Field:
    return _Field(shape, np.int64, 0)


class LayoutOp(StateOp):
    """An operator with a fixed set of per-key state arrays whose work is kernel calls over the batch.

    Subclasses declare the arrays (``_layout``) and compute the outputs (``_compute``) on a freshly
    grown copy of the state, which they may update in place.
    """

    @abc.abstractmethod
    def _layout(self) -> dict[str, _Field]:
        """Name, per-key shape, dtype and initial value of every state array."""

    @abc.abstractmethod
    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        """Run the kernels; they may update the (freshly copied) arrays of ``st`` in place."""

    def init_state(self) -> dict[str, np.ndarray]:
        return {name: np.full((0, *f.shape), f.fill, dtype=f.dtype) for name, f in self._layout().items()}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, cols = _check_batch(self.name, self.n_args, slots, n_keys, args)
        st = _grown_copy(self.name, self._layout(), state, n_keys)
        return st, self._compute(st, slots_, cols)


class _KernelOp(LayoutOp):
    """A one-argument, one-output operator whose work is one kernel call over the batch."""

    n_args = 1

    @abc.abstractmethod
    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Run the kernel; it may update the (freshly copied) arrays of ``st`` in place."""

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        return [self._kernel(st, slots, cols[0])]


def _check_batch(
    func: str, n_args: int, slots: np.ndarray, n_keys: int, args: list[np.ndarray]
) -> tuple[np.ndarray, list[np.ndarray]]:
    if len(args) != n_args:
        raise GraphDefinitionError(
            f"state function {func!r}: got {len(args)} column arguments, expected {n_args}"
        )
    slots_ = np.ascontiguousarray(slots, dtype=np.int64)
    if slots_.ndim != 1:
        raise ValueError(f"state function {func!r}: slots must be 1-D, got shape {slots_.shape}")
    if slots_.size and (slots_.min() < 0 or slots_.max() >= n_keys):
        raise ValueError(
            f"state function {func!r}: key slots must lie in [0, n_keys={n_keys}); "
            f"got range [{slots_.min()}, {slots_.max()}]"
        )
    cols = [np.ascontiguousarray(a, dtype=np.float64) for a in args]
    for i, c in enumerate(cols):
        if c.shape != slots_.shape:
            raise ValueError(
                f"state function {func!r}: argument {i} has shape {c.shape}, expected {slots_.shape} "
                "(one value per row)"
            )
    return slots_, cols


def _grown_copy(func: str, layout: dict[str, _Field], state: State, n_keys: int) -> State:
    # Always copy: the caller may keep the old dict as the last committed snapshot.
    out: State = {}
    for name, f in layout.items():
        old = state.get(name)
        if old is None or old.shape[1:] != f.shape or old.dtype != f.dtype:
            got = None if old is None else f"{old.dtype}{old.shape}"
            raise ValueError(
                f"state function {func!r}: state array {name!r} is {got}, expected "
                f"{np.dtype(f.dtype)}(n_keys, {', '.join(map(str, f.shape))}); "
                "was the state made by another operator or parameter set?"
            )
        n_old = old.shape[0]
        if n_keys < n_old:
            raise ValueError(
                f"state function {func!r}: n_keys={n_keys} is less than the {n_old} keys in state"
            )
        new: np.ndarray = np.empty((n_keys, *f.shape), dtype=f.dtype)
        new[:n_old] = old
        new[n_old:] = f.fill
        out[name] = new
    return out


# ---------------------------------------------------------------- parameter checks


def _bad(func: str, param: str, got: Any, expected: str, fix: str) -> GraphDefinitionError:
    return GraphDefinitionError(
        f"state function {func!r}: {param}={got!r} is invalid; expected {expected}. {fix}"
    )


def _check_int(func: str, param: str, value: Any, lo: int, hi: int | None = None, fix: str = "") -> int:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)
    if not ok or value < lo or (hi is not None and value > hi):
        bound = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise _bad(func, param, value, bound, fix)
    return int(value)


def _check_bool(func: str, param: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise _bad(func, param, value, "True or False", f"e.g. {func}(x, ..., {param}=True)")
    return bool(value)


def _check_float(func: str, param: str, value: Any, ok: Callable[[float], bool], expected: str) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool | np.bool_) or not ok(float(value)):
        raise _bad(func, param, value, expected, "")
    return float(value)


def _check_window(func: str, window: Any) -> int:
    return _check_int(func, "window", window, 1, MAX_WINDOW, f"e.g. {func}(x, window=20)")


def _check_name(cls: str, name: str, allowed: tuple[str, ...]) -> None:
    if name not in allowed:
        raise GraphDefinitionError(f"{cls}: name {name!r} is not one of {', '.join(allowed)}")


# ---------------------------------------------------------------- operators


@dataclass(frozen=True)
class EwmMean(_KernelOp):
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
        _check_float(self.name, "com", self.com, lambda v: 0 <= v < math.inf, "a finite number >= 0")
        _check_bool(self.name, "adjust", self.adjust)
        _check_bool(self.name, "ignore_na", self.ignore_na)
        _check_int(self.name, "min_periods", self.min_periods, 0)

    def _layout(self) -> dict[str, _Field]:
        return {"weighted": _f64(), "old_wt": _f64(1.0), "nobs": _i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        minp = max(self.min_periods, 1)  # pandas never reports before the first observation
        return kernels.ewm_mean(
            slots, x, float(self.com), self.adjust, self.ignore_na, minp,
            st["weighted"], st["old_wt"], st["nobs"],
        )  # fmt: skip


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
        return _check_float(func, p, v, lambda c: 0 <= c < math.inf, "a finite number >= 0")
    if p == "span":
        span = _check_float(func, p, v, lambda s: 1 <= s < math.inf, "a finite number >= 1")
        return (span - 1) / 2
    if p == "half_life":
        hl = _check_float(func, p, v, lambda h: 0 < h < math.inf, "a finite number > 0")
        return 1 / (1 - np.exp(np.log(0.5) / hl)) - 1
    alpha = _check_float(func, p, v, lambda a: 0 < a <= 1, "a number in (0, 1]")
    return (1 - alpha) / alpha


@dataclass(frozen=True)
class EwmVar(_KernelOp):
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

    name: str
    com: float
    adjust: bool = True
    ignore_na: bool = False
    min_periods: int = 0
    bias: bool = False

    def __post_init__(self) -> None:
        _check_name("EwmVar", self.name, ("ewm_var", "ewm_std"))
        _check_float(self.name, "com", self.com, lambda v: 0 <= v < math.inf, "a finite number >= 0")
        for flag in ("adjust", "ignore_na", "bias"):
            _check_bool(self.name, flag, getattr(self, flag))
        _check_int(self.name, "min_periods", self.min_periods, 0)

    def _layout(self) -> dict[str, _Field]:
        return {
            "mean": _f64(), "cov": _f64(0.0), "sum_wt": _f64(1.0), "sum_wt2": _f64(1.0),
            "old_wt": _f64(1.0), "nobs": _i64(),
        }  # fmt: skip

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return kernels.ewm_var(
            slots, x, float(self.com), self.adjust, self.ignore_na, self.bias, max(self.min_periods, 1),
            self.name == "ewm_std", st["mean"], st["cov"], st["sum_wt"], st["sum_wt2"], st["old_wt"], st["nobs"],
        )  # fmt: skip


@dataclass(frozen=True)
class TaEma(_KernelOp):
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
        _check_name("TaEma", self.name, self._NAMES)
        _check_window(self.name, self.window)
        if self.name == "gema":
            if self.alpha is None:
                raise _bad(
                    self.name, "alpha", None, "a number in (0, 1)", "e.g. gema(x, window=10, alpha=0.2)"
                )
            _check_float(self.name, "alpha", self.alpha, lambda a: 0 < a < 1, "a number in (0, 1)")
        elif self.alpha is not None:
            raise _bad(
                self.name, "alpha", self.alpha, "no alpha", f"{self.name} derives alpha from window; use gema"
            )
        _check_bool(self.name, "warmup", self.warmup)
        if self.warmup and self.name != "ema":
            raise _bad(self.name, "warmup", self.warmup, "False", "only ema supports warmup=True")

    @property
    def effective_alpha(self) -> float:
        """The smoothing factor α of the recursion."""
        if self.name == "ema":
            return 2.0 / (self.window + 1)
        if self.name == "wilder":
            return 1.0 / self.window
        assert self.alpha is not None
        return float(self.alpha)

    def _layout(self) -> dict[str, _Field]:
        return {"ema": _f64(), "count": _i64(), "total": _f64(0.0)}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return kernels.ta_ema(
            slots, x, self.window, self.effective_alpha, self.warmup, st["ema"], st["count"], st["total"]
        )


@dataclass(frozen=True)
class TaMovingAverage(_KernelOp):
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

    _OPS: ClassVar[dict[str, int]] = {"sma": kernels.TA_SMA, "wma": kernels.TA_WMA}

    def __post_init__(self) -> None:
        _check_name("TaMovingAverage", self.name, tuple(self._OPS))
        _check_window(self.name, self.window)

    def _layout(self) -> dict[str, _Field]:
        return {
            "ring": _f64(shape=(self.window,)), "count": _i64(), "wpos": _i64(),
            "total": _f64(0.0), "comp": _f64(0.0),
        }  # fmt: skip

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return kernels.ta_window(
            self._OPS[self.name], slots, x, self.window,
            st["ring"], st["count"], st["wpos"], st["total"], st["comp"],
        )  # fmt: skip


@dataclass(frozen=True)
class _MovingOp(_KernelOp):
    """Count window over the last ``window`` rows of a key, current row included.

    Without ``min_periods`` the first ``window - 1`` rows of a key output NULL and
    later rows aggregate the window's non-NULL values (NULL when there are none).
    With ``min_periods`` a row outputs NULL while the window holds fewer than
    ``min_periods`` non-NULL values.
    """

    name: str
    window: int
    min_periods: int | None = None

    _NAMES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        _check_name(type(self).__name__, self.name, self._NAMES)
        _check_window(self.name, self.window)
        if self.min_periods is not None:
            _check_int(
                self.name, "min_periods", self.min_periods, 1, self.window,
                f"min_periods must not exceed window={self.window}",
            )  # fmt: skip

    def _minp(self) -> tuple[int, bool]:
        """(min_periods, full_only): full_only nulls the first window-1 rows of a key."""
        if self.min_periods is None:
            return (1, False) if self.name == "mcount" else (1, True)
        return self.min_periods, False

    def _ring_layout(self) -> dict[str, _Field]:
        return {"ring": _f64(shape=(self.window,)), "n_rows": _i64(), "wpos": _i64(), "nobs": _i64()}


@dataclass(frozen=True)
class MovingSum(_MovingOp):
    """``msum``, ``mavg`` and ``mcount`` (``mcount`` defaults to ``min_periods=1``).

    Example:
        >>> import numpy as np
        >>> op = MovingSum("mavg", window=4)
        >>> x = np.array([7, 4, 6, np.nan, -5, 32, 9, 8])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [x])
        >>> np.round(out, 2).tolist()
        [nan, nan, nan, 5.67, 1.67, 11.0, 12.0, 11.0]
    """

    _NAMES: ClassVar[tuple[str, ...]] = ("msum", "mavg", "mcount")
    _OPS: ClassVar[dict[str, int]] = {"msum": kernels.MSUM, "mavg": kernels.MAVG, "mcount": kernels.MCOUNT}

    def _layout(self) -> dict[str, _Field]:
        return {
            **self._ring_layout(),
            "total": _f64(0.0),
            "comp": _f64(0.0),
            "n_pinf": _i64(),
            "n_ninf": _i64(),
        }

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        minp, full_only = self._minp()
        return kernels.moving_sum(
            self._OPS[self.name], slots, x, self.window, minp, full_only,
            st["ring"], st["n_rows"], st["wpos"], st["nobs"], st["total"], st["comp"], st["n_pinf"], st["n_ninf"],
        )  # fmt: skip


@dataclass(frozen=True)
class MovingVar(_MovingOp):
    """``mvar``/``mstd`` (sample, ddof=1) and ``mvarp``/``mstdp`` (population, ddof=0).

    A window whose non-NULL values are all equal reports exactly 0; an infinite
    value in the window makes the result NULL.

    Example:
        >>> import numpy as np
        >>> op = MovingVar("mstd", window=3)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1,
        ...                    [np.array([1.0, 2.0, 3.0, 5.0])])
        >>> np.round(out, 4).tolist()
        [nan, nan, 1.0, 1.5275]
    """

    _NAMES: ClassVar[tuple[str, ...]] = ("mvar", "mstd", "mvarp", "mstdp")

    def _layout(self) -> dict[str, _Field]:
        return {
            **self._ring_layout(), "n_inf": _i64(), "mean": _f64(0.0), "ssqdm": _f64(0.0),
            "run_val": _f64(), "run_len": _i64(),
        }  # fmt: skip

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        minp, full_only = self._minp()
        ddof = 0 if self.name.endswith("p") else 1
        return kernels.moving_var(
            slots, x, self.window, minp, full_only, ddof, self.name.startswith("mstd"),
            st["ring"], st["n_rows"], st["wpos"], st["nobs"], st["n_inf"], st["mean"], st["ssqdm"],
            st["run_val"], st["run_len"],
        )  # fmt: skip


@dataclass(frozen=True)
class MovingExtreme(_MovingOp):
    """``mmax``/``mmin`` and the positions ``mimax``/``mimin``/``mimax_last``/``mimin_last``.

    The positions are 0-based within the window (0 = oldest row of the window);
    ``mimax`` reports the first of equal maxima from the left, ``mimax_last`` the
    last. Windows up to ``scan_limit`` rows are scanned per row (O(window)),
    larger ones keep a monotonic deque (amortised O(1)).

    Example:
        >>> import numpy as np
        >>> op = MovingExtreme("mmax", window=3)
        >>> x = np.array([2, 1, 3, np.nan, 6, 5, 4])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, 3.0, 3.0, 6.0, 6.0, 6.0]
    """

    _NAMES: ClassVar[tuple[str, ...]] = ("mmax", "mmin", "mimax", "mimin", "mimax_last", "mimin_last")
    # Measured crossover (1M rows, 4000 keys): a 48-value scan costs about one deque update
    # with its mispredicted pops; below that the scan wins by up to 40%.
    scan_limit: ClassVar[int] = 48

    def _use_deque(self) -> bool:
        return self.window > self.scan_limit

    def _layout(self) -> dict[str, _Field]:
        deque_width = self.window if self._use_deque() else 0
        return {
            **self._ring_layout(), "dq_idx": _Field((deque_width,), np.int32, 0),
            "dq_head": _i64(), "dq_len": _i64(),
        }  # fmt: skip

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        minp, full_only = self._minp()
        return kernels.moving_extreme(
            slots, x, self.window, minp, full_only,
            self.name in ("mmax", "mimax", "mimax_last"), self.name.startswith("mi"),
            self.name in ("mimax", "mimin"), self._use_deque(),
            st["ring"], st["n_rows"], st["wpos"], st["nobs"], st["dq_idx"], st["dq_head"], st["dq_len"],
        )  # fmt: skip


@dataclass(frozen=True)
class MovingPick(_MovingOp):
    """``mfirst`` / ``mlast``: the oldest / newest row of the window, which may be NULL.

    Example:
        >>> import numpy as np
        >>> op = MovingPick("mfirst", window=3)
        >>> x = np.array([2, 1, 3, np.nan, 6, 5, 4])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, 2.0, 1.0, 3.0, nan, 6.0]
    """

    _NAMES: ClassVar[tuple[str, ...]] = ("mfirst", "mlast")

    def _layout(self) -> dict[str, _Field]:
        return self._ring_layout()

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        minp, full_only = self._minp()
        return kernels.moving_pick(
            slots,
            x,
            self.window,
            minp,
            full_only,
            self.name == "mfirst",
            st["ring"],
            st["n_rows"],
            st["wpos"],
            st["nobs"],
        )


@dataclass(frozen=True)
class Shift(_KernelOp):
    """``prev``, ``move``, ``deltas``, ``ratios`` and ``percent_change`` against the row ``lag`` rows back.

    NULLs are not skipped: the row ``lag`` rows back is used even if it is NULL,
    and the result is NULL when either side is NULL. ``ratios`` and
    ``percent_change`` output NULL when dividing by zero (DolphinDB's rule).

    Example:
        >>> import numpy as np
        >>> op = Shift("ratios")
        >>> x = np.array([3.0, 12.0, 0.0, -5.0, 32.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, 4.0, 0.0, nan, -6.4]
    """

    name: str
    lag: int = 1

    _OPS: ClassVar[dict[str, int]] = {
        "prev": kernels.SHIFT_MOVE,
        "move": kernels.SHIFT_MOVE,
        "deltas": kernels.SHIFT_DELTA,
        "ratios": kernels.SHIFT_RATIO,
        "percent_change": kernels.SHIFT_PCT,
    }

    def __post_init__(self) -> None:
        _check_name("Shift", self.name, tuple(self._OPS))
        param = "k" if self.name == "move" else "n"
        lag = self.lag
        if isinstance(lag, numbers.Integral) and not isinstance(lag, bool) and lag <= 0:
            raise _bad(
                self.name, param, lag, f"an integer in [1, {MAX_WINDOW}]",
                f"{param} <= 0 looks at later rows, which is not causal in a stream; use {param} >= 1",
            )  # fmt: skip
        _check_int(self.name, param, lag, 1, MAX_WINDOW, f"e.g. {self.name}(x, {param}=1)")
        if self.name in ("prev", "ratios") and lag != 1:
            raise _bad(self.name, "lag", lag, "1", f"{self.name} always compares with the previous row")

    def _layout(self) -> dict[str, _Field]:
        return {"ring": _f64(shape=(self.lag,)), "wpos": _i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return kernels.shift(self._OPS[self.name], slots, x, self.lag, st["ring"], st["wpos"])


@dataclass(frozen=True)
class Ffill(_KernelOp):
    """``ffill``: replace NULL by the key's last non-NULL value, at most ``limit`` rows in a row.

    Example:
        >>> import numpy as np
        >>> op = Ffill(limit=1)
        >>> x = np.array([np.nan, 1.0, np.nan, np.nan, 2.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, 1.0, 1.0, nan, 2.0]
    """

    limit: int | None = None
    name = "ffill"

    def __post_init__(self) -> None:
        if self.limit is not None:
            _check_int(self.name, "limit", self.limit, 1, None, "e.g. ffill(x, limit=5), or omit limit")

    def _layout(self) -> dict[str, _Field]:
        return {"last": _f64(), "gap": _i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        limit = -1 if self.limit is None else self.limit
        return kernels.ffill(slots, x, limit, st["last"], st["gap"])


@dataclass(frozen=True)
class Cumulative(_KernelOp):
    """Cumulative ``cumsum``, ``cumavg``, ``cummax``, ``cummin``, ``cumcount``, ``cumprod``,
    ``cumfirst_not`` (first non-NULL value) and ``cumlast_not`` (last non-NULL value) per key.

    NULL rows are skipped and output the previous result; rows before a key's
    first non-NULL value output NULL, except ``cumcount``, which outputs 0.

    Example:
        >>> import numpy as np
        >>> op = Cumulative("cumsum")
        >>> x = np.array([1, 1, 2, 3, 4, 5, np.nan, 8, 9, 1, 3])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(11, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [1.0, 2.0, 4.0, 7.0, 11.0, 16.0, 16.0, 24.0, 33.0, 34.0, 37.0]
    """

    name: str

    _OPS: ClassVar[dict[str, int]] = {
        "cumsum": kernels.CUM_SUM,
        "cumavg": kernels.CUM_AVG,
        "cummax": kernels.CUM_MAX,
        "cummin": kernels.CUM_MIN,
        "cumcount": kernels.CUM_COUNT,
        "cumprod": kernels.CUM_PROD,
        "cumfirst_not": kernels.CUM_FIRST,
        "cumlast_not": kernels.CUM_LAST,
    }

    def __post_init__(self) -> None:
        _check_name("Cumulative", self.name, tuple(self._OPS))

    def _layout(self) -> dict[str, _Field]:
        return {"acc": _f64(), "count": _i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return kernels.cumulative(self._OPS[self.name], slots, x, st["acc"], st["count"])


@dataclass(frozen=True)
class CumVar(_KernelOp):
    """``cumvar``/``cumstd`` (sample) and ``cumvarp``/``cumstdp`` (population) per key.

    NULL rows are skipped and output the previous result; the sample versions are
    NULL until a key has two non-NULL values.

    Example:
        >>> import numpy as np
        >>> op = CumVar("cumstdp")
        >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1,
        ...                    [np.array([np.nan, 1.0, 3.0, np.nan])])
        >>> out.tolist()
        [nan, 0.0, 1.0, 1.0]
    """

    name: str

    _NAMES: ClassVar[tuple[str, ...]] = ("cumvar", "cumvarp", "cumstd", "cumstdp")

    def __post_init__(self) -> None:
        _check_name("CumVar", self.name, self._NAMES)

    def _layout(self) -> dict[str, _Field]:
        return {"count": _i64(), "mean": _f64(0.0), "ssqdm": _f64(0.0)}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        ddof = 0 if self.name.endswith("p") else 1
        return kernels.cum_var(
            slots, x, ddof, self.name.startswith("cumstd"), st["count"], st["mean"], st["ssqdm"]
        )


@dataclass(frozen=True)
class PrevState(_KernelOp):
    """``prev_state`` (DolphinDB ``prevState``): the value of the previous state.

    A run of equal consecutive non-NULL values is one state; a NULL ends the run
    and outputs the latest state before it.

    Example:
        >>> import numpy as np
        >>> op = PrevState()
        >>> x = np.array([1, 2.2, np.nan, 2.2, 2.3, 1, 1.2])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, 1.0, 2.2, 2.2, 2.2, 2.3, 1.0]
    """

    name = "prev_state"

    def _layout(self) -> dict[str, _Field]:
        return {"last": _f64(), "run_prev": _f64(), "in_run": _i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return kernels.prev_state(slots, x, st["last"], st["run_prev"], st["in_run"])


# ---------------------------------------------------------------- registry


@dataclass(frozen=True)
class StateOpSpec:
    """How to build one state function from keyword parameters."""

    name: str
    signature: str
    params: tuple[str, ...]
    required: tuple[str, ...]
    build: Callable[[dict[str, Any]], StateOp]
    columns: tuple[str, ...] = ("x",)  # expression arguments, before the parameters
    result: str = "double"  # result type rule, see headwater.functions.FunctionSpec.result
    n_outputs: int = 1


_RESULTS = {
    **dict.fromkeys(
        (
            "mmax",
            "mmin",
            "mfirst",
            "mlast",
            "prev",
            "move",
            "ffill",
            "cummax",
            "cummin",
            "cumfirst_not",
            "cumlast_not",
            "prev_state",
        ),
        "same",
    ),
    **dict.fromkeys(("mcount", "cumcount", "mimax", "mimin", "mimax_last", "mimin_last"), "long"),
    **dict.fromkeys(("msum", "cumsum"), "sum"),
    **dict.fromkeys(("deltas", "cumprod"), "numeric"),
}


def _moving(cls: type[_MovingOp]) -> Callable[[str], StateOpSpec]:
    def spec(name: str) -> StateOpSpec:
        default = "1" if name == "mcount" else "None"
        return StateOpSpec(
            name, f"{name}(x, window, min_periods={default})", ("window", "min_periods"), ("window",),
            lambda p: cls(name, p["window"], p.get("min_periods")),
        )  # fmt: skip

    return spec


def _cumulative_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: Cumulative(name)


def _cum_var_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: CumVar(name)


def _ta_ma_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TaMovingAverage(name, p["window"])


def _ewm_var_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: EwmVar(
        name, _ewm_com(p, name), p.get("adjust", True), p.get("ignore_na", False),
        p.get("min_periods", 0), p.get("bias", False),
    )  # fmt: skip


def _specs() -> dict[str, StateOpSpec]:
    specs = [
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
                ("com", "span", "half_life", "alpha", "adjust", "ignore_na", "min_periods", "bias"),
                (),
                _ewm_var_builder(n),
            )
            for n in ("ewm_var", "ewm_std")
        ),
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
        *(_moving(MovingSum)(n) for n in MovingSum._NAMES),
        *(_moving(MovingVar)(n) for n in MovingVar._NAMES),
        *(_moving(MovingExtreme)(n) for n in MovingExtreme._NAMES),
        *(_moving(MovingPick)(n) for n in MovingPick._NAMES),
        StateOpSpec("prev", "prev(x)", (), (), lambda p: Shift("prev")),
        StateOpSpec("move", "move(x, k)", ("k",), ("k",), lambda p: Shift("move", p["k"])),
        StateOpSpec("deltas", "deltas(x, n=1)", ("n",), (), lambda p: Shift("deltas", p.get("n", 1))),
        StateOpSpec("ratios", "ratios(x)", (), (), lambda p: Shift("ratios")),
        StateOpSpec(
            "percent_change", "percent_change(x, n=1)", ("n",), (),
            lambda p: Shift("percent_change", p.get("n", 1)),
        ),
        StateOpSpec("ffill", "ffill(x, limit=None)", ("limit",), (), lambda p: Ffill(p.get("limit"))),
        *(StateOpSpec(n, f"{n}(x)", (), (), _cumulative_builder(n)) for n in Cumulative._OPS),
        *(StateOpSpec(n, f"{n}(x)", (), (), _cum_var_builder(n)) for n in CumVar._NAMES),
        StateOpSpec("prev_state", "prev_state(x)", (), (), lambda p: PrevState()),
    ]  # fmt: skip
    return {s.name: replace(s, result=_RESULTS.get(s.name, s.result)) for s in specs}


STATE_OPS: dict[str, StateOpSpec] = _specs()
"""Every supported state function by name."""


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def make_state_op(name: str, params: Mapping[str, Any]) -> StateOp:
    """Build the operator ``name`` from keyword parameters; ``None`` values count as not given.

    Raises:
        UnknownFunctionError: ``name`` is not a supported state function.
        GraphDefinitionError: a parameter is unknown, missing or out of range.

    Example:
        >>> make_state_op("ewm_mean", {"span": 3, "adjust": False})
        EwmMean(com=1.0, adjust=False, ignore_na=False, min_periods=0)
        >>> make_state_op("msum", {"window": 3, "min_periods": 1})
        MovingSum(name='msum', window=3, min_periods=1)
    """
    spec = STATE_OPS.get(name)
    if spec is None:
        close = difflib.get_close_matches(_snake(name), list(STATE_OPS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownFunctionError(
            f"unknown state function {name!r}{hint} Supported: {', '.join(sorted(STATE_OPS))}"
        )
    unknown = [p for p in params if p not in spec.params]
    if unknown:
        p = unknown[0]
        hint = f" (did you mean {_snake(p)}=?)" if _snake(p) in spec.params else ""
        valid = ", ".join(spec.params) or "none"
        raise GraphDefinitionError(
            f"state function {name!r}: unknown parameter {p}={params[p]!r}{hint}; "
            f"valid parameters: {valid}. Signature: {spec.signature}"
        )
    given = {k: v for k, v in params.items() if v is not None}
    missing = [p for p in spec.required if p not in given]
    if missing:
        raise GraphDefinitionError(
            f"state function {name!r}: missing required parameter {missing[0]}=. Signature: {spec.signature}"
        )
    return spec.build(given)


def register(*specs: StateOpSpec) -> None:
    """Add state functions defined in other modules to :data:`STATE_OPS`."""
    for spec in specs:
        STATE_OPS[spec.name] = replace(spec, result=_RESULTS.get(spec.name, spec.result))


# Families kept in their own modules register themselves on import.
from headwater.kernels import ops_higher, ops_pairwise, ops_time  # noqa: E402, F401
