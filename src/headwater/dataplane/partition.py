"""Which stream task a row belongs to: a stable hash of its partition key, modulo the task count."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa


def _hash_column(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A stable 64-bit hash per row; strings are hashed once per distinct value."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        encoded = column.dictionary_encode()
        uniques = encoded.dictionary.to_numpy(zero_copy_only=False).astype(object)
        return pd.util.hash_array(uniques)[encoded.indices.to_numpy(zero_copy_only=False)]
    values = column.to_numpy(zero_copy_only=False)
    return pd.util.hash_array(values)


def task_of(columns: list[pa.ChunkedArray | pa.Array], n_tasks: int) -> np.ndarray:
    """The stream task of each row: a stable hash of its partition key, modulo the task count."""
    hashed = None
    for column in columns:
        h = _hash_column(column)
        hashed = h if hashed is None else pd.util.hash_array(hashed ^ (h * np.uint64(0x9E3779B97F4A7C15)))
    assert hashed is not None
    return (hashed % np.uint64(n_tasks)).astype(np.int64)
