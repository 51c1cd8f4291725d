"""Financial helper state functions: ``dynamic_group_cumsum`` / ``dynamic_group_cumcount``,
``top_range`` / ``low_range``, ``true_range``, ``sumbars`` and the linear recursion ``iterate``.

**Financial helpers**: ``dynamic_group_cumsum`` / ``dynamic_group_cumcount``,
``top_range`` / ``low_range``, ``true_range``, ``sumbars`` and the linear recursion
``iterate``; each class documents its NULL rules.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from numba import njit

from headwater.kernels.base.buffers import BufferArray, BufferedOp, grown_buffer_copy, ring_advance, ring_slot
from headwater.kernels.base.checks import MAX_WINDOW, bad, check_float, check_int, check_name
from headwater.kernels.base.operators import State, StateOp, StateOpSpec, check_batch

__all__ = ["MAX_GROUPS", "SPECS", "DynamicGroup", "Iterate", "RangeCount", "SumBars", "TrueRange"]


MAX_GROUPS = 8
"""Most groups ``dynamic_group_cumsum`` / ``dynamic_group_cumcount`` count (DolphinDB: 2..8)."""


def _numbers(func: str, param: str, value: Any) -> tuple[float, ...]:
    values = tuple(value) if isinstance(value, list | tuple | np.ndarray) else (value,)
    ok = 1 <= len(values) <= MAX_WINDOW and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_) and math.isfinite(v)
        for v in values
    )
    if not ok:
        raise bad(func, param, value, "a finite number or a non-empty sequence of finite numbers", "")
    return tuple(float(v) for v in values)


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
        check_name(type(self).__name__, self.name, self._NAMES)
        check_int(self.name, "group_count", self.group_count, 2, MAX_GROUPS, "e.g. group_count=3")
        object.__setattr__(self, "n_args", 4 if self.name == "dynamic_group_cumsum" else 2)

    def init_state(self) -> dict[str, np.ndarray]:
        return {"totals": np.zeros((0, MAX_GROUPS))}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, cols = check_batch(self.name, self.n_args, slots, n_keys, args)
        st = grown_buffer_copy(self.name, {"totals": BufferArray(np.float64, 0.0, "cols", MAX_GROUPS)}, state, n_keys, 0)
        if self.n_args == 4:
            cum, prev_cum, member, prev_member = cols
        else:
            member, prev_member = cols
            cum = prev_cum = member
        out = dynamic_group(
            slots_, cum, prev_cum, member, prev_member, self.group_count, self.n_args == 2, st["totals"]
        )
        return st, list(out)


@dataclass(frozen=True)
class RangeCount(BufferedOp):
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
        check_name(type(self).__name__, self.name, self._NAMES)

    def _layout(self) -> dict[str, BufferArray]:
        return {
            "stack_v": BufferArray(np.float64, math.nan, "prefix"), "stack_i": BufferArray(np.int64, 0, "prefix"),
            "depth": BufferArray(np.int64, 0), "rows": BufferArray(np.int64, 0), "wall": BufferArray(np.int64, -1),
            "seen": BufferArray(np.int64, 0),
        }  # fmt: skip

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        (x,) = cols
        null = np.isnan(x)
        # low_range is top_range of -x; NULL is the smallest value either way
        v = np.where(null, -np.inf, x) if self.name == "top_range" else np.where(null, np.inf, -x)
        return int(
            range_count(
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
        slots_, (h, lo, c) = check_batch(self.name, self.n_args, slots, n_keys, args)
        st = grown_buffer_copy(self.name, {"prev_close": BufferArray(np.float64, math.nan)}, state, n_keys, 0)
        return st, [true_range(slots_, h, lo, c, st["prev_close"])]


@dataclass(frozen=True)
class SumBars(BufferedOp):
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
        check_float(self.name, "y", self.y, math.isfinite, "a finite number")

    def _layout(self) -> dict[str, BufferArray]:
        return {"ring": BufferArray(np.float64, 0.0, "ring"), "start": BufferArray(np.int64, 0), "count": BufferArray(np.int64, 0)}

    def _step(self, st: State, slots: np.ndarray, cols: list[np.ndarray], out: np.ndarray, i0: int) -> int:
        return int(
            sumbars(
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
            raise bad(
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
        slots_, (x,) = check_batch(self.name, self.n_args, slots, n_keys, args)
        init, coeff = self._vectors()
        layout = {"ring": BufferArray(np.float64, init, "cols", init.size), "wpos": BufferArray(np.int64, 0)}
        st = grown_buffer_copy(self.name, layout, state, n_keys, 0)
        return st, [iterate(slots_, x, coeff, st["ring"], st["wpos"])]


# ---------------------------------------------------------------- kernels


@njit(cache=True)
def dynamic_group(
    slots, cum, prev_cum, member, prev_member, n_groups, count_only, totals
):  # pragma: no cover - numba
    """dynamicGroupCumsum / dynamicGroupCumcount; returns one output row per group slot of ``totals``."""
    n = slots.shape[0]
    width = totals.shape[1]
    out = np.empty((width, n))
    for i in range(n):
        k = slots[i]
        g = member[i]
        pg = prev_member[i]
        g_ok = g == g and g == np.floor(g) and 0 <= g < n_groups
        pg_ok = pg == pg and pg == np.floor(pg) and 0 <= pg < n_groups
        if g_ok:
            gi = int(g)
            v = 1.0 if count_only else (cum[i] if cum[i] == cum[i] else 0.0)
            pv = 1.0 if count_only else (prev_cum[i] if prev_cum[i] == prev_cum[i] else 0.0)
            if not pg_ok:
                totals[k, gi] += v
            elif int(pg) == gi:
                if not count_only:
                    totals[k, gi] += v - pv  # the entity stays in its group; its value moved on
            else:
                totals[k, gi] += v
                totals[k, int(pg)] -= pv
        for c in range(width):
            out[c, i] = totals[k, c] if c < n_groups else np.nan
    return out


@njit(cache=True)
def range_count(
    slots, v, null, i0, max_rows, out, stack_v, stack_i, depth, rows, wall, seen
):  # pragma: no cover - numba
    """topRange on transformed values: consecutive preceding values strictly below v; returns the stop row.

    A monotonic stack keeps the candidates for "the nearest earlier value >= v".
    ``wall`` is the row of the last candidate dropped at the cap; counts stop there.
    """
    n = slots.shape[0]
    cap = stack_v.shape[1]
    for i in range(i0, n):
        k = slots[i]
        vi = v[i]
        d = depth[k]
        while d > 0 and stack_v[k, d - 1] < vi:
            d -= 1  # only the local depth moves: stopping below leaves the state as it was
        if d == cap:
            if cap < max_rows:
                return i
            wall[k] = stack_i[k, 0]
            for j in range(d - 1):
                stack_v[k, j] = stack_v[k, j + 1]
                stack_i[k, j] = stack_i[k, j + 1]
            d -= 1
        idx = rows[k]
        rows[k] = idx + 1
        below = stack_i[k, d - 1] if d > 0 else wall[k]
        stack_v[k, d] = vi
        stack_i[k, d] = idx
        depth[k] = d + 1
        if null[i] and not seen[k]:
            out[i] = np.nan  # leading NULLs stay NULL
        else:
            if not null[i]:
                seen[k] = 1
            out[i] = idx - below - 1
    return n


@njit(cache=True)
def true_range(slots, high, low, close, prev_close):  # pragma: no cover - numba
    """max(|H-L|, |H-prevC|, |prevC-L|); NULL on a key's first row or when an input is NULL."""
    n = slots.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        pc = prev_close[k]
        h = high[i]
        lo = low[i]
        out[i] = max(abs(h - lo), abs(h - pc), abs(pc - lo))
        if pc != pc or h != h or lo != lo:
            out[i] = np.nan
        prev_close[k] = close[i]
    return out


@njit(cache=True)
def sumbars(slots, x, threshold, i0, max_rows, out, ring, start, count):  # pragma: no cover - numba
    """Rows needed, counting back from the current one, for the sum of x to reach the threshold (0: never).

    NULL and negative values add 0. Only the rows of the last answer are kept:
    since values are non-negative, the next answer is at most one more.
    """
    n = slots.shape[0]
    cap = ring.shape[1]
    for i in range(i0, n):
        k = slots[i]
        if count[k] == cap:
            if cap < max_rows:
                return i
            start[k] += 1
            count[k] -= 1
        v = x[i]
        s = start[k] + count[k]
        ring[k, s % cap] = v if v > 0 else 0.0
        count[k] += 1
        total = 0.0
        need = 0
        for j in range(count[k]):
            total += ring[k, (s - j) % cap]
            if total >= threshold:
                need = j + 1
                break
        out[i] = need
        if need > 0:
            start[k] = s - need + 1
            count[k] = need
    return n


@njit(cache=True)
def iterate(slots, x, coeff, ring, wpos):  # pragma: no cover - numba
    """x_n = coeff · (last len(coeff) results, oldest first) + input_n; NULL input: NULL, state kept."""
    n = slots.shape[0]
    m = coeff.shape[0]
    out = np.empty(n)
    for i in range(n):
        v = x[i]
        if v != v:
            out[i] = np.nan
            continue
        k = slots[i]
        p = wpos[k]
        acc = v
        for j in range(m):
            acc += coeff[j] * ring[k, ring_slot(p + j, m)]
        ring[k, ring_advance(wpos, k, m)] = acc  # the oldest result makes room for the newest
        out[i] = acc
    return out


# ---------------------------------------------------------------- specs


def _group_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: DynamicGroup(name, p["group_count"])


def _range_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: RangeCount(name)


SPECS: tuple[StateOpSpec, ...] = (
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
)  # fmt: skip
