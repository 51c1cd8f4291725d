"""Higher-order state functions: they take another function, or an aggregate, by name.

Conventions are those of :mod:`headwater.kernels.base.operators` (per-key state arrays
with the key slot first, NaN = NULL, ``run`` never modifies the caller's state, snake_case
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

- :mod:`.aggregates`: ``segmentby``, ``moving``, ``window``, ``accumulate``.
- :mod:`.talib`: ``talib``, ``talib_null``.
- :mod:`.iterators`: ``state_iterate``, ``conditional_iterate``, ``generic_state_iterate``.

``moving`` (for its O(1) m-function path) and ``talib`` apply other state functions,
which live in other families; rather than importing them, they are given the
registry when :mod:`headwater.kernels.registry` builds it (:func:`specs`).

Example:
    >>> import numpy as np
    >>> from headwater.kernels.registry import make_state_op
    >>> op = make_state_op("segmentby", {"func": "cumsum"})
    >>> x = np.array([1, 2, 3, 0, 3, 2, 1, 4, 5.0])
    >>> seg = np.array([1, 1, 1, -1, -1, -1, 1, 1, 1.0])
    >>> _, (out,) = op.run(op.init_state(), np.zeros(9, dtype=np.int64), 1, [x, seg])
    >>> out.tolist()
    [1.0, 3.0, 6.0, 0.0, 3.0, 5.0, 1.0, 5.0, 10.0]
"""

from __future__ import annotations

from collections.abc import Mapping

from headwater.kernels.base.operators import StateOpSpec
from headwater.kernels.higher_order import aggregates, iterators, talib

__all__ = ["specs"]


def specs(registry: Mapping[str, StateOpSpec]) -> tuple[StateOpSpec, ...]:
    """The higher-order functions; those that apply another state function look it up in ``registry``.

    ``registry`` is the registry being built: it is complete by the time any of these
    functions is built, which happens only through it.
    """
    return (*aggregates.specs(registry), *talib.specs(registry), *iterators.SPECS)
