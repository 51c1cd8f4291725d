"""Spark Python data source ``headwater_stream_table``: stream tables as Spark sources.

Streaming offsets are table versions (``{"version": v}``); a micro-batch over
``(start, end]`` reads the rows each of those commits added, in append order, so
a replayed batch reads exactly the same rows. Every row carries ``_hw_seq`` =
``(version << 32) | row index within that version``, a total order of all rows
that is the same on every replay.

Spark asks a data source for one schema whether the read is a batch or a stream,
so ``_hw_seq`` is in both. A batch read computes it from the same commits, unless
the table was compacted (then batch rows have a null ``_hw_seq``). Pass an
explicit schema (``.schema(...)``) with only some columns to leave it out.

Options: ``path`` (required); ``startingVersion`` (a version number or
``latest``; the first micro-batch reads commits after it, default 0 = all rows);
``maxRowsPerTrigger``, ``maxFilesPerTrigger``, ``maxBytesPerTrigger`` (admission
control, at least one commit per micro-batch); ``minRowsPerPartition`` (default
100000: consecutive small commits are packed into one Spark partition).

Example (needs a SparkSession ``spark``)::

    register(spark)
    stream = spark.readStream.format("headwater_stream_table").option("path", path).load()
    snapshot = spark.read.format("headwater_stream_table").option("path", path).load()
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
)

from headwater.errors import GraphDefinitionError
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_files import iter_file_batches
from headwater.storage.table_log import Commit, DataFile, earliest_version, latest_version, read_commit
from headwater.types import array_of

try:  # Spark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxBytes,
        ReadMaxFiles,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older Spark: plain latestOffset(), no AvailableNow
    ReadLimit = ReadAllAvailable = ReadMaxRows = ReadMaxFiles = ReadMaxBytes = ReadMinRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        """Placeholder so the reader class can be declared on Spark < 4.2."""


SOURCE_NAME = "headwater_stream_table"
SEQ_COLUMN = "_hw_seq"
SEQ_SHIFT = 32
_ROW_MASK = (1 << SEQ_SHIFT) - 1

_SCALAR_SPARK_TYPES: dict[str, DataType] = {
    "bool": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "timestamp": TimestampNTZType(),
    "date": DateType(),
}
SPARK_TYPES: dict[str, DataType] = {**_SCALAR_SPARK_TYPES,
                                    **{array_of(n): ArrayType(t) for n, t in _SCALAR_SPARK_TYPES.items()}}

_DEFAULT_MIN_ROWS_PER_PARTITION = 100_000


def seq_of(version: int, row: int) -> int:
    """Return the ``_hw_seq`` of row ``row`` (0-based) of commit ``version``."""
    return (version << SEQ_SHIFT) | row


def split_seq(seq: int) -> tuple[int, int]:
    """Return ``(version, row)`` of a ``_hw_seq`` value."""
    return seq >> SEQ_SHIFT, seq & _ROW_MASK


def spark_schema(table: StreamTable, *, with_seq: bool = True) -> StructType:
    """Return the Spark schema of ``table`` (plus ``_hw_seq`` unless ``with_seq`` is False)."""
    fields = [StructField(n, SPARK_TYPES[t], True) for n, t in table.schema]
    if with_seq:
        fields.append(StructField(SEQ_COLUMN, LongType(), True))
    return StructType(fields)


class StreamTablePartition(InputPartition):
    """Commits read by one Spark task, in version order (version -1: unknown, null ``_hw_seq``)."""

    def __init__(self, commits: tuple[Commit, ...]) -> None:
        super().__init__(commits)

    @property
    def commits(self) -> tuple[Commit, ...]:
        return self.value


def _option(options: Mapping[str, str], name: str) -> str | None:
    value = options.get(name)
    if value is None:  # be case-insensitive even if handed a plain dict
        value = next((v for k, v in options.items() if k.lower() == name.lower()), None)
    return value


def _int_option(options: Mapping[str, str], name: str, *, minimum: int) -> int | None:
    raw = _option(options, name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise GraphDefinitionError(f"{SOURCE_NAME}: option {name}={raw!r} must be an integer >= {minimum}")
    return value


class _ReaderBase:
    """What the batch and the stream reader share: output layout and reading commits."""

    def __init__(self, path: str, table: StreamTable, schema: StructType, options: Mapping[str, str]) -> None:
        self._path = path
        self._name = table.name
        self._out_names = [f.name for f in schema.fields]
        table_types = table.schema.to_dict()
        unknown = [n for n in self._out_names if n != SEQ_COLUMN and n not in table_types]
        if unknown:
            raise GraphDefinitionError(
                f"{SOURCE_NAME} {table.name!r}: requested column(s) {unknown} are not in the table; "
                f"expected some of {[*table.schema.names, SEQ_COLUMN]}"
            )
        wanted = [n for n in table.schema.names if n in self._out_names]
        self._read_schema = pa.schema([table.schema.to_arrow().field(n) for n in wanted])
        self._min_rows = (
            _int_option(options, "minRowsPerPartition", minimum=1) or _DEFAULT_MIN_ROWS_PER_PARTITION
        )

    def _pack(self, commits: Sequence[Commit]) -> list[StreamTablePartition]:
        """Group consecutive commits so that each partition holds about ``minRowsPerPartition`` rows."""
        parts: list[StreamTablePartition] = []
        group: list[Commit] = []
        rows = 0
        for commit in commits:
            if not commit.files:
                continue
            group.append(commit)
            rows += commit.num_rows()
            if rows >= self._min_rows:
                parts.append(StreamTablePartition(tuple(group)))
                group, rows = [], 0
        if group:
            parts.append(StreamTablePartition(tuple(group)))
        return parts

    def _read(self, partition: StreamTablePartition) -> Iterator[pa.RecordBatch]:
        read_schema = self._read_schema
        out_names = self._out_names
        for commit in partition.commits:
            base = seq_of(commit.version, 0) if commit.version >= 0 else None
            offset = 0
            for file in commit.files:
                for batch in iter_file_batches(file, read_schema):
                    n = batch.num_rows
                    if n == 0:
                        continue
                    if offset + n > _ROW_MASK + 1:
                        raise OverflowError(
                            f"{SOURCE_NAME} {self._name!r}: commit {commit.version} "
                            f"has more than {_ROW_MASK + 1} rows"
                        )
                    if base is None:
                        seq = pa.nulls(n, pa.int64())
                    else:
                        seq = pa.array(np.arange(base + offset, base + offset + n, dtype=np.int64))
                    offset += n
                    arrays = [seq if name == SEQ_COLUMN else batch.column(name) for name in out_names]
                    yield pa.RecordBatch.from_arrays(arrays, names=out_names)


class StreamTableReader(_ReaderBase, DataSourceReader):
    """Batch read of the current snapshot."""

    def partitions(self) -> Sequence[InputPartition]:
        last = latest_version(self._path)
        first = earliest_version(self._path)
        commits = [read_commit(self._path, v) for v in range(max(first, 1), last + 1)]
        if first > 0 or any(c.rewrites for c in commits):
            # Compacted, or older commits removed by retention: the snapshot's files no longer map to
            # the commits that appended the rows, so _hw_seq is unknown (null).
            from deltalake import DeltaTable

            files = tuple(
                DataFile(uri.removeprefix("file://"), 0, None)
                for uri in DeltaTable(self._path, version=last).file_uris()
            )
            return self._pack([Commit(-1, (f,)) for f in files]) or [StreamTablePartition(())]
        return self._pack(commits) or [StreamTablePartition(())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, StreamTablePartition)
        return self._read(partition)


class StreamTableStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader: offsets are table versions, partitions are commits.

    The planning methods run in one long-lived driver process, so the reader keeps
    the latest known version and the parsed commits it still needs between calls.
    """

    def __init__(self, path: str, table: StreamTable, schema: StructType, options: Mapping[str, str]) -> None:
        super().__init__(path, table, schema, options)
        start = _option(options, "startingVersion")
        if start is None:
            self._start = 0
        elif start.strip().lower() == "latest":
            self._start = table.version()
        else:
            self._start = _int_option(options, "startingVersion", minimum=0) or 0
        self._max_rows = _int_option(options, "maxRowsPerTrigger", minimum=1)
        self._max_files = _int_option(options, "maxFilesPerTrigger", minimum=1)
        self._max_bytes = _int_option(options, "maxBytesPerTrigger", minimum=1)
        self._known = 0
        self._target: int | None = None
        self._commits: dict[int, Commit] = {}

    def __getstate__(self) -> dict[str, Any]:
        # read() runs on a pickled copy: ship no driver-side cache
        state = self.__dict__.copy()
        state["_commits"] = {}
        return state

    def _latest(self) -> int:
        self._known = latest_version(self._path, self._known)
        return self._known if self._target is None else min(self._known, self._target)

    def _commit(self, version: int) -> Commit:
        commit = self._commits.get(version)
        if commit is None:
            commit = self._commits[version] = read_commit(self._path, version)
        return commit

    def initialOffset(self) -> dict:
        return {"version": self._start}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        latest = self._latest()
        if start is None or limit is None or ReadLimit is None or isinstance(limit, ReadAllAvailable):
            return {"version": latest}
        begin = int(start["version"])
        if latest <= begin:
            return {"version": begin}
        if isinstance(limit, ReadMinRows):
            if self._target is not None:  # AvailableNow: never wait for more rows
                return {"version": latest}
            available = sum(self._commit(v).num_rows() for v in range(begin + 1, latest + 1))
            return {"version": latest if available >= limit.min_rows else begin}
        measure: Callable[[Commit], int]
        if isinstance(limit, ReadMaxRows):
            cap, measure = limit.max_rows, Commit.num_rows
        elif isinstance(limit, ReadMaxFiles):
            cap, measure = limit.max_files, lambda c: len(c.files)
        elif isinstance(limit, ReadMaxBytes):
            cap, measure = limit.max_bytes, Commit.num_bytes
        else:  # an unknown limit: do not hold data back
            return {"version": latest}
        end, used = begin, 0
        for v in range(begin + 1, latest + 1):
            size = measure(self._commit(v))
            if end > begin and used + size > cap:
                break
            end, used = v, used + size
        return {"version": end}

    def getDefaultReadLimit(self) -> Any:
        if ReadLimit is None:  # pragma: no cover
            return None
        if self._max_rows is not None:
            return ReadMaxRows(self._max_rows)
        if self._max_files is not None:
            return ReadMaxFiles(self._max_files)
        if self._max_bytes is not None:
            return ReadMaxBytes(self._max_bytes)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict:
        return {"version": latest_version(self._path, self._known)}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = latest_version(self._path, self._known)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = int(start["version"]), int(end["version"])
        return self._pack([self._commit(v) for v in range(begin + 1, stop + 1)])

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        assert isinstance(partition, StreamTablePartition)
        return self._read(partition)

    def commit(self, end: dict) -> None:
        done = int(end["version"])
        for v in [v for v in self._commits if v <= done]:
            del self._commits[v]


class StreamTableDataSource(DataSource):
    """Spark data source ``headwater_stream_table`` over a :class:`StreamTable` (option ``path``)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        path = _option(options, "path")
        if not path:
            raise GraphDefinitionError(
                f"{SOURCE_NAME}: option 'path' is required, e.g. "
                f'spark.read.format("{SOURCE_NAME}").option("path", "/data/tables/trades").load()'
            )
        self._path = os.path.abspath(path)

    def _table(self) -> StreamTable:
        return StreamTable.open(self._path)

    def schema(self) -> StructType:
        return spark_schema(self._table())

    def reader(self, schema: StructType) -> DataSourceReader:
        return StreamTableReader(self._path, self._table(), schema, self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamTableStreamReader(self._path, self._table(), schema, self.options)


def register(spark: Any) -> None:
    """Register the ``headwater_stream_table`` data source on ``spark`` (idempotent).

    Example (needs a SparkSession)::

        register(spark)
        spark.read.format("headwater_stream_table").option("path", "/tables/trades").load()
    """
    spark.dataSource.register(StreamTableDataSource)
