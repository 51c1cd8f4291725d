"""The operator contract, state layouts, batch checks, and :class:`StateOpSpec`.

A stream task holds many keys. Each micro-batch delivers the rows of all its
keys in arrival order; a :class:`StateOp` processes the whole batch in one
Numba loop, indexing compact per-key state arrays by key slot. Results do not
depend on how rows are split into batches (streaming == batch), and NaN means
NULL in every input, output and state array.

``run`` copies the state once per call (O(n_keys x window) for window
functions) and updates the copy in place, so the caller's dict stays a valid
snapshot of the last committed batch. For big windows and small batches that
copy, not the kernel, dominates; prefer larger micro-batches there.

Example:
    >>> import numpy as np
    >>> class RunningCount(LayoutOp):
    ...     name, n_args = "running_count", 1
    ...     def _layout(self):
    ...         return {"n": i64()}
    ...     def _compute(self, st, slots, cols):
    ...         out = np.empty(len(slots))
    ...         for i, k in enumerate(slots):  # a real operator runs a Numba kernel here
    ...             st["n"][k] += cols[0][i] == cols[0][i]
    ...             out[i] = st["n"][k]
    ...         return [out]
    >>> op = RunningCount()
    >>> state, (out,) = op.run(op.init_state(), np.array([0, 1, 0]), 2, [np.array([5.0, np.nan, 7.0])])
    >>> out.tolist(), state["n"].tolist()
    ([1.0, 0.0, 2.0], [2, 0])
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from headwater.errors import GraphDefinitionError
from headwater.kernel_inputs import read_only
from headwater.kernels.base.checks import snake_case

__all__ = [
    "ArrayOp", "DelegateOp", "Field", "KernelOp", "LayoutOp", "State", "StateOp", "StateOpSpec", "build_op",
    "check_batch", "f64", "grown_copy", "i64", "inner_state", "own_state", "wrap_inner_state",
]  # fmt: skip



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


@dataclass(frozen=True)
class DelegateOp(StateOp):
    """An operator that stands for another one, ``inner`` (set by ``__post_init__``), which does the work."""

    inner: StateOp = field(init=False, repr=False, compare=False)

    def init_state(self) -> dict[str, np.ndarray]:
        return self.inner.init_state()

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        return self.inner.run(state, slots, n_keys, args)


class Field(NamedTuple):
    shape: tuple[int, ...]  # per-key shape (after the key axis)
    dtype: type
    fill: Any  # a number, or an array of the per-key shape


def f64(fill: float = math.nan, shape: tuple[int, ...] = ()) -> Field:
    return Field(shape, np.float64, fill)


def i64(shape: tuple[int, ...] = ()) -> Field:
    return Field(shape, np.int64, 0)


class LayoutOp(StateOp):
    """An operator with a fixed set of per-key state arrays whose work is kernel calls over the batch.

    Subclasses declare the arrays (``_layout``) and compute the outputs (``_compute``) on a freshly
    grown copy of the state, which they may update in place.
    """

    @abc.abstractmethod
    def _layout(self) -> dict[str, Field]:
        """Name, per-key shape, dtype and initial value of every state array."""

    @abc.abstractmethod
    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        """Run the kernels; they may update the (freshly copied) arrays of ``st`` in place."""

    def init_state(self) -> dict[str, np.ndarray]:
        return {name: np.full((0, *f.shape), f.fill, dtype=f.dtype) for name, f in self._layout().items()}

    def run(
        self, state: dict[str, np.ndarray], slots: np.ndarray, n_keys: int, args: list[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
        slots_, cols = check_batch(self.name, self.n_args, slots, n_keys, args)
        st = grown_copy(self.name, self._layout(), state, n_keys)
        return st, self._compute(st, slots_, cols)


class KernelOp(LayoutOp):
    """A one-argument, one-output operator whose work is one kernel call over the batch."""

    n_args = 1

    @abc.abstractmethod
    def _kernel(self, st: State, slots: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Run the kernel; it may update the (freshly copied) arrays of ``st`` in place."""

    def _compute(self, st: State, slots: np.ndarray, cols: list[np.ndarray]) -> list[np.ndarray]:
        return [self._kernel(st, slots, cols[0])]


class ArrayOp(LayoutOp):
    """One-column operators by default; pair functions set ``n_args = 2``."""

    n_args = 1


def check_batch(
    func: str, n_args: int, slots: np.ndarray, n_keys: int, args: list[np.ndarray]
) -> tuple[np.ndarray, list[np.ndarray]]:
    if len(args) != n_args:
        raise GraphDefinitionError(
            f"state function {func!r}: got {len(args)} column arguments, expected {n_args}"
        )
    slots_ = read_only(slots, np.int64)
    if slots_.ndim != 1:
        raise ValueError(f"state function {func!r}: slots must be 1-D, got shape {slots_.shape}")
    if slots_.size and (slots_.min() < 0 or slots_.max() >= n_keys):
        raise ValueError(
            f"state function {func!r}: key slots must lie in [0, n_keys={n_keys}); "
            f"got range [{slots_.min()}, {slots_.max()}]"
        )
    cols = [read_only(a, np.float64) for a in args]
    for i, c in enumerate(cols):
        if c.shape != slots_.shape:
            raise ValueError(
                f"state function {func!r}: argument {i} has shape {c.shape}, expected {slots_.shape} "
                "(one value per row)"
            )
    return slots_, cols


def grown_copy(func: str, layout: dict[str, Field], state: State, n_keys: int) -> State:
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


# ---------------------------------------------------------------- operators that wrap another


_INNER = "inner."  # prefix of a wrapped operator's state arrays


def inner_state(state: State) -> State:
    return {k[len(_INNER) :]: v for k, v in state.items() if k.startswith(_INNER)}


def own_state(state: State) -> State:
    return {k: v for k, v in state.items() if not k.startswith(_INNER)}


def wrap_inner_state(state: State) -> State:
    return {_INNER + k: v for k, v in state.items()}


# ---------------------------------------------------------------- specs


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


def build_op(spec: StateOpSpec, params: Mapping[str, Any]) -> StateOp:
    """Build the operator of ``spec`` from keyword parameters; ``None`` values count as not given.

    Higher-order functions build the functions they apply with it, so those report bad parameters
    exactly as :func:`headwater.kernels.registry.make_state_op` does.

    Raises:
        GraphDefinitionError: a parameter is unknown, missing or out of range.

    Example:
        >>> spec = StateOpSpec("lag", "lag(x, n)", ("n",), ("n",), lambda p: p["n"])
        >>> build_op(spec, {"n": 2})
        2
        >>> build_op(spec, {"n": None})
        Traceback (most recent call last):
        headwater.errors.GraphDefinitionError: state function 'lag': missing required parameter n=. Signature: lag(x, n)
    """
    name = spec.name
    unknown = [p for p in params if p not in spec.params]
    if unknown:
        p = unknown[0]
        hint = f" (did you mean {snake_case(p)}=?)" if snake_case(p) in spec.params else ""
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
