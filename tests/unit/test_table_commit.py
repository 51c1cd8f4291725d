"""Appends commit by writing the Delta log's commit file (headwater.storage.table_commit): what delta-rs reads of
them, the race with another writer, and tables whose protocol asks more of a writer."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from headwater.errors import ExecutionError
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_commit import has_invariants, write_commit
from headwater.storage.table_log import commit_time, latest_version
from headwater.types import Schema

SCHEMA = Schema.parse({"time": "timestamp", "sym": "string", "px": "double"})


def rows(*pxs: float) -> pa.Table:
    n = len(pxs)
    return pa.table({"time": pa.array(range(n), pa.timestamp("us")), "sym": ["a"] * n, "px": list(pxs)})


def test_delta_rs_reads_the_commits_as_written(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA)
    t.append(rows(1.0, 2.0), txn=("app", 0))
    t.append(rows(3.0), txn=("app", 1), at=1_700_000_000.5)
    t.append(rows(4.0))
    dt = DeltaTable(str(tmp_path / "t"))
    assert dt.version() == 3
    assert sorted(dt.to_pyarrow_table().column("px").to_pylist()) == [1.0, 2.0, 3.0, 4.0]
    assert dt.transaction_version("app") == 1 and dt.transaction_version("other") is None
    assert [h["operation"] for h in dt.history()][:3] == ["WRITE"] * 3
    assert commit_time(t.path, 2) == 1_700_000_000.5
    assert sorted(pa.table(dt.get_add_actions(flatten=True)).column("num_records").to_pylist()) == [1, 1, 2]


def test_a_commit_of_another_writer_in_between_is_read_before_the_next_append(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA)
    assert t.append(rows(1.0), txn=("app", 0)) == 1
    # another process commits versions 2 and 3 behind this one's back, the second with the app's next transaction
    assert write_commit(str(t.path), 2, [], txn=("other", 5), at=None)
    assert write_commit(str(t.path), 3, [], txn=("app", 1), at=None)
    assert t.append(rows(2.0), txn=("app", 1)) is None  # already committed: nothing written
    assert t.append(rows(3.0), txn=("app", 2)) == 4
    assert t.transaction_version("other") == 5 and t.transaction_version("app") == 2
    assert latest_version(t.path) == 4
    assert not any(p.name.endswith(".tmp") for p in (tmp_path / "t" / "_delta_log").iterdir())


def test_a_version_taken_first_is_not_overwritten(tmp_path):
    t = StreamTable.create(tmp_path / "t", SCHEMA)
    assert write_commit(str(t.path), 1, [], txn=("x", 1), at=None)
    before = (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").read_bytes()
    assert not write_commit(str(t.path), 1, [], txn=("y", 1), at=None)
    assert (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").read_bytes() == before


def test_a_table_whose_protocol_asks_more_of_a_writer_is_refused(tmp_path):
    path = tmp_path / "cdf"
    write_deltalake(str(path), rows(1.0), configuration={"delta.enableChangeDataFeed": "true"})
    t = StreamTable.open(path)
    with pytest.raises(ExecutionError, match=r"changeDataFeed|writer version"):
        t.append(rows(2.0))
    assert latest_version(path) == 0


def test_a_plain_table_of_another_tool_takes_appends(tmp_path):
    path = tmp_path / "plain"
    write_deltalake(str(path), rows(1.0))
    t = StreamTable.open(path)
    assert t.append(rows(2.0)) == 1
    assert sorted(DeltaTable(str(path)).to_pyarrow_table().column("px").to_pylist()) == [1.0, 2.0]


def test_invariants_are_found_in_nested_fields():
    plain = '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,"metadata":{}}]}'
    nested = ('{"type":"struct","fields":[{"name":"s","type":{"type":"struct","fields":[{"name":"a","type":"long",'
              '"nullable":true,"metadata":{"delta.invariants":"{\\"expression\\":{\\"expression\\":\\"a > 0\\"}}"}}]},'
              '"nullable":true,"metadata":{}}]}')
    assert not has_invariants(plain) and has_invariants(nested)
