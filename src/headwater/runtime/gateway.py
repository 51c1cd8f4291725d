"""The master as one user sees it: every declared operation, its privilege checked, then carried out.

:class:`Gateway` implements :class:`~headwater.runtime.operations.MasterApi` over a :class:`Master` and an
:class:`~headwater.runtime.access.AccessControl`: its methods are derived from the declarations (the privilege
at the target's scope, visibility filters on listings, users-only and admins-only operations), except the few
whose rule depends on what they carry (``submit``, ``drop_graph``, ``sql``), written out below. The embedded
session and the HTTP server both call the master through a gateway; an embedded session is trusted (the
process owns the data directory) and bypasses the checks as an admin does.

>>> sorted(name for name, op in OPERATIONS.items() if op.access == Access.CUSTOM)
['drop_graph', 'sql', 'submit']
"""

from __future__ import annotations

import re
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from headwater.catalog import FQN, resolve
from headwater.errors import GraphDefinitionError
from headwater.plan.document import from_json, needs_udf
from headwater.plan.logical import LogicalGraph
from headwater.runtime.access import AccessControl, PermissionDenied
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.runtime.lifecycle import GraphStatus
from headwater.runtime.operations import (
    OPERATIONS,
    Access,
    GraphName,
    MasterApi,
    Operation,
    Privilege,
    Scope,
    SqlResultFiles,
)

if TYPE_CHECKING:
    from headwater.runtime.master import Master

_GRAPH_IN_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\.stream_graph\.[A-Za-z_][A-Za-z0-9_]*")
_SEES_GRAPH = (Privilege.GRAPH_CONTROL, Privilege.GRAPH_DROP)
_SEES_TABLE = (Privilege.TABLE_READ, Privilege.TABLE_WRITE)


class Gateway(MasterApi):
    """``master`` as ``user`` may use it (``trusted``: every check passes, as for an admin)."""

    def __init__(self, master: Master, access: AccessControl, user: str, *, trusted: bool = False) -> None:
        self.master, self.access, self.user = master, access, user
        self.trusted = trusted

    # -- the rules ------------------------------------------------------------------------------------
    @property
    def is_admin(self) -> bool:
        return self.trusted or self.access.is_admin(self.user)

    def may(self, privilege: Privilege, obj: str, *, owned_as: str | None = None) -> bool:
        """Whether this user holds ``privilege`` on ``obj`` (an FQN, a catalog or ``*``); the owner of
        ``owned_as`` holds it unless denied."""
        return self.is_admin or self.access.allowed(self.user, privilege, obj, owned_as=owned_as)

    def require(self, action: str, privilege: Privilege, obj: str, *, owned_as: str | None = None) -> None:
        if not self.may(privilege, obj, owned_as=owned_as):
            raise self.access.refuse(self.user, action, obj, f"lacks {privilege.value} on {obj}")

    def sees(self, obj: str) -> bool:
        """Whether this user may see a graph or table (its metadata, progress, events)."""
        if self.is_admin or self.access.owner(obj) == self.user:
            return True
        return any(self.access.allowed(self.user, p, obj) for p in (_SEES_TABLE if ".stream_table." in obj
                                                                     else _SEES_GRAPH))

    def _check(self, op: Operation, args: dict[str, Any]) -> None:
        refusal = self._refusal(op, args)
        if refusal is not None:
            raise self.access.refuse(self.user, op.name, *refusal)

    def allows(self, operation: str, **args: Any) -> bool:
        """Whether this user may call ``operation`` with ``args``: the check the call makes, without recording a
        refusal (the web console shows a graph's buttons by it)."""
        op = OPERATIONS[operation]
        return self._refusal(op, _bound(op, self, (), args)) is None

    def _refusal(self, op: Operation, args: dict[str, Any]) -> tuple[str, str] | None:
        """Why this user may not call ``op`` with ``args`` (the object and the reason), or None."""
        if op.access == Access.ADMIN and not self.is_admin:
            return "*", "is not an admin"
        if op.access == Access.SELF and not self.is_admin and args.get(op.target or "") != self.user:
            return str(args.get(op.target or "")), "may do this for itself only (or be an admin)"
        target = args.get(op.target) if op.target else None
        if op.access == Access.VISIBLE and target is not None and not self.sees(str(target)):
            return str(target), f"may not see {target}"
        if op.access == Access.PRIVILEGE and op.privilege is not None:
            obj = "*" if target is None else str(target)
            owned_as = self._engine_graph(obj) if op.scope == Scope.ENGINE else obj
            if not self.may(op.privilege, obj, owned_as=owned_as if op.owner_may else None):
                return obj, f"lacks {op.privilege.value} on {obj}"
        return None

    def _engine_graph(self, engine: str) -> str | None:
        return self.master.engine_graph(engine)

    def _visible_graphs(self) -> list[FQN]:
        return [resolve(rec.fqn, "stream_graph", current_catalog=None) for rec in self.master.store.list_graphs()
                if rec.status != GraphStatus.DESTROYED and self.sees(rec.fqn)]

    def _filter(self, op: Operation, args: dict[str, Any], result: Any) -> Any:
        """A listing shows only what this user may see."""
        if self.is_admin or op.access != Access.VISIBLE:
            return result
        if op.name == "data_lineage":  # the graphs this user may not see stay unnamed
            return [r for r in result if self.sees(str(r["graph"]))]
        if op.name == "state_machine_events":
            return [r for r in result if any(self.sees(g) for g in _GRAPH_IN_TEXT.findall(str(r.get("detail", ""))))]
        if op.name in _EXPANDED:  # made graph by visible graph already (its rows name no graph to filter by)
            return result
        if op.target and args.get(op.target) is None and isinstance(result, list):
            return [r for r in result if self.sees(str(r["fqn"]))]
        return result

    # -- operations whose rule depends on what they carry ----------------------------------------------
    def submit(self, document: str, compute_group: str | None = None,
               checkpoint_config: CheckpointConfig | None = None) -> None:
        logical, physical = from_json(document, load_callables=False)  # the master never runs user code
        if physical is None:
            raise GraphDefinitionError("submit: the graph document has no physical plan")
        fqn = logical.fqn
        existing = self.master.store.active_graph(fqn)
        if existing is None:
            self.require("submit", Privilege.GRAPH_CREATE, fqn)
        else:  # the same definition again: finishing a cut-off submit is controlling the graph
            self.require("submit", Privilege.GRAPH_CONTROL, fqn, owned_as=fqn)
        new_tables = self._check_runs(logical, physical, "submit", self.may, self.require)
        self.master.submit(logical, physical, compute_group=compute_group, checkpoint_config=checkpoint_config)
        if existing is None:
            self.access.set_owner(fqn, self.user)
        for table in new_tables:
            if self.access.owner(table) is None:
                self.access.set_owner(table, self.user)

    def _check_runs(self, logical: LogicalGraph, physical: Any, action: str, may: Any, require: Any) -> list[str]:
        """The rights a graph needs to run: read and write on each public table it references, create for the
        ones it creates, ``udf`` for Python code. Returns the public tables it would create."""
        if needs_udf(logical):
            require(action, Privilege.UDF, logical.fqn)
        new = []
        for node in physical.tables():
            if node.private:
                continue
            if self.master.store.get_table(node.fqn) is None:
                require(action, Privilege.TABLE_CREATE, node.fqn)
                new.append(node.fqn)
            else:
                for privilege in (Privilege.TABLE_READ, Privilege.TABLE_WRITE):
                    require(action, privilege, node.fqn, owned_as=node.fqn)
        return new

    def _owner_may_run(self, fqn: FQN, action: str) -> None:
        """A graph runs with its owner's rights: checked again at every start the user asks for."""
        rec = self.master.store.active_graph(str(fqn))
        owner = self.access.owner(str(fqn))
        if self.trusted or rec is None or owner is None or self.access.is_admin(owner):
            return  # an embedded session owns the data directory: its graphs' owner is itself
        logical, physical = from_json(rec.graph_json, load_callables=False)
        owner_gate = Gateway(self.master, self.access, owner)

        def require(act: str, privilege: Privilege, obj: str, *, owned_as: str | None = None) -> None:
            if not owner_gate.may(privilege, obj, owned_as=owned_as):
                raise self.access.refuse(self.user, act, obj, f"cannot run graph {fqn}: its owner {owner} lacks "
                                         f"{privilege.value} on {obj} (a graph runs with its owner's rights)")

        self._check_runs(logical, physical, action, owner_gate.may, require)

    def drop_graph(self, fqn: GraphName, include_tables: bool) -> None:
        self.require("drop_graph", Privilege.GRAPH_DROP, str(fqn), owned_as=str(fqn))
        if include_tables:
            for table in self.master.store.refs_of_graph(str(fqn)):
                self.require("drop_graph", Privilege.TABLE_DROP, table, owned_as=table)
        self.master.drop_graph(fqn, include_tables)

    def sql(self, query: str, current_catalog: str | None = None) -> SqlResultFiles:
        def readable(table: str) -> None:
            self.require("sql", Privilege.TABLE_READ, table, owned_as=table)

        return self.master.sql(query, current_catalog=current_catalog, check_read=readable)

    # -- not operations -------------------------------------------------------------------------------
    def steps(self, op: Operation, values: dict[str, Any]) -> Generator[float, None, Any]:
        """A wait (``op.steps``) one look at a time, its privilege checked first: a generator of the pauses between
        looks, which returns the operation's result."""
        values = _bound(op, self, (), values)
        self._check(op, values)
        looks: Generator[float, None, Any] = getattr(self.master, str(op.steps))(**values)
        return looks

    def close(self) -> None:
        self.master.close()

    def recover(self) -> list[str]:
        return self.master.recover()


def _bound(op: Operation, gateway: Gateway, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by name, defaults included."""
    bound = op.signature.bind(gateway, *args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k != "self"}


def _derived(op: Operation) -> Any:
    def call(self: Gateway, *args: Any, **kwargs: Any) -> Any:
        values = _bound(op, self, args, kwargs)
        self._check(op, values)
        if op.name in ("start_graph", "resubmit_graph"):
            self._owner_may_run(values["fqn"], op.name)
        if op.on == "access":
            result = getattr(self.access, op.name)(*(() if op.name in _PLAIN_ACCESS else (self.user,)), **values)
        elif op.access == Access.VISIBLE and op.target and values.get(op.target) is None \
                and op.name in _EXPANDED and not self.is_admin:
            result = [row for graph in self._visible_graphs() for row in getattr(self.master, op.name)(graph)]
        else:
            result = getattr(self.master, op.name)(**values)
        return self._filter(op, values, result)

    call.__name__ = op.name
    call.__doc__ = op.function.__doc__
    call.__signature__ = op.signature  # type: ignore[attr-defined]
    return call


_PLAIN_ACCESS = frozenset({"user_privileges", "audit_log", "users"})  # access calls that take no acting user
_EXPANDED = frozenset({"checkpoint_jobs", "checkpoint_subjobs", "task_subscription_meta"})  # listings without fqn: per visible graph
for _name, _op in OPERATIONS.items():
    if _op.access != Access.CUSTOM:
        setattr(Gateway, _name, _derived(_op))

__all__ = ["Gateway", "PermissionDenied"]
