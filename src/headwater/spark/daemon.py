"""Spark's Python daemon, with Headwater's kernels loaded before it forks workers.

Spark forks every Python worker from one daemon process. Importing pandas, pyarrow
and Numba and loading the compiled kernels once here (``spark.python.daemon.module``)
means each forked worker starts warm instead of paying seconds of imports and
kernel loading on its first micro-batch.
"""

from __future__ import annotations

import contextlib


def warm_up() -> None:
    """Import the engine stack and load every state and window kernel (nothing is printed)."""
    import numpy as np

    import headwater.engines.reactive_state  # noqa: F401  (imports pandas, pyarrow and the expression layer)
    from headwater.kernels.registry import STATE_OPS, make_state_op
    from headwater.kernels.windows import WindowAggregator, WindowSpec

    slots = np.zeros(4, dtype=np.int64)
    values = np.array([1.0, 2.0, np.nan, 4.0])
    for name, spec in STATE_OPS.items():
        params = {p: (0.5 if p == "alpha" else 2) for p in spec.required}
        if not params and name.startswith("ewm"):
            params = {"span": 3}
        with contextlib.suppress(Exception):  # a kernel that cannot warm up here simply loads later
            op = make_state_op(name, params)
            op.run(op.init_state(), slots, 1, [values] * op.n_args)
    agg = WindowAggregator(WindowSpec(window=60, step=60), ["first", "last", "max", "min", "sum", "count"])
    agg.run(agg.init_state(), slots, 1, np.array([0, 10, 70, 130], dtype=np.int64), [values] * 6)


if __name__ == "__main__":
    with contextlib.suppress(Exception):
        warm_up()
    from pyspark.daemon import manager

    manager()
