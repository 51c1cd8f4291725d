"""What the web console shows, composed from the API's operations as the signed-in user may call them.

Every number on a page comes from a :class:`~headwater.runtime.gateway.Gateway` call of that user (so a page
shows what the API would answer, and nothing the user may not see); this module only joins and sums them:

- a graph's lag is the rows committed upstream and not yet processed, summed over its subgraphs (one row per
  subgraph of ``task_subscription_meta``), its throughput the rows its micro-batches read in the last
  :data:`RATE_WINDOW_S` seconds (``checkpoint_jobs``) per second;
- a node of the graph's picture carries its subgraph's rows in and out over the recorded micro-batches, its
  engine's state size summed over the stream tasks (``engine_meta``), and its input table's lag.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from typing import Any

from headwater.catalog import FQN, resolve
from headwater.plan.document import from_json
from headwater.plan.logical import ComputeNode, TableNode
from headwater.runtime.gateway import Gateway
from headwater.runtime.lifecycle import GraphStatus
from headwater.service.wire import to_wire
from headwater.storage.records import TableRecord

RATE_WINDOW_S = 60.0
# the lifecycle calls a graph in each status offers (each shown only to a user the call would allow)
ACTIONS = {GraphStatus.RUNNING: ("stop_graph", "drop_graph"), GraphStatus.BUILDING: ("stop_graph", "drop_graph"),
           GraphStatus.ERROR: ("stop_graph", "drop_graph"), GraphStatus.STOPPED: ("start_graph", "drop_graph"),
           GraphStatus.FAILED: ("resubmit_graph", "drop_graph"), GraphStatus.DESTROYED: ("resubmit_graph",
                                                                                          "purge_records")}


def graph_name(text: str) -> FQN:
    """A graph's name from a URL: parsed by the catalog's rules (anything else is refused, never cleaned)."""
    return resolve(text, "stream_graph", current_catalog=None)


def table_name(text: str) -> FQN:
    return resolve(text, "stream_table", current_catalog=None)


def actions(gw: Gateway, fqn: str, status: str) -> list[str]:
    """The lifecycle calls the console offers for a graph: those its status admits and the user may make."""
    name = graph_name(fqn)
    return [op for op in ACTIONS.get(GraphStatus(status), ()) if gw.allows(op, fqn=name, **(
        {"include_tables": False} if op == "drop_graph" else {}))]


def lag_by_graph(subscriptions: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per graph: rows and versions not yet processed, summed over its subgraphs (tasks of one subgraph share
    its lag), and the age of its newest micro-batch."""
    seen: set[tuple[str, str]] = set()
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"pending_rows": 0, "pending_versions": 0,
                                                          "last_batch_age_s": None})
    for r in subscriptions:
        if (r["graph"], r["action_name"]) in seen:
            continue
        seen.add((r["graph"], r["action_name"]))
        g = out[r["graph"]]
        g["pending_rows"] += r["pending_rows"] or 0
        g["pending_versions"] += r["pending_versions"] or 0
        age = r["last_batch_age_s"]
        if age is not None and (g["last_batch_age_s"] is None or age < g["last_batch_age_s"]):
            g["last_batch_age_s"] = age
    return out


def rows_per_s(jobs: list[dict[str, Any]], now: float, by: str = "job_id") -> dict[int, float]:
    """Per graph id (``by="job_id"``) or subgraph (``by="partition_id"``): rows read by the micro-batches that
    finished in the last :data:`RATE_WINDOW_S` seconds, per second."""
    out: dict[int, float] = defaultdict(float)
    for j in jobs:
        if j["finished_time"] is not None and now - float(j["finished_time"]) <= RATE_WINDOW_S:
            out[j[by]] += (j["rows_in"] or 0) / RATE_WINDOW_S
    return out


def graphs(gw: Gateway, now: float | None = None) -> list[dict[str, Any]]:
    """The graphs page: one row per graph the user may see."""
    now = time.time() if now is None else now
    lags, rates = lag_by_graph(gw.task_subscription_meta(None)), rows_per_s(gw.checkpoint_jobs(None), now)
    rows = []
    for g in gw.graph_meta(None):
        lag = lags.get(g["fqn"], {})
        rows.append({"fqn": g["fqn"], "id": g["id"], "status": g["status"], "owner": gw.access.owner(g["fqn"]),
                     "age_s": round(now - float(g["create_time"]), 1) if g["create_time"] else None,
                     "rows_per_s": round(rates.get(g["id"], 0.0), 2), "pending_rows": lag.get("pending_rows"),
                     "pending_versions": lag.get("pending_versions"), "reason": g["reason"],
                     "actions": actions(gw, g["fqn"], g["status"])})
    return rows


def graph_picture(gw: Gateway, fqn: FQN) -> dict[str, Any]:
    """A graph's logical and physical DAG for the layout library: nodes, edges labelled by how rows move,
    subgraphs (the physical picture's groups) with their stream tasks."""
    info = gw.graph_info(fqn)
    logical, physical = from_json(json.dumps(info["document"]), load_callables=False)

    def node(n: Any) -> dict[str, Any]:
        kind = "table" if isinstance(n, TableNode) else "engine" if isinstance(n, ComputeNode) else "node"
        sg = physical.subgraph_of(n.id) if physical is not None else None
        return {"id": str(n.id), "name": n.name, "type": str(n.type), "kind": kind,
                "private": bool(getattr(n, "private", False)), "subgraph": None if sg is None else sg.id}

    picture: dict[str, Any] = {
        "fqn": info["fqn"], "status": info["status"], "reason": info["reason"],
        "logical": {"nodes": [node(n) for n in logical.nodes.values()],
                    "edges": [{"src": str(s), "dst": str(d), "label": ""} for s, d in logical.edges]}}
    if physical is not None:
        picture["physical"] = {
            "nodes": [node(n) for n in physical.nodes.values()],
            "edges": [{"src": str(e.src), "dst": str(e.dst), "label": str(e.partition)} for e in physical.edges],
            "subgraphs": [{"id": sg.id, "tasks": sg.task_ids(), "input": str(sg.input)} for sg in physical.subgraphs]}
    picture["actions"] = actions(gw, info["fqn"], info["status"])
    return picture


def graph_live(gw: Gateway, fqn: FQN, picture: dict[str, Any]) -> dict[str, Any]:
    """The numbers on a graph's picture now: per subgraph (rows in and out, lag, last batch), per engine node
    (state bytes, keys, late rows), the graph's status and its newest state-machine events."""
    info = gw.graph_info(fqn)
    jobs = gw.checkpoint_jobs(fqn)
    subgraphs: dict[int, dict[str, Any]] = {
        sg["id"]: {"rows_in": 0, "rows_out": 0, "batches": 0, "last_batch_s": None, "pending_rows": 0,
                   "pending_versions": 0, "rows_per_s": 0.0} for sg in picture.get("physical", {}).get("subgraphs", [])}
    now = time.time()
    for j in jobs:
        s = subgraphs.get(j["partition_id"])
        if s is None or j["finished_time"] is None:
            continue
        s["rows_in"] += j["rows_in"] or 0
        s["rows_out"] += j["rows_out"] or 0
        s["batches"] += 1
        s["last_batch_s"] = round(float(j["finished_time"]) - float(j["created_time"]), 3)
    for sg, rate in rows_per_s(jobs, now, by="partition_id").items():
        if sg in subgraphs:
            subgraphs[sg]["rows_per_s"] = round(rate, 2)
    for r in gw.task_subscription_meta(fqn):
        s = subgraphs.get(int(str(r["action_name"]).removeprefix("subgraph_")))
        if s is not None:
            s["pending_rows"], s["pending_versions"] = r["pending_rows"], r["pending_versions"]
            s["last_batch_age_s"] = r["last_batch_age_s"]
    engines: dict[str, dict[str, Any]] = {}
    for r in gw.engine_meta(fqn):
        e = engines.setdefault(r["name"], {"state_bytes": 0, "keys": 0, "late_rows": 0})
        for k in e:
            e[k] += r[k] or 0
    named = re.compile(rf"(?<![\w.]){re.escape(info['fqn'])}(?![\w])")  # this graph, not one whose name extends it
    events = [e for e in gw.state_machine_events(200) if named.search(str(e.get("detail", "")))][-20:]
    return {"status": info["status"], "reason": info["reason"], "subgraphs": subgraphs, "engines": engines,
            "events": events, "actions": actions(gw, info["fqn"], info["status"]), "at": now}


def checkpoints(gw: Gateway, fqn: FQN) -> dict[str, Any]:
    """A graph's checkpoint jobs (micro-batches) and their sub-jobs (stream tasks), oldest first."""
    subjobs: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for s in gw.checkpoint_subjobs(fqn):
        subjobs[(s["partition_id"], s["checkpoint_id"])].append(s)
    jobs = [{**j, "subjobs": subjobs.get((j["partition_id"], j["checkpoint_id"]), [])} for j in gw.checkpoint_jobs(fqn)]
    return {"fqn": str(fqn), "jobs": jobs, "config": gw.checkpoint_config(fqn)}


def table_page(gw: Gateway, fqn: FQN, sample_rows: int = 20) -> dict[str, Any]:
    """A table: its definition, rows and versions, lineage, and a sample of its newest rows."""
    info = gw.table_info(fqn)
    [meta] = gw.table_meta(fqn) or [{}]
    lineage = gw.data_lineage(fqn)
    latest = meta.get("version")
    sample: list[dict[str, Any]] = []
    if isinstance(latest, int) and latest >= 1:
        changes = gw.table_changes(fqn, after_version=max(latest - 1, 0), timeout=0.0)
        sample = changes.slice(max(changes.num_rows - sample_rows, 0)).to_pylist()
    return {"fqn": str(fqn), "info": to_wire(info, TableRecord), "meta": meta, "lineage": lineage, "sample": sample}
