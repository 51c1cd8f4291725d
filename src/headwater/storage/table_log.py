"""Reading a stream table's Delta log: which files each commit added, when, and under which transaction.

Everything here parses ``_delta_log/<version>.json`` directly instead of asking ``deltalake``: a stream
replays commit by commit, and delta-rs (1.x) exposes no per-commit view of the log. ``DeltaTable.get_add_actions``
lists a snapshot's live files, not what one commit added in which order (and a compaction drops the files a replay
still reads); ``transaction_version`` gives only an application's newest transaction, not the version that
recorded it; ``history`` returns ``commitInfo`` without the adds. Measured on a 200-commit table: ``read_commit``
takes 0.05 ms, loading ``DeltaTable(path, version=v)`` to list its adds 18 ms.

A micro-batch reads the commits it covers once (:func:`read_batch`) and hands the :class:`Batch` to each of its
stream tasks. This module only reads the log (and, for :func:`referenced_files` after retention, the snapshot's file list);
the writer (:mod:`headwater.storage.stream_table`) imports it, never the reverse.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.parquet as pq

from headwater.errors import CatalogError, ExecutionError, RetentionError, clip
from headwater.storage.retention import log_versions


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
    time: float = 0.0  # when it was made (seconds since the epoch): see commit_time

    def num_rows(self) -> int:
        return sum(f.rows() for f in self.files)

    def num_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Batch:
    """The commits of versions ``(start, end]``, read once: what a micro-batch hands to each of its stream tasks."""

    start: int
    end: int
    commits: tuple[Commit, ...]

    @property
    def time(self) -> float:
        """The commit time of ``end``: the batch's processing time, identical on every replay (0 when empty)."""
        return self.commits[-1].time if self.commits else 0.0

    def num_rows(self) -> int:
        return sum(c.num_rows() for c in self.commits)


def log_dir(path: str | Path) -> str:
    return os.path.join(os.fspath(path), "_delta_log")


def commit_file(path: str | Path, version: int) -> str:
    return os.path.join(log_dir(path), f"{version:020d}.json")


def latest_version(path: str | Path, known: int = 0) -> int:
    """Return the newest committed version of the table at ``path``, probing from ``known``.

    Commit files appear atomically, so checking for the next one is enough; this is
    a few ``stat`` calls when ``known`` is recent. When ``known`` is older than the
    log's first kept version (retention removed it), the log directory is listed.
    """
    v = known
    if not os.path.exists(commit_file(path, v + 1)) and not os.path.exists(commit_file(path, v)):
        versions = log_versions(log_dir(path))
        if versions and versions[-1] > v:
            v = versions[-1]
    while os.path.exists(commit_file(path, v + 1)):
        v += 1
    return v



def earliest_version(path: str | Path) -> int:
    """Return the oldest version still in the table's log: 0 unless retention removed older ones."""
    versions = log_versions(log_dir(path))
    return versions[0] if versions else 0


def data_file_path(table_path: str, add_path: str) -> str:
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


def commit_time(path: str | Path, version: int) -> float:
    """When commit ``version`` was made (seconds since the epoch), from its ``commitInfo``; a fixed fact
    of the log, so every replay of a micro-batch sees the same time."""
    return read_commit(path, version).time


def _info_time(info: dict[str, Any]) -> float | None:
    if info.get(STAMP_KEY) is not None:  # a time the writer gave (run_local's clock)
        return float(info[STAMP_KEY])
    stamp = info.get("timestamp")
    return None if stamp is None else float(stamp) / 1000.0


def read_commit(path: str | Path, version: int) -> Commit:
    """Parse ``_delta_log/<version>.json`` and return the data files it added, in order, and its time."""
    table_path = os.fspath(path)
    try:
        with open(commit_file(table_path, version), encoding="utf-8") as f:
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
            f"(latest is {latest_version(table_path) if os.path.isdir(log_dir(table_path)) else 'none'}); "
            "it was never committed or its log file was removed"
        ) from None
    files: list[DataFile] = []
    rewrites = False
    time = None
    for line in lines:
        if not line.strip():
            continue
        action = json.loads(line)
        if "commitInfo" in action and time is None:
            time = _info_time(action["commitInfo"])
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
        files.append(DataFile(data_file_path(table_path, add["path"]), int(add.get("size", 0)), num_rows))
    if time is None:  # a writer that recorded no timestamp: the commit file's own time
        time = os.stat(commit_file(table_path, version)).st_mtime
    return Commit(version, tuple(files), rewrites, time)


def read_batch(path: str | Path, start: int, end: int) -> Batch:
    """Read the commits of versions ``(start, end]``, each once."""
    return Batch(start, end, tuple(read_commit(path, v) for v in range(start + 1, end + 1)))


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
            done = transactions(table_path, v).get(app_id)
        except FileNotFoundError:  # a log cleaned up below this point: nothing older to find
            return None
        if done == txn_version:
            return v
        if done is not None and done < txn_version:
            return None
        v -= 1
    return None


def transactions(path: str | Path, version: int) -> dict[str, int]:
    """The transactions (application id → transaction version) that commit ``version`` recorded."""
    found: dict[str, int] = {}
    with open(commit_file(path, version), encoding="utf-8") as f:
        for line in f:
            if '"txn"' in line:  # cheap pre-filter; add actions are long
                txn = json.loads(line).get("txn")
                if txn is not None:
                    found[txn["appId"]] = int(txn["version"])
    return found



def named_paths(table_path: str, version: int, kinds: tuple[str, ...] = ("add", "remove")) -> set[str]:
    """Absolute paths of the files commit ``version`` adds or removes (``kinds``), rewrites included."""
    paths: set[str] = set()
    with open(commit_file(table_path, version), encoding="utf-8") as f:
        for line in f:
            if any(f'"{kind}"' in line for kind in kinds):
                action = json.loads(line)
                paths.update(os.path.normpath(data_file_path(table_path, action[kind]["path"]))
                             for kind in kinds if kind in action)
    return paths


def referenced_files(path: str | Path) -> set[str] | None:
    """Return the absolute paths of every data file a commit of the log added and may still be read.

    None when the log has a gap: then the set would be incomplete and nothing may be concluded from a
    file's absence. After retention removed the oldest commits, their files still in the snapshot count.
    """
    table_path = os.fspath(path)
    names: set[str] = set()
    versions = log_versions(log_dir(table_path))
    if not versions or versions != list(range(versions[0], versions[-1] + 1)):
        return None
    if versions[0] > 0:
        # retention removed the oldest commits and every file only they named; the files they named that
        # are still in use are in the snapshot
        from deltalake import DeltaTable

        names.update(os.path.normpath(data_file_path(table_path, uri)) for uri in DeltaTable(table_path).file_uris())
    for v in versions:
        names.update(named_paths(table_path, v))
    return names
