"""Orca's access control through the gateway every call passes: the privilege matrix, the precedence rules one by
one, owners, groups, admins, graphs that run with their owner's rights, and the audit log.

The gateway runs over a recording master (the real metadata store, no Spark): what is checked here is who may
call what, not what the master then does (the service tests do that end to end).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import headwater as hw
from headwater.catalog import resolve
from headwater.errors import PermissionDenied
from headwater.runtime.access import AccessControl
from headwater.runtime.gateway import Gateway
from headwater.runtime.operations import OPERATIONS, Access
from headwater.service.auth import Authenticator
from headwater.storage.metadata import MetadataStore

CATALOG, OTHER = "demo", "other"
GRAPH, TABLE, ENGINE = "demo.stream_graph.g", "demo.stream_table.t", "demo.stream_engine.e"

# The specification, written independently of the declarations: operation -> (privilege, the object it is
# checked on). A grant covers an object when made at that object, its catalog or "*".
EXPECTED: dict[str, tuple[str, str]] = {
    "create_public_table": ("table_create", TABLE),
    "set_retention": ("table_drop", TABLE),
    "drop_public_table": ("table_drop", TABLE),
    "append": ("table_write", TABLE),
    "append_once": ("table_write", TABLE),
    "committed_sequence": ("table_write", TABLE),
    "table_changes": ("table_read", TABLE),
    "stop_graph": ("graph_control", GRAPH),
    "start_graph": ("graph_control", GRAPH),
    "resubmit_graph": ("graph_control", GRAPH),
    "purge_records": ("graph_drop", GRAPH),
    "set_checkpoint_config": ("graph_control", GRAPH),
    "warmup": ("engine_manage", ENGINE),
    "control_engine": ("engine_manage", ENGINE),
}
# at which scopes each privilege may be granted (reference A.8)
GRANTABLE = {
    "graph_create": {"*", "catalog"}, "graph_drop": {"*", "catalog"}, "graph_control": {"*", "catalog", "graph"},
    "table_create": {"*", "catalog"}, "table_drop": {"*", "catalog"}, "table_read": {"*", "catalog", "table"},
    "table_write": {"*", "catalog", "table"}, "engine_manage": {"*", "catalog", "engine"},
    "manage": {"*", "catalog"}, "udf": {"*", "catalog"},
}
ARGS: dict[str, dict[str, Any]] = {
    "create_public_table": {"schema": hw.types.Schema.parse({"x": "long"}, where="t")},
    "set_retention": {"retention": None},
    "append": {"data": pa.table({"x": [1]})},
    "append_once": {"data": pa.table({"x": [1]}), "client_id": "c", "sequence": 1},
    "committed_sequence": {"client_id": "c"},
    "table_changes": {"after_version": 0},
    "set_checkpoint_config": {"config": hw.runtime.checkpoint_config.CheckpointConfig()},
    "warmup": {"data": pa.table({"x": [1]})},
    "control_engine": {"op": {"op": "delete_rule", "key": 1}},
}


class RecordingMaster:
    """The master's side of the gateway: records which operations got through."""

    def __init__(self, store: MetadataStore) -> None:
        self.store, self.calls = store, []

    def engine_graph(self, engine: str) -> str | None:
        return GRAPH if engine == ENGINE else None

    def sql(self, query: str, *, current_catalog: str | None, check_read: Any) -> Any:
        for table in (t for t in (TABLE, "demo.stream_table.u") if t.rsplit(".", 1)[1] in query.split()):
            check_read(table)
        self.calls.append("sql")
        return Path("/nowhere"), pa.schema([])

    def __getattr__(self, name: str) -> Any:
        if name not in OPERATIONS:
            raise AttributeError(name)

        def record(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return [] if name.endswith(("meta", "jobs", "events")) else 0

        return record


@pytest.fixture
def world(tmp_path):
    # in memory (no fsync per grant): the matrix makes thousands of small transactions
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path
    db = shm / f"headwater-privileges-{os.getpid()}-{tmp_path.name}.db"
    store = MetadataStore(f"sqlite:///{db}")
    auth = Authenticator(store)
    auth.ensure_admin("admin-pw")
    for name in ("alice", "bob", "carol"):
        auth.add_user(name, f"{name}-pw")
    access = AccessControl(store)
    master = RecordingMaster(store)
    yield master, access
    store.dispose()
    db.unlink(missing_ok=True)


def gate(world, user: str) -> Gateway:
    master, access = world
    return Gateway(master, access, user)  # type: ignore[arg-type]


def call(world, user: str, op: str) -> bool:
    """Whether ``user`` got ``op`` through to the master (False: refused with PermissionDenied)."""
    master, _ = world
    target = EXPECTED[op][1]
    schema = target.split(".")[1]
    name = "engine" if schema == "stream_engine" else "fqn"
    args = {name: resolve(target, schema, current_catalog=None), **ARGS.get(op, {})}
    before = len(master.calls)
    try:
        getattr(gate(world, user), op)(**args)
    except PermissionDenied:
        assert len(master.calls) == before
        return False
    return master.calls[before:] == [op]


def scope_object(scope: str, target: str) -> str | None:
    """The object a grant at ``scope`` names for ``target``; None where ``scope`` is not that kind's."""
    kind = target.split(".")[1].removeprefix("stream_")
    return {"*": "*", "catalog": CATALOG, "other_catalog": OTHER}.get(scope, target if scope == kind else None)


def test_the_declarations_are_the_specification():
    declared = {n: (op.privilege.value, op.scope.value) for n, op in OPERATIONS.items()
                if op.access == Access.PRIVILEGE and op.privilege is not None}
    assert {n: p for n, (p, _) in declared.items()} == {n: p for n, (p, _) in EXPECTED.items()}


@pytest.mark.parametrize("op", sorted(EXPECTED))
def test_privilege_matrix(world, op):
    """Every operation × every privilege × every scope × grant, then deny, then revoke."""
    _, access = world
    needed, target = EXPECTED[op]
    assert not call(world, "alice", op)  # nothing granted: refused
    assert call(world, "admin", op)  # admin bypasses
    for privilege in GRANTABLE:
        for scope in ("*", "catalog", "other_catalog", "graph", "table", "engine"):
            obj = scope_object(scope, target)
            grantable = scope.replace("other_catalog", "catalog") in GRANTABLE[privilege]
            if obj is None and scope in ("graph", "table", "engine"):
                obj = {"graph": GRAPH, "table": TABLE, "engine": ENGINE}[scope]  # another kind's object
            if not grantable:
                with pytest.raises(hw.ConfigurationError, match="applies at the"):
                    access.grant("admin", "alice", privilege, obj)
                continue
            covers = obj in ("*", CATALOG, target)
            expected = covers and privilege in (needed, "manage")
            access.grant("admin", "alice", privilege, obj)
            assert call(world, "alice", op) == expected, (op, privilege, scope, "grant")
            access.deny("admin", "alice", privilege, obj)
            assert not call(world, "alice", op), (op, privilege, scope, "deny")
            access.revoke("admin", "alice", privilege, obj)
            assert not call(world, "alice", op), (op, privilege, scope, "revoke")


def test_a_broad_grant_after_narrow_ones_overrides_them(world):
    _, access = world
    access.deny("admin", "alice", "table_write", TABLE)
    assert not call(world, "alice", "append")
    access.grant("admin", "alice", "table_write", CATALOG)  # the narrow denial goes
    assert call(world, "alice", "append")
    assert [r["object"] for r in access.user_privileges("alice")] == [CATALOG]


def test_allow_broad_then_deny_narrow_denies_the_narrow_object_only(world):
    _, access = world
    access.grant("admin", "alice", "table_write", CATALOG)
    access.deny("admin", "alice", "table_write", TABLE)
    assert not call(world, "alice", "append")
    other = gate(world, "alice")
    other.append(resolve("demo.stream_table.u", "stream_table", current_catalog=None), pa.table({"x": [1]}))


def test_revoking_a_narrow_entry_does_not_undo_a_broad_one(world):
    _, access = world
    access.grant("admin", "alice", "table_write", "*")
    access.grant("admin", "alice", "table_write", TABLE)
    access.revoke("admin", "alice", "table_write", TABLE)
    assert call(world, "alice", "append")  # the broad allow stands
    access.deny("admin", "alice", "table_write", CATALOG)
    access.deny("admin", "alice", "table_write", TABLE)
    access.revoke("admin", "alice", "table_write", TABLE)
    assert not call(world, "alice", "append")  # the broad deny stands
    with pytest.raises(hw.CatalogError, match="no grant or denial"):
        access.revoke("admin", "alice", "table_write", TABLE)


def test_groups_add_grants_and_a_denial_anywhere_wins(world):
    _, access = world
    access.create_group("admin", "traders")
    access.add_group_member("admin", "traders", "alice")
    access.grant("admin", "traders", "table_write", CATALOG)
    assert call(world, "alice", "append") and not call(world, "bob", "append")
    access.deny("admin", "alice", "table_write", TABLE)
    assert not call(world, "alice", "append")  # her own denial beats the group's allow
    access.revoke("admin", "alice", "table_write", TABLE)
    access.remove_group_member("admin", "traders", "alice")
    assert not call(world, "alice", "append")
    access.drop_group("admin", "traders")
    assert [r["principal"] for r in access.user_privileges("alice")] == []


def test_owners_need_no_grant_unless_denied(world):
    _, access = world
    access.set_owner(TABLE, "alice")
    access.set_owner(GRAPH, "alice")
    assert call(world, "alice", "append") and call(world, "alice", "drop_public_table")
    assert call(world, "alice", "warmup")  # she owns the engine's graph
    assert not call(world, "bob", "append")
    access.deny("admin", "alice", "table_write", CATALOG)
    assert not call(world, "alice", "append")


def test_admin_only_and_self_only_operations(world):
    _master, _access = world
    alice = gate(world, "alice")
    for op, args in (("create_user", ("mallory", "pw")), ("drop_user", ("bob",)), ("create_group", ("g",)),
                     ("grant", ("alice", "manage", "*")), ("deny", ("bob", "manage")), ("audit_log", ())):
        with pytest.raises(PermissionDenied, match="not an admin"):
            getattr(alice, op)(*args)
    with pytest.raises(PermissionDenied, match="for itself only"):
        alice.set_password("bob", "new")
    with pytest.raises(PermissionDenied, match="for itself only"):
        alice.user_privileges("bob")
    alice.set_password("alice", "new-pw")
    assert alice.user_privileges("alice") == []
    admin = gate(world, "admin")
    admin.create_user("dave", "dave-pw", True)
    assert gate(world, "dave").is_admin
    with pytest.raises(hw.CatalogError, match="already exists"):
        admin.create_user("dave", "x")
    with pytest.raises(hw.ConfigurationError):
        admin.create_user("bad\n", "x")


def test_every_refusal_and_change_is_audited(world):
    _, access = world
    access.grant("admin", "alice", "table_read", TABLE)
    assert not call(world, "bob", "append")
    rows = gate(world, "admin").audit_log()
    assert [(r["user_name"], r["action"], r["outcome"]) for r in rows] == [
        ("admin", "grant", "changed"), ("bob", "append", "denied")]
    assert "lacks table_write on demo.stream_table.t" in rows[-1]["detail"]


def test_listings_show_only_what_the_caller_may_see(world):
    master, access = world
    rows = [{"fqn": GRAPH}, {"fqn": "demo.stream_graph.h"}]
    master.graph_meta = lambda fqn=None: rows  # type: ignore[method-assign]
    access.set_owner("demo.stream_graph.h", "bob")
    access.grant("admin", "alice", "graph_control", GRAPH)
    assert gate(world, "alice").graph_meta() == [{"fqn": GRAPH}]
    assert gate(world, "bob").graph_meta() == [{"fqn": "demo.stream_graph.h"}]
    assert gate(world, "carol").graph_meta() == []
    assert gate(world, "admin").graph_meta() == rows
    with pytest.raises(PermissionDenied, match="may not see"):
        gate(world, "carol").graph_info(resolve(GRAPH, "stream_graph", current_catalog=None))
    master.state_machine_events = lambda limit=1000: [  # type: ignore[method-assign]
        {"detail": f"{GRAPH}: started"}, {"detail": "demo.stream_graph.h: started"}, {"detail": "no graph"}]
    assert [e["detail"] for e in gate(world, "alice").state_machine_events()] == [f"{GRAPH}: started"]


def test_sql_reads_only_tables_the_caller_may_read(world):
    master, access = world
    access.grant("admin", "alice", "table_read", TABLE)
    assert gate(world, "alice").sql("select * from t", "demo")[0] == Path("/nowhere")
    with pytest.raises(PermissionDenied, match=r"lacks table_read on demo\.stream_table\.u"):
        gate(world, "alice").sql("select * from t join u", "demo")
    assert master.calls == ["sql"]


def graph_document(tmp_path, with_python: bool | str = False) -> str:
    """``with_python``: True or "map" (a ``map(fn)``), "udf_engine" or "timer_engine" (each holds Python code)."""
    s = hw.connect(tmp_path / "decl", start_spark=False)
    s.use_catalog(CATALOG)
    g = s.stream_graph("g")
    src = g.source("t", schema={"k": "string", "x": "long"})
    if with_python in (True, "map"):
        src = src.map(lambda frame: frame)
    elif with_python == "udf_engine":
        src = src.udf_engine(lambda variables, frame: frame, variables={"n": 0})
    elif with_python == "timer_engine":
        src = src.timer_engine("1s", print, "tick")
    src.sink("out")
    doc = g.to_json()
    s.close()
    return doc


def test_submit_needs_create_read_write_and_udf_for_python(world, tmp_path):
    master, access = world
    doc = graph_document(tmp_path)
    with pytest.raises(PermissionDenied, match="graph_create"):
        gate(world, "alice").submit(doc)
    access.grant("admin", "alice", "graph_create", CATALOG)
    with pytest.raises(PermissionDenied, match=r"table_create on demo\.stream_table\.t"):
        gate(world, "alice").submit(doc)
    access.grant("admin", "alice", "table_create", CATALOG)
    gate(world, "alice").submit(doc)
    assert master.calls == ["submit"]
    assert access.owner(GRAPH) == "alice" and access.owner(TABLE) == "alice"
    python = graph_document(tmp_path / "p", with_python=True)
    with pytest.raises(PermissionDenied, match="udf"):
        gate(world, "alice").submit(python)
    access.grant("admin", "alice", "udf", CATALOG)
    gate(world, "alice").submit(python)


@pytest.mark.parametrize("python", ["udf_engine", "timer_engine"])
def test_a_graph_with_a_udf_or_timer_engine_needs_udf(world, tmp_path, python):
    master, access = world
    for privilege in ("graph_create", "table_create"):
        access.grant("admin", "alice", privilege, CATALOG)
    doc = graph_document(tmp_path, with_python=python)
    with pytest.raises(PermissionDenied, match="udf"):
        gate(world, "alice").submit(doc)
    assert master.calls == []
    access.grant("admin", "alice", "udf", CATALOG)
    gate(world, "alice").submit(doc)
    assert master.calls == ["submit"]


def test_a_graph_runs_with_its_owner_s_rights(world, tmp_path):
    master, access = world
    from headwater.plan.document import from_json
    from headwater.storage.records import TableRecord

    doc = graph_document(tmp_path)
    _, physical = from_json(doc, load_callables=False)
    tables = [TableRecord(n.fqn, f"/x/{n.name}", n.table_kind, n.schema, n.key_columns, n.time_column, None)
              for n in physical.tables() if not n.private]
    master.store.create_graph(GRAPH, doc, "exactly-once", new_tables=tables, refs=[t.fqn for t in tables])
    access.set_owner(GRAPH, "alice")
    access.grant("admin", "alice", "table_read", CATALOG)
    access.grant("admin", "alice", "table_write", CATALOG)
    access.grant("admin", "bob", "graph_control", GRAPH)
    gate(world, "bob").start_graph(resolve(GRAPH, "stream_graph", current_catalog=None))
    access.revoke("admin", "alice", "table_read", CATALOG)  # the owner loses read on the graph's source
    with pytest.raises(PermissionDenied, match=r"its owner alice lacks table_read on demo\.stream_table"):
        gate(world, "bob").start_graph(resolve(GRAPH, "stream_graph", current_catalog=None))
    assert master.calls == ["start_graph"]
