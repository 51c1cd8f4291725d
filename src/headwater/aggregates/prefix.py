"""Aggregates as running prefixes: per row, the aggregate over its run's rows up to and including it.

>>> import numpy as np
>>> running(np.array([1.0, np.nan, 3.0, 5.0]), np.array([1, 1, 1, 2]), "sum").tolist()
[1.0, 1.0, 4.0, 5.0]
"""

from __future__ import annotations

import numba
import numpy as np

from headwater.aggregates.rules import CATALOG, add, finish


def running(values: np.ndarray, run: np.ndarray, func: str) -> np.ndarray:
    """``func`` of each row's run so far (NaN = NULL); a run is a stretch of equal consecutive ``run`` values
    (a session, say)."""
    return _running(CATALOG[func].code, np.asarray(values, dtype=np.float64), np.asarray(run))


@numba.njit(cache=True)
def _running(code, values, run):  # type: ignore[no-untyped-def]  # pragma: no cover - numba
    out = np.empty(len(values))
    x, n, z = 0.0, 0, 0.0
    for i in range(len(values)):
        if i == 0 or run[i] != run[i - 1]:
            x, n, z = 0.0, 0, 0.0
        x, n, z = add(code, x, n, z, values[i], i)
        out[i] = finish(code, x, n, z)
    return out
