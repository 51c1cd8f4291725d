"""Spark drives the data plane: per micro-batch, one Spark task per core runs its stream tasks' read → engines → write.

A Python data source (``headwater_subgraph``) only reports the input table's newest version, so that
Spark triggers a micro-batch when the table has grown. In ``foreachBatch``, the driver records the
batch's input range ``(start, end]`` before running it (:func:`headwater.dataplane.jobs.begin_job`: a
replay gets the same range), reads the range's commits once (a :class:`~headwater.storage.table_log.Batch`)
and hands them to one Spark task per core, each running its group of stream tasks (:func:`task_groups`)
with :meth:`SubgraphTask.run_tasks` in Spark's Python worker and returning only the names of the
Parquet files it wrote. The driver then commits them to the output tables in one Delta transaction per
table tagged with (run, batch id), which a replayed batch skips. Rows never cross into the JVM, there is
no shuffle, and Spark still provides triggering, scheduling and retries.

A small micro-batch (at most ``driver_batch_rows`` input rows) is not worth a Spark job: launching one costs
~150 ms before the first task starts, several times what its stream tasks take. The driver then runs
all of the batch's stream tasks itself, as one group: the same :meth:`SubgraphTask.run_tasks`, the same
files and the same commit. Which way a batch runs depends only on its recorded range, and files are
named by their task group, so a replay may go either way without duplicating a row.

With ``max_rows`` (the subgraph's ``subscription.batch_size``) a micro-batch covers only the commits that fit
(:func:`headwater.dataplane.jobs.admit`), and the probe reports the end of the next such range, so that
Spark keeps triggering micro-batches while the input holds rows not yet read.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from headwater.dataplane.fence import FencedError, check_fence  # noqa: F401 - FencedError: raised here too
from headwater.dataplane.files import replacing
from headwater.tuning import DRIVER_BATCH_ROWS

SOURCE_NAME = "headwater_subgraph"


def task_groups(n_tasks: int, slots: int) -> list[tuple[int, ...]]:
    """Stream tasks grouped into at most ``slots`` Spark tasks (contiguous, sizes differing by at most one).

    A stream task is the unit of state (its snapshot, its share of the keys); a Spark task is the unit of
    scheduling, which costs its launch, a Python worker round trip and a result. With more stream tasks
    than cores, one Spark task per core runs its share of them in turn instead of paying that per stream task.

    >>> task_groups(8, 2)
    [(0, 1, 2, 3), (4, 5, 6, 7)]
    >>> task_groups(3, 4)
    [(0,), (1,), (2,)]
    """
    count = max(1, min(n_tasks, slots))
    size, extra = divmod(n_tasks, count)
    groups, first = [], 0
    for g in range(count):
        last = first + size + (1 if g < extra else 0)
        groups.append(tuple(range(first, last)))
        first = last
    return groups


def _load(plan_path: str) -> Any:
    """The pickled SubgraphTask (unpickling imports the engine modules, only where they run)."""
    with open(plan_path, "rb") as f:
        return pickle.load(f)


POLL_SECONDS = 0.005  # how often a waiting probe looks for the input's next commit (a stat call) ...
IDLE_POLL_SECONDS = 0.05  # ... and once the input has not grown for IDLE_AFTER_SECONDS
IDLE_AFTER_SECONDS = 1.0
MAX_WAIT_SECONDS = 1.0  # a probe waits at most this long, whatever the interval (a stop waits for the probe)


class SubgraphStreamReader(DataSourceStreamReader):
    """The input table's newest version as Spark's offset: a micro-batch is triggered when it grows.

    Spark asks for the newest version once per trigger interval; when the table has not grown since the
    last answer, the probe waits for its next commit (up to ``wait_s``) instead of answering at once. A
    commit is then seen within :data:`POLL_SECONDS` rather than at the next trigger, and the micro-batch
    starts at once (Spark starts the next trigger at once when one took longer than the interval). An input
    idle for a second is looked at every :data:`IDLE_POLL_SECONDS` instead: 5 ms polls cost an idle query
    about 1.5 % of a core.
    """

    def __init__(self, input_path: str, wait_s: float = 0.0, checkpoint: str = "", max_rows: int = 0) -> None:
        # planning runs in its own Python process: keep it free of the engine stack
        self.input_path = input_path
        self.wait_s = wait_s
        self.checkpoint = checkpoint  # with max_rows: where the job records say which range comes next
        self.max_rows = max_rows
        self._known: int | None = None  # the version the last probe saw (None: no probe yet)
        self._grew = 0.0  # time.monotonic() when a probe last saw the input grow

    def initialOffset(self) -> dict:
        return {"version": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        from headwater.storage.table_log import latest_version

        latest = latest_version(self.input_path, self._known or 0)
        begin = self._next_start()
        now = time.monotonic()
        deadline = now + self.wait_s  # the first probe answers at once: the query's first trigger
        poll = POLL_SECONDS if now - self._grew < IDLE_AFTER_SECONDS else IDLE_POLL_SECONDS
        while latest == self._known and not (self.max_rows and latest > begin) and time.monotonic() < deadline:
            time.sleep(poll)
            latest = latest_version(self.input_path, latest)
        if latest != self._known:
            self._grew = time.monotonic()
        self._known = latest
        return {"version": self._end(begin, latest)}

    def _next_start(self) -> int:
        """With max_rows, where the next micro-batch starts (rows wait beyond it); else -1 (nothing waits)."""
        if not self.max_rows:
            return -1
        from headwater.dataplane.jobs import next_start

        return next_start(Path(self.checkpoint))

    def _end(self, begin: int, latest: int) -> int:
        if not self.max_rows:
            return latest
        from headwater.dataplane.jobs import admit
        from headwater.storage.table_log import read_commit

        return admit(begin, latest, lambda v: read_commit(self.input_path, v).num_rows(), self.max_rows)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return []  # the driver runs the batch (start_fused_subgraph)

    def read(self, partition: InputPartition) -> Iterator[tuple]:  # type: ignore[override]
        raise AssertionError("never called: partitions() plans none")

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: the input table is replayable."""


def _run_group(work: tuple[str, tuple[int, ...], Any]) -> Any:
    """One Spark task: the stream tasks of one group over the batch the driver read (in Spark's Python worker)."""
    plan_path, tasks, batch = work
    return _cached_plan(plan_path).run_tasks(tasks, batch)


_PLANS: dict[str, tuple[tuple[int, int], Any]] = {}  # path -> (file identity, plan)


def _cached_plan(path: str) -> Any:
    """The plan at ``path``, loaded once per Python worker and file version.

    Keyed by the file's inode and modification time too: a graph dropped and submitted again under the
    same name writes a new plan file at the same path, which must not be served from the old entry.
    """
    st = os.stat(path)
    identity = (st.st_ino, st.st_mtime_ns)
    cached = _PLANS.get(path)
    if cached is None or cached[0] != identity:
        cached = _PLANS[path] = (identity, _load(path))
    return cached[1]


class SubgraphDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return "version BIGINT"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SubgraphStreamReader(self.options["input"], float(self.options.get("wait_s", 0)),
                                    self.options.get("checkpoint", ""), int(self.options.get("max_rows", 0)))


def register_source(spark: SparkSession) -> None:
    """Register :class:`SubgraphDataSource`: as ``spark.dataSource.register`` does, but started through
    :func:`headwater.spark.zygote.launcher` when the driver has a zygote.

    Spark starts each streaming query's source runner, and the daemon of each kind of the source's planners, as a
    new interpreter, which imports PySpark and Arrow (~0.3 s) on the way to the query's first trigger; the zygote
    forks one that has them already. Only the data source function's interpreter is set here: the tasks stay with
    ``spark.pyspark.python``.
    """
    from headwater.spark.zygote import launcher, spark_environment

    executable = launcher()
    if executable is None:
        spark.dataSource.register(SubgraphDataSource)
        return
    from pyspark.core.rdd import _prepare_for_python_RDD

    # pyspark.sql.datasource.DataSourceRegistration.register, with another interpreter than sc.pythonExec
    sc = spark.sparkContext
    command, broadcasts, env, includes = _prepare_for_python_RDD(sc, SubgraphDataSource)
    jvm = sc._jvm
    assert jvm is not None
    # the start-up variables Spark gives its daemon and not a source runner, which the zygote was started with
    env = {**env, **spark_environment(dict(os.environ))}
    function = jvm.SimplePythonFunction(bytearray(command), env, includes, executable, sc.pythonVer, broadcasts,
                                        sc._javaAccumulator)
    source = getattr(jvm, "org.apache.spark.sql.execution.datasources.v2.python.UserDefinedPythonDataSource")(function)
    spark._jsparkSession.dataSource().registerPython(SOURCE_NAME, source)


def start_fused_subgraph(
    spark: SparkSession,
    plan: Any,
    checkpoint: Path,
    *,
    app_id: str,
    trigger_interval: timedelta,
    on_batch: Any = None,
    fence: tuple[Path, int] | None = None,
    driver_batch_rows: int = DRIVER_BATCH_ROWS,
    max_rows: int | None = None,
) -> Any:
    """Start the streaming query of a fused subgraph; returns the StreamingQuery.

    ``fence``: (file, epoch). Before each commit the file must still hold ``epoch``: once the master has
    placed the graph elsewhere (a newer epoch), this query fails instead of committing.
    ``driver_batch_rows``: a micro-batch with at most this many input rows runs on the driver (0: never).
    ``max_rows``: a micro-batch reads at most this many input rows (whole commits, at least one; None: all).
    """
    from headwater.dataplane.jobs import admit, begin_job, is_committed, write_job
    from headwater.dataplane.task import TaskReport
    from headwater.faults import fault_point
    from headwater.storage.table_log import Batch, latest_version, read_batch, read_commit

    checkpoint.mkdir(parents=True, exist_ok=True)
    plan_path = checkpoint / "task_plan.pkl"
    with replacing(plan_path) as tmp:
        tmp.write_bytes(cloudpickle.dumps(plan))
    register_source(spark)
    groups = task_groups(plan.n_tasks, spark.sparkContext.defaultParallelism)

    def run_batch(batch: Batch) -> tuple[TaskReport, bool]:
        """The batch's report, and whether the driver ran it (a small batch) rather than Spark's tasks."""
        if batch.num_rows() <= driver_batch_rows:
            return plan.run_tasks(tuple(range(plan.n_tasks)), batch), True
        work = [(str(plan_path), tasks, batch) for tasks in groups]
        reports = spark.sparkContext.parallelize(work, len(work)).map(_run_group).collect()
        tasks = sorted((t for r in reports for t in r.tasks), key=lambda t: t.task)
        return TaskReport([f for r in reports for f in r.files], tasks), False

    def commit_batch(_: DataFrame, batch_id: int) -> None:
        if is_committed(checkpoint, batch_id):
            # Spark replays a batch whose own commit a stop or crash cut short after ours: its output and state
            # are saved, and running it again would save its state over a change made since (update_rule)
            return
        created = time.time()
        start, end = begin_job(checkpoint, batch_id, lambda known: admit(
            known, latest_version(plan.input_path, known), lambda v: read_commit(plan.input_path, v).num_rows(),
            max_rows))
        report, on_driver = run_batch(read_batch(plan.input_path, start, end))  # the batch's one read of the log
        fault_point("batch.before_commit")
        if fence is not None:
            check_fence(*fence)
        rows_out = plan.commit(report.files, txn=(app_id, batch_id))
        fault_point("batch.after_commit")
        stats = {"rows_in": report.rows_in, **report.seconds}
        write_job(checkpoint, {"batch": batch_id, "input": [start, end], "created": created, "finished": time.time(),
                               "driver": on_driver, "rows_in": report.rows_in, "rows_out": rows_out,
                               "tasks": [{"task": t.task, "rows_in": t.rows_in, "rows_out": t.rows_out,
                                          "seconds": t.seconds}
                                         for t in report.tasks]})
        if on_batch is not None:
            on_batch(batch_id, rows_out, stats, time.time() - created)

    interval = f"{max(int(trigger_interval.total_seconds() * 1000), 1)} milliseconds"
    name = f"{plan.run}/subgraph_{plan.subgraph}"
    for stale in spark.streams.active:  # an earlier placement's query on this worker (fenced, or being stopped)
        if stale.name == name:
            stale.stop()
    return (
        spark.readStream.format(SOURCE_NAME).option("input", plan.input_path)
        .option("wait_s", str(min(trigger_interval.total_seconds(), MAX_WAIT_SECONDS)))
        .option("checkpoint", str(checkpoint)).option("max_rows", str(max_rows or 0)).load()
        .writeStream.foreachBatch(commit_batch)
        .option("checkpointLocation", str(checkpoint / "spark"))
        .queryName(name)
        .trigger(processingTime=interval)
        .start()
    )


def prime_source(spark: SparkSession, scratch: Path, timeout: float = 60.0) -> None:
    """Run one micro-batch with data through a scratch query of this source, then stop it.

    A driver's first query starts the Python processes Spark plans this source with (one that creates the data
    source, one that plans its reads; both stay up and serve every later query), and its first micro-batch with
    data runs the JVM's batch path for the first time. Done here, while the worker starts, that second does not
    fall on the first micro-batch of a graph placed on it (after a restart: 1.3 s against 0.27 s warm).
    """
    import tempfile
    import threading

    import pyarrow as pa

    from headwater.storage.stream_table import StreamTable
    from headwater.types import Schema

    with tempfile.TemporaryDirectory(prefix="prime-", dir=scratch) as work:
        table = StreamTable.create(Path(work) / "input", Schema.parse({"x": "long"}))
        table.append(pa.table({"x": [1]}))
        register_source(spark)
        ran = threading.Event()
        query = (spark.readStream.format(SOURCE_NAME).option("input", str(table.path)).load()
                 .writeStream.foreachBatch(lambda _df, _batch_id: ran.set())
                 .option("checkpointLocation", str(Path(work) / "checkpoint")).queryName("headwater-prime")
                 .trigger(processingTime="10 milliseconds").start())
        try:
            deadline = time.monotonic() + timeout
            while not ran.is_set() and query.isActive and time.monotonic() < deadline:
                ran.wait(0.02)
            if not ran.is_set():
                raise RuntimeError(f"the scratch query ran no micro-batch: {query.exception() or 'timed out'}")
        finally:
            query.stop()
