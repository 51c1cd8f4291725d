"""Maintenance of a stream table's storage: compaction, retention and expiry of old versions, counts.

:class:`TableMaintenance` is the part of :class:`~headwater.storage.stream_table.StreamTable` that works
on the table as a whole rather than appending to it; every method takes the table's writer lock
(:mod:`headwater.storage.table_state`) so that no append of this process interleaves.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from headwater.storage.retention import (
    Retention,
    expired_log_files,
    first_kept_version,
    last_checkpoint,
    log_versions,
)
from headwater.storage.table_log import (
    DataFile,
    commit_time,
    data_file_path,
    log_dir,
    named_paths,
    read_commit,
)
from headwater.storage.table_meta import CONF_RETENTION
from headwater.storage.table_state import TableState, table_state

if TYPE_CHECKING:
    from deltalake import DeltaTable


@dataclass(frozen=True)
class Expiry:
    """What :meth:`StreamTable.expire` removed: versions before ``first_kept``, and data files."""

    first_kept: int
    versions: int
    files: int
    bytes: int


class TableMaintenance:
    """Compaction, retention and counts of a stream table (a base of ``StreamTable``)."""

    path: Path
    name: str

    def file_count(self) -> int:
        """How many data files the current snapshot holds (from the log; no data is read)."""
        st = table_state(self.path)
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
        st = table_state(self.path)
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
        st = table_state(self.path)
        with st.lock:
            text = self._delta(st).metadata().configuration.get(CONF_RETENTION)
        return Retention.from_json(text) if text else None

    def set_retention(self, retention: Retention | None) -> None:
        """Set (or, with None, remove) the table's retention rule; it applies from the next :meth:`expire`."""
        st = table_state(self.path)
        with st.lock:
            dt = self._delta(st)
            if (dt.metadata().configuration.get(CONF_RETENTION) or None) == (retention and retention.to_json()):
                return
            dt.alter.set_table_properties({CONF_RETENTION: retention.to_json() if retention else ""},
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
        st = table_state(self.path)
        with st.lock:
            dt = self._delta(st)
            text = dt.metadata().configuration.get(CONF_RETENTION)
            if not text:
                return None
            log_path = log_dir(self.path)
            versions = log_versions(log_path)
            if len(versions) < 2 or versions != list(range(versions[0], versions[-1] + 1)):
                return None
            cut = first_kept_version(
                Retention.from_json(text), versions, now=time.time() if now is None else now,
                commit_time=lambda v: commit_time(self.path, v),
                commit_rows=lambda v: read_commit(self.path, v).num_rows())
            if cut <= versions[0]:
                return None
            previous_checkpoint = last_checkpoint(log_path)
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
                    named.update(named_paths(str(self.path), v))
            in_snapshot = {os.path.normpath(data_file_path(str(self.path), uri)) for uri in dt.file_uris()}
            for file in expired_log_files(log_path, below, previous_checkpoint):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(file)
            files = size = 0
            for file in sorted(named - in_snapshot):
                with contextlib.suppress(FileNotFoundError):
                    size += os.stat(file).st_size
                    os.remove(file)
                    files += 1
            return Expiry(below, below - versions[0], files, size)


    def row_count(self) -> int:
        """Return the number of rows in the current snapshot, from the log's statistics.

        Reads no data: the count comes from the add actions' ``numRecords``; only a file
        written without statistics has its Parquet footer read.
        """
        st = table_state(self.path)
        with st.lock:
            actions = pa.table(self._delta(st).get_add_actions(flatten=True))
        if actions.num_rows == 0:
            return 0
        counts = actions.column("num_records").to_pylist() if "num_records" in actions.column_names \
            else [None] * actions.num_rows
        paths = actions.column("path").to_pylist()
        return sum(n if n is not None else DataFile(data_file_path(str(self.path), p), 0, None).rows()
                   for n, p in zip(counts, paths, strict=True))

    def _delta(self, st: TableState) -> DeltaTable:
        return st.loaded(self.path, self.name)
