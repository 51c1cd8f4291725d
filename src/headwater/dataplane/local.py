"""The in-process driver of the data plane: a graph's micro-batches without Spark.

Spark drives :class:`~headwater.dataplane.task.SubgraphTask` in production (``headwater.spark.fused``);
``LocalRunner`` drives the very same tasks here, in order: for each subgraph, the input versions
appended since its last batch form one micro-batch, every stream task runs over it, and the files are
committed with the same idempotent transaction. Tests use it for streaming == batch properties and for
replays after a simulated crash; users call it through ``StreamGraph.run_local``.

>>> import pandas as pd, headwater as hw, tempfile
>>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
>>> session.use_catalog("doc")
>>> g = session.stream_graph("totals")
>>> _ = (g.source("ticks", schema={"sym": "string", "qty": "long"}).parallelize("sym", 2)
...   .reactive_state_engine(key_column="sym", metrics=["qty", "cumsum(qty) as total"]).sync().sink("out"))
>>> out = g.run_local({"ticks": pd.DataFrame({"sym": ["a", "b", "a"], "qty": [1, 2, 3]})})
>>> out["out"].sort_values(["sym", "total"]).to_dict("list")
{'sym': ['a', 'a', 'b'], 'qty': [1, 3, 2], 'total': [1, 4, 2]}
>>> session.close()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pandas as pd
import pyarrow as pa

from headwater.dataplane.engine_stats import engine_rows
from headwater.dataplane.task import OutputFile, SubgraphTask, reader_bucketing, subgraph_task
from headwater.errors import GraphDefinitionError
from headwater.plan.logical import TableRole
from headwater.plan.physical import PhysicalGraph
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_files import read_files
from headwater.storage.table_log import latest_version, read_batch

Frames: TypeAlias = pd.DataFrame | pa.Table


class LocalRunner:
    """Run a physical graph's subgraphs in this process over stream tables under ``root``."""

    def __init__(self, physical: PhysicalGraph, root: Path, *, run: str = "local") -> None:
        self.physical = physical
        self.tables: dict[str, StreamTable] = {}
        paths: dict[int, str] = {}
        for node in physical.tables():
            table = StreamTable.create(root / "tables" / node.name, node.schema, kind=node.table_kind,
                                       key_columns=node.key_columns, time_column=node.time_column, name=node.name)
            table.bucketing = reader_bucketing(physical, node.id)  # as the master does for appends
            self.tables[node.name] = table
            paths[node.id] = str(table.path)
        self.tasks: list[SubgraphTask] = [subgraph_task(physical, sg, paths, root / "checkpoints", run)
                                          for sg in physical.subgraphs]
        self.offsets = [0] * len(self.tasks)  # the input version each subgraph has committed up to
        self.batches = [0] * len(self.tasks)  # the next micro-batch id of each subgraph

    def append(self, table: str, data: Frames, *, at: float | None = None) -> int | None:
        """Append ``data`` to the graph's table ``table`` (one commit: one input micro-batch), made at time ``at``
        (by default now: the processing time system-time engines see)."""
        if table not in self.tables:
            raise GraphDefinitionError(f"run_local: the graph has no table {table!r}; tables: {', '.join(self.tables)}")
        return self.tables[table].append(data, at=at)

    def step(self, *, crash_after_tasks: int | None = None, at: float | None = None) -> bool:
        """Run one micro-batch of every subgraph that has new input, in topological order.

        ``crash_after_tasks=k`` simulates a crash inside the first pending micro-batch: ``k`` of its
        tasks run (writing files and state), nothing is committed and the runner stops there, as a
        killed process would; the next ``step`` replays that batch from the same offsets. Returns
        True if any micro-batch ran. ``at``: the time of the commits it makes (by default now).
        """
        ran = False
        for index, task in enumerate(self.tasks):
            start, end = self.offsets[index], latest_version(task.input_path, self.offsets[index])
            if end <= start:
                continue
            batch = read_batch(task.input_path, start, end)  # read once, handed to every task
            reports = []
            for t in range(task.n_tasks):
                if crash_after_tasks is not None and t >= crash_after_tasks:
                    return True
                reports.append(task.run_task(t, batch))
            if crash_after_tasks is not None:
                return True  # every task ran, the commit did not
            files: list[OutputFile] = [f for r in reports for f in r.files]
            task.commit(files, txn=(f"{task.run}/subgraph_{task.subgraph}", self.batches[index]), at=at)
            self.offsets[index], self.batches[index] = end, self.batches[index] + 1
            ran = True
        return ran

    def run_until_idle(self, *, at: float | None = None) -> None:
        """Run micro-batches until every subgraph has processed all of its input."""
        while self.step(at=at):
            pass

    def read(self, table: str) -> pd.DataFrame:
        """Every row of ``table`` in commit order."""
        t = self.tables[table]
        files = [f for v in range(1, t.version() + 1) for f in t.commit(v).files]
        return read_files(files, t.schema.to_arrow()).to_pandas()


class LocalResult(dict[str, pd.DataFrame]):
    """What :func:`run_local` returns: every table the graph writes, by name, and :attr:`engine_stats`."""

    engine_stats: pd.DataFrame  # one row per engine and stream task, as session.stream_engine_stat gives


Clock: TypeAlias = Callable[[], Any] | Sequence[Any]


def run_local(physical: PhysicalGraph, inputs: Mapping[str, Frames | Sequence[Frames]], root: Path,
              clock: Clock | None = None) -> LocalResult:
    """Feed ``inputs`` (table name -> frame, or a list of frames: one micro-batch each) through the graph.

    Returns every table the graph writes (sinks, buffers, engines' late rows and error tables; private tables excluded)
    as a pandas DataFrame in commit order, and the engines' statistics (``.engine_stats``). ``clock``: the
    processing time of each round of micro-batches (the i-th frame of every input, and what it causes
    downstream), which system-time engines see: a list of times, one per round, or a function called once per
    round; a time is seconds since the epoch, or anything ``pandas.Timestamp`` reads (naive: UTC). By default,
    the wall clock.
    """
    runner = LocalRunner(physical, root)
    sources = {physical.nodes[sg.input].name for sg in physical.subgraphs}
    unknown = [name for name in inputs if name not in runner.tables]
    if unknown:
        raise GraphDefinitionError(f"run_local: no table named {', '.join(map(repr, unknown))} in graph "
                                   f"{physical.fqn}; inputs go to its source tables: {', '.join(sorted(sources))}")
    batches = {name: list(frames) if isinstance(frames, list | tuple) else [frames] for name, frames in inputs.items()}
    rounds = max((len(b) for b in batches.values()), default=0)
    times = _times(clock, rounds)
    for i in range(rounds):
        for name, frames in batches.items():
            if i < len(frames):
                runner.append(name, frames[i], at=times[i])
        runner.step(at=times[i])
    runner.run_until_idle(at=times[-1] if times else None)
    written = {physical.nodes[o].name for sg in physical.subgraphs for o in sg.outputs}
    written |= {n.name for n in physical.tables() if n.role in (TableRole.LATE_ROWS, TableRole.ERRORS)}
    result = LocalResult({n.name: runner.read(n.name) for n in physical.tables() if n.name in written and not n.private})
    result.engine_stats = pd.DataFrame(engine_rows(physical, root / "checkpoints"), columns=STAT_COLUMNS)
    return result


STAT_COLUMNS = ["task_id", "name", "type", "keys", "late_rows", "state_bytes"]


def _times(clock: Clock | None, rounds: int) -> list[float | None]:
    """Each round's time, in seconds since the epoch (None: the wall clock's)."""
    if clock is None:
        return [None] * rounds
    if callable(clock):
        values = [clock() for _ in range(rounds)]
    else:
        values = list(clock)
        if len(values) < rounds:
            raise GraphDefinitionError(f"run_local(clock=...): {len(values)} time(s) for {rounds} rounds of "
                                       "micro-batches; give one per round (the longest input list)")
    return [_seconds(v) for v in values[:rounds]]


def _seconds(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise GraphDefinitionError(f"run_local(clock=...): {value!r} is not a time (seconds since the epoch, or "
                                   "a timestamp such as '2024-01-02 09:30:00')") from None
    return float((stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp).timestamp())
