"""Idempotent appends (issue 6): a client that died during append retries its sequence safely — no Spark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

import headwater as hw
from headwater.faults import ENV_VAR
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_log import find_transaction

ROOT = Path(__file__).resolve().parents[2]
TABLE = "demo.stream_table.px"


def rows(*syms: str) -> pd.DataFrame:
    return pd.DataFrame({"sym": list(syms), "px": [float(i) for i in range(len(syms))]})


@pytest.fixture
def data_dir(tmp_path):
    with hw.connect(tmp_path, start_spark=False) as s:
        s.create_stream_table(TABLE, {"sym": "string", "px": "double"})
        s.create_stream_table("demo.stream_table.last", {"sym": "string", "px": "double"}, kind="keyed",
                              key_column="sym")
    return tmp_path


def stored(s: hw.Session, table: str = TABLE) -> list[str]:
    """The table's rows (their ``sym``), read without Spark."""
    return sorted(StreamTable.open(s.stream_table_meta(table).loc[0, "path"]).to_arrow().column("sym").to_pylist())


def test_retry_of_a_sequence_commits_nothing_and_returns_the_same_version(data_dir):
    with hw.connect(data_dir, start_spark=False, client_id="feed") as s:
        assert s.client_id == "feed"
        assert s.committed_sequence(TABLE) is None
        v1 = s.append(TABLE, rows("a", "b"), sequence=1)
        v2 = s.append(TABLE, rows("c"), sequence=2)
        assert (v1, v2) == (1, 2)
        assert s.append(TABLE, rows("a", "b"), sequence=1) == v1  # an old retry is found further back
        assert s.append(TABLE, rows("c"), sequence=2) == v2
        assert s.committed_sequence(TABLE) == 2
        meta = s.stream_table_meta(TABLE)
        assert meta.loc[0, "version"] == 2 and meta.loc[0, "rows"] == 3
        assert stored(s) == ["a", "b", "c"]


def test_a_new_session_with_the_same_client_id_resumes_the_sequence(data_dir):
    with hw.connect(data_dir, start_spark=False, client_id="feed") as s:
        s.append(TABLE, rows("a"), sequence=5)
    with hw.connect(data_dir, start_spark=False, client_id="feed") as s:
        assert s.committed_sequence(TABLE) == 5
        assert s.append(TABLE, rows("a"), sequence=5) == 1
        assert s.append(TABLE, rows("b"), sequence=s.committed_sequence(TABLE) + 1) == 2
    with hw.connect(data_dir, start_spark=False) as other:  # another (random) client id
        assert other.committed_sequence(TABLE) is None
        assert len(other.client_id) == 32


def test_an_older_sequence_that_never_committed_is_refused(data_dir):
    with hw.connect(data_dir, start_spark=False, client_id="feed") as s:
        s.append(TABLE, rows("a"), sequence=1)
        s.append(TABLE, rows("c"), sequence=3)
        with pytest.raises(hw.SequenceError, match=r"out of order.*resume from committed_sequence"):
            s.append(TABLE, rows("b"), sequence=2)
        assert isinstance(hw.SequenceError("x"), ValueError)
        assert stored(s) == ["a", "c"]


def test_two_clients_interleave_with_their_own_sequences(data_dir):
    with hw.connect(data_dir, start_spark=False, client_id="one") as one:
        one_id = one.client_id
    versions = {}
    # one session per data directory: the clients take turns, as two restarts of two feeds would
    for client, seq, sym in [("one", 1, "a"), ("two", 1, "b"), ("one", 2, "c"), ("two", 1, "b"), ("one", 1, "a"),
                             ("two", 2, "d")]:
        with hw.connect(data_dir, start_spark=False, client_id=client) as s:
            v = s.append(TABLE, rows(sym), sequence=seq)
            assert versions.setdefault((client, seq), v) == v
    assert versions == {("one", 1): 1, ("two", 1): 2, ("one", 2): 3, ("two", 2): 4}
    with hw.connect(data_dir, start_spark=False, client_id=one_id) as s:
        assert s.committed_sequence(TABLE) == 2
        assert stored(s) == ["a", "b", "c", "d"]
    assert find_transaction(data_dir / "tables" / "demo" / "px", "client:two", 1) == 2
    assert find_transaction(data_dir / "tables" / "demo" / "px", "client:two", 3) is None


def test_keyed_append_of_only_duplicates_still_records_its_sequence(data_dir):
    table = "demo.stream_table.last"
    with hw.connect(data_dir, start_spark=False, client_id="feed") as s:
        assert s.append(table, rows("a", "b"), sequence=1) == 1
        assert s.append(table, rows("a"), sequence=2) == 2  # every row a duplicate: an empty commit
        assert s.committed_sequence(table) == 2
        assert s.append(table, rows("a"), sequence=2) == 2
        assert s.append(table, rows("b")) == 2  # without sequence: nothing committed, the current version
        assert s.append(table, rows("c")) == 3
        meta = s.stream_table_meta(table)
        assert (meta.loc[0, "version"], meta.loc[0, "rows"]) == (3, 3)


def test_append_without_sequence_returns_the_version(data_dir):
    with hw.connect(data_dir, start_spark=False) as s:
        assert s.append(TABLE, rows("a")) == 1
        assert s.append(TABLE, rows("a")) == 2
        assert s.stream_table_meta().set_index("fqn").loc[TABLE, "rows"] == 2


@pytest.mark.parametrize("bad", ["", "has space", "x" * 65, "-lead", "client:x", 7])
def test_client_id_is_validated(tmp_path, bad):
    with pytest.raises(hw.GraphDefinitionError, match="not a valid client id"):
        hw.connect(tmp_path, start_spark=False, client_id=bad)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_sequence_is_validated(data_dir, bad):
    with hw.connect(data_dir, start_spark=False) as s, pytest.raises(hw.GraphDefinitionError, match="sequence"):
        s.append(TABLE, rows("a"), sequence=bad)


KILLED_APPEND = textwrap.dedent("""
    import sys
    import pandas as pd
    import headwater as hw
    s = hw.connect(sys.argv[1], start_spark=False, client_id="feed")
    s.append("demo.stream_table.px", pd.DataFrame({"sym": ["a", "b"], "px": [1.0, 2.0]}), sequence=1)
    s.append("demo.stream_table.px", pd.DataFrame({"sym": ["c"], "px": [3.0]}), sequence=2)
    print("append returned", flush=True)
""")


def test_killed_after_the_commit_before_append_returns_then_retry_appends_once(data_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), ENV_VAR: "stream_table.append.after_commit"}
    proc = subprocess.run([sys.executable, "-c", KILLED_APPEND, str(data_dir)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "append returned" not in proc.stdout
    with hw.connect(data_dir, start_spark=False, client_id="feed") as s:
        assert s.committed_sequence(TABLE) == 1  # the commit landed although append never returned
        assert s.append(TABLE, pd.DataFrame({"sym": ["a", "b"], "px": [1.0, 2.0]}), sequence=1) == 1
        assert s.append(TABLE, pd.DataFrame({"sym": ["c"], "px": [3.0]}), sequence=2) == 2
        assert stored(s) == ["a", "b", "c"]


def test_table_meta_survives_a_table_directory_removed_behind_the_catalog(data_dir):
    import shutil

    shutil.rmtree(data_dir / "tables" / "demo" / "last")
    with hw.connect(data_dir, start_spark=False) as s:
        meta = s.stream_table_meta().set_index("fqn")
        assert meta.loc["demo.stream_table.last", ["version", "rows"]].isna().all()
        assert meta.loc[TABLE, "version"] == 0 and meta.loc[TABLE, "rows"] == 0
