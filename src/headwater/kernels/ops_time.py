"""Time-window (tm-), TopN and financial-helper state functions of the reactive state engine.

Conventions are those of :mod:`headwater.kernels.ops` (per-key state arrays with the
key slot first, NaN = NULL, ``run`` never modifies the caller's state, snake_case
DolphinDB names). What is particular to these families:

**tm-functions** ``tmfunc(t, x, window)`` / ``tmfunc(t, x, y, window)``: the window
of row i is every row of its key with time in ``(t_i - window, t_i]``, earlier rows
with the same time included. ``t`` arrives as float64 (timestamps as microseconds
since the epoch, exact; integer columns as themselves). ``window`` is a positive
integer in the units of ``t`` (microseconds for timestamps, days for dates) or a
duration (``"5m"``, ``"30s"``, a ``timedelta``; only meaningful for timestamp
columns). Time must not go back within a key: a row whose time is NULL or earlier
than the key's latest time outputs NULL and does not enter the state (DolphinDB
requires sorted input and has no rule of its own for this). NULL ``x`` rows stay
in the window and are skipped by the aggregate, so ``tmcount`` counts non-NULL
values, ``tmfirst`` may return a NULL first row and ``tmlast`` is the row's own
value. A key keeps the rows still in its window in a ring that widens as needed
up to ``MAX_WINDOW`` rows; past that, the oldest rows leave the window early
(documented eviction, never an error mid-stream). ``tmove`` keeps one more row:
the latest that has left the window.

**mTopN** ``m<agg>_top_n(x, [y,] s, window, top, ascending=True, ties_method)``: in
the last ``window`` rows, rows with non-NULL ``s`` are stably sorted by ``s`` and
the first ``top`` are aggregated (NULL ``x`` among them are skipped). When more
rows tie for the last places than there are places, ``ties_method`` takes the
oldest, the latest or all of them. Rows with NULL ``s`` are ignored (DolphinDB
2.00.10+; older versions sorted them first). Output starts at the first row.
``cum<agg>_top_n`` does the same over all rows so far, keeping only the rows that
can still be picked; ``tm<agg>_top_n(t, x, [y,] s, window, top, ...)`` over the
time window of the tm-functions.

**Financial helpers**: ``dynamic_group_cumsum`` / ``dynamic_group_cumcount``,
``top_range`` / ``low_range``, ``true_range``, ``sumbars`` and the linear recursion
``iterate``; each class documents its NULL rules.


Example:
    >>> import numpy as np
    >>> from headwater.kernels.ops import make_state_op
    >>> op = make_state_op("tmsum", {"window": 3})
    >>> t = np.array([1, 1, 3, 5, 8, 15, 15, 20.0])
    >>> x = np.array([5, 2, 4, 1, 2, 8, 9, 10.0])
    >>> _, (out,) = op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [t, x])
    >>> out.tolist()
    [5.0, 7.0, 11.0, 5.0, 2.0, 8.0, 17.0, 10.0]
"""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar, NamedTuple

import numpy as np

from headwater.durations import parse_duration, to_micros
from headwater.kernels import kernels_time as kt
from headwater.kernels.ops import (
    MAX_WINDOW,
    StateOp,
    StateOpSpec,
    _bad,
    _check_batch,
    _check_bool,
    _check_float,
    _check_int,
    _check_name,
    register,
)

__all__ = [
    "CumTopN",
    "DynamicGroup",
    "Iterate",
    "MovingTopN",
    "RangeCount",
    "SumBars",
    "TimeMoment",
    "TimePercentile",
    "TimeRank",
    "TimeWindow",
    "TrueRange",
]

State = dict[str, np.ndarray]

MAX_GROUPS = 8
"""Most groups ``dynamic_group_cumsum`` / ``dynamic_group_cumcount`` count (DolphinDB: 2..8)."""

_NO_DEQUE = np.zeros((0, 0), dtype=np.int64)
_NO_KEYS = np.zeros(0, dtype=np.int64)
_NO_ACC = np.zeros((0, 0))


# ---------------------------------------------------------------- growable state


class _Arr(NamedTuple):
    """One state array: ``kind`` says how its second axis behaves."""

    dtype: type
    fill: Any = 0.0
    kind: str = "key"  # key: one value per key | cols: fixed width | ring / deque / prefix: widens
    width: int = 0  # for kind "cols"


_GROWING = ("ring", "deque", "prefix")


class _BufferedOp(StateOp):
    """An operator whose per-key buffers widen on demand, up to ``max_rows`` rows.

    Kernels stop at the row whose key has a full buffer; ``run`` widens every
    buffer (doubling, capped at ``max_rows``) and resumes at that row.
    """

    max_rows: ClassVar[int] = MAX_WINDOW
    initial_rows: ClassVar[int] = 8

    @abc.abstractmethod
    def _layout(self) -> dict[str, _Arr]:
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
        slots_, cols = _check_batch(self.name, self.n_args, slots, n_keys, args)
        layout = self._layout()
        st = _grown_copy(self.name, layout, state, n_keys, self._width_of(state, layout))
        out = np.empty(slots_.shape[0])
        i = 0
        while True:
            i = self._step(st, slots_, cols, out, i)
            if i >= slots_.shape[0]:
                return st, [out]
            st = _widen(layout, st, min(2 * self._width_of(st, layout), self._max_width()))

    def _width_of(self, state: State, layout: dict[str, _Arr]) -> int:
        for name, a in layout.items():
            if a.kind in _GROWING and name in state and state[name].ndim == 2:
                return int(state[name].shape[1])
        return self._first_width()


def _shape(a: _Arr, width: int) -> tuple[int, ...]:
    if a.kind == "key":
        return ()
    return (a.width,) if a.kind == "cols" else (width,)


def _grown_copy(func: str, layout: dict[str, _Arr], state: State, n_keys: int, width: int) -> State:
    # Always copy: the caller may keep the old dict as the last committed snapshot.
    out: State = {}
    for name, a in layout.items():
        old = state.get(name)
        shape = _shape(a, width)
        if old is None or old.shape[1:] != shape or old.dtype != a.dtype:
            got = None if old is None else f"{old.dtype}{old.shape}"
            raise ValueError(
                f"state function {func!r}: state array {name!r} is {got}, expected "
                f"{np.dtype(a.dtype)}(n_keys, {', '.join(map(str, shape))}); "
                "was the state made by another operator or parameter set?"
            )
        n_old = old.shape[0]
        if n_keys < n_old:
            raise ValueError(
                f"state function {func!r}: n_keys={n_keys} is less than the {n_old} keys in state"
            )
        new: np.ndarray = np.empty((n_keys, *shape), dtype=a.dtype)
        new[:n_old] = old
        new[n_old:] = a.fill
        out[name] = new
    return out


def _widen(layout: dict[str, _Arr], st: State, width: int) -> State:
    out = dict(st)
    for name, a in layout.items():
        if a.kind not in _GROWING:
            continue
        old = st[name]
        new: np.ndarray = np.full((old.shape[0], width), a.fill, dtype=a.dtype)
        if a.kind == "ring":
            kt.widen_ring(old, new, st["start"], st["count"])
        elif a.kind == "deque":
            kt.widen_deque(old, new, st["dq_head"], st["dq_len"])
            out["dq_head"] = np.zeros_like(st["dq_head"])
        else:
            new[:, : old.shape[1]] = old
        out[name] = new
    return out


# ---------------------------------------------------------------- parameter checks


def _window_units(func: str, window: Any) -> float:
    """A tm-window in the units of the time column: an integer, or a duration in microseconds."""
    if isinstance(window, numbers.Integral) and not isinstance(window, bool | np.bool_):
        if int(window) >= 1:
            return float(window)
    elif isinstance(window, str | timedelta):
        return float(to_micros(parse_duration(window, where=f"state function {func!r}: window")))
    raise _bad(
        func, "window", window,
        "a positive integer (in the units of the time column) or a duration such as '5m' or '30s'",
        f"e.g. {func}(time, price, '5m')",
    )  # fmt: skip


def _check_choice(func: str, param: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _bad(func, param, value, f"one of {', '.join(map(repr, choices))}", "")
    return str(value)


def _numbers(func: str, param: str, value: Any) -> tuple[float, ...]:
    values = tuple(value) if isinstance(value, list | tuple | np.ndarray) else (value,)
    ok = 1 <= len(values) <= MAX_WINDOW and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_) and math.isfinite(v)
        for v in values
    )
    if not ok:
        raise _bad(func, param, value, "a finite number or a non-empty sequence of finite numbers", "")
    return tuple(float(v) for v in values)


# ---------------------------------------------------------------- tm-functions


@dataclass(frozen=True)
class TimeWindow(_BufferedOp):
    """tm-functions over the time window ``(t_i - window, t_i]`` of each key.

    ``tmsum``, ``tmsum2``, ``tmavg``, ``tmcount``, ``tmvar``/``tmstd`` (sample),
    ``tmvarp``/``tmstdp`` (population), ``tmwsum``, ``tmwavg``, ``tmcovar``,
    ``tmcovarp``, ``tmcorr`` and ``tmbeta`` keep running (compensated) sums and
    cost O(1) per row; ``tmmax``/``tmmin`` keep a monotonic deque; ``tmprod``,
    ``tmmed``, ``tmpercentile``, ``tmrank``, ``tmskew`` and ``tmkurtosis`` look at the
    whole window, O(rows in window) per row (a sort for the order statistics).
    ``tmbeta(t, y, x, window)`` regresses ``y`` on ``x``; ``tmwavg(t, x, y, window)``
    averages ``x`` weighted by ``y``. ``tmove`` returns ``x`` of the latest row at or
    before ``t_i - window`` (NULL if there is none). See the module docstring for
    the window and NULL rules.

    Example:
        >>> import numpy as np
        >>> op = TimeWindow("tmmax", window="2s")
        >>> t = np.array([0, 1, 2, 3], dtype=np.float64) * 1e6  # microseconds
        >>> _, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1,
        ...                    [t, np.array([5.0, 1.0, 2.0, 0.0])])
        >>> out.tolist()
        [5.0, 5.0, 2.0, 2.0]
    """

    name: str
    window: int | str | timedelta
    n_args: int = field(init=False, repr=False, compare=False)

    _OPS: ClassVar[dict[str, int]] = {
        "tmsum": kt.TM_SUM, "tmsum2": kt.TM_SUM2, "tmavg": kt.TM_AVG, "tmcount": kt.TM_COUNT,
        "tmvar": kt.TM_VAR, "tmvarp": kt.TM_VARP, "tmstd": kt.TM_STD, "tmstdp": kt.TM_STDP,
        "tmmax": kt.TM_MAX, "tmmin": kt.TM_MIN, "tmfirst": kt.TM_FIRST, "tmlast": kt.TM_LAST,
        "tmove": kt.TM_MOVE, "tmprod": kt.TM_PROD, "tmmed": kt.TM_MED,
        "tmwsum": kt.TM_WSUM, "tmwavg": kt.TM_WAVG, "tmcovar": kt.TM_COVAR, "tmcovarp": kt.TM_COVARP,
        "tmcorr": kt.TM_CORR, "tmbeta": kt.TM_BETA,
    }  # fmt: skip
    _PAIRS: ClassVar[frozenset[str]] = frozenset(
        {"tmwsum", "tmwavg", "tmcovar", "tmcovarp", "tmcorr", "tmbeta"}
    )

    def __post_init__(self) -> None:
        _check_name(type(self).__name__, self.name, tuple(self._OPS))
        _window_units(self.name, self.window)
        object.__setattr__(self, "n_args", 3 if self.name in self._PAIRS else 2)

    @property
    def span(self) -> float:
        """The window in the units of the time column (microseconds for a duration)."""
        return _window_units(self.name, self.window)

    @property
    def op(self) -> int:
        return self._OPS[self.name]

    def _params(self) -> np.ndarray:
        return np.zeros(4)

    def _layout(self) -> dict[str, _Arr]:
        nan = math.nan
        layout = {
            "t": _Arr(np.float64, nan, "ring"),
            "x": _Arr(np.float64, nan, "ring"),
            "start": _Arr(np.int64, 0),
            "count": _Arr(np.int64, 0),
            "last_t": _Arr(np.float64, nan),
            "prev": _Arr(np.float64, nan, "cols", 2),
        }
        if self.n_args == 3:
            layout["y"] = _Arr(np.float64, nan, "ring")
        acc = kt.acc_layout(self.op)
        if acc.size:
            layout["acc"] = _Arr(np.float64, acc, "cols", acc.size)
        if self.op in (kt.TM_MAX, kt.TM_MIN):
            layout |= {
                "dq": _Arr(np.int64, 0, "deque"),
                "dq_head": _Arr(np.int64, 0),
                "dq_len": _Arr(np.int64, 0),
            }
        return layout

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        pair = self.n_args == 3
        a = cols[1]
        b = cols[2] if pair else a
        acc = st.get("acc", _NO_ACC)
        return int(
            kt.time_window(
                self.op, slots, cols[0], a, b, self.span, self._params(), i0, self.max_rows, out,
                st["t"], st["x"], st["y"] if pair else st["x"], st["start"], st["count"], st["last_t"],
                st["prev"], acc, st.get("dq", _NO_DEQUE), st.get("dq_head", _NO_KEYS),
                st.get("dq_len", _NO_KEYS),
            )
        )  # fmt: skip


@dataclass(frozen=True)
class TimePercentile(TimeWindow):
    """``tmpercentile(t, x, percent, window, interpolation='linear')``: percentile of the window's values.

    ``interpolation`` is ``'linear'``, ``'lower'``, ``'higher'``, ``'nearest'`` or
    ``'midpoint'`` with NumPy's definitions (``'nearest'`` rounds a half to even).

    Example:
        >>> import numpy as np
        >>> op = TimePercentile("tmpercentile", window=3, percent=50)
        >>> t = np.array([1, 1, 1, 2, 5, 6.0])
        >>> x = np.array([1, 4, np.nan, -1, np.nan, 4])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(6, dtype=np.int64), 1, [t, x])
        >>> out.tolist()
        [1.0, 2.5, 2.5, 1.0, nan, 4.0]
    """

    percent: float = 50.0
    interpolation: str = "linear"

    _OPS: ClassVar[dict[str, int]] = {"tmpercentile": kt.TM_PERCENTILE}
    _INTERP: ClassVar[dict[str, int]] = {
        "linear": kt.INTERP_LINEAR, "lower": kt.INTERP_LOWER, "higher": kt.INTERP_HIGHER,
        "nearest": kt.INTERP_NEAREST, "midpoint": kt.INTERP_MIDPOINT,
    }  # fmt: skip

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_float(self.name, "percent", self.percent, lambda p: 0 <= p <= 100, "a number in [0, 100]")
        _check_choice(self.name, "interpolation", self.interpolation, tuple(self._INTERP))

    def _params(self) -> np.ndarray:
        return np.array([float(self.percent), self._INTERP[self.interpolation], 0.0, 0.0])


@dataclass(frozen=True)
class TimeRank(TimeWindow):
    """``tmrank(t, x, ascending, window, ignore_na=True, ties_method='min', percent=False)``.

    The 0-based rank of the row's value among the window's values. With
    ``ignore_na=False`` NULLs take part as the smallest value; with ``percent=True``
    the result is ``(rank + 1) / values ranked``. A NULL row outputs NULL unless
    NULLs take part.

    Example:
        >>> import numpy as np
        >>> op = TimeRank("tmrank", window=3, ascending=True)
        >>> t = np.array([1, 1, 3, 5, 8, 15, 15, 20.0])
        >>> x = np.array([5, 2, 4, 1, 2, 8, 9, 10.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [t, x])
        >>> out.tolist()
        [0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    """

    ascending: bool = True
    ignore_na: bool = True
    ties_method: str = "min"
    percent: bool = False

    _OPS: ClassVar[dict[str, int]] = {"tmrank": kt.TM_RANK}
    _TIES: ClassVar[dict[str, int]] = {"min": kt.RANK_MIN, "max": kt.RANK_MAX, "average": kt.RANK_AVERAGE}

    def __post_init__(self) -> None:
        super().__post_init__()
        for flag in ("ascending", "ignore_na", "percent"):
            _check_bool(self.name, flag, getattr(self, flag))
        _check_choice(self.name, "ties_method", self.ties_method, tuple(self._TIES))

    def _params(self) -> np.ndarray:
        return np.array(
            [self.ascending, self.ignore_na, self._TIES[self.ties_method], self.percent], dtype=np.float64
        )


@dataclass(frozen=True)
class TimeMoment(TimeWindow):
    """``tmskew`` / ``tmkurtosis(t, x, window, biased=True)``: DolphinDB's skewness and kurtosis.

    Kurtosis is not in excess (a normal sample gives about 3); ``biased=False``
    applies the sample corrections (pandas' ``kurt() + 3`` and ``skew()``). NULL for
    a window without spread, and for kurtosis with fewer than 3 values (4 unbiased),
    as DolphinDB's documented outputs show.

    Example:
        >>> import numpy as np
        >>> op = TimeMoment("tmskew", window=3)
        >>> t = np.array([1, 1, 3, 5, 8, 15, 15, 20.0])
        >>> x = np.array([5, 2, 4, 1, 2, 8, 9, 10.0])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [t, x])
        >>> np.round(out, 6).tolist()
        [nan, 0.0, -0.381802, 0.0, nan, nan, 0.0, nan]
    """

    biased: bool = True

    _OPS: ClassVar[dict[str, int]] = {"tmskew": kt.TM_SKEW, "tmkurtosis": kt.TM_KURT}

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_bool(self.name, "biased", self.biased)

    def _params(self) -> np.ndarray:
        return np.array([float(self.biased), 0.0, 0.0, 0.0])


# ---------------------------------------------------------------- TopN


_TOP_AGGS: dict[str, int] = {
    "sum": kt.TOP_SUM, "avg": kt.TOP_AVG, "var": kt.TOP_VAR, "varp": kt.TOP_VARP, "std": kt.TOP_STD,
    "stdp": kt.TOP_STDP, "skew": kt.TOP_SKEW, "kurtosis": kt.TOP_KURT, "corr": kt.TOP_CORR,
    "covar": kt.TOP_COVAR, "covarp": kt.TOP_COVARP, "beta": kt.TOP_BETA, "wsum": kt.TOP_WSUM,
}  # fmt: skip
_PAIR_AGGS = ("corr", "beta", "covar", "covarp", "wsum")
_ALL_AGGS = ("sum", "avg", "std", "stdp", "var", "varp", "skew", "kurtosis", *_PAIR_AGGS)
_TIES: dict[str, int] = {"oldest": kt.TIES_OLDEST, "latest": kt.TIES_LATEST, "all": kt.TIES_ALL}


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
        _check_name(type(self).__name__, self.name, self._NAMES)
        _check_int(
            self.name, "window", self.window, 1, MAX_WINDOW, f"e.g. {self.name}(x, s, window=20, top=5)"
        )
        _check_int(self.name, "top", self.top, 1, self.window, f"top must not exceed window={self.window}")
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
        slots_, cols = _check_batch(self.name, self.n_args, slots, n_keys, args)
        w = self.window
        layout = {
            "x": _Arr(np.float64, math.nan, "cols", w), "y": _Arr(np.float64, math.nan, "cols", w),
            "s": _Arr(np.float64, math.nan, "cols", w), "n_rows": _Arr(np.int64, 0), "wpos": _Arr(np.int64, 0),
        }  # fmt: skip
        st = _grown_copy(self.name, layout, state, n_keys, w)
        x, s = cols[0], cols[-1]
        y = cols[1] if self.n_args == 3 else x
        assert self.ties_method is not None
        out = kt.moving_top_n(
            _TOP_AGGS[_top_agg(self.name, "m")], slots_, x, y, s, w, self.top, self.ascending,
            _TIES[self.ties_method], self.biased, st["x"], st["y"], st["s"], st["n_rows"], st["wpos"],
        )  # fmt: skip
        return st, [out]


def _init_top(op: Any, agg: str, default_ties: str) -> None:
    _check_bool(op.name, "ascending", op.ascending)
    _check_bool(op.name, "biased", op.biased)
    if agg not in ("skew", "kurtosis") and op.biased is not True:
        raise _bad(
            op.name, "biased", op.biased, "no biased", "only the skew and kurtosis TopN functions take it"
        )
    if op.ties_method is None:
        object.__setattr__(op, "ties_method", "latest" if agg in ("skew", "kurtosis") else default_ties)
    _check_choice(op.name, "ties_method", op.ties_method, tuple(_TIES))
    object.__setattr__(op, "n_args", 3 if agg in _PAIR_AGGS else 2)


@dataclass(frozen=True)
class CumTopN(_BufferedOp):
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
        _check_name(type(self).__name__, self.name, self._NAMES)
        _check_int(self.name, "top", self.top, 1, MAX_WINDOW, f"e.g. {self.name}(x, s, top=5)")
        _init_top(self, _top_agg(self.name, "cum"), "latest")

    def _first_width(self) -> int:
        return self.top + 1  # enough unless ties_method='all'

    def _max_width(self) -> int:
        return max(self.max_rows, self.top + 1)

    def _layout(self) -> dict[str, _Arr]:
        nan = math.nan
        layout = {
            "s": _Arr(np.float64, nan, "prefix"), "x": _Arr(np.float64, nan, "prefix"),
            "length": _Arr(np.int64, 0), "last": _Arr(np.float64, nan),
        }  # fmt: skip
        if self.n_args == 3:
            layout["y"] = _Arr(np.float64, nan, "prefix")
        return layout

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        assert self.ties_method is not None
        pair = self.n_args == 3
        x, s = cols[0], cols[-1]
        y = cols[1] if pair else x
        return int(
            kt.cum_top_n(
                _TOP_AGGS[_top_agg(self.name, "cum")], slots, x, y, s, self.top, self.ascending,
                _TIES[self.ties_method], self.biased, i0, self._max_width(), out,
                st["s"], st["x"], st["y"] if pair else st["x"], st["length"], st["last"],
            )
        )  # fmt: skip


@dataclass(frozen=True)
class TimeTopN(_BufferedOp):
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
        _check_name(type(self).__name__, self.name, self._NAMES)
        _window_units(self.name, self.window)
        _check_int(self.name, "top", self.top, 1, MAX_WINDOW, f"e.g. {self.name}(t, x, s, window=20, top=5)")
        _init_top(self, _top_agg(self.name, "tm"), "latest")
        object.__setattr__(self, "n_args", self.n_args + 1)  # the time column

    @property
    def span(self) -> float:
        """The window in the units of the time column (microseconds for a duration)."""
        return _window_units(self.name, self.window)

    def _layout(self) -> dict[str, _Arr]:
        nan = math.nan
        layout = {
            "t": _Arr(np.float64, nan, "ring"), "x": _Arr(np.float64, nan, "ring"),
            "s": _Arr(np.float64, nan, "ring"), "start": _Arr(np.int64, 0), "count": _Arr(np.int64, 0),
            "last_t": _Arr(np.float64, nan),
        }  # fmt: skip
        if self.n_args == 4:
            layout["y"] = _Arr(np.float64, nan, "ring")
        return layout

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        assert self.ties_method is not None
        pair = self.n_args == 4
        t, x, s = cols[0], cols[1], cols[-1]
        y = cols[2] if pair else x
        return int(
            kt.time_top_n(
                _TOP_AGGS[_top_agg(self.name, "tm")], slots, t, x, y, s, self.span, self.top, self.ascending,
                _TIES[self.ties_method], self.biased, i0, self.max_rows, out,
                st["t"], st["x"], st["y"] if pair else st["x"], st["s"], st["start"], st["count"], st["last_t"],
            )
        )  # fmt: skip


# ---------------------------------------------------------------- financial helpers


@dataclass(frozen=True)
class DynamicGroup(StateOp):
    """``dynamic_group_cumsum(cum_value, prev_cum_value, membership, prev_membership, group_count)``
    and ``dynamic_group_cumcount(membership, prev_membership, group_count)``.

    Running totals per group for entities (e.g. orders) whose group can change.
    A row whose ``prev_membership`` is NULL adds ``cum_value`` (or 1) to its group;
    a row that changes group adds ``cum_value`` (1) to the new group and takes
    ``prev_cum_value`` (1) from the old one. A row that stays in its group changes
    nothing for the count and adds ``cum_value - prev_cum_value`` for the sum, so
    every group total is the sum of its entities' latest values. (DolphinDB's text
    says "unchanged" for the sum too, which would make totals go negative once an
    order that grew changes group; its documented example has no such row.)
    NULL values count as 0; a row whose membership is NULL or outside
    ``[0, group_count)`` changes nothing.

    There are always ``MAX_GROUPS`` (8) outputs, one per group; outputs past
    ``group_count`` are NULL (the number of outputs of a function is fixed by its
    name in the expression layer).

    Example:
        >>> import numpy as np
        >>> op = DynamicGroup("dynamic_group_cumcount", group_count=3)
        >>> member, prev = np.array([0, 0, 1.0]), np.array([np.nan, np.nan, 0])
        >>> _, outs = op.run(op.init_state(), np.zeros(3, dtype=np.int64), 1, [member, prev])
        >>> [o.tolist() for o in outs[:3]]
        [[1.0, 2.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]
    """

    name: str
    group_count: int
    n_args: int = field(init=False, repr=False, compare=False)
    n_outputs: int = field(init=False, repr=False, compare=False, default=MAX_GROUPS)

    _NAMES: ClassVar[tuple[str, ...]] = ("dynamic_group_cumsum", "dynamic_group_cumcount")

    def __post_init__(self) -> None:
        _check_name(type(self).__name__, self.name, self._NAMES)
        _check_int(self.name, "group_count", self.group_count, 2, MAX_GROUPS, "e.g. group_count=3")
        object.__setattr__(self, "n_args", 4 if self.name == "dynamic_group_cumsum" else 2)

    def init_state(self) -> dict[str, np.ndarray]:
        return {"totals": np.zeros((0, MAX_GROUPS))}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, cols = _check_batch(self.name, self.n_args, slots, n_keys, args)
        st = _grown_copy(self.name, {"totals": _Arr(np.float64, 0.0, "cols", MAX_GROUPS)}, state, n_keys, 0)
        if self.n_args == 4:
            cum, prev_cum, member, prev_member = cols
        else:
            member, prev_member = cols
            cum = prev_cum = member
        out = kt.dynamic_group(
            slots_, cum, prev_cum, member, prev_member, self.group_count, self.n_args == 2, st["totals"]
        )
        return st, list(out)


@dataclass(frozen=True)
class RangeCount(_BufferedOp):
    """``top_range`` / ``low_range``: how many immediately preceding values are strictly below / above x.

    ("A new N-period high / low".) NULL counts as the smallest value, as in
    DolphinDB's ``tmTopRange``; NULLs before a key's first value output NULL. A
    monotonic stack makes this amortised O(1) per row; it holds at most
    ``MAX_WINDOW`` candidates, so counts stop at the oldest one dropped past that.

    Example:
        >>> import numpy as np
        >>> op = RangeCount("top_range")
        >>> x = np.array([13.5, 13.6, 13.4, 13.3, 13.5, 13.9, 13.1, 20.1])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [0.0, 1.0, 0.0, 0.0, 2.0, 5.0, 0.0, 7.0]
    """

    name: str
    n_args = 1

    _NAMES: ClassVar[tuple[str, ...]] = ("top_range", "low_range")

    def __post_init__(self) -> None:
        _check_name(type(self).__name__, self.name, self._NAMES)

    def _layout(self) -> dict[str, _Arr]:
        return {
            "stack_v": _Arr(np.float64, math.nan, "prefix"), "stack_i": _Arr(np.int64, 0, "prefix"),
            "depth": _Arr(np.int64, 0), "rows": _Arr(np.int64, 0), "wall": _Arr(np.int64, -1),
            "seen": _Arr(np.int64, 0),
        }  # fmt: skip

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        (x,) = cols
        null = np.isnan(x)
        # low_range is top_range of -x; NULL is the smallest value either way
        v = np.where(null, -np.inf, x) if self.name == "top_range" else np.where(null, np.inf, -x)
        return int(
            kt.range_count(
                slots, v, null, i0, self.max_rows, out,
                st["stack_v"], st["stack_i"], st["depth"], st["rows"], st["wall"], st["seen"],
            )
        )  # fmt: skip


@dataclass(frozen=True)
class TrueRange(StateOp):
    """``true_range(high, low, close)`` = max(|high - low|, |high - prev close|, |prev close - low|).

    NULL on a key's first row (no previous close) and when an input is NULL.

    Example:
        >>> import numpy as np
        >>> op = TrueRange()
        >>> h, lo, c = np.array([11.48, 12.26]), np.array([10.91, 11.18]), np.array([11.38, 12.1])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(2, dtype=np.int64), 1, [h, lo, c])
        >>> np.round(out, 2).tolist()
        [nan, 1.08]
    """

    name = "true_range"
    n_args = 3

    def init_state(self) -> dict[str, np.ndarray]:
        return {"prev_close": np.empty(0)}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (h, lo, c) = _check_batch(self.name, self.n_args, slots, n_keys, args)
        st = _grown_copy(self.name, {"prev_close": _Arr(np.float64, math.nan)}, state, n_keys, 0)
        return st, [kt.true_range(slots_, h, lo, c, st["prev_close"])]


@dataclass(frozen=True)
class SumBars(_BufferedOp):
    """``sumbars(x, y)``: counting back from the current row, how many rows it takes for x to add up to y.

    0 while all the key's rows so far add up to less than ``y``. DolphinDB requires
    non-negative ``x``; here NULL and negative values add 0. A key keeps only the
    rows of its last answer (at most ``MAX_WINDOW`` rows while the sum stays
    below ``y``; older rows are then forgotten).

    Example:
        >>> import numpy as np
        >>> op = SumBars(y=3)
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1,
        ...                    [np.array([1, 2, 3.3, 2, 5])])
        >>> out.tolist()
        [0.0, 2.0, 1.0, 2.0, 1.0]
    """

    y: float
    name = "sumbars"
    n_args = 1

    def __post_init__(self) -> None:
        _check_float(self.name, "y", self.y, math.isfinite, "a finite number")

    def _layout(self) -> dict[str, _Arr]:
        return {"ring": _Arr(np.float64, 0.0, "ring"), "start": _Arr(np.int64, 0), "count": _Arr(np.int64, 0)}

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        return int(
            kt.sumbars(
                slots, cols[0], float(self.y), i0, self.max_rows, out, st["ring"], st["start"], st["count"]
            )
        )


@dataclass(frozen=True)
class Iterate(StateOp):
    """``iterate(x, init, coeff)``: the linear recursion ``out_n = coeff · y_n + x_n``.

    ``y_n`` holds the previous ``len(coeff)`` outputs, oldest first, starting from
    ``init`` (same length as ``coeff``); DolphinDB's ``iterate(init, coeffs, input)``
    with a vector ``input``. A NULL ``x`` outputs NULL and leaves the recursion
    where it was (DolphinDB's arithmetic would make every later output NULL).

    Example:
        >>> import numpy as np
        >>> op = Iterate(init=(1, 1), coeff=(1, 1))
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1,
        ...                    [np.array([1, 2, 3, 4, 5.0])])
        >>> out.tolist()
        [3.0, 6.0, 12.0, 22.0, 39.0]
    """

    init: float | tuple[float, ...]
    coeff: float | tuple[float, ...]
    name = "iterate"
    n_args = 1

    def __post_init__(self) -> None:
        init = _numbers(self.name, "init", self.init)
        coeff = _numbers(self.name, "coeff", self.coeff)
        if len(init) != len(coeff):
            raise _bad(
                self.name, "init", self.init, f"{len(coeff)} number(s), as many as coeff",
                "e.g. iterate(x, init=(1, 1), coeff=(0.5, 0.5))",
            )  # fmt: skip
        object.__setattr__(self, "init", init if len(init) > 1 else init[0])
        object.__setattr__(self, "coeff", coeff if len(coeff) > 1 else coeff[0])

    def _vectors(self) -> tuple[np.ndarray, np.ndarray]:
        return np.atleast_1d(np.asarray(self.init, dtype=np.float64)), np.atleast_1d(
            np.asarray(self.coeff, dtype=np.float64)
        )

    def init_state(self) -> dict[str, np.ndarray]:
        m = self._vectors()[1].size
        return {"ring": np.empty((0, m)), "wpos": np.empty(0, dtype=np.int64)}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (x,) = _check_batch(self.name, self.n_args, slots, n_keys, args)
        init, coeff = self._vectors()
        layout = {"ring": _Arr(np.float64, init, "cols", init.size), "wpos": _Arr(np.int64, 0)}
        st = _grown_copy(self.name, layout, state, n_keys, 0)
        return st, [kt.iterate(slots_, x, coeff, st["ring"], st["wpos"])]


# ---------------------------------------------------------------- registry


def _tm_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TimeWindow(name, p["window"])


def _moment_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TimeMoment(name, p["window"], biased=p.get("biased", True))


def _tm_specs() -> list[StateOpSpec]:
    plain = [n for n in TimeWindow._OPS if n not in TimeWindow._PAIRS]
    pairs = {"tmcorr": "x, y", "tmcovar": "x, y", "tmcovarp": "x, y", "tmwsum": "x, y", "tmwavg": "x, y",
             "tmbeta": "y, x"}  # fmt: skip
    return [
        *(
            StateOpSpec(n, f"{n}(t, x, window)", ("window",), ("window",), _tm_builder(n), columns=("t", "x"),
                        result="long" if n == "tmcount" else "double")
            for n in plain
        ),
        *(
            StateOpSpec(n, f"{n}(t, {cols}, window)", ("window",), ("window",), _tm_builder(n),
                        columns=("t", *cols.split(", ")))
            for n, cols in pairs.items()
        ),
        StateOpSpec(
            "tmpercentile", "tmpercentile(t, x, percent, window, interpolation='linear')",
            ("percent", "window", "interpolation"), ("percent", "window"),
            lambda p: TimePercentile("tmpercentile", p["window"], p["percent"], p.get("interpolation", "linear")),
            columns=("t", "x"),
        ),
        StateOpSpec(
            "tmrank", "tmrank(t, x, ascending, window, ignore_na=True, ties_method='min', percent=False)",
            ("ascending", "window", "ignore_na", "ties_method", "percent"), ("ascending", "window"),
            lambda p: TimeRank("tmrank", p["window"], p["ascending"], p.get("ignore_na", True),
                               p.get("ties_method", "min"), p.get("percent", False)),
            columns=("t", "x"),
        ),
        *(
            StateOpSpec(n, f"{n}(t, x, window, biased=True)", ("window", "biased"), ("window",),
                        _moment_builder(n), columns=("t", "x"))
            for n in TimeMoment._OPS
        ),
    ]  # fmt: skip


def _mtop_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: MovingTopN(
        name, p["window"], p["top"], p.get("ascending", True), p.get("ties_method"), p.get("biased", True)
    )


def _mtop_spec(name: str) -> StateOpSpec:
    agg = _top_agg(name, "m")
    cols = ("x", "y", "s") if agg in _PAIR_AGGS else ("x", "s")
    moment = agg in ("skew", "kurtosis")
    params = ("window", "top", *(("biased",) if moment else ()), "ascending", "ties_method")
    shown = [*cols, "window", "top", *(("biased=True",) if moment else ()), "ascending=True",
             f"ties_method={'latest' if moment else 'oldest'!r}"]  # fmt: skip
    return StateOpSpec(
        name, f"{name}({', '.join(shown)})", params, ("window", "top"), _mtop_builder(name), columns=cols
    )


def _cumtop_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: CumTopN(
        name, p["top"], p.get("ascending", True), p.get("ties_method"), p.get("biased", True)
    )


def _cumtop_spec(name: str) -> StateOpSpec:
    agg = _top_agg(name, "cum")
    cols = ("x", "y", "s") if agg in _PAIR_AGGS else ("x", "s")
    moment = agg in ("skew", "kurtosis")
    params = ("top", *(("biased",) if moment else ()), "ascending", "ties_method")
    shown = [*cols, "top", *(("biased=True",) if moment else ()), "ascending=True", "ties_method='latest'"]
    return StateOpSpec(
        name, f"{name}({', '.join(shown)})", params, ("top",), _cumtop_builder(name), columns=cols
    )


def _tmtop_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TimeTopN(
        name, p["window"], p["top"], p.get("ascending", True), p.get("ties_method"), p.get("biased", True)
    )


def _tmtop_spec(name: str) -> StateOpSpec:
    agg = _top_agg(name, "tm")
    cols = ("t", "x", "y", "s") if agg in _PAIR_AGGS else ("t", "x", "s")
    moment = agg in ("skew", "kurtosis")
    params = ("window", "top", *(("biased",) if moment else ()), "ascending", "ties_method")
    shown = [*cols, "window", "top", *(("biased=True",) if moment else ()), "ascending=True",
             "ties_method='latest'"]  # fmt: skip
    return StateOpSpec(
        name, f"{name}({', '.join(shown)})", params, ("window", "top"), _tmtop_builder(name), columns=cols
    )


def _top_specs() -> list[StateOpSpec]:
    return [
        *(_mtop_spec(n) for n in MovingTopN._NAMES),
        *(_cumtop_spec(n) for n in CumTopN._NAMES),
        *(_tmtop_spec(n) for n in TimeTopN._NAMES),
    ]


def _group_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: DynamicGroup(name, p["group_count"])


def _range_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: RangeCount(name)


def _helper_specs() -> list[StateOpSpec]:
    return [
        StateOpSpec(
            "dynamic_group_cumsum",
            "dynamic_group_cumsum(cum_value, prev_cum_value, membership, prev_membership, group_count)",
            ("group_count",), ("group_count",), _group_builder("dynamic_group_cumsum"),
            columns=("cum_value", "prev_cum_value", "membership", "prev_membership"), n_outputs=MAX_GROUPS,
        ),
        StateOpSpec(
            "dynamic_group_cumcount", "dynamic_group_cumcount(membership, prev_membership, group_count)",
            ("group_count",), ("group_count",), _group_builder("dynamic_group_cumcount"),
            columns=("membership", "prev_membership"), n_outputs=MAX_GROUPS,
        ),
        *(StateOpSpec(n, f"{n}(x)", (), (), _range_builder(n), result="long") for n in RangeCount._NAMES),
        StateOpSpec("true_range", "true_range(high, low, close)", (), (), lambda p: TrueRange(),
                    columns=("high", "low", "close")),
        StateOpSpec("sumbars", "sumbars(x, y)", ("y",), ("y",), lambda p: SumBars(p["y"]), result="long"),
        StateOpSpec("iterate", "iterate(x, init, coeff)", ("init", "coeff"), ("init", "coeff"),
                    lambda p: Iterate(p["init"], p["coeff"])),
    ]  # fmt: skip


def _specs() -> list[StateOpSpec]:
    """Every state function of this module."""
    return [
        *_tm_specs(),
        *_top_specs(),
        *_helper_specs(),
    ]


register(*_specs())
