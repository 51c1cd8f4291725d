"""Renderings of logical and physical graphs: text (explain), Graphviz DOT and versioned JSON."""

from __future__ import annotations

import json
from typing import Any

from headwater.errors import shorten
from headwater.plan.logical import ComputeNode, LogicalGraph, Node, TableNode
from headwater.plan.physical import PLAN_VERSION, PhysicalGraph

EXECUTION = ("one Spark task per stream task and micro-batch reads the batch's table versions, keeps its keys, "
             "runs the maps and engines (state snapshot per input version) and writes Parquet; the driver "
             "commits the files once per output table with the batch id (idempotent)")


def _node_line(node: Node, parallelism: Any = None) -> str:
    par = f" parallelize({parallelism.key}, {parallelism.count})" if parallelism else ""
    props = node.properties()
    shown = ", ".join(f"{k}={v}" for k, v in props.items() if k not in ("fqn",))
    return f"[{node.id}] {node.type} {node.name}{par} {{{shown}}} -> {node.schema}"


def explain_logical(g: LogicalGraph) -> str:
    lines = [f"logical graph {g.fqn}"]
    for node in g.nodes.values():
        lines.append("  " + _node_line(node, node.parallelism if isinstance(node, ComputeNode) else None))
    lines.append("  edges: " + ", ".join(f"{s}->{d}" for s, d in g.edges))
    return "\n".join(lines)


def explain_physical(p: PhysicalGraph) -> str:
    lines = [f"physical graph {p.fqn} (plan version {PLAN_VERSION})"]
    for t in p.tables():
        lines.append(f"  table [{t.id}] {t.name} ({'private' if t.private else 'public'}, {t.table_kind})")
    for sg in p.subgraphs:
        chain = " -> ".join(f"{p.nodes[n].type} {p.nodes[n].name}" for n in sg.chain) or "copy"
        outs = ", ".join(p.nodes[o].name for o in sg.outputs)
        par = f"partitioned by {sg.parallelism.key} into {sg.parallelism.count} tasks" if sg.parallelism else "1 task"
        lines.append(f"  subgraph {sg.id}: {p.nodes[sg.input].name} -> {chain} -> {outs}; {par}; "
                     f"tasks {' '.join(sg.task_ids())}")
    lines.append("  edges: " + ", ".join(f"{e.src}->{e.dst} {e.partition}" for e in p.edges))
    lines.append(f"  spark: {len(p.subgraphs)} streaming quer{'y' if len(p.subgraphs) == 1 else 'ies'}, one per subgraph")
    lines.append(f"  each micro-batch: {EXECUTION}")
    return "\n".join(lines)


def to_dot(g: LogicalGraph, p: PhysicalGraph | None = None) -> str:
    """Graphviz DOT: tables as boxes, engines as ellipses; with a plan, clusters per subgraph."""
    nodes = p.nodes if p else g.nodes
    lines = [f'digraph "{g.fqn}" {{', "  rankdir=LR;"]

    def node_stmt(n: Node) -> str:
        shape = "box" if isinstance(n, TableNode) else "ellipse"
        style = ', style="dashed"' if isinstance(n, TableNode) and n.private else ""
        return f'  n{n.id} [label="{n.id}: {n.name}", shape={shape}{style}];'

    clustered: set[int] = set()
    if p:
        for sg in p.subgraphs:
            if not sg.chain:
                continue
            lines.append(f"  subgraph cluster_{sg.id} {{")
            lines.append(f'    label="subgraph {sg.id} ({sg.task_count} task{"s" if sg.task_count > 1 else ""})";')
            for nid in sg.chain:
                lines.append("  " + node_stmt(nodes[nid]))
                clustered.add(nid)
            lines.append("  }")
    for n in nodes.values():
        if n.id not in clustered:
            lines.append(node_stmt(n))
    if p:
        for e in p.edges:
            lines.append(f'  n{e.src} -> n{e.dst} [label="{e.partition}"];')
    else:
        for s, d in g.edges:
            lines.append(f"  n{s} -> n{d};")
    lines.append("}")
    return "\n".join(lines)


def _node_json(n: Node, p: PhysicalGraph | None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": n.id, "name": n.name, "type": n.type, "schema": n.schema.to_dict(),
                           "properties": n.properties()}
    if isinstance(n, ComputeNode):
        out["parallelism"] = (
            {"keyName": n.parallelism.key, "count": n.parallelism.count} if n.parallelism else {"keyName": None, "count": 1}
        )
    sg = p.subgraph_of(n.id) if p else None
    out["subgraphId"] = sg.id if sg else -1
    return out


def to_json(g: LogicalGraph, p: PhysicalGraph | None = None) -> dict[str, Any]:
    """Versioned, JSON-ready description of the graph (and of its plan once submitted)."""
    doc: dict[str, Any] = {
        "version": PLAN_VERSION,
        "fqn": g.fqn,
        "logical": {
            "nodes": [_node_json(n, None) for n in g.nodes.values()],
            "edges": [{"inNodeId": s, "outNodeId": d} for s, d in g.edges],
        },
    }
    if p:
        doc["physical"] = {
            "nodes": [_node_json(n, p) for n in p.nodes.values()],
            "edges": [{"inNodeId": e.src, "outNodeId": e.dst, "partitionType": e.partition} for e in p.edges],
            "subgraphs": [
                {"id": sg.id, "input": sg.input, "chain": list(sg.chain), "outputs": list(sg.outputs),
                 "tasks": sg.task_ids()}
                for sg in p.subgraphs
            ],
        }
    return doc


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, default=str)


def state_layout(doc: dict[str, Any]) -> dict[str, Any]:
    """What a submitted graph's checkpoints and engine state depend on, from its JSON rendering.

    Per subgraph: its input table, the chain of nodes (name, kind, schema, properties, parallelism), its
    outputs and task count. Two plans with the same layout can share state; presentation fields (plan
    version, routes) do not count.
    """
    nodes = {n["id"]: n for n in doc["physical"]["nodes"]}

    def node(i: int) -> dict[str, Any]:
        n = nodes[i]
        return {k: n.get(k) for k in ("name", "type", "schema", "properties", "parallelism")}

    return {f"subgraph {sg['id']}": {"input": nodes[sg["input"]]["name"], "chain": [node(i) for i in sg["chain"]],
                                     "outputs": [nodes[o]["name"] for o in sg["outputs"]], "tasks": len(sg["tasks"])}
            for sg in doc["physical"]["subgraphs"]}


def plan_changes(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Where two plans' state layouts differ, as readable paths (empty when state can be reused).

    >>> a = {"physical": {"nodes": [{"id": 0, "name": "t"}, {"id": 1, "name": "e", "properties": {"w": "1min"}}],
    ...                   "subgraphs": [{"id": 0, "input": 0, "chain": [1], "outputs": [], "tasks": ["0.0"]}]}}
    >>> b = json.loads(json.dumps(a)); b["physical"]["nodes"][1]["properties"]["w"] = "5min"
    >>> plan_changes(a, b)
    ["subgraph 0 > chain[0] > properties > w: was '1min', now '5min'"]
    """
    changes: list[str] = []

    def walk(path: str, old: Any, new: Any) -> None:
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new), key=str):
                walk(f"{path} > {key}" if path else str(key), old.get(key), new.get(key))
        elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            for i, (o, n) in enumerate(zip(old, new, strict=True)):
                walk(f"{path}[{i}]", o, n)
        elif old != new:
            changes.append(f"{path}: was {shorten(repr(old), 120)}, now {shorten(repr(new), 120)}")

    walk("", state_layout(stored), state_layout(current))
    return changes
