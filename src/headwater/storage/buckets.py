"""Rows partitioned once, by the writer: bucketed Parquet files and the key hash that assigns buckets.

A row's stream task (its bucket) is a stable hash of its partition key modulo the task count
(:func:`task_of`). A writer that knows how a table's parallel reader partitions it (``Bucketing``: key
column, bucket count) writes each data file with its rows grouped by bucket, **one row group per bucket**,
plus a hidden column ``_hw_pos`` holding each row's position in the order it was given. The file's
footer says which row group holds which bucket (NULL keys: bucket -1, dropped by parallel readers, as in
Orca). A parallel reader then reads only its own row groups (:func:`read_bucket`), with the positions
that keep its rows' stream order; any other reader gets every row back in the original order
(:func:`read_in_order`). Files written without bucketing are read as before.

>>> import tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "f.parquet")
>>> rows = pa.table({"k": ["a", "b", None, "a"], "v": [1, 2, 3, 4]})
>>> write_table(rows, path, bucketing=Bucketing("k", 2))
>>> read_in_order(path, ["k", "v"]).to_pydict() == rows.to_pydict()
True
>>> mine = [read_bucket(path, ["v"], Bucketing("k", 2), b) for b in (0, 1)]
>>> sorted(v for t, _ in mine for v in t.column("v").to_pylist())  # the NULL key's row is in no bucket
[1, 2, 4]
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from headwater.storage.memory import buffer_pool

POS = "_hw_pos"
_META = b"headwater.buckets"


@dataclass(frozen=True)
class Bucketing:
    """How a table's parallel reader partitions it: rows hashed by ``key`` into ``count`` buckets."""

    key: str
    count: int


def _hash_array(values: np.ndarray) -> np.ndarray:
    # imported here: the processes that only plan a query's input (Spark's streaming-source runner, one new
    # process per query start) never hash rows, and pandas is 0.3-0.5 s of their start-up
    from pandas.util import hash_array

    return hash_array(values)


def _hash_column(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A stable 64-bit hash per row; strings are hashed once per distinct value."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks(memory_pool=buffer_pool())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        encoded = pc.dictionary_encode(column, memory_pool=buffer_pool())
        uniques = encoded.dictionary.to_numpy(zero_copy_only=False).astype(object)
        return _hash_array(uniques)[encoded.indices.to_numpy(zero_copy_only=False)]
    values = column.to_numpy(zero_copy_only=False)
    return _hash_array(values)


def task_of(columns: list[pa.ChunkedArray | pa.Array], n_tasks: int) -> np.ndarray:
    """The stream task of each row: a stable hash of its partition key, modulo the task count."""
    hashed = None
    for column in columns:
        h = _hash_column(column)
        hashed = h if hashed is None else _hash_array(hashed ^ (h * np.uint64(0x9E3779B97F4A7C15)))
    assert hashed is not None
    return (hashed % np.uint64(n_tasks)).astype(np.int64)


def write_table(rows: pa.Table, path: str, *, bucketing: Bucketing | None = None,
                text_columns: Sequence[str] = ()) -> None:
    """Write ``rows`` to one Parquet file, bucketed when ``bucketing`` applies to them.

    Uncompressed, dictionary encoding for text columns only: on numeric columns both cost write time
    for little gain.
    """
    pool = buffer_pool()
    options = {"compression": "none", "use_dictionary": list(text_columns), "memory_pool": pool}
    if bucketing is None or bucketing.key not in rows.column_names or rows.num_rows == 0:
        pq.write_table(rows, path, **options)
        return
    key = rows.column(bucketing.key)
    valid = key.is_valid().to_numpy(zero_copy_only=False)
    # 16-bit bucket ids when they fit: numpy's stable sort is then a radix sort, ~3x faster than on int64
    small = bucketing.count <= np.iinfo(np.int16).max
    buckets = np.full(rows.num_rows, -1, dtype=np.int16 if small else np.int64)
    buckets[valid] = task_of([key if valid.all() else key.filter(pa.array(valid))], bucketing.count)
    order = np.argsort(buckets, kind="stable")  # stable: each bucket keeps its rows' order
    grouped = pc.take(rows, pa.array(order), memory_pool=pool).append_column(POS, pa.array(order, pa.int64(),
                                                                                          memory_pool=pool))
    in_order = buckets[order]
    starts = np.flatnonzero(np.diff(in_order, prepend=-2))
    bounds = [*starts.tolist(), len(order)]
    ids = in_order[starts].tolist()
    meta = json.dumps({"key": bucketing.key, "count": bucketing.count, "row_groups": ids}).encode()
    schema = grouped.schema.with_metadata({**(grouped.schema.metadata or {}), _META: meta})
    with pq.ParquetWriter(path, schema, **options) as writer:
        for a, b in itertools.pairwise(bounds):
            writer.write_table(grouped.slice(a, b - a).replace_schema_metadata(schema.metadata), row_group_size=b - a)


def file_buckets(pf: pq.ParquetFile) -> tuple[Bucketing, list[int]] | None:
    """The bucketing of a data file and the bucket of each row group, or None for an unbucketed file."""
    raw = (pf.schema_arrow.metadata or {}).get(_META)
    if raw is None:
        return None
    doc = json.loads(raw)
    return Bucketing(doc["key"], int(doc["count"])), [int(b) for b in doc["row_groups"]]


def read_bucket(path: str, columns: Sequence[str], bucketing: Bucketing, bucket: int) -> tuple[pa.Table, np.ndarray] | None:
    """The rows of ``bucket`` and their positions in the file's original order, if the file is bucketed
    that way (None otherwise: read it whole and filter)."""
    pf = pq.ParquetFile(path)
    layout = file_buckets(pf)
    if layout is None or layout[0] != bucketing:
        return None
    groups = [i for i, b in enumerate(layout[1]) if b == bucket]
    table = pf.read_row_groups(groups, columns=[*columns, POS], use_threads=False) if groups else \
        pf.schema_arrow.empty_table().select([*columns, POS])
    positions = table.column(POS).to_numpy()
    return table.drop_columns([POS]), positions


def read_in_order(path: str, columns: Sequence[str]) -> pa.Table:
    """Every row of a data file, bucketed or not, in the order it was written."""
    pf = pq.ParquetFile(path)
    if file_buckets(pf) is None:
        return pf.read(columns=list(columns), use_threads=False)
    table = pf.read(columns=[*columns, POS], use_threads=False)
    return table.take(pc.sort_indices(table.column(POS))).drop_columns([POS])
