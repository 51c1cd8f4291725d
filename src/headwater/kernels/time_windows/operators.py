"""The tm-function operators, ``tmoving`` and their specs; see :mod:`headwater.kernels.time_windows`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np

from headwater.kernels.base.buffers import BufferArray, BufferedOp
from headwater.kernels.base.checks import (
    check_bool,
    check_choice,
    check_float,
    check_func_name,
    check_name,
    window_units,
)
from headwater.kernels.base.numeric import TIES
from headwater.kernels.base.operators import DelegateOp, State, StateOp, StateOpSpec, build_op
from headwater.kernels.time_windows import kernels as kt

__all__ = ["SPECS", "TMoving", "TimeMoment", "TimePercentile", "TimeRank", "TimeWindow"]


_NO_DEQUE = np.zeros((0, 0), dtype=np.int64)
_NO_KEYS = np.zeros(0, dtype=np.int64)
_NO_ACC = np.zeros((0, 0))


@dataclass(frozen=True)
class TimeWindow(BufferedOp):
    """tm-functions over the time window ``(t_i - window, t_i]`` of each key.

    ``tmsum``, ``tmsum2``, ``tmavg``, ``tmcount``, ``tmvar``/``tmstd`` (sample),
    ``tmvarp``/``tmstdp`` (population), ``tmwsum``, ``tmwavg``, ``tmcovar``,
    ``tmcovarp``, ``tmcorr`` and ``tmbeta`` keep running (compensated) sums and
    cost O(1) per row; ``tmmax``/``tmmin`` keep a monotonic deque; ``tmprod``,
    ``tmmed``, ``tmpercentile``, ``tmrank``, ``tmskew`` and ``tmkurtosis`` look at the
    whole window, O(rows in window) per row (a sort for the order statistics).
    ``tmbeta(t, y, x, window)`` regresses ``y`` on ``x``; ``tmwavg(t, x, y, window)``
    averages ``x`` weighted by ``y``. ``tmove`` returns ``x`` of the latest row at or
    before ``t_i - window`` (NULL if there is none). See :mod:`headwater.kernels.time_windows`
    for the window and NULL rules.

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
        check_name(type(self).__name__, self.name, tuple(self._OPS))
        window_units(self.name, self.window)
        object.__setattr__(self, "n_args", 3 if self.name in self._PAIRS else 2)

    @property
    def span(self) -> float:
        """The window in the units of the time column (microseconds for a duration)."""
        return window_units(self.name, self.window)

    @property
    def op(self) -> int:
        return self._OPS[self.name]

    def _params(self) -> np.ndarray:
        return np.zeros(4)

    def _layout(self) -> dict[str, BufferArray]:
        nan = math.nan
        layout = {
            "t": BufferArray(np.float64, nan, "ring"),
            "x": BufferArray(np.float64, nan, "ring"),
            "start": BufferArray(np.int64, 0),
            "count": BufferArray(np.int64, 0),
            "last_t": BufferArray(np.float64, nan),
            "prev": BufferArray(np.float64, nan, "cols", 2),
        }
        if self.n_args == 3:
            layout["y"] = BufferArray(np.float64, nan, "ring")
        acc = kt.acc_layout(self.op)
        if acc.size:
            layout["acc"] = BufferArray(np.float64, acc, "cols", acc.size)
        if self.op in (kt.TM_MAX, kt.TM_MIN):
            layout |= {
                "dq": BufferArray(np.int64, 0, "deque"),
                "dq_head": BufferArray(np.int64, 0),
                "dq_len": BufferArray(np.int64, 0),
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
        check_float(self.name, "percent", self.percent, lambda p: 0 <= p <= 100, "a number in [0, 100]")
        check_choice(self.name, "interpolation", self.interpolation, self._INTERP)

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

    def __post_init__(self) -> None:
        super().__post_init__()
        for flag in ("ascending", "ignore_na", "percent"):
            check_bool(self.name, flag, getattr(self, flag))
        check_choice(self.name, "ties_method", self.ties_method, TIES)

    def _params(self) -> np.ndarray:
        return np.array(
            [self.ascending, self.ignore_na, TIES[self.ties_method], self.percent], dtype=np.float64
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
        check_bool(self.name, "biased", self.biased)

    def _params(self) -> np.ndarray:
        return np.array([float(self.biased), 0.0, 0.0, 0.0])


_TMOVING = {"sum": "tmsum", "sum2": "tmsum2", "avg": "tmavg", "mean": "tmavg", "count": "tmcount", "max": "tmmax",
            "min": "tmmin", "first": "tmfirst", "last": "tmlast", "std": "tmstd", "stdp": "tmstdp", "var": "tmvar",
            "varp": "tmvarp", "med": "tmmed", "prod": "tmprod", "skew": "tmskew", "kurtosis": "tmkurtosis"}  # fmt: skip


@dataclass(frozen=True)
class TMoving(DelegateOp):
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
    name = "tmoving"
    n_args = 2

    def __post_init__(self) -> None:
        inner = check_func_name(self.name, "func", self.func, _TMOVING, "e.g. tmoving(time, price, '5m', func='avg')")
        object.__setattr__(self, "inner", build_op(_BY_NAME[_TMOVING[inner]], {"window": self.window}))


# ---------------------------------------------------------------- specs


def _tm_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TimeWindow(name, p["window"])


def _moment_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: TimeMoment(name, p["window"], biased=p.get("biased", True))


_PAIRS = {"tmcorr": "x, y", "tmcovar": "x, y", "tmcovarp": "x, y", "tmwsum": "x, y", "tmwavg": "x, y",
          "tmbeta": "y, x"}  # fmt: skip

SPECS: tuple[StateOpSpec, ...] = (
    *(
        StateOpSpec(n, f"{n}(t, x, window)", ("window",), ("window",), _tm_builder(n), columns=("t", "x"),
                    result="long" if n == "tmcount" else "double")
        for n in TimeWindow._OPS if n not in TimeWindow._PAIRS
    ),
    *(
        StateOpSpec(n, f"{n}(t, {cols}, window)", ("window",), ("window",), _tm_builder(n),
                    columns=("t", *cols.split(", ")))
        for n, cols in _PAIRS.items()
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
    StateOpSpec(
        "tmoving", f"tmoving(t, x, window, func={'|'.join(_TMOVING)})", ("window", "func"), ("window", "func"),
        lambda p: TMoving(p["window"], p["func"]), columns=("t", "x"),
    ),
)  # fmt: skip

_BY_NAME = {spec.name: spec for spec in SPECS}  # tmoving runs the tm-function it names from these
