"""The Stream Master: catalog, graph state machine and metadata, in process for the embedded mode.

Graph states: ``building -> running -> destroying -> destroyed``; a failed query moves
its graph to ``failed`` with the reason. Every transition is persisted, so a new
master on the same data directory resumes the graphs that were running — in the
background, each on its own (``recover``), so a session is usable at once.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from headwater.catalog import FQN
from headwater.errors import (
    CatalogError,
    CaughtUpTimeout,
    ExecutionError,
    GraphDefinitionError,
    SchemaError,
    shorten,
)
from headwater.faults import fault_point
from headwater.plan.logical import LogicalGraph, TableNode
from headwater.plan.physical import PhysicalGraph, plan
from headwater.plan.render import dumps, to_json
from headwater.sql.policy import prepare
from headwater.storage.locks import lock_data_dir, remove_unlocked_dirs
from headwater.storage.metadata import GraphRecord, MetadataStore, TableRecord, load_definition
from headwater.storage.stream_table import StreamTable, remove_orphan_files
from headwater.types import Schema

log = logging.getLogger(__name__)

# Spark Python workers of a killed session may take a moment to exit; their files are spared that long.
ORPHAN_MIN_AGE_S = 10.0

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
    def __init__(self, data_dir: Path, *, spark_master: str, trigger_interval: timedelta) -> None:
        from headwater.runtime.worker import Worker  # the worker is the only part that touches Spark

        self.data_dir = Path(data_dir)
        self._lock = lock_data_dir(self.data_dir)  # held for the session's life: no other writer from here on
        try:
            self.store = MetadataStore.in_directory(self.data_dir)
            self.remove_leftovers()
        except BaseException:
            self._lock.release()
            raise
        self.worker = Worker(self.data_dir, spark_master=spark_master, trigger_interval=trigger_interval)
        self._tables: dict[str, StreamTable] = {}
        self._recovering: dict[str, threading.Event] = {}  # graphs being resumed in the background
        self._recovery: threading.Thread | None = None
        self._closing = threading.Event()

    def remove_leftovers(self, *, min_age: float = ORPHAN_MIN_AGE_S) -> tuple[int, int]:
        """Delete what killed processes left: data files no commit references, dead Spark scratch.

        Returns the (files, bytes) removed from stream table directories; Spark scratch
        directories of dead processes (``<data_dir>/tmp/<id>/`` with a free lock) go as a whole.

        The data files were written by an append or a micro-batch task that a killed process cut off
        before its commit. Runs at start, while this master holds the data directory lock and
        before any graph resumes, so no writer can still commit them; see
        :func:`~headwater.storage.stream_table.remove_orphan_files` for the safety argument and
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

    def create_public_table(self, fqn: FQN, schema: Schema, kind: str, keys: tuple[str, ...], time_column: str | None) -> None:
        if self.store.get_table(str(fqn)) is not None:
            raise CatalogError(f"stream table {fqn} already exists")
        self.store.put_table(self._create_table_files(str(fqn), self._public_table_path(str(fqn)), schema, kind,
                                                      keys, time_column, None))

    @staticmethod
    def _create_table_files(fqn: str, path: Path, schema: Schema, kind: str, keys: tuple[str, ...],
                            time_column: str | None, owner: str | None) -> TableRecord:
        """Create an empty table directory (idempotent) and return the record that makes it visible."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():  # left by an interrupted drop or submit: nothing in the catalog points at it
            shutil.rmtree(path)
        StreamTable.create(path, schema, kind=kind, key_columns=keys, time_column=time_column)
        return TableRecord(fqn, str(path), kind, schema, keys, time_column, owner)

    def drop_public_table(self, fqn: FQN) -> None:
        rec = self.table_info(fqn)
        refs = self.store.refs_of_table(rec.fqn)
        if refs:
            raise CatalogError(f"stream table {fqn} is used by graph(s) {', '.join(refs)}; drop them first")
        self._delete_table(rec)

    def _delete_table(self, rec: TableRecord) -> None:
        self._tables.pop(rec.fqn, None)
        self.store.delete_table(rec.fqn)
        shutil.rmtree(rec.path, ignore_errors=True)

    def append(self, fqn: FQN, data: pa.Table) -> int:
        """Append rows; return the committed version (the current one if a keyed table dropped every row)."""
        table = self._table(self.table_info(fqn))
        version = table.append(data)
        return table.version() if version is None else version

    def append_once(self, fqn: FQN, data: pa.Table, *, client_id: str, sequence: int) -> int:
        """Append rows at most once per (client, table, sequence); return the version holding them."""
        return self._table(self.table_info(fqn)).append_once(data, app_id=client_app_id(client_id), sequence=sequence)

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

    def _table_stats(self, rec: TableRecord) -> dict[str, int | None]:
        """Latest version and row count from the table's log; None for a table whose directory is gone."""
        try:
            table = self._table(rec)
            return {"version": table.version(), "rows": table.row_count()}
        except CatalogError:  # listed, but its directory was removed behind the catalog's back
            return {"version": None, "rows": None}

    # -- graphs -----------------------------------------------------------------------------------------
    def submit(self, logical: LogicalGraph, physical: PhysicalGraph) -> None:
        """Store and start a graph; resubmitting the same definition finishes what a crash left half done."""
        fqn = logical.fqn
        self._await_recovery(fqn)
        graph_json = dumps(to_json(logical, physical))
        existing = self.store.active_graph(fqn)
        if existing is not None:
            if existing.graph_json != graph_json:
                raise CatalogError(
                    f"stream graph {fqn} already exists (status {existing.status}) with a different definition; "
                    f"its state would be orphaned — drop it first with drop_stream_graph({fqn.split('.')[-1]!r}) "
                    "or choose another name"
                )
            if existing.status in ("running", "building") and self.worker.is_running(fqn):
                return
            self._start(existing, logical, physical)
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
            new_tables.append(self._create_table_files(node.fqn, path, node.schema, node.table_kind,
                                                       node.key_columns, node.time_column, owner))
            fault_point("submit.after_first_table")
        fault_point("submit.before_metadata")
        graph_id = self.store.create_graph(fqn, logical, graph_json, SEMANTICS, new_tables=new_tables,
                                           refs=[t.fqn for t in physical.tables() if not t.private])
        fault_point("submit.after_metadata")
        rec = self.store.active_graph(fqn)
        assert rec is not None and rec.id == graph_id
        self._start(rec, logical, physical)

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
                raise CatalogError(f"stream table name {node.fqn} is taken by a private table of graph {rec.owner_graph}")
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

    def _start(self, rec: GraphRecord, logical: LogicalGraph, physical: PhysicalGraph) -> None:
        self.store.set_status(rec.id, "building")
        try:
            self.worker.start_graph(rec.fqn, physical, self._table_paths(physical), self._graph_paths(rec.fqn).checkpoints,
                                    run_id=str(rec.id))
        except Exception as exc:
            reason = f"{type(exc).__name__}: {shorten(str(exc), 600)}"
            self.store.set_status(rec.id, "failed", reason)
            raise ExecutionError(f"stream graph {rec.fqn} failed to start: {reason}") from exc
        self.store.set_status(rec.id, "running")

    def recover(self) -> list[str]:
        """Resume, in the background, every graph that was running when the previous master stopped.

        Each graph is ``building`` at once and becomes ``running`` when its queries have started, or
        ``failed`` with the reason when it cannot; one graph's failure holds up no other. Returns the
        names of the graphs being resumed.
        """
        todo = [rec for rec in self.store.list_graphs() if rec.status in ("running", "building", "error")]
        for rec in todo:
            self.store.set_status(rec.id, "building")
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
            finally:
                self._recovering.pop(rec.fqn).set()

    def _resume(self, rec: GraphRecord) -> None:
        try:
            logical: LogicalGraph = load_definition(rec)
            physical = plan(logical)
        except Exception as exc:  # the stored definition no longer loads (e.g. a user module was removed)
            reason = f"cannot load its stored definition: {type(exc).__name__}: {shorten(str(exc), 400)}"
            self.store.set_status(rec.id, "failed", reason)
            log.error("stream graph %s %s", rec.fqn, reason)
            return
        try:
            self._start(rec, logical, physical)
        except ExecutionError as exc:  # _start stored 'failed' with the reason
            log.error("%s", exc)

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
        deadline = time.monotonic() + timeout
        if not self._await_recovery(str(fqn), timeout):
            raise CaughtUpTimeout(f"stream graph {fqn} is still resuming after {timeout:.0f}s")
        rec = self._active(fqn)
        if rec.status == "failed":
            raise ExecutionError(f"stream graph {fqn} is failed: {rec.reason}")
        try:
            self.worker.wait_until_caught_up(rec.fqn, max(deadline - time.monotonic(), 0.0))
        except ExecutionError as exc:
            self.store.set_status(rec.id, "failed", str(exc))
            raise

    def warmup(self, engine: FQN, data: pa.Table) -> int:
        """Warm an engine of a running graph (found by its name in the engine's catalog)."""
        if self._recovery is not None:
            self._recovery.join()
        for rec in self.store.list_graphs():
            if rec.status != "running":
                continue
            logical: LogicalGraph = load_definition(rec)
            for node in logical.nodes.values():
                if getattr(node, "fqn", None) == str(engine):
                    return self.worker.warmup(rec.fqn, node.name, data)
        raise CatalogError(f"stream engine {engine} is not part of a running graph")

    def drop_graph(self, fqn: FQN, include_tables: bool) -> None:
        self._await_recovery(str(fqn))
        rec = self._active(fqn)
        logical: LogicalGraph = load_definition(rec)
        public = [n.fqn for n in logical.nodes.values() if isinstance(n, TableNode)]
        if include_tables:
            for t in public:
                others = [g for g in self.store.refs_of_table(t) if g != rec.fqn]
                if others:
                    raise GraphDefinitionError(
                        f"drop_stream_graph({fqn.name!r}, include_tables=True): table {t} is also used by {', '.join(others)}; "
                        "drop that graph first or keep the tables with include_tables=False"
                    )
        self.store.set_status(rec.id, "destroying")
        self.worker.stop_graph(rec.fqn)
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
        self.store.set_status(rec.id, "destroyed")

    def graph_meta(self, fqn: FQN | None) -> list[dict[str, Any]]:
        rows = []
        for rec in self.store.list_graphs(None if fqn is None else str(fqn)):
            tasks = []
            if rec.status not in ("destroyed",):
                with contextlib.suppress(Exception):  # a definition that no longer loads: its reason says so
                    tasks = self.worker.task_status(rec.fqn, plan(load_definition(rec)))
            rows.append({"id": rec.id, "fqn": rec.fqn, "status": rec.status, "semantics": rec.semantics,
                         "tasks": tasks, "create_time": _ts(rec.create_time), "reason": rec.reason})
        return rows

    # -- SQL --------------------------------------------------------------------------------------------
    def sql(self, query: object, *, current_catalog: str | None) -> pa.Table:
        public = {t.fqn: t.path for t in self.store.list_tables() if not t.private}
        return self.worker.sql(prepare(query, public, current_catalog))

    def close(self) -> None:
        self._closing.set()
        if self._recovery is not None:
            self._recovery.join()
        try:
            self.worker.close()
            self.store.dispose()
        finally:
            self._lock.release()


def _ts(seconds: float) -> Any:
    import pandas as pd

    return pd.Timestamp(seconds, unit="s")
