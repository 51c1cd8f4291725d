"""``stream_engine_meta`` and ``stream_engine_stat`` (Orca's ``getStreamEngineStat``): each engine of a graph
per stream task, with the counters of its newest state snapshot (keys, late rows dropped...), read from the JSON
the worker saves beside it: the master never loads a state itself (no unpickling there, whatever its size).

The counters live in the engines' state, so they are exactly-once like the rest of it: a replayed micro-batch
counts its late rows once. They read the newest snapshot a task saved, which may belong to a micro-batch
still being committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headwater.dataplane.jobs import newest_job
from headwater.dataplane.snapshots import SnapshotStore
from headwater.dataplane.timers import read_status, status_path
from headwater.plan.logical import EngineNode
from headwater.plan.physical import PhysicalGraph


def engine_rows(physical: PhysicalGraph, checkpoints: Path) -> list[dict[str, Any]]:
    """One row per engine and stream task: task_id, name, type, schema, fqn, its counters, the size of its newest
    state snapshot (state_bytes), and its subgraph's newest micro-batch that read input: the task's rows in and
    out (of its chain; NULL out from a micro-batch recorded before Headwater kept it per task), the batch's
    duration."""
    rows: list[dict[str, Any]] = []
    for sg in physical.subgraphs:
        state_root = checkpoints / sg.key(physical) / "state"
        last = newest_job(checkpoints / sg.key(physical), read_input=True)
        rows_in = {t["task"]: t["rows_in"] for t in last["tasks"]} if last else {}
        rows_out = {t["task"]: t.get("rows_out") for t in last["tasks"]} if last else {}
        for node in (physical.nodes[n] for n in sg.chain):
            if not isinstance(node, EngineNode):
                continue
            store = SnapshotStore(str(state_root / node.name))
            for index, task_id in enumerate(sg.task_ids()):
                stats = store.newest_stats(index) or {}  # JSON beside the snapshot: no state is unpickled here
                rows.append({"task_id": task_id, "name": node.name, "type": str(node.type), "fqn": node.fqn,
                             "schema": [list(c) for c in node.schema.columns],
                             "keys": stats.get("keys"), "late_rows": stats.get("late_rows"),
                             "state_bytes": store.newest_bytes(index),
                             "last_batch_rows_in": rows_in.get(index),
                             "last_batch_rows_out": rows_out.get(index),
                             "last_batch_s": round(last["finished"] - last["created"], 3) if last else None,
                             **_timer_columns(checkpoints, node, first_task=index == 0)})
    return rows


TIMER_COLUMNS = ("timer_runs", "timer_failures", "timer_paused", "timer_last_error")  # the status's keys, prefixed


def _timer_columns(checkpoints: Path, node: EngineNode, *, first_task: bool) -> dict[str, Any]:
    """A timer engine's counters (headwater.runtime.timers), from their JSON, on its first stream task's row
    (NULL on the others: one timer per engine, whatever its parallelism, so a column sums to the engine's
    count); nothing for other engines."""
    if str(node.type) != "TIMER_ENGINE":
        return {}
    if not first_task:
        return dict.fromkeys(TIMER_COLUMNS)
    status = read_status(status_path(checkpoints, node.name))
    return {column: status[column.removeprefix("timer_")] for column in TIMER_COLUMNS}
