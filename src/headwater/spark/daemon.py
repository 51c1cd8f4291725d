"""Spark's Python daemon, with Headwater's kernels loaded before it forks workers.

Spark forks every Python worker from one daemon process. Importing the data plane (pandas, pyarrow, Numba,
delta-rs) and loading every compiled kernel once here (``spark.python.daemon.module``;
:func:`headwater.engines.warm.warm_up`) means each forked worker starts warm instead of paying seconds of
imports and kernel loading on its first micro-batch.
"""

from __future__ import annotations

import contextlib

if __name__ == "__main__":
    with contextlib.suppress(Exception):  # what cannot load here loads in the worker that needs it
        import headwater.spark.fused  # noqa: F401  (what every task runs: the data plane, its storage)
        from headwater.engines.warm import warm_up

        warm_up()
    from pyspark.daemon import manager

    manager()
