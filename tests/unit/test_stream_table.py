"""StreamTable: Delta-backed stream tables, no Spark."""

from __future__ import annotations

import multiprocessing
import threading
from datetime import datetime

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headwater.errors import CatalogError, GraphDefinitionError, SchemaError
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_log import latest_version, read_commit
from headwater.types import Schema

TICKS = Schema.parse({"time": "timestamp", "sym": "string", "px": "double", "qty": "long"})


def ts(*seconds: int) -> pa.Array:
    return pa.array([s * 1_000_000 for s in seconds], pa.timestamp("us"))


def ticks(times, syms, pxs, qtys=None) -> pa.Table:
    return pa.table(
        {
            "time": ts(*times),
            "sym": pa.array(syms, pa.string()),
            "px": pa.array(pxs, pa.float64()),
            "qty": pa.array(qtys if qtys is not None else [1] * len(syms), pa.int64()),
        }
    )


@pytest.fixture
def plain(tmp_path):
    return StreamTable.create(tmp_path / "ticks", TICKS)


# -- create / open -------------------------------------------------------------


def test_create_open_round_trip(tmp_path):
    created = StreamTable.create(
        tmp_path / "t", TICKS, kind="latest_keyed", key_columns=["sym"], time_column="time"
    )
    assert created.version() == 0
    opened = StreamTable.open(tmp_path / "t")
    assert opened.schema == TICKS
    assert (opened.kind, opened.key_columns, opened.time_column) == ("latest_keyed", ("sym",), "time")
    assert opened.path == (tmp_path / "t").absolute()
    assert opened.name == "t"
    assert opened.to_arrow().num_rows == 0
    assert opened.to_arrow().schema == TICKS.to_arrow()


def test_create_keeps_int_and_float_widths(tmp_path):
    schema = Schema.parse({"a": "int", "b": "float", "c": "date", "d": "bool"})
    StreamTable.create(tmp_path / "t", schema)
    assert StreamTable.open(tmp_path / "t").schema == schema


def test_create_refuses_existing_path(tmp_path):
    StreamTable.create(tmp_path / "t", TICKS)
    with pytest.raises(CatalogError, match="already exists"):
        StreamTable.create(tmp_path / "t", TICKS)


def test_open_missing_table(tmp_path):
    with pytest.raises(CatalogError, match="no stream table at"):
        StreamTable.open(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(KeyError):  # CatalogError is also a KeyError
        StreamTable.open(tmp_path / "empty")


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"kind": "upsert"}, GraphDefinitionError, "expected one of plain, keyed, latest_keyed"),
        ({"kind": "keyed"}, GraphDefinitionError, "needs key_columns"),
        ({"kind": "plain", "key_columns": ["sym"]}, GraphDefinitionError, "plain table has no key"),
        ({"kind": "keyed", "key_columns": ["nope"]}, SchemaError, "'nope' is not in the schema"),
        ({"kind": "latest_keyed", "key_columns": ["sym"]}, GraphDefinitionError, "needs time_column"),
        (
            {"kind": "latest_keyed", "key_columns": ["sym"], "time_column": "sym"},
            SchemaError,
            "expected a timestamp, date or numeric",
        ),
    ],
)
def test_create_validates_definition(tmp_path, kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        StreamTable.create(tmp_path / "t", TICKS, **kwargs)
    assert not (tmp_path / "t").exists()


def test_delete(plain):
    plain.append(ticks([1], ["a"], [1.0]))
    plain.delete()
    assert not plain.path.exists()
    with pytest.raises(CatalogError):
        StreamTable.open(plain.path)
    again = StreamTable.create(plain.path, TICKS)
    assert again.version() == 0


# -- append / read_version -----------------------------------------------------


def test_append_and_read_version_keep_order(plain):
    assert plain.append(ticks([3, 1, 2], ["c", "a", "b"], [3.0, 1.0, 2.0])) == 1
    assert plain.append(ticks([9, 8], ["z", "y"], [9.0, 8.0])) == 2
    assert plain.version() == 2
    assert plain.read_version(1).column("sym").to_pylist() == ["c", "a", "b"]
    assert plain.read_version(2).column("px").to_pylist() == [9.0, 8.0]
    empty = plain.read_version(0)
    assert empty.num_rows == 0 and empty.schema == TICKS.to_arrow()
    assert plain.to_arrow().num_rows == 5


def test_each_append_is_one_commit_with_one_file(plain):
    n = 300_000
    data = pa.table(
        {
            "time": pa.array(np.arange(n), pa.timestamp("us")),
            "sym": pa.array(np.array(["a", "b", "c"])[np.arange(n) % 3]),
            "px": pa.array(np.arange(n, dtype=np.float64)),
            "qty": pa.array(np.arange(n)[::-1]),
        }
    )
    v = plain.append(data)
    commit = read_commit(plain.path, v)
    assert len(commit.files) == 1 and commit.num_rows() == n
    assert plain.read_version(v).equals(data)


def test_read_version_subset_of_columns(plain):
    plain.append(ticks([1, 2], ["a", "b"], [1.0, 2.0]))
    assert plain.read_version(1, ["sym"]).to_pydict() == {"sym": ["a", "b"]}


def test_read_missing_version(plain):
    with pytest.raises(CatalogError, match="version 7 is not in the table's log"):
        plain.read_version(7)


def test_empty_append_commits_nothing(plain):
    assert plain.append(ticks([], [], [])) is None
    assert plain.version() == 0


def test_timestamps_round_trip_exactly(plain):
    times = [datetime(1970, 1, 1), datetime(2024, 2, 29, 23, 59, 59, 999_999), datetime(2262, 4, 11)]
    data = pa.table(
        {
            "time": pa.array(times, pa.timestamp("us")),
            "sym": ["a", "b", "c"],
            "px": [0.0, 1.0, 2.0],
            "qty": [1, 2, 3],
        }
    )
    plain.append(data)
    assert plain.read_version(1).column("time").to_pylist() == times
    assert plain.to_arrow().sort_by("px").column("time").to_pylist() == times


def test_version_is_seen_by_other_instances(plain):
    other = StreamTable.open(plain.path)
    plain.append(ticks([1], ["a"], [1.0]))
    plain.append(ticks([2], ["b"], [2.0]))
    assert other.version() == 2
    assert latest_version(plain.path) == 2


# -- schema validation -----------------------------------------------------------


def test_missing_column_is_named(plain):
    with pytest.raises(SchemaError, match=r"stream table 'ticks': data has missing column\(s\) 'qty'"):
        plain.append(ticks([1], ["a"], [1.0]).drop(["qty"]))


def test_extra_column_is_named(plain):
    data = ticks([1], ["a"], [1.0]).append_column("venue", pa.array(["x"]))
    with pytest.raises(SchemaError, match=r"unknown column\(s\) 'venue'"):
        plain.append(data)


def test_wrong_type_names_column_got_and_expected(plain):
    data = ticks([1], ["a"], [1.0]).set_column(2, "px", pa.array(["1.0"]))
    with pytest.raises(SchemaError) as info:
        plain.append(data)
    msg = str(info.value)
    assert "'ticks'" in msg and "column 'px'" in msg and "type string" in msg and "expected double" in msg
    assert plain.version() == 0


def test_narrowing_cast_is_refused(tmp_path):
    t = StreamTable.create(tmp_path / "t", Schema.parse({"n": "int"}))
    with pytest.raises(SchemaError, match="column 'n' has type int64, expected int"):
        t.append(pa.table({"n": pa.array([1], pa.int64())}))


def test_array_vector_columns_round_trip_and_widen_like_their_elements(tmp_path):
    schema = Schema.parse({"qty": "long[]", "px": "double[]", "at": "timestamp[]"})
    t = StreamTable.create(tmp_path / "t", schema)
    t.append(pd.DataFrame({"qty": [[1, 2], [], None], "px": [[1.5, None], [2.0], [3]],
                           "at": [[datetime(2026, 1, 2)], [], []]}))
    assert StreamTable.open(tmp_path / "t").schema == schema
    assert t.to_arrow().to_pydict() == {"qty": [[1, 2], [], None], "px": [[1.5, None], [2.0], [3.0]],
                                        "at": [[datetime(2026, 1, 2)], [], []]}
    with pytest.raises(SchemaError, match=r"column 'qty' has type list<item: double>, expected long\[\]"):
        t.append(pa.table({"qty": [[1.5]], "px": [[1.0]], "at": pa.array([[]], pa.list_(pa.timestamp("us")))}))
    with pytest.raises(SchemaError, match="unknown column type 'long\\[\\]\\[\\]'"):
        Schema.parse({"x": "long[][]"})


def test_lossy_value_cast_is_refused(tmp_path):
    t = StreamTable.create(tmp_path / "t", Schema.parse({"x": "double", "time": "timestamp"}))
    with pytest.raises(SchemaError, match="column 'x' of type int64 does not fit double"):
        t.append(pa.table({"x": pa.array([2**53 + 1]), "time": ts(0)}))
    with pytest.raises(SchemaError, match=r"column 'time' of type timestamp\[ns\] does not fit timestamp"):
        t.append(pa.table({"x": [1.0], "time": pa.array([1_001], pa.timestamp("ns"))}))


def test_zoned_timestamps_get_a_hint(plain):
    data = ticks([1], ["a"], [1.0]).set_column(0, "time", pa.array([1], pa.timestamp("us", tz="UTC")))
    with pytest.raises(SchemaError, match="tz_localize"):
        plain.append(data)


def test_safe_casts_and_column_order(plain):
    data = pa.table(
        {
            "qty": pa.array([5], pa.int32()),
            "PX": pa.array([7], pa.int16()),  # matched case-insensitively, int16 -> double
            "sym": pa.array(["a"], pa.large_string()),
            "time": pa.array([np.datetime64("2024-01-02T03:04:05.123456000", "ns")], pa.timestamp("ns")),
        }
    )
    plain.append(data)
    out = plain.read_version(1)
    assert out.schema == TICKS.to_arrow()
    assert out.to_pylist() == [
        {"time": datetime(2024, 1, 2, 3, 4, 5, 123456), "sym": "a", "px": 7.0, "qty": 5}
    ]


def test_pandas_frame_with_naive_datetimes(plain):
    frame = pd.DataFrame(
        {
            "time": pd.to_datetime(["2024-01-01 00:00:01", "2024-01-01 00:00:02"]),
            "sym": ["a", "b"],
            "px": [1.0, 2.0],
            "qty": [1, 2],
        }
    )
    assert frame["time"].dtype == "datetime64[ns]"
    plain.append(frame)
    assert plain.read_version(1).column("time").to_pylist() == [t.to_pydatetime() for t in frame["time"]]


def test_nulls_are_kept(plain):
    data = pa.table(
        {
            "time": pa.array([None], pa.timestamp("us")),
            "sym": pa.array([None], pa.string()),
            "px": pa.array([None], pa.float64()),
            "qty": pa.nulls(1),
        }
    )
    plain.append(data)
    assert plain.read_version(1).to_pylist() == [{"time": None, "sym": None, "px": None, "qty": None}]


# -- idempotent transactions ----------------------------------------------------------


def test_txn_same_batch_twice_appends_once(plain):
    batch = ticks([1, 2], ["a", "b"], [1.0, 2.0])
    assert plain.append(batch, txn=("query-1", 0)) == 1
    assert plain.append(batch, txn=("query-1", 0)) is None
    assert plain.append(batch, txn=("query-1", 1)) == 2
    assert plain.append(batch, txn=("query-1", 1)) is None
    assert plain.append(batch, txn=("query-1", 0)) is None  # older batch: also already done
    assert plain.append(batch, txn=("query-2", 0)) == 3  # another writer has its own counter
    assert plain.to_arrow().num_rows == 6


def test_txn_is_recorded_even_when_nothing_is_left(tmp_path):
    t = StreamTable.create(tmp_path / "t", TICKS, kind="keyed", key_columns=["sym"])
    t.append(ticks([1], ["a"], [1.0]))
    assert t.append(ticks([2], ["a"], [2.0]), txn=("q", 3)) == 2  # commit without rows
    assert t.read_version(2).num_rows == 0
    assert t.append(ticks([3], ["b"], [3.0]), txn=("q", 3)) is None
    assert t.append(ticks([], [], []), txn=("q", 4)) == 3


def test_txn_survives_reopen(plain):
    plain.append(ticks([1], ["a"], [1.0]), txn=("q", 5))
    assert StreamTable.open(plain.path).append(ticks([1], ["a"], [1.0]), txn=("q", 5)) is None


def test_bad_txn(plain):
    with pytest.raises(GraphDefinitionError, match="txn must be"):
        plain.append(ticks([1], ["a"], [1.0]), txn=("q", -1))


# -- keyed / latest_keyed -----------------------------------------------------------


def test_keyed_first_writer_wins_within_and_across_appends(tmp_path):
    t = StreamTable.create(tmp_path / "t", TICKS, kind="keyed", key_columns=["sym"])
    t.append(ticks([1, 2, 3, 4], ["a", "b", "a", "c"], [1.0, 2.0, 3.0, 4.0]))
    assert t.read_version(1).column("px").to_pylist() == [1.0, 2.0, 4.0]
    t.append(ticks([5, 6, 7], ["d", "b", "d"], [5.0, 6.0, 7.0]))
    assert t.read_version(2).column("px").to_pylist() == [5.0]
    assert t.append(ticks([8], ["a"], [8.0])) is None
    # a fresh instance (new process) rebuilds the index from the table itself
    reopened = StreamTable.open(t.path)
    from headwater.storage import table_state as mod

    mod.forget_state(t.path)
    assert reopened.append(ticks([9, 10], ["c", "e"], [9.0, 10.0])) == 3
    assert reopened.read_version(3).column("sym").to_pylist() == ["e"]
    assert sorted(reopened.to_arrow().column("sym").to_pylist()) == ["a", "b", "c", "d", "e"]


def test_keyed_with_compound_key_and_null_key(tmp_path):
    t = StreamTable.create(tmp_path / "t", TICKS, kind="keyed", key_columns=["sym", "time"])
    t.append(
        pa.table(
            {
                "time": ts(1, 1, 2, 1),
                "sym": pa.array(["a", "b", "a", None]),
                "px": [1.0, 2.0, 3.0, 4.0],
                "qty": [1, 1, 1, 1],
            }
        )
    )
    assert t.read_version(1).column("px").to_pylist() == [1.0, 2.0, 3.0, 4.0]
    v = t.append(
        pa.table(
            {"time": ts(1, 1, 3), "sym": pa.array([None, "a", "a"]), "px": [5.0, 6.0, 7.0], "qty": [1, 1, 1]}
        )
    )
    assert t.read_version(v).column("px").to_pylist() == [7.0]


def test_latest_keyed_newest_time_wins(tmp_path):
    t = StreamTable.create(
        tmp_path / "t", TICKS, kind="latest_keyed", key_columns=["sym"], time_column="time"
    )
    # within one append: the max-time row per key, ties go to the first, order kept
    t.append(ticks([5, 3, 9, 9, 1, 7], ["a", "b", "a", "a", "c", "b"], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
    assert t.read_version(1).column("px").to_pylist() == [3.0, 5.0, 6.0]
    # across appends: only strictly newer times than stored
    v = t.append(ticks([9, 8, 6, 2], ["a", "b", "b", "d"], [10.0, 11.0, 12.0, 13.0]))
    assert t.read_version(v).column("px").to_pylist() == [11.0, 13.0]
    assert t.append(ticks([1, 8], ["a", "b"], [0.0, 0.0])) is None
    reopened = StreamTable.open(t.path)
    from headwater.storage import table_state as mod

    mod.forget_state(t.path)
    v = reopened.append(ticks([10, 8, 9], ["a", "b", "c"], [20.0, 21.0, 22.0]))
    assert reopened.read_version(v).column("px").to_pylist() == [20.0, 22.0]


def test_latest_keyed_drops_null_times(tmp_path):
    t = StreamTable.create(
        tmp_path / "t",
        Schema.parse({"k": "long", "t": "long"}),
        kind="latest_keyed",
        key_columns=["k"],
        time_column="t",
    )
    t.append(pa.table({"k": [1, 1, 2], "t": pa.array([None, 4, None], pa.int64())}))
    assert t.read_version(1).to_pydict() == {"k": [1], "t": [4]}


def test_keyed_index_follows_writes_from_other_instances(tmp_path):
    a = StreamTable.create(tmp_path / "t", TICKS, kind="keyed", key_columns=["sym"])
    a.append(ticks([1], ["x"], [1.0]))  # builds the index
    from headwater.storage import table_state as mod

    mod.forget_state(a.path)  # as if b were in another process
    b = StreamTable.open(a.path)
    b.append(ticks([2], ["y"], [2.0]))
    mod.forget_state(a.path)
    a2 = StreamTable.open(a.path)
    assert a2.append(ticks([3, 4], ["y", "z"], [3.0, 4.0])) == 3
    assert a2.read_version(3).column("sym").to_pylist() == ["z"]


# -- concurrency ---------------------------------------------------------------------


def test_concurrent_appends_from_threads(tmp_path):
    t = StreamTable.create(tmp_path / "t", TICKS, kind="keyed", key_columns=["qty"])
    n_threads, per_thread = 4, 10
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            table = StreamTable.open(t.path)
            for i in range(per_thread):
                # every thread writes the same keys: each key must land exactly once
                table.append(ticks([i], [f"w{w}"], [float(i)], [i]), txn=(f"writer-{w}", i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert t.version() == n_threads * per_thread
    assert sorted(t.to_arrow().column("qty").to_pylist()) == list(range(per_thread))
    rows = [t.read_version(v).num_rows for v in range(1, t.version() + 1)]
    assert sum(rows) == per_thread


def _process_writer(path: str, w: int, per_process: int) -> None:
    table = StreamTable.open(path)
    for i in range(per_process):
        table.append(ticks([i], [f"w{w}"], [float(i)], [i]))


def test_concurrent_appends_from_processes_keep_keys_unique(tmp_path):
    # no shared lock between processes: the optimistic commit (no delta-rs retries,
    # re-check keys against the newer version) must keep the global key rule
    t = StreamTable.create(tmp_path / "t", TICKS, kind="keyed", key_columns=["qty"])
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=(str(t.path), w, 15)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sorted(t.to_arrow().column("qty").to_pylist()) == list(range(15))


# -- compaction and foreign tables ------------------------------------------------------


def test_compaction_commit_adds_no_rows_and_keeps_history(plain):
    from deltalake import DeltaTable

    for start in range(0, 30, 10):
        plain.append(ticks(range(start, start + 10), ["a"] * 10, [0.0] * 10, list(range(start, start + 10))))
    DeltaTable(str(plain.path)).optimize.compact()
    assert plain.version() == 4
    compaction = read_commit(plain.path, 4)
    assert compaction.rewrites and compaction.files == ()
    assert plain.read_version(4).num_rows == 0
    assert plain.read_version(2).column("qty").to_pylist() == list(range(10, 20))  # not vacuumed yet
    assert sorted(plain.to_arrow().column("qty").to_pylist()) == list(range(30))
    assert plain.append(ticks([1], ["b"], [1.0])) == 5


def test_open_a_delta_table_written_by_another_tool(tmp_path):
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "t"), pa.table({"a": pa.array([1, 2], pa.int64()), "b": ["x", "y"]}))
    t = StreamTable.open(tmp_path / "t")
    assert (t.kind, t.schema) == ("plain", Schema.parse({"a": "long", "b": "string"}))
    assert sorted(t.read_version(0).column("a").to_pylist()) == [1, 2]
    assert t.append(pa.table({"a": [3], "b": ["z"]})) == 1


def test_the_log_is_checkpointed_and_every_commit_stays_replayable(tmp_path):
    """An append has delta-rs write a log checkpoint every 100 commits (as its post-commit hook does), so opening a
    long-lived table stays fast; the commit files stay too (expired-log cleanup is off), so readers replay any
    version."""
    t = StreamTable.create(tmp_path / "t", TICKS)
    for i in range(101):
        t.append(ticks([i], ["a"], [float(i)]))
    log = tmp_path / "t" / "_delta_log"
    assert list(log.glob("*.checkpoint.parquet")) and (log / "_last_checkpoint").exists()
    again = StreamTable.open(tmp_path / "t")
    assert again.version() == 101 and again.read_version(1).column("px").to_pylist() == [0.0]
    assert again.to_arrow().num_rows == 101


def test_compaction_keeps_every_readers_replay_and_the_snapshot(tmp_path):
    t = StreamTable.create(tmp_path / "t", TICKS)
    for i in range(30):
        t.append(ticks([i, i], ["a", "b"], [float(i), -float(i)]))
    replay = [t.read_version(v) for v in range(1, t.version() + 1)]
    snapshot = t.to_arrow().sort_by([("time", "ascending"), ("sym", "ascending")])
    version = t.compact()
    assert version == 31 and read_commit(tmp_path / "t", version).rewrites  # stream readers skip it
    assert [t.read_version(v) for v in range(1, 31)] == replay  # older versions still replay exactly
    assert t.to_arrow().sort_by([("time", "ascending"), ("sym", "ascending")]).equals(snapshot)
    assert len(t.commit(version).files) == 0 and t.compact() is None  # nothing left to merge
    t.append(ticks([99], ["c"], [1.0]))  # and appends go on
    assert t.read_version(32).num_rows == 1
    # a log checkpoint of the compacted snapshot, without the compacted files' tombstones: a snapshot reader
    # opens one small checkpoint (benchmarks/bench_compaction.py), a stream reader still replays every commit
    checkpoint = pq.read_table(tmp_path / "t" / "_delta_log" / f"{version:020d}.checkpoint.parquet")
    assert checkpoint.column("add").drop_null().to_pylist() != []
    assert "remove" not in checkpoint.column_names or checkpoint.column("remove").drop_null().to_pylist() == []
    assert [t.read_version(v) for v in range(1, 31)] == replay


def test_a_table_created_again_by_another_process_is_not_served_from_this_process_cache(tmp_path):
    """A worker process keeps a table's log loaded; its master may drop the table and create it anew."""
    import subprocess
    import sys

    path = tmp_path / "t"
    t = StreamTable.create(path, Schema.parse({"x": "long"}))
    for i in range(5):
        t.append(pa.table({"x": [i]}))
    assert StreamTable.open(path).version() == 5  # loaded and cached in this process
    recreate = ("import shutil, sys; from headwater.storage.stream_table import StreamTable; "
                "from headwater.types import Schema; shutil.rmtree(sys.argv[1]); "
                "StreamTable.create(sys.argv[1], Schema.parse({'x': 'long'}))")
    subprocess.run([sys.executable, "-c", recreate, str(path)], check=True, timeout=120)
    again = StreamTable.open(path)
    assert again.version() == 0 and again.append(pa.table({"x": [42]})) == 1
    assert again.read_version(1).column("x").to_pylist() == [42] and again.row_count() == 1
