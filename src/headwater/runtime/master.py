"""The Stream Master: catalog, graph state machine and metadata, in process for the embedded mode.

Graph states: ``building -> running -> destroying -> destroyed``; a failed query moves
its graph to ``failed`` with the reason. Every transition is persisted, so a new
master on the same data directory resumes the graphs that were running — in the
background, each on its own (``recover``), so a session is usable at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from headwater.catalog import FQN
from headwater.dataplane.engine_stats import engine_rows
from headwater.dataplane.jobs import set_start_version
from headwater.dataplane.task import reader_bucketing
from headwater.errors import (
    CatalogError,
    CaughtUpTimeout,
    ExecutionError,
    GraphDefinitionError,
    NameTakenError,
    RequestError,
    RetentionError,
    SchemaError,
    SqlCancelled,
    StreamGraphStateError,
    WorkerUnavailableError,
    clip,
    shorten,
)
from headwater.faults import fault_point
from headwater.plan.document import dumps, from_json, plan_changes, same_definition, to_json
from headwater.plan.logical import EngineNode, LogicalGraph, TableNode
from headwater.plan.physical import PhysicalGraph, plan
from headwater.plan.subscription import FROM_LATEST_ROW
from headwater.runtime import protocol
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.runtime.checkpoint_jobs import job_rows, subjob_rows
from headwater.runtime.compactor import Compactor
from headwater.runtime.events import EventLog, EventType, recorded
from headwater.runtime.lag import CatchUp, graph_lag, subscription_rows
from headwater.runtime.lifecycle import RESUMABLE, GraphStatus, check_transition
from headwater.runtime.paths import sql_result
from headwater.runtime.protocol import WorkerPort, arrow_bytes
from headwater.runtime.serial import GraphLocks, one_per_graph
from headwater.runtime.supervisor import Supervisor
from headwater.runtime.wakeup import TABLE_COMMITS, next_look
from headwater.sql.limits import SqlLimits
from headwater.sql.policy import prepare
from headwater.storage.disk_space import DiskSpace, is_disk_full
from headwater.storage.locks import LOCK_NAME, FileLock, lock_data_dir, remove_unlocked_dirs
from headwater.storage.metadata import MetadataStore
from headwater.storage.records import GraphRecord, TableRecord
from headwater.storage.retention import Retention
from headwater.storage.shared_storage import check_storage
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_files import remove_orphan_files
from headwater.storage.table_log import earliest_version, latest_version
from headwater.types import Schema

log = logging.getLogger(__name__)

# Spark Python workers of a killed session may take a moment to exit; their files are spared that long.
ORPHAN_MIN_AGE_S = 10.0

MAX_WAIT_SECONDS = 3600.0  # the longest wait_until_caught_up; a longer timeout is cut to it
CHANGES_MAX_ROWS = 100_000  # table_changes answers whole versions up to about this many rows
UNTIL_VERSION = "headwater.until_version"  # table_changes: the newest version its answer covers (schema metadata)
FIRST_LOOK_S, LOOK_EVERY_S = 0.01, 0.1  # a wait looks at the graph's files again after these pauses (doubling)

SEMANTICS = "exactly-once"  # every table write is an idempotent per-batch commit, keyed or not


def client_app_id(client_id: str) -> str:
    """The Delta application id of a client's idempotent appends.

    The ``client:`` prefix keeps it apart from the graphs' own transaction ids
    (``<graph fqn>#<run>/subgraph_<n>``), which never start that way.
    """
    return f"client:{client_id}"


@dataclass
class GraphPaths:
    root: Path

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def private_table(self, name: str) -> Path:
        return self.root / "private" / name


class Master:
    def __init__(self, data_dir: Path, *, worker: WorkerPort, metadata_url: str | None = None,
                 directory_lock: bool = True, sql_limits: SqlLimits | None = None) -> None:
        # metadata_url: a SQLAlchemy URL (PostgreSQL in service mode); by default SQLite in the data directory
        # directory_lock=False: masters that share the directory are kept apart by a lease instead (service.leader)
        # (a frozen master would hold the directory's lock, and keep its standby from ever taking over)
        self.data_dir = Path(data_dir)
        self.storage = check_storage(self.data_dir)  # links, renames and locks work there, or refused with the reason
        self.sql_limits = sql_limits or SqlLimits.from_env()  # what one query may take (headwater.sql.limits)
        self.sql_outcomes: dict[str, int] = {}  # queries by outcome since this master started (/metrics)
        # held for the session's life: no other writer from here on
        self._lock = lock_data_dir(self.data_dir) if directory_lock else FileLock(self.data_dir / LOCK_NAME, None)
        try:
            self.store = MetadataStore.in_directory(self.data_dir) if metadata_url is None else \
                MetadataStore(metadata_url)
            self.store.refuse_pickled_graphs()
            self.events = EventLog(self.store)
            if worker.stops_with_master:
                # Only an in-process worker is surely dead now; a worker process of its own may be writing a
                # micro-batch's files that its next commit names, which must not be taken for leftovers.
                self.remove_leftovers()
        except BaseException:
            self._lock.release()
            raise
        self.worker = worker  # the embedded worker, in process; the service mode reaches workers over HTTP
        self.disk_space = DiskSpace.from_env()  # free-space rules for appends and graphs waiting for room
        self._tables: dict[str, StreamTable] = {}
        self._recovering: dict[str, threading.Event] = {}  # graphs being resumed in the background
        self._recovery: threading.Thread | None = None
        self._closing = threading.Event()
        self._starting = threading.RLock()
        self.graph_locks = GraphLocks()  # a stop or drop never races a failover move of the same graph
        # started with the first graph: a session that only declares graphs or appends runs no thread; a weak
        # reference, so that an unclosed master is still freed (and its directory lock released) at once
        tables = weakref.WeakMethod(self._all_tables)
        self.compactor = Compactor(lambda: (tables() or list)())
        self.supervisor = Supervisor(self)  # started with the first graph, as the compactor

    def _all_tables(self) -> list[StreamTable]:
        return [self._table(t) for t in self.store.list_tables()]

    def remove_leftovers(self, *, min_age: float = ORPHAN_MIN_AGE_S) -> tuple[int, int]:
        """Delete what killed processes left: data files no commit references, dead Spark scratch.

        Returns the (files, bytes) removed from stream table directories; Spark scratch
        directories of dead processes (``<data_dir>/tmp/<id>/`` with a free lock) go as a whole.

        The data files were written by an append or a micro-batch task that a killed process cut off
        before its commit. Runs at start, while this master holds the data directory lock and
        before any graph resumes, so no writer can still commit them; see
        :func:`~headwater.storage.table_files.remove_orphan_files` for the safety argument and
        ``min_age``.
        """
        remove_unlocked_dirs(self.data_dir / "tmp")  # Spark scratch of dead processes
        files = size = 0
        for rec in self.store.list_tables():
            n, b = remove_orphan_files(rec.path, min_age=min_age)
            files, size = files + n, size + b
        if files:
            log.info("removed %d orphaned file(s), %d bytes, from the stream tables of %s", files, size, self.data_dir)
        return files, size

    # -- paths ------------------------------------------------------------------------------------------
    def _graph_paths(self, fqn: str) -> GraphPaths:
        catalog, _, name = fqn.split(".")
        return GraphPaths(self.data_dir / "graphs" / catalog / name)

    def _public_table_path(self, fqn: str) -> Path:
        catalog, _, name = fqn.split(".")
        return self.data_dir / "tables" / catalog / name

    def _table(self, rec: TableRecord) -> StreamTable:
        if rec.fqn not in self._tables:
            self._tables[rec.fqn] = StreamTable.open(rec.path)
        return self._tables[rec.fqn]

    # -- tables -----------------------------------------------------------------------------------------
    def table_info(self, fqn: FQN) -> TableRecord:
        rec = self.store.get_table(str(fqn))
        if rec is None or rec.private:
            known = [t.fqn for t in self.store.list_tables() if not t.private]
            raise CatalogError(f"stream table {fqn} does not exist; known public tables: {', '.join(known) or 'none'}")
        return rec

    def create_public_table(self, fqn: FQN, schema: Schema, kind: str, keys: tuple[str, ...], time_column: str | None,
                            retention: Retention | None = None) -> None:
        if self.store.get_table(str(fqn)) is not None:
            raise NameTakenError(f"stream table {fqn} already exists")
        self.store.put_table(self._create_table_files(str(fqn), self._public_table_path(str(fqn)), schema, kind, keys,
                                                      time_column, None, retention))
        if retention is not None:
            self.compactor.start()

    def set_retention(self, fqn: FQN, retention: Retention | None) -> None:
        """Set a public table's retention; the compactor applies it (``expire``) on its next rounds."""
        self._table(self.table_info(fqn)).set_retention(retention)
        if retention is not None:
            self.compactor.start()

    @staticmethod
    def _create_table_files(fqn: str, path: Path, schema: Schema, kind: str, keys: tuple[str, ...],
                            time_column: str | None, owner: str | None,
                            retention: Retention | None = None) -> TableRecord:
        """Create an empty table directory (idempotent) and return the record that makes it visible."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():  # left by an interrupted drop or submit: nothing in the catalog points at it
            shutil.rmtree(path)
        StreamTable.create(path, schema, kind=kind, key_columns=keys, time_column=time_column, retention=retention)
        return TableRecord(fqn, str(path), kind, schema, keys, time_column, owner)

    def drop_public_table(self, fqn: FQN) -> None:
        rec = self.table_info(fqn)
        refs = self.store.refs_of_table(rec.fqn)
        if refs:
            raise NameTakenError(f"stream table {fqn} is used by graph(s) {', '.join(refs)}; drop them first")
        self._delete_table(rec)

    def _delete_table(self, rec: TableRecord) -> None:
        self._tables.pop(rec.fqn, None)
        self.store.delete_table(rec.fqn)
        shutil.rmtree(rec.path, ignore_errors=True)

    def append(self, fqn: FQN, data: pa.Table) -> int:
        """Append rows; return the committed version (the current one if a keyed table dropped every row).

        Refused with :class:`~headwater.errors.StorageFullError` (nothing appended) when the data directory's file
        system lacks the room (:mod:`headwater.storage.disk_space`)."""
        table = self._table(self.table_info(fqn))
        self.disk_space.check_append(table.path, data.nbytes, table=str(fqn))
        version = table.append(data)
        TABLE_COMMITS.fire()
        self._expire_in_background(table)
        return table.version() if version is None else version

    def table_changes(self, fqn: FQN, after_version: int, timeout: float = 30.0) -> pa.Table:
        """The rows that the versions after ``after_version`` added (see :meth:`table_changes_steps`)."""
        changes: pa.Table = run_steps(self.table_changes_steps(fqn, after_version, timeout))
        return changes

    def table_changes_steps(self, fqn: FQN, after_version: int, timeout: float = 30.0) -> Generator[float, None, pa.Table]:
        """Wait up to ``timeout`` seconds for a version after ``after_version``, one look at a time (each item is
        the pause before the next), then return the rows of the versions after it, oldest first, with their
        version in a ``_version`` column: whole versions, up to :data:`CHANGES_MAX_ROWS` rows unless the first
        version alone has more. The schema's metadata :data:`UNTIL_VERSION` names the newest version covered (a
        version may add no rows: a compaction). No new version within ``timeout``: no rows, ``after_version``."""
        table = self._table(self.table_info(fqn))
        after = int(after_version)
        if after < -1:
            raise RequestError(f"table_changes({fqn}): after_version {after} must be -1 (from the start) or more")
        first = earliest_version(table.path)
        if after + 1 < first:
            raise RetentionError(f"stream table {fqn}: version {after + 1} is no longer kept (the table keeps "
                                 f"versions {first} onwards): resume from version {first}")
        deadline = time.monotonic() + min(max(float(timeout), 0.0), MAX_WAIT_SECONDS)
        pause = FIRST_LOOK_S
        while (latest := latest_version(table.path, max(after, 0))) <= after and time.monotonic() < deadline:
            yield pause
            pause = min(pause * 2, LOOK_EVERY_S)
        parts, rows, until = [], 0, after
        for version in range(after + 1, latest + 1):
            part = table.read_version(version)
            parts.append(part.append_column("_version", pa.array([version] * part.num_rows, pa.int64())))
            rows, until = rows + part.num_rows, version
            if rows >= CHANGES_MAX_ROWS:
                break
        changes = pa.concat_tables(parts) if parts else \
            table.arrow_schema.append(pa.field("_version", pa.int64())).empty_table()
        return changes.replace_schema_metadata({UNTIL_VERSION: str(until)})

    def append_once(self, fqn: FQN, data: pa.Table, *, client_id: str, sequence: int) -> int:
        """Append rows at most once per (client, table, sequence); return the version holding them."""
        table = self._table(self.table_info(fqn))
        done = table.transaction_version(client_app_id(client_id))
        if done is None or done < sequence:  # a retry of a sequence that landed needs no room: it writes nothing
            self.disk_space.check_append(table.path, data.nbytes, table=str(fqn))
        version = table.append_once(data, app_id=client_app_id(client_id), sequence=sequence)
        TABLE_COMMITS.fire()
        self._expire_in_background(table)
        return version

    def _expire_in_background(self, table: StreamTable) -> None:
        """A session that only appends still applies its tables' retention: the compactor starts with the first
        append to a table that has one."""
        if not self.compactor.started and table.retention is not None:
            self.compactor.start()

    def committed_sequence(self, fqn: FQN, client_id: str) -> int | None:
        return self._table(self.table_info(fqn)).transaction_version(client_app_id(client_id))

    def table_meta(self, fqn: FQN | None) -> list[dict[str, Any]]:
        rows = []
        for t in self.store.list_tables():
            if fqn is not None and t.fqn != str(fqn):
                continue
            rows.append({"fqn": t.fqn, "kind": t.kind, "visibility": "private" if t.private else "public",
                         "path": t.path, "graph_refs": self.store.refs_of_table(t.fqn), **self._table_stats(t)})
        return rows

    def _table_stats(self, rec: TableRecord) -> dict[str, int | str | None]:
        """Latest version and row count from the table's log; None for a table whose directory is gone."""
        try:
            table = self._table(rec)
            retention = table.retention
            return {"version": table.version(), "rows": table.row_count(),
                    "first_version": earliest_version(table.path),
                    "retention": retention.describe() if retention else None}
        except CatalogError:  # listed, but its directory was removed behind the catalog's back
            return {"version": None, "rows": None, "first_version": None, "retention": None}

    # -- graphs -----------------------------------------------------------------------------------------
    @recorded(EventType.SUBMIT)
    def submit(self, logical: LogicalGraph, physical: PhysicalGraph, *, compute_group: str | None = None,
               checkpoint_config: CheckpointConfig | None = None) -> None:
        """Store and start a graph; resubmitting the same definition finishes what a crash left half done.

        ``compute_group``: the workers that may run it (service mode); kept for its restarts and moves.
        ``checkpoint_config``: kept for the graph's life (a new graph of the name starts from the defaults).
        """
        fqn = logical.fqn
        self._await_recovery(fqn)
        if compute_group is not None:
            self.store.set_compute_group(fqn, compute_group)
        graph_json = dumps(to_json(logical, physical))
        existing = self.store.active_graph(fqn)
        if checkpoint_config is not None or existing is None:
            self.store.set_checkpoint_config(fqn, (checkpoint_config or CheckpointConfig()).to_json())
        if existing is not None:
            if not same_definition(existing.graph_json, graph_json):
                raise NameTakenError(
                    f"stream graph {fqn} already exists (status {existing.status}) with a different definition; "
                    f"its state would be orphaned — drop it first with drop_stream_graph({fqn.split('.')[-1]!r}) "
                    "or choose another name"
                )
            if existing.status in (GraphStatus.RUNNING, GraphStatus.BUILDING) and self.worker.request(protocol.IsRunning(fqn)):
                return
            self._start(existing, logical, physical, action="submit")
            return
        public = self._check_tables(physical)
        paths = self._graph_paths(fqn)
        if paths.root.exists():
            shutil.rmtree(paths.root)  # leftovers of a destroyed graph, or of a submit cut off before its commit
        # Table directories first, then one catalog transaction: a crash in between leaves directories that
        # nothing in the catalog points at, which the next submit (or create) of that name replaces.
        new_tables = []
        for node in physical.tables():
            if node.private:
                path, owner = paths.private_table(node.name), fqn
            elif node.fqn not in public:
                path, owner = self._public_table_path(node.fqn), None
            else:
                continue
            # an HA table's retention_minutes (Orca's haSource...) is its replay retention; nothing else of it applies
            retention = Retention(minutes=node.ha.retention_minutes) if node.ha is not None else None
            new_tables.append(self._create_table_files(node.fqn, path, node.schema, node.table_kind,
                                                       node.key_columns, node.time_column, owner, retention))
            fault_point("submit.after_first_table")
        self._skip_to_latest(fqn, physical, new_tables)  # before the graph exists: a recovery finds it done
        fault_point("submit.before_metadata")
        graph_id = self.store.create_graph(fqn, graph_json, SEMANTICS, new_tables=new_tables,
                                           refs=[t.fqn for t in physical.tables() if not t.private])
        fault_point("submit.after_metadata")
        rec = self.store.active_graph(fqn)
        assert rec is not None and rec.id == graph_id
        self._start(rec, logical, physical, action="submit")

    def _check_tables(self, physical: PhysicalGraph) -> set[str]:
        """Validate public tables before anything is created; return those that already exist."""
        existing: set[str] = set()
        for node in physical.tables():
            if node.private:
                continue
            rec = self.store.get_table(node.fqn)
            if rec is None:
                if node.role == "source_by_name":
                    raise CatalogError(f"stream table {node.fqn} (source_by_name) does not exist any more")
                continue
            if rec.private:
                raise NameTakenError(f"stream table name {node.fqn} is taken by a private table of graph {rec.owner_graph}")
            if rec.schema != node.schema or rec.kind != node.table_kind:
                raise SchemaError(
                    f"stream table {node.fqn} already exists as {rec.kind} {rec.schema}; the graph declares "
                    f"{node.table_kind} {node.schema}. Use the same definition, another name, or drop the table"
                )
            existing.add(node.fqn)
        return existing

    def _table_paths(self, physical: PhysicalGraph) -> dict[int, str]:
        paths = {}
        for node in physical.tables():
            rec = self.store.get_table(node.fqn)
            if rec is None:
                raise CatalogError(f"stream table {node.fqn} is missing from the catalog")
            paths[node.id] = rec.path
        return paths

    def set_status(self, rec: GraphRecord, target: GraphStatus, reason: str = "", *, action: str) -> None:
        """The one place a graph's status changes: checked against the state machine, then stored."""
        current = self.store.get_graph(rec.id)
        check_transition(rec.fqn, current.status if current else rec.status, target, action=action)
        self.store.set_status(rec.id, target, reason)

    def _start(self, rec: GraphRecord, logical: LogicalGraph, physical: PhysicalGraph, *, action: str = "start",
               failed: GraphStatus = GraphStatus.FAILED) -> None:
        """Start the graph's queries (``building`` → ``running``); if they cannot start, the graph goes to ``failed``
        (the supervisor's restarts pass ``error``: it decides when a graph has failed too often). One start at a
        time: a failover, the supervisor and a user's request may all want to start the same graph."""
        with self._starting:
            self._start_now(rec, logical, physical, action=action, failed=failed)

    def _start_now(self, rec: GraphRecord, logical: LogicalGraph, physical: PhysicalGraph, *, action: str,
                   failed: GraphStatus) -> None:
        self.set_status(rec, GraphStatus.BUILDING, action=action)
        self._bucket_inputs(physical)
        self.compactor.start()
        self.supervisor.start()
        try:
            self.worker.request(protocol.StartGraph(
                rec.fqn, dumps(to_json(logical, physical)), {str(k): v for k, v in self._table_paths(physical).items()},
                str(self._graph_paths(rec.fqn).checkpoints), run_id=str(rec.id),
                group=self.store.compute_group(rec.fqn),
                keep_snapshots=self.checkpoint_settings(rec.fqn).max_retained_checkpoints))
        except WorkerUnavailableError as exc:  # a resource problem, not the graph's: it is restarted elsewhere
            self.set_status(rec, GraphStatus.ERROR, f"{shorten(str(exc), 600)}; the master restarts it on a live "
                             "worker", action=action)
            log.warning("stream graph %s could not start: %s; the supervisor restarts it", rec.fqn, exc)
            return
        except Exception as exc:
            reason = f"{type(exc).__name__}: {shorten(str(exc), 600)}"
            # resumed by a master's start, no one to tell: it waits for room (_recover_all)
            self.set_status(rec, GraphStatus.ERROR if action == "resume" and is_disk_full(exc) else failed, reason,
                            action=action)
            raise ExecutionError(f"stream graph {rec.fqn} failed to start: {reason}") from exc
        self.set_status(rec, GraphStatus.RUNNING, action=action)

    def restart(self, rec: GraphRecord) -> None:
        """Start a graph in ``error`` again from its checkpoints (``building`` → ``running``)."""
        logical: LogicalGraph = _definition(rec)
        self._start(rec, logical, plan(logical), action="restart", failed=GraphStatus.ERROR)

    def worker_down(self, worker: str, graphs: list[str]) -> None:
        """Restart, from their checkpoints, the graphs of a worker that stopped answering (Orca's NODE_DOWN):
        each goes to ``error`` with the reason, then through ``building`` to ``running`` on a live worker."""
        with self.events.record(EventType.NODE_DOWN, f"{worker}: {', '.join(graphs) or 'no graph'}"):
            for fqn in graphs:
                try:
                    with self.events.record(EventType.RECOVER, fqn):
                        self._move(worker, fqn)
                except ExecutionError as exc:  # _start stored 'failed' with the reason; the other graphs still move
                    log.error("%s", exc)

    @one_per_graph
    def _move(self, worker: str, fqn: str) -> None:
        rec = self.store.active_graph(fqn)
        if rec is None or rec.status not in (GraphStatus.RUNNING, GraphStatus.BUILDING, GraphStatus.ERROR):
            return  # stopped, failed or dropped: nothing runs to move
        fault_point("move.before_start")
        moving = self._recovering.setdefault(fqn, threading.Event())  # calls on the graph wait for the move
        try:
            began = time.monotonic()
            self.set_status(rec, GraphStatus.ERROR, f"NODE_DOWN: worker {worker} stopped answering", action="recover")
            logical: LogicalGraph = _definition(rec)
            self._start(rec, logical, plan(logical), action="recover")
            log.warning("stream graph %s moved off worker %s and is running again (after %.1f s)", fqn, worker,
                        time.monotonic() - began)
        finally:
            self._recovering.pop(fqn, None)
            moving.set()

    def _bucket_inputs(self, physical: PhysicalGraph) -> None:
        """Appends to a public table a parallel subgraph reads are written bucketed its way (first reader wins)."""
        for sg in physical.subgraphs:
            node = physical.nodes[sg.input]
            table_rec = self.store.get_table(node.fqn) if isinstance(node, TableNode) and not node.private else None
            if table_rec is not None:
                table = self._table(table_rec)
                table.bucketing = table.bucketing or reader_bucketing(physical, sg.input)

    # -- lifecycle (Orca A.5) ---------------------------------------------------------------------------
    @recorded(EventType.STOP)
    @one_per_graph
    def stop_graph(self, fqn: FQN) -> None:
        """Pause a graph: its queries stop, its state and offsets stay; ``start_graph`` resumes it."""
        self._await_recovery(str(fqn))
        rec = self._active(fqn)
        if rec.status == GraphStatus.STOPPED:
            raise StreamGraphStateError(f"stop stream graph {fqn}: it is stopped already; start_stream_graph resumes it")
        check_transition(rec.fqn, rec.status, GraphStatus.STOPPED, action="stop")
        self.supervisor.forget(rec.fqn)
        self.worker.request(protocol.StopGraph(rec.fqn))
        fault_point("stop.before_store")
        self.set_status(rec, GraphStatus.STOPPED, action="stop")

    @recorded(EventType.START)
    def start_graph(self, fqn: FQN) -> None:
        """Resume a stopped graph from its checkpoints (nothing is lost or processed twice)."""
        self._await_recovery(str(fqn))
        rec = self._active(fqn)
        if rec.status != GraphStatus.STOPPED:
            raise StreamGraphStateError(f"start stream graph {fqn}: it is {rec.status}; start_stream_graph resumes "
                                        "a stopped graph (a failed one: resubmit_stream_graph)")
        logical: LogicalGraph = _definition(rec)
        physical = plan(logical)
        self._skip_to_latest(rec.fqn, physical)
        self._start(rec, logical, physical)

    def _skip_to_latest(self, fqn: str, physical: PhysicalGraph, new_tables: list[TableRecord] | None = None) -> None:
        """``subscription.source_offset=-1`` on submit and start (never on a recovery): the subgraphs reading a
        source table begin their next new micro-batch at its latest version (Orca's offset -1). ``new_tables``:
        those a submit is creating, not yet in the catalog."""
        made = {t.fqn: t.path for t in new_tables or []}
        for sg in physical.subgraphs:
            if sg.config.source_offset == FROM_LATEST_ROW:
                table = physical.nodes[sg.input]
                assert isinstance(table, TableNode)
                rec = self.store.get_table(table.fqn)
                path = made.get(table.fqn) or (rec.path if rec is not None else "")
                if not path:
                    raise CatalogError(f"stream table {table.fqn} is missing from the catalog")
                set_start_version(self._graph_paths(fqn).checkpoints / sg.key(physical), latest_version(path))

    @recorded(EventType.RESUBMIT)
    def resubmit_graph(self, fqn: FQN) -> None:
        """Run a failed graph again from its checkpoints, or a destroyed one anew from its stored definition."""
        self._await_recovery(str(fqn))
        records = self.store.list_graphs(str(fqn))
        if not records:
            raise CatalogError(f"stream graph {fqn} does not exist")
        rec = records[-1]
        logical: LogicalGraph = _definition(rec)
        self.supervisor.forget(rec.fqn)
        if rec.status == GraphStatus.FAILED:
            self._start(rec, logical, plan(logical), action="resubmit")
            return
        if rec.status == GraphStatus.DESTROYING:  # a drop cut off: finish it first
            self.drop_graph(fqn, include_tables=False)
        elif rec.status != GraphStatus.DESTROYED:
            raise StreamGraphStateError(f"resubmit stream graph {fqn}: it is {rec.status}; resubmit applies to a "
                                        "failed, destroying or destroyed graph")
        self.submit(logical, plan(logical))

    def purge_records(self, fqn: FQN) -> int:
        """Delete the records of ``fqn``'s destroyed runs; returns how many went."""
        records = self.store.list_graphs(str(fqn))
        destroyed = [r.id for r in records if r.status == GraphStatus.DESTROYED]
        if not destroyed:
            state = records[-1].status if records else "unknown"
            raise StreamGraphStateError(f"purge stream graph records {fqn}: no destroyed run to purge (status: {state}); "
                                        "drop_stream_graph first")
        self.store.delete_graphs(destroyed)
        return len(destroyed)

    def recover(self) -> list[str]:
        """Resume, in the background, every graph that was running when the previous master stopped.

        Each graph is ``building`` at once and becomes ``running`` when its queries have started, or
        ``failed`` with the reason when it cannot; one graph's failure holds up no other. Returns the
        names of the graphs being resumed.
        """
        todo = [rec for rec in self.store.list_graphs() if rec.status in RESUMABLE]
        for rec in todo:
            self.set_status(rec, GraphStatus.BUILDING, action="resume")
            self._recovering[rec.fqn] = threading.Event()
        if todo:
            self._recovery = threading.Thread(target=self._recover_all, args=(todo,), name="headwater-recovery",
                                              daemon=True)
            self._recovery.start()
        return [rec.fqn for rec in todo]

    def _recover_all(self, records: list[GraphRecord]) -> None:
        for rec in records:
            try:
                if not self._closing.is_set():  # on close, the rest stay 'building' and resume next time
                    self._resume(rec)
            except ExecutionError as exc:  # the graph is 'failed' with the reason; the others still resume
                after = self.store.active_graph(rec.fqn)
                if after is not None and after.status == GraphStatus.ERROR and is_disk_full(exc):
                    self.supervisor.wait_for_space(after, str(exc))  # left in 'error' by _start: it waits for room
                    continue
                log.error("%s", exc)
            finally:
                self._recovering.pop(rec.fqn).set()

    @recorded(EventType.RECOVER)
    def _resume(self, rec: GraphRecord) -> None:
        """Start a graph that was running when the previous master stopped; a graph that cannot resume is
        ``failed`` and this raises :class:`ExecutionError` with the reason (its RECOVER event ends ``failed``)."""
        try:
            logical: LogicalGraph = _definition(rec)
            physical = plan(logical)
        except Exception as exc:  # the stored definition no longer loads (e.g. a user module was removed)
            reason = f"cannot load its stored definition: {type(exc).__name__}: {shorten(str(exc), 400)}"
            self.set_status(rec, GraphStatus.FAILED, reason, action="resume")
            raise ExecutionError(f"stream graph {rec.fqn} {reason}") from None
        changes = plan_changes(json.loads(rec.graph_json), to_json(logical, physical))
        if changes:  # its checkpoints and state belong to another plan: running would silently orphan them
            reason = (f"its plan changed since it was submitted, so its state cannot be reused: {'; '.join(changes[:3])}"
                      f"{f' (and {len(changes) - 3} more)' if len(changes) > 3 else ''}; drop it and submit it again")
            self.set_status(rec, GraphStatus.FAILED, reason, action="resume")
            raise ExecutionError(f"stream graph {rec.fqn} {reason}")
        self._start(rec, logical, physical, action="resume")  # stores 'failed' with the reason, and raises

    def is_recovering(self, fqn: str) -> bool:
        """Whether ``fqn`` is being resumed in the background (the supervisor leaves it alone meanwhile)."""
        return fqn in self._recovering

    def _await_recovery(self, fqn: str, timeout: float | None = None) -> bool:
        """Wait until ``fqn`` is no longer being resumed; False if ``timeout`` ran out first."""
        event = self._recovering.get(fqn)
        return event is None or event.wait(timeout)

    def _active(self, fqn: FQN) -> GraphRecord:
        rec = self.store.active_graph(str(fqn))
        if rec is None:
            known = sorted({g.fqn for g in self.store.list_graphs() if g.status != "destroyed"})
            raise CatalogError(f"stream graph {fqn} does not exist; known graphs: {', '.join(known) or 'none'}")
        return rec

    def wait_until_caught_up(self, fqn: FQN, timeout: float) -> None:
        """Return once the graph has processed everything appended so far (see :meth:`catch_up`)."""
        run_steps(self.catch_up(fqn, timeout))

    def catch_up(self, fqn: FQN, timeout: float) -> Generator[float, None, None]:
        """Wait for the graph to process everything appended so far, one non-blocking look at a time: each item
        is the pause before the next look, and the iterator ends once the graph has caught up. The HTTP server
        drives it from its event loop, so that a wait holds no thread between looks.

        A failure met on the way is the supervisor's (it restarts the graph from its checkpoints, up to
        ``consecutive_failures`` times in a row) and the wait goes on, as it does while the graph is resumed or
        waits for disk space; a graph that ends ``failed`` raises :class:`ExecutionError` with the reason, one
        stopped meanwhile :class:`StreamGraphStateError`, and a wait past ``timeout`` :class:`CaughtUpTimeout`
        saying where the graph is.
        """
        timeout = min(max(float(timeout), 0.0), MAX_WAIT_SECONDS)
        deadline = time.monotonic() + timeout
        pause = FIRST_LOOK_S
        while self.is_recovering(str(fqn)):
            if time.monotonic() > deadline:
                raise CaughtUpTimeout(f"stream graph {fqn} is still resuming after {timeout:.0f}s")
            yield pause
            pause = min(pause * 2, LOOK_EVERY_S)
        rec = self._active(fqn)
        if rec.status in (GraphStatus.FAILED, GraphStatus.STOPPED):
            raise StreamGraphStateError(f"stream graph {fqn} is {rec.status}" + (f": {rec.reason}" if rec.reason else ""))
        physical = from_json(rec.graph_json, load_callables=False)[1]
        if physical is None:
            raise StreamGraphStateError(f"stream graph {fqn} has no physical plan (it never started)")
        caught_up = CatchUp(physical, self._table_paths(physical), self._graph_paths(rec.fqn).checkpoints)
        while True:
            now = self._active(fqn)
            if now.status == GraphStatus.FAILED:
                raise ExecutionError(f"stream graph {fqn} {now.reason}")
            if now.status == GraphStatus.STOPPED:
                raise StreamGraphStateError(f"stream graph {fqn} was stopped while waiting for it to catch up")
            # caught up once it runs again (not while restarted or waiting for room) and has processed it all
            if now.status == GraphStatus.RUNNING and rec.fqn not in self.supervisor.disk_waits and caught_up.look():
                return
            if time.monotonic() > deadline:
                waiting = self.supervisor.disk_waits.describe(rec.fqn)
                raise CaughtUpTimeout(f"stream graph {fqn} " + (waiting or (
                    f"did not catch up within {timeout:.0f}s: {caught_up.describe()}; it is {now.status}"
                    + (f": {shorten(now.reason, 400)}" if now.reason else ""))))
            yield pause
            pause = min(pause * 2, LOOK_EVERY_S)

    def data_lineage(self, fqn: FQN) -> list[dict[str, Any]]:
        """Orca's getOrcaDataLineage for a table: each graph run that reads or writes it (``is_deleted`` for
        dropped runs), and from which tables the writers compute it (``upstream``)."""
        table = self.table_info(fqn).fqn
        rows = []
        for rec in self.store.list_graphs():
            physical = from_json(rec.graph_json, load_callables=False)[1]
            if physical is None:
                continue
            reads = any(getattr(physical.nodes[sg.input], "fqn", None) == table for sg in physical.subgraphs)
            writers = [sg for sg in physical.subgraphs
                       if any(getattr(physical.nodes[o], "fqn", None) == table for o in sg.outputs)]
            if reads or writers:
                upstream = sorted({str(getattr(physical.nodes[sg.input], "fqn", "")) for sg in writers})
                rows.append({"graph": rec.fqn, "run": rec.id, "is_deleted": rec.status == GraphStatus.DESTROYED,
                             "reads": reads, "writes": bool(writers), "upstream": ",".join(upstream)})
        return rows

    def task_subscription_meta(self, fqn: FQN | None) -> list[dict[str, Any]]:
        """Orca's getOrcaStreamTaskSubscriptionMeta, with each task's lag (:mod:`headwater.runtime.lag`)."""
        rows: list[dict[str, Any]] = []
        for rec, physical, checkpoints in self._checkpointed_graphs(fqn):
            lags = graph_lag(physical, self._table_paths(physical), checkpoints)
            rows.extend({"graph": rec.fqn, **row} for row in subscription_rows(physical, lags))
        return rows

    def warmup(self, engine: FQN, data: pa.Table) -> int:
        """Warm an engine of a running graph (found by its name in the engine's catalog)."""
        rec, node = self._running_engine(engine)
        spec: Any = node.spec
        data = _conform_warmup(engine, spec.input_schema, data)
        return int(self.worker.request(protocol.Warmup(rec.fqn, node.name, arrow_bytes(data))))

    def control_engine(self, engine: FQN, op: dict[str, Any]) -> int:
        """Apply a change to a running engine's state (the rule engine's ``update_rule``/``delete_rule``), checked
        by the engine's spec first; it is kept in the engine's state snapshots. Returns the tasks changed."""
        rec, node = self._running_engine(engine)
        check = getattr(node.spec, "check_control", None)
        if check is None:
            raise GraphDefinitionError(f"stream engine {engine} ({node.type}) accepts no changes while it runs")
        return int(self.worker.request(protocol.ControlEngine(rec.fqn, node.name, json.dumps(check(op)))))

    def _running_engine(self, engine: FQN) -> tuple[GraphRecord, EngineNode]:
        if self._recovery is not None:
            self._recovery.join()
        for rec in self.store.list_graphs():
            if rec.status != "running":
                continue
            logical: LogicalGraph = _definition(rec)
            for node in logical.nodes.values():
                if isinstance(node, EngineNode) and node.fqn == str(engine):
                    return rec, node
        raise CatalogError(f"stream engine {engine} is not part of a running graph")

    def engine_graph(self, engine: str) -> str | None:
        """The running graph that holds stream engine ``engine`` (its owner owns the engine), or None."""
        try:
            return self._running_engine(engine)[0].fqn  # type: ignore[arg-type]
        except CatalogError:
            return None

    @recorded(EventType.DROP)
    @one_per_graph
    def drop_graph(self, fqn: FQN, include_tables: bool) -> None:
        self._await_recovery(str(fqn))
        rec = self._active(fqn)
        logical: LogicalGraph = _definition(rec)
        public = [n.fqn for n in logical.nodes.values() if isinstance(n, TableNode)]
        if include_tables:
            for t in public:
                others = [g for g in self.store.refs_of_table(t) if g != rec.fqn]
                if others:
                    raise GraphDefinitionError(
                        f"drop_stream_graph({fqn.name!r}, include_tables=True): table {t} is also used by {', '.join(others)}; "
                        "drop that graph first or keep the tables with include_tables=False"
                    )
        self.set_status(rec, GraphStatus.DESTROYING, action="drop")
        self.worker.request(protocol.StopGraph(rec.fqn))
        for table in self.store.list_tables():
            if table.owner_graph == rec.fqn:
                self._delete_table(table)
        self.store.drop_refs(rec.fqn)
        if include_tables:
            for t in public:
                trec = self.store.get_table(t)
                if trec is not None and not self.store.refs_of_table(t):
                    self._delete_table(trec)
        shutil.rmtree(self._graph_paths(rec.fqn).root, ignore_errors=True)
        self.set_status(rec, GraphStatus.DESTROYED, action="drop")

    def graph_info(self, fqn: FQN) -> dict[str, Any]:
        """The graph's status, reason and stored JSON document (Orca's getStreamGraphInfo)."""
        rec = self._active(fqn)
        return {"id": rec.id, "fqn": rec.fqn, "status": rec.status, "reason": rec.reason,
                "document": json.loads(rec.graph_json)}

    def engine_meta(self, fqn: FQN) -> list[dict[str, Any]]:
        """One row per engine and stream task: task_id, name, type, schema (output columns), fqn, and the
        counters of its newest state (keys, late_rows; None where the engine has none)."""
        graphs = self._checkpointed_graphs(fqn)
        return [row for _, physical, checkpoints in graphs for row in engine_rows(physical, checkpoints)]

    # -- checkpoints (Orca A.7) ------------------------------------------------------------------------
    def checkpoint_settings(self, fqn: str) -> CheckpointConfig:
        return CheckpointConfig.from_json(self.store.checkpoint_config(fqn))

    def checkpoint_config(self, fqn: FQN) -> dict[str, Any]:
        return self.checkpoint_settings(self._active(fqn).fqn).to_dict()

    def set_checkpoint_config(self, fqn: FQN, config: CheckpointConfig) -> None:
        """Store a graph's checkpoint configuration; it applies from the graph's next start or restart."""
        self.store.set_checkpoint_config(self._active(fqn).fqn, config.to_json())

    def _checkpointed_graphs(self, fqn: FQN | None) -> list[tuple[GraphRecord, PhysicalGraph, Path]]:
        records = [self._active(fqn)] if fqn is not None else \
            [r for r in self.store.list_graphs() if r.status != GraphStatus.DESTROYED]
        out = []
        for rec in records:
            physical = from_json(rec.graph_json, load_callables=False)[1]
            if physical is not None:
                out.append((rec, physical, self._graph_paths(rec.fqn).checkpoints))
        return out

    def checkpoint_jobs(self, fqn: FQN | None) -> list[dict[str, Any]]:
        return [row for rec, physical, checkpoints in self._checkpointed_graphs(fqn)
                for row in job_rows(rec, physical, checkpoints, self.checkpoint_settings(rec.fqn).max_retained_checkpoints)]

    def checkpoint_subjobs(self, fqn: FQN | None) -> list[dict[str, Any]]:
        return [row for rec, physical, checkpoints in self._checkpointed_graphs(fqn)
                for row in subjob_rows(rec, physical, checkpoints)]

    def state_machine_events(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The master's newest events, oldest first (headwater.runtime.events)."""
        return self.store.list_events(limit)

    def graph_meta(self, fqn: FQN | None) -> list[dict[str, Any]]:
        rows = []
        for rec in self.store.list_graphs(None if fqn is None else str(fqn)):
            tasks = []
            if rec.status not in ("destroyed",):
                with contextlib.suppress(Exception):  # a definition that no longer loads: its reason says so
                    tasks = self.worker.request(protocol.TaskStatus(rec.fqn, rec.graph_json))
            rows.append({"id": rec.id, "fqn": rec.fqn, "status": rec.status, "semantics": rec.semantics,
                         "tasks": tasks, "create_time": rec.create_time, "reason": rec.reason})
        return rows

    # -- SQL --------------------------------------------------------------------------------------------
    def sql(self, query: object, *, current_catalog: str | None,
            check_read: Callable[[str], None] | None = None) -> tuple[Path, pa.Schema]:
        """Run a read-only query; returns the directory of its Parquet result files and their schema.

        ``check_read``: called with each table the query reads, before any row is; it raises to refuse."""
        outcome = "refused"
        try:
            public = {t.fqn: t.path for t in self.store.list_tables() if not t.private}
            q = prepare(query, public, current_catalog)
            if check_read is not None:
                for table in sorted({f for f, _ in q.views.values()}):
                    check_read(table)
            outcome = "failed"
            reply = self.worker.request(protocol.RunSql(q.source, q.text, [[v, f, p] for v, (f, p) in q.views.items()],
                                               sorted(q.cte_names), self.sql_limits.to_dict()))
            outcome = "ok"
        except SqlCancelled:
            outcome = "cancelled"
            raise
        finally:
            self.sql_outcomes[outcome] = self.sql_outcomes.get(outcome, 0) + 1  # /metrics
        # the master deletes this directory once streamed: only one of the data directory's SQL results
        directory = sql_result(self.data_dir, str(reply["path"]))
        return directory, pa.ipc.read_schema(pa.py_buffer(reply["schema"]))

    def workers(self) -> list[dict[str, Any]]:
        """The workers this master places graphs on, as their last heartbeats saw them."""
        return list(self.worker.describe())

    def progress(self, fqn: FQN) -> dict[str, Any]:
        """Per subgraph: last committed micro-batch, rows and the per-stage time split (this session)."""
        return dict(self.worker.request(protocol.Progress(str(fqn))))

    def close(self) -> None:
        self._closing.set()
        self.compactor.stop()
        self.supervisor.stop()
        if self._recovery is not None:
            self._recovery.join()
        try:
            if self.worker.stops_with_master:  # a worker process of its own keeps running its graphs
                self.worker.request(protocol.Shutdown())
            self.store.dispose()
        finally:
            self._lock.release()


def run_steps(steps: Generator[float, None, Any]) -> Any:
    """Carry out a wait written one look at a time (``catch_up``, ``table_changes_steps``) in this thread: sleep
    each pause it yields; return what it returns. (The HTTP server drives the same generators from its event
    loop instead.) A commit in this process ends a pause early (:mod:`headwater.runtime.wakeup`)."""
    while True:
        # counted before the look: a commit during it ends the pause after it at once
        seen, looked = TABLE_COMMITS.beats, time.monotonic()
        try:
            pause = next(steps)
        except StopIteration as done:
            return done.value
        TABLE_COMMITS.wait(pause, since=seen, not_before=next_look(looked, pause))


def _definition(rec: GraphRecord) -> LogicalGraph:
    """The logical graph a record stores (its JSON document; user functions stay opaque bytes: the master never
    unpickles, see docs/security.md)."""
    return from_json(rec.graph_json, load_callables=False)[0]


def _conform_warmup(engine: FQN, schema: Schema, data: pa.Table) -> pa.Table:
    """Warm-up rows with exactly the engine's input columns and types, or a SchemaError saying what differs."""
    missing = [n for n in schema.names if n not in data.column_names]
    if missing:
        raise SchemaError(f"warm-up of {engine}: the data lacks column(s) {clip(missing, 300)}; the engine's input is "
                          f"{clip(str(schema), 600)}")
    try:
        return data.select(list(schema.names)).cast(schema.to_arrow(), safe=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise SchemaError(f"warm-up of {engine}: the data does not fit the engine's input {clip(str(schema), 600)}: "
                          f"{shorten(str(exc), 300)}") from None

