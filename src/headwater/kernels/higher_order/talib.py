"""TA-lib's leading-NULL rule as higher-order functions: ``talib`` around another state function,
and ``talib_null`` on two columns; see :mod:`headwater.kernels.higher_order`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any

import numpy as np
from numba import njit

from headwater.errors import GraphDefinitionError
from headwater.kernels.base.checks import bad
from headwater.kernels.base.operators import (
    Field,
    LayoutOp,
    State,
    StateOp,
    StateOpSpec,
    build_op,
    check_batch,
    grown_copy,
    i64,
    inner_state,
    own_state,
    wrap_inner_state,
)

__all__ = ["Talib", "TalibNull", "specs"]


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
    (``msum``, ``mavg``, ``ema``...) of ``registry`` (every state function, as
    ``make_state_op`` passes it); ``window`` and the other parameters in ``params``
    are passed on to it.

    Example:
        >>> import numpy as np
        >>> from headwater.kernels.registry import STATE_OPS
        >>> op = Talib("msum", (("window", 3),), registry=STATE_OPS)
        >>> x = np.array([np.nan, np.nan, np.nan, 1, 2, 3, 4, 5, 6, np.nan, 8, 9])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(12, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [nan, nan, nan, nan, nan, 6.0, 9.0, 12.0, 15.0, 11.0, 14.0, 17.0]
    """

    func: str
    params: tuple[tuple[str, Any], ...] = ()
    _: KW_ONLY
    registry: InitVar[Mapping[str, StateOpSpec]]
    inner: StateOp = field(init=False, repr=False, compare=False)
    name = "talib"
    n_args = 1

    def __post_init__(self, registry: Mapping[str, StateOpSpec]) -> None:
        spec = registry.get(self.func) if isinstance(self.func, str) else None
        if spec is None or spec.columns != ("x",) or spec.n_outputs != 1 or self.func == self.name:
            usable = sorted(
                n for n, s in registry.items() if s.columns == ("x",) and s.n_outputs == 1 and n != self.name
            )
            raise bad(
                self.name, "func", self.func, "the name of a one-column, one-output state function",
                f"e.g. talib(x, func='msum', window=3); usable: {', '.join(usable)}",
            )  # fmt: skip
        try:
            inner = build_op(spec, dict(self.params))
        except GraphDefinitionError as exc:
            raise GraphDefinitionError(f"state function 'talib': func={self.func!r}: {exc}") from None
        object.__setattr__(self, "inner", inner)

    def init_state(self) -> dict[str, np.ndarray]:
        return {"started": np.zeros(0, dtype=np.int64), **wrap_inner_state(self.inner.init_state())}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (x,) = check_batch(self.name, self.n_args, slots, n_keys, args)
        st = grown_copy(self.name, {"started": i64()}, own_state(state), n_keys)
        fed = started_rows(slots_, x[np.newaxis, :], st["started"])
        inner_st, (inner_out,) = self.inner.run(inner_state(state), slots_[fed], n_keys, [x[fed]])
        out = np.full(x.shape[0], np.nan)
        out[fed] = inner_out
        return {**st, **wrap_inner_state(inner_st)}, [out]


@dataclass(frozen=True)
class TalibNull(LayoutOp):
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

    def _layout(self) -> dict[str, Field]:
        return {"started": i64()}

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        started = started_rows(slots, np.stack(cols), st["started"])
        return [np.where(started, c, np.nan) for c in cols]


# ---------------------------------------------------------------- kernels


@njit(cache=True)
def started_rows(slots, cols, started):  # pragma: no cover - numba
    """Mark rows at or after the key's first row where every column of ``cols`` is non-NULL."""
    n = slots.shape[0]
    out = np.empty(n, dtype=np.bool_)
    for i in range(n):
        k = slots[i]
        if started[k] == 0:
            ok = True
            for c in range(cols.shape[0]):
                v = cols[c, i]
                if v != v:
                    ok = False
                    break
            if ok:
                started[k] = 1
        out[i] = started[k] == 1
    return out


# ---------------------------------------------------------------- specs


def specs(registry: Mapping[str, StateOpSpec]) -> tuple[StateOpSpec, ...]:
    """The functions of this module; ``talib`` finds the function it wraps in ``registry``."""

    def build_talib(p: dict[str, Any]) -> StateOp:
        return Talib(p["func"], tuple((k, v) for k, v in p.items() if k != "func"), registry=registry)

    return (
        StateOpSpec(
            "talib", f"talib(x, func, window=None, ...parameters of func: {', '.join(_TALIB_PASS[1:])})",
            ("func", *_TALIB_PASS), ("func",), build_talib,
        ),
        StateOpSpec(
            "talib_null", "talib_null(x, y)", (), (), lambda p: TalibNull(), columns=("x", "y"), n_outputs=2,
        ),
    )  # fmt: skip
