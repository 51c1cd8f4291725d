"""State functions that look at an earlier row of the key: ``prev``, ``move``, ``deltas``, ``ratios``,
``percent_change``, ``ffill`` and ``prev_state``.

The row-shift functions use the row ``k`` (or ``n``) rows back even if it is NULL;
``ffill`` carries the last non-NULL value forward and ``prev_state`` the previous
run of equal values. Only causal shifts exist: a shift by ``k <= 0`` is refused.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numba import njit

from headwater.kernels.base.buffers import ring_advance
from headwater.kernels.base.checks import MAX_WINDOW, bad, check_int, check_name
from headwater.kernels.base.operators import Field, KernelOp, State, StateOpSpec, f64, i64

__all__ = ["SPECS", "Ffill", "PrevState", "Shift"]


# Operations of shift.
SHIFT_MOVE, SHIFT_DELTA, SHIFT_RATIO, SHIFT_PCT = 0, 1, 2, 3


@dataclass(frozen=True)
class Shift(KernelOp):
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
        "prev": SHIFT_MOVE,
        "move": SHIFT_MOVE,
        "deltas": SHIFT_DELTA,
        "ratios": SHIFT_RATIO,
        "percent_change": SHIFT_PCT,
    }

    def __post_init__(self) -> None:
        check_name("Shift", self.name, tuple(self._OPS))
        param = "k" if self.name == "move" else "n"
        lag = self.lag
        if isinstance(lag, numbers.Integral) and not isinstance(lag, bool) and lag <= 0:
            raise bad(
                self.name, param, lag, f"an integer in [1, {MAX_WINDOW}]",
                f"{param} <= 0 looks at later rows, which is not causal in a stream; use {param} >= 1",
            )  # fmt: skip
        check_int(self.name, param, lag, 1, MAX_WINDOW, f"e.g. {self.name}(x, {param}=1)")
        if self.name in ("prev", "ratios") and lag != 1:
            raise bad(self.name, "lag", lag, "1", f"{self.name} always compares with the previous row")

    def _layout(self) -> dict[str, Field]:
        return {"ring": f64(shape=(self.lag,)), "wpos": i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return shift(self._OPS[self.name], slots, x, self.lag, st["ring"], st["wpos"])


@dataclass(frozen=True)
class Ffill(KernelOp):
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
            check_int(self.name, "limit", self.limit, 1, None, "e.g. ffill(x, limit=5), or omit limit")

    def _layout(self) -> dict[str, Field]:
        return {"last": f64(), "gap": i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        limit = -1 if self.limit is None else self.limit
        return ffill(slots, x, limit, st["last"], st["gap"])


@dataclass(frozen=True)
class PrevState(KernelOp):
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

    def _layout(self) -> dict[str, Field]:
        return {"last": f64(), "run_prev": f64(), "in_run": i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return prev_state(slots, x, st["last"], st["run_prev"], st["in_run"])


# ---------------------------------------------------------------- kernels


@njit(cache=True)
def shift(op, slots, x, lag, ring, wpos):  # pragma: no cover - numba
    """move / deltas / ratios / percent_change against the row ``lag`` rows back."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        pos = ring_advance(wpos, k, lag)
        before = ring[k, pos]  # NaN until the key has seen `lag` rows
        ring[k, pos] = v
        if op == SHIFT_MOVE:
            out[i] = before
        elif op == SHIFT_DELTA:
            out[i] = v - before
        elif before == 0.0:
            out[i] = np.nan  # DolphinDB: division by zero is NULL
        elif op == SHIFT_RATIO:
            out[i] = v / before
        else:
            out[i] = v / before - 1.0
    return out


@njit(cache=True)
def ffill(slots, x, limit, last, gap):  # pragma: no cover - numba
    """Forward fill with at most ``limit`` consecutive fills (limit < 0: unlimited)."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v == v:
            last[k] = v
            gap[k] = 0
            out[i] = v
        else:
            g = gap[k] + 1
            if limit >= 0 and g > limit:
                out[i] = np.nan
            else:
                gap[k] = g
                out[i] = last[k]
    return out


@njit(cache=True)
def prev_state(slots, x, last, run_prev, in_run):  # pragma: no cover - numba
    """DolphinDB ``prevState``: runs of equal non-NULL values are states; NULL ends a run."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v != v:
            out[i] = last[k]
            in_run[k] = 0
        else:
            if not (in_run[k] and v == last[k]):
                run_prev[k] = last[k]
                last[k] = v
                in_run[k] = 1
            out[i] = run_prev[k]
    return out


# ---------------------------------------------------------------- specs


SPECS: tuple[StateOpSpec, ...] = (
    StateOpSpec("prev", "prev(x)", (), (), lambda p: Shift("prev"), result="same"),
    StateOpSpec("move", "move(x, k)", ("k",), ("k",), lambda p: Shift("move", p["k"]), result="same"),
    StateOpSpec(
        "deltas", "deltas(x, n=1)", ("n",), (), lambda p: Shift("deltas", p.get("n", 1)), result="numeric"
    ),
    StateOpSpec("ratios", "ratios(x)", (), (), lambda p: Shift("ratios")),
    StateOpSpec(
        "percent_change", "percent_change(x, n=1)", ("n",), (),
        lambda p: Shift("percent_change", p.get("n", 1)),
    ),
    StateOpSpec("ffill", "ffill(x, limit=None)", ("limit",), (), lambda p: Ffill(p.get("limit")), result="same"),
    StateOpSpec("prev_state", "prev_state(x)", (), (), lambda p: PrevState(), result="same"),
)  # fmt: skip
