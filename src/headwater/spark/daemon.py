"""Spark's Python daemon, with Headwater's kernels loaded before it forks workers.

Spark forks every Python worker from one daemon process; on a local master the driver's zygote
(:mod:`headwater.spark.zygote`), warm already, forks the daemon in this process's place. Importing the data plane (pandas, pyarrow, Numba,
delta-rs) and loading every compiled kernel once here (``spark.python.daemon.module``;
:func:`headwater.engines.warm.warm_up`) means each forked worker starts warm instead of paying seconds of
imports and kernel loading on its first micro-batch.

The daemon also drops from its import path the archives Spark puts there that hold no Python: the jar of Spark's
core (16 MB, 6,000 entries). Each task of a worker calls ``importlib.invalidate_caches()``, and Python 3.11's
zipimport then reads the directory of every archive on the path again: 30-80 ms of each task, for nothing.

The daemon also turns transparent huge pages off for itself and the workers it forks (they inherit it).
pyarrow's allocator and NumPy ask for huge pages on large buffers, and the kernel then zeroes 2 MiB for each
first touch, however little of it is used. A fresh worker touches a few hundred MiB in its first micro-batch:
measured on the 2-core machine (one cold 2 M-row append through 20 metrics, 6 runs each), each task's system
time went from 0.5-0.7 s to 0.2-0.3 s, and the append's wall time from 2.44 s to 2.06 s (medians).

Before it forks, the daemon freezes what it loaded (:func:`freeze_heap`: PySpark collects garbage in a worker after
each task).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys

PR_SET_THP_DISABLE = 41  # <linux/prctl.h>


def without_empty_archives(paths: list[str]) -> list[str]:
    """``paths`` without the zip archives that hold no Python module (Spark's jar; a pyspark.zip stays)."""
    import zipfile

    def empty(path: str) -> bool:
        try:
            with zipfile.ZipFile(path) as archive:
                return not any(n.endswith((".py", ".pyc")) for n in archive.namelist())
        except (OSError, zipfile.BadZipFile):  # not an archive: a directory, or nothing (as pyspark.zip in our home)
            return False

    return [p for p in paths if not (os.path.isfile(p) and empty(p))]


def drop_empty_archives() -> None:
    """Take the archives without Python off this process's import path (workers forked from it inherit that)."""
    kept = without_empty_archives(sys.path)
    for path in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(path, None)
    sys.path[:] = kept


def disable_transparent_huge_pages() -> bool:
    """Turn transparent huge pages off for this process and the processes it forks; whether it could."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def warm_up() -> None:
    """Import what every task runs and load every kernel; what cannot load here loads in the worker that needs it."""
    with contextlib.suppress(Exception):
        # what every task runs: fused imports the data plane lazily (its query planners stay light), and a task's
        # plan, unpickled in the worker, needs it whole (the task, its storage, Parquet): 50 ms of each first task
        import headwater.dataplane.task
        import headwater.spark.fused  # noqa: F401
        from headwater.engines.warm import warm_up as load_kernels

        load_kernels()


def freeze_heap() -> None:
    """Exempt every object loaded so far (the kernels, pandas, Arrow: ~170,000) from the garbage collector.

    PySpark's daemon runs a full collection in a worker after each of its tasks: 60-80 ms over these objects, so a
    micro-batch whose tasks came right after waited for it. Frozen, they are never traversed, and a forked worker's
    collections no longer write to (and so copy) the pages it shares with this process.
    """
    gc.collect()
    gc.freeze()


if __name__ == "__main__":
    from headwater.spark.zygote import hand_over

    if not hand_over():  # the driver's zygote, warm already, forks the daemon in this process's place
        drop_empty_archives()
        disable_transparent_huge_pages()
        warm_up()
        freeze_heap()
        from pyspark.daemon import manager

        manager()
