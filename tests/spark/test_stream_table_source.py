"""The headwater_stream_table Spark data source: batch and streaming reads of stream tables."""

from __future__ import annotations

import threading
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from tests.support.processes import parents

from headwater.storage.stream_table import StreamTable
from headwater.types import Schema

pytestmark = pytest.mark.spark

SCHEMA = Schema.parse({"time": "timestamp", "sym": "string", "px": "double", "n": "long"})
FORMAT = "headwater_stream_table"
TIMEOUT = 120  # seconds; generous for a loaded 2-core machine


@pytest.fixture(scope="module")
def source(spark):
    from headwater.spark import stream_table_source

    stream_table_source.register(spark)
    stream_table_source.register(spark)  # idempotent
    return stream_table_source


def rows(start: int, count: int) -> pa.Table:
    """``count`` rows numbered from ``start``; ``n`` identifies a row."""
    ns = list(range(start, start + count))
    return pa.table(
        {
            "time": pa.array([datetime(2024, 1, 1, 9, 30) for _ in ns], pa.timestamp("us")),
            "sym": pa.array([f"s{n % 3}" for n in ns]),
            "px": pa.array([n / 4 for n in ns], pa.float64()),
            "n": pa.array(ns, pa.int64()),
        }
    )


class Collector:
    """A foreachBatch sink that keeps every micro-batch in memory (the function runs on the driver)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, pa.Table]] = []
        self._lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        table = df.toArrow()
        with self._lock:
            self.batches.append((batch_id, table))

    def table(self) -> pa.Table:
        with self._lock:
            tables = [t for _, t in self.batches if t.num_rows]
        return pa.concat_tables(tables) if tables else pa.table({})

    def ns(self) -> list[int]:
        t = self.table()
        return t.column("n").to_pylist() if t.num_rows else []


def start_query(spark, table: StreamTable, collector: Collector, checkpoint, *, options=None, **trigger):
    reader = spark.readStream.format(FORMAT).option("path", str(table.path))
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    writer = reader.load().writeStream.foreachBatch(collector).option("checkpointLocation", str(checkpoint))
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def test_schema_has_seq_column_and_ntz_timestamps(spark, source, tmp_path):
    from pyspark.sql.types import LongType, TimestampNTZType

    table = StreamTable.create(tmp_path / "t", SCHEMA)
    df = spark.readStream.format(FORMAT).option("path", str(table.path)).load()
    assert df.columns == ["time", "sym", "px", "n", "_hw_seq"]
    assert df.schema["time"].dataType == TimestampNTZType()
    assert df.schema["_hw_seq"].dataType == LongType()


def test_batch_read_equals_snapshot(spark, source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    table.append(rows(0, 5))
    table.append(rows(5, 3))
    got = spark.read.format(FORMAT).option("path", str(table.path)).load().toArrow()
    expected = table.to_arrow().sort_by("n")
    assert got.drop(["_hw_seq"]).sort_by("n").equals(expected)
    seqs = got.sort_by("n").column("_hw_seq").to_pylist()
    assert seqs == [source.seq_of(1, i) for i in range(5)] + [source.seq_of(2, i) for i in range(3)]


def test_batch_read_of_empty_table_and_sql(spark, source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    df = spark.read.format(FORMAT).load(str(table.path))
    assert df.count() == 0
    table.append(rows(0, 4))
    spark.read.format(FORMAT).load(str(table.path)).createOrReplaceTempView("hw_ticks")
    assert spark.sql("SELECT sum(n) AS s FROM hw_ticks").collect()[0]["s"] == 6


def test_batch_read_with_user_schema_leaves_out_seq(spark, source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    table.append(rows(0, 3))
    df = spark.read.format(FORMAT).schema("n BIGINT, sym STRING").load(str(table.path))
    assert sorted(map(tuple, df.collect())) == [(0, "s0"), (1, "s1"), (2, "s2")]


def test_timestamps_round_trip_exactly(spark, source, tmp_path):
    times = [
        datetime(1970, 1, 1),
        datetime(1969, 12, 31, 23, 59, 59, 999_999),
        datetime(2024, 3, 31, 2, 30, 0, 123_456),  # a DST gap in Europe: must not move
        datetime(9999, 12, 31, 23, 59, 59, 999_999),
    ]
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    data = pa.table(
        {
            "time": pa.array(times, pa.timestamp("us")),
            "sym": ["a"] * 4,
            "px": [0.0] * 4,
            "n": list(range(4)),
        }
    )
    table.append(data)
    df = spark.read.format(FORMAT).load(str(table.path)).orderBy("n")
    assert [r["time"] for r in df.collect()] == times
    assert df.toArrow().column("time").to_pylist() == times
    strings = [r[0] for r in df.selectExpr("CAST(time AS STRING)").collect()]
    assert strings[2] == "2024-03-31 02:30:00.123456"

    collector = Collector()
    query = start_query(spark, table, collector, tmp_path / "ckpt")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert collector.table().sort_by("n").column("time").to_pylist() == times


def test_stream_reads_every_row_once_in_append_order(spark, source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    for start, count in ((0, 10), (10, 15), (25, 5)):  # versions 1, 2, 3
        table.append(rows(start, count))
    collector = Collector()
    query = start_query(spark, table, collector, tmp_path / "ckpt")
    try:
        query.processAllAvailable()
        got = collector.table().sort_by("_hw_seq")
        assert got.column("n").to_pylist() == list(range(30))
        versions = [source.split_seq(s)[0] for s in got.column("_hw_seq").to_pylist()]
        assert versions == [1] * 10 + [2] * 15 + [3] * 5

        # rows appended while the query runs are picked up
        table.append(rows(30, 7))
        table.append(rows(37, 0))  # nothing committed
        table.append(rows(37, 3))
        query.processAllAvailable()
        assert sorted(collector.ns()) == list(range(40))
        assert len(collector.ns()) == 40
    finally:
        query.stop()
    assert query.exception() is None


def test_restart_on_same_checkpoint_loses_and_repeats_nothing(spark, source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    checkpoint = tmp_path / "ckpt"
    collector = Collector()
    table.append(rows(0, 10))
    query = start_query(spark, table, collector, checkpoint)
    try:
        query.processAllAvailable()
        table.append(rows(10, 10))
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(collector.ns()) == list(range(20))

    table.append(rows(20, 5))  # while no query runs
    table.append(rows(25, 5))
    query = start_query(spark, table, collector, checkpoint)
    try:
        query.processAllAvailable()
        table.append(rows(30, 5))
        query.processAllAvailable()
    finally:
        query.stop()
    ns = collector.ns()
    assert len(ns) == 35 and sorted(ns) == list(range(35))
    seqs = collector.table().column("_hw_seq").to_pylist()
    assert len(set(seqs)) == 35


def test_trigger_available_now_stops_after_consuming_everything(spark, source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    for start in range(0, 50, 10):
        table.append(rows(start, 10))
    collector = Collector()
    query = start_query(
        spark, table, collector, tmp_path / "ckpt", options={"maxRowsPerTrigger": "20"}, availableNow=True
    )
    assert query.awaitTermination(TIMEOUT), "availableNow query did not finish"
    assert query.exception() is None
    assert sorted(collector.ns()) == list(range(50))
    sizes = [t.num_rows for _, t in collector.batches if t.num_rows]
    assert sizes == [20, 20, 10]  # admission control: whole versions, at most 20 rows

    table.append(rows(50, 4))  # a second availableNow run continues from the checkpoint
    query = start_query(spark, table, collector, tmp_path / "ckpt", availableNow=True)
    assert query.awaitTermination(TIMEOUT)
    assert sorted(collector.ns()) == list(range(54))


def test_starting_version_latest_skips_existing_rows(spark, source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    table.append(rows(0, 5))
    collector = Collector()
    query = start_query(spark, table, collector, tmp_path / "ckpt", options={"startingVersion": "latest"})
    try:
        query.processAllAvailable()
        table.append(rows(5, 5))
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(collector.ns()) == list(range(5, 10))


def test_missing_table_is_a_clear_error(spark, source, tmp_path):
    with pytest.raises(Exception, match="no stream table at"):
        spark.read.format(FORMAT).option("path", str(tmp_path / "nope")).load()
    with pytest.raises(Exception, match="option 'path' is required"):
        spark.read.format(FORMAT).load()


# -- the reader's planning, called directly (deterministic, no query) ---------------------


def test_partitions_are_deterministic_and_pack_small_versions(source, tmp_path):
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    for start in range(0, 60, 10):
        table.append(rows(start, 10))
    ds = source.StreamTableDataSource({"path": str(table.path), "minRowsPerPartition": "25"})
    reader = ds.streamReader(ds.schema())
    first = reader.partitions({"version": 0}, {"version": 6})
    assert [[c.version for c in p.commits] for p in first] == [[1, 2, 3], [4, 5, 6]]
    again = ds.streamReader(ds.schema()).partitions({"version": 0}, {"version": 6})
    assert [p.commits for p in again] == [p.commits for p in first]
    assert reader.partitions({"version": 6}, {"version": 6}) == []
    out = pa.Table.from_batches([b for p in first for b in reader.read(p)])
    assert out.column("n").to_pylist() == list(range(60))


def test_latest_offset_respects_read_limits(source, tmp_path):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles, ReadMaxRows, ReadMinRows

    table = StreamTable.create(tmp_path / "t", SCHEMA)
    for count in (10, 10, 30, 5):
        table.append(rows(0, count))
    ds = source.StreamTableDataSource({"path": str(table.path)})
    reader = ds.streamReader(ds.schema())
    start = reader.initialOffset()
    assert start == {"version": 0}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"version": 4}
    assert reader.latestOffset(start, ReadMaxRows(25)) == {"version": 2}
    assert reader.latestOffset({"version": 2}, ReadMaxRows(25)) == {"version": 3}  # one version at least
    assert reader.latestOffset(start, ReadMaxFiles(3)) == {"version": 3}
    assert reader.latestOffset({"version": 3}, ReadMinRows(10)) == {"version": 3}  # wait for more
    assert reader.latestOffset({"version": 4}, ReadAllAvailable()) == {"version": 4}
    reader.prepareForTriggerAvailableNow()
    table.append(rows(0, 1))
    assert reader.latestOffset(start, ReadAllAvailable()) == {"version": 4}  # AvailableNow target


def test_batch_read_of_compacted_table_has_null_seq(source, tmp_path):
    from deltalake import DeltaTable

    table = StreamTable.create(tmp_path / "t", SCHEMA)
    for start in range(0, 30, 10):
        table.append(rows(start, 10))
    DeltaTable(str(table.path)).optimize.compact()
    ds = source.StreamTableDataSource({"path": str(table.path)})
    reader = ds.reader(ds.schema())
    out = pa.Table.from_batches([b for p in reader.partitions() for b in reader.read(p)])
    assert sorted(out.column("n").to_pylist()) == list(range(30))
    assert out.column("_hw_seq").null_count == 30
    # the stream still replays the original commits and skips the compaction
    stream = ds.streamReader(ds.schema())
    parts = stream.partitions({"version": 0}, {"version": 4})
    got = pa.Table.from_batches([b for p in parts for b in stream.read(p)])
    assert got.column("n").to_pylist() == list(range(30))


def test_sql_reads_and_stream_tasks_share_one_python_daemon(spark, source, tmp_path):
    """Each daemon loads every kernel as it starts (headwater.spark.daemon): SQL's Python workers must not need a
    second one (spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled, headwater.spark.session)."""
    table = StreamTable.create(tmp_path / "t", SCHEMA)
    table.append(rows(0, 5))
    assert spark.read.format(FORMAT).option("path", str(table.path)).load().count() == 5  # in a Python worker
    assert spark.sparkContext.parallelize(range(2), 2).map(lambda x: x + 1).sum() == 3  # as stream tasks run
    jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    daemons = []
    for pid in (child for child, parent in parents().items() if parent == jvm):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # one that just ended
        if b"headwater.spark.daemon" in command:
            daemons.append(pid)
    assert len(daemons) == 1, daemons
