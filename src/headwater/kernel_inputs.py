"""Arrays as the Numba kernels take them: one type per argument whatever the data, so one compiled signature.

Numba compiles a kernel once per argument type, and a read-only array is a type of its own. An Arrow column
without NULLs, in one chunk, converts to a read-only NumPy view; with NULLs or in several chunks, to a writable
copy. A kernel handed both would compile twice, the second time (tens of seconds) during whichever micro-batch
first brings the other kind, and the compiled code cached by ``headwater.engines.warm`` would not be the one
used. Every array input is therefore handed over read-only: no copy, and the kernel cannot write to it.

>>> import numpy as np
>>> x = read_only([1, 2], np.float64)
>>> x.flags.writeable, x.dtype.name
(False, 'float64')
"""

from __future__ import annotations

from typing import Any

import numpy as np


def read_only(values: Any, dtype: Any) -> np.ndarray:
    """``values`` as a C-contiguous, aligned, read-only ``dtype`` array (a view where possible, never a copy
    of an array that already is one)."""
    out = np.require(values, dtype=dtype, requirements=("C", "A"))
    if out.flags.writeable:
        out = out.view()
        out.flags.writeable = False
    return out
