"""``checkpoint_job_info`` and ``checkpoint_subjob_info`` (Orca B.7): a graph's micro-batches as checkpoints.

A checkpoint job is one micro-batch of one subgraph (``checkpoint_id`` = its batch id, ``partition_id`` =
the subgraph); its sub-jobs are its stream tasks. The rows come from the records the driver writes for
each batch (:mod:`headwater.dataplane.jobs`): completed once it is committed, begun while it is in flight.

Statuses (Orca's A.7): ``SUCCESS`` (committed; its state snapshots are kept), ``PURGED`` (committed, older
than the ``max_retained_checkpoints`` newest: its snapshots are gone), ``RUNNING`` (begun, not yet committed, the
graph running), ``ERROR`` (the same while the graph is in ``error``: it will be retried),
``FAILED`` (the same while the graph is ``failed`` or stopped by a failure).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from headwater.dataplane.jobs import in_flight, read_jobs
from headwater.plan.physical import PhysicalGraph
from headwater.runtime.lifecycle import GraphStatus
from headwater.storage.records import GraphRecord

STATUS_OF_GRAPH = {GraphStatus.ERROR: "ERROR", GraphStatus.FAILED: "FAILED"}


def job_rows(rec: GraphRecord, physical: PhysicalGraph, checkpoints: Path, keep: int) -> list[dict[str, Any]]:
    """One row per micro-batch of each subgraph of the graph ``rec``, oldest first."""
    rows = []
    for sg in physical.subgraphs:
        directory = checkpoints / sg.key(physical)
        records = read_jobs(directory)
        for i, r in enumerate(records):
            rows.append({"checkpoint_id": r["batch"], "job_id": rec.id, "partition_id": sg.id,
                         "created_time": r["created"], "finished_time": r["finished"],
                         "status": "SUCCESS" if i >= len(records) - keep else "PURGED",
                         "input_versions": f"({r['input'][0]}, {r['input'][1]}]", "rows_in": r["rows_in"],
                         "rows_out": r["rows_out"], "on_driver": r["driver"], "extra": ""})
        pending = in_flight(directory)
        if pending is not None:
            status = STATUS_OF_GRAPH.get(GraphStatus(rec.status), "RUNNING")
            start, end = pending["input"]
            rows.append({"checkpoint_id": pending["batch"], "job_id": rec.id, "partition_id": sg.id,
                         "created_time": None, "finished_time": None, "status": status,
                         "input_versions": f"({start}, {end}]", "rows_in": None,
                         "rows_out": None, "on_driver": None, "extra": rec.reason if status != "RUNNING" else ""})
    return rows


def subjob_rows(rec: GraphRecord, physical: PhysicalGraph, checkpoints: Path) -> list[dict[str, Any]]:
    """One row per stream task of each recorded micro-batch: rows in and out (None in a batch recorded before
    tasks' rows out were) and seconds per stage."""
    rows = []
    for sg in physical.subgraphs:
        task_ids = sg.task_ids()
        for r in read_jobs(checkpoints / sg.key(physical)):
            for t in r["tasks"]:
                rows.append({"checkpoint_id": r["batch"], "job_id": rec.id, "partition_id": sg.id,
                             "subjob_id": task_ids[t["task"]], "status": "success", "rows_in": t["rows_in"],
                             "rows_out": t.get("rows_out"),
                             **{f"{stage}_s": round(v, 6) for stage, v in t["seconds"].items()}})
    return rows
