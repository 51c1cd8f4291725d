"""The Parquet data files of a stream table: reading them back in stream order, and removing orphans.

A commit (:mod:`headwater.storage.table_log`) names the files it added; :func:`iter_file_batches` and
:func:`read_files` read such files as rows of the table's schema, and :func:`remove_orphan_files` deletes
the files no commit names (left by writes cut off before their commit).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from headwater.errors import ExecutionError
from headwater.storage.buckets import file_buckets, read_in_order
from headwater.storage.table_log import DataFile, log_dir, referenced_files


def remove_orphan_files(path: str | Path, *, min_age: float = 10.0) -> tuple[int, int]:
    """Delete files in a table directory that no commit references; return (files, bytes) removed.

    Removed: top-level ``*.parquet`` files no commit of ``_delta_log`` added (written by an
    append or a micro-batch task cut off before its commit), hidden ``.*.tmp`` files (a write
    cut off before its rename) and delta-rs's ``_delta_log/_commit_*.json.tmp`` (a commit cut
    off before it was published).

    Safe only while the caller holds the data directory lock (:mod:`headwater.storage.locks`):
    then no writer of a previous process can still commit, so an unreferenced file will never
    become part of the table, and readers only open files that commits reference. A replayed
    micro-batch rewrites any output file it needs. ``min_age`` (seconds since the last
    modification) spares files that Spark Python workers of the previous process may still
    be writing while they exit; they belong to no live session either way.
    """
    table_path = os.fspath(path)
    referenced = referenced_files(table_path)
    if referenced is None:
        return 0, 0
    now = time.time()
    candidates: list[str] = []
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(table_path):
            file = os.path.normpath(os.path.join(table_path, name))
            if (name.endswith(".parquet") and not name.startswith(".") and file not in referenced) \
                    or (name.startswith(".") and name.endswith(".tmp")):
                candidates.append(file)
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(log_dir(table_path)):
            if name.startswith("_commit_") and ".json.tmp" in name:
                candidates.append(os.path.join(log_dir(table_path), name))
    files = size = 0
    for file in candidates:
        try:
            st = os.stat(file)
            if not os.path.isfile(file) or now - st.st_mtime < min_age:
                continue
            os.remove(file)
        except FileNotFoundError:
            continue
        files += 1
        size += st.st_size
    return files, size


def iter_file_batches(
    file: DataFile, schema: pa.Schema, *, batch_size: int = 131_072
) -> Iterator[pa.RecordBatch]:
    """Yield the rows of one data file in the order they were written, as batches conforming to ``schema``.

    ``schema`` may be a subset of the table's columns (those are the only ones read). A bucketed file
    (:mod:`headwater.storage.buckets`) is read whole and put back in its original order.
    """
    try:
        pf = pq.ParquetFile(file.path)
    except FileNotFoundError:
        raise ExecutionError(
            f"stream table data file {file.path} is missing; it was probably removed by vacuum "
            "after a compaction. Readers behind that point cannot replay it"
        ) from None
    batches = pf.iter_batches(batch_size=batch_size, columns=schema.names, use_threads=False) \
        if file_buckets(pf) is None else read_in_order(file.path, schema.names).to_batches(batch_size)
    for batch in batches:
        if batch.schema != schema:
            batch = pa.RecordBatch.from_arrays(
                [batch.column(n).cast(schema.field(n).type) for n in schema.names], schema=schema
            )
        yield batch


def read_files(files: Sequence[DataFile], schema: pa.Schema) -> pa.Table:
    """Read ``files`` in order into one table with ``schema``."""
    batches = [b for f in files for b in iter_file_batches(f, schema)]
    return pa.Table.from_batches(batches, schema=schema)
