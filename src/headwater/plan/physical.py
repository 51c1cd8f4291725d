"""Physical planning: the logical graph becomes tables, subgraphs and stream tasks.

The steps follow Orca's ``submit()`` (reference A.3):

1. **cycle check** — topological sort;
2. **private tables** — inserted where an engine's output fans out to several compute
   nodes, and where consecutive compute nodes differ in parallelism (the table gathers
   the upstream output and the downstream re-partitions it: a shuffle);
3. **redundant tables removed** — a private table beside a public table that holds
   the same rows is dropped and its readers read the public table;
4. **subgraphs** — maximal chains of compute nodes of equal parallelism between tables;
5. **stream tasks** — one per partition of a subgraph.

Each subgraph later becomes one Spark streaming query (see ``headwater.spark``), reading its input table
with the graph's subscription settings (``set_config_map``) overridden by those of the edges that are its
subscription (``set_local_config_once``; :func:`subscription_edges`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum

from headwater.plan.logical import ComputeNode, LogicalGraph, MapNode, Node, Parallelism, TableNode, TableRole
from headwater.plan.subscription import SubscriptionConfig


class Partitioning(StrEnum):
    """How rows travel along a physical edge."""

    FORWARD = "FORWARD"  # within a task, in order
    SHUFFLE = "SHUFFLE"  # from a table to the task that owns each row's key (rows are bucketed once, on write)


@dataclass(frozen=True)
class Subgraph:
    id: int
    input: int  # table node id
    chain: tuple[int, ...]  # compute node ids, in order
    outputs: tuple[int, ...]  # table node ids
    parallelism: Parallelism | None
    config: SubscriptionConfig = field(default_factory=SubscriptionConfig)  # how its query reads the input (subscription settings)

    @property
    def task_count(self) -> int:
        return self.parallelism.count if self.parallelism else 1

    def key(self, graph: PhysicalGraph) -> str:
        """A stable name for the subgraph's checkpoint and state: its input table and first node (or output).

        Subgraph numbers follow the planner's order and shift when a branch is added; this key does not.
        """
        last = graph.nodes[self.chain[0]].name if self.chain else f"copy_{graph.nodes[self.outputs[0]].name}"
        return f"{graph.nodes[self.input].name}__{last}"

    def task_ids(self) -> list[str]:
        return [f"{self.id}.{i}" for i in range(self.task_count)]


@dataclass(frozen=True)
class PhysicalEdge:
    src: int
    dst: int
    partition: Partitioning


@dataclass(frozen=True)
class PhysicalGraph:
    fqn: str
    nodes: dict[int, Node]
    edges: tuple[PhysicalEdge, ...]
    subgraphs: tuple[Subgraph, ...]

    def tables(self) -> list[TableNode]:
        return [n for n in self.nodes.values() if isinstance(n, TableNode)]

    def subgraph_of(self, node_id: int) -> Subgraph | None:
        for sg in self.subgraphs:
            if node_id in sg.chain:
                return sg
        return None


def _effective_parallelism(graph: LogicalGraph, node: ComputeNode) -> Parallelism | None:
    """A stateless map without its own parallelism runs with its neighbour's, saving a shuffle."""
    if node.parallelism is not None or not isinstance(node, MapNode):
        return node.parallelism
    for nbr in graph.outputs(node.id) + graph.inputs(node.id):
        other = graph.nodes[nbr]
        if isinstance(other, ComputeNode) and not isinstance(other, MapNode):
            return other.parallelism
    return None


def plan(logical: LogicalGraph, *, private_table_fqn: str = "{graph}.private_{n}") -> PhysicalGraph:
    """Turn a logical graph into a physical graph (pure; no Spark)."""
    logical.topological_order()  # step 1: raises on a cycle
    g = LogicalGraph(logical.fqn, dict(logical.nodes), list(logical.edges))
    for node in list(g.nodes.values()):
        if isinstance(node, ComputeNode):
            g.nodes[node.id] = replace(node, parallelism=_effective_parallelism(logical, node))

    per_producer: dict[int, int] = {}

    def insert_private_table(after: int, consumers: list[int]) -> int:
        # named after its producer (numbered per producer), not after a plan-wide count: the name keys the
        # reading subgraph's state, which must not move when another branch of the graph changes
        per_producer[after] = per_producer.get(after, 0) + 1
        producer = g.nodes[after]
        tid = max(g.nodes) + 1
        name = f"private_{producer.name}_{per_producer[after]}"
        g.nodes[tid] = TableNode(tid, name, producer.schema, fqn=f"{logical.fqn}.{name}", role=TableRole.BUFFER,
                              private=True)
        g.edges = [(s, d) for s, d in g.edges if not (s == after and d in consumers)]
        g.edges.append((after, tid))
        g.edges.extend((tid, c) for c in consumers)
        return tid

    # step 2: private tables at fan-out and at parallelism changes
    for nid in g.topological_order():
        node = g.nodes[nid]
        if not isinstance(node, ComputeNode):
            continue
        compute_consumers = [d for d in g.outputs(nid) if isinstance(g.nodes[d], ComputeNode)]
        table_consumers = [d for d in g.outputs(nid) if isinstance(g.nodes[d], TableNode)]
        if len(compute_consumers) + len(table_consumers) > 1 and compute_consumers:
            insert_private_table(nid, compute_consumers)
            continue
        for d in compute_consumers:
            other = g.nodes[d]
            assert isinstance(other, ComputeNode)
            if other.parallelism != node.parallelism:
                insert_private_table(nid, [d])

    # step 3: a private table written by a node that also writes a public table is redundant
    for tid in [n.id for n in g.nodes.values() if isinstance(n, TableNode) and n.private]:
        if len(g.inputs(tid)) != 1:  # a join's input: both sides write it
            continue
        (producer,) = g.inputs(tid)
        public = [d for d in g.outputs(producer) if isinstance(g.nodes[d], TableNode) and not g.nodes[d].private]  # type: ignore[attr-defined]
        if public:
            readers = g.outputs(tid)
            g.edges = [(s, d) for s, d in g.edges if tid not in (s, d)]
            g.edges.extend((public[0], r) for r in readers)
            del g.nodes[tid]

    # step 4: subgraphs = chains of compute nodes between tables
    subgraphs: list[Subgraph] = []
    order = g.topological_order()
    for tid in order:
        table = g.nodes[tid]
        if not isinstance(table, TableNode):
            continue
        for first in g.outputs(tid):
            head = g.nodes[first]
            if isinstance(head, TableNode):  # table -> table: a copy task
                subgraphs.append(Subgraph(len(subgraphs), tid, (), (first,), None))
                continue
            chain = [first]
            while True:
                outs = g.outputs(chain[-1])
                if len(outs) == 1 and isinstance(g.nodes[outs[0]], ComputeNode):
                    chain.append(outs[0])
                    continue
                break
            par = head.parallelism if isinstance(head, ComputeNode) else None
            subgraphs.append(Subgraph(len(subgraphs), tid, tuple(chain), tuple(g.outputs(chain[-1])), par))

    edges = []
    for s, d in sorted(g.edges):
        dst = g.nodes[d]
        shuffle = isinstance(g.nodes[s], TableNode) and isinstance(dst, ComputeNode) and dst.parallelism is not None
        edges.append(PhysicalEdge(s, d, Partitioning.SHUFFLE if shuffle else Partitioning.FORWARD))
    subgraphs = [replace(sg, config=_subscription(logical, g.nodes, sg)) for sg in subgraphs]
    return PhysicalGraph(logical.fqn, dict(sorted(g.nodes.items())), tuple(edges), tuple(subgraphs))


def subscription_edges(logical: LogicalGraph, nodes: dict[int, Node], sg: Subgraph) -> list[tuple[int, int]]:
    """The logical edges whose ``set_local_config_once`` settings are the subgraph's subscription, in the order
    they override one another: the edges into its input table (a sink or buffer creates no node in Orca, so
    settings before it reach the next node), the edges into its first node, then those out of leading maps
    (Orca's map creates no node either). Settings on any other edge have no effect: it joins two nodes fused
    into one task, as Orca's cascade, or leads to a table nothing in the graph reads."""
    head = sg.chain[0] if sg.chain else sg.outputs[0]
    keys = [(s, sg.input) for s in logical.inputs(sg.input)] if sg.input in logical.nodes else []
    keys += [(s, head) for s in logical.inputs(head)]
    for a, b in zip(sg.chain, sg.chain[1:], strict=False):
        if not isinstance(nodes[a], MapNode):
            break
        keys.append((a, b))
    return keys


def _subscription(logical: LogicalGraph, nodes: dict[int, Node], sg: Subgraph) -> SubscriptionConfig:
    config = logical.config
    for key in subscription_edges(logical, nodes, sg):
        if key in logical.edge_configs:
            config = logical.edge_configs[key].over(config)
    table = nodes[sg.input]
    if not (isinstance(table, TableNode) and table.role in (TableRole.SOURCE, TableRole.SOURCE_BY_NAME)):
        config = replace(config, source_offset=None)  # Orca's sourceOffset: only where a graph's input is read
    return config


def edges_without_effect(logical: LogicalGraph, physical: PhysicalGraph) -> list[tuple[int, int]]:
    """The edges given settings (``set_local_config_once``) that are no subgraph's subscription."""
    used = {key for sg in physical.subgraphs for key in subscription_edges(logical, physical.nodes, sg)}
    return [key for key in logical.edge_configs if key not in used]
