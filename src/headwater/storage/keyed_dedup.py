"""De-duplication of keyed and latest-keyed appends against everything a table already holds.

A :class:`KeyIndex` holds, as of one table version, the keys stored (``keyed``) or each key's newest time
(``latest_keyed``); :class:`KeyRule` (a table's kind, key and time column) adds rows to it and filters an
append down to the rows the table keeps. The writer (:mod:`headwater.storage.stream_table`) caches one
index per table and catches it up from the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


@dataclass
class KeyIndex:
    """The key index of a keyed table as of ``version``."""

    version: int
    # keyed: key -> None (a set); latest_keyed: key -> newest stored time
    entries: dict[tuple[Any, ...], Any]


def key_tuples(table: pa.Table, key_columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Hashable keys, one per row, with nulls as None whatever the column type."""
    cols = []
    for name in key_columns:
        col = table.column(name)
        if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
            col = col.cast(pa.int64())
        cols.append(col.to_pylist())
    return list(zip(*cols, strict=True))


def comparable_time(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """Timestamps and dates as int64, so that they compare as Python values."""
    if pa.types.is_timestamp(col.type) or pa.types.is_date32(col.type):
        return col.cast(pa.int64())
    return col


@dataclass(frozen=True)
class KeyRule:
    """How a table de-duplicates: its kind (``keyed`` or ``latest_keyed``), key and time column."""

    kind: str
    key_columns: tuple[str, ...]
    time_column: str | None

    def index_columns(self) -> list[str]:
        """The columns an index is built from: the key, and a latest-keyed table's time column."""
        cols = list(self.key_columns)
        if self.kind == "latest_keyed":
            assert self.time_column is not None
            cols.append(self.time_column)
        return cols

    def index_add(self, index: KeyIndex, rows: pa.Table) -> None:
        """Record stored ``rows`` (with at least :meth:`index_columns`) in ``index``."""
        keys = key_tuples(rows, self.key_columns)
        if self.kind == "keyed":
            index.entries.update(dict.fromkeys(keys))
            return
        assert self.time_column is not None
        times = comparable_time(rows.column(self.time_column)).to_pylist()
        entries = index.entries
        for k, t in zip(keys, times, strict=True):
            if t is None:
                continue
            old = entries.get(k)
            if old is None or t > old:
                entries[k] = t

    def dedup(self, index: KeyIndex, rows: pa.Table) -> pa.Table:
        """Return the rows of ``rows`` the table keeps, given the keys already stored (``index``)."""
        if rows.num_rows == 0:
            return rows
        import pandas as pd

        key_frame = pa.table(
            {f"k{i}": comparable_time(rows.column(c)) for i, c in enumerate(self.key_columns)}
        ).to_pandas()
        key_names = list(key_frame.columns)
        if self.kind == "keyed":
            candidates = np.flatnonzero(~key_frame.duplicated(subset=key_names, keep="first").to_numpy())
        else:
            assert self.time_column is not None
            times = comparable_time(rows.column(self.time_column))
            key_frame["_t"] = times.to_pandas()
            key_frame["_i"] = np.arange(rows.num_rows)
            key_frame = key_frame[pd.notna(key_frame["_t"]).to_numpy()]
            newest = key_frame.sort_values(["_t", "_i"], ascending=[False, True], kind="stable")
            newest = newest.drop_duplicates(subset=key_names, keep="first")
            candidates = np.sort(newest["_i"].to_numpy())
        cand_rows = rows.take(pa.array(candidates, pa.int64()))
        keys = key_tuples(cand_rows, self.key_columns)
        if self.kind == "keyed":
            keep = [i for i, k in enumerate(keys) if k not in index.entries]
        else:
            cand_times = comparable_time(cand_rows.column(self.time_column)).to_pylist()
            keep = []
            for i, (k, t) in enumerate(zip(keys, cand_times, strict=True)):
                old = index.entries.get(k)
                if old is None or t > old:
                    keep.append(i)
        if len(keep) == cand_rows.num_rows:
            return cand_rows
        return cand_rows.take(pa.array(keep, pa.int64()))
