"""Every operation of the master, declared once: name, arguments and result (typed), privilege and scope.

:class:`MasterApi` is the declaration: one method per operation, its signature the request and result types,
its :func:`operation` decorator the privilege it needs and on which object. Everything else is derived from
it, so adding an operation touches its declaration and its implementation and nothing else:

- the embedded call and the privilege check: :class:`~headwater.runtime.gateway.Gateway`;
- the HTTP route: :func:`headwater.service.server.create_app` (``POST /v1/<name>``);
- the remote client: :class:`headwater.service.client.RemoteMaster`;
- the command line (``headwater <name>``) and the privilege table of ``docs/security.md``.

Names in arguments are full names (:class:`~headwater.catalog.FQN`) annotated with their schema, so each
side parses them by the catalog's rules; rows travel as Arrow. Results are JSON-safe values.

>>> op = OPERATIONS["drop_public_table"]
>>> (op.privilege, op.scope, op.target, op.owner_may)
(<Privilege.TABLE_DROP: 'table_drop'>, <Scope.CATALOG: 'catalog'>, 'fqn', True)
"""

from __future__ import annotations

import enum
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import pyarrow as pa

from headwater.catalog import FQN
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.storage.records import TableRecord
from headwater.storage.retention import Retention
from headwater.types import Schema

GraphName = Annotated[FQN, "stream_graph"]
TableName = Annotated[FQN, "stream_table"]
EngineName = Annotated[FQN, "stream_engine"]
Rows = list[dict[str, Any]]
SqlResultFiles = tuple[Path, pa.Schema]  # the result's Parquet directory and schema (streamed over HTTP)


class Privilege(enum.StrEnum):
    """Orca's privileges (reference A.8), snake case, and ``udf``: a graph that holds Python code."""

    GRAPH_CREATE = "graph_create"
    GRAPH_DROP = "graph_drop"
    GRAPH_CONTROL = "graph_control"
    TABLE_CREATE = "table_create"
    TABLE_DROP = "table_drop"
    TABLE_READ = "table_read"
    TABLE_WRITE = "table_write"
    ENGINE_MANAGE = "engine_manage"
    MANAGE = "manage"  # every privilege above, at the global scope or in one catalog
    UDF = "udf"  # submit a graph holding Python callables (Orca's script execution)


class Scope(enum.StrEnum):
    """Where a privilege is granted: everywhere, in one catalog, or on one graph, table or engine."""

    GLOBAL = "global"
    CATALOG = "catalog"
    GRAPH = "graph"
    TABLE = "table"
    ENGINE = "engine"


# At which scopes each privilege may be granted (A.8); an object scope also covers nothing but that object.
GRANTABLE: dict[Privilege, tuple[Scope, ...]] = {
    Privilege.GRAPH_CREATE: (Scope.GLOBAL, Scope.CATALOG),
    Privilege.GRAPH_DROP: (Scope.GLOBAL, Scope.CATALOG),
    Privilege.GRAPH_CONTROL: (Scope.GLOBAL, Scope.CATALOG, Scope.GRAPH),
    Privilege.TABLE_CREATE: (Scope.GLOBAL, Scope.CATALOG),
    Privilege.TABLE_DROP: (Scope.GLOBAL, Scope.CATALOG),
    Privilege.TABLE_READ: (Scope.GLOBAL, Scope.CATALOG, Scope.TABLE),
    Privilege.TABLE_WRITE: (Scope.GLOBAL, Scope.CATALOG, Scope.TABLE),
    Privilege.ENGINE_MANAGE: (Scope.GLOBAL, Scope.CATALOG, Scope.ENGINE),
    Privilege.MANAGE: (Scope.GLOBAL, Scope.CATALOG),
    Privilege.UDF: (Scope.GLOBAL, Scope.CATALOG),
}


class Access(enum.StrEnum):
    """Who may call an operation beyond its privilege."""

    PRIVILEGE = "privilege"  # the privilege at the scope of the target (owners of the target too, if owner_may)
    VISIBLE = "visible"  # anyone who may see the target graph or table; a listing shows only those
    SELF = "self"  # a user about themself, or an admin
    ADMIN = "admin"  # admins only
    CUSTOM = "custom"  # checked by the gateway's own rule for this operation (submit, sql, drop_graph)


@dataclass(frozen=True)
class Operation:
    """One master operation as declared on :class:`MasterApi`."""

    name: str
    function: Callable[..., Any]
    access: Access
    privilege: Privilege | None
    scope: Scope
    target: str | None  # the argument naming the object the privilege is checked on
    owner_may: bool  # the owner of the target (or of an engine's graph) needs no grant
    idempotent: bool  # safe to send again to another master after a cut connection
    serial: bool  # changes the catalog or starts/stops queries: one at a time per master
    timeout: float | None  # seconds a remote call may take (None: the client's own timeout)
    on: str  # which object implements it: "master" or "access"
    steps: str | None  # a wait: the master's method that takes it one look at a time (a generator of pauses that
    #                    returns the result)

    @property
    def signature(self) -> inspect.Signature:
        return inspect.signature(self.function)

    @property
    def hints(self) -> dict[str, Any]:
        return typing.get_type_hints(self.function, include_extras=True)

    @property
    def rows_argument(self) -> str | None:
        """The argument carried as an Arrow body (at most one per operation), if any."""
        hints = self.hints
        return next((n for n in self.signature.parameters if n != "self" and hints.get(n) is pa.Table), None)

    @property
    def summary(self) -> str:
        return (inspect.getdoc(self.function) or self.name).splitlines()[0]


F = TypeVar("F", bound=Callable[..., Any])


def operation(access: Access = Access.PRIVILEGE, privilege: Privilege | None = None, *, scope: Scope = Scope.GLOBAL,
              target: str | None = None, owner_may: bool = True, idempotent: bool = False, serial: bool = False,
              timeout: float | None = None, on: str = "master", steps: str | None = None) -> Callable[[F], F]:
    """Declare a method of :class:`MasterApi` as an operation (the arguments are :class:`Operation`'s)."""

    def declare(fn: F) -> F:
        fn.__headwater_operation__ = dict(  # type: ignore[attr-defined]
            access=access, privilege=privilege, scope=scope, target=target, owner_may=owner_may,
            idempotent=idempotent, serial=serial, timeout=timeout, on=on, steps=steps)
        return fn

    return declare


P, A, G, T, E = Access.PRIVILEGE, Access.VISIBLE, Scope.GRAPH, Scope.TABLE, Scope.ENGINE
C = Scope.CATALOG


class MasterApi:
    """What a session can ask of the master; implemented in process (the gateway) and over HTTP (the client)."""

    # -- tables ---------------------------------------------------------------------------------------
    @operation(A, scope=T, target="fqn", idempotent=True)
    def table_info(self, fqn: TableName) -> TableRecord:
        """A stream table's definition: kind, schema, key and time columns."""
        raise NotImplementedError

    @operation(P, Privilege.TABLE_CREATE, scope=C, target="fqn", owner_may=False, serial=True)
    def create_public_table(self, fqn: TableName, schema: Schema, kind: str = "plain", keys: tuple[str, ...] = (),
                            time_column: str | None = None, retention: Retention | None = None) -> None:
        """Create a standalone public stream table; the caller owns it."""
        raise NotImplementedError

    @operation(P, Privilege.TABLE_DROP, scope=C, target="fqn", serial=True)
    def set_retention(self, fqn: TableName, retention: Retention | None) -> None:
        """Bound how far back a public stream table can be replayed."""
        raise NotImplementedError

    @operation(P, Privilege.TABLE_DROP, scope=C, target="fqn", serial=True)
    def drop_public_table(self, fqn: TableName) -> None:
        """Drop a public stream table no graph references."""
        raise NotImplementedError

    @operation(P, Privilege.TABLE_WRITE, scope=T, target="fqn")
    def append(self, fqn: TableName, data: pa.Table) -> int:
        """Append rows as one commit; returns the committed version."""
        raise NotImplementedError

    @operation(P, Privilege.TABLE_WRITE, scope=T, target="fqn", idempotent=True)
    def append_once(self, fqn: TableName, data: pa.Table, client_id: str, sequence: int) -> int:
        """Append rows once per (client, table, sequence); returns the version that holds them."""
        raise NotImplementedError

    @operation(P, Privilege.TABLE_WRITE, scope=T, target="fqn", idempotent=True)
    def committed_sequence(self, fqn: TableName, client_id: str) -> int | None:
        """The highest sequence a client committed to a table, or None."""
        raise NotImplementedError

    @operation(P, Privilege.TABLE_READ, scope=T, target="fqn", idempotent=True, steps="table_changes_steps")
    def table_changes(self, fqn: TableName, after_version: int, timeout: float = 30.0) -> pa.Table:
        """The rows the versions after after_version added, with a _version column (waits up to timeout for one)."""
        raise NotImplementedError

    @operation(A, scope=T, target="fqn", idempotent=True)
    def data_lineage(self, fqn: TableName) -> Rows:
        """Which graphs read and write a table, and from which tables they compute it."""
        raise NotImplementedError

    @operation(A, scope=T, target="fqn", idempotent=True)
    def table_meta(self, fqn: TableName | None = None) -> Rows:
        """One row per stream table (all visible ones when no name is given)."""
        raise NotImplementedError

    # -- graphs ---------------------------------------------------------------------------------------
    @operation(Access.CUSTOM, Privilege.GRAPH_CREATE, scope=C, idempotent=True, serial=True, timeout=600.0)
    def submit(self, document: str, compute_group: str | None = None,
               checkpoint_config: CheckpointConfig | None = None) -> None:
        """Store and start a graph from its JSON document; the caller owns it and the tables it creates."""
        raise NotImplementedError

    @operation(P, Privilege.GRAPH_CONTROL, scope=G, target="fqn", serial=True, timeout=600.0)
    def stop_graph(self, fqn: GraphName) -> None:
        """Pause a graph; its state and offsets are kept."""
        raise NotImplementedError

    @operation(P, Privilege.GRAPH_CONTROL, scope=G, target="fqn", serial=True, timeout=600.0)
    def start_graph(self, fqn: GraphName) -> None:
        """Resume a stopped graph (with its owner's rights)."""
        raise NotImplementedError

    @operation(P, Privilege.GRAPH_CONTROL, scope=G, target="fqn", serial=True, timeout=600.0)
    def resubmit_graph(self, fqn: GraphName) -> None:
        """Run a failed or dropped graph again (with its owner's rights)."""
        raise NotImplementedError

    @operation(P, Privilege.GRAPH_DROP, scope=C, target="fqn", serial=True)
    def purge_records(self, fqn: GraphName) -> int:
        """Forget the records of a graph's destroyed runs; returns how many."""
        raise NotImplementedError

    @operation(Access.CUSTOM, Privilege.GRAPH_DROP, scope=C, target="fqn", serial=True, timeout=600.0)
    def drop_graph(self, fqn: GraphName, include_tables: bool) -> None:
        """Stop and destroy a graph (and, with include_tables, the public tables it alone uses)."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True, steps="catch_up")  # the client allows its timeout + 30 s
    def wait_until_caught_up(self, fqn: GraphName, timeout: float = 120.0) -> None:
        """Return once the graph has processed everything appended so far."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def task_subscription_meta(self, fqn: GraphName | None = None) -> Rows:
        """One row per stream task and the table it reads, with its lag: versions and rows not yet processed."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def graph_meta(self, fqn: GraphName | None = None) -> Rows:
        """One row per graph run (all visible graphs when no name is given)."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def graph_info(self, fqn: GraphName) -> dict[str, Any]:
        """A graph's status, reason and stored document."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def engine_meta(self, fqn: GraphName) -> Rows:
        """One row per engine and stream task, with its state's counters."""
        raise NotImplementedError

    @operation(A, idempotent=True)
    def state_machine_events(self, limit: int = 1000) -> Rows:
        """The master's newest events (those naming graphs the caller may see)."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def checkpoint_config(self, fqn: GraphName) -> dict[str, Any]:
        """A graph's checkpoint configuration."""
        raise NotImplementedError

    @operation(P, Privilege.GRAPH_CONTROL, scope=G, target="fqn", serial=True)
    def set_checkpoint_config(self, fqn: GraphName, config: CheckpointConfig) -> None:
        """Replace a graph's checkpoint configuration (from its next start)."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def checkpoint_jobs(self, fqn: GraphName | None = None) -> Rows:
        """Checkpoint jobs: one row per micro-batch of each subgraph."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def checkpoint_subjobs(self, fqn: GraphName | None = None) -> Rows:
        """Checkpoint sub-jobs: one row per stream task of each recorded micro-batch."""
        raise NotImplementedError

    @operation(A, scope=G, target="fqn", idempotent=True)
    def progress(self, fqn: GraphName) -> dict[str, Any]:
        """Per subgraph: the last committed micro-batch, rows and time split."""
        raise NotImplementedError

    @operation(P, Privilege.ENGINE_MANAGE, scope=E, target="engine", serial=True, timeout=600.0)
    def warmup(self, engine: EngineName, data: pa.Table) -> int:
        """Advance an engine's state by rows without output; returns rows used."""
        raise NotImplementedError

    @operation(P, Privilege.ENGINE_MANAGE, scope=E, target="engine", serial=True)
    def control_engine(self, engine: EngineName, op: dict[str, Any]) -> int:
        """Apply a change (a rule update, a timer engine's pause or resume) to a running engine; returns tasks
        changed."""
        raise NotImplementedError

    @operation(Access.ADMIN, idempotent=True)
    def workers(self) -> Rows:
        """The workers: url, group, alive, Spark's state, load, last heartbeat and graphs placed (admins only)."""
        raise NotImplementedError

    # -- SQL ------------------------------------------------------------------------------------------
    @operation(Access.CUSTOM, Privilege.TABLE_READ, idempotent=True, timeout=3_600.0)
    def sql(self, query: str, current_catalog: str | None = None) -> SqlResultFiles:
        """Run one read-only query over the public tables the caller may read."""
        raise NotImplementedError

    # -- users, groups and privileges -------------------------------------------------------------------
    @operation(Access.ADMIN, on="access")
    def create_user(self, name: str, password: str, is_admin: bool = False) -> None:
        """Create a user (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, idempotent=True, on="access")
    def users(self) -> Rows:
        """Every user: name, is_admin and groups (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def drop_user(self, name: str) -> None:
        """Drop a user: its tokens stop working at once (admins only)."""
        raise NotImplementedError

    @operation(Access.SELF, target="name", on="access")
    def set_password(self, name: str, password: str) -> None:
        """Change a user's password (the user or an admin); every token of the user is revoked."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def create_group(self, name: str) -> None:
        """Create a group of users (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def drop_group(self, name: str) -> None:
        """Drop a group and its grants (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def add_group_member(self, group: str, user: str) -> None:
        """Add a user to a group (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def remove_group_member(self, group: str, user: str) -> None:
        """Remove a user from a group (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def grant(self, principal: str, privilege: str, obj: str = "*") -> None:
        """Allow a user or group a privilege on ``*``, a catalog, or a graph, table or engine (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def deny(self, principal: str, privilege: str, obj: str = "*") -> None:
        """Deny a user or group a privilege on ``*``, a catalog or an object (admins only)."""
        raise NotImplementedError

    @operation(Access.ADMIN, on="access")
    def revoke(self, principal: str, privilege: str, obj: str = "*") -> None:
        """Remove the grant or denial at exactly that scope (admins only)."""
        raise NotImplementedError

    @operation(Access.SELF, target="name", idempotent=True, on="access")
    def user_privileges(self, name: str) -> Rows:
        """A user's grants and denials, its own and its groups' (the user or an admin)."""
        raise NotImplementedError

    @operation(Access.ADMIN, idempotent=True, on="access")
    def audit_log(self, limit: int = 1000) -> Rows:
        """Denied calls and privilege changes, newest last (admins only)."""
        raise NotImplementedError

    # -- not an operation: the session's end ------------------------------------------------------------
    def close(self) -> None:
        """End this connection (embedded: stop the master's queries, which resume at the next connect)."""
        raise NotImplementedError


def _collect() -> dict[str, Operation]:
    ops = {}
    for name, fn in vars(MasterApi).items():
        spec = getattr(fn, "__headwater_operation__", None)
        if spec is not None:
            ops[name] = Operation(name=name, function=fn, **spec)
    return ops


OPERATIONS: dict[str, Operation] = _collect()
