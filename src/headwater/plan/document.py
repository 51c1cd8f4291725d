"""A graph as a versioned JSON document: what the metadata store keeps and what a worker is sent.

The document shows each node as Orca does (id, name, type, schema, properties, parallelism, subgraph)
and carries its full ``definition`` (:mod:`headwater.plan.codec`), so :func:`from_json` rebuilds the
logical graph and its physical plan exactly. User functions are the only pickles, under ``callables``;
:func:`from_json` loads them only when asked (``load_callables=True``, where the graph runs) and otherwise
keeps each as an :class:`~headwater.plan.callables.OpaqueCallable`, as the master does.

>>> import tempfile, headwater as hw
>>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
>>> session.use_catalog("doc")
>>> g = session.stream_graph("g")
>>> _ = g.source("trade", {"sym": "string", "price": "double"}).reactive_state_engine(
...     metrics=["cumsum(price) as total"], key_column="sym").sink("totals")
>>> logical, physical = from_json(json.loads(dumps(to_json(g._graph, g.plan()))), load_callables=False)
>>> to_json(logical, physical) == to_json(g._graph, g.plan())
True
>>> needs_udf(logical)
False
>>> session.close()
"""

from __future__ import annotations

import json
from typing import Any

from headwater.errors import GraphDefinitionError, clip, shorten
from headwater.plan.callables import OpaqueCallable
from headwater.plan.codec import decode, encode, load_callable, pack_callables, unpack_callables
from headwater.plan.logical import ComputeNode, LogicalGraph, Node, Parallelism
from headwater.plan.physical import Partitioning, PhysicalEdge, PhysicalGraph, Subgraph
from headwater.plan.subscription import SubscriptionConfig

PLAN_VERSION = 3  # 3: nodes carry their definitions (from_json); 2: one execution path


def _node_json(n: Node, p: PhysicalGraph | None, callables: dict[str, bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": n.id, "name": n.name, "type": str(n.type), "schema": n.schema.to_dict(),
                           "properties": n.properties()}
    if isinstance(n, ComputeNode):
        out["parallelism"] = _parallelism_json(n.parallelism)
    sg = p.subgraph_of(n.id) if p else None
    out["subgraphId"] = sg.id if sg else -1
    out["definition"] = encode(n, callables)
    return out


def _parallelism_json(par: Parallelism | None) -> dict[str, Any]:
    return {"keyName": par.key, "count": par.count} if par else {"keyName": None, "count": 1}


def to_json(g: LogicalGraph, p: PhysicalGraph | None = None) -> dict[str, Any]:
    """Versioned, JSON-ready description of the graph (and of its plan once submitted)."""
    callables: dict[str, bytes] = {}
    doc: dict[str, Any] = {
        "version": PLAN_VERSION,
        "fqn": g.fqn,
        "logical": {
            "nodes": [_node_json(n, None, callables) for n in g.nodes.values()],
            "edges": [{"inNodeId": s, "outNodeId": d, **_config_json(g.edge_configs.get((s, d)))} for s, d in g.edges],
            **_config_json(g.config),
        },
    }
    if p:
        doc["physical"] = {
            "nodes": [_node_json(n, p, callables) for n in p.nodes.values()],
            "edges": [{"inNodeId": e.src, "outNodeId": e.dst, "partitionType": str(e.partition)} for e in p.edges],
            "subgraphs": [
                {"id": sg.id, "input": sg.input, "chain": list(sg.chain), "outputs": list(sg.outputs),
                 "parallelism": _parallelism_json(sg.parallelism), "tasks": sg.task_ids(), **_config_json(sg.config)}
                for sg in p.subgraphs
            ],
        }
    doc["callables"] = pack_callables(callables)
    return doc


def _config_json(config: SubscriptionConfig | None) -> dict[str, Any]:
    """Subscription settings under ``"config"`` (Orca's keys), left out when there are none."""
    return {"config": config.properties()} if config else {}


def _config(entry: dict[str, Any], where: str) -> SubscriptionConfig:
    return SubscriptionConfig.from_properties(entry["config"], where=where) if "config" in entry \
        else SubscriptionConfig()


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=False, allow_nan=False)


def same_definition(a: str, b: str) -> bool:
    """Whether two stored documents declare the same graph (user functions compared by name, not bytes).

    A function pickled in another process may pickle to other bytes; a graph resubmitted after a crash
    must still be recognised as the one already stored. A null field counts as absent: a graph stored before
    an engine option existed is the same graph as one declaring that option unset.

    >>> same_definition('{"spec": {"w": 1}}', '{"spec": {"w": 1, "late_rows_table": null}}')
    True
    """
    def without_nulls(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: without_nulls(v) for k, v in value.items() if v is not None}
        if isinstance(value, list):
            return [without_nulls(v) for v in value]
        return value

    def strip(text: str) -> Any:
        doc = json.loads(text)
        doc.pop("callables", None)
        return without_nulls(doc)

    return bool(strip(a) == strip(b))


def from_json(doc: Any, *, load_callables: bool) -> tuple[LogicalGraph, PhysicalGraph | None]:
    """The logical graph (and physical plan, when the document has one) that :func:`to_json` described.

    ``load_callables``: whether the plan's Python functions are unpickled (which runs their code). Only where
    the graph runs passes True; the master passes False and keeps each as an
    :class:`~headwater.plan.callables.OpaqueCallable`, which :func:`to_json` writes back byte for byte.
    Either way the whole document is checked first, with nothing loaded.

    Raises :class:`GraphDefinitionError` naming what is wrong for any document :func:`to_json` could
    not have written (another plan version, unknown types or fields, edges to missing nodes, a cycle, a
    function outside the slots that take one, a callables entry nothing refers to).
    """
    where = "graph JSON"
    if isinstance(doc, (str, bytes)):
        try:
            doc = json.loads(doc)
        except ValueError as exc:
            raise GraphDefinitionError(f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise GraphDefinitionError(f"{where}: expected an object, got {clip(doc)}")
    if doc.get("version") != PLAN_VERSION:
        raise GraphDefinitionError(f"{where}: plan version {clip(doc.get('version'))} is not supported "
                                   f"(this Headwater reads version {PLAN_VERSION})")
    fqn = doc.get("fqn")
    if not isinstance(fqn, str):
        raise GraphDefinitionError(f"{where}: 'fqn' must be a string")
    opaque = {name: OpaqueCallable(name, data)
              for name, data in unpack_callables(doc.get("callables", {}), where=where).items()}
    used: set[str] = set()
    graphs = _graphs(doc, fqn, opaque, used)  # every check, nothing loaded
    unused = sorted(set(opaque) - used)
    if unused:
        raise GraphDefinitionError(f"{where}: callables entry {clip(unused[0])} is not used by any node; a plan "
                                   "carries only the functions its nodes name. Refused before anything was loaded")
    if not load_callables or not opaque:
        return graphs
    return _graphs(doc, fqn, {name: load_callable(fn) for name, fn in opaque.items()}, set())


def needs_udf(graph: LogicalGraph | PhysicalGraph | dict[str, Any] | str | bytes) -> bool:
    """Whether a graph holds Python functions (``map(fn)``, ``generic_state_iterate(func=fn)``, ``udf_engine``,
    ``timer_engine``).

    Such a graph runs user code where it runs, so the master asks for the ``udf`` privilege to create one;
    a graph of expressions and strings needs only ``graph_create``. A document is checked (and refused as
    :func:`from_json` refuses it) without loading anything.

    >>> g = LogicalGraph("c.stream_graph.g")
    >>> needs_udf(g)
    False
    """
    if isinstance(graph, (dict, str, bytes)):
        graph = from_json(graph, load_callables=False)[0]
    callables: dict[str, bytes] = {}
    for node in graph.nodes.values():
        encode(node, callables)
    return bool(callables)


def _graphs(doc: dict[str, Any], fqn: str, callables: dict[str, Any], used: set[str]
            ) -> tuple[LogicalGraph, PhysicalGraph | None]:
    where = "graph JSON"
    nodes, edges = _section(doc, "logical", callables, used)
    logical = LogicalGraph(fqn, nodes, [(s, d) for s, d, _, _ in edges],
                           config=_config(doc["logical"], f"{where}: logical config"),
                           edge_configs={(s, d): c for s, d, _, c in edges if c})
    logical.topological_order()
    if "physical" not in doc:
        return logical, None
    nodes, edges = _section(doc, "physical", callables, used)
    subgraphs = []
    for i, sg in enumerate(_list(doc["physical"], "subgraphs", where)):
        w = f"{where}: physical subgraph {i}"
        try:
            par = sg["parallelism"]
            subgraph = Subgraph(int(sg["id"]), int(sg["input"]), tuple(int(n) for n in sg["chain"]),
                                tuple(int(n) for n in sg["outputs"]),
                                Parallelism(par["keyName"], par["count"]) if par["keyName"] is not None else None,
                                _config(sg, f"{w} config"))
        except (KeyError, TypeError, ValueError) as exc:
            raise GraphDefinitionError(f"{w}: malformed ({type(exc).__name__}: {clip(str(exc))})") from None
        missing = [n for n in (subgraph.input, *subgraph.chain, *subgraph.outputs) if n not in nodes]
        if missing:
            raise GraphDefinitionError(f"{w}: refers to node {missing[0]}, which the plan does not have")
        subgraphs.append(subgraph)
    try:
        physical_edges = tuple(PhysicalEdge(s, d, Partitioning(p or "")) for s, d, p, _ in edges)
    except ValueError:
        raise GraphDefinitionError(f"{where}: every physical edge needs a partitionType, one of "
                                   f"{', '.join(Partitioning)}") from None
    physical = PhysicalGraph(fqn, nodes, physical_edges, tuple(subgraphs))
    return logical, physical


def _list(section: Any, key: str, where: str) -> list[Any]:
    value = section.get(key) if isinstance(section, dict) else None
    if not isinstance(value, list):
        raise GraphDefinitionError(f"{where}: '{key}' must be a list")
    return value


def _section(doc: dict[str, Any], name: str, callables: dict[str, Any], used: set[str]
             ) -> tuple[dict[int, Node], list[tuple[int, int, str | None, SubscriptionConfig]]]:
    where = f"graph JSON: {name}"
    nodes: dict[int, Node] = {}
    for entry in _list(doc.get(name), "nodes", where):
        if not isinstance(entry, dict) or "definition" not in entry:
            raise GraphDefinitionError(f"{where}: every node needs its 'definition'")
        node = decode(entry["definition"], callables, where=f"{where} node {clip(entry.get('name'))}", used=used)
        if not isinstance(node, Node) or node.id != entry.get("id") or node.id in nodes:
            raise GraphDefinitionError(f"{where}: node {clip(entry.get('id'))} has a bad or duplicate definition")
        nodes[node.id] = node
    edges = []
    for e in _list(doc.get(name), "edges", where):
        try:
            src, dst, part = int(e["inNodeId"]), int(e["outNodeId"]), e.get("partitionType")
        except (KeyError, TypeError, ValueError, AttributeError):
            raise GraphDefinitionError(f"{where}: malformed edge {clip(e)}") from None
        if src not in nodes or dst not in nodes:
            raise GraphDefinitionError(f"{where}: edge {src}->{dst} refers to a node the graph does not have")
        edges.append((src, dst, part, _config(e, f"{where}: edge {src}->{dst} config")))
    return nodes, edges


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
