"""One stream task over one micro-batch, end to end, without Spark: read → partition → engines → write.

This is Headwater's one data plane (driven by ``headwater.spark.fused`` on Spark): Spark
schedules the stream tasks of each micro-batch (a group of them per core); the driver reads the
input table's commits of the batch once and hands them (a :class:`Batch`) to each stream task,
which reads their files, keeps the rows whose partition key hashes to it and runs the chain of
engines with its state; a group writes its output as one Parquet file per output table, which
the driver then commits in one idempotent transaction per table. No row crosses into the JVM.

Engine state is a snapshot per (engine, task, input version): a batch over versions
``(start, end]`` loads the newest snapshot at or before ``start`` and saves one at
``end``, so a replayed batch starts from exactly the same state. Output file names are
derived from (run, subgraph, end version, first and last task of the group) and written atomically, so
a replay finds its files already there and the commit is skipped by its transaction id.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa

from headwater.dataplane.fence import check_fence
from headwater.dataplane.files import replacing
from headwater.dataplane.maps import apply_map
from headwater.dataplane.snapshots import KEEP_SNAPSHOTS, SnapshotStore
from headwater.engines.base import SEQ, Processor
from headwater.errors import ExecutionError
from headwater.plan.logical import EngineNode, MapNode, Node
from headwater.plan.physical import PhysicalGraph, Subgraph
from headwater.storage.buckets import Bucketing, read_bucket, read_in_order, task_of, write_table
from headwater.storage.table_log import Batch, commit_time
from headwater.types import Schema

SEQ_SHIFT = 32


@dataclass(frozen=True)
class OutputFile:
    table: int  # index into SubgraphTask.outputs
    name: str  # file name inside the table directory
    size: int
    rows: int
    task: int


STAGES = ("read", "partition", "kernel", "state", "write")


@dataclass(frozen=True)
class TaskStats:
    """One stream task in one micro-batch: rows in, seconds per stage (its group's write counts on its first), and
    the rows its chain output."""

    task: int
    rows_in: int
    seconds: dict[str, float]
    rows_out: int = 0


@dataclass
class TaskReport:
    """What a group of stream tasks did in one micro-batch: files written, and each task's stats."""

    files: list[OutputFile]
    tasks: list[TaskStats]

    @property
    def rows_in(self) -> int:
        return sum(t.rows_in for t in self.tasks)

    @property
    def seconds(self) -> dict[str, float]:
        return {s: sum(t.seconds[s] for t in self.tasks) for s in STAGES}


@dataclass(frozen=True)
class SubgraphTask:
    """Everything one stream task needs, pickled once per query beside its checkpoint."""

    run: str
    subgraph: int
    input_path: str
    input_schema: Schema
    partition_key: str | None
    n_tasks: int
    chain: tuple[Node, ...]
    outputs: tuple[tuple[str, Schema], ...]
    state_root: str
    output_buckets: tuple[Bucketing | None, ...] = ()  # per output: how its parallel reader partitions it
    # per engine of the chain with a side table (late or error rows): (engine name, table path, table schema);
    # the files of the j-th are numbered len(outputs) + j, and committed with the outputs' in the same micro-batch
    late_outputs: tuple[tuple[str, str, Schema], ...] = ()
    keep_snapshots: int = KEEP_SNAPSHOTS  # per engine and task (checkpoint_config's max_retained_checkpoints)
    # (epoch file, epoch) of the worker's placement: a task whose placement is no longer current saves no state
    fence: tuple[str, int] | None = None

    # -- helpers -------------------------------------------------------------------------------------
    def read(self, batch: Batch, task: int | None = None) -> pa.Table:
        """The rows ``batch`` committed, in append order, with ``_hw_seq``.

        With ``task``, only that task's rows (NULL partition keys dropped, as in Orca): from a file
        bucketed the way this subgraph partitions, only its own row groups are read (the writer
        partitioned them); any other file is read whole and its rows hashed here.
        """
        columns = list(self.input_schema.names)
        arrow_schema = self.input_schema.to_arrow()
        mine = self.bucketing if task is not None else None
        tables = []
        for commit in batch.commits:
            if commit.rewrites:
                continue
            offset = 0
            for file in commit.files:
                bucket = read_bucket(file.path, columns, mine, task) if mine is not None and task is not None else None
                if bucket is not None:
                    rows, positions = bucket
                else:
                    rows = read_in_order(file.path, columns)
                    positions = np.arange(rows.num_rows, dtype=np.int64)
                    if task is not None:
                        keep = self.task_mask(rows, task)
                        rows, positions = rows.filter(pa.array(keep)), positions[keep]
                if rows.num_rows:
                    seq = (np.int64(commit.version) << np.int64(SEQ_SHIFT)) + offset + positions
                    tables.append(rows.cast(arrow_schema).append_column(SEQ, pa.array(seq, pa.int64())))
                offset += file.rows()
        if not tables:
            return arrow_schema.append(pa.field(SEQ, pa.int64())).empty_table()
        return pa.concat_tables(tables)

    @property
    def bucketing(self) -> Bucketing | None:
        """How this subgraph partitions its input (what a writer buckets by so that each task reads its own)."""
        return Bucketing(self.partition_key, self.n_tasks) if self.partition_key else None

    def task_mask(self, table: pa.Table, task: int) -> np.ndarray:
        """Which rows belong to ``task`` (a row with a NULL partition key belongs to none, as in Orca)."""
        if self.partition_key is None:
            return np.ones(table.num_rows, dtype=bool)
        key = table[self.partition_key]
        valid = key.is_valid().to_numpy(zero_copy_only=False)
        mask = np.zeros(table.num_rows, dtype=bool)
        if valid.any():
            mask[valid] = task_of([key if valid.all() else key.filter(pa.array(valid))], self.n_tasks) == task
        return mask

    def select(self, table: pa.Table, task: int) -> pa.Table:
        """Rows of ``task`` (rows with a NULL partition key are dropped, as in Orca)."""
        if self.partition_key is None:
            return table
        return table.filter(pa.array(self.task_mask(table, task)))

    def processors(self) -> list[Processor | None]:
        return [_processor(n) if isinstance(n, EngineNode) else None for n in self.chain]

    def file_name(self, end: int, tasks: Sequence[int]) -> str:
        """The output file of the group ``tasks`` for the batch ending at ``end``.

        Named by the group's first and last task: a batch replayed with other groups (another worker with
        another core count, or the driver running a small batch whole) writes other files instead of
        reusing a file that holds a different set of tasks' rows.
        """
        return f"hw-{self.run}-sg{self.subgraph}-v{end:012d}-t{tasks[0]:04d}-{tasks[-1]:04d}.parquet"

    # -- the task ------------------------------------------------------------------------------------
    def partition_after(self) -> int:
        """How many leading maps run on the whole batch before it is partitioned.

        The partition key is the column as the parallelized engine sees it. Maps ahead of that engine
        that pass the key column through untouched (or only filter rows) commute with partitioning, so
        each task partitions first and maps only its own rows; a map that computes the key, or a Python
        function map, must run on the whole batch first.
        """
        if self.partition_key is None:
            return 0
        leading = 0
        for node in self.chain:
            if not isinstance(node, MapNode):
                break
            leading += 1
        for i in range(leading - 1, -1, -1):
            node = self.chain[i]
            assert isinstance(node, MapNode)
            exprs = dict(node.exprs)
            passes_key = node.fn is None and str(exprs.get(self.partition_key, "")) == self.partition_key
            if not passes_key:
                return i + 1
        return 0

    # -- the task ------------------------------------------------------------------------------------
    def run_task(self, task: int, batch: Batch) -> TaskReport:
        """Process ``batch`` for ``task``; report the output files written and the time split."""
        return self.run_tasks((task,), batch)

    def run_tasks(self, tasks: Sequence[int], batch: Batch) -> TaskReport:
        """Process ``batch`` for each of ``tasks`` in turn (each with its own share of the rows and its own
        state) and write their output together: one file per output table, rows in task order."""
        stats, outputs = [], []
        late: dict[str, list[pa.Table]] = {}
        for task in tasks:
            seconds = dict.fromkeys(STAGES, 0.0)
            rows, n = self._compute(task, batch, seconds, late)
            stats.append(TaskStats(task, n, seconds, rows.num_rows if rows is not None else 0))
            if rows is not None and rows.num_rows:
                outputs.append(rows)
        t = time.perf_counter()
        files = (self.write(pa.concat_tables(outputs, promote_options="permissive"), tasks, batch.end)
                 if outputs else [])
        for j, (engine, path, schema) in enumerate(self.late_outputs):
            if late.get(engine):
                files.append(self._write_file(len(self.outputs) + j, path, schema, pa.concat_tables(late[engine]),
                                              tasks, batch.end, None))
        stats[0].seconds["write"] = time.perf_counter() - t
        return TaskReport(files, stats)

    def _compute(self, task: int, batch: Batch, seconds: dict[str, float],
                 late: dict[str, list[pa.Table]]) -> tuple[pa.Table | None, int]:
        """One stream task's read → partition → engines over ``batch``, its new state saved; returns its
        output rows (None when it had no input) and its input row count. Adds its time to ``seconds``, and the
        late rows of engines with a late rows table to ``late`` (by engine name)."""
        routed = {engine: schema for engine, _, schema in self.late_outputs}
        clock = time.perf_counter
        t = clock()
        first = self.partition_after()
        rows = self.read(batch, None if first else task)  # partitioned as it is read, when it can be
        seconds["read"] += clock() - t
        if first:
            t = clock()
            for node in self.chain[:first]:
                assert isinstance(node, MapNode)
                rows = apply_map(node, rows)
            seconds["kernel"] += clock() - t
            t = clock()
            rows = self.select(rows, task)
            seconds["partition"] += clock() - t
        rows_in = rows.num_rows
        if rows_in == 0:
            return None, 0
        new_states: list[tuple[SnapshotStore, Any, dict[str, int]]] = []
        for node, processor in list(zip(self.chain, self.processors(), strict=True))[first:]:
            if processor is not None:
                t = clock()
                store = SnapshotStore(os.path.join(self.state_root, node.name), keep=self.keep_snapshots)
                state = store.load(task, batch.start + 1)
                seconds["state"] += clock() - t
                t = clock()
                state, out, dropped = processor.process_routed(processor.new_state() if state is None else state,
                                                               rows, batch_time=batch.time)
                if node.name in routed and dropped is not None and len(dropped) and \
                        (isinstance(dropped, pa.Table) or dropped.any()):
                    schema = routed[node.name]  # the rows themselves (error rows), or a mask of input rows
                    aside = dropped if isinstance(dropped, pa.Table) else rows.filter(pa.array(dropped))
                    late.setdefault(node.name, []).append(aside.select(list(schema.names)).cast(schema.to_arrow()))
                rows = out
                seconds["kernel"] += clock() - t
                new_states.append((store, state, processor.stats(state)))
            else:
                assert isinstance(node, MapNode)
                t = clock()
                rows = apply_map(node, rows)
                seconds["kernel"] += clock() - t
        t = clock()
        for store, state, counters in new_states:
            store.save(task, batch.end, state, fence=self._fence(), stats=counters)
        seconds["state"] += clock() - t
        return rows, rows_in

    def write(self, rows: pa.Table, tasks: Sequence[int], end: int) -> list[OutputFile]:
        if rows.num_rows == 0:
            return []
        return [self._write_file(index, path, schema, rows, tasks, end,
                                 self.output_buckets[index] if self.output_buckets else None)
                for index, (path, schema) in enumerate(self.outputs)]

    def _write_file(self, index: int, path: str, schema: Schema, rows: pa.Table, tasks: Sequence[int], end: int,
                    bucketing: Bucketing | None) -> OutputFile:
        name = self.file_name(end, tasks)
        target = os.path.join(path, name)
        if not os.path.exists(target):  # a replay finds the identical file already written
            with replacing(target) as tmp:
                write_table(rows.select(list(schema.names)).cast(schema.to_arrow()), str(tmp), bucketing=bucketing,
                            text_columns=[n for n, t in schema if t == "string"])
        return OutputFile(index, name, os.path.getsize(target), rows.num_rows, tasks[0])

    def warm(self, engine: str, data: pa.Table, version: int) -> int:
        """Advance ``engine``'s state by ``data`` without output (Orca's warmupOrcaStreamEngine).

        Each task's rows go through the engine from the snapshot the next micro-batch after input
        ``version`` would load, and the result is saved as the snapshot at ``version``. Run it only while
        the subgraph is stopped. ``data`` has the engine's input columns; returns the rows used.
        """
        node = next((n for n in self.chain if n.name == engine), None)
        if not isinstance(node, EngineNode) or node.spec is None:
            raise ExecutionError(f"subgraph {self.subgraph} has no engine named {engine!r}")
        processor = node.spec.processor()
        store = SnapshotStore(os.path.join(self.state_root, engine), keep=self.keep_snapshots)
        tasks = task_of([data[self.partition_key]], self.n_tasks) if self.partition_key else \
            np.zeros(data.num_rows, dtype=np.int64)
        for task in range(self.n_tasks):
            rows = data.filter(pa.array(tasks == task))
            if rows.num_rows == 0:
                continue
            rows = rows.append_column(SEQ, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
            loaded = store.load(task, version + 1)
            state, _ = processor.process(processor.new_state() if loaded is None else loaded, rows,
                                         batch_time=commit_time(self.input_path, version) if version else 0.0)
            store.save(task, version, state, fence=self._fence(), stats=processor.stats(state))
        return data.num_rows

    def control(self, engine: str, op: Mapping[str, Any], version: int) -> int:
        """Apply a user's change to ``engine`` (e.g. a rule update) to every task's state, as of input ``version``.

        Like :meth:`warm`, run it only while the subgraph is stopped: each task's state is loaded from the
        snapshot the next micro-batch would load, changed, and saved as the snapshot at ``version``.
        Returns the number of tasks changed.
        """
        node = next((n for n in self.chain if n.name == engine), None)
        if not isinstance(node, EngineNode) or node.spec is None:
            raise ExecutionError(f"subgraph {self.subgraph} has no engine named {engine!r}")
        processor = node.spec.processor()
        store = SnapshotStore(os.path.join(self.state_root, engine), keep=self.keep_snapshots)
        for task in range(self.n_tasks):
            loaded = store.load(task, version + 1)
            state = processor.control(processor.new_state() if loaded is None else loaded, op)
            store.save(task, version, state, fence=self._fence(), stats=processor.stats(state))
        return self.n_tasks

    def _fence(self) -> Callable[[], None] | None:
        """The check a snapshot passes before it is saved (None: no fence, a graph run in process)."""
        fence = self.fence
        return None if fence is None else functools.partial(check_fence, fence[0], fence[1])

    def commit(self, files: Sequence[OutputFile], txn: tuple[str, int], at: float | None = None) -> int:
        """Commit one micro-batch's files: one Delta transaction per output table, tagged ``txn``.

        A replayed batch finds ``txn`` already recorded and commits nothing. Returns the rows written
        (to one output: every output receives the same rows). ``at``: the commits' time (``run_local``'s clock).
        """
        rows_out = 0
        for index, table in enumerate(self._output_tables):
            mine = sorted((f for f in files if f.table == index), key=lambda f: (f.task, f.name))
            if mine:
                table.commit_files([(f.name, f.size, f.rows) for f in mine], txn=txn, at=at)
                if index < len(self.outputs):
                    rows_out = sum(f.rows for f in mine)
        return rows_out

    @functools.cached_property
    def _output_tables(self) -> list[Any]:
        """The output tables then the late rows tables, opened once per process (each commit catches up with
        the table's log itself; opening one again per micro-batch cost a log update and a metadata read)."""
        from headwater.storage.stream_table import StreamTable

        paths = [path for path, _ in self.outputs] + [path for _, path, _ in self.late_outputs]
        return [StreamTable.open(path) for path in paths]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_output_tables", None)  # opened where the plan runs
        return state


def subgraph_task(physical: PhysicalGraph, sg: Subgraph, table_paths: Mapping[int, str], checkpoints: Path,
                  run: str, *, keep_snapshots: int = KEEP_SNAPSHOTS,
                  fence: tuple[str, int] | None = None) -> SubgraphTask:
    """The data-plane description of subgraph ``sg`` (what every driver, Spark or local, runs)."""
    return SubgraphTask(
        run=f"g{run}", subgraph=sg.id, input_path=table_paths[sg.input],
        input_schema=physical.nodes[sg.input].schema,
        partition_key=sg.parallelism.key if sg.parallelism else None, n_tasks=sg.task_count,
        chain=tuple(physical.nodes[n] for n in sg.chain),
        outputs=tuple((table_paths[o], physical.nodes[o].schema) for o in sg.outputs),
        state_root=str(checkpoints / sg.key(physical) / "state"),
        output_buckets=tuple(reader_bucketing(physical, o) for o in sg.outputs), keep_snapshots=keep_snapshots,
        late_outputs=tuple(_late_outputs(physical, sg, table_paths)), fence=fence)


def _late_outputs(physical: PhysicalGraph, sg: Subgraph, table_paths: Mapping[int, str]) -> list[tuple[str, str, Schema]]:
    """(engine name, table path, table schema) of each engine of ``sg`` that routes its late rows to a table."""
    tables = {node.fqn: node for node in physical.tables()}
    out = []
    for nid in sg.chain:
        node = physical.nodes[nid]
        fqn = node.spec.late_rows_fqn if isinstance(node, EngineNode) and node.spec is not None else None
        if fqn is not None:
            out.append((node.name, table_paths[tables[fqn].id], tables[fqn].schema))
    return out


def reader_bucketing(physical: PhysicalGraph, table: int) -> Bucketing | None:
    """How the first parallel subgraph reading ``table`` partitions it, if one does (writers bucket by it)."""
    schema = physical.nodes[table].schema
    for sg in physical.subgraphs:
        if sg.input == table and sg.parallelism is not None and sg.parallelism.key in schema:
            return Bucketing(sg.parallelism.key, sg.parallelism.count)
    return None


_PROCESSORS: dict[int, Processor] = {}


def _processor(node: EngineNode) -> Processor:
    """Build each engine's processor once per Python worker (kernels load once)."""
    key = hash((node.fqn, cloudpickle.dumps(node.spec)))
    if key not in _PROCESSORS:
        assert node.spec is not None
        _PROCESSORS[key] = node.spec.processor()
    return _PROCESSORS[key]


