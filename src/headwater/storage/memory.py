"""Where the large Arrow buffers of Headwater's writes come from: an append's, in the user's process, and a task's.

pyarrow's default pool (mimalloc) asks the kernel for transparent huge pages. Where the kernel grants them only
when asked (``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise``, as on this project's machines),
each first touch of a 2 MiB page zeroes all of it, and in a virtual machine whose host backs the guest's memory
as it is first used, a fresh huge page can cost far more than the 512 small pages it replaces. Measured on the
2-core machine: a 200 MB ``take`` in a fresh process took 0.45-0.76 s from mimalloc, 0.16-0.20 s from jemalloc
or the system allocator, which use small pages there; a 2 M-row append to a running graph, 0.50-0.81 s
(median 0.69) against 0.40-0.52 s (median 0.45), four alternating runs.

Spark's Python workers turn huge pages off for their whole process (:mod:`headwater.spark.daemon`), where either
pool uses small pages; a user's process is not ours to change, so the writes name their pool instead.

>>> buffer_pool().backend_name in ("jemalloc", "system")
True
"""

from __future__ import annotations

import functools

import pyarrow as pa


@functools.cache
def buffer_pool() -> pa.MemoryPool:
    """The pool of the writes' large buffers: jemalloc where pyarrow has it, else the system allocator."""
    try:
        return pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without jemalloc
        return pa.system_memory_pool()
