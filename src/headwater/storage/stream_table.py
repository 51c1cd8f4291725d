"""Stream tables stored as Delta Lake tables through delta-rs (no JVM).

A stream table is an append-only Delta table. Every append is one commit that
adds one Parquet file whose rows keep the order they were given in, so a table
version is a stream offset and ``(version, row index)`` is a total order of all
rows ever appended. Keyed tables de-duplicate globally:

- ``plain``: every row is appended.
- ``keyed``: the first row ever appended for a key wins; later rows with that
  key are dropped (within one append, the first occurrence wins).
- ``latest_keyed``: a row is appended only if its ``time_column`` is greater
  than the newest time already stored for its key; within one append only the
  newest row per key is kept (the first of equal newest times). Rows whose time
  is null are never appended.

>>> import tempfile, pyarrow as pa
>>> from headwater.types import Schema
>>> root = tempfile.mkdtemp()
>>> t = StreamTable.create(f"{root}/quotes", Schema.parse({"sym": "string", "px": "double"}),
...                        kind="keyed", key_columns=["sym"])
>>> t.append(pa.table({"sym": ["a", "b", "a"], "px": [1.0, 2.0, 3.0]}))
1
>>> t.append(pa.table({"sym": ["a", "c"], "px": [4.0, 5.0]}))
2
>>> t.read_version(2).to_pydict()
{'sym': ['c'], 'px': [5.0]}
>>> StreamTable.open(f"{root}/quotes").key_columns
('sym',)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from headwater.errors import (
    CatalogError,
    ExecutionError,
    GraphDefinitionError,
    NameTakenError,
    RetentionError,
    SchemaError,
    SequenceError,
    clip,
)
from headwater.faults import fault_point
from headwater.storage.buckets import Bucketing, file_buckets, read_in_order, write_table
from headwater.storage.disk_space import DiskSpace, is_disk_full, storage_full_error
from headwater.storage.retention import (
    Retention,
    expired_log_files,
    first_kept_version,
    last_checkpoint,
    log_versions,
)
from headwater.types import ARROW_TYPES, NUMERIC, TEMPORAL, Schema, TableKind, canonical_type, element_of

if TYPE_CHECKING:
    import pandas as pd
    from deltalake import DeltaTable

KINDS = tuple(TableKind)

# Delta table configuration keys. The delta.* ones make the table append-only
# (a stream offset must never lose rows) and keep every commit file, because a
# stopped query resumes from the commit after its checkpointed version.
_CONF_FORMAT = "headwater.formatVersion"
_CONF_KIND = "headwater.kind"
_CONF_KEYS = "headwater.keyColumns"
_CONF_TIME = "headwater.timeColumn"
_CONF_SCHEMA = "headwater.schema"
_CONF_RETENTION = "headwater.retention"
_FORMAT_VERSION = "1"

_MAX_COMMIT_ATTEMPTS = 50

_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())
_SMALL_INTS = (pa.int8(), pa.int16(), pa.uint8(), pa.uint16())


def _cast_allowed(got: pa.DataType, expected: str) -> bool:
    """Return True if a column of Arrow type ``got`` may be cast to Headwater type ``expected``.

    Only widening casts are allowed by type; the cast itself still runs in safe mode,
    so values that would change (an int64 above 2**53 into double, nanoseconds into
    microseconds) are refused there.
    """
    target = ARROW_TYPES[expected]
    if got == target or pa.types.is_null(got):
        return True
    element = element_of(expected)
    if element is not None:  # an array vector: a list (any field name) whose values fit the element type
        return (pa.types.is_list(got) or pa.types.is_large_list(got)) and _cast_allowed(got.value_type, element)
    if expected == "long":
        return got in _INTS
    if expected == "int":
        return got in _SMALL_INTS or got == pa.int32()
    if expected == "double":
        return got in _INTS or pa.types.is_floating(got)
    if expected == "float":
        return got in _SMALL_INTS or got == pa.float16()
    if expected == "string":
        return (
            pa.types.is_large_string(got)
            or pa.types.is_string_view(got)
            or (
                pa.types.is_dictionary(got)
                and (pa.types.is_string(got.value_type) or pa.types.is_large_string(got.value_type))
            )
        )
    if expected == "timestamp":
        return pa.types.is_timestamp(got) and got.tz is None
    if expected == "date":
        return pa.types.is_date(got)
    return False


def _type_hint(got: pa.DataType, expected: str) -> str:
    if expected == "timestamp" and pa.types.is_timestamp(got) and got.tz is not None:
        return (
            "timestamps are naive (no time zone): convert first, "
            "e.g. series.dt.tz_convert('UTC').dt.tz_localize(None)"
        )
    return f"cast the column to {ARROW_TYPES[expected]} before appending"


@dataclass(frozen=True)
class DataFile:
    """One Parquet file added by a commit."""

    path: str  # absolute local path
    size: int
    num_rows: int | None  # from the commit's stats; None when the writer recorded none

    def rows(self) -> int:
        """Return the row count, reading the Parquet footer if the log has no stats."""
        if self.num_rows is not None:
            return self.num_rows
        return pq.ParquetFile(self.path).metadata.num_rows


@dataclass(frozen=True)
class Commit:
    """The data files a commit added, in log order.

    ``rewrites`` is True when the commit also removed files or re-added existing
    rows (``dataChange: false``, as ``optimize`` does); such a commit adds no new
    rows to the stream.
    """

    version: int
    files: tuple[DataFile, ...]
    rewrites: bool = False

    def num_rows(self) -> int:
        return sum(f.rows() for f in self.files)

    def num_bytes(self) -> int:
        return sum(f.size for f in self.files)


def _log_dir(path: str | Path) -> str:
    return os.path.join(os.fspath(path), "_delta_log")


def _commit_file(path: str | Path, version: int) -> str:
    return os.path.join(_log_dir(path), f"{version:020d}.json")


def latest_version(path: str | Path, known: int = 0) -> int:
    """Return the newest committed version of the table at ``path``, probing from ``known``.

    Commit files appear atomically, so checking for the next one is enough; this is
    a few ``stat`` calls when ``known`` is recent. When ``known`` is older than the
    log's first kept version (retention removed it), the log directory is listed.
    """
    v = known
    if not os.path.exists(_commit_file(path, v + 1)) and not os.path.exists(_commit_file(path, v)):
        versions = log_versions(_log_dir(path))
        if versions and versions[-1] > v:
            v = versions[-1]
    while os.path.exists(_commit_file(path, v + 1)):
        v += 1
    return v


def _free_bytes(path: str | Path) -> int:
    return DiskSpace().free(path)


def earliest_version(path: str | Path) -> int:
    """Return the oldest version still in the table's log: 0 unless retention removed older ones."""
    versions = log_versions(_log_dir(path))
    return versions[0] if versions else 0


def _data_file_path(table_path: str, add_path: str) -> str:
    if "://" in add_path:
        parsed = urlparse(add_path)
        if parsed.scheme != "file":
            raise ExecutionError(
                f"stream table {table_path}: data file {clip(add_path)} is not on a local "
                "filesystem; only local paths are supported"
            )
        return unquote(parsed.path)
    return os.path.join(table_path, unquote(add_path))


STAMP_KEY = "headwater.time"  # commitInfo: the time a writer gave its commit, which commit_time reports


def _stamp(at: float | None) -> dict[str, str] | None:
    return None if at is None else {STAMP_KEY: repr(float(at))}


def commit_time(path: str | Path, version: int) -> float:
    """When commit ``version`` was made (seconds since the epoch), from its ``commitInfo``; a fixed fact
    of the log, so every replay of a micro-batch sees the same time."""
    file = _commit_file(path, version)
    with open(file, encoding="utf-8") as f:
        for line in f:
            if '"commitInfo"' in line:
                info = json.loads(line)["commitInfo"]
                if info.get(STAMP_KEY) is not None:  # a time the writer gave (run_local's clock)
                    return float(info[STAMP_KEY])
                stamp = info.get("timestamp")
                if stamp is not None:
                    return float(stamp) / 1000.0
    return os.stat(file).st_mtime  # a writer that recorded no timestamp: the commit file's own time


def read_commit(path: str | Path, version: int) -> Commit:
    """Parse ``_delta_log/<version>.json`` and return the data files it added, in order."""
    table_path = os.fspath(path)
    try:
        with open(_commit_file(table_path, version), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        first = earliest_version(table_path)
        if 0 <= version < first:
            raise RetentionError(
                f"stream table {os.path.basename(table_path)}: version {version} is no longer kept; the table's "
                f"retention removed the versions before {first}. A reader can resume from version {first}; a graph "
                "that fell this far behind must be dropped and submitted again, or the table keep more "
                "(session.set_stream_table_retention)"
            ) from None
        raise CatalogError(
            f"stream table {table_path}: version {version} is not in the table's log "
            f"(latest is {latest_version(table_path) if os.path.isdir(_log_dir(table_path)) else 'none'}); "
            "it was never committed or its log file was removed"
        ) from None
    files: list[DataFile] = []
    rewrites = False
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        if "remove" in action:
            rewrites = True
        add = action.get("add")
        if add is None:
            continue
        if not add.get("dataChange", True):
            rewrites = True
            continue
        num_rows = None
        if add.get("stats"):
            num_rows = json.loads(add["stats"]).get("numRecords")
        files.append(DataFile(_data_file_path(table_path, add["path"]), int(add.get("size", 0)), num_rows))
    return Commit(version, tuple(files), rewrites)


def rows_added(path: str | Path, start: int, end: int) -> int:
    """How many rows the versions ``(start, end]`` added (from their log entries, no data file read)."""
    return sum(read_commit(path, v).num_rows() for v in range(start + 1, end + 1))


def find_transaction(path: str | Path, app_id: str, txn_version: int, *, latest: int | None = None) -> int | None:
    """Return the table version whose commit recorded transaction ``(app_id, txn_version)``, or None.

    Scans ``_delta_log/<v>.json`` backwards from ``latest`` (default: the newest version). An
    application's transaction versions only grow along the log, so the scan stops at the
    first commit of ``app_id`` with an older transaction version: a retry of a recent append
    reads only the commits made since.
    """
    table_path = os.fspath(path)
    v = latest_version(table_path) if latest is None else latest
    while v > 0:
        try:
            with open(_commit_file(table_path, v), encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:  # a log cleaned up below this point: nothing older to find
            return None
        for line in lines:
            if '"txn"' not in line:  # cheap pre-filter; add actions are long
                continue
            txn = json.loads(line).get("txn")
            if txn is None or txn.get("appId") != app_id:
                continue
            if int(txn["version"]) == txn_version:
                return v
            if int(txn["version"]) < txn_version:
                return None
        v -= 1
    return None


@dataclass(frozen=True)
class Expiry:
    """What :meth:`StreamTable.expire` removed: versions before ``first_kept``, and data files."""

    first_kept: int
    versions: int
    files: int
    bytes: int


def _named_paths(table_path: str, version: int, kinds: tuple[str, ...] = ("add", "remove")) -> set[str]:
    """Absolute paths of the files commit ``version`` adds or removes (``kinds``), rewrites included."""
    paths: set[str] = set()
    with open(_commit_file(table_path, version), encoding="utf-8") as f:
        for line in f:
            if any(f'"{kind}"' in line for kind in kinds):
                action = json.loads(line)
                paths.update(os.path.normpath(_data_file_path(table_path, action[kind]["path"]))
                             for kind in kinds if kind in action)
    return paths


def referenced_files(path: str | Path) -> set[str] | None:
    """Return the absolute paths of every data file a commit of the log added and may still be read.

    None when the log has a gap: then the set would be incomplete and nothing may be concluded from a
    file's absence. After retention removed the oldest commits, their files still in the snapshot count.
    """
    table_path = os.fspath(path)
    names: set[str] = set()
    versions = log_versions(_log_dir(table_path))
    if not versions or versions != list(range(versions[0], versions[-1] + 1)):
        return None
    if versions[0] > 0:
        # retention removed the oldest commits and every file only they named; the files they named that
        # are still in use are in the snapshot
        from deltalake import DeltaTable

        names.update(os.path.normpath(_data_file_path(table_path, uri)) for uri in DeltaTable(table_path).file_uris())
    for v in versions:
        names.update(_named_paths(table_path, v))
    return names


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
        for name in os.listdir(_log_dir(table_path)):
            if name.startswith("_commit_") and ".json.tmp" in name:
                candidates.append(os.path.join(_log_dir(table_path), name))
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


# ---------------------------------------------------------------------------
# Per-path shared state: one writer lock per table in this process, the cached
# latest version, and the de-duplication index of keyed tables.


@dataclass
class _Index:
    version: int
    # keyed: key -> None (a set); latest_keyed: key -> newest stored time
    entries: dict[tuple[Any, ...], Any]


@dataclass
class _TableState:
    lock: threading.Lock = field(default_factory=threading.Lock)
    known_version: int = 0
    delta: DeltaTable | None = None
    index: _Index | None = None
    identity: str = ""  # of the table the cached state belongs to (_table_identity)

    def loaded(self, path: Path, name: str) -> DeltaTable:
        """The table's Delta log, loaded once per process and caught up; call with ``lock`` held.

        A table dropped and created again at the same path by another process (a worker's master) is another
        table: then everything cached for the old one is thrown away.
        """
        from deltalake import DeltaTable

        identity = _table_identity(path)
        if identity is None:
            raise CatalogError(f"stream table {clip(name)}: no stream table at {path} (deleted?)")
        if self.delta is None or identity != self.identity:
            self.delta, self.index, self.known_version, self.identity = DeltaTable(str(path)), None, 0, identity
        else:
            self.delta.update_incremental()
        return self.delta


_ID_FILE = "_headwater_table_id"  # written once at creation: which table lives at this path


def _table_identity(path: Path) -> str | None:
    """The id written when the table was created (its log directory's inode for a table older than that)."""
    try:
        with open(os.path.join(path, _ID_FILE), encoding="ascii") as f:
            return f.read().strip()
    except FileNotFoundError:
        pass
    try:
        return f"inode:{os.stat(_log_dir(path)).st_ino}"
    except FileNotFoundError:
        return None


_STATES: dict[str, _TableState] = {}
_STATES_LOCK = threading.Lock()


def _state_key(path: Path) -> str:
    return os.path.realpath(path)


def _state(path: Path) -> _TableState:
    key = _state_key(path)
    with _STATES_LOCK:
        st = _STATES.get(key)
        if st is None:
            st = _STATES[key] = _TableState()
        return st


def _forget_state(path: Path) -> None:
    with _STATES_LOCK:
        _STATES.pop(_state_key(path), None)


def _key_tuples(table: pa.Table, key_columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Hashable keys, one per row, with nulls as None whatever the column type."""
    cols = []
    for name in key_columns:
        col = table.column(name)
        if pa.types.is_timestamp(col.type) or pa.types.is_date(col.type):
            col = col.cast(pa.int64())
        cols.append(col.to_pylist())
    return list(zip(*cols, strict=True))


def _comparable_time(col: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_timestamp(col.type) or pa.types.is_date32(col.type):
        return col.cast(pa.int64())
    return col


class StreamTable:
    """A public or private stream table stored as a Delta table.

    Example:
        >>> import tempfile, pyarrow as pa
        >>> from headwater.types import Schema
        >>> t = StreamTable.create(tempfile.mkdtemp() + "/ticks",
        ...                        Schema.parse({"time": "timestamp", "px": "double"}))
        >>> t.append(pa.table({"time": pa.array([0], pa.timestamp("us")), "px": [1.5]}))
        1
        >>> t.version(), t.to_arrow().num_rows
        (1, 1)
    """

    def __init__(
        self,
        path: Path,
        schema: Schema,
        *,
        kind: str,
        key_columns: tuple[str, ...],
        time_column: str | None,
        name: str,
    ) -> None:
        # Use create() or open(); the constructor trusts its arguments.
        self.path = path
        self.schema = schema
        self.kind = kind
        self.key_columns = key_columns
        self.time_column = time_column
        self.name = name
        self._arrow_schema = schema.to_arrow()
        # How the table's parallel reader partitions it, if one is known: appends then write bucketed
        # files so that each of its tasks reads only its rows. Set by the master; None writes plainly.
        self.bucketing: Bucketing | None = None

    # -- lifecycle -----------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | Path,
        schema: Schema,
        *,
        kind: str = "plain",
        key_columns: Sequence[str] = (),
        time_column: str | None = None,
        name: str | None = None,
        retention: Retention | None = None,
    ) -> StreamTable:
        """Create an empty stream table at ``path`` (version 0) and return it.

        Args:
            path: Directory of the new table; it must not exist.
            schema: Column names and types.
            kind: ``"plain"``, ``"keyed"`` or ``"latest_keyed"``.
            key_columns: Key of a keyed or latest-keyed table.
            time_column: Column whose newest value wins in a latest-keyed table;
                optional (informational) for the other kinds.
            name: Name used in error messages; defaults to the directory name.
            retention: How far back the table stays replayable (:meth:`expire`); None keeps every version.
        """
        from deltalake import DeltaTable

        path = Path(path).absolute()
        name = name or path.name
        schema = Schema.parse(schema, where=f"stream table {clip(name)}")
        key_columns = (key_columns,) if isinstance(key_columns, str) else tuple(key_columns)
        cls._check_definition(name, schema, kind, key_columns, time_column)
        if path.exists():
            raise NameTakenError(
                f"stream table {clip(name)}: path {path} already exists; open it with "
                "StreamTable.open(path) or choose another path"
            )
        configuration = {
            "delta.appendOnly": "true",
            "delta.enableExpiredLogCleanup": "false",
            # Tombstones of compacted files serve only Delta's vacuum, which never runs on a stream table
            # (its replay reads the commit files, and the files they name stay). Expired at once, they
            # leave the next log checkpoint instead of making every reader load thousands of them.
            "delta.deletedFileRetentionDuration": "interval 0 seconds",
            _CONF_FORMAT: _FORMAT_VERSION,
            _CONF_KIND: kind,
            _CONF_KEYS: json.dumps(list(key_columns)),
            _CONF_SCHEMA: json.dumps([list(c) for c in schema.columns]),
        }
        if time_column is not None:
            configuration[_CONF_TIME] = time_column
        if retention is not None:
            configuration[_CONF_RETENTION] = retention.to_json()
        _forget_state(path)
        try:
            DeltaTable.create(
                str(path),
                schema.to_arrow(),
                mode="error",
                name=name,
                configuration=configuration,
                raise_if_key_not_exists=False,
            )
        except Exception as exc:
            if "exist" in str(exc).lower():
                raise NameTakenError(f"stream table {clip(name)}: path {path} already exists") from exc
            raise
        (path / _ID_FILE).write_text(uuid.uuid4().hex, encoding="ascii")
        return cls(path, schema, kind=kind, key_columns=key_columns, time_column=time_column, name=name)

    @staticmethod
    def _check_definition(
        name: str, schema: Schema, kind: str, key_columns: tuple[str, ...], time_column: str | None
    ) -> None:
        where = f"stream table {clip(name)}"
        if kind not in KINDS:
            raise GraphDefinitionError(f"{where}: unknown kind {clip(kind)}; expected one of {', '.join(KINDS)}")
        for col in (*key_columns, *([time_column] if time_column else [])):
            if col not in schema:
                raise SchemaError(
                    f"{where}: column {clip(col)} is not in the schema {schema}; "
                    f"expected one of {', '.join(schema.names)}"
                )
        if len(set(key_columns)) != len(key_columns):
            raise GraphDefinitionError(f"{where}: key_columns {list(key_columns)} repeat a column")
        if kind == "plain" and key_columns:
            raise GraphDefinitionError(
                f"{where}: a plain table has no key, got key_columns={list(key_columns)}; "
                "use kind='keyed' or kind='latest_keyed' to de-duplicate by key"
            )
        if kind != "plain" and not key_columns:
            raise GraphDefinitionError(f"{where}: kind={clip(kind)} needs key_columns, e.g. key_columns=['sym']")
        if kind == "latest_keyed":
            if time_column is None:
                raise GraphDefinitionError(
                    f"{where}: kind='latest_keyed' needs time_column (the newest value per key wins)"
                )
            if schema[time_column] not in NUMERIC | TEMPORAL:
                raise SchemaError(
                    f"{where}: time_column {clip(time_column)} has type {schema[time_column]}; expected a "
                    "timestamp, date or numeric column"
                )
            if time_column in key_columns:
                raise GraphDefinitionError(f"{where}: time_column {clip(time_column)} cannot be a key column")

    @classmethod
    def open(cls, path: str | Path) -> StreamTable:
        """Open the stream table at ``path``; raise CatalogError if there is none."""
        from deltalake import DeltaTable

        path = Path(path).absolute()
        if not path.is_dir() or not DeltaTable.is_deltatable(str(path)):
            raise CatalogError(
                f"stream table {clip(path.name)}: no stream table at {path}; create it with "
                "StreamTable.create(path, schema)"
            )
        st = _state(path)
        with st.lock:  # the process's loaded log, caught up (loading a log anew costs ~15 ms per 100 commits)
            dt = st.loaded(path, path.name)
            meta = dt.metadata()
            st.known_version = max(st.known_version, dt.version())
            foreign_schema = None if _CONF_SCHEMA in meta.configuration else pa.schema(dt.schema().to_arrow())
        conf = meta.configuration
        name = meta.name or path.name
        if _CONF_SCHEMA in conf:
            schema = Schema(tuple((n, canonical_type(t)) for n, t in json.loads(conf[_CONF_SCHEMA])))
        else:  # a Delta table written by another tool: read it as a plain table
            assert foreign_schema is not None
            schema = Schema.from_arrow(foreign_schema, where=f"stream table {clip(name)}")
        table = cls(
            path,
            schema,
            kind=conf.get(_CONF_KIND, "plain"),
            key_columns=tuple(json.loads(conf.get(_CONF_KEYS, "[]"))),
            time_column=conf.get(_CONF_TIME),
            name=name,
        )
        return table

    def delete(self) -> None:
        """Remove the table directory and everything in it."""
        st = _state(self.path)
        with st.lock:
            shutil.rmtree(self.path, ignore_errors=True)
            _forget_state(self.path)

    def __repr__(self) -> str:
        keys = f", key_columns={list(self.key_columns)}" if self.key_columns else ""
        tcol = f", time_column={clip(self.time_column)}" if self.time_column else ""
        return f"StreamTable({clip(self.name)}, {self.schema}, kind={clip(self.kind)}{keys}{tcol}, path={str(self.path)!r})"

    # -- reading -------------------------------------------------------------

    def version(self) -> int:
        """Return the latest committed version (0 right after creation); cheap to poll."""
        st = _state(self.path)
        if not os.path.exists(_commit_file(self.path, st.known_version)):
            if not os.path.isdir(_log_dir(self.path)):
                raise CatalogError(f"stream table {clip(self.name)}: no stream table at {self.path} (deleted?)")
            st.known_version = 0
        v = latest_version(self.path, st.known_version)
        st.known_version = v
        return v

    def commit(self, version: int) -> Commit:
        """Return the data files that commit ``version`` added, in append order."""
        return read_commit(self.path, version)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The rows' Arrow schema."""
        return self._arrow_schema

    def read_version(self, version: int, columns: Sequence[str] | None = None) -> pa.Table:
        """Return the rows added by exactly commit ``version``, in the order they were appended."""
        schema = (
            self._arrow_schema
            if columns is None
            else pa.schema([self._arrow_schema.field(c) for c in columns])
        )
        return read_files(self.commit(version).files, schema)

    def to_arrow(self) -> pa.Table:
        """Return the current snapshot (row order across commits is not guaranteed)."""
        from deltalake import DeltaTable

        return (
            DeltaTable(str(self.path))
            .to_pyarrow_table()
            .select(list(self.schema.names))
            .cast(self._arrow_schema)
        )

    # -- writing -------------------------------------------------------------

    def commit_files(self, files: Sequence[tuple[str, int, int]], *, txn: tuple[str, int],
                     at: float | None = None) -> int | None:
        """Commit Parquet files already written into the table directory as one append.

        ``files`` are (file name, size in bytes, row count), in the order their rows should
        stream. Idempotent by ``txn`` like :meth:`append`. Keyed tables re-read the rows to
        de-duplicate them, then commit through :meth:`append`. ``at``: as :meth:`append`'s.
        """
        from deltalake import CommitProperties, Transaction
        from deltalake.transaction import AddAction

        if self.kind != "plain":
            rows = read_files([DataFile(os.path.join(self.path, n), size, r) for n, size, r in files],
                              self._arrow_schema)
            version = self.append(rows, txn=txn, at=at)
            for name, _, _ in files:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.path, name))
            return version
        st = _state(self.path)
        with st.lock:
            for _ in range(_MAX_COMMIT_ATTEMPTS):
                dt = self._delta(st)
                base = dt.version()
                done = dt.transaction_version(txn[0])
                if done is not None and done >= txn[1]:
                    return None
                now = int(time.time() * 1000)
                actions = [AddAction(name, size, {}, now, True, json.dumps({"numRecords": rows}))
                           for name, size, rows in files]
                props = CommitProperties(max_commit_retries=0, app_transactions=[Transaction(txn[0], txn[1])],
                                         custom_metadata=_stamp(at))
                try:
                    dt.create_write_transaction(actions, "append", self._arrow_schema, commit_properties=props)  # type: ignore[arg-type]
                except Exception as exc:  # a concurrent commit: re-check the transaction and retry
                    if type(exc).__name__ != "CommitFailedError":
                        raise
                    continue
                st.known_version = max(st.known_version, base + 1)
                return base + 1
        raise ExecutionError(f"stream table {clip(self.name)}: could not commit files after {_MAX_COMMIT_ATTEMPTS} attempts")


    def append(
        self,
        data: pa.Table | pa.RecordBatch | pd.DataFrame,
        *,
        txn: tuple[str, int] | None = None,
        at: float | None = None,
    ) -> int | None:
        """Append ``data`` as one commit and return the new version.

        Args:
            data: Rows to append; columns are matched by name (case-insensitively),
                safe widening casts are applied, order follows the table.
            txn: ``(app_id, batch_id)`` making the append idempotent: nothing is
                written when the table already recorded ``batch_id`` or a later one
                for ``app_id``.
            at: The commit's time (seconds since the epoch) as :func:`commit_time` reports it, and so the
                processing time of system-time engines over it; by default the clock's (``run_local``'s
                ``clock=`` sets it, for tests).

        Returns:
            The new version, or None when nothing was committed (``txn`` already
            applied, or no rows left after de-duplication and no ``txn`` to record).
        """
        rows = self._conform(data)
        if txn is not None:
            app_id, batch_id = txn
            if (
                not isinstance(app_id, str)
                or not app_id
                or isinstance(batch_id, bool)
                or not isinstance(batch_id, int | np.integer)
                or batch_id < 0
            ):
                raise GraphDefinitionError(
                    f"stream table {clip(self.name)}: txn must be (app_id: non-empty str, batch_id: int >= 0), "
                    f"got {clip(txn)}"
                )
            txn = (app_id, int(batch_id))
        st = _state(self.path)
        with st.lock:
            for _ in range(_MAX_COMMIT_ATTEMPTS):
                version = self._try_append(st, rows, txn, at)
                if version != -1:
                    return version
            raise ExecutionError(
                f"stream table {clip(self.name)}: could not commit after {_MAX_COMMIT_ATTEMPTS} attempts; "
                "other writers keep committing to the same table"
            )

    def append_once(
        self, data: pa.Table | pa.RecordBatch | pd.DataFrame, *, app_id: str, sequence: int
    ) -> int:
        """Append ``data`` at most once per ``(app_id, sequence)``; return the version that holds it.

        The append commits Delta transaction ``(app_id, sequence)`` together with its rows. A
        retry of a sequence that already landed writes nothing and returns the version found
        in the log (:func:`find_transaction`), so a client that does not know whether its last
        append committed can simply repeat it. A keyed append whose rows are all duplicates
        still commits (an empty commit recording the transaction).

        Raises:
            SequenceError: ``sequence`` is older than ``app_id``'s last committed one and is not
                in the log: appending it now would break the order, skipping it would lose rows.
        """
        rows = self._conform(data)
        if isinstance(sequence, bool) or not isinstance(sequence, int | np.integer) or sequence < 0:
            raise GraphDefinitionError(
                f"stream table {clip(self.name)}: sequence must be an int >= 0, got {clip(sequence)}"
            )
        sequence = int(sequence)
        st = _state(self.path)
        with st.lock:
            for _ in range(_MAX_COMMIT_ATTEMPTS):
                dt = self._delta(st)
                done = dt.transaction_version(app_id)
                if done is not None and done >= sequence:
                    found = find_transaction(self.path, app_id, sequence, latest=dt.version())
                    if found is not None:
                        return found
                    raise SequenceError(
                        f"stream table {clip(self.name)}: append with sequence {sequence} for {clip(app_id)} is "
                        f"out of order: sequence {done} is already committed and {sequence} never was. "
                        "Sequences must increase; resume from committed_sequence(table) + 1"
                    )
                version = self._try_append(st, rows, (app_id, sequence))
                if version is not None and version != -1:
                    return version
        raise ExecutionError(
            f"stream table {clip(self.name)}: could not commit after {_MAX_COMMIT_ATTEMPTS} attempts; "
            "other writers keep committing to the same table"
        )

    def file_count(self) -> int:
        """How many data files the current snapshot holds (from the log; no data is read)."""
        st = _state(self.path)
        with st.lock:
            return len(self._delta(st).file_uris())

    def compact(self, *, target_size: int = 128 * 2**20) -> int | None:
        """Merge small data files into larger ones for snapshot readers (SQL); return the new version.

        The compaction commit removes the small files from the snapshot and adds the merged ones with
        ``dataChange: false``, so stream readers skip it (:func:`read_commit` marks it ``rewrites``) and
        keep replaying older versions from the small files, which stay on disk: nothing is vacuumed here.
        A log checkpoint is written right after, so snapshot readers open the compacted table quickly.
        Holds the table's writer lock, so no append of this process interleaves. Returns None when there
        was nothing to merge.
        """
        st = _state(self.path)
        with st.lock:
            dt = self._delta(st)
            before = dt.version()
            metrics = dt.optimize.compact(target_size=target_size)
            if not metrics.get("numFilesRemoved"):
                return None
            dt.update_incremental()
            st.known_version = max(st.known_version, dt.version())
            if dt.version() == before:
                return None
            # A log checkpoint of the compacted snapshot: a reader opening the table then reads one small
            # checkpoint, not the last checkpoint's thousands of small files plus the compaction's removes
            # (measured: 1.5x a bulk-written table's open+read without it, 0.95x with it).
            dt.create_checkpoint()
            return int(dt.version())

    # -- retention -----------------------------------------------------------

    @property
    def retention(self) -> Retention | None:
        """The table's retention rule (stored in its Delta configuration), or None: every version is kept."""
        st = _state(self.path)
        with st.lock:
            text = self._delta(st).metadata().configuration.get(_CONF_RETENTION)
        return Retention.from_json(text) if text else None

    def set_retention(self, retention: Retention | None) -> None:
        """Set (or, with None, remove) the table's retention rule; it applies from the next :meth:`expire`."""
        st = _state(self.path)
        with st.lock:
            dt = self._delta(st)
            if (dt.metadata().configuration.get(_CONF_RETENTION) or None) == (retention and retention.to_json()):
                return
            dt.alter.set_table_properties({_CONF_RETENTION: retention.to_json() if retention else ""},
                                          raise_if_not_exists=False)
            dt.update_incremental()
            st.known_version = max(st.known_version, dt.version())

    def expire(self, *, now: float | None = None) -> Expiry | None:
        """Remove the versions the table's retention no longer keeps; return what went, or None.

        Each call writes a log checkpoint of the newest version, then removes the commit files of expired
        versions, oldest first, and the data files only they named (a file still in the snapshot stays
        until compaction has merged it and that compaction's commit expires too). So that a reader that opened the log at the previous checkpoint
        can still finish, versions after that checkpoint are removed by the next call: a version expires
        within two calls. Reading a removed version raises :class:`~headwater.errors.RetentionError`.
        Holds the table's writer lock, like :meth:`compact`.
        """
        st = _state(self.path)
        with st.lock:
            dt = self._delta(st)
            text = dt.metadata().configuration.get(_CONF_RETENTION)
            if not text:
                return None
            log_dir = _log_dir(self.path)
            versions = log_versions(log_dir)
            if len(versions) < 2 or versions != list(range(versions[0], versions[-1] + 1)):
                return None
            cut = first_kept_version(
                Retention.from_json(text), versions, now=time.time() if now is None else now,
                commit_time=lambda v: commit_time(self.path, v),
                commit_rows=lambda v: read_commit(self.path, v).num_rows())
            if cut <= versions[0]:
                return None
            previous_checkpoint = last_checkpoint(log_dir)
            if previous_checkpoint != versions[-1]:
                dt.create_checkpoint()
            below = min(cut, versions[0] if previous_checkpoint is None else previous_checkpoint + 1)
            if below <= versions[0]:
                return Expiry(versions[0], 0, 0, 0)
            # A file leaves with the last commit that names it: its add (a micro-batch nobody replays any more)
            # or the compaction's remove (a file of the snapshot, merged since). A file still in the snapshot
            # stays: compaction merges it, and a later call removes it with that compaction's commit.
            named: set[str] = set()
            for v in range(versions[0], below):
                with contextlib.suppress(FileNotFoundError):
                    named.update(_named_paths(str(self.path), v))
            in_snapshot = {os.path.normpath(_data_file_path(str(self.path), uri)) for uri in dt.file_uris()}
            for file in expired_log_files(log_dir, below, previous_checkpoint):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(file)
            files = size = 0
            for file in sorted(named - in_snapshot):
                with contextlib.suppress(FileNotFoundError):
                    size += os.stat(file).st_size
                    os.remove(file)
                    files += 1
            return Expiry(below, below - versions[0], files, size)

    def transaction_version(self, app_id: str) -> int | None:
        """Return the newest transaction version ``app_id`` committed to this table, or None."""
        st = _state(self.path)
        with st.lock:
            done = self._delta(st).transaction_version(app_id)
        return None if done is None else int(done)

    def row_count(self) -> int:
        """Return the number of rows in the current snapshot, from the log's statistics.

        Reads no data: the count comes from the add actions' ``numRecords``; only a file
        written without statistics has its Parquet footer read.
        """
        st = _state(self.path)
        with st.lock:
            actions = pa.table(self._delta(st).get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return 0
        counts = actions.column("num_records").to_pylist() if "num_records" in actions.column_names \
            else [None] * actions.num_rows
        paths = actions.column("path").to_pylist()
        return sum(n if n is not None else DataFile(_data_file_path(str(self.path), p), 0, None).rows()
                   for n, p in zip(counts, paths, strict=True))

    def _delta(self, st: _TableState) -> DeltaTable:
        return st.loaded(self.path, self.name)

    def _try_append(self, st: _TableState, rows: pa.Table, txn: tuple[str, int] | None,
                    at: float | None = None) -> int | None:
        """One optimistic attempt; return -1 if another writer committed first."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import CommitFailedError
        from deltalake.transaction import AddAction

        dt = self._delta(st)
        base = dt.version()
        if txn is not None:
            done = dt.transaction_version(txn[0])
            if done is not None and done >= txn[1]:
                return None
        if self.kind != "plain":
            rows = self._dedup(st, base, rows)
        if rows.num_rows == 0 and txn is None:
            return None
        actions: list[Any] = []
        file_path = None
        # No retries inside delta-rs: the commit must land on base + 1, or the
        # de-duplication above was computed against a stale table.
        props = CommitProperties(
            max_commit_retries=0,
            app_transactions=[Transaction(txn[0], txn[1])] if txn is not None else None,
            custom_metadata=_stamp(at),
        )
        try:
            if rows.num_rows:
                file_name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
                file_path = os.path.join(self.path, file_name)
                text = [n for n, t in self.schema if t == "string"]  # dictionary-encode text only: 2x faster writes
                write_table(rows, file_path, bucketing=self.bucketing, text_columns=text)
                size = os.path.getsize(file_path)
                actions.append(
                    AddAction(
                        file_name,
                        size,
                        {},
                        int(time.time() * 1000),
                        True,
                        json.dumps({"numRecords": rows.num_rows}),
                    )
                )
            dt.create_write_transaction(actions, "append", self._arrow_schema, commit_properties=props)
            fault_point("stream_table.append.after_commit")
        except CommitFailedError:
            if file_path is not None:
                os.remove(file_path)
            return -1
        except BaseException as exc:
            # A full disk may hit the commit's housekeeping after the commit itself landed (this process holds the
            # table's lock and the data directory's: a newer version is this commit); only then did it append.
            full = is_disk_full(exc)
            if not (full and latest_version(self.path, base) > base):
                if file_path is not None and os.path.exists(file_path):
                    os.remove(file_path)
                if full:
                    raise storage_full_error(clip(self.name), self.path, free=_free_bytes(self.path),
                                             cause=exc) from exc
                raise
        version = base + 1
        st.known_version = max(st.known_version, version)
        if st.index is not None and st.index.version == base:
            self._index_add(st.index, rows)
            st.index.version = version
        return version

    # -- validation ----------------------------------------------------------

    def _conform(self, data: Any) -> pa.Table:
        where = f"stream table {clip(self.name)}"
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        elif not isinstance(data, pa.Table):
            try:
                import pandas as pd
            except ImportError:  # pragma: no cover - pandas is a dependency
                pd = None
            if pd is not None and isinstance(data, pd.DataFrame):
                data = pa.Table.from_pandas(data, preserve_index=False)
            else:
                raise SchemaError(
                    f"{where}: append expects a pyarrow.Table, RecordBatch or pandas DataFrame, "
                    f"got {type(data).__name__}"
                )
        by_table_name: dict[str, str] = {}
        extra = []
        for col in data.column_names:
            real = self.schema.lookup(col)
            if real is None:
                extra.append(col)
            elif real in by_table_name:
                raise SchemaError(
                    f"{where}: data has columns {clip(by_table_name[real])} and {clip(col)} that both "
                    f"match table column {clip(real)}; keep one"
                )
            else:
                by_table_name[real] = col
        missing = [n for n in self.schema.names if n not in by_table_name]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing column(s) {', '.join(map(repr, missing))}")
            if extra:
                parts.append(f"unknown column(s) {', '.join(map(repr, extra))}")
            raise SchemaError(
                f"{where}: data has {' and '.join(parts)}; got columns "
                f"({', '.join(data.column_names)}), expected {self.schema}"
            )
        arrays = []
        for name, typ in self.schema:
            col = data.column(by_table_name[name])
            target = ARROW_TYPES[typ]
            if not _cast_allowed(col.type, typ):
                raise SchemaError(
                    f"{where}: column {clip(name)} has type {col.type}, expected {typ} ({target}); "
                    f"{_type_hint(col.type, typ)}"
                )
            if col.type != target:
                try:
                    col = pc.cast(col, target, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"{where}: column {clip(name)} of type {col.type} does not fit {typ} "
                        f"({target}) without changing values: {exc}; "
                        f"{_type_hint(col.type, typ)}"
                    ) from None
            arrays.append(col)
        return pa.Table.from_arrays(arrays, schema=self._arrow_schema)

    # -- de-duplication ------------------------------------------------------

    def _index_columns(self) -> list[str]:
        cols = list(self.key_columns)
        if self.kind == "latest_keyed":
            assert self.time_column is not None
            cols.append(self.time_column)
        return cols

    def _index_add(self, index: _Index, rows: pa.Table) -> None:
        keys = _key_tuples(rows, self.key_columns)
        if self.kind == "keyed":
            index.entries.update(dict.fromkeys(keys))
            return
        assert self.time_column is not None
        times = _comparable_time(rows.column(self.time_column)).to_pylist()
        entries = index.entries
        for k, t in zip(keys, times, strict=True):
            if t is None:
                continue
            old = entries.get(k)
            if old is None or t > old:
                entries[k] = t

    def _synced_index(self, st: _TableState, version: int) -> _Index:
        """Return the key index as of ``version``, building or catching it up as needed."""
        if st.index is None or st.index.version > version:
            from deltalake import DeltaTable

            snapshot = DeltaTable(str(self.path), version=version).to_pyarrow_table(
                columns=self._index_columns()
            )
            st.index = _Index(version, {})
            self._index_add(st.index, snapshot)
        for v in range(st.index.version + 1, version + 1):
            self._index_add(st.index, self.read_version(v, self._index_columns()))
            st.index.version = v
        return st.index

    def _dedup(self, st: _TableState, version: int, rows: pa.Table) -> pa.Table:
        if rows.num_rows == 0:
            return rows
        import pandas as pd

        index = self._synced_index(st, version)
        key_frame = pa.table(
            {f"k{i}": _comparable_time(rows.column(c)) for i, c in enumerate(self.key_columns)}
        ).to_pandas()
        key_names = list(key_frame.columns)
        if self.kind == "keyed":
            candidates = np.flatnonzero(~key_frame.duplicated(subset=key_names, keep="first").to_numpy())
        else:
            assert self.time_column is not None
            times = _comparable_time(rows.column(self.time_column))
            key_frame["_t"] = times.to_pandas()
            key_frame["_i"] = np.arange(rows.num_rows)
            key_frame = key_frame[pd.notna(key_frame["_t"]).to_numpy()]
            newest = key_frame.sort_values(["_t", "_i"], ascending=[False, True], kind="stable")
            newest = newest.drop_duplicates(subset=key_names, keep="first")
            candidates = np.sort(newest["_i"].to_numpy())
        cand_rows = rows.take(pa.array(candidates, pa.int64()))
        keys = _key_tuples(cand_rows, self.key_columns)
        if self.kind == "keyed":
            keep = [i for i, k in enumerate(keys) if k not in index.entries]
        else:
            cand_times = _comparable_time(cand_rows.column(self.time_column)).to_pylist()
            keep = []
            for i, (k, t) in enumerate(zip(keys, cand_times, strict=True)):
                old = index.entries.get(k)
                if old is None or t > old:
                    keep.append(i)
        if len(keep) == cand_rows.num_rows:
            return cand_rows
        return cand_rows.take(pa.array(keep, pa.int64()))
