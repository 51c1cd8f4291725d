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
- ``changelog``: every row is appended, as in ``plain``; its ``changelog_type`` column says insert, update
  or delete, and snapshot readers (SQL) see the net state (:mod:`~headwater.storage.changelog`).

This module holds :class:`StreamTable` (creating, opening, reading and appending: commits, transactions and
idempotency). Its parts live beside it: :mod:`~headwater.storage.table_log` reads the Delta log,
:mod:`~headwater.storage.table_commit` writes an append's commit to it,
:mod:`~headwater.storage.table_files` reads data files and removes orphans, :mod:`~headwater.storage.table_meta`
holds the table definition and schema checks, :mod:`~headwater.storage.keyed_dedup` the de-duplication of keyed
tables, :mod:`~headwater.storage.table_state` the per-process state of each table and
:mod:`~headwater.storage.table_maintenance` compaction, retention and expiry.

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
import logging
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from headwater.errors import (
    CatalogError,
    ExecutionError,
    GraphDefinitionError,
    NameTakenError,
    SequenceError,
    clip,
)
from headwater.faults import fault_point
from headwater.storage.buckets import Bucketing, write_table
from headwater.storage.changelog import check_changes
from headwater.storage.disk_space import DiskSpace, is_disk_full, storage_full_error
from headwater.storage.keyed_dedup import KeyIndex, KeyRule
from headwater.storage.retention import Retention
from headwater.storage.table_commit import CHECKPOINT_INTERVAL, check_writable, has_invariants, write_commit
from headwater.storage.table_files import read_files
from headwater.storage.table_log import (
    Commit,
    DataFile,
    commit_file,
    find_transaction,
    latest_version,
    log_dir,
    read_commit,
)
from headwater.storage.table_maintenance import TableMaintenance
from headwater.storage.table_meta import (
    TableDefinition,
    check_definition,
    conform,
    create_delta_table,
    read_definition,
)
from headwater.storage.table_state import TableState, forget_state, table_state
from headwater.types import Schema

if TYPE_CHECKING:
    import pandas as pd

_MAX_COMMIT_ATTEMPTS = 50
_log = logging.getLogger(__name__)


def _free_bytes(path: str | Path) -> int:
    return DiskSpace().free(path)


def _check_retention(name: str, kind: str, retention: Retention | None) -> None:
    if kind == "changelog" and retention is not None:
        raise GraphDefinitionError(
            f"stream table {clip(name)}: a change-log table keeps every change (its net state needs the insert "
            "of every live key, however old), so it takes no retention; use a keyed table to bound it"
        )


class StreamTable(TableMaintenance):
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
            kind: ``"plain"``, ``"keyed"``, ``"latest_keyed"`` or ``"changelog"``.
            key_columns: Key of a keyed or latest-keyed table.
            time_column: Column whose newest value wins in a latest-keyed table;
                optional (informational) for the other kinds.
            name: Name used in error messages; defaults to the directory name.
            retention: How far back the table stays replayable (:meth:`expire`); None keeps every version.
        """
        path = Path(path).absolute()
        name = name or path.name
        schema = Schema.parse(schema, where=f"stream table {clip(name)}")
        key_columns = (key_columns,) if isinstance(key_columns, str) else tuple(key_columns)
        check_definition(name, schema, kind, key_columns, time_column)
        _check_retention(name, kind, retention)
        if path.exists():
            raise NameTakenError(
                f"stream table {clip(name)}: path {path} already exists; open it with "
                "StreamTable.open(path) or choose another path"
            )
        forget_state(path)
        create_delta_table(path, TableDefinition(name, schema, kind, key_columns, time_column), retention)
        return cls(path, schema, kind=kind, key_columns=key_columns, time_column=time_column, name=name)

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
        st = table_state(path)
        with st.lock:  # the process's loaded log, caught up (loading a log anew costs ~15 ms per 100 commits)
            dt = st.loaded(path, path.name)
            st.known_version = max(st.known_version, dt.version())
            d = read_definition(dt, path)
        return cls(path, d.schema, kind=d.kind, key_columns=d.key_columns, time_column=d.time_column, name=d.name)

    def delete(self) -> None:
        """Remove the table directory and everything in it."""
        st = table_state(self.path)
        with st.lock:
            shutil.rmtree(self.path, ignore_errors=True)
            forget_state(self.path)

    def __repr__(self) -> str:
        keys = f", key_columns={list(self.key_columns)}" if self.key_columns else ""
        tcol = f", time_column={clip(self.time_column)}" if self.time_column else ""
        return f"StreamTable({clip(self.name)}, {self.schema}, kind={clip(self.kind)}{keys}{tcol}, path={str(self.path)!r})"

    # -- reading -------------------------------------------------------------

    def version(self) -> int:
        """Return the latest committed version (0 right after creation); cheap to poll."""
        st = table_state(self.path)
        if not os.path.exists(commit_file(self.path, st.known_version)):
            if not os.path.isdir(log_dir(self.path)):
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
        if self.kind != "plain":  # keyed: de-duplicated; changelog: checked (check_changes)
            rows = read_files([DataFile(os.path.join(self.path, n), size, r) for n, size, r in files],
                              self._arrow_schema)
            version = self.append(rows, txn=txn, at=at)
            for name, _, _ in files:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.path, name))
            return version
        st = table_state(self.path)
        with st.lock:
            for _ in range(_MAX_COMMIT_ATTEMPTS):
                base = self._caught_up(st)
                done = st.transaction(self.path, self.name, txn[0])
                if done is not None and done >= txn[1]:
                    return None
                if write_commit(str(self.path), base + 1, files, txn=txn, at=at):
                    self._committed(st, base + 1, txn)
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
        st = table_state(self.path)
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
        st = table_state(self.path)
        with st.lock:
            for _ in range(_MAX_COMMIT_ATTEMPTS):
                latest = self._caught_up(st)
                done = st.transaction(self.path, self.name, app_id)
                if done is not None and done >= sequence:
                    found = find_transaction(self.path, app_id, sequence, latest=latest)
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

    def transaction_version(self, app_id: str) -> int | None:
        """Return the newest transaction version ``app_id`` committed to this table, or None."""
        st = table_state(self.path)
        with st.lock:
            self._caught_up(st)
            return st.transaction(self.path, self.name, app_id)

    def _try_append(self, st: TableState, rows: pa.Table, txn: tuple[str, int] | None,
                    at: float | None = None) -> int | None:
        """One optimistic attempt; return -1 if another writer committed first."""
        base = self._caught_up(st)
        if txn is not None:
            done = st.transaction(self.path, self.name, txn[0])
            if done is not None and done >= txn[1]:
                return None
        if self.kind in ("keyed", "latest_keyed"):
            rows = self._dedup(st, base, rows)
        if rows.num_rows == 0 and txn is None:
            return None
        files: list[tuple[str, int, int]] = []
        file_path = None
        try:
            if rows.num_rows:
                file_name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
                file_path = os.path.join(self.path, file_name)
                text = [n for n, t in self.schema if t == "string"]  # dictionary-encode text only: 2x faster writes
                write_table(rows, file_path, bucketing=self.bucketing, text_columns=text)
                files.append((file_name, os.path.getsize(file_path), rows.num_rows))
            # the de-duplication above holds only if the commit lands on base + 1
            landed = write_commit(str(self.path), base + 1, files, txn=txn, at=at)
        except BaseException as exc:
            if file_path is not None and os.path.exists(file_path):
                os.remove(file_path)
            if is_disk_full(exc):
                raise storage_full_error(clip(self.name), self.path, free=_free_bytes(self.path), cause=exc) from exc
            raise
        if not landed:
            if file_path is not None:
                os.remove(file_path)
            return -1
        fault_point("stream_table.append.after_commit")
        version = base + 1
        self._committed(st, version, txn)
        if st.index is not None and st.index.version == base:
            self._key_rule().index_add(st.index, rows)
            st.index.version = version
        return version

    def _caught_up(self, st: TableState) -> int:
        """The newest version, before an append to it (checking once that appends written here may go to it)."""
        base = st.caught_up(self.path, self.name)
        if not st.writable:
            dt = self._delta(st)
            check_writable(dt.protocol(), has_invariants(dt.schema().to_json()), self.name)
            st.writable = True
        return base

    def _committed(self, st: TableState, version: int, txn: tuple[str, int] | None) -> None:
        """After this process's commit of ``version``: a log checkpoint every CHECKPOINT_INTERVAL versions."""
        st.committed(version, txn)
        if version % CHECKPOINT_INTERVAL == 0:
            try:
                self._delta(st).create_checkpoint()
            except Exception as exc:  # the commit stands; the next interval's checkpoint covers this one
                _log.warning("stream table %s: no log checkpoint at version %d: %s", clip(self.name), version, exc)

    # -- validation ----------------------------------------------------------

    def _conform(self, data: Any) -> pa.Table:
        rows = conform(data, self.schema, self._arrow_schema, self.name)
        if self.kind == "changelog":
            check_changes(rows, self.key_columns, self.name)
        return rows

    def compact(self, *, target_size: int = 128 * 2**20) -> int | None:
        # Merging files loses the order of a change log's rows, which its net state depends on.
        return None if self.kind == "changelog" else super().compact(target_size=target_size)

    def set_retention(self, retention: Retention | None) -> None:
        _check_retention(self.name, self.kind, retention)
        super().set_retention(retention)

    # -- de-duplication ------------------------------------------------------

    def _key_rule(self) -> KeyRule:
        return KeyRule(self.kind, self.key_columns, self.time_column)

    def _synced_index(self, st: TableState, version: int) -> KeyIndex:
        """Return the key index as of ``version``, building or catching it up as needed."""
        if st.index is None or st.index.version > version:
            from deltalake import DeltaTable

            snapshot = DeltaTable(str(self.path), version=version).to_pyarrow_table(
                columns=self._key_rule().index_columns()
            )
            st.index = KeyIndex(version, {})
            self._key_rule().index_add(st.index, snapshot)
        for v in range(st.index.version + 1, version + 1):
            self._key_rule().index_add(st.index, self.read_version(v, self._key_rule().index_columns()))
            st.index.version = v
        return st.index

    def _dedup(self, st: TableState, version: int, rows: pa.Table) -> pa.Table:
        if rows.num_rows == 0:
            return rows
        return self._key_rule().dedup(self._synced_index(st, version), rows)
