"""Time-window state functions (tm-functions) and ``tmoving``.

**tm-functions** ``tmfunc(t, x, window)`` / ``tmfunc(t, x, y, window)``: the window
of row i is every row of its key with time in ``(t_i - window, t_i]``, earlier rows
with the same time included. ``t`` arrives as float64 (timestamps as microseconds
since the epoch, exact; integer columns as themselves). ``window`` is a positive
integer in the units of ``t`` (microseconds for timestamps, days for dates) or a
duration (``"5m"``, ``"30s"``, a ``timedelta``; only meaningful for timestamp
columns). Time must not go back within a key: a row whose time is NULL or earlier
than the key's latest time outputs NULL and does not enter the state (DolphinDB
requires sorted input and has no rule of its own for this). NULL ``x`` rows stay
in the window and are skipped by the aggregate, so ``tmcount`` counts non-NULL
values, ``tmfirst`` may return a NULL first row and ``tmlast`` is the row's own
value. A key keeps the rows still in its window in a ring that widens as needed
up to ``MAX_WINDOW`` rows; past that, the oldest rows leave the window early
(documented eviction, never an error mid-stream). ``tmove`` keeps one more row:
the latest that has left the window.

- :mod:`.operators`: the operators and their specs (``tmsum``, ``tmavg``, ..., ``tmpercentile``,
  ``tmrank``, ``tmskew``, ``tmkurtosis``, and ``tmoving(t, x, window, func)``, which runs the
  matching tm-function).
- :mod:`.kernels`: the one Numba kernel behind them all, with its running accumulators and
  whole-window statistics.

TopN over a time window (``tmsum_top_n``...) is in :mod:`headwater.kernels.topn`.

Example:
    >>> import numpy as np
    >>> from headwater.kernels.registry import make_state_op
    >>> op = make_state_op("tmsum", {"window": 3})
    >>> t = np.array([1, 1, 3, 5, 8, 15, 15, 20.0])
    >>> x = np.array([5, 2, 4, 1, 2, 8, 9, 10.0])
    >>> _, (out,) = op.run(op.init_state(), np.zeros(8, dtype=np.int64), 1, [t, x])
    >>> out.tolist()
    [5.0, 7.0, 11.0, 5.0, 2.0, 8.0, 17.0, 10.0]
"""

from __future__ import annotations

from headwater.kernels.time_windows.operators import SPECS

__all__ = ["SPECS"]
