"""Renderings of logical and physical graphs for people: text (explain) and Graphviz DOT.

The versioned JSON a graph is stored and shipped as is :mod:`headwater.plan.document`.
"""

from __future__ import annotations

from typing import Any

from headwater.plan.document import PLAN_VERSION
from headwater.plan.logical import ComputeNode, LogicalGraph, Node, TableNode
from headwater.plan.physical import PhysicalGraph, edges_without_effect

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
    if g.config:
        lines.append(f"  config: {g.config.properties()}")
    for (s, d), config in g.edge_configs.items():
        lines.append(f"  edge {s}->{d} config: {config.properties()}")
    return "\n".join(lines)


def explain_physical(p: PhysicalGraph, logical: LogicalGraph | None = None) -> str:
    lines = [f"physical graph {p.fqn} (plan version {PLAN_VERSION})"]
    for t in p.tables():
        ha = ", ha: durable as the data directory's storage" if t.ha is not None else ""
        lines.append(f"  table [{t.id}] {t.name} ({'private' if t.private else 'public'}, {t.table_kind}{ha})")
    for sg in p.subgraphs:
        chain = " -> ".join(f"{p.nodes[n].type} {p.nodes[n].name}" for n in sg.chain) or "copy"
        outs = ", ".join(p.nodes[o].name for o in sg.outputs)
        par = f"partitioned by {sg.parallelism.key} into {sg.parallelism.count} tasks" if sg.parallelism else "1 task"
        reads = f"; reads {sg.config.describe()}" if sg.config.describe() else ""
        lines.append(f"  subgraph {sg.id}: {p.nodes[sg.input].name} -> {chain} -> {outs}; {par}; "
                     f"tasks {' '.join(sg.task_ids())}{reads}")
    lines.append("  edges: " + ", ".join(f"{e.src}->{e.dst} {e.partition}" for e in p.edges))
    unused = edges_without_effect(logical, p) if logical is not None else []
    if unused:
        lines.append("  edge settings without effect (no subscription follows the edge: it joins nodes fused into "
                     "one task, or leads to a table nothing in the graph reads): "
                     + ", ".join(f"{s}->{d}" for s, d in unused))
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
