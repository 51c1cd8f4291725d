"""Moving state functions: an aggregate over the last ``window`` rows of a key, current row included.

- :mod:`.running` keeps running state, O(1) per row (amortised): ``msum``, ``mavg``, ``mcount``,
  ``mvar``/``mstd``, ``mvarp``/``mstdp``, ``mmax``/``mmin``, ``mimax``/``mimin`` (and ``_last``),
  ``mfirst``/``mlast``.
- :mod:`.scans` looks at the whole window on every row, O(window): ``mrank``, ``mmed``,
  ``mpercentile``, ``mmad``, ``mskew``, ``mkurtosis``, ``mprod``, ``mmax_positive_streak``.

Without ``min_periods`` a key's first ``window - 1`` rows output NULL; with it, a
row outputs NULL while its window holds fewer than ``min_periods`` non-NULL values.
Two-column moving functions (``mcorr``, ``mwsum``...) are in :mod:`headwater.kernels.pairwise`,
TopN ones in :mod:`headwater.kernels.topn`, ``moving(x, window, func)`` in
:mod:`headwater.kernels.higher_order`, TA-lib averages in :mod:`headwater.kernels.ta`.
"""

from __future__ import annotations

from headwater.kernels.base.operators import StateOpSpec
from headwater.kernels.moving import running, scans

__all__ = ["SPECS"]

SPECS: tuple[StateOpSpec, ...] = (*running.SPECS, *scans.SPECS)
