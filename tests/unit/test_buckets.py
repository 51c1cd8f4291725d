"""Rows are partitioned once, by the writer: bucketed files give each parallel task only its rows, in order,
and every other reader the rows in the order they were written."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.storage.buckets import Bucketing, read_bucket, read_in_order, task_of, write_table
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_files import iter_file_batches
from headwater.types import Schema


@settings(max_examples=40, deadline=None)
@given(keys=st.lists(st.one_of(st.none(), st.sampled_from("abcdefg")), max_size=60), n=st.integers(1, 5))
def test_each_bucket_holds_exactly_its_rows_in_order(tmp_path_factory, keys, n):
    path = str(tmp_path_factory.mktemp("b") / "f.parquet")
    rows = pa.table({"k": pa.array(keys, pa.string()), "v": np.arange(len(keys))})
    write_table(rows, path, bucketing=Bucketing("k", n))
    assert read_in_order(path, ["k", "v"]).equals(rows)
    seen = []
    for bucket in range(n):
        got = read_bucket(path, ["k", "v"], Bucketing("k", n), bucket)
        if got is None:  # an empty file is written plain: read whole, nothing to filter
            assert not keys
            continue
        table, positions = got
        assert positions.tolist() == table.column("v").to_pylist() == sorted(positions.tolist())
        if table.num_rows:
            assert set(task_of([table.column("k")], n).tolist()) == {bucket}
        seen += positions.tolist()
    assert sorted(seen) == [i for i, k in enumerate(keys) if k is not None]  # NULL keys: no task's rows


def test_a_reader_partitioned_another_way_falls_back(tmp_path):
    path = str(tmp_path / "f.parquet")
    write_table(pa.table({"k": ["a", "b"], "v": [1, 2]}), path, bucketing=Bucketing("k", 2))
    assert read_bucket(path, ["v"], Bucketing("k", 3), 0) is None
    assert read_bucket(path, ["v"], Bucketing("v", 2), 0) is None
    plain = str(tmp_path / "p.parquet")
    write_table(pa.table({"k": ["a"]}), plain)
    assert read_bucket(plain, ["k"], Bucketing("k", 2), 0) is None


def test_bucketed_appends_read_back_in_append_order(tmp_path):
    table = StreamTable.create(tmp_path / "t", Schema.parse({"k": "string", "v": "long"}))
    table.bucketing = Bucketing("k", 4)
    rows = pa.table({"k": ["d", "a", None, "c", "a", "b"], "v": [0, 1, 2, 3, 4, 5]})
    version = table.append(rows)
    assert table.read_version(version).equals(rows)
    file = table.commit(version).files[0]
    assert pq.ParquetFile(file.path).metadata.num_row_groups > 1  # one row group per bucket present
    assert [b.num_rows for b in iter_file_batches(file, rows.schema)] == [6]


@pytest.mark.parametrize("n", [1, 3])
def test_empty_and_single_bucket_files(tmp_path, n):
    path = str(tmp_path / "f.parquet")
    write_table(pa.table({"k": pa.array([], pa.string())}), path, bucketing=Bucketing("k", n))
    assert read_in_order(path, ["k"]).num_rows == 0
