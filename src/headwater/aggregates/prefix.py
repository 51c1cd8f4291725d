"""Aggregates as running prefixes: per row, the aggregate over its key's rows so far (the reactive engine's
``cumsum``/``cumstd``/..., ``segmentby``) or over its run's rows so far (a session's updates).

>>> import numpy as np
>>> running(np.array([1.0, np.nan, 3.0, 5.0]), np.array([1, 1, 1, 2]), "sum").tolist()
[1.0, 1.0, 4.0, 5.0]
"""

from __future__ import annotations

import numba
import numpy as np

from headwater.aggregates.rules import CATALOG, add, finish
from headwater.kernel_inputs import read_only


def running(values: np.ndarray, run: np.ndarray, func: str) -> np.ndarray:
    """``func`` of each row's run so far (NaN = NULL); a run is a stretch of equal consecutive ``run`` values
    (a session, say)."""
    run = np.asarray(run)
    restart = np.ones(len(run), dtype=np.bool_)
    restart[1:] = run[1:] != run[:-1]
    return running_by_key(CATALOG[func].code, np.zeros(len(run), np.int64), read_only(values, np.float64),
                          np.zeros(1), np.zeros(1, np.int64), np.zeros(1), restart)


@numba.njit(cache=True)
def running_by_key(code, slots, x, xs, ns, zs, restart):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    """Per row, aggregate ``code`` of its key's rows so far: the keys' summaries ``(xs, ns, zs)`` (indexed by
    ``slots``) take each row in turn; a row with ``restart`` set first empties its key's summary. NULL rows
    carry the last result."""
    out = np.empty(len(x))
    for i in range(len(x)):
        k = slots[i]
        if restart[i]:
            xs[k], ns[k], zs[k] = 0.0, 0, 0.0
        a, c, z = add(code, xs[k], ns[k], zs[k], x[i], i)
        xs[k], ns[k], zs[k] = a, c, z
        out[i] = finish(code, a, c, z)
    return out
