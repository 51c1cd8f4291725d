"""The Stream Worker: holds one SparkSession and runs the queries of the subgraphs it is given."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from headwater.dataplane.fence import check_fence
from headwater.dataplane.jobs import committed_input_version
from headwater.dataplane.snapshots import KEEP_SNAPSHOTS
from headwater.dataplane.task import SubgraphTask, subgraph_task
from headwater.dataplane.timers import status_path
from headwater.engines.udf import TIMER_OPS, TimerEngine
from headwater.errors import ExecutionError, GraphDefinitionError, WorkerUnavailableError, shorten
from headwater.plan.document import from_json
from headwater.plan.logical import EngineNode
from headwater.plan.physical import PhysicalGraph
from headwater.runtime import protocol
from headwater.runtime.metrics import observe_batch
from headwater.runtime.paths import sql_spool, table_path
from headwater.runtime.protocol import Message, arrow_table, decode, encode
from headwater.runtime.timers import Timer
from headwater.runtime.wakeup import TABLE_COMMITS
from headwater.sql.limits import SqlLimits
from headwater.sql.policy import PreparedQuery
from headwater.tuning import DRIVER_BATCH_ROWS

log = logging.getLogger(__name__)
MAX_AWAIT_COMMIT_S = 60.0  # the longest a master's AwaitCommit request waits for a commit

# Spark waits a fixed 10 s for a Python process it starts to connect back; on a loaded machine importing PySpark
# can take longer. A query that failed so has done nothing yet: starting it again is safe (its checkpoint replays).
TRANSIENT_START_ERRORS = ("Python worker failed to connect back",)
START_ATTEMPTS = 3
# how often a starting graph looks for its queries' first progress: each query is seen running within this of it
# (0.1 s: a second submit's median 0.58 s; 0.02 s: 0.47-0.60 s, three alternating runs of six submits)
START_POLL_SECONDS = 0.02

EPOCH_FILE = "epoch"  # in a graph's checkpoint directory: the epoch of its current placement


@dataclass
class RunningGraph:
    physical: PhysicalGraph
    queries: dict[int, Any]  # subgraph id -> StreamingQuery
    batches: dict[int, int] = field(default_factory=dict)  # subgraph id -> last committed batch id
    rows: dict[int, int] = field(default_factory=dict)
    stats: dict[int, dict[str, float]] = field(default_factory=dict)  # subgraph id -> cumulative rows_in, seconds
    committed: int = 0  # micro-batches committed since this start
    start_args: tuple[Any, ...] = ()  # what start_graph was called with, to restart after a warm-up
    timers: dict[str, Timer] = field(default_factory=dict)  # timer engine name -> its timer (headwater.runtime.timers)


class Worker:
    name = "embedded-worker-0"

    def __init__(self, data_dir: Path, *, spark_master: str, trigger_interval: timedelta,
                 driver_batch_rows: int = DRIVER_BATCH_ROWS, spark_cores: int | None = None,
                 driver_host: str = "127.0.0.1", bind_address: str | None = None, prime_source: bool = False) -> None:
        self.data_dir = data_dir
        # a worker that waits for graphs (moved to it, after a failure) runs Headwater's source once as it starts:
        # their first micro-batch then takes ~0.3 s instead of ~1.3 s, for ~2 s more of start (an embedded session
        # starts its graphs at once, which pays the same second in their first micro-batch instead)
        self.prime_source = prime_source
        self.spark_master = spark_master
        self.trigger_interval = trigger_interval
        self.driver_batch_rows = driver_batch_rows
        self.spark_cores = spark_cores  # on a standalone cluster: the executor cores this worker's driver takes
        self.driver_host, self.bind_address = driver_host, bind_address  # where its Spark driver is reached, listens
        self._spark: Any = None
        self.spark_ui: str | None = None  # the driver's Spark UI, once it runs with one (HEADWATER_SPARK_UI=on)
        self.spark_failure = ""  # why the last attempt to start Spark failed
        self._spark_lock = threading.Lock()  # the recovery thread and the user's thread may both start it
        self._start_lock = threading.RLock()
        self._graphs: dict[str, RunningGraph] = {}
        self._stopping = threading.Event()  # its process is stopping: masters' AwaitCommit requests end at once

    @property
    def spark(self) -> Any:
        with self._spark_lock:
            if self._spark is None:
                from headwater.spark.session import build_spark

                began = time.monotonic()
                # small micro-batches run in this process: load its kernels while the JVM starts
                warming = threading.Thread(target=_warm_up_kernels, name="headwater-kernel-warm-up", daemon=True)
                warming.start()
                try:
                    spark = build_spark(self.spark_master, scratch_root=self.data_dir / "tmp", cores=self.spark_cores,
                                        driver_host=self.driver_host, bind_address=self.bind_address)
                    log.debug("Spark session built after %.1f s", time.monotonic() - began)
                    self._prime(spark, began)
                except Exception as exc:
                    self.spark_failure = _short(exc)
                    raise
                finally:
                    warming.join()
                from headwater.spark.session import spark_ui_url

                self._spark, self.spark_failure, self.spark_ui = spark, "", spark_ui_url(spark)
                log.info("Spark (%s) ready in %.1f s", self.spark_master, time.monotonic() - began)
        return self._spark

    @property
    def spark_state(self) -> str:
        """``ready`` once this worker's Spark driver can run queries, ``starting`` before, or why it failed."""
        if self._spark is not None:
            return "ready"
        return f"failed: {self.spark_failure}" if self.spark_failure else "starting"

    def _prime(self, spark: Any, began: float) -> None:
        """Start now what a graph's first micro-batch would otherwise start: Spark's Python workers, and with
        ``prime_source`` the processes that plan Headwater's source.

        A worker process (``prime_source``) reports ready only once primed. An embedded session starts its
        graphs beside the priming instead: Spark starts a driver's Python processes one at a time (a query's data
        source is created in one forked from the daemon), so what overlaps is the rest of the queries' start; a
        micro-batch that comes before the priming ends waits for the same workers it forks."""
        if not self.prime_source:
            threading.Thread(target=self._prime_python_workers, args=(spark, began), name="headwater-prime-workers",
                             daemon=True).start()
            return
        # both mostly start Python processes, one at a time each: on two cores they run side by side
        source = threading.Thread(target=self._prime_source, args=(spark,), name="headwater-prime-source", daemon=True)
        source.start()
        self._prime_python_workers(spark, began)
        source.join()

    def _prime_source(self, spark: Any) -> None:
        """Start Spark's planning processes for Headwater's source now, not in a graph's first micro-batch."""
        from headwater.spark.fused import prime_source
        from headwater.spark.session import scratch_dir

        try:
            prime_source(spark, scratch_dir(self.data_dir / "tmp"))
        except Exception as exc:  # only slower: a graph's first micro-batch starts what this did not
            log.warning("priming the stream source failed (%s); the first micro-batch will start it", _short(exc))

    @staticmethod
    def _prime_python_workers(spark: Any, began: float) -> None:
        """Fork the (kernel-loading) Python daemon and its workers now, not during the first micro-batch."""
        slots = max(spark.sparkContext.defaultParallelism, 1)
        try:
            spark.sparkContext.parallelize(range(slots), slots).map(lambda x: x).count()
        except Exception as exc:  # only slower (or the session stopped meanwhile): the first micro-batch forks them
            log.info("priming Spark's Python workers failed (%s); the first micro-batch will start them", _short(exc))
            return
        log.debug("Spark's Python workers forked after %.1f s", time.monotonic() - began)

    def start_graph(self, fqn: str, physical: PhysicalGraph, table_paths: dict[int, str], checkpoints: Path,
                    run_id: str = "", epoch: int = 0, keep_snapshots: int = KEEP_SNAPSHOTS) -> None:
        with self._start_lock:  # one start at a time: Spark's data source registry is not safe to race
            self._start_graph(fqn, physical, table_paths, checkpoints, run_id, epoch, keep_snapshots)

    def _start_graph(self, fqn: str, physical: PhysicalGraph, table_paths: dict[int, str], checkpoints: Path,
                     run_id: str, epoch: int, keep_snapshots: int) -> None:
        from headwater.spark.fused import start_fused_subgraph

        began = time.monotonic()
        self.stop_graph(fqn)
        spark = self.spark
        spark_ready = time.monotonic()
        running = RunningGraph(physical, {},
                               start_args=(fqn, physical, table_paths, checkpoints, run_id, epoch, keep_snapshots))
        self._graphs[fqn] = running
        run = run_id or "0"
        starters: dict[int, Callable[[], Any]] = {}
        for sg in physical.subgraphs:
            def record(batch_id: int, rows: int, stats: dict[str, float] | None = None, seconds: float = 0.0,
                       sg_id: int = sg.id) -> None:
                running.batches[sg_id] = batch_id
                running.committed += 1
                running.rows[sg_id] = running.rows.get(sg_id, 0) + rows
                total = running.stats.setdefault(sg_id, {})
                for k, v in (stats or {}).items():
                    total[k] = total.get(k, 0.0) + v
                observe_batch(fqn, sg_id, int((stats or {}).get("rows_in", 0)), rows, seconds)
                TABLE_COMMITS.fire()  # its job record is written: a wait for it looks again now

            starters[sg.id] = functools.partial(
                start_fused_subgraph,
                spark, subgraph_task(physical, sg, table_paths, checkpoints, run, keep_snapshots=keep_snapshots,
                                     fence=(str(checkpoints / EPOCH_FILE), epoch) if epoch else None),
                checkpoints / sg.key(physical), app_id=f"{fqn}#{run}/{sg.key(physical)}",
                # the subgraph's subscription settings (set_config_map / set_local_config_once): throttle, batch_size
                trigger_interval=sg.config.throttle or self.trigger_interval, on_batch=record,
                driver_batch_rows=self.driver_batch_rows, max_rows=sg.config.max_rows,
                fence=(checkpoints / EPOCH_FILE, epoch) if epoch else None)
            running.queries[sg.id] = _retrying(starters[sg.id], f"stream graph {fqn} subgraph {sg.id}")

        queries_started = time.monotonic()
        self._wait_until_started(fqn, running, starters)
        self._start_timers(running, checkpoints, epoch)
        log.info("stream graph %s (run %s) started in %.1f s: Spark ready after %.1f s, %d queries started after "
                 "%.1f s, their first micro-batches done after %.1f s", fqn, run, time.monotonic() - began,
                 spark_ready - began, len(running.queries), queries_started - began, time.monotonic() - began)

    def _wait_until_started(self, fqn: str, running: RunningGraph, starters: dict[int, Callable[[], Any]],
                            timeout: float = 600.0) -> None:
        """Return once every query has completed its first trigger: the graph is then really running. A query
        that died of a transient start failure is started again (``START_ATTEMPTS`` in all)."""
        deadline = time.monotonic() + timeout
        for sg_id in list(running.queries):
            attempts = 1
            while (query := running.queries[sg_id]).lastProgress is None:
                if not query.isActive:
                    exc = query.exception()
                    reason = _short(exc) if exc else "no reason given"
                    if attempts < START_ATTEMPTS and any(e in reason for e in TRANSIENT_START_ERRORS):
                        log.warning("stream graph %s subgraph %d failed to start (%s); starting it again", fqn, sg_id,
                                    reason)
                        attempts += 1
                        running.queries[sg_id] = starters[sg_id]()
                        continue
                    raise ExecutionError(f"stream graph {fqn} subgraph {sg_id} stopped while starting: {reason}")
                if time.monotonic() > deadline:
                    raise ExecutionError(f"stream graph {fqn} subgraph {sg_id} did not start within {timeout:.0f}s")
                with contextlib.suppress(Exception):  # a query that died is reported by the check above
                    query.awaitTermination(START_POLL_SECONDS)  # waits on the query, returns early if it stops

    @staticmethod
    def _start_timers(running: RunningGraph, checkpoints: Path, epoch: int) -> None:
        """Start the graph's timer engines (one thread each; headwater.runtime.timers), fenced like its commits."""
        fence = functools.partial(check_fence, checkpoints / EPOCH_FILE, epoch) if epoch else None
        for node in running.physical.nodes.values():
            spec = node.spec if isinstance(node, EngineNode) else None
            if isinstance(spec, TimerEngine):
                timer = Timer(node.name, spec.interval.total_seconds(), functools.partial(spec.func, *spec.args),
                              status_path(checkpoints, node.name), fence=fence)
                running.timers[node.name] = timer
                timer.start()

    def warmup(self, fqn: str, engine: str, data: pa.Table) -> int:
        """Feed ``data`` through ``engine``'s state without output (Orca's warmupOrcaStreamEngine); returns the
        number of rows used. See :meth:`_edit_state`."""
        def warm(task: SubgraphTask, spec: Any, version: int) -> int:
            return task.warm(engine, data.select(list(spec.input_schema.names)).cast(spec.input_schema.to_arrow()),
                             version)

        return self._edit_state(fqn, engine, warm)

    def control_engine(self, fqn: str, engine: str, op: dict[str, Any]) -> int:
        """Apply a user's change (a rule update) to ``engine``'s state; returns the tasks changed. A timer engine's
        pause or resume changes its timer only, without pausing the graph (returns 1)."""
        if op.get("op") in TIMER_OPS:
            g = self._graphs.get(fqn)
            timer = g.timers.get(engine) if g is not None else None
            if timer is None:
                raise ExecutionError(f"stream graph {fqn} runs no timer engine {engine!r} in this worker")
            timer.pause() if op["op"] == "stop_timer_engine" else timer.resume()
            return 1
        return self._edit_state(fqn, engine, lambda task, _spec, version: task.control(engine, op, version))

    def _edit_state(self, fqn: str, engine: str, edit: Callable[[SubgraphTask, Any, int], int]) -> int:
        """Pause the engine's subgraph, ``edit`` each task's state as of the input version committed so far
        (the snapshot the next micro-batch loads), and resume it."""
        g = self._graphs.get(fqn)
        if g is None:
            raise ExecutionError(f"stream graph {fqn} is not running in this worker")
        node = next((n for n in g.physical.nodes.values() if n.name == engine), None)
        sg = g.physical.subgraph_of(node.id) if node is not None else None
        spec: Any = getattr(node, "spec", None)
        if sg is None or spec is None:
            raise ExecutionError(f"stream graph {fqn} has no engine named {engine!r}")
        fqn_, physical, table_paths, checkpoints, run_id, epoch, keep = g.start_args
        self.stop_graph(fqn)
        try:
            task = subgraph_task(physical, sg, table_paths, checkpoints, run_id or "0", keep_snapshots=keep,
                                 fence=(str(checkpoints / EPOCH_FILE), epoch) if epoch else None)
            return edit(task, spec, committed_input_version(checkpoints / sg.key(physical)))
        finally:
            self.start_graph(fqn_, physical, table_paths, checkpoints, run_id, epoch, keep)

    def running_graphs(self) -> list[str]:
        return list(self._graphs)

    def is_running(self, fqn: str) -> bool:
        g = self._graphs.get(fqn)
        return g is not None and all(q.isActive for q in g.queries.values())

    def progress(self, fqn: str) -> dict[str, Any]:
        g = self._graphs.get(fqn)
        if g is None:
            return {}
        return {f"subgraph_{k}": {"last_batch": g.batches.get(k), "rows_out": g.rows.get(k, 0),
                                  "task_seconds": {s: round(v, 3) for s, v in g.stats.get(k, {}).items() if s != "rows_in"},
                                  "rows_in": int(g.stats.get(k, {}).get("rows_in", 0))}
                for k in g.queries}

    def health(self) -> dict[str, dict[str, Any]]:
        """Per graph: why a query of it stopped ("" while all run), and the micro-batches committed since its start."""
        report = {}
        for fqn, g in list(self._graphs.items()):
            failed = ""
            for sg_id, q in g.queries.items():
                if not q.isActive:
                    exc = q.exception()
                    failed = f"subgraph {sg_id}: {_short(exc)}" if exc else f"subgraph {sg_id} stopped"
                    break
            report[fqn] = {"failed": failed, "batches": g.committed}
        return report

    def stop_graph(self, fqn: str) -> None:
        g = self._graphs.pop(fqn, None)
        if g is None:
            return
        for timer in g.timers.values():
            timer.stop()
        for q in g.queries.values():
            with contextlib.suppress(Exception):  # already dead: nothing left to stop
                q.stop()

    def task_status(self, fqn: str, physical: PhysicalGraph) -> list[dict[str, Any]]:
        g = self._graphs.get(fqn)
        tasks: list[dict[str, Any]] = []
        for sg in physical.subgraphs:
            q = g.queries.get(sg.id) if g else None
            if q is None:
                status, reason = "stopped", ""
            elif q.isActive:
                status, reason = "running", ""
            else:
                exc = q.exception()
                status, reason = ("failed", _short(exc)) if exc else ("stopped", "")
            tasks.extend({"id": t, "node": self.name, "status": status, "reason": reason} for t in sg.task_ids())
        return tasks

    def sql(self, query: PreparedQuery, limits: SqlLimits | None = None) -> tuple[str, pa.Schema]:
        """Run ``query`` into Parquet files in the SQL spool (``<data_dir>/tmp/sql``, each result at most
        ``limits.max_result_bytes``); return their directory and schema."""
        from headwater.spark.sql import run_sql

        out = sql_spool(self.data_dir) / uuid.uuid4().hex  # removed by the result, or at the next start
        out.parent.mkdir(parents=True, exist_ok=True)
        return str(out), run_sql(self.spark, query, out, limits)

    # -- the protocol (headwater.runtime.protocol) ------------------------------------------------------
    def handle(self, message: Message) -> Any:
        """Carry out one request of the master; the reply is a plain value, rows as Arrow IPC bytes."""
        match message:
            case protocol.StartGraph():
                self.start_graph(message.fqn, _physical(message.plan, load_callables=True),
                                 {int(k): v for k, v in message.table_paths.items()}, Path(message.checkpoints),
                                 message.run_id, message.epoch, message.keep_snapshots)
            case protocol.StopGraph():
                self.stop_graph(message.fqn)
            case protocol.IsRunning():
                return self.is_running(message.fqn)
            case protocol.Warmup():
                return self.warmup(message.fqn, message.engine, arrow_table(message.data))
            case protocol.ControlEngine():
                return self.control_engine(message.fqn, message.engine, json.loads(message.op))
            case protocol.TaskStatus():
                return self.task_status(message.fqn, _physical(message.plan, load_callables=False))
            case protocol.Progress():
                return self.progress(message.fqn)
            case protocol.Health():
                return self.health()
            case protocol.RunSql():
                views = {v: (f, str(table_path(self.data_dir, p, where=f"sql over {f}"))) for v, f, p in message.views}
                query = PreparedQuery(message.source, message.text, views, frozenset(message.cte_names))
                path, schema = self.sql(query, SqlLimits.from_dict(message.limits))
                return {"path": path, "schema": schema.serialize().to_pybytes()}
            case protocol.Shutdown():
                self.close()
            case protocol.AwaitCommit():
                return self.await_commit(message.since, message.timeout)
        return None

    def await_commit(self, since: int | None, timeout: float) -> int:
        """How many micro-batches this process's worker has committed (:data:`TABLE_COMMITS`), once that is no
        longer ``since`` or after ``timeout`` seconds (at most :data:`MAX_AWAIT_COMMIT_S`); at once when ``since``
        is None. Raises :class:`WorkerUnavailableError` once the worker is stopping (:meth:`stopping`)."""
        deadline = time.monotonic() + min(max(float(timeout), 0.0), MAX_AWAIT_COMMIT_S)
        while since is not None and TABLE_COMMITS.beats == since and not self._stopping.is_set() and \
                (remaining := deadline - time.monotonic()) > 0:
            TABLE_COMMITS.wait(remaining, since=int(since))
        if self._stopping.is_set():
            raise WorkerUnavailableError(f"worker {self.name} is stopping")
        return TABLE_COMMITS.beats

    def stopping(self) -> None:
        """Its process is stopping: the masters' open :meth:`await_commit` requests end now, rather than after their
        timeout (an HTTP server that stops waits for every request to end), and new ones are refused."""
        self._stopping.set()
        TABLE_COMMITS.fire()

    def close(self) -> None:
        self.stopping()
        for fqn in list(self._graphs):
            self.stop_graph(fqn)


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)):\s*(.*)$")
_WRAPPERS = ("org.apache.", "py4j", "pyspark", "java.", "scala.", "StreamingQueryException", "PythonException",
             "Py4JJavaError", "ForeachBatchUserFuncException")


def _retrying(start: Callable[[], Any], what: str) -> Any:
    """``start()``, again after a transient start failure (see ``TRANSIENT_START_ERRORS``)."""
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            return start()
        except Exception as exc:
            if attempt == START_ATTEMPTS or not any(e in str(exc) for e in TRANSIENT_START_ERRORS):
                raise
            log.warning("%s failed to start (%s); starting it again", what, _short(exc))
    raise AssertionError("unreachable")


def _warm_up_kernels() -> None:
    """:func:`headwater.engines.warm.warm_up` in this process; a kernel that fails here loads when first used."""
    from headwater.engines.warm import warm_up

    try:
        warm_up()
    except Exception:
        log.warning("kernel warm-up failed; kernels load on first use", exc_info=True)


def _short(exc: BaseException) -> str:
    """The telling line of a (possibly Java-wrapped) error: the innermost Python exception if there is one.

    Spark wraps a failure in a task (a user's map raising ``ValueError``) in several layers of Java and
    Python traces; the user needs ``ValueError: ...``, not the wrappers.
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [m for m in map(_ERROR_LINE.match, lines) if m and not m.group(1).startswith(_WRAPPERS)]
    if errors:
        return shorten(f"{errors[-1].group(1).rsplit('.', 1)[-1]}: {errors[-1].group(2)}", 500)
    first = lines[0] if lines else type(exc).__name__
    return shorten(first.split(" SQLSTATE")[0], 500)


def _physical(document: str, *, load_callables: bool) -> PhysicalGraph:
    """The plan the master sent; its Python functions are loaded only to run it (this is where graphs run)."""
    physical = from_json(document, load_callables=load_callables)[1]
    if physical is None:
        raise GraphDefinitionError("the master sent a graph without its physical plan")
    return physical


class InProcessWorkerPort:
    """A worker in this process: each request crosses the wire format, then runs on the worker."""

    stops_with_master = True

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.name = worker.name

    def request(self, message: Message) -> Any:
        return self.worker.handle(decode(json.loads(json.dumps(encode(message)))))

    def describe(self) -> list[dict[str, Any]]:
        return [{"url": self.name, "group": "default", "alive": True, "spark": self.worker.spark_state, "cpu": None,
                 "memory": None, "heartbeat_age_s": 0.0, "graphs": ",".join(sorted(self.worker.running_graphs())),
                 "spark_ui": self.worker.spark_ui}]
