"""How far behind a graph is, read from files: each subgraph's input table log and its checkpoint's job records.

A subgraph reads one stream table (a source, or the table between it and the subgraph upstream). Its lag is
the versions of that table committed upstream that it has not yet processed: the table's newest version
against the input version of its newest committed micro-batch (``<subgraph checkpoint>/jobs``, written right
after the batch's output commit). Files only, so it answers for a running, stopped or failed graph alike,
without asking the worker, in a few ``stat`` calls.

Waiting for a graph to catch up is built on it (:class:`CatchUp`): one non-blocking look at a time, so that a
wait holds no thread between looks (the HTTP server drives it from its event loop).

>>> lag = SubgraphLag(subgraph=0, input_path="/t", processed_version=3, latest_version=5, last_batch=None)
>>> lag.pending_versions
2
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.dataplane.jobs import newest_job
from headwater.plan.logical import TableNode
from headwater.plan.physical import PhysicalGraph, Subgraph
from headwater.storage.table_log import latest_version, read_batch


@dataclass(frozen=True)
class SubgraphLag:
    """One subgraph's position in its input table."""

    subgraph: int
    input_path: str
    processed_version: int  # the input version its newest committed micro-batch ended at (0 before any)
    latest_version: int  # the input table's newest committed version
    last_batch: dict[str, Any] | None  # that micro-batch's job record (headwater.dataplane.jobs), if any

    @property
    def pending_versions(self) -> int:
        return max(self.latest_version - self.processed_version, 0)

    def pending_rows(self) -> int:
        """Rows in the versions not yet processed (one log entry read per version)."""
        return read_batch(self.input_path, self.processed_version, self.latest_version).num_rows()


def subgraph_lag(physical: PhysicalGraph, sg: Subgraph, table_paths: dict[int, str], checkpoints: Path) -> SubgraphLag:
    record = newest_job(checkpoints / sg.key(physical))
    processed = int(record["input"][1]) if record else 0
    path = table_paths[sg.input]
    return SubgraphLag(sg.id, path, processed, latest_version(path, processed), record)


def graph_lag(physical: PhysicalGraph, table_paths: dict[int, str], checkpoints: Path) -> list[SubgraphLag]:
    """Every subgraph's lag, in topological order."""
    return [subgraph_lag(physical, sg, table_paths, checkpoints) for sg in physical.subgraphs]


def subscription_rows(physical: PhysicalGraph, lags: list[SubgraphLag], now: float | None = None) -> list[dict[str, Any]]:
    """Orca's ``getOrcaStreamTaskSubscriptionMeta`` (task_id, table_name, action_name), one row per stream task,
    with its subgraph's lag: versions and rows committed upstream but not processed, and the age of its newest
    micro-batch (None before the first)."""
    now = time.time() if now is None else now
    rows = []
    for sg, lag in zip(physical.subgraphs, lags, strict=True):
        pending_rows = lag.pending_rows()
        last = lag.last_batch
        for task in sg.task_ids():
            rows.append({
                "task_id": task, "table_name": table_name(physical, sg), "action_name": f"subgraph_{sg.id}",
                "processed_version": lag.processed_version, "latest_version": lag.latest_version,
                "pending_versions": lag.pending_versions, "pending_rows": pending_rows,
                "last_batch_id": last["batch"] if last else None,
                "last_batch_age_s": round(now - float(last["finished"]), 3) if last else None,
                "last_batch_s": round(float(last["finished"]) - float(last["created"]), 3) if last else None,
            })
    return rows


def table_name(physical: PhysicalGraph, sg: Subgraph) -> str:
    node = physical.nodes[sg.input]
    return str(node.fqn) if isinstance(node, TableNode) else node.name


class CatchUp:
    """Whether a graph has processed everything appended before this object was made, one look at a time.

    Subgraphs are taken in topological order: the first must reach its input table's version as of the
    first look; each next one, the version its input had once the one before it got there (what the
    upstream wrote meanwhile is part of "everything appended so far").
    """

    def __init__(self, physical: PhysicalGraph, table_paths: dict[int, str], checkpoints: Path) -> None:
        self.physical, self.table_paths, self.checkpoints = physical, table_paths, checkpoints
        self._next = 0  # the subgraph being waited for
        self._target: int | None = None  # the input version it must reach
        self.behind: SubgraphLag | None = None  # its position at the last look

    def look(self) -> bool:
        """True once every subgraph has caught up (non-blocking: reads a few files)."""
        while self._next < len(self.physical.subgraphs):
            lag = subgraph_lag(self.physical, self.physical.subgraphs[self._next], self.table_paths, self.checkpoints)
            if self._target is None:
                self._target = lag.latest_version
            if lag.processed_version < self._target:
                self.behind = lag
                return False
            self._next, self._target = self._next + 1, None
        self.behind = None
        return True

    def describe(self) -> str:
        lag = self.behind
        if lag is None:
            return "every subgraph has processed its input"
        return (f"subgraph {lag.subgraph} has processed its input up to version {lag.processed_version} of "
                f"{self._target}")
