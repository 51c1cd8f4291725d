"""Iterators, whose outputs feed back into later rows of their key: ``state_iterate``,
``conditional_iterate`` and ``generic_state_iterate``; see :mod:`headwater.kernels.higher_order`."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import njit

from headwater.errors import ExecutionError
from headwater.kernels.base.buffers import ring_advance, ring_slot
from headwater.kernels.base.checks import MAX_WINDOW, bad, check_func_name, check_int
from headwater.kernels.base.operators import Field, LayoutOp, State, StateOpSpec, f64, i64

__all__ = ["COMBINERS", "ITERATE_FUNCS", "SPECS", "ConditionalIterate", "GenericStateIterate", "StateIterate"]


# Functions an iterator applies to its own past outputs.
H_MSUM, H_MAVG, H_MMAX, H_MMIN, H_MCOUNT, H_CUMFIRST, H_CUMLAST, H_FFILL, H_MOVE = range(9)


# Built-in combiners of generic_state_iterate().
C_SUM_ADD, C_AVG_ADD, C_MAX, C_MIN, C_PROD_MUL = range(5)


ITERATE_FUNCS: dict[str, int] = {
    "msum": H_MSUM, "mavg": H_MAVG, "mmax": H_MMAX, "mmin": H_MMIN, "mcount": H_MCOUNT,
    "cumfirst_not": H_CUMFIRST, "cumlast_not": H_CUMLAST, "ffill": H_FFILL, "move": H_MOVE,
}  # fmt: skip
"""Functions the iterators apply to their own past outputs (DolphinDB's whitelist without tm-functions)."""


COMBINERS: dict[str, int] = {
    "sum_add": C_SUM_ADD, "avg_add": C_AVG_ADD, "max": C_MAX, "min": C_MIN,
    "prod_mul": C_PROD_MUL,
}  # fmt: skip
"""Built-in combiners of ``generic_state_iterate``, run in the compiled kernel."""


_WINDOWED = ("msum", "mavg", "mmax", "mmin", "mcount")


def _iterate_func(func: str, param: str, window_param: str, value: Any, window: Any) -> tuple[str, int]:
    """Validate an iterate function and its window; return (snake name, ring width)."""
    name = check_func_name(func, param, value, ITERATE_FUNCS, f"e.g. {func}(..., {param}='msum', {window_param}=3)")
    if name in _WINDOWED:
        if window is None:
            raise bad(func, window_param, None, f"the window of {name}", f"e.g. {window_param}=3")
        return name, check_int(func, window_param, window, 1, MAX_WINDOW, f"the window of {name}")
    if name == "move":
        if isinstance(window, numbers.Integral) and not isinstance(window, bool) and window <= 0:
            raise bad(
                func, window_param, window, "a shift >= 1",
                f"move by {window} looks at the current or later outputs, which do not exist yet",
            )  # fmt: skip
        shift = check_int(
            func, window_param, window, 1, MAX_WINDOW - 1, f"the shift of move, e.g. {window_param}=1"
        )
        return name, shift + 1
    if window is not None:
        raise bad(
            func, window_param, window, "no window", f"{name} takes no window; leave {window_param} out"
        )
    return name, 1


def _iter_layout(width: int) -> dict[str, Field]:
    return {
        "ring": f64(shape=(width,)), "n_out": i64(), "wpos": i64(), "first_not": f64(),
        "last_not": f64(),
    }  # fmt: skip


@dataclass(frozen=True)
class StateIterate(LayoutOp):
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
        check_int(self.name, "initial_window", self.initial_window, 1, MAX_WINDOW, "e.g. initial_window=3")
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
            raise bad(
                self.name, "combine_coeff", coeff, "two finite numbers", "e.g. combine_coeff=(0.5, 0.5)"
            )
        object.__setattr__(self, "combine_coeff", (float(coeff[0]), float(coeff[1])))

    def _layout(self) -> dict[str, Field]:
        return _iter_layout(self.width)

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        x, initial = cols
        c0, c1 = self.combine_coeff
        return [
            state_iterate(
                ITERATE_FUNCS[self.iterate_func], slots, x, initial, self.initial_window, c0, c1,
                st["ring"], st["n_out"], st["wpos"], st["first_not"], st["last_not"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class ConditionalIterate(LayoutOp):
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

    def _layout(self) -> dict[str, Field]:
        return _iter_layout(self.width)

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        cond, true_value = cols
        return [
            conditional_iterate(
                ITERATE_FUNCS[self.false_iter_func], slots, cond, true_value,
                st["ring"], st["n_out"], st["wpos"], st["first_not"], st["last_not"],
            )
        ]  # fmt: skip


@dataclass(frozen=True)
class GenericStateIterate(LayoutOp):
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
        check_int(
            self.name, "window", self.window, 0, MAX_WINDOW, "e.g. window=3 (0: the previous output only)"
        )
        if not callable(self.func):
            func = check_func_name(
                self.name, "func", self.func, COMBINERS,
                "or pass a Python callable f(last_outputs, x) -> float",
            )  # fmt: skip
            object.__setattr__(self, "func", func)

    def _layout(self) -> dict[str, Field]:
        return {"ring": f64(shape=(max(self.window, 1),)), "n_out": i64(), "wpos": i64()}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        x, initial = cols
        if isinstance(self.func, str):
            prev = np.empty(max(self.window, 1))
            return [
                generic_iterate(
                    COMBINERS[self.func], slots, x, initial, self.window, st["ring"], st["n_out"], st["wpos"],
                    prev,
                )
            ]  # fmt: skip
        try:
            return [
                generic_iterate_py(
                    self.func, slots, x, initial, self.window, st["ring"], st["n_out"], st["wpos"]
                )
            ]
        except Exception as exc:
            raise ExecutionError(
                f"state function {self.name!r}: func={self.func!r} raised {type(exc).__name__}: {exc}; "
                "it must take (last_outputs: np.ndarray, x: float) and return a number"
            ) from exc


# ---------------------------------------------------------------- kernels


@njit(cache=True, inline="always")
def _widen_range(hi, lo, v):  # pragma: no cover - numba
    """The range (hi, lo) widened to take in the non-NULL ``v``."""
    if v > hi:
        hi = v
    if v < lo:
        lo = v
    return hi, lo


@njit(cache=True)
def _history(op, k, ring, n_out, wpos, first_not, last_not):  # pragma: no cover - numba
    """``iterate_func(out)[j]`` for the key's latest output j, from the outputs kept in ``ring``.

    ``ring`` keeps the last ``size`` outputs: the window of m-functions, or
    ``shift + 1`` for ``move``. The m-functions follow the m-function rules (NULL
    until ``size`` outputs exist, except ``mcount``; NULLs skipped).
    """
    no = n_out[k]
    if no == 0:
        return np.nan
    if op == H_CUMFIRST:
        return first_not[k]
    if op in (H_CUMLAST, H_FFILL):
        return last_not[k]
    size = ring.shape[1]
    if op == H_MOVE:
        # the ring is full once `shift + 1` outputs exist; its oldest slot is the next to write
        return ring[k, wpos[k]] if no >= size else np.nan
    if op != H_MCOUNT and no < size:
        return np.nan
    m = no if no < size else size
    cnt = 0
    s = 0.0
    hi = -np.inf
    lo = np.inf
    p = wpos[k]
    for _ in range(m):
        p = p - 1 if p > 0 else size - 1
        v = ring[k, p]
        if v == v:
            cnt += 1
            s += v
            hi, lo = _widen_range(hi, lo, v)
    if cnt == 0:
        return np.nan
    if op == H_MSUM:
        return s
    if op == H_MAVG:
        return s / cnt
    if op == H_MMAX:
        return hi
    if op == H_MMIN:
        return lo
    return float(cnt)  # H_MCOUNT


@njit(cache=True, inline="always")
def _push(k, v, ring, n_out, wpos, first_not, last_not):  # pragma: no cover - numba
    ring[k, ring_advance(wpos, k, ring.shape[1])] = v
    n_out[k] += 1
    if v == v:
        last_not[k] = v
        if first_not[k] != first_not[k]:
            first_not[k] = v


@njit(cache=True)
def state_iterate(
    op, slots, x, initial, initial_window, c0, c1, ring, n_out, wpos, first_not, last_not
):  # pragma: no cover - numba
    """``out[k] = initial[k]`` for the key's first ``initial_window`` rows, then ``c0·x[k] + c1·f(out)[k-1]``."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        if n_out[k] < initial_window:
            v = initial[i]
        else:
            v = c0 * x[i] + c1 * _history(op, k, ring, n_out, wpos, first_not, last_not)
        _push(k, v, ring, n_out, wpos, first_not, last_not)
        out[i] = v
    return out


@njit(cache=True)
def conditional_iterate(
    op, slots, cond, true_value, ring, n_out, wpos, first_not, last_not
):  # pragma: no cover - numba
    """``out[k] = true_value[k]`` where ``cond[k]`` is true, else ``f(out)[k-1]``; NULL cond is false."""
    n = cond.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        c = cond[i]
        v = true_value[i] if c == c and c != 0.0 else _history(op, k, ring, n_out, wpos, first_not, last_not)
        _push(k, v, ring, n_out, wpos, first_not, last_not)
        out[i] = v
    return out


@njit(cache=True)
def _combine(op, prev, m, xv):  # pragma: no cover - numba
    """A built-in combiner over ``prev[:m]`` (NULLs skipped) and the row's ``xv``."""
    cnt = 0
    s = 0.0
    p = 1.0
    hi = -np.inf
    lo = np.inf
    for j in range(m):
        v = prev[j]
        if v == v:
            cnt += 1
            s += v
            p *= v
            hi, lo = _widen_range(hi, lo, v)
    if op in (C_MAX, C_MIN):
        if xv == xv:
            cnt += 1
            hi, lo = _widen_range(hi, lo, xv)
        if cnt == 0:
            return np.nan
        return hi if op == C_MAX else lo
    if cnt == 0:
        return np.nan
    if op == C_SUM_ADD:
        return s + xv
    if op == C_AVG_ADD:
        return s / cnt + xv
    return p * xv  # C_PROD_MUL


@njit(cache=True)
def generic_iterate(op, slots, x, initial, window, ring, n_out, wpos, prev):  # pragma: no cover - numba
    """``genericStateIterate`` with a built-in combiner; see :func:`generic_iterate_py` for the rules."""
    n = x.shape[0]
    out = np.empty(n)
    size = ring.shape[1]
    for i in range(n):
        k = slots[i]
        no = n_out[k]
        if window > 0 and no < window:
            v = initial[i]
        else:
            if no == 0:  # window == 0: the first row iterates on its initial value
                prev[0] = initial[i]
                m = 1
            else:
                m = size
                p = wpos[k]
                for j in range(size):  # oldest first
                    prev[j] = ring[k, ring_slot(p + j, size)]
            v = _combine(op, prev, m, x[i])
        ring[k, ring_advance(wpos, k, size)] = v
        n_out[k] = no + 1
        out[i] = v
    return out


def generic_iterate_py(fn, slots, x, initial, window, ring, n_out, wpos):
    """``genericStateIterate`` with a Python callable ``fn(last_outputs, x_k) -> float``, per row.

    With ``window == 0`` ``last_outputs`` holds the previous output (the row's
    ``initial`` value on a key's first row); otherwise the key's first ``window``
    rows output ``initial`` and later rows pass the last ``window`` outputs,
    oldest first. Plain Python: one call per row.
    """
    n = x.shape[0]
    out = np.empty(n)
    size = ring.shape[1]
    for i in range(n):
        k = int(slots[i])
        no = int(n_out[k])
        if window > 0 and no < window:
            v = float(initial[i])
        else:
            if no == 0:
                last = np.array([initial[i]])
            else:
                p = int(wpos[k])
                last = np.concatenate((ring[k, p:], ring[k, :p]))
            v = float(fn(last, float(x[i])))
        p = int(wpos[k])
        ring[k, p] = v
        wpos[k] = p + 1 if p + 1 < size else 0
        n_out[k] = no + 1
        out[i] = v
    return out


# ---------------------------------------------------------------- specs


SPECS: tuple[StateOpSpec, ...] = (
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
)  # fmt: skip
