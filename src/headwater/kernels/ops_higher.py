"""Higher-order state functions, TA-lib NULL handling and the special iterators.

Conventions are those of :mod:`headwater.kernels.ops` (per-key state arrays with the
key slot first, NaN = NULL, ``run`` never modifies the caller's state, snake_case
DolphinDB names). A function argument is a *name* given as a string parameter
(``func="cumsum"``), so every metric stays serialisable and readable in plans:

- ``segmentby(x, segment, func)``: a cumulative function that restarts whenever
  ``segment`` changes.
- ``moving(x, window, func, min_periods=None)``: an aggregate over each count window.
- ``window(x, d1, d2, func)``: an aggregate over rows ``[i+d1, i+d2]``, ``d1 <= d2 <= 0``.
- ``accumulate(x, func, init=None)``: a running fold.
- ``talib(x, func, window=..., ...)`` and ``talib_null(x, y)``: TA-lib style leading NULLs.
- ``state_iterate``, ``conditional_iterate`` and ``generic_state_iterate``: outputs
  that feed back into later rows of their key.

Only causal forms exist: a function that would need later rows (``window`` with
``d2 > 0``, ``move`` by a negative shift) is refused when the metric is built.

Example:
    >>> import numpy as np
    >>> from headwater.kernels.ops import make_state_op
    >>> op = make_state_op("segmentby", {"func": "cumsum"})
    >>> x = np.array([1, 2, 3, 0, 3, 2, 1, 4, 5.0])
    >>> seg = np.array([1, 1, 1, -1, -1, -1, 1, 1, 1.0])
    >>> _, (out,) = op.run(op.init_state(), np.zeros(9, dtype=np.int64), 1, [x, seg])
    >>> out.tolist()
    [1.0, 3.0, 6.0, 0.0, 3.0, 5.0, 1.0, 5.0, 10.0]
"""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from headwater.errors import ExecutionError, GraphDefinitionError
from headwater.kernels import kernels_higher as kh
from headwater.kernels.ops import (
    MAX_WINDOW,
    STATE_OPS,
    LayoutOp,
    StateOp,
    StateOpSpec,
    _bad,
    _check_batch,
    _check_int,
    _check_window,
    _f64,
    _Field,
    _grown_copy,
    _i64,
    _snake,
    make_state_op,
    register,
)

__all__ = [
    "AGGREGATES",
    "COMBINERS",
    "ITERATE_FUNCS",
    "Accumulate",
    "ConditionalIterate",
    "GenericStateIterate",
    "Moving",
    "Segmentby",
    "StateIterate",
    "Talib",
    "TalibNull",
    "Window",
]

State = dict[str, np.ndarray]

AGGREGATES: dict[str, int] = {
    "sum": kh.AGG_SUM, "sum2": kh.AGG_SUM2, "avg": kh.AGG_AVG, "count": kh.AGG_COUNT,
    "max": kh.AGG_MAX, "min": kh.AGG_MIN, "range": kh.AGG_RANGE, "std": kh.AGG_STD, "var": kh.AGG_VAR,
    "stdp": kh.AGG_STDP, "varp": kh.AGG_VARP, "med": kh.AGG_MED, "prod": kh.AGG_PROD,
    "first": kh.AGG_FIRST, "last": kh.AGG_LAST, "first_not": kh.AGG_FIRST_NOT, "last_not": kh.AGG_LAST_NOT,
}  # fmt: skip
"""Aggregates ``moving`` and ``window`` accept as ``func``."""

ITERATE_FUNCS: dict[str, int] = {
    "msum": kh.H_MSUM, "mavg": kh.H_MAVG, "mmax": kh.H_MMAX, "mmin": kh.H_MMIN, "mcount": kh.H_MCOUNT,
    "cumfirst_not": kh.H_CUMFIRST, "cumlast_not": kh.H_CUMLAST, "ffill": kh.H_FFILL, "move": kh.H_MOVE,
}  # fmt: skip
"""Functions the iterators apply to their own past outputs (DolphinDB's whitelist without tm-functions)."""

COMBINERS: dict[str, int] = {
    "sum_add": kh.C_SUM_ADD, "avg_add": kh.C_AVG_ADD, "max": kh.C_MAX, "min": kh.C_MIN,
    "prod_mul": kh.C_PROD_MUL,
}  # fmt: skip
"""Built-in combiners of ``generic_state_iterate``, run in the compiled kernel."""

_WINDOWED = ("msum", "mavg", "mmax", "mmin", "mcount")


def _choice(func: str, param: str, value: Any, choices: dict[str, Any] | tuple[str, ...], fix: str) -> str:
    name = _snake(value) if isinstance(value, str) else value
    if not isinstance(name, str) or name not in choices:
        raise _bad(func, param, value, f"one of {', '.join(map(repr, choices))}", fix)
    return name


_HigherOp = LayoutOp  # higher-order operators need nothing beyond the shared state-layout base


_INNER = "inner."  # prefix of a wrapped operator's state arrays


def _inner_state(state: State) -> State:
    return {k[len(_INNER) :]: v for k, v in state.items() if k.startswith(_INNER)}


def _own_state(state: State) -> State:
    return {k: v for k, v in state.items() if not k.startswith(_INNER)}


def _prefixed(state: State) -> State:
    return {_INNER + k: v for k, v in state.items()}


# ---------------------------------------------------------------- segmentby


@dataclass(frozen=True)
class Segmentby(_HigherOp):
    """``segmentby(x, segment, func)``: a cumulative function that restarts whenever ``segment`` changes.

    ``func`` is one of ``cumsum``, ``cummax``, ``cummin``, ``cumcount``, ``cumavg``,
    ``cumstd``, ``cumvar``, ``cumstdp`` and ``cumvarp`` (DolphinDB's list for the
    reactive state engine). A segment is a run of equal consecutive ``segment``
    values of a key; NULL equals NULL, so a run of NULLs is one segment. Within
    a segment the function's own NULL rules hold (NULL rows carry the last result).

    Example:
        >>> import numpy as np
        >>> op = Segmentby("cummax")
        >>> x, seg = np.array([1, 3, 2, 0, 5.0]), np.array([0, 0, 0, 1, 1.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x, seg])
        >>> out.tolist()
        [1.0, 3.0, 3.0, 0.0, 5.0]
    """

    func: str
    name = "segmentby"
    n_args = 2

    _FUNCS: ClassVar[dict[str, int]] = {
        "cumsum": kh.SEG_SUM, "cumavg": kh.SEG_AVG, "cummax": kh.SEG_MAX, "cummin": kh.SEG_MIN,
        "cumcount": kh.SEG_COUNT, "cumvar": kh.SEG_VAR, "cumvarp": kh.SEG_VARP, "cumstd": kh.SEG_STD,
        "cumstdp": kh.SEG_STDP,
    }  # fmt: skip

    def __post_init__(self) -> None:
        func = _choice(self.name, "func", self.func, self._FUNCS, "e.g. segmentby(x, seg, func='cumsum')")
        object.__setattr__(self, "func", func)

    def _layout(self) -> dict[str, _Field]:
        return {
            "seg_last": _f64(), "n_rows": _i64(), "count": _i64(), "acc": _f64(), "mean": _f64(0.0),
            "ssqdm": _f64(0.0),
        }  # fmt: skip

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        x, seg = cols
        return [
            kh.segment_cum(
                self._FUNCS[self.func], slots, x, seg, st["seg_last"], st["n_rows"], st["count"], st["acc"],
                st["mean"], st["ssqdm"],
            )
        ]  # fmt: skip


# ---------------------------------------------------------------- moving / window


def _check_aggregate(func: str, value: Any) -> str:
    return _choice(func, "func", value, AGGREGATES, f"e.g. {func}(x, ..., func='sum')")


class _WindowAgg(_HigherOp):
    """The generic kernel: aggregate rows ``[i - a, i - b]`` of each key, O(a - b) per row."""

    name: str
    func: str
    n_args = 1

    @abc.abstractmethod
    def _bounds(self) -> tuple[int, int, int, bool]:
        """(a, b, min_periods, full_only) of :func:`kernels_higher.window_agg`."""

    def _layout(self) -> dict[str, _Field]:
        a = self._bounds()[0]
        return {"ring": _f64(shape=(a + 1,)), "n_rows": _i64(), "wpos": _i64()}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        a, b, minp, full_only = self._bounds()
        scratch = np.empty(a + 1)
        return [
            kh.window_agg(
                AGGREGATES[self.func], slots, cols[0], a, b, minp, full_only, st["ring"], st["n_rows"],
                st["wpos"], scratch, np.empty(a + 1),
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class Moving(_WindowAgg):
    """``moving(x, window, func, min_periods=None)``: an aggregate over the last ``window`` rows of a key.

    ``func`` is one of :data:`AGGREGATES`. The window rules are those of the
    m-functions (DolphinDB calls them the optimised forms of ``moving``): without
    ``min_periods`` a key's first ``window - 1`` rows are NULL; with it, a row is
    NULL while its window holds fewer than ``min_periods`` non-NULL values.
    Aggregates skip NULLs (``first``/``last`` return the window's oldest/newest
    row even if NULL) and are NULL over a window without values.

    ``sum``, ``avg``, ``max``, ``min``, ``std``, ``var``, ``stdp``, ``varp``,
    ``first``, ``last`` (and ``count`` with ``min_periods``) run on the O(1)
    m-function kernels (``msum``...); the others rescan the window, O(window) per
    row (``med`` sorts it).

    Example:
        >>> import numpy as np
        >>> op = Moving(window=3, func="med")
        >>> x = np.array([2, 1, 3, np.nan, 6, 5, 4])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, 2.0, 2.0, 4.5, 5.5, 5.0]
    """

    window: int
    func: str
    min_periods: int | None = None
    name = "moving"

    # aggregates with an equivalent m-function; switched off in tests to compare both paths
    fast_path: ClassVar[bool] = True
    _FAST: ClassVar[dict[str, str]] = {
        "sum": "msum", "avg": "mavg", "max": "mmax", "min": "mmin", "std": "mstd", "var": "mvar",
        "stdp": "mstdp", "varp": "mvarp", "first": "mfirst", "last": "mlast",
    }  # fmt: skip

    def __post_init__(self) -> None:
        object.__setattr__(self, "func", _check_aggregate(self.name, self.func))
        _check_window(self.name, self.window)
        if self.min_periods is not None:
            _check_int(
                self.name, "min_periods", self.min_periods, 1, self.window,
                f"min_periods must not exceed window={self.window}",
            )  # fmt: skip

    def _bounds(self) -> tuple[int, int, int, bool]:
        if self.min_periods is None:
            return self.window - 1, 0, 1, True
        return self.window - 1, 0, self.min_periods, False

    def _inner(self) -> StateOp | None:
        if not self.fast_path:
            return None
        if self.func == "count" and self.min_periods is not None:
            return make_state_op("mcount", {"window": self.window, "min_periods": self.min_periods})
        name = self._FAST.get(self.func)
        if name is None:
            return None
        return make_state_op(name, {"window": self.window, "min_periods": self.min_periods})

    def init_state(self) -> dict[str, np.ndarray]:
        inner = self._inner()
        return super().init_state() if inner is None else _prefixed(inner.init_state())

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        inner = self._inner()
        if inner is None:
            return super().run(state, slots, n_keys, args)
        _check_batch(self.name, self.n_args, slots, n_keys, args)
        st, outs = inner.run(_inner_state(state), slots, n_keys, args)
        return _prefixed(st), outs


@dataclass(frozen=True)
class Window(_WindowAgg):
    """``window(x, d1, d2, func)``: an aggregate over rows ``[i+d1, i+d2]`` of each key, ``d1 <= d2 <= 0``.

    Row i is the current row, so ``d2 = 0`` includes it and ``d2 = -1`` ends at
    the previous row. As in DolphinDB there is no minimum count: a window cut
    short by the key's first row is aggregated as it is, and only an empty window
    (``i + d2 < 0``) is NULL. ``func`` is one of :data:`AGGREGATES` (``count``
    of a window of NULLs is 0). Costs O(d2 - d1) per row.

    Example:
        >>> import numpy as np
        >>> op = Window(d1=-3, d2=-1, func="min")
        >>> x = np.array([4, 2, -1, np.nan, 4, 5.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(6, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, 4.0, 2.0, -1.0, -1.0, -1.0]
    """

    d1: int
    d2: int
    func: str
    name = "window"

    def __post_init__(self) -> None:
        object.__setattr__(self, "func", _check_aggregate(self.name, self.func))
        fix = "e.g. window(x, d1=-5, d2=0, func='sum') for the current row and the 5 before it"
        for param in ("d1", "d2"):
            value = getattr(self, param)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool | np.bool_):
                raise _bad(self.name, param, value, "an integer <= 0", fix)
        if self.d2 > 0:
            raise _bad(
                self.name, "d2", self.d2, "an integer <= 0",
                f"d2={self.d2} looks at later rows, which is not causal in a stream; "
                "shift the result instead, e.g. d1=-4, d2=0 in place of d1=-2, d2=2",
            )  # fmt: skip
        if self.d1 > self.d2:
            raise _bad(self.name, "d1", self.d1, f"an integer <= d2={self.d2}", fix)
        if self.d1 < 1 - MAX_WINDOW:
            raise _bad(self.name, "d1", self.d1, f"an integer >= {1 - MAX_WINDOW}", "the window is too large")
        object.__setattr__(self, "d1", int(self.d1))
        object.__setattr__(self, "d2", int(self.d2))

    def _bounds(self) -> tuple[int, int, int, bool]:
        return -self.d1, -self.d2, 0, False


# ---------------------------------------------------------------- accumulate


@dataclass(frozen=True)
class Accumulate(_HigherOp):
    """``accumulate(x, func, init=None)``: the running fold ``out_k = func(out_{k-1}, x_k)``.

    ``func`` is ``add`` (alias ``sum``), ``sub``, ``mul`` (alias ``prod``), ``max`` or
    ``min``. The first value is ``x_0``, or ``func(init, x_0)`` with ``init``.
    NULL rows are skipped and output the last result (NULL before the first value,
    or ``init``), so ``accumulate(x, 'add')`` equals ``cumsum(x)``; DolphinDB's
    ``add(out, NULL)`` would make every later output NULL.

    Example:
        >>> import numpy as np
        >>> op = Accumulate("sub", init=10)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1,
        ...                    [np.array([1, np.nan, 2, 3.0])])
        >>> out.tolist()
        [9.0, 9.0, 7.0, 4.0]
    """

    func: str
    init: float | None = None
    name = "accumulate"
    n_args = 1

    _FUNCS: ClassVar[dict[str, int]] = {
        "add": kh.ACC_ADD, "sum": kh.ACC_ADD, "sub": kh.ACC_SUB, "mul": kh.ACC_MUL, "prod": kh.ACC_MUL,
        "max": kh.ACC_MAX, "min": kh.ACC_MIN,
    }  # fmt: skip

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "func", _choice(self.name, "func", self.func, self._FUNCS, "e.g. accumulate(x, func='add')")
        )
        if self.init is not None:
            ok = isinstance(self.init, numbers.Real) and not isinstance(self.init, bool | np.bool_)
            if not ok or not math.isfinite(self.init):
                raise _bad(
                    self.name, "init", self.init, "a finite number", "e.g. accumulate(x, 'mul', init=1)"
                )

    def _layout(self) -> dict[str, _Field]:
        if self.init is None:
            return {"acc": _f64(), "has": _i64()}
        return {"acc": _f64(float(self.init)), "has": _Field((), np.int64, 1)}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        return [kh.accumulate(self._FUNCS[self.func], slots, cols[0], st["acc"], st["has"])]


# ---------------------------------------------------------------- talib


_TALIB_PASS = (
    "window", "min_periods", "alpha", "warmup", "vfactor", "ma_type", "biased", "percent", "interpolation",
    "use_median", "ascending", "ignore_na", "ties_method",
)  # fmt: skip
"""Parameters ``talib`` passes on to its ``func``."""


@dataclass(frozen=True)
class Talib(StateOp):
    """``talib(x, func, window=..., ...)``: TA-lib's leading-NULL rule around another state function.

    A key's rows before its first non-NULL ``x`` output NULL and are not shown to
    ``func``; from that row on every row goes to ``func`` unchanged (its own NULL
    rules apply). ``func`` names a one-column, one-output state function
    (``msum``, ``mavg``, ``ema``...); ``window`` and the other parameters in
    ``params`` are passed on to it.

    Example:
        >>> import numpy as np
        >>> op = Talib("msum", (("window", 3),))
        >>> x = np.array([np.nan, np.nan, np.nan, 1, 2, 3, 4, 5, 6, np.nan, 8, 9])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(12, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, nan, nan, nan, 6.0, 9.0, 12.0, 15.0, 11.0, 14.0, 17.0]
    """

    func: str
    params: tuple[tuple[str, Any], ...] = ()
    inner: StateOp = field(init=False, repr=False, compare=False)
    name = "talib"
    n_args = 1

    def __post_init__(self) -> None:
        spec = STATE_OPS.get(self.func) if isinstance(self.func, str) else None
        if spec is None or spec.columns != ("x",) or spec.n_outputs != 1 or self.func == self.name:
            usable = sorted(
                n for n, s in STATE_OPS.items() if s.columns == ("x",) and s.n_outputs == 1 and n != self.name
            )
            raise _bad(
                self.name, "func", self.func, "the name of a one-column, one-output state function",
                f"e.g. talib(x, func='msum', window=3); usable: {', '.join(usable)}",
            )  # fmt: skip
        try:
            inner = make_state_op(self.func, dict(self.params))
        except GraphDefinitionError as exc:
            raise GraphDefinitionError(f"state function 'talib': func={self.func!r}: {exc}") from None
        object.__setattr__(self, "inner", inner)

    def init_state(self) -> dict[str, np.ndarray]:
        return {"started": np.zeros(0, dtype=np.int64), **_prefixed(self.inner.init_state())}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (x,) = _check_batch(self.name, self.n_args, slots, n_keys, args)
        st = _grown_copy(self.name, {"started": _i64()}, _own_state(state), n_keys)
        fed = kh.started_rows(slots_, x[np.newaxis, :], st["started"])
        inner_st, (inner_out,) = self.inner.run(_inner_state(state), slots_[fed], n_keys, [x[fed]])
        out = np.full(x.shape[0], np.nan)
        out[fed] = inner_out
        return {**st, **_prefixed(inner_st)}, [out]


_TMOVING = {"sum": "tmsum", "sum2": "tmsum2", "avg": "tmavg", "mean": "tmavg", "count": "tmcount", "max": "tmmax",
            "min": "tmmin", "first": "tmfirst", "last": "tmlast", "std": "tmstd", "stdp": "tmstdp", "var": "tmvar",
            "varp": "tmvarp", "med": "tmmed", "prod": "tmprod", "skew": "tmskew", "kurtosis": "tmkurtosis"}


@dataclass(frozen=True)
class TMoving(StateOp):
    """``tmoving(t, x, window, func)``: an aggregate over each time window ``(t_i - window, t_i]`` of the key.

    ``func`` names the aggregate; the window follows the tm-functions exactly (it runs the matching
    one, e.g. ``func='avg'`` is ``tmavg``), so rows going back in time output NULL.

    Example:
        >>> import numpy as np
        >>> op = TMoving(3, "sum")
        >>> t = np.array([1, 1, 3, 5, 8, 15, 15, 20.0]); x = np.array([5, 2, 4, 1, 2, 8, 9, 10.0])
        >>> op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [t, x])[1][0].tolist()
        [5.0, 7.0, 11.0, 5.0, 2.0, 8.0, 17.0, 10.0]
    """

    window: Any
    func: str
    inner: StateOp = field(init=False, repr=False, compare=False)
    name = "tmoving"
    n_args = 2

    def __post_init__(self) -> None:
        inner = _choice(self.name, "func", self.func, _TMOVING, "e.g. tmoving(time, price, '5m', func='avg')")
        object.__setattr__(self, "inner", make_state_op(_TMOVING[inner], {"window": self.window}))

    def init_state(self) -> dict[str, np.ndarray]:
        return self.inner.init_state()

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        return self.inner.run(state, slots, n_keys, args)


@dataclass(frozen=True)
class TalibNull(_HigherOp):
    """``talib_null(x, y)``: NULL for a key's rows before the first row where x and y are both non-NULL.

    Returns two outputs, x and y; from that row on both pass through unchanged.

    Example:
        >>> import numpy as np
        >>> op = TalibNull()
        >>> x, y = np.array([1, np.nan, 3, 4.0]), np.array([np.nan, 2, 3, np.nan])
        >>> _, outs = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1, [x, y])
        >>> [o.tolist() for o in outs]
        [[nan, nan, 3.0, 4.0], [nan, nan, 3.0, nan]]
    """

    name = "talib_null"
    n_args = 2
    n_outputs = 2

    def _layout(self) -> dict[str, _Field]:
        return {"started": _i64()}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        started = kh.started_rows(slots, np.stack(cols), st["started"])
        return [np.where(started, c, np.nan) for c in cols]


# ---------------------------------------------------------------- iterators


def _iterate_func(func: str, param: str, window_param: str, value: Any, window: Any) -> tuple[str, int]:
    """Validate an iterate function and its window; return (snake name, ring width)."""
    name = _choice(func, param, value, ITERATE_FUNCS, f"e.g. {func}(..., {param}='msum', {window_param}=3)")
    if name in _WINDOWED:
        if window is None:
            raise _bad(func, window_param, None, f"the window of {name}", f"e.g. {window_param}=3")
        return name, _check_int(func, window_param, window, 1, MAX_WINDOW, f"the window of {name}")
    if name == "move":
        if isinstance(window, numbers.Integral) and not isinstance(window, bool) and window <= 0:
            raise _bad(
                func, window_param, window, "a shift >= 1",
                f"move by {window} looks at the current or later outputs, which do not exist yet",
            )  # fmt: skip
        shift = _check_int(
            func, window_param, window, 1, MAX_WINDOW - 1, f"the shift of move, e.g. {window_param}=1"
        )
        return name, shift + 1
    if window is not None:
        raise _bad(
            func, window_param, window, "no window", f"{name} takes no window; leave {window_param} out"
        )
    return name, 1


def _iter_layout(width: int) -> dict[str, _Field]:
    return {
        "ring": _f64(shape=(width,)), "n_out": _i64(), "wpos": _i64(), "first_not": _f64(),
        "last_not": _f64(),
    }  # fmt: skip


@dataclass(frozen=True)
class StateIterate(_HigherOp):
    """``state_iterate(x, initial, initial_window, iterate_func, combine_coeff, iterate_window=None)``.

    For a key's first ``initial_window`` rows the output is ``initial``; afterwards
    ``out[k] = c0·x[k] + c1·f(out)[k-1]``, with ``(c0, c1) = combine_coeff`` and
    ``f`` = ``iterate_func`` applied to the key's previous outputs. ``iterate_func``
    is one of :data:`ITERATE_FUNCS` (DolphinDB's ``cumlastNot`` is accepted too):
    ``msum``/``mavg``/``mmax``/``mmin``/``mcount`` over ``iterate_window`` outputs
    (m-function rules: NULL until that many outputs exist, except ``mcount``;
    NULLs skipped), ``move`` by ``iterate_window`` outputs, ``cumfirst_not``,
    ``cumlast_not`` and ``ffill`` (no window). NULLs follow arithmetic: a NULL
    ``x`` gives a NULL output, which later windows skip. Costs O(iterate_window) per row.

    Example:
        >>> import numpy as np
        >>> op = StateIterate(3, "msum", (0.5, 0.5), iterate_window=3)
        >>> x, initial = np.arange(1, 7.0), np.full(6, 10.0)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(6, dtype=np.int64), 1, [x, initial])
        >>> out.tolist()
        [10.0, 10.0, 10.0, 17.0, 21.0, 27.0]
    """

    initial_window: int
    iterate_func: str
    combine_coeff: tuple[float, float]
    iterate_window: int | None = None
    width: int = field(init=False, repr=False, compare=False)
    name = "state_iterate"
    n_args = 2

    def __post_init__(self) -> None:
        _check_int(self.name, "initial_window", self.initial_window, 1, MAX_WINDOW, "e.g. initial_window=3")
        func, width = _iterate_func(
            self.name, "iterate_func", "iterate_window", self.iterate_func, self.iterate_window
        )
        object.__setattr__(self, "iterate_func", func)
        object.__setattr__(self, "width", width)
        coeff = self.combine_coeff
        ok = (
            isinstance(coeff, tuple | list)
            and len(coeff) == 2
            and all(
                isinstance(c, numbers.Real) and not isinstance(c, bool) and math.isfinite(c) for c in coeff
            )
        )
        if not ok:
            raise _bad(
                self.name, "combine_coeff", coeff, "two finite numbers", "e.g. combine_coeff=(0.5, 0.5)"
            )
        object.__setattr__(self, "combine_coeff", (float(coeff[0]), float(coeff[1])))

    def _layout(self) -> dict[str, _Field]:
        return _iter_layout(self.width)

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        x, initial = cols
        c0, c1 = self.combine_coeff
        return [
            kh.state_iterate(
                ITERATE_FUNCS[self.iterate_func], slots, x, initial, self.initial_window, c0, c1,
                st["ring"], st["n_out"], st["wpos"], st["first_not"], st["last_not"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class ConditionalIterate(_HigherOp):
    """``conditional_iterate(cond, true_value, false_iter_func, func_window=None)``.

    ``out[k] = true_value[k]`` where ``cond[k]`` is true, else ``f(out)[k-1]`` with
    ``f`` = ``false_iter_func`` over the key's previous outputs (the functions and
    windows of :class:`StateIterate`). A NULL ``cond`` counts as false; a key's
    first row with a false ``cond`` is NULL (there is no previous output).

    Example:
        >>> import numpy as np
        >>> op = ConditionalIterate("msum", func_window=3)
        >>> cond = np.array([0, 0, 1, 0, 0, 1.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(6, dtype=np.int64), 1, [cond, np.full(6, 10.0)])
        >>> out.tolist()
        [nan, nan, 10.0, 10.0, 20.0, 10.0]
    """

    false_iter_func: str
    func_window: int | None = None
    width: int = field(init=False, repr=False, compare=False)
    name = "conditional_iterate"
    n_args = 2

    def __post_init__(self) -> None:
        func, width = _iterate_func(
            self.name, "false_iter_func", "func_window", self.false_iter_func, self.func_window
        )
        object.__setattr__(self, "false_iter_func", func)
        object.__setattr__(self, "width", width)

    def _layout(self) -> dict[str, _Field]:
        return _iter_layout(self.width)

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        cond, true_value = cols
        return [
            kh.conditional_iterate(
                ITERATE_FUNCS[self.false_iter_func], slots, cond, true_value,
                st["ring"], st["n_out"], st["wpos"], st["first_not"], st["last_not"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class GenericStateIterate(_HigherOp):
    """``generic_state_iterate(x, initial, window, func)``: ``out[k] = func(previous outputs, x[k])``.

    With ``window = 0`` ``func`` sees the previous output (on a key's first row,
    that row's ``initial``); with ``window = w > 0`` a key's first ``w`` rows
    output ``initial`` and later rows pass the last ``w`` outputs, oldest first.

    ``func`` is the name of a built-in combiner (:data:`COMBINERS`: ``sum_add``
    and ``avg_add`` add ``x`` to the sum / mean of the previous outputs,
    ``prod_mul`` multiplies their product by ``x``, ``max``/``min`` take the extreme
    of both; NULLs skipped), which runs compiled, or a Python callable
    ``func(last_outputs: np.ndarray, x_k: float) -> float``. A callable runs once
    per row in the interpreter (about a microsecond per call plus its own work,
    against nanoseconds compiled), and metrics show it by its ``repr``; prefer a
    named combiner for hot streams.

    Example:
        >>> import numpy as np
        >>> op = GenericStateIterate(window=2, func=lambda last, x: last.mean() + x)
        >>> x, initial = np.array([0, 0, 1, 1.0]), np.array([1, 3, 0, 0.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1, [x, initial])
        >>> out.tolist()
        [1.0, 3.0, 3.0, 4.0]
    """

    window: int
    func: str | Callable[[np.ndarray, float], float]
    name = "generic_state_iterate"
    n_args = 2

    def __post_init__(self) -> None:
        _check_int(
            self.name, "window", self.window, 0, MAX_WINDOW, "e.g. window=3 (0: the previous output only)"
        )
        if not callable(self.func):
            func = _choice(
                self.name, "func", self.func, COMBINERS,
                "or pass a Python callable f(last_outputs, x) -> float",
            )  # fmt: skip
            object.__setattr__(self, "func", func)

    def _layout(self) -> dict[str, _Field]:
        return {"ring": _f64(shape=(max(self.window, 1),)), "n_out": _i64(), "wpos": _i64()}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        x, initial = cols
        if isinstance(self.func, str):
            prev = np.empty(max(self.window, 1))
            return [
                kh.generic_iterate(
                    COMBINERS[self.func], slots, x, initial, self.window, st["ring"], st["n_out"], st["wpos"],
                    prev,
                )
            ]  # fmt: skip
        try:
            return [
                kh.generic_iterate_py(
                    self.func, slots, x, initial, self.window, st["ring"], st["n_out"], st["wpos"]
                )
            ]
        except Exception as exc:
            raise ExecutionError(
                f"state function {self.name!r}: func={self.func!r} raised {type(exc).__name__}: {exc}; "
                "it must take (last_outputs: np.ndarray, x: float) and return a number"
            ) from exc


# ---------------------------------------------------------------- registry


def _talib_builder(p: dict[str, Any]) -> StateOp:
    return Talib(p["func"], tuple((k, v) for k, v in p.items() if k != "func"))


def _specs() -> list[StateOpSpec]:
    aggs = "|".join(AGGREGATES)
    return [
        StateOpSpec(
            "segmentby", "segmentby(x, segment, func='cumsum'|'cummax'|'cummin'|'cumcount'|'cumavg'|...)",
            ("func",), ("func",), lambda p: Segmentby(p["func"]), columns=("x", "segment"),
        ),
        StateOpSpec(
            "moving", f"moving(x, window, func={aggs}, min_periods=None)",
            ("window", "func", "min_periods"), ("window", "func"),
            lambda p: Moving(p["window"], p["func"], p.get("min_periods")),
        ),
        StateOpSpec(
            "window", f"window(x, d1, d2, func={aggs}) over rows [i+d1, i+d2], d1 <= d2 <= 0",
            ("d1", "d2", "func"), ("d1", "d2", "func"), lambda p: Window(p["d1"], p["d2"], p["func"]),
        ),
        StateOpSpec(
            "accumulate", "accumulate(x, func='add'|'sub'|'mul'|'max'|'min', init=None)",
            ("func", "init"), ("func",), lambda p: Accumulate(p["func"], p.get("init")),
        ),
        StateOpSpec(
            "talib", f"talib(x, func, window=None, ...parameters of func: {', '.join(_TALIB_PASS[1:])})",
            ("func", *_TALIB_PASS), ("func",), _talib_builder,
        ),
        StateOpSpec(
            "talib_null", "talib_null(x, y)", (), (), lambda p: TalibNull(), columns=("x", "y"), n_outputs=2,
        ),
        StateOpSpec(
            "state_iterate",
            "state_iterate(x, initial, initial_window, iterate_func, combine_coeff=(c0, c1), iterate_window=None)",
            ("initial_window", "iterate_func", "combine_coeff", "iterate_window"),
            ("initial_window", "iterate_func", "combine_coeff"),
            lambda p: StateIterate(p["initial_window"], p["iterate_func"], p["combine_coeff"], p.get("iterate_window")),
            columns=("x", "initial"),
        ),
        StateOpSpec(
            "conditional_iterate", "conditional_iterate(cond, true_value, false_iter_func, func_window=None)",
            ("false_iter_func", "func_window"), ("false_iter_func",),
            lambda p: ConditionalIterate(p["false_iter_func"], p.get("func_window")),
            columns=("cond", "true_value"),
        ),
        StateOpSpec(
            "generic_state_iterate",
            f"generic_state_iterate(x, initial, window, func={'|'.join(COMBINERS)}|callable)",
            ("window", "func"), ("window", "func"), lambda p: GenericStateIterate(p["window"], p["func"]),
            columns=("x", "initial"),
        ),
    ]  # fmt: skip


register(*_specs())
register(StateOpSpec(
    "tmoving", f"tmoving(t, x, window, func={'|'.join(_TMOVING)})", ("window", "func"), ("window", "func"),
    lambda p: TMoving(p["window"], p["func"]), columns=("t", "x"),
))  # fmt: skip
