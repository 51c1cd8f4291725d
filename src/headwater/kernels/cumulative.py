"""Cumulative state functions over all of a key's rows so far: ``cumsum``, ``cumavg``, ``cummax``, ``cummin``,
``cumcount``, ``cumprod``, ``cumfirst_not``, ``cumlast_not``, ``cumvar``/``cumstd`` (and population
``cumvarp``/``cumstdp``), ``cummed``, ``cumpercentile``, ``cumnunique``, ``cum_positive_streak`` and ``cummdd``.

NULL rows are skipped and output the previous result. Two-column cumulative
functions (``cumcorr``, ``cumwsum``...) are in :mod:`headwater.kernels.pairwise`,
TopN ones (``cumsum_top_n``...) in :mod:`headwater.kernels.topn`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numba import njit

from headwater.aggregates.prefix import running_by_key
from headwater.aggregates.rules import (
    AVG,
    CATALOG,
    COUNT,
    FIRST_NOT,
    LAST_NOT,
    MAX,
    MIN,
    PROD,
    SUM,
)
from headwater.kernels.base.checks import check_bool, check_choice, check_name, check_percent
from headwater.kernels.base.numeric import INTERPOLATIONS, interpolated_quantile
from headwater.kernels.base.operators import (
    ArrayOp,
    Field,
    KernelOp,
    State,
    StateOp,
    StateOpSpec,
    check_batch,
    f64,
    grown_copy,
    i64,
)

__all__ = ["SPECS", "CumNunique", "CumPercentile", "CumSimple", "CumVar", "Cumulative"]


@dataclass(frozen=True)
class Cumulative(KernelOp):
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
        "cumsum": SUM,
        "cumavg": AVG,
        "cummax": MAX,
        "cummin": MIN,
        "cumcount": COUNT,
        "cumprod": PROD,
        "cumfirst_not": FIRST_NOT,
        "cumlast_not": LAST_NOT,
    }

    def __post_init__(self) -> None:
        check_name("Cumulative", self.name, tuple(self._OPS))

    def _layout(self) -> dict[str, Field]:
        return {"acc": f64(), "count": i64()}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        return running_by_key(self._OPS[self.name], slots, x, st["acc"], st["count"], np.zeros(len(st["acc"])),
                              np.zeros(len(x), np.bool_))


@dataclass(frozen=True)
class CumVar(KernelOp):
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
        check_name("CumVar", self.name, self._NAMES)

    def _layout(self) -> dict[str, Field]:
        return {"count": i64(), "mean": f64(0.0), "ssqdm": f64(0.0)}

    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        code = CATALOG[self.name[len("cum"):]].code  # cumvar -> var, ...
        return running_by_key(code, slots, x, st["mean"], st["count"], st["ssqdm"], np.zeros(len(x), np.bool_))


@dataclass(frozen=True)
class CumSimple(ArrayOp):
    """``cum_positive_streak(x)`` and ``cummdd(x, ratio=True)`` per key.

    ``cum_positive_streak``: the running sum of the current streak of positive
    values, 0 on a non-positive or NULL value. ``cummdd``: the running maximum
    drawdown, (peak − x)/peak with ``ratio`` (NULL rows and a zero peak are
    skipped) or peak − x without; 0 at the first value.

    Example:
        >>> import numpy as np
        >>> op = CumSimple("cummdd")
        >>> x = np.array([36.0, 96, 42, 100, 59, 86, 25, 64, 72])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(9, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [0.0, 0.0, 0.5625, 0.5625, 0.5625, 0.5625, 0.75, 0.75, 0.75]
    """

    name: str
    ratio: bool = True

    _OPS: ClassVar[dict[str, int]] = {"cum_positive_streak": 0, "cummdd": 1}

    def __post_init__(self) -> None:
        check_name("CumSimple", self.name, tuple(self._OPS))
        check_bool(self.name, "ratio", self.ratio)

    def _layout(self) -> dict[str, Field]:
        return {"acc": f64(0.0 if self.name == "cum_positive_streak" else math.nan), "peak": f64()}

    def _compute(self, st: State, slots: np.ndarray, args: list[np.ndarray]) -> list[np.ndarray]:
        return [cum_simple(self._OPS[self.name], slots, args[0], self.ratio, st["acc"], st["peak"])]


def _pow2(n: int, floor: int = 8) -> int:
    return max(floor, 1 << max(int(n) - 1, 0).bit_length())


def _regrown(func: str, state: State, name: str, n_keys: int, width: int, fill: float | int) -> np.ndarray:
    """A copy of the growable ``state[name]`` with ``n_keys`` rows and at least ``width`` columns."""
    old = state.get(name)
    if old is None or old.ndim != 2:
        raise ValueError(
            f"state function {func!r}: state array {name!r} is missing or not 2-D; "
            "was the state made by another operator or parameter set?"
        )
    new = np.full((n_keys, max(width, old.shape[1])), fill, dtype=old.dtype)
    new[: old.shape[0], : old.shape[1]] = old
    return new


@dataclass(frozen=True)
class CumPercentile(StateOp):
    """``cumpercentile(x, percent, interpolation='linear')`` and ``cummed(x)`` per key.

    Two heaps split the key's values at the percentile, so a row costs
    O(log n). The state keeps every non-NULL value of the key: it grows with the
    key's history (each key's arrays are as wide as the longest one needs).

    Example:
        >>> import numpy as np
        >>> op = CumPercentile("cummed")
        >>> x = np.array([5.0, 1, np.nan, 3, 2])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(5, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [5.0, 3.0, 3.0, 3.0, 2.5]
    """

    name: str
    percent: float = 50.0
    interpolation: str = "linear"
    n_args = 1

    _FIXED: ClassVar[dict[str, Field]] = {"n_lo": i64(), "n_hi": i64(), "last": f64()}

    def __post_init__(self) -> None:
        check_name("CumPercentile", self.name, ("cummed", "cumpercentile"))
        check_percent(self.name, self.percent)
        check_choice(self.name, "interpolation", self.interpolation, INTERPOLATIONS)

    def init_state(self) -> dict[str, np.ndarray]:
        empty: State = {n: np.full((0, *f.shape), f.fill, dtype=f.dtype) for n, f in self._FIXED.items()}
        return {**empty, "lo": np.full((0, 8), np.nan), "hi": np.full((0, 8), np.nan)}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (x,) = check_batch(self.name, self.n_args, slots, n_keys, args)
        st = grown_copy(self.name, self._FIXED, state, n_keys)
        q = float(self.percent) / 100
        # widest heap any key needs by the end of the batch (each may hold one extra value while rebalancing)
        n_end = st["n_lo"] + st["n_hi"] + np.bincount(slots_[x == x], minlength=n_keys)
        want = np.floor(q * np.maximum(n_end - 1, 0)) + 1
        lo_need = int(np.minimum(n_end, want + 1).max(initial=0))
        hi_need = int(np.minimum(n_end, n_end - want + 1).max(initial=0))
        st["lo"] = _regrown(self.name, state, "lo", n_keys, _pow2(lo_need), np.nan)
        st["hi"] = _regrown(self.name, state, "hi", n_keys, _pow2(hi_need), np.nan)
        out = cum_percentile(
            slots_,
            x,
            q,
            INTERPOLATIONS[self.interpolation],
            st["lo"],
            st["hi"],
            st["n_lo"],
            st["n_hi"],
            st["last"],
        )
        return st, [out]


@dataclass(frozen=True)
class CumNunique(StateOp):
    """``cumnunique(x, ignore_null=False)``: the number of distinct values of the key so far.

    NULL counts as one value unless ``ignore_null``. Each key keeps an
    open-addressing hash set of its distinct values (O(1) per row); the state
    grows with the number of distinct values (each key's table is as wide as the
    fullest one needs).

    Example:
        >>> import numpy as np
        >>> op = CumNunique()
        >>> x = np.array([np.nan, 1, 2, -6, 0, 1, 2])
        >>> _, (out,) = op.run(op.init_state(), np.zeros(7, dtype=np.int64), 1, [x])
        >>> out.tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0]
    """

    ignore_null: bool = False
    name = "cumnunique"
    n_args = 1

    _FIXED: ClassVar[dict[str, Field]] = {"count": i64(), "has_null": i64()}

    def __post_init__(self) -> None:
        check_bool(self.name, "ignore_null", self.ignore_null)

    def init_state(self) -> dict[str, np.ndarray]:
        empty: State = {n: np.full((0, *f.shape), f.fill, dtype=f.dtype) for n, f in self._FIXED.items()}
        return {**empty, "table": np.full((0, 8), _EMPTY, dtype=np.int64)}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, (x,) = check_batch(self.name, self.n_args, slots, n_keys, args)
        st = grown_copy(self.name, self._FIXED, state, n_keys)
        table = _regrown(self.name, state, "table", n_keys, 8, _EMPTY)
        bits = (x + 0.0).view(np.int64)  # + 0.0 turns -0.0 into 0.0: equal values, equal bits
        out = np.empty(x.shape[0])
        start = 0
        while True:
            start = nunique_insert(
                slots_, x, bits, start, self.ignore_null, table, st["count"], st["has_null"], out
            )
            if start == x.shape[0]:
                break
            bigger = np.full((n_keys, 2 * table.shape[1]), _EMPTY, dtype=np.int64)
            rehash(table, bigger)
            table = bigger
        st["table"] = table
        return st, [out]


# ---------------------------------------------------------------- kernels


@njit(cache=True, error_model="numpy")
def cum_simple(op, slots, x, ratio, acc, peak):  # pragma: no cover - numba
    """cum_positive_streak (op 0) and cummdd (op 1)."""
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if op == 0:
            # a NULL ends a streak like a non-positive value (as in mmax_positive_streak)
            acc[k] = acc[k] + v if v > 0 else 0.0
        elif v == v:
            p = peak[k]
            if p != p:
                peak[k] = v
                acc[k] = 0.0
            else:
                if v > p:
                    p = v
                    peak[k] = p
                if ratio:
                    if p != 0.0:
                        dd = (p - v) / p
                        if dd > acc[k]:
                            acc[k] = dd
                elif p - v > acc[k]:
                    acc[k] = p - v
        out[i] = acc[k]
    return out


@njit(cache=True, inline="always", error_model="numpy")
def _heap_push(h, size, v):  # pragma: no cover - numba
    """Push v onto the max-heap h[:size]."""
    j = size
    while j > 0:
        parent = (j - 1) >> 1
        if h[parent] >= v:
            break
        h[j] = h[parent]
        j = parent
    h[j] = v


@njit(cache=True, inline="always", error_model="numpy")
def _heap_pop(h, size):  # pragma: no cover - numba
    """Remove and return the top of the max-heap h[:size]."""
    top = h[0]
    last = h[size - 1]
    size -= 1
    j = 0
    while True:
        c = 2 * j + 1
        if c >= size:
            break
        if c + 1 < size and h[c + 1] > h[c]:
            c += 1
        if h[c] <= last:
            break
        h[j] = h[c]
        j = c
    if size > 0:
        h[j] = last
    return top


@njit(cache=True, error_model="numpy")
def cum_percentile(slots, x, q, interpolation, lo, hi, n_lo, n_hi, last):  # pragma: no cover - numba
    """Running percentile from two heaps: ``lo`` (max-heap of the smallest values) and ``hi``
    (max-heap of the negated largest ones), O(log n) per row. NULL rows repeat the last result.
    """
    n = x.shape[0]
    out = np.empty(n)
    for i in range(n):
        k = slots[i]
        v = x[i]
        if v == v:
            a = n_lo[k]
            b = n_hi[k]
            if a > 0 and v <= lo[k, 0]:
                _heap_push(lo[k], a, v)
                a += 1
            else:
                _heap_push(hi[k], b, -v)
                b += 1
            cnt = a + b
            h = q * (cnt - 1)
            idx = int(h)
            want = idx + 1  # the lower heap holds the idx+1 smallest values
            if a > want:
                _heap_push(hi[k], b, -_heap_pop(lo[k], a))
                a -= 1
                b += 1
            elif a < want:
                _heap_push(lo[k], a, -_heap_pop(hi[k], b))
                a += 1
                b -= 1
            n_lo[k] = a
            n_hi[k] = b
            lo_v = lo[k, 0]
            hi_v = -hi[k, 0] if b > 0 else lo_v
            last[k] = interpolated_quantile(lo_v, hi_v, h - idx, idx, interpolation)
        out[i] = last[k]
    return out


_EMPTY = 0x7FF8000000000000  # the bits of NaN: never a stored value


@njit(cache=True, inline="always", error_model="numpy")
def _hash(b, mask):  # pragma: no cover - numba
    h = b ^ (b >> 31)
    h *= 0x7FB5D329728EA185
    h ^= h >> 27
    h *= 0x1CE4E5B9BF58476D
    h ^= h >> 33
    return h & mask


@njit(cache=True, error_model="numpy")
def nunique_insert(
    slots, x, bits, start, ignore_null, table, count, has_null, out
):  # pragma: no cover - numba
    """cumnunique over rows ``start..``: an open-addressing set of value bits per key.

    Returns the row at which a key's table would pass half full (the caller grows
    every table and calls again from there), or ``len(x)`` when done.
    """
    n = x.shape[0]
    cap = table.shape[1]
    mask = cap - 1
    for i in range(start, n):
        k = slots[i]
        if x[i] != x[i]:
            if not ignore_null:
                has_null[k] = 1
        else:
            if 2 * (count[k] + 1) > cap:
                return i
            b = bits[i]
            j = _hash(b, mask)
            while True:
                t = table[k, j]
                if t == _EMPTY:
                    table[k, j] = b
                    count[k] += 1
                    break
                if t == b:
                    break
                j = (j + 1) & mask
        out[i] = count[k] + has_null[k]
    return n


@njit(cache=True, error_model="numpy")
def rehash(old, new):  # pragma: no cover - numba
    """Insert every stored value of ``old`` into the empty tables ``new``."""
    mask = new.shape[1] - 1
    for k in range(old.shape[0]):
        for j in range(old.shape[1]):
            b = old[k, j]
            if b != _EMPTY:
                p = _hash(b, mask)
                while new[k, p] != _EMPTY:
                    p = (p + 1) & mask
                new[k, p] = b


# ---------------------------------------------------------------- specs


def _cumulative_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: Cumulative(name)


def _cum_var_builder(name: str) -> Callable[[dict[str, Any]], StateOp]:
    return lambda p: CumVar(name)


_RESULTS = {
    **dict.fromkeys(("cummax", "cummin", "cumfirst_not", "cumlast_not"), "same"),
    "cumcount": "long",
    "cumsum": "sum",
    "cumprod": "numeric",
}

SPECS: tuple[StateOpSpec, ...] = (
    *(
        StateOpSpec(n, f"{n}(x)", (), (), _cumulative_builder(n), result=_RESULTS.get(n, "double"))
        for n in Cumulative._OPS
    ),
    *(StateOpSpec(n, f"{n}(x)", (), (), _cum_var_builder(n)) for n in CumVar._NAMES),
    StateOpSpec("cummed", "cummed(x)", (), (), lambda p: CumPercentile("cummed")),
    StateOpSpec(
        "cumpercentile", "cumpercentile(x, percent, interpolation='linear')", ("percent", "interpolation"),
        ("percent",), lambda p: CumPercentile("cumpercentile", p["percent"], p.get("interpolation", "linear")),
    ),
    StateOpSpec(
        "cumnunique", "cumnunique(x, ignore_null=False)", ("ignore_null",), (),
        lambda p: CumNunique(p.get("ignore_null", False)), result="long",
    ),
    StateOpSpec(
        "cum_positive_streak", "cum_positive_streak(x)", (), (), lambda p: CumSimple("cum_positive_streak"),
        result="same",
    ),
    StateOpSpec("cummdd", "cummdd(x, ratio=True)", ("ratio",), (), lambda p: CumSimple("cummdd", p.get("ratio", True))),
)  # fmt: skip
