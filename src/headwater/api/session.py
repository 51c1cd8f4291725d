"""``Session``: the user's entry point (``hw.connect()``)."""

from __future__ import annotations

import re
import shutil
import uuid
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from headwater.api.graph import StreamGraph
from headwater.catalog import FQN, check_identifier, resolve
from headwater.dataplane.engine_stats import TIMER_COLUMNS
from headwater.errors import (
    GraphDefinitionError,
    SchemaError,
    clip,
    shorten,
)
from headwater.plan.document import dumps, to_json
from headwater.plan.logical import LogicalGraph
from headwater.plan.physical import PhysicalGraph
from headwater.runtime.access import AccessControl
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.runtime.gateway import Gateway
from headwater.runtime.master import Master
from headwater.runtime.operations import OPERATIONS, MasterApi, Operation
from headwater.storage.records import TableRecord
from headwater.storage.retention import Retention
from headwater.types import Schema

LOCAL_USER = "admin"  # who an embedded session acts as (it owns what it creates)


class SqlResult:
    """The rows of :meth:`Session.sql`, read lazily from the result files Spark wrote.

    ``to_batches()`` streams them in bounded memory (a result of any size); ``to_arrow()`` and
    ``to_pandas()`` load them whole. The files live under the data directory until ``close()``, the
    result being garbage-collected, or the next session start.
    """

    def __init__(self, directory: Path, schema: pa.Schema) -> None:
        self._files = sorted(directory.glob("part-*.parquet"))  # Spark's part order is the query's order
        self.schema = schema
        self._cleanup = weakref.finalize(self, shutil.rmtree, directory, True)

    def to_batches(self, batch_size: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Yield the rows as Arrow record batches of at most ``batch_size`` rows, in the query's order."""
        for file in self._files:
            for batch in pq.ParquetFile(file).iter_batches(batch_size=batch_size, use_threads=False):
                yield pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()

    def close(self) -> None:
        """Delete the result files now."""
        self._cleanup()

    def __len__(self) -> int:
        return sum(pq.ParquetFile(f).metadata.num_rows for f in self._files)

    def __repr__(self) -> str:
        return f"<SqlResult rows={len(self)} columns={self.schema.names}>"


def to_arrow_table(data: object, *, where: str) -> pa.Table:
    """Rows a user hands in (pandas or Arrow) as an Arrow table, or a :class:`SchemaError` naming the column.

    >>> to_arrow_table(pd.DataFrame({"px": [1.0, "n/a"]}), where="append to t")
    Traceback (most recent call last):
    ...
    headwater.errors.SchemaError: append to t: column 'px' holds values that do not fit one type (e.g. 'n/a' among numbers): Could not convert 'n/a' with type str: tried to convert to double; clean or cast the column first
    """
    if isinstance(data, pa.Table):
        return data
    if not isinstance(data, pd.DataFrame):
        raise SchemaError(f"{where}: expected a pandas DataFrame or a pyarrow Table, got {type(data).__name__}")
    names = [str(c) for c in data.columns]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise SchemaError(f"{where}: the frame has the column(s) {clip(repeated)} more than once; keep one of each")
    try:
        return pa.Table.from_pandas(data, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        for name in data.columns:
            try:
                pa.array(data[name], from_pandas=True)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as col_exc:
                raise SchemaError(
                    f"{where}: column {clip(str(name), 120)} holds values that do not fit one type (e.g. 'n/a' among "
                    f"numbers): {shorten(str(col_exc).splitlines()[0], 300)}; clean or cast the column first"
                ) from None
        raise SchemaError(f"{where}: the frame cannot be converted to Arrow: {shorten(str(exc), 300)}") from None


CLIENT_ID_MAX_LENGTH = 64
SUBSCRIPTION_COLUMNS = ["graph", "task_id", "table_name", "action_name", "processed_version", "latest_version",
                        "pending_versions", "pending_rows", "last_batch_id", "last_batch_age_s", "last_batch_s"]
_CLIENT_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{CLIENT_ID_MAX_LENGTH - 1}}}")  # fullmatch: no trailing newline


def check_client_id(client_id: str) -> str:
    """Return ``client_id`` if it is 1-64 letters, digits, ``_``, ``.`` or ``-`` starting with a letter or digit."""
    if not isinstance(client_id, str) or not _CLIENT_ID.fullmatch(client_id):
        raise GraphDefinitionError(
            f"connect(client_id=...): {client_id!r} is not a valid client id; use 1 to {CLIENT_ID_MAX_LENGTH} "
            "letters, digits, '_', '.' or '-', starting with a letter or digit, e.g. 'feed_handler-1'"
        )
    return client_id


class Session:
    """A connection to Headwater: catalog, graphs, tables, SQL (embedded, or to a master over HTTP)."""

    def __init__(self, master: MasterApi, *, client_id: str | None = None, data_dir: Path | None = None) -> None:
        # master: a Gateway to the embedded Master, or headwater.service.client.RemoteMaster (the same operations
        # over HTTP): both implement the one declaration of the master's operations
        self.data_dir = data_dir
        self._catalog: str | None = None
        self._client_id = uuid.uuid4().hex if client_id is None else check_client_id(client_id)
        self._master = master

    @classmethod
    def embedded(cls, master: Master, *, client_id: str | None = None, data_dir: Path | None = None) -> Session:
        """A session on a master in this process (what ``connect(path)`` returns)."""
        # the process that holds the data directory may do anything there: as an admin, nothing is refused
        return cls(Gateway(master, AccessControl(master.store), LOCAL_USER, trusted=True), client_id=client_id,
                   data_dir=data_dir)

    @property
    def client_id(self) -> str:
        """The id under which :meth:`append` with ``sequence=`` records its appends."""
        return self._client_id

    # -- catalog ------------------------------------------------------------------------------------
    def use_catalog(self, name: str) -> None:
        """Select the catalog that completes bare names (``use catalog demo``)."""
        self._catalog = check_identifier(name, what="catalog")

    @property
    def current_catalog(self) -> str | None:
        return self._catalog

    def stream_graph(self, name: str) -> StreamGraph:
        """Start declaring a stream graph named ``name`` (bare or ``catalog.stream_graph.name``)."""
        # Declaring is always allowed; submit() decides between resuming and refusing a conflict.
        return StreamGraph(self, resolve(name, "stream_graph", current_catalog=self._catalog))

    # -- data -----------------------------------------------------------------------------------------
    def append(self, table: str, data: pd.DataFrame | pa.Table, *, sequence: int | None = None) -> int:
        """Append rows to a public stream table as one commit; return the committed table version.

        Args:
            table: The public stream table (bare name or ``catalog.stream_table.name``).
            data: A pandas DataFrame or pyarrow Table with the table's columns.
            sequence: Makes the append idempotent per (:attr:`client_id`, table, sequence), like
                Kafka's idempotent producer. The first call commits the rows together with the
                sequence; any later call with the same sequence (a retry after a crash, a lost
                reply, a restarted process that connected with the same ``client_id``) commits
                nothing and returns the version of the first. Sequences must increase per client
                and table (gaps are fine); a sequence older than :meth:`committed_sequence` that
                was never committed raises :class:`SequenceError`.

        Without ``sequence`` every call appends. On a keyed table whose rows were all duplicates
        nothing is committed and the current version is returned.

        Example:
            >>> import headwater as hw, tempfile, pandas as pd
            >>> d = tempfile.mkdtemp()
            >>> s = hw.connect(d, start_spark=False, client_id="feed_1")
            >>> s.create_stream_table("demo.stream_table.px", {"sym": "string", "px": "double"})
            >>> rows = pd.DataFrame({"sym": ["a", "b"], "px": [1.0, 2.0]})
            >>> s.append("demo.stream_table.px", rows, sequence=1)
            1
            >>> s.close()  # say the process died here, not knowing whether sequence 1 landed
            >>> s = hw.connect(d, start_spark=False, client_id="feed_1")
            >>> s.committed_sequence("demo.stream_table.px")
            1
            >>> s.append("demo.stream_table.px", rows, sequence=1)  # a retry: nothing is appended twice
            1
            >>> s.stream_table_meta("demo.stream_table.px")[["version", "rows"]].values.tolist()
            [[1, 2]]
            >>> s.close()
        """
        fqn = resolve(table, "stream_table", current_catalog=self._catalog)
        data = to_arrow_table(data, where=f"append to {fqn}")
        if sequence is not None:
            return self._master.append_once(fqn, data, client_id=self._client_id, sequence=sequence)
        return self._master.append(fqn, data)

    def committed_sequence(self, table: str) -> int | None:
        """Return the highest ``sequence`` this :attr:`client_id` committed to ``table``, or None.

        A restarted client (connected with the same ``client_id``) resumes from the next one.
        """
        fqn = resolve(table, "stream_table", current_catalog=self._catalog)
        return self._master.committed_sequence(fqn, self._client_id)

    def create_stream_table(self, name: str, schema: dict[str, str] | Schema, *, kind: str = "plain",
                            key_column: str | list[str] | None = None, time_column: str | None = None,
                            retention_minutes: float | None = None, retention_rows: int | None = None) -> None:
        """Create a standalone public stream table (Orca's createOrcaStreamTable family).

        ``retention_minutes`` / ``retention_rows``: see :meth:`set_stream_table_retention`.
        """
        fqn = resolve(name, "stream_table", current_catalog=self._catalog)
        keys = (key_column,) if isinstance(key_column, str) else tuple(key_column or ())
        retention = _retention(retention_minutes, retention_rows)
        self._master.create_public_table(fqn, Schema.parse(schema, where=f"stream table {fqn}"), kind, keys, time_column,
                                         retention)

    def set_stream_table_retention(self, name: str, *, minutes: float | None = None, rows: int | None = None) -> None:
        """Bound how far back a public stream table can be replayed (Orca's ``retentionMinutes``).

        Versions older than ``minutes``, or older than the newest ``rows`` rows, are removed in the
        background (with the files only they need); neither removes the rule and keeps every version.
        The table's snapshot, what SQL reads, keeps every row. A graph still reading a removed version
        fails with :class:`~headwater.errors.RetentionError`, which names the first version kept.

        Example:
            >>> import tempfile, headwater as hw
            >>> s = hw.connect(tempfile.mkdtemp())
            >>> s.use_catalog("demo")
            >>> s.create_stream_table("ticks", {"px": "double"})
            >>> s.set_stream_table_retention("ticks", minutes=24 * 60)
            >>> s.stream_table_meta("ticks").loc[0, "retention"]
            '1440 minutes'
            >>> s.close()
        """
        fqn = resolve(name, "stream_table", current_catalog=self._catalog)
        self._master.set_retention(fqn, _retention(minutes, rows))

    def drop_stream_table(self, name: str) -> None:
        """Drop a public stream table no graph references any more."""
        self._master.drop_public_table(resolve(name, "stream_table", current_catalog=self._catalog))

    def sql(self, query: str) -> SqlResult:
        """Run one read-only query over public stream tables (``select * from demo.stream_table.t``).

        Accepted: one ``SELECT`` / ``WITH ... SELECT`` / ``VALUES`` query whose relations are public stream
        tables (``catalog.stream_table.name``, ``stream_table.name`` or a bare name under the current
        catalog) or its own ``WITH`` names, calling Spark's built-in functions of ``docs/sql.md``. Anything
        else (DDL, DML, ``SET``, ``ADD JAR``, ``CACHE``, paths such as ``parquet.`/x```, table functions,
        ``reflect``/``java_method``) raises :class:`~headwater.errors.SqlError` naming what was refused.
        """
        return SqlResult(*self._master.sql(query, current_catalog=self._catalog))

    def subscribe(self, name: str, from_version: int | None = None, *, poll_s: float = 30.0) -> Iterator[pa.Table]:
        """Follow stream table ``name`` without Spark: yield, as each version commits, the rows it added (an Arrow
        table with a ``_version`` column), oldest first, for as long as the loop runs.

        ``from_version``: the first version to yield (to resume, pass the last one seen + 1; each row then comes
        exactly once across restarts of this client or of the master); None: the versions committed from now
        on. Needs ``table_read`` on the table. Each request waits up to ``poll_s`` seconds for a new version.

        >>> import headwater as hw, tempfile, itertools
        >>> s = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> s.create_stream_table("demo.stream_table.t", {"x": "long"})
        >>> s.append("demo.stream_table.t", pa.table({"x": [1, 2]}))
        1
        >>> [t.to_pylist() for t in itertools.islice(s.subscribe("demo.stream_table.t", from_version=1), 1)]
        [[{'x': 1, '_version': 1}, {'x': 2, '_version': 1}]]
        >>> s.close()
        """
        from headwater.runtime.master import UNTIL_VERSION

        fqn = resolve(name, "stream_table", current_catalog=self._catalog)
        after = int(self._master.table_meta(fqn)[0]["version"]) if from_version is None else int(from_version) - 1
        while True:
            changes = self._master.table_changes(fqn, after, poll_s)
            versions = changes.column("_version").to_numpy()
            for version in dict.fromkeys(versions.tolist()):
                yield changes.filter(pc.equal(changes.column("_version"), version)).replace_schema_metadata(None)
            after = int((changes.schema.metadata or {}).get(UNTIL_VERSION.encode(), after))

    # -- graphs ---------------------------------------------------------------------------------------
    def wait_until_caught_up(self, name: str, timeout: float = 120.0) -> None:
        """Block until the graph has processed everything appended so far (or raise CaughtUpTimeout)."""
        self._master.wait_until_caught_up(resolve(name, "stream_graph", current_catalog=self._catalog), timeout)

    def warmup_stream_engine(self, name: str, data: pd.DataFrame | pa.Table) -> int:
        """Build an engine's state from ``data`` without producing output (Orca's warmupOrcaStreamEngine).

        ``name`` is the engine's name (see ``set_engine_name``); ``data`` has the engine's input columns.
        Returns the number of rows used.
        """
        fqn = resolve(name, "stream_engine", current_catalog=self._catalog)
        return self._master.warmup(fqn, to_arrow_table(data, where=f"warm-up of {fqn}"))

    def update_rule(self, engine: str, key: Any, rules: Sequence[str]) -> None:
        """Add or replace the rule set ``key`` of a running rule engine (Orca's updateRule; ``key=None``: the
        default set). The change is kept in the engine's state: it survives stops, crashes and restarts."""
        fqn = resolve(engine, "stream_engine", current_catalog=self._catalog)
        self._master.control_engine(fqn, {"op": "update_rule", "key": key, "rules": list(rules)})

    def delete_rule(self, engine: str, key: Any) -> None:
        """Remove the rule set ``key`` of a running rule engine (Orca's deleteRule); its rows fall back to the
        default set."""
        fqn = resolve(engine, "stream_engine", current_catalog=self._catalog)
        self._master.control_engine(fqn, {"op": "delete_rule", "key": key})

    def stop_timer_engine(self, engine: str) -> None:
        """Pause a running timer engine (Orca's ``useOrcaStreamEngine(name, stopTimerEngine)``): its function is not
        called until :meth:`resume_timer_engine`; the graph's rows flow on. Kept across restarts and failovers."""
        fqn = resolve(engine, "stream_engine", current_catalog=self._catalog)
        self._master.control_engine(fqn, {"op": "stop_timer_engine"})

    def resume_timer_engine(self, engine: str) -> None:
        """Resume a paused timer engine (Orca's resumeTimerEngine): its function runs again every interval."""
        fqn = resolve(engine, "stream_engine", current_catalog=self._catalog)
        self._master.control_engine(fqn, {"op": "resume_timer_engine"})

    def progress(self, name: str) -> dict[str, Any]:
        """Per subgraph: last committed micro-batch and rows written so far in this session."""
        return self._master.progress(self._graph_fqn(name))

    def drop_stream_graph(self, name: str, *, include_tables: bool = False) -> None:
        """Stop and destroy a graph: its queries, checkpoints, state and private tables.

        With ``include_tables=True`` its public tables go too, unless another graph still uses them.
        """
        self._master.drop_graph(resolve(name, "stream_graph", current_catalog=self._catalog), include_tables)

    def stop_stream_graph(self, name: str) -> None:
        """Pause a graph (status ``stopped``): queries stop, state and offsets are kept (Orca's stopStreamGraph)."""
        self._master.stop_graph(self._graph_fqn(name))

    def start_stream_graph(self, name: str) -> None:
        """Resume a stopped graph from where it stopped: nothing appended meanwhile is lost or processed twice."""
        self._master.start_graph(self._graph_fqn(name))

    def resubmit_stream_graph(self, name: str) -> None:
        """Run a ``failed`` graph again from its checkpoints, or a dropped one anew from its stored definition."""
        self._master.resubmit_graph(self._graph_fqn(name))

    def purge_stream_graph_records(self, name: str) -> int:
        """Forget the records of a graph's destroyed runs (``stream_graph_meta`` rows); returns how many."""
        return self._master.purge_records(self._graph_fqn(name))

    # -- what StreamGraph asks of its session (the master stays private to the session) ---------------
    def _submit(self, logical: LogicalGraph, physical: PhysicalGraph, compute_group: str | None = None,
                checkpoint_config: CheckpointConfig | None = None) -> None:
        self._master.submit(dumps(to_json(logical, physical)), compute_group=compute_group,
                            checkpoint_config=checkpoint_config)

    def _table_info(self, fqn: FQN) -> TableRecord:
        return self._master.table_info(fqn)

    def _graph_fqn(self, name: str) -> FQN:
        return resolve(name, "stream_graph", current_catalog=self._catalog)

    def stream_graph_meta(self, name: str | None = None) -> pd.DataFrame:
        """One row per graph: id, fqn, status, semantics, tasks, create_time, reason."""
        fqn = None if name is None else resolve(name, "stream_graph", current_catalog=self._catalog)
        frame = pd.DataFrame(self._master.graph_meta(fqn),
                             columns=["id", "fqn", "status", "semantics", "tasks", "create_time", "reason"])
        frame["create_time"] = pd.to_datetime(frame["create_time"], unit="s")
        return frame

    def stream_graph_info(self, name: str) -> dict[str, Any]:
        """The graph's id, status, reason and its stored JSON document (``document``)."""
        return self._master.graph_info(self._graph_fqn(name))

    def stream_engine_meta(self, name: str) -> pd.DataFrame:
        """One row per engine of graph ``name`` and stream task: task_id, name, type, schema, fqn."""
        return pd.DataFrame(self._master.engine_meta(self._graph_fqn(name)),
                            columns=["task_id", "name", "type", "schema", "fqn"])

    def stream_engine_stat(self, name: str) -> pd.DataFrame:
        """One row per engine of graph ``name`` and stream task (Orca's ``getStreamEngineStat``): task_id, name,
        type, keys (groups in its state), late_rows (rows dropped as late or out of order, counted once even
        when a micro-batch is replayed), state_bytes (its newest state snapshot), of the newest micro-batch that
        read input this task's rows into and out of its chain and the batch's duration (last_batch_s), and
        last_error (the graph's reason while it is in error or failed). NULL where the engine keeps no such counter or no
        micro-batch ran yet. From each task's newest state snapshot and job record. A timer engine adds
        timer_runs, timer_failures (runs whose function raised), timer_paused, and its function's last error
        (in last_error while the graph is not in error), on its first stream task's row only (one timer per
        engine: the columns sum to its counts)."""
        fqn = self._graph_fqn(name)
        frame = pd.DataFrame(self._master.engine_meta(fqn), columns=[
            "task_id", "name", "type", "keys", "late_rows", "state_bytes", "last_batch_rows_in", "last_batch_rows_out",
            "last_batch_s", *TIMER_COLUMNS])
        info = self._master.graph_info(fqn)
        frame["last_error"] = info.get("reason") if info.get("status") in ("error", "failed") else None
        timer_error = frame.pop("timer_last_error").replace("", None)
        frame["last_error"] = frame["last_error"].where(frame["last_error"].notna(), timer_error)
        return frame.astype({"keys": "Int64", "late_rows": "Int64", "state_bytes": "Int64",
                             "last_batch_rows_in": "Int64", "last_batch_rows_out": "Int64",
                             "last_batch_s": "Float64", "timer_runs": "Int64", "timer_failures": "Int64",
                             "timer_paused": "boolean"})

    def checkpoint_config(self, name: str) -> dict[str, Any]:
        """Graph ``name``'s checkpoint configuration (Orca's ``getOrcaCheckpointConfig``), with ``checkpoint_mod``."""
        return dict(self._master.checkpoint_config(self._graph_fqn(name)))

    def set_checkpoint_config(self, name: str, config: dict[str, Any]) -> None:
        """Replace graph ``name``'s checkpoint configuration (Orca's keys, as in ``submit``); it applies from the
        graph's next start or restart."""
        self._master.set_checkpoint_config(self._graph_fqn(name), CheckpointConfig.parse(config))

    def checkpoint_job_info(self, name: str | None = None) -> pd.DataFrame:
        """Checkpoint jobs (Orca's ``getOrcaCheckpointJobInfo``): one row per micro-batch of each subgraph, the
        newest 100 of each: checkpoint_id (batch id), job_id (graph id), partition_id (subgraph),
        created_time, finished_time, status (SUCCESS, PURGED, RUNNING, ERROR, FAILED), input_versions, rows_in,
        rows_out, on_driver, extra. All graphs when ``name`` is None."""
        rows = self._master.checkpoint_jobs(None if name is None else self._graph_fqn(name))
        frame = pd.DataFrame(rows, columns=["checkpoint_id", "job_id", "partition_id", "created_time", "finished_time",
                                            "status", "input_versions", "rows_in", "rows_out", "on_driver", "extra"])
        for column in ("created_time", "finished_time"):
            frame[column] = pd.to_datetime(frame[column], unit="s")
        return frame

    def checkpoint_subjob_info(self, name: str | None = None) -> pd.DataFrame:
        """Checkpoint sub-jobs (Orca's ``getOrcaCheckpointSubjobInfo``): one row per stream task of each recorded
        micro-batch: checkpoint_id, job_id, partition_id, subjob_id (task id), status, rows_in, rows_out (the
        task's rows out of its chain; NULL for a batch recorded before Headwater kept them) and the seconds of
        each stage (read_s, partition_s, kernel_s, state_s, write_s)."""
        rows = self._master.checkpoint_subjobs(None if name is None else self._graph_fqn(name))
        return pd.DataFrame(rows, columns=["checkpoint_id", "job_id", "partition_id", "subjob_id", "status", "rows_in",
                                           "rows_out", "read_s", "partition_s", "kernel_s", "state_s", "write_s"])

    def data_lineage(self, table: str) -> pd.DataFrame:
        """Which graphs read and write stream table ``table`` (Orca's ``getOrcaDataLineage``): graph, run,
        is_deleted (a dropped run), reads, writes, and upstream (the tables its writers compute it from)."""
        fqn = resolve(table, "stream_table", current_catalog=self._catalog)
        return pd.DataFrame(self._master.data_lineage(fqn),
                            columns=["graph", "run", "is_deleted", "reads", "writes", "upstream"])

    def workers(self) -> pd.DataFrame:
        """The workers (Orca's ``getClusterPerf``; admins only): url, group, alive, spark (ready or starting), cpu
        and memory in [0, 1] from the last heartbeat, heartbeat_age_s, the graphs placed there, and the URL of
        its driver's Spark UI (spark_ui; ``headwater worker`` serves one unless ``--spark-ui off``)."""
        return pd.DataFrame(self._master.workers(), columns=["url", "group", "alive", "spark", "cpu", "memory",
                                                             "heartbeat_age_s", "graphs", "spark_ui"])

    def task_subscription_meta(self, name: str | None = None) -> pd.DataFrame:
        """Which table each stream task reads, and how far behind it is (Orca's ``getOrcaStreamTaskSubscriptionMeta``,
        with lag): graph, task_id, table_name, action_name (its subgraph), processed_version (the input version
        its newest committed micro-batch ended at), latest_version (the table's newest), pending_versions and
        pending_rows (committed upstream, not yet processed), last_batch_id, last_batch_age_s (seconds since that
        batch finished) and last_batch_s (its duration). From files: also for a stopped or failed graph, whose lag
        grows while appends go on. All visible graphs when ``name`` is None."""
        rows = self._master.task_subscription_meta(None if name is None else self._graph_fqn(name))
        return pd.DataFrame(rows, columns=SUBSCRIPTION_COLUMNS).astype(
            {"last_batch_id": "Int64", "last_batch_age_s": "Float64", "last_batch_s": "Float64"})

    def state_machine_events(self, limit: int = 1000) -> pd.DataFrame:
        """What the master did, newest ``limit`` events: id, type (SUBMIT, STOP, NODE_DOWN, RECOVER, ...), state
        (running, finished, failed), retries, scheduled_time, start_time, end_time, detail, error_message."""
        frame = pd.DataFrame(self._master.state_machine_events(limit),
                             columns=["id", "type", "state", "retries", "scheduled_time", "start_time", "end_time",
                                      "detail", "error_message"])
        for column in ("scheduled_time", "start_time", "end_time"):
            frame[column] = pd.to_datetime(frame[column], unit="s")
        return frame

    def stream_table_meta(self, name: str | None = None) -> pd.DataFrame:
        """One row per stream table: fqn, kind, visibility, path, graph_refs, version, rows, first_version, retention.

        ``version`` is the latest committed version, ``rows`` the row count (from the log's
        statistics; no data is read), ``first_version`` the oldest version a reader can still
        replay (0 unless retention removed older ones), ``retention`` the table's rule or None.
        """
        fqn = None if name is None else resolve(name, "stream_table", current_catalog=self._catalog)
        return pd.DataFrame(self._master.table_meta(fqn),
                            columns=["fqn", "kind", "visibility", "path", "graph_refs", "version", "rows",
                                     "first_version", "retention"])

    def close(self) -> None:
        """Stop running queries (graphs stay ``running`` in the catalog and resume on the next connect)."""
        self._master.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _retention(minutes: float | None, rows: int | None) -> Retention | None:
    return None if minutes is None and rows is None else Retention(minutes=minutes, rows=rows)


def _access_method(op: Operation) -> Any:
    """A Session method for an access-control operation: the same arguments; listings come as DataFrames."""

    def method(self: Session, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self._master, op.name)(*args, **kwargs)
        return pd.DataFrame(result) if isinstance(result, list) else result

    method.__name__ = op.name
    method.__doc__ = op.function.__doc__
    method.__signature__ = op.signature  # type: ignore[attr-defined]
    return method


# users, groups, privileges and the audit log: derived from their declarations, nothing to add per method
for _op in OPERATIONS.values():
    if _op.on == "access":
        setattr(Session, _op.name, _access_method(_op))
