"""Spark drives the data plane: per micro-batch, one Spark task per core runs its stream tasks' read → engines → write.

A Python data source (``headwater_subgraph``) turns each micro-batch, an input-table
version range ``(start, end]`` checkpointed by Spark, into one input partition per core,
each holding a group of stream tasks (:func:`task_groups`). ``read()`` runs
:meth:`SubgraphTask.run_tasks` in Spark's Python worker and returns only the names of the
Parquet files it wrote; ``foreachBatch`` on the driver commits them to the output tables in
one Delta transaction per table tagged with (run, batch id), which a replayed batch skips.
Rows never cross into the JVM, there is no shuffle, and Spark still provides scheduling,
retries and exactly-once offsets.

A small micro-batch (at most ``driver_batch_rows`` input rows) is not worth a Spark job: launching one costs
~150 ms before the first task starts, several times what its stream tasks take. The driver then runs
all of the batch's stream tasks itself, as one group, inside ``foreachBatch``: the same
:meth:`SubgraphTask.run_tasks`, the same files and the same commit, with Spark still deciding the
batch's offsets and logging them. Which way a batch runs depends only on its offsets, and files are
named by their task group, so a replay may go either way without duplicating a row.
"""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from headwater.dataplane.fence import FencedError, check_fence  # noqa: F401 - FencedError: raised here too
from headwater.tuning import DRIVER_BATCH_ROWS

SOURCE_NAME = "headwater_subgraph"
STAGES = ("read", "partition", "kernel", "state", "write")  # = headwater.dataplane.task.STAGES, kept import-free
RESULT_SCHEMA = ("tbl INT, name STRING, size BIGINT, num_rows BIGINT, task INT, rows_in BIGINT, "
                 + ", ".join(f"{s}_s DOUBLE" for s in STAGES))


@dataclass(frozen=True)
class TaskPartition(InputPartition):
    """One Spark task: stream tasks ``tasks`` of the micro-batch ``(start, end]``, run one after another."""

    tasks: tuple[int, ...]
    start: int
    end: int


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


class SubgraphStreamReader(DataSourceStreamReader):
    def __init__(self, plan_path: str, input_path: str, n_tasks: int, slots: int) -> None:
        # planning runs in its own Python process: keep it free of the engine stack
        self.plan_path = plan_path
        self.input_path = input_path
        self.groups = task_groups(n_tasks, slots)
        self._known = 0

    def initialOffset(self) -> dict:
        return {"version": 0}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        from headwater.storage.table_log import latest_version

        self._known = latest_version(self.input_path, self._known)
        return {"version": self._known}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        a, b = int(start["version"]), int(end["version"])
        if b <= a:
            return []
        return [TaskPartition(tasks, a, b) for tasks in self.groups]

    def read(self, partition: InputPartition) -> Iterator[tuple]:  # type: ignore[override]
        assert isinstance(partition, TaskPartition)
        plan = _cached_plan(self.plan_path)
        report = plan.run_tasks(partition.tasks, partition.start, partition.end)
        for f in report.files:  # one row per output file (tbl >= 0) ...
            yield (f.table, f.name, f.size, f.rows, f.task, 0, *(0.0,) * len(STAGES))
        for t in report.tasks:  # ... and one per stream task: its rows in and time split (tbl = -1)
            yield (-1, None, 0, 0, t.task, t.rows_in, *(t.seconds[s] for s in STAGES))

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge: the input table is replayable."""


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
        return RESULT_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SubgraphStreamReader(self.options["plan"], self.options["input"], int(self.options["tasks"]),
                                    int(self.options["slots"]))


def logged_input_version(spark_checkpoint: Path, batch_id: int) -> int:
    """The input version that micro-batch ``batch_id`` ends at, from Spark's offset log (0 before batch 0)."""
    if batch_id < 0:
        return 0
    lines = (spark_checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    return int(json.loads(lines[-1])["version"])


def committed_input_version(spark_checkpoint: Path) -> int:
    """The input version up to which a stopped query has committed its output (0 before any batch)."""
    commits = spark_checkpoint / "commits"
    done = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True) if commits.exists() else []
    return logged_input_version(spark_checkpoint, done[0]) if done else 0


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
) -> Any:
    """Start the streaming query of a fused subgraph; returns the StreamingQuery.

    ``fence``: (file, epoch). Before each commit the file must still hold ``epoch``: once the master has
    placed the graph elsewhere (a newer epoch), this query fails instead of committing.
    ``driver_batch_rows``: a micro-batch with at most this many input rows runs on the driver (0: never).
    """
    from headwater.dataplane.jobs import write_job
    from headwater.dataplane.task import OutputFile, TaskReport, TaskStats
    from headwater.faults import fault_point
    from headwater.storage.table_log import rows_added

    checkpoint.mkdir(parents=True, exist_ok=True)
    plan_path = checkpoint / "task_plan.pkl"
    tmp = checkpoint / f".task_plan.{os.getpid()}.tmp"
    tmp.write_bytes(cloudpickle.dumps(plan))
    os.replace(tmp, plan_path)
    spark.dataSource.register(SubgraphDataSource)

    spark_checkpoint = checkpoint / "spark"

    def run_batch(batch_df: DataFrame, start: int, end: int) -> tuple[TaskReport, bool]:
        """The batch's report, and whether the driver ran it (a small batch) rather than Spark's tasks."""
        if rows_added(plan.input_path, start, end) <= driver_batch_rows:
            return plan.run_tasks(tuple(range(plan.n_tasks)), start, end), True
        rows = batch_df.collect()
        files = [OutputFile(r["tbl"], r["name"], r["size"], r["num_rows"], r["task"]) for r in rows if r["tbl"] >= 0]
        tasks = [TaskStats(r["task"], r["rows_in"], {s: r[f"{s}_s"] for s in STAGES}) for r in rows if r["tbl"] < 0]
        return TaskReport(files, sorted(tasks, key=lambda t: t.task)), False

    def commit_batch(batch_df: DataFrame, batch_id: int) -> None:
        created = time.time()
        start = logged_input_version(spark_checkpoint, batch_id - 1)
        end = logged_input_version(spark_checkpoint, batch_id)
        report, on_driver = run_batch(batch_df, start, end)
        fault_point("batch.before_commit")
        if fence is not None:
            check_fence(*fence)
        rows_out = plan.commit(report.files, txn=(app_id, batch_id))
        fault_point("batch.after_commit")
        stats = {"rows_in": report.rows_in, **report.seconds}
        write_job(checkpoint, {"batch": batch_id, "input": [start, end], "created": created, "finished": time.time(),
                               "driver": on_driver, "rows_in": report.rows_in, "rows_out": rows_out,
                               "tasks": [{"task": t.task, "rows_in": t.rows_in, "seconds": t.seconds}
                                         for t in report.tasks]})
        if on_batch is not None:
            on_batch(batch_id, rows_out, stats, time.time() - created)

    interval = f"{max(int(trigger_interval.total_seconds() * 1000), 1)} milliseconds"
    name = f"{plan.run}/subgraph_{plan.subgraph}"
    for stale in spark.streams.active:  # an earlier placement's query on this worker (fenced, or being stopped)
        if stale.name == name:
            stale.stop()
    return (
        spark.readStream.format(SOURCE_NAME).option("plan", str(plan_path)).option("input", plan.input_path)
        .option("tasks", str(plan.n_tasks)).option("slots", str(spark.sparkContext.defaultParallelism)).load()
        .writeStream.foreachBatch(commit_batch)
        .option("checkpointLocation", str(checkpoint / "spark"))
        .queryName(name)
        .trigger(processingTime=interval)
        .start()
    )
