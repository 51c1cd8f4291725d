"""The logical stream graph: frozen nodes and edges exactly as the user declared them."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from headwater.engines.base import EngineSpec
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.plan.subscription import SubscriptionConfig
from headwater.types import Schema, TableKind

MAX_TASKS = 1024  # stream tasks of one subgraph


class TableRole(StrEnum):
    """Why a graph holds a table: its input, a table it reads by name, an intermediate store or an output."""

    SOURCE = "source"
    SOURCE_BY_NAME = "source_by_name"
    BUFFER = "buffer"
    SINK = "sink"
    LATE_ROWS = "late_rows"  # an engine's late rows (``late_rows_table``): written beside the engine's output
    ERRORS = "errors"  # an engine's error rows (the order book engine's ``error_table``): likewise


@dataclass(frozen=True)
class Parallelism:
    """``parallelize(key, count)``: ``count`` stream tasks, rows hashed by ``key``."""

    key: str
    count: int

    def __str__(self) -> str:
        return f"{self.key}×{self.count}"

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or not 1 <= self.count <= MAX_TASKS:
            raise GraphDefinitionError(f"parallelize: count must be an int in 1..{MAX_TASKS}, got {clip(self.count)}")


MAX_ORCA_INT = 2**31 - 1  # Orca's INT arguments
_RAFT_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True)
class HaOptions:
    """Orca's HA table arguments (``ha_source``, ``ha_buffer``, ``ha_sink`` and their keyed forms), kept on the table.

    Headwater has no Raft groups: every table is as durable as the data directory's storage (each commit is a
    Delta commit there, replicated when that storage is), so an HA table is the plain or keyed table of the
    same name. ``raft_group`` and ``cache_limit`` are checked as Orca checks them and recorded (``explain()``,
    the graph's JSON); they change nothing (no rows are cached in memory, so Orca's raising of a cache below
    1000 rows to 1000 is not applied: the value is kept as given). ``retention_minutes`` becomes the
    table's replay retention when the graph creates it (``session.set_stream_table_retention``).

    >>> HaOptions(raft_group=2, cache_limit=100).properties()
    {'raftGroup': 2, 'cacheLimit': 100, 'retentionMinutes': 1440}
    >>> HaOptions(raft_group=1, cache_limit=100)
    Traceback (most recent call last):
    ...
    headwater.errors.GraphDefinitionError: raft_group: expected an int > 1 (Orca's group id) or an alias such as 'group2', got 1
    """

    raft_group: int | str
    cache_limit: int
    retention_minutes: int | float = 1440

    def __post_init__(self) -> None:
        group = self.raft_group
        if isinstance(group, bool) or not (
                (isinstance(group, int) and 1 < group <= MAX_ORCA_INT)
                or (isinstance(group, str) and _RAFT_ALIAS.fullmatch(group))):
            raise GraphDefinitionError(f"raft_group: expected an int > 1 (Orca's group id) or an alias such as "
                                       f"'group2', got {clip(group)}")
        if isinstance(self.cache_limit, bool) or not isinstance(self.cache_limit, int) \
                or not 0 < self.cache_limit <= MAX_ORCA_INT:
            raise GraphDefinitionError(f"cache_limit: expected an int of rows in 1..{MAX_ORCA_INT}, "
                                       f"got {clip(self.cache_limit)}")
        minutes = self.retention_minutes
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not math.isfinite(minutes) \
                or not 0 < minutes <= MAX_ORCA_INT:
            raise GraphDefinitionError(f"retention_minutes: expected a number of minutes > 0, e.g. 1440, "
                                       f"got {clip(minutes)}")

    def properties(self) -> dict[str, Any]:
        return {"raftGroup": self.raft_group, "cacheLimit": self.cache_limit,
                "retentionMinutes": self.retention_minutes}


@dataclass(frozen=True)
class Node:
    id: int
    name: str
    schema: Schema

    @property
    def type(self) -> str:
        raise NotImplementedError

    def properties(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class TableNode(Node):
    fqn: str
    role: TableRole
    table_kind: TableKind = TableKind.PLAIN
    key_columns: tuple[str, ...] = ()
    time_column: str | None = None
    private: bool = False
    ha: HaOptions | None = None  # declared by an ha_* method (Orca's HA table): recorded, see HaOptions

    def __post_init__(self) -> None:
        object.__setattr__(self, "role", TableRole(self.role))
        object.__setattr__(self, "table_kind", TableKind(self.table_kind))
        if self.ha is not None and (self.private or self.table_kind is TableKind.LATEST_KEYED):
            raise GraphDefinitionError(f"table {clip(self.name)}: HA options go only on public plain or keyed tables")

    @property
    def type(self) -> str:
        return "TABLE"

    def properties(self) -> dict[str, Any]:
        props: dict[str, Any] = {"fqn": self.fqn, "role": str(self.role), "kind": str(self.table_kind),
                                 "visibility": "private" if self.private else "public"}
        if self.key_columns:
            props["keyColumn"] = list(self.key_columns)
        if self.time_column:
            props["timeColumn"] = self.time_column
        if self.ha is not None:
            props["ha"] = self.ha.properties()
        return props


@dataclass(frozen=True)
class ComputeNode(Node):
    """A node that runs inside stream tasks: an engine or a map."""

    parallelism: Parallelism | None = None


@dataclass(frozen=True)
class EngineNode(ComputeNode):
    spec: EngineSpec | None = None
    fqn: str = ""

    @property
    def type(self) -> str:
        assert self.spec is not None
        return self.spec.kind

    def properties(self) -> dict[str, Any]:
        assert self.spec is not None
        return {"fqn": self.fqn, **self.spec.properties()}


@dataclass(frozen=True)
class MapNode(ComputeNode):
    """A stateless transform on an edge: expressions (run in the JVM) or a Python function over a batch."""

    exprs: tuple[tuple[str, Expr], ...] = ()
    fn: Callable[..., Any] | None = field(default=None, compare=False)
    fn_name: str = ""
    filter: Expr | None = None

    @property
    def type(self) -> str:
        return "MAP"

    def properties(self) -> dict[str, Any]:
        if self.fn is not None:
            return {"function": self.fn_name}
        props: dict[str, Any] = {"select": [f"{e} as {n}" if str(e) != n else n for n, e in self.exprs]}
        if self.filter is not None:
            props["where"] = str(self.filter)
        return props


@dataclass
class LogicalGraph:
    """Nodes and edges; grows while the user chains calls, frozen into a plan on submit."""

    fqn: str
    nodes: dict[int, Node] = field(default_factory=dict)
    edges: list[tuple[int, int]] = field(default_factory=list)
    config: SubscriptionConfig = field(default_factory=SubscriptionConfig)  # set_config_map
    edge_configs: dict[tuple[int, int], SubscriptionConfig] = field(default_factory=dict)  # set_local_config_once

    def next_id(self) -> int:
        return len(self.nodes)

    def add(self, node: Node, *, inputs: tuple[int, ...] = ()) -> Node:
        taken = {n.name: n for n in self.nodes.values()}
        if node.name in taken:
            other = taken[node.name]
            raise GraphDefinitionError(
                f"stream graph {self.fqn}: name {clip(node.name)} is already used by node {other.id} ({other.type}); "
                "names identify tables and engine state, pick another one"
            )
        self.nodes[node.id] = node
        for i in inputs:
            self.connect(i, node.id)
        return node

    def connect(self, src: int, dst: int) -> None:
        if self.reaches(dst, src) or src == dst:
            raise GraphDefinitionError(
                f"stream graph {self.fqn}: edge {self.nodes[src].name!r} -> {self.nodes[dst].name!r} would close a cycle; "
                "a stream graph must be acyclic"
            )
        self.edges.append((src, dst))

    def replace(self, node: Node) -> None:
        self.nodes[node.id] = node

    def inputs(self, node_id: int) -> list[int]:
        return [s for s, d in self.edges if d == node_id]

    def outputs(self, node_id: int) -> list[int]:
        return [d for s, d in self.edges if s == node_id]

    def reaches(self, src: int, dst: int) -> bool:
        stack, seen = [src], set()
        while stack:
            n = stack.pop()
            if n == dst:
                return True
            if n in seen:
                continue
            seen.add(n)
            stack.extend(self.outputs(n))
        return False

    def topological_order(self) -> list[int]:
        """Kahn's algorithm; a cycle is reported with the nodes on it."""
        indegree = {n: 0 for n in self.nodes}
        for _, d in self.edges:
            indegree[d] += 1
        ready = sorted(n for n, deg in indegree.items() if deg == 0)
        order: list[int] = []
        while ready:
            n = ready.pop(0)
            order.append(n)
            for d in self.outputs(n):
                indegree[d] -= 1
                if indegree[d] == 0:
                    ready.append(d)
            ready.sort()
        if len(order) != len(self.nodes):
            stuck = [self.nodes[n].name for n in self.nodes if n not in order]
            raise GraphDefinitionError(f"stream graph {self.fqn}: cycle through {', '.join(stuck)}; a stream graph must be acyclic")
        return order
