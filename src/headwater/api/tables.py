"""The tables a chain writes, as ``DStream`` methods: ``buffer``, ``sink`` and their keyed, latest-keyed, HA and
change-log forms (Orca's buffer / sink family, reference B.2); and the rules tables share with
``StreamGraph``'s sources: the method name each kind of table is declared with, HA arguments, a change log's
operation column and which engines may read change rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, Self

from headwater.api.handle import StreamHandle
from headwater.catalog import check_identifier
from headwater.engines.arguments import as_tuple
from headwater.engines.base import EngineKind
from headwater.errors import GraphDefinitionError, SchemaError, clip
from headwater.expr import Call, Col, Expr, Lit
from headwater.functions import FUNCTIONS
from headwater.plan.logical import HaOptions, MapNode, TableNode, TableRole
from headwater.storage.changelog import OP_COLUMN
from headwater.types import Schema, TableKind

if TYPE_CHECKING:
    pass


class TableMethods(StreamHandle):
    """Mixed into ``DStream``: ``self`` is the stream written into the table."""

    def _table(self, name: str, role: TableRole, kind: TableKind, key_column: str | Sequence[str] | None = None,
               time_column: str | None = None, ha: Mapping[str, Any] | None = None) -> Self:
        method = table_method(role, kind, ha)
        keys = as_tuple(key_column, f"{method} {clip(name)} key_column")
        fqn = self.graph._table_fqn(name)
        schema = self.node.schema
        for k in (*keys, *([time_column] if time_column else [])):
            if k not in schema:
                raise GraphDefinitionError(f"{role} {clip(name)}: column {clip(k)} is not in the stream's schema {schema}")
        options = ha_options(ha, f"{method} {clip(name)}")
        existing = self.graph._find_table(fqn)
        if existing is not None:  # writing into a table this graph already declared (may close a cycle)
            if existing.schema != schema:
                raise SchemaError(f"{role} {clip(name)}: schema {schema} differs from the table's {existing.schema}")
            if options is not None and existing.ha != options:
                raise GraphDefinitionError(f"{method} {clip(name)}: the graph already declares this table with "
                                           f"HA options {existing.ha}; declare it once")
            self.graph._graph.connect(self.node_id, existing.id)
            self._note_edge(existing.id)
            return type(self)(self.graph, existing.id)
        check_identifier(fqn.name, what="stream table")
        node = TableNode(self.graph._graph.next_id(), fqn.name, schema, fqn=str(fqn), role=role, table_kind=kind,
                         key_columns=keys, time_column=time_column, ha=options)
        return self._add(node)

    def buffer(self, name: str) -> Self:
        """Store the stream in a public table, queryable with SQL; the chain continues from it."""
        return self._table(name, TableRole.BUFFER, TableKind.PLAIN)

    def keyed_buffer(self, name: str, key_column: str | Sequence[str]) -> Self:
        """A buffer whose table keeps the first row of every key (later rows with that key are dropped)."""
        return self._table(name, TableRole.BUFFER, TableKind.KEYED, key_column)

    def latest_keyed_buffer(self, name: str, key_column: str | Sequence[str], time_column: str) -> Self:
        """A buffer whose table accepts a row only if it is newer than the stored row of its key."""
        return self._table(name, TableRole.BUFFER, TableKind.LATEST_KEYED, key_column, time_column)

    def sink(self, name: str) -> Self:
        """Write the stream to a public table (the end of a chain)."""
        return self._table(name, TableRole.SINK, TableKind.PLAIN)

    def keyed_sink(self, name: str, key_column: str | Sequence[str]) -> Self:
        """A sink whose table keeps the first row of every key (later rows with that key are dropped)."""
        return self._table(name, TableRole.SINK, TableKind.KEYED, key_column)

    def latest_keyed_sink(self, name: str, key_column: str | Sequence[str], time_column: str) -> Self:
        """A sink whose table accepts a row only if it is newer than the stored row of its key."""
        return self._table(name, TableRole.SINK, TableKind.LATEST_KEYED, key_column, time_column)

    # Orca's HA tables: the plain/keyed table of the same name, HA arguments recorded (HaOptions; docs/orca-mapping.md)
    def ha_buffer(self, name: str, raft_group: int | str, cache_limit: int, retention_minutes: float = 1440) -> Self:
        """Orca's haBuffer: ``buffer`` with Orca's HA arguments (see :meth:`StreamGraph.ha_source`)."""
        return self._table(name, TableRole.BUFFER, TableKind.PLAIN, ha=ha_arguments(locals()))

    def ha_keyed_buffer(self, name: str, key_column: str | Sequence[str], raft_group: int | str, cache_limit: int,
                        retention_minutes: float = 1440) -> Self:
        """Orca's haKeyedBuffer: ``keyed_buffer`` with Orca's HA arguments."""
        return self._table(name, TableRole.BUFFER, TableKind.KEYED, key_column, ha=ha_arguments(locals()))

    def ha_sink(self, name: str, raft_group: int | str, cache_limit: int, retention_minutes: float = 1440) -> Self:
        """Orca's haSink: ``sink`` with Orca's HA arguments."""
        return self._table(name, TableRole.SINK, TableKind.PLAIN, ha=ha_arguments(locals()))

    def ha_keyed_sink(self, name: str, key_column: str | Sequence[str], raft_group: int | str, cache_limit: int,
                      retention_minutes: float = 1440) -> Self:
        """Orca's haKeyedSink: ``keyed_sink`` with Orca's HA arguments."""
        return self._table(name, TableRole.SINK, TableKind.KEYED, key_column, ha=ha_arguments(locals()))

    def changelog_sink(self, name: str, key_column: str | Sequence[str]) -> Self:
        """A change-log sink (Orca 3.00.5 changelogSink): the stream's ``changelog_type`` column is kept; a stream
        without one (an engine's output) gets it as NULL, an upsert. SQL reads the net state per key."""
        schema = with_op_column(self.node.schema, key_column, f"changelog_sink {clip(name)}")
        stream = self
        if schema != self.node.schema:  # NULL of the declared type: each row is the key's state now
            exprs = tuple((n, Lit(None) if n == OP_COLUMN else Col(n)) for n in schema.names)
            stream = self._add(MapNode(self.graph._graph.next_id(), f"map_{self.graph._graph.next_id()}", schema,
                                       parallelism=self.parallelism, exprs=exprs))
        return stream._table(name, TableRole.SINK, TableKind.CHANGELOG, key_column)

    def _changelog_input(self) -> TableNode | None:
        """The change-log table whose change rows this stream carries (through maps), or None."""
        graph, node_id = self.graph._graph, self.node_id
        while isinstance(graph.nodes[node_id], MapNode) and graph.inputs(node_id):
            node_id = graph.inputs(node_id)[0]
        node = graph.nodes[node_id]
        return node if isinstance(node, TableNode) and node.table_kind is TableKind.CHANGELOG else None


def with_op_column(schema: Schema, key_column: str | Sequence[str], where: str) -> Schema:
    """``schema`` with the string column ``changelog_type`` (first when added); refused as a key or another type."""
    if OP_COLUMN in as_tuple(key_column, f"{where} key_column"):
        raise GraphDefinitionError(f"{where}: {OP_COLUMN!r} is the operation column and cannot be a key column")
    if OP_COLUMN not in schema:
        return Schema(((OP_COLUMN, "string"), *schema.columns))
    if schema[OP_COLUMN] != "string":
        raise SchemaError(f"{where}: column {OP_COLUMN!r} has type {schema[OP_COLUMN]}; a change log's operation "
                          "column is a string ('N', 'U', 'D' or NULL): rename or cast it")
    return schema


CHANGE_ROW_ENGINES = (EngineKind.REACTIVE_STATE, EngineKind.NARROW_REACTIVE_STATE)


def check_changelog_input(engine: Any, table: TableNode) -> None:
    """Refuse an engine over change rows where it would not compute what Orca does (docs/orca-mapping.md)."""
    where = f"{engine.kind.lower()} {clip(engine.name)}"
    fix = ("read the net state with SQL, or write the change rows to a plain buffer(...) first to treat them "
           "as appends")
    if engine.kind not in CHANGE_ROW_ENGINES:
        raise GraphDefinitionError(
            f"{where}: its input {clip(table.name)} is a change log (inserts, updates and deletes of keys), which this "
            "engine would take as new rows. Orca runs a change log only through the time-series engine (retracting "
            "updated rows from sum/avg/std...) and the reactive state engine; Headwater does not retract, so it "
            f"accepts one only in reactive_state_engine with stateless metrics: {fix}")
    exprs = [e for f in fields(engine) for v in [getattr(engine, f.name)]
             for e in (v if isinstance(v, tuple) else (v,)) if isinstance(e, Expr)]
    state = sorted({n.func for e in exprs for n in e.walk() if isinstance(n, Call) and n.func in FUNCTIONS
                    and FUNCTIONS[n.func].kind == "state"})
    if state:
        raise GraphDefinitionError(
            f"{where}: {', '.join(state)} {'keeps' if len(state) == 1 else 'keep'} state across rows, and its input {clip(table.name)} is a change log: "
            "Orca retracts an updated or deleted row from cumsum/msum/...; Headwater does not, and refuses rather "
            f"than count a key twice. Use stateless metrics (e.g. of {OP_COLUMN!r}), or {fix}")



def table_method(role: TableRole, kind: TableKind, ha: Mapping[str, Any] | None = None) -> str:
    """The method that declares such a table: ``keyed_sink``, ``latest_keyed_source``, ``buffer``, ``ha_sink``."""
    return ("ha_" if ha is not None else "") + (str(role) if kind is TableKind.PLAIN else f"{kind}_{role}")


def ha_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The HA arguments of an ``ha_*`` method's ``locals()``."""
    return {k: arguments[k] for k in ("raft_group", "cache_limit", "retention_minutes")}


def ha_options(ha: Mapping[str, Any] | None, where: str) -> HaOptions | None:
    if ha is None:
        return None
    try:
        return HaOptions(**ha)
    except GraphDefinitionError as exc:
        raise GraphDefinitionError(f"{where}: {exc}") from None
