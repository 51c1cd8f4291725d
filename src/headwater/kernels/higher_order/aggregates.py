"""Higher-order functions that apply a named aggregate or fold: ``segmentby``, ``moving``, ``window``
and ``accumulate``; see :mod:`headwater.kernels.higher_order`."""

from __future__ import annotations

import abc
import math
import numbers
from collections.abc import Mapping
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any, ClassVar

import numpy as np
from numba import njit

from headwater.aggregates.prefix import running_by_key
from headwater.aggregates.rules import AVG, CATALOG, COUNT, MAX, MIN, STD, STDP, SUM, VAR, VARP
from headwater.aggregates.values import over_values
from headwater.kernels.base.buffers import ring_push
from headwater.kernels.base.checks import MAX_WINDOW, bad, check_func_name, check_int, check_window
from headwater.kernels.base.operators import (
    Field,
    LayoutOp,
    State,
    StateOp,
    StateOpSpec,
    build_op,
    check_batch,
    f64,
    i64,
    inner_state,
    wrap_inner_state,
)

__all__ = ["AGGREGATES", "Accumulate", "Moving", "Segmentby", "Window", "specs"]


# Binary folds of accumulate().
ACC_ADD, ACC_SUB, ACC_MUL, ACC_MAX, ACC_MIN = range(5)


AGGREGATES: dict[str, int] = {name: agg.code for name, agg in CATALOG.items()}
"""Aggregates ``moving`` and ``window`` accept as ``func``."""


# ---------------------------------------------------------------- segmentby


@dataclass(frozen=True)
class Segmentby(LayoutOp):
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
        "cumsum": SUM, "cumavg": AVG, "cummax": MAX, "cummin": MIN, "cumcount": COUNT, "cumvar": VAR,
        "cumvarp": VARP, "cumstd": STD, "cumstdp": STDP,
    }  # fmt: skip

    def __post_init__(self) -> None:
        func = check_func_name(self.name, "func", self.func, self._FUNCS, "e.g. segmentby(x, seg, func='cumsum')")
        object.__setattr__(self, "func", func)

    def _layout(self) -> dict[str, Field]:
        return {
            "seg_last": f64(), "n_rows": i64(), "count": i64(), "acc": f64(), "mean": f64(0.0),
            "ssqdm": f64(0.0),
        }  # fmt: skip

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        x, seg = cols
        return [
            segment_cum(
                self._FUNCS[self.func], slots, x, seg, st["seg_last"], st["n_rows"], st["count"], st["acc"],
                st["mean"], st["ssqdm"],
            )
        ]  # fmt: skip


# ---------------------------------------------------------------- moving / window


def _check_aggregate(func: str, value: Any) -> str:
    return check_func_name(func, "func", value, AGGREGATES, f"e.g. {func}(x, ..., func='sum')")


class _WindowAgg(LayoutOp):
    """The generic kernel: aggregate rows ``[i - a, i - b]`` of each key, O(a - b) per row."""

    name: str
    func: str
    n_args = 1

    @abc.abstractmethod
    def _bounds(self) -> tuple[int, int, int, bool]:
        """(a, b, min_periods, full_only) of :func:`window_agg`."""

    def _layout(self) -> dict[str, Field]:
        a = self._bounds()[0]
        return {"ring": f64(shape=(a + 1,)), "n_rows": i64(), "wpos": i64()}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        a, b, minp, full_only = self._bounds()
        scratch = np.empty(a + 1)
        return [
            window_agg(
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
    row (``med`` sorts it). That fast path needs the m-functions: it is taken when the
    operator is given the registry (``registry=``, as ``make_state_op`` does); without
    it every aggregate rescans the window.

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
    _: KW_ONLY
    registry: InitVar[Mapping[str, StateOpSpec] | None] = None
    fast: StateOp | None = field(default=None, init=False, repr=False, compare=False)
    name = "moving"

    # aggregates with an equivalent m-function; switched off in tests to compare both paths
    fast_path: ClassVar[bool] = True
    _FAST: ClassVar[dict[str, str]] = {
        "sum": "msum", "avg": "mavg", "max": "mmax", "min": "mmin", "std": "mstd", "var": "mvar",
        "stdp": "mstdp", "varp": "mvarp", "first": "mfirst", "last": "mlast",
    }  # fmt: skip

    def __post_init__(self, registry: Mapping[str, StateOpSpec] | None) -> None:
        object.__setattr__(self, "func", _check_aggregate(self.name, self.func))
        check_window(self.name, self.window)
        if self.min_periods is not None:
            check_int(
                self.name, "min_periods", self.min_periods, 1, self.window,
                f"min_periods must not exceed window={self.window}",
            )  # fmt: skip
        if registry is not None:
            object.__setattr__(self, "fast", self._fast_op(registry))

    def _bounds(self) -> tuple[int, int, int, bool]:
        if self.min_periods is None:
            return self.window - 1, 0, 1, True
        return self.window - 1, 0, self.min_periods, False

    def _fast_op(self, registry: Mapping[str, StateOpSpec]) -> StateOp | None:
        """The m-function that computes the same aggregate in O(1) per row, if there is one."""
        if self.func == "count" and self.min_periods is not None:
            return build_op(registry["mcount"], {"window": self.window, "min_periods": self.min_periods})
        name = self._FAST.get(self.func)
        if name is None:
            return None
        return build_op(registry[name], {"window": self.window, "min_periods": self.min_periods})

    def _inner(self) -> StateOp | None:
        return self.fast if self.fast_path else None

    def init_state(self) -> dict[str, np.ndarray]:
        inner = self._inner()
        return super().init_state() if inner is None else wrap_inner_state(inner.init_state())

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        inner = self._inner()
        if inner is None:
            return super().run(state, slots, n_keys, args)
        check_batch(self.name, self.n_args, slots, n_keys, args)
        st, outs = inner.run(inner_state(state), slots, n_keys, args)
        return wrap_inner_state(st), outs


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
                raise bad(self.name, param, value, "an integer <= 0", fix)
        if self.d2 > 0:
            raise bad(
                self.name, "d2", self.d2, "an integer <= 0",
                f"d2={self.d2} looks at later rows, which is not causal in a stream; "
                "shift the result instead, e.g. d1=-4, d2=0 in place of d1=-2, d2=2",
            )  # fmt: skip
        if self.d1 > self.d2:
            raise bad(self.name, "d1", self.d1, f"an integer <= d2={self.d2}", fix)
        if self.d1 < 1 - MAX_WINDOW:
            raise bad(self.name, "d1", self.d1, f"an integer >= {1 - MAX_WINDOW}", "the window is too large")
        object.__setattr__(self, "d1", int(self.d1))
        object.__setattr__(self, "d2", int(self.d2))

    def _bounds(self) -> tuple[int, int, int, bool]:
        return -self.d1, -self.d2, 0, False


# ---------------------------------------------------------------- accumulate


@dataclass(frozen=True)
class Accumulate(LayoutOp):
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
        "add": ACC_ADD, "sum": ACC_ADD, "sub": ACC_SUB, "mul": ACC_MUL, "prod": ACC_MUL,
        "max": ACC_MAX, "min": ACC_MIN,
    }  # fmt: skip

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "func", check_func_name(self.name, "func", self.func, self._FUNCS, "e.g. accumulate(x, func='add')")
        )
        if self.init is not None:
            ok = isinstance(self.init, numbers.Real) and not isinstance(self.init, bool | np.bool_)
            if not ok or not math.isfinite(self.init):
                raise bad(
                    self.name, "init", self.init, "a finite number", "e.g. accumulate(x, 'mul', init=1)"
                )

    def _layout(self) -> dict[str, Field]:
        if self.init is None:
            return {"acc": f64(), "has": i64()}
        return {"acc": f64(float(self.init)), "has": Field((), np.int64, 1)}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        return [accumulate(self._FUNCS[self.func], slots, cols[0], st["acc"], st["has"])]


# ---------------------------------------------------------------- kernels


@njit(cache=True)
def window_agg(
    op, slots, x, a, b, minp, full_only, ring, n_rows, wpos, vals, buf
):  # pragma: no cover - numba
    """Aggregate rows ``[i - a, i - b]`` of each key (``a >= b >= 0``; row i = the current one).

    ``ring`` keeps the last ``a + 1`` rows of a key. A window that starts before
    the key's first row is cut short; an empty one is NULL. ``full_only`` also
    nulls the key's first ``a`` rows; ``minp`` is the least number of non-NULL
    values a window needs. Costs O(a - b) per row (a sort for ``med``).
    """
    n = x.shape[0]
    out = np.empty(n)
    size = a + 1
    for i in range(n):
        k = slots[i]
        _, r, _ = ring_push(ring, n_rows, wpos, k, x[i], size)
        hi = r - b
        if hi < 0 or (full_only and r < a):
            out[i] = np.nan
            continue
        lo = r - a if r >= a else 0
        m = hi - lo + 1
        nn = 0
        for j in range(m):
            v = ring[k, (lo + j) % size]
            vals[j] = v
            if v == v:
                nn += 1
        out[i] = np.nan if nn < minp else over_values(op, vals, m, buf)
    return out


def segment_cum(op, slots, x, seg, seg_last, n_rows, count, acc, mean, ssqdm):  # type: ignore[no-untyped-def]
    """Cumulative aggregate ``op`` (a code of :mod:`headwater.aggregates.rules`) of ``x`` that restarts
    whenever ``seg`` changes (NULL equals NULL): per key, the summary ``(acc or mean, count, ssqdm)``."""
    restart = segment_starts(slots, seg, seg_last, n_rows)
    return running_by_key(op, slots, x, mean if op in (STD, VAR, STDP, VARP) else acc, count, ssqdm, restart)


@njit(cache=True)
def segment_starts(slots, seg, seg_last, n_rows):  # pragma: no cover - numba
    """Whether each row starts a segment of its key: its key's first row, or ``seg`` unlike the key's last."""
    restart = np.empty(len(seg), dtype=np.bool_)
    for i in range(len(seg)):
        k = slots[i]
        s = seg[i]
        last = seg_last[k]
        restart[i] = n_rows[k] == 0 or not (s == last or (s != s and last != last))
        seg_last[k] = s
        n_rows[k] += 1
    return restart


@njit(cache=True)
def accumulate(op, slots, x, acc, has):  # pragma: no cover - numba
    """Running fold ``acc = f(acc, x)``; NULL rows are skipped and output the last result."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v == v:
            if has[k] == 0:
                a = v
                has[k] = 1
            else:
                a = acc[k]
                if op == ACC_ADD:
                    a = a + v
                elif op == ACC_SUB:
                    a = a - v
                elif op == ACC_MUL:
                    a = a * v
                elif op == ACC_MAX:
                    a = a if a >= v else v
                else:
                    a = a if a <= v else v
            acc[k] = a
        out[i] = acc[k] if has[k] else np.nan
    return out


# ---------------------------------------------------------------- specs


def specs(registry: Mapping[str, StateOpSpec]) -> tuple[StateOpSpec, ...]:
    """The functions of this module; ``moving`` finds the m-functions of its fast path in ``registry``."""
    aggs = "|".join(AGGREGATES)
    return (
        StateOpSpec(
            "segmentby", "segmentby(x, segment, func='cumsum'|'cummax'|'cummin'|'cumcount'|'cumavg'|...)",
            ("func",), ("func",), lambda p: Segmentby(p["func"]), columns=("x", "segment"),
        ),
        StateOpSpec(
            "moving", f"moving(x, window, func={aggs}, min_periods=None)",
            ("window", "func", "min_periods"), ("window", "func"),
            lambda p: Moving(p["window"], p["func"], p.get("min_periods"), registry=registry),
        ),
        StateOpSpec(
            "window", f"window(x, d1, d2, func={aggs}) over rows [i+d1, i+d2], d1 <= d2 <= 0",
            ("d1", "d2", "func"), ("d1", "d2", "func"), lambda p: Window(p["d1"], p["d2"], p["func"]),
        ),
        StateOpSpec(
            "accumulate", "accumulate(x, func='add'|'sub'|'mul'|'max'|'min', init=None)",
            ("func", "init"), ("func",), lambda p: Accumulate(p["func"], p.get("init")),
        ),
    )  # fmt: skip
