"""``StreamGraph`` and ``DStream``: the chainable, declarative stream graph API (Orca's DStream).

Handles are immutable: every ``DStream`` method returns a new handle, and only the
``StreamGraph`` accumulates nodes. Each node validates itself when it is declared, so
a bad metric fails on the user's own line, long before Spark starts. The join methods are in
:mod:`headwater.api.joins`, the table methods (``buffer``, ``sink``, ...) in :mod:`headwater.api.tables`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from headwater.api.joins import JoinMethods
from headwater.api.tables import (
    TableMethods,
    check_changelog_input,
    ha_arguments,
    ha_options,
    table_method,
    with_op_column,
)
from headwater.catalog import FQN, MAX_NAME_CHARS, check_identifier, resolve
from headwater.engines.anomaly import AnomalyDetectionEngine
from headwater.engines.arguments import as_tuple, from_arguments
from headwater.engines.base import EngineSpec
from headwater.engines.cross_sectional import CrossSectionalEngine
from headwater.engines.daily_time_series import DailyTimeSeriesEngine
from headwater.engines.order_book import CryptoOrderBookEngine
from headwater.engines.pricing import PricingEngine
from headwater.engines.reactive_state import (
    DualOwnershipReactiveStateEngine,
    NarrowReactiveStateEngine,
    ReactiveStateEngine,
)
from headwater.engines.reactive_stateless import ReactiveStatelessEngine
from headwater.engines.rule import RuleEngine
from headwater.engines.session_window import SessionWindowEngine
from headwater.engines.time_bucket import TimeBucketEngine
from headwater.engines.time_series import TimeSeriesEngine
from headwater.engines.udf import TimerEngine, UdfEngine, initial_variables
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Alias, Expr
from headwater.functions import default_name, infer_type
from headwater.parse import metric_items, parse_expr, to_metric
from headwater.plan.document import dumps, from_json, to_json
from headwater.plan.logical import (
    MAX_TASKS,
    ComputeNode,
    EngineNode,
    LogicalGraph,
    MapNode,
    Node,
    Parallelism,
    TableNode,
    TableRole,
)
from headwater.plan.physical import PhysicalGraph, plan
from headwater.plan.render import explain_logical, explain_physical, to_dot
from headwater.plan.subscription import SubscriptionConfig
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.types import Schema, TableKind

if TYPE_CHECKING:
    from headwater.storage.records import TableRecord  # (SQLAlchemy: not imported to declare a graph)


class GraphSession(Protocol):
    """What a graph needs of the session it was declared in (:class:`~headwater.api.session.Session`)."""

    def _table_info(self, fqn: FQN) -> TableRecord: ...

    def _submit(self, logical: LogicalGraph, physical: PhysicalGraph, compute_group: str | None = None,
                checkpoint_config: CheckpointConfig | None = None) -> None: ...


class StreamGraph:
    """A stream graph being declared; ``submit()`` plans it and starts it on Spark.

    >>> import headwater as hw, tempfile
    >>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
    >>> session.use_catalog("doc")
    >>> g = session.stream_graph("doc_graph")
    >>> bars = g.source("ticks", schema={"time": "timestamp", "sym": "string", "px": "double"}).time_series_engine(
    ...     window="60s", step="60s", time_column="time", key_column="sym", metrics=["last(px) as close"])
    >>> bars.output_schema()
    Schema(columns=(('time', 'timestamp'), ('sym', 'string'), ('close', 'double')))
    """

    def __init__(self, session: GraphSession, fqn: FQN) -> None:
        self._session = session
        self.fqn = fqn
        self._graph = LogicalGraph(str(fqn))
        self._physical: PhysicalGraph | None = None

    # -- naming ----------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The graph's fully qualified name."""
        return str(self.fqn)

    def _table_fqn(self, name: str) -> FQN:
        return resolve(name, "stream_table", current_catalog=self.fqn.catalog)

    def _engine_name(self, kind: str, upstream: int) -> str:
        """A stable default engine name: its kind and the nearest named node upstream (a table or engine).

        Unlike a node number it does not change when another branch is added to the graph, so the state
        it names survives such an edit: ``time_series_trade``, ``reactive_state_one_min_bar``, then
        ``..._2`` for a second engine of the same kind on the same input.
        """
        anchor = upstream
        while not isinstance(self._graph.nodes[anchor], TableNode | EngineNode) and self._graph.inputs(anchor):
            anchor = self._graph.inputs(anchor)[0]
        base = f"{kind.lower().removesuffix('_engine')}_{self._graph.nodes[anchor].name}"
        if len(base) > MAX_NAME_CHARS:
            base = f"{base[:MAX_NAME_CHARS - 9]}_{hashlib.sha1(base.encode()).hexdigest()[:8]}"
        taken = {n.name for n in self._graph.nodes.values()}
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base[:MAX_NAME_CHARS - 1 - len(str(n))]}_{n}"
        return name

    # -- sources -----------------------------------------------------------------------------------
    def _source(self, name: str, schema: Mapping[str, str] | Schema, kind: TableKind,
                key_column: str | Sequence[str] | None = None, time_column: str | None = None,
                ha: Mapping[str, Any] | None = None) -> DStream:
        method = table_method(TableRole.SOURCE, kind, ha)
        keys = as_tuple(key_column, f"{method} {clip(name)} key_column")
        fqn = self._table_fqn(name)
        parsed = Schema.parse(schema, where=f"source {clip(name)}")
        for k in (*keys, *([time_column] if time_column else [])):
            if k not in parsed:
                raise GraphDefinitionError(f"source {clip(name)}: column {clip(k)} is not in its schema {parsed}")
        options = ha_options(ha, f"{method} {clip(name)}")
        existing = self._find_table(fqn)
        if existing is not None:
            if options is not None and existing.ha != options:
                raise GraphDefinitionError(f"{method} {clip(name)}: the graph already declares this table with "
                                           f"HA options {existing.ha}; declare it once")
            return DStream(self, existing.id)
        node = TableNode(self._graph.next_id(), fqn.name, parsed, fqn=str(fqn), role=TableRole.SOURCE, table_kind=kind,
                         key_columns=keys, time_column=time_column, ha=options)
        self._graph.add(node)
        return DStream(self, node.id)

    def source(self, name: str, schema: Mapping[str, str] | Schema) -> DStream:
        """Declare a public stream table as the graph's input: ``g.source("trade", schema={...})``."""
        return self._source(name, schema, TableKind.PLAIN)

    def keyed_source(self, name: str, key_column: str | Sequence[str], schema: Mapping[str, str] | Schema) -> DStream:
        """A source whose table keeps the first row of every key (later rows with that key are dropped)."""
        return self._source(name, schema, TableKind.KEYED, key_column)

    def latest_keyed_source(self, name: str, key_column: str | Sequence[str], time_column: str,
                            schema: Mapping[str, str] | Schema) -> DStream:
        """A source whose table accepts a row only if it is newer than the stored row of its key."""
        return self._source(name, schema, TableKind.LATEST_KEYED, key_column, time_column)

    def ha_source(self, name: str, schema: Mapping[str, str] | Schema, raft_group: int | str, cache_limit: int,
                  retention_minutes: float = 1440) -> DStream:
        """Orca's haSource: the plain source ``name``, with Orca's HA arguments checked and recorded.

        Headwater's tables are as durable as the data directory's storage (replicated when it is); there is no
        Raft group. ``raft_group`` and ``cache_limit`` are recorded in the graph's definition and change nothing;
        ``retention_minutes`` becomes the table's replay retention. See :class:`~headwater.plan.logical.HaOptions`.
        """
        return self._source(name, schema, TableKind.PLAIN, ha=ha_arguments(locals()))

    def ha_keyed_source(self, name: str, key_column: str | Sequence[str], schema: Mapping[str, str] | Schema,
                        raft_group: int | str, cache_limit: int, retention_minutes: float = 1440) -> DStream:
        """Orca's haKeyedSource: ``keyed_source`` with Orca's HA arguments (see :meth:`ha_source`)."""
        return self._source(name, schema, TableKind.KEYED, key_column, ha=ha_arguments(locals()))

    def changelog_source(self, name: str, key_column: str | Sequence[str], schema: Mapping[str, str] | Schema) -> DStream:
        """A source of changes to a keyed state (Orca 3.00.5 changelogSource): a string column ``changelog_type``
        ('N' insert, 'U' update, 'D' delete, NULL upsert) is added first unless ``schema`` declares it. Engines
        downstream receive the change rows; SQL reads the net state (``headwater.storage.changelog``)."""
        parsed = with_op_column(Schema.parse(schema, where=f"changelog_source {clip(name)}"), key_column,
                                 f"changelog_source {clip(name)}")
        return self._source(name, parsed, TableKind.CHANGELOG, key_column)

    def source_by_name(self, name: str) -> DStream:
        """Read an existing public stream table (another graph's sink, a standalone table, or this graph's)."""
        fqn = self._table_fqn(name)
        existing = self._find_table(fqn)
        if existing is not None:
            return DStream(self, existing.id)
        info = self._session._table_info(fqn)
        node = TableNode(self._graph.next_id(), fqn.name, info.schema, fqn=str(fqn), role=TableRole.SOURCE_BY_NAME,
                         table_kind=TableKind(info.kind), key_columns=info.key_columns, time_column=info.time_column)
        self._graph.add(node)
        return DStream(self, node.id)

    def _find_table(self, fqn: FQN) -> TableNode | None:
        for n in self._graph.nodes.values():
            if isinstance(n, TableNode) and n.fqn == str(fqn):
                return n
        return None

    # -- configuration (Orca's setConfigMap) --------------------------------------------------------
    def set_config_map(self, config: Mapping[str, Any]) -> StreamGraph:
        """Subscription settings of every subgraph of the graph (Orca's setConfigMap); returns the graph.

        Keys (Orca's camelCase or snake_case): ``subscription.batch_size`` (at most this many input rows per
        micro-batch), ``subscription.throttle`` (the trigger interval, seconds), ``subscription.time_trigger``
        (False only), ``subscription.source_offset`` (-3: a source from its first row; -1: from its latest row
        on submit and start). ``DStream.set_local_config_once`` overrides them per edge. What each becomes, and
        why ``private_table.cache_size`` and ``time_trigger=True`` are refused:
        :mod:`headwater.plan.subscription`. They are part of the graph's definition (``to_json``).

        >>> import headwater as hw, tempfile
        >>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> session.use_catalog("doc")
        >>> g = session.stream_graph("configured").set_config_map({"subscription.batchSize": 10_000})
        >>> _ = g.source("ticks", schema={"sym": "string", "px": "double"}).sink("copy")
        >>> g.plan().subgraphs[0].config.max_rows
        10000
        >>> session.close()
        """
        self._graph.config = SubscriptionConfig.parse(config, where=f"set_config_map on {self.fqn}").over(
            self._graph.config)
        return self

    # -- planning and rendering ----------------------------------------------------------------------
    @property
    def logical_graph(self) -> LogicalGraph:
        return self._graph

    def plan(self) -> PhysicalGraph:
        """The physical graph ``submit()`` would run (private tables, subgraphs, stream tasks)."""
        if not self._graph.nodes:
            raise GraphDefinitionError(f"stream graph {self.fqn}: it is empty; start with g.source(...)")
        return plan(self._graph)

    def explain(self) -> str:
        """The logical and the physical graph as text."""
        return explain_logical(self._graph) + "\n" + explain_physical(self.plan(), self._graph)

    def to_graphviz(self) -> str:
        """Graphviz DOT of the graph, clustered by subgraph (render with ``dot -Tsvg``)."""
        return to_dot(self._graph, self.plan())

    def to_json(self) -> str:
        """Versioned JSON of the logical and physical graph: what the catalog stores; see :meth:`from_json`."""
        return dumps(to_json(self._graph, self.plan()))

    @classmethod
    def from_json(cls, session: GraphSession, document: str) -> StreamGraph:
        """The graph a :meth:`to_json` document declares, ready to ``submit()`` in ``session``.

        User functions of ``map(fn)`` travel pickled in the document, so loading one runs code: take
        documents only from people you would let submit graphs.

        >>> import headwater as hw, tempfile
        >>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> session.use_catalog("doc")
        >>> g = session.stream_graph("copy")
        >>> _ = g.source("ticks", schema={"sym": "string", "px": "double"}).map(["sym", "px * 2 as px2"]).sink("out")
        >>> hw.StreamGraph.from_json(session, g.to_json()).explain() == g.explain()
        True
        >>> session.close()
        """
        logical, _ = from_json(document, load_callables=True)  # the user's own process, asked to load
        graph = cls(session, resolve(logical.fqn, "stream_graph", current_catalog=None))
        graph._graph = logical
        return graph

    def submit(self, *, compute_group: str | None = None,
               checkpoint_config: Mapping[str, Any] | None = None) -> StreamGraph:
        """Plan the graph, create its tables and start it; returns once it is running.

        ``compute_group``: in service mode, only workers of this group (``headwater worker --group``) run the
        graph; the embedded worker runs every graph.
        ``checkpoint_config``: Orca's checkpoint keys, snake_case or camelCase, e.g.
        ``{"max_retained_checkpoints": 5, "consecutive_failures": 1}``; what each means here, and which cannot
        apply, is in ``headwater.runtime.checkpoint_config`` (``docs/orca-mapping.md``).
        """
        if compute_group is not None:
            check_identifier(compute_group, what="compute group")
        config = CheckpointConfig.parse(checkpoint_config) if checkpoint_config is not None else None
        self._physical = self.plan()
        self._session._submit(self._graph, self._physical, compute_group, config)
        return self

    def run_local(self, inputs: Mapping[str, Any], *, workdir: str | Path | None = None,
                  clock: Any = None) -> dict[str, pd.DataFrame]:
        """Run the graph in this process, without Spark, over ``inputs``; return what it writes.

        ``inputs`` maps a source table's name to a pandas DataFrame or Arrow table, or to a list of them
        (each one append: one micro-batch). The same data plane and evaluator as on Spark run the
        graph; nothing is stored in the session's catalog. Returns every public table the graph writes,
        by name, rows in commit order, and the engines' statistics as ``.engine_stats`` (keys, late rows,
        state bytes per engine and task, as ``session.stream_engine_stat``). Tables live in a temporary
        directory, or under ``workdir``.

        ``clock``: the processing time of each round of micro-batches (the i-th frame of every input), which
        system-time engines (``use_system_time=True``) see instead of the wall clock: a list of times, one
        per round, or a function called once per round. This makes it the harness to unit-test a graph in
        your own pytest (``docs/testing.md``). See ``headwater.dataplane.local`` for an example.
        """
        from headwater.dataplane.local import run_local

        physical = self.plan()
        if workdir is not None:
            return run_local(physical, inputs, Path(workdir), clock=clock)
        with tempfile.TemporaryDirectory(prefix="headwater-local-") as tmp:
            return run_local(physical, inputs, Path(tmp), clock=clock)

    def __repr__(self) -> str:
        return f"<StreamGraph {self.fqn} nodes={len(self._graph.nodes)}>"


@dataclass(frozen=True)
class DStream(JoinMethods, TableMethods):
    """An immutable handle on one node of a stream graph; methods declare downstream nodes."""

    graph: StreamGraph
    node_id: int
    parallelism: Parallelism | None = None
    edge_config: SubscriptionConfig | None = None  # set_local_config_once: for the next edge from this node

    # -- helpers ---------------------------------------------------------------------------------
    @property
    def node(self) -> Node:
        return self.graph._graph.nodes[self.node_id]

    def output_schema(self) -> Schema:
        """Inferred schema of this stream (Orca's getOutputSchema)."""
        return self.node.schema

    def _add(self, node: Node) -> DStream:
        self.graph._graph.add(node, inputs=(self.node_id,))
        self._note_edge(node.id)
        par = node.parallelism if isinstance(node, ComputeNode) else None
        return DStream(self.graph, node.id, par)

    def _note_edge(self, dst: int) -> None:
        """Give the edge just declared to ``dst`` this handle's ``set_local_config_once`` settings."""
        if self.edge_config:
            self.graph._graph.edge_configs[(self.node_id, dst)] = self.edge_config

    # -- modifiers ---------------------------------------------------------------------------------
    def parallelize(self, column: str, count: int) -> DStream:
        """Run the following engines as ``count`` stream tasks, rows hashed by ``column`` (NULL keys dropped)."""
        real = self.node.schema.lookup(column)
        if real is None:
            raise GraphDefinitionError(
                f"parallelize on {clip(self.node.name)}: unknown column {clip(column)} (columns: {', '.join(self.node.schema.names)})"
            )
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TASKS:
            raise GraphDefinitionError(
                f"parallelize on {clip(self.node.name)}: count must be an int in 1..{MAX_TASKS}, got {clip(count)}")
        changes = self._changelog_input()
        if changes is not None and real not in changes.key_columns:
            raise GraphDefinitionError(
                f"parallelize on {clip(self.node.name)}: {clip(real)} is not a key column of the change log "
                f"{clip(changes.name)} ({', '.join(changes.key_columns)}): changes of one key would run in different "
                "tasks and could reach a sink out of order; parallelize by a key column")
        return replace(self, parallelism=Parallelism(real, count))

    def sync(self) -> DStream:
        """Merge parallel branches back into one stream (pairs with ``parallelize``)."""
        return replace(self, parallelism=None)

    def set_local_config_once(self, config: Mapping[str, Any]) -> DStream:
        """Subscription settings for the edge the next call declares from this node (Orca's setLocalConfigOnce).

        Same keys as :meth:`StreamGraph.set_config_map` (``private_table.cache_size`` aside), which they override.
        They apply where that edge is a subgraph's subscription: a stream task reading a table (the edge from
        a table, or into the first node after one, or out of a leading ``map``; a sink or buffer passes them
        to its readers, as in Orca). On an edge between nodes fused into one task they have no effect, as on
        Orca's cascade, nor on one into a table nothing in the graph reads; ``explain()`` lists such edges.

        >>> import headwater as hw, tempfile
        >>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> session.use_catalog("doc")
        >>> g = session.stream_graph("per_edge").set_config_map({"subscription.batch_size": 50_000})
        >>> ticks = g.source("ticks", schema={"sym": "string", "px": "double"})
        >>> _ = ticks.set_local_config_once({"subscription.batchSize": 100}).map(["sym", "px * 2 as px2"]).sink("a")
        >>> _ = ticks.map(["sym", "px"]).sink("b")
        >>> [sg.config.max_rows for sg in g.plan().subgraphs]
        [100, 50000]
        >>> session.close()
        """
        parsed = SubscriptionConfig.parse(config, where=f"set_local_config_once on {clip(self.node.name)}")
        return replace(self, edge_config=parsed.over(self.edge_config or SubscriptionConfig()))

    def set_engine_name(self, name: str) -> DStream:
        """Name the engine declared by the previous call (names identify engine state)."""
        node = self.node
        if not isinstance(node, EngineNode):
            raise GraphDefinitionError(f"set_engine_name({clip(name)}): the previous node {clip(node.name)} is not an engine")
        fqn = resolve(name, "stream_engine", current_catalog=self.graph.fqn.catalog)
        taken = [n for n in self.graph._graph.nodes.values() if n.name == fqn.name and n.id != node.id]
        if taken:
            raise GraphDefinitionError(
                f"set_engine_name({clip(name)}): name {clip(fqn.name)} is already used by node {taken[0].id} ({taken[0].type}) "
                f"in {self.graph.fqn}; names identify tables and engine state, pick another one"
            )
        assert node.spec is not None
        self.graph._graph.replace(replace(node, name=fqn.name, fqn=str(fqn), spec=replace(node.spec, name=fqn.name)))  # type: ignore[call-arg]
        return self

    # -- engines -----------------------------------------------------------------------------------
    def _engine(self, spec: type[EngineSpec], arguments: Mapping[str, Any]) -> DStream:
        """Declare the engine ``spec`` builds from an engine method's ``arguments`` (its ``locals()``): each argument
        converted as the spec's field declares (``headwater.engines.arguments``)."""
        name = self.graph._engine_name(spec.kind, self.node_id)
        changes = self._changelog_input()
        side = spec.side_table_argument  # late_rows_table, or error_table
        side_table = arguments.get(side)
        late = None if side_table is None else self.graph._table_fqn(side_table)
        engine = from_arguments(spec, {**arguments, side: None if late is None else str(late)},
                                name=name, input_schema=self.node.schema)
        if changes is not None:
            check_changelog_input(engine, changes)
        fqn = resolve(name, "stream_engine", current_catalog=self.graph.fqn.catalog)
        node = EngineNode(self.graph._graph.next_id(), name, engine.output_schema(), parallelism=self.parallelism,
                          spec=engine, fqn=str(fqn))
        if late is not None and self.graph._find_table(late) is not None:
            raise GraphDefinitionError(f"{spec.kind} {clip(name)}: {side} {clip(late.name)} is already a table "
                                       "of this graph; give the engine's side table a name of its own")
        stream = self._add(node)
        if late is not None:  # beside the engine, not downstream of it: no edge, no stream task of its own
            self.graph._graph.add(TableNode(self.graph._graph.next_id(), late.name,
                                            engine.side_table_schema(self.node.schema), fqn=str(late),
                                            role=TableRole(spec.side_table_role)))
        return stream

    def time_series_engine(
        self,
        *,
        window: str | timedelta | Sequence[str | timedelta],
        step: str | timedelta,
        metrics: Sequence[Expr | str] | Sequence[Sequence[Expr | str]],
        time_column: str | None = None,
        key_column: str | Sequence[str] | None = None,
        accepted_delay: str | timedelta = timedelta(0),
        closed: str = "left",
        use_window_start_time: bool = False,
        fill: str | float | Sequence[str | float] = "none",
        round_time: bool = True,
        update_time: str | timedelta | None = None,
        force_trigger_time: str | timedelta | None = None,
        sub_window: str | tuple[str | timedelta, str | timedelta] | None = None,
        key_purge_freq: str | timedelta | None = None,
        use_system_time: bool = False,
        late_rows_table: str | None = None,
    ) -> DStream:
        """Aggregate tumbling/sliding event-time windows per key (Orca's timeSeriesEngine).

        A key's window is emitted when a later row of that key closes it; output time is
        the window end (``use_window_start_time=True`` for the start). ``force_trigger_time``
        also closes it when a row of another key is that much later; ``update_time`` emits
        the open window as it fills (emit on update; ``0``: at the end of every micro-batch);
        ``sub_window=("0s", "10s")`` aggregates only that part of each window. ``fill`` is one
        rule or one per metric. ``use_system_time=True`` (no ``time_column``) cuts windows by the
        micro-batches' input commit time instead; the output time column is ``time``. ``late_rows_table``
        names a table of the graph's catalog for the rows dropped as late (else they are only counted). See
        ``docs/engines.md``.

        >>> import headwater as hw, tempfile
        >>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> session.use_catalog("doc")
        >>> g = session.stream_graph("doc_bars")
        >>> bars = g.source("ticks", schema={"time": "timestamp", "sym": "string", "px": "double"}).time_series_engine(
        ...     window="1m", step="1m", time_column="time", key_column="sym", metrics=["last(px) as close"],
        ...     update_time="10s")
        >>> bars.output_schema().names
        ('time', 'sym', 'close')
        >>> session.close()
        """
        return self._engine(TimeSeriesEngine, locals())

    def session_window_engine(
        self,
        *,
        session_gap: str | timedelta,
        metrics: Sequence[Expr | str],
        time_column: str | None = None,
        key_column: str | Sequence[str] | None = None,
        use_session_start_time: bool = True,
        force_trigger_time: str | timedelta | None = None,
        late_rows_table: str | None = None,
        use_system_time: bool = False,
        update_time: str | timedelta | None = None,
    ) -> DStream:
        """Aggregate each key's sessions: runs of rows less than ``session_gap`` apart (Orca's sessionWindowEngine).

        A session is emitted when the first row of its key at or past its last row + ``session_gap`` arrives;
        output time is the session's first row (``use_session_start_time=False``: last row + gap). With
        ``force_trigger_time``, a row of any key at or past the session's end + ``force_trigger_time`` closes
        it too (event time, so replays agree). Metrics are as in ``time_series_engine``; see
        ``headwater.engines.session_window``. ``late_rows_table``: a table of this graph's catalog that
        receives the rows dropped as late, with the engine's input columns (else they are only counted).
        ``use_system_time=True`` (no ``time_column``): a row's time is its micro-batch's input commit time.
        ``update_time`` also emits sessions as they grow, as in ``time_series_engine`` (``0``: after every
        micro-batch).
        """
        return self._engine(SessionWindowEngine, locals())

    def time_bucket_engine(
        self,
        *,
        time_cut_points: Sequence[str | dt.time],
        metrics: Sequence[Expr | str],
        time_column: str,
        key_column: str | Sequence[str] | None = None,
        use_window_start_time: bool = False,
        closed: str = "left",
        fill: str | float = "none",
        key_purge_freq_in_second: float | None = None,
        late_rows_table: str | None = None,
    ) -> DStream:
        """Aggregate per key the windows between consecutive times of day (Orca's timeBucketEngine).

        ``time_cut_points`` (``"HH:MM"``, ``"HH:MM:SS"`` or ``datetime.time``; minute or second precision,
        strictly increasing) cut every day of ``time_column``; only rows between the first and the last cut
        point count. With ``closed="left"`` the window ``[a, b)`` holds ``a <= t <= b - 1 unit`` and closes
        on its key's first row at or past ``b - 1 unit`` (so a 5-minute bar from 1-minute bars closes a
        minute early); ``closed="right"``: ``(a, b]``, closing at ``b``. Output: window end (or start), keys,
        metrics. ``fill`` (``"null"``, ``"ffill"``, a number) also emits empty windows, on the days a key
        has rows. ``late_rows_table`` as in ``time_series_engine``. See ``headwater.engines.time_bucket``.

        >>> import pandas as pd, headwater as hw, tempfile
        >>> s = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> s.use_catalog("doc")
        >>> g = s.stream_graph("five_minute_bars")
        >>> _ = (g.source("bars", schema={"time": "timestamp", "sym": "string", "volume": "long"})
        ...       .time_bucket_engine(time_cut_points=["09:30", "09:35", "09:40"], metrics=["sum(volume) as volume"],
        ...                           time_column="time", key_column="sym").sink("bars5"))
        >>> minutes = pd.date_range("2026-01-05 09:30", periods=10, freq="min")  # 1-minute bars by start
        >>> out = g.run_local({"bars": pd.DataFrame({"time": minutes, "sym": "a", "volume": range(10)})})["bars5"]
        >>> out.to_dict("list")
        {'time': [Timestamp('2026-01-05 09:35:00'), Timestamp('2026-01-05 09:40:00')], 'sym': ['a', 'a'], 'volume': [10, 35]}
        >>> s.close()
        """
        return self._engine(TimeBucketEngine, locals())

    def daily_time_series_engine(
        self,
        *,
        window: str | timedelta | Sequence[str | timedelta],
        step: str | timedelta,
        metrics: Sequence[Expr | str] | Sequence[Sequence[Expr | str]],
        time_column: str | None = None,
        key_column: str | Sequence[str] | None = None,
        session_begin: str | dt.time | Sequence[str | dt.time] | None = None,
        session_end: str | dt.time | Sequence[str | dt.time] | None = None,
        merge_session_end: bool = False,
        accepted_delay: str | timedelta = timedelta(0),
        closed: str = "left",
        use_window_start_time: bool = False,
        fill: str | float = "none",
        key_purge_daily: bool = True,
        force_trigger_session_end_time: str | timedelta | None = None,
        late_rows_table: str | None = None,
        key_purge_freq_in_second: float | None = None,
        force_trigger_time: str | timedelta | None = None,
        use_system_time: bool = False,
        update_time: str | timedelta | None = None,
        round_time: bool = True,
        sub_window: str | tuple[str | timedelta, str | timedelta] | None = None,
    ) -> DStream:
        """Aggregate per key the time-series windows of each day's trading sessions (Orca's dailyTimeSeriesEngine).

        Sessions are times of day (``session_begin[i]`` to ``session_end[i]``, 00:00 meaning 24:00; without
        ``session_end`` each session runs to the next one's begin and the last to midnight; without either,
        one session 00:00-24:00); Orca's next-day rules apply. Windows are aligned to each session's begin;
        rows before a session are in its first window, rows after the day's last session in none.
        ``merge_session_end=True`` puts a row stamped exactly at a session's end into its last window.
        ``force_trigger_session_end_time`` closes every key's windows of a session when a row of any key is
        that long past the session's end (event time, not Orca's wall clock). ``force_trigger_time`` as in
        ``time_series_engine``: a row of another key at or past a window's end + the value closes it.
        ``update_time`` also emits the open window as it fills, as in ``time_series_engine`` (positive only, as
        in Orca; tumbling windows). ``window=["1m", "5m"]`` with one metric list per window computes several
        window sizes at once, as in ``time_series_engine``. ``round_time`` is accepted for Orca's signature and has
        no effect: windows start at their session's begin. ``sub_window=("0s", "10s")`` aggregates only that part
        of each (tumbling) window, which then closes at the first row at or past its end.
        ``use_system_time=True`` (no ``time_column``): a row's time is its micro-batch's input commit time
        (sessions on that UTC clock); the output time column is ``time``. ``key_purge_freq_in_second`` as in
        ``time_bucket_engine``. Other arguments (and ``late_rows_table``) as in ``time_series_engine``;
        see ``headwater.engines.daily_time_series``.

        >>> import pandas as pd, headwater as hw, tempfile
        >>> s = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> s.use_catalog("doc")
        >>> g = s.stream_graph("minute_bars")
        >>> _ = (g.source("trades", schema={"time": "timestamp", "sym": "string", "volume": "long"})
        ...       .daily_time_series_engine(window="60s", step="60s", metrics=["sum(volume) as volume"],
        ...                                 time_column="time", key_column="sym", session_begin=["09:30", "13:00"],
        ...                                 session_end=["11:30", "15:00"], merge_session_end=True).sink("bars"))
        >>> times = pd.to_datetime(["2018-10-08 09:25:31", "2018-10-08 09:30:02", "2018-10-08 11:29:46",
        ...                         "2018-10-08 11:30:00", "2018-10-08 13:00:10"])
        >>> out = g.run_local({"trades": pd.DataFrame({"time": times, "sym": "A", "volume": [8, 26, 30, 14, 16]})})
        >>> out["bars"].to_dict("list")
        {'time': [Timestamp('2018-10-08 09:31:00'), Timestamp('2018-10-08 11:30:00')], 'sym': ['A', 'A'], 'volume': [34, 44]}
        >>> s.close()
        """
        return self._engine(DailyTimeSeriesEngine, locals())

    def cross_sectional_engine(
        self,
        *,
        metrics: Sequence[Expr | str],
        key_column: str | Sequence[str],
        triggering_pattern: str = "per_batch",
        triggering_interval: int | tuple[int, int] | str | timedelta | None = None,
        time_column: str | None = None,
        use_system_time: bool | None = None,
        last_batch_only: bool = False,
        context_by_column: str | None = None,
        round_time: bool = True,
        key_filter: Expr | str | None = None,
        updated_context_groups_only: bool = False,
    ) -> DStream:
        """Aggregate the latest row of every key on each trigger (Orca's crossSectionalEngine).

        ``triggering_pattern``: ``"per_batch"`` (once per append), ``"per_row"``, ``"interval"`` (windows of
        ``triggering_interval`` of the micro-batches' commit time, e.g. ``"1s"``), ``"key_count"`` (a timestamp
        once ``triggering_interval`` keys reached it, or a newer one arrived) or ``"data_interval"`` (windows
        of ``triggering_interval`` of data time, e.g. ``"1s"``). ``use_system_time`` defaults to True for the
        first two and must be False for the data-time ones. ``key_filter`` (a condition on a key's latest row)
        keeps keys out of the computation. With ``context_by_column``, metrics are per group of that column;
        ``updated_context_groups_only=True`` emits only the groups updated since the last output. Every key must
        meet in one task, so it cannot follow ``parallelize``. See ``headwater.engines.cross_sectional``.
        """
        if self.parallelism is not None:
            raise GraphDefinitionError(
                f"cross_sectional_engine after parallelize({self.parallelism.key!r}, {self.parallelism.count}): the "
                "engine needs the latest row of every key in one task; call it before parallelize, or after sync()")
        return self._engine(CrossSectionalEngine, locals())

    def anomaly_detection_engine(
        self,
        *,
        metrics: Sequence[Expr | str],
        time_column: str,
        key_column: str | Sequence[str] | None = None,
        window: str | timedelta | None = None,
        step: str | timedelta | None = None,
        garbage_size: int = 2000,
        round_time: bool = True,
        anomaly_description: Sequence[str] = (),
    ) -> DStream:
        """One row per true condition: per row (``qty < 4``), per window (``sum(qty) > 5``) or per row against
        its key's last window (``avg(qty) > qty``) (Orca's anomalyDetectionEngine); see
        ``headwater.engines.anomaly``."""
        return self._engine(AnomalyDetectionEngine, locals())

    def rule_engine(
        self,
        *,
        rule_sets: Mapping[Any, Sequence[Expr | str]],
        output_columns: str | Sequence[str],
        policy: str = "shortcut",
        rule_set_column: str | None = None,
        callback: Callable[..., Any] | None = None,
    ) -> DStream:
        """Check each row against the rule set its ``rule_set_column`` value selects (key ``None``: the default)
        (Orca's ruleEngine). Output: ``output_columns`` and ``result``: the first failing rule's index
        (``policy="shortcut"``, NULL if all pass) or every rule's outcome (``"all"``, a ``bool[]``). Rules
        change at run time with ``session.update_rule``; see ``headwater.engines.rule``."""
        if callback is not None:
            raise GraphDefinitionError(
                "rule_engine: callback is not supported (a callback inside a task would run again when a "
                "micro-batch is replayed); read the engine's output table instead, e.g. with a sink and SQL")
        return self._engine(RuleEngine, locals())

    def reactive_state_engine(
        self,
        *,
        metrics: Sequence[Expr | str],
        key_column: str | Sequence[str] | None = None,
        filter: Expr | str | None = None,
        keep_order: bool = True,
        key_purge_filter: Expr | str | None = None,
        key_purge_freq: str | timedelta | None = None,
    ) -> DStream:
        """Compute one output row per input row from the row and its key's state (Orca's reactiveStateEngine).

        ``filter`` keeps only matching output rows (state is updated for every row). With
        ``key_purge_filter`` (over output columns) and ``key_purge_freq``, keys whose latest output
        matches are dropped from state at most once per ``key_purge_freq``, when they are at least
        10% of the keys (Orca's rule). Output is always in input order.
        """
        return self._engine(ReactiveStateEngine, locals())

    def narrow_reactive_state_engine(
        self,
        *,
        metrics: Sequence[Expr | str],
        metric_names: Sequence[str],
        key_column: str | Sequence[str],
        filter: Expr | str | None = None,
        keep_order: bool = True,
        key_purge_filter: Expr | str | None = None,
        key_purge_freq: str | timedelta | None = None,
    ) -> DStream:
        """Like ``reactive_state_engine`` with long output: one row per input row and computed metric.

        Columns: key columns, pass-through metrics (plain columns), ``metricName``, ``value``.
        """
        return self._engine(NarrowReactiveStateEngine, locals())

    def dual_ownership_reactive_state_engine(
        self,
        *,
        metrics1: Sequence[Expr | str],
        metrics2: Sequence[Expr | str],
        key_column1: str | Sequence[str],
        key_column2: str | Sequence[str],
    ) -> DStream:
        """Two reactive state engines over the same rows, grouped by ``key_column1`` and ``key_column2``."""
        if self.parallelism is not None and not (
            self.parallelism.key in as_tuple(key_column1, "dual_ownership_reactive_state_engine key_column1")
            and self.parallelism.key in as_tuple(key_column2, "dual_ownership_reactive_state_engine key_column2")
        ):
            raise GraphDefinitionError(
                f"dual_ownership_reactive_state_engine after parallelize({clip(self.parallelism.key)}, "
                f"{self.parallelism.count}): rows must be partitioned by a column both key columns contain; "
                "remove parallelize or partition by a common key"
            )
        return self._engine(DualOwnershipReactiveStateEngine, locals())

    def reactive_stateless_engine(
        self,
        *,
        metrics: Sequence[Mapping[str, Any]],
        key_column: str | Sequence[str],
        value_column: str,
        time_column: str | None = None,
        filter: tuple[float, float] | None = None,
    ) -> DStream:
        """Spreadsheet-style formulas over cells (Orca's reactiveStatelessEngine).

        Each metric is ``{"output": "B:value", "formula": "a + b", "variables": {"a": "A:f1", "b": "B:f1"},
        "trigger_on": None, "filter": None}``; cells are the key columns joined with ``:``.
        """
        if self.parallelism is not None:
            raise GraphDefinitionError(
                "reactive_stateless_engine: formulas read cells of any key, so it runs as one task; remove parallelize"
            )
        return self._engine(ReactiveStatelessEngine, locals())

    def crypto_order_book_engine(
        self,
        *,
        depth: int | Mapping[str, int],
        input_col_map: Mapping[str, str] | None = None,
        update_rule: str = "direct",
        error_table: str | None = None,
        caching_interval: int | str | timedelta = timedelta(seconds=5),
        timeout: int | str | timedelta | None = None,
        cached_depth: int | Mapping[str, int] | None = None,
    ) -> DStream:
        """Keep per-symbol order books from full snapshots and incremental updates; emit each new book's best
        ``depth`` levels (Orca's cryptoOrderBookEngine).

        ``input_col_map`` maps the engine's fields (``symbol``, ``isIncremental``, ``eventTime``, ``askPrice``,
        ``askQty``, ``bidPrice``, ``bidQty`` and the rule's update ids) to input columns; unmapped fields are
        columns of their own name. ``update_rule``: ``"direct"``, ``"general"``, ``"binance_spot"`` or
        ``"binance_futures"``. ``depth`` (and ``cached_depth``): an int, or a dict of symbol to int (other
        symbols are ignored). ``caching_interval`` and ``timeout`` count event time (Orca's int milliseconds, or
        ``"5s"``). ``error_table`` names a table of the graph's catalog for the error rows (stale, gap, timeout,
        crossed book). Output columns are the input's. See ``headwater.engines.order_book``.
        """
        return self._engine(CryptoOrderBookEngine, locals())

    def pricing_engine(
        self,
        *,
        time_column: str,
        type_column: str,
        security_type: Sequence[int],
        method: Sequence[Expr | str],
        security_reference: Any = None,
        key_column: str | None = None,
        extra_metrics: Sequence[Expr | str] | None = None,
    ) -> DStream:
        """Price each row with the formula its ``type_column`` value selects (Orca's pricingEngine): ``method[i]``
        for ``security_type[i]``, over the row's columns, then ``security_reference``'s (a DataFrame or Arrow table of
        per-instrument terms joined by ``key_column``: both or neither), then constants. Output: ``time_column``,
        ``type_column``, ``key_column``, ``result`` (double) and ``extra_metrics``; see
        ``headwater.engines.pricing``."""
        return self._engine(PricingEngine, locals())

    # user code as engines (Orca 3.00.4's udfEngine and timerEngine): headwater.engines.udf
    def udf_engine(
        self,
        func: Callable[[dict[str, Any], pd.DataFrame], Any],
        output_columns: str | Sequence[str] | None = None,
        variables: Mapping[str, Any] | None = None,
        *,
        output_schema: Mapping[str, str] | Schema | None = None,
    ) -> DStream:
        """Call ``func(variables, batch)`` on every micro-batch (Orca's udfEngine): ``variables`` is a dict that
        starts as given (Orca's variableNames and initValues) and that ``func`` changes in place; it is saved
        with each micro-batch, so a replayed batch starts from it as it was (exactly-once). ``func`` returns a
        DataFrame, an Arrow table, a dict of columns or None; ``output_columns`` of it go on (default: all).
        Without ``output_schema``, it is inferred by calling ``func`` here on an empty batch and a copy of the
        variables. The graph needs the ``udf`` privilege. See ``headwater.engines.udf``.

        >>> import headwater as hw, tempfile
        >>> session = hw.connect(tempfile.mkdtemp(), start_spark=False)
        >>> session.use_catalog("doc")
        >>> def running_total(variables, batch):
        ...     totals = batch["qty"].cumsum() + variables["total"]
        ...     variables["total"] = int(totals.iloc[-1]) if len(totals) else variables["total"]
        ...     return batch.assign(total=totals)
        >>> g = session.stream_graph("udf_doc")
        >>> _ = g.source("ticks", {"qty": "long"}).udf_engine(running_total, variables={"total": 0}).sink("out")
        >>> g.run_local({"ticks": [pd.DataFrame({"qty": [1, 2]}), pd.DataFrame({"qty": [3]})]})["out"]["total"].tolist()
        [1, 3, 6]
        >>> session.close()
        """
        where = f"udf_engine on {clip(self.node.name)}"
        if output_schema is None and callable(func):
            initial = initial_variables(variables, where=where)
            output_schema = _infer_function_schema(lambda batch: func(initial, batch), self.node.schema, where,
                                                   name=getattr(func, "__qualname__", repr(func)), allow_none=True)
        return self._engine(UdfEngine, {**locals(), "output_schema": output_schema})

    def timer_engine(self, interval: str | timedelta, func: Callable[..., Any], *args: Any) -> DStream:
        """Run ``func(*args)`` every ``interval`` while the graph runs, on the worker that runs it (Orca's
        timerEngine); rows pass through unchanged. ``args`` are plain values (None, bool, int, float, str, lists
        of them). Pause and resume with ``session.stop_timer_engine(name)`` / ``resume_timer_engine(name)``; a
        run that raises is counted in ``stream_engine_stat`` and the timer goes on. The graph needs the ``udf``
        privilege. See ``headwater.runtime.timers``."""
        return self._engine(TimerEngine, locals())

    # -- edges -------------------------------------------------------------------------------------
    def map(self, func: Callable[[pd.DataFrame], pd.DataFrame] | Sequence[Expr | str] | None = None, *,
            where: Expr | str | None = None) -> DStream:
        """A stateless transform: expressions (Headwater's one evaluator) or a function over a pandas batch.

        ``map(["time", "price * volume as notional"], where="volume > 0")`` selects and filters;
        ``map(fn)`` calls ``fn(batch: pd.DataFrame) -> pd.DataFrame`` (it must be pure); its
        output schema is inferred by calling it on an empty batch.
        """
        schema = self.node.schema
        name = f"map_{self.graph._graph.next_id()}"
        label = f"map {clip(name)}"
        flt = None if where is None else (where if isinstance(where, Expr) else parse_expr(where, where=f"{label} where"))
        if flt is not None:
            infer_type(flt, schema, where=f"{label} where", kinds=frozenset({"scalar"}))
        if callable(func):
            out_schema = _infer_function_schema(func, schema, label)
            node: MapNode = MapNode(self.graph._graph.next_id(), name, out_schema, parallelism=self.parallelism,
                                    fn=func, fn_name=getattr(func, "__qualname__", repr(func)), filter=flt)
            return self._add(node)
        exprs: list[tuple[str, Expr]] = []
        for m in metric_items(func if func is not None else list(schema.names), where=label):
            metric = to_metric(m, where=label)
            pairs = zip(metric.names, metric.outputs(), strict=True) if isinstance(metric, Alias) else \
                [(default_name(metric, where=label), metric)]
            exprs.extend(pairs)
        cols = [(n, infer_type(e, schema, where=f"{label} column {clip(n)}", kinds=frozenset({"scalar"}))) for n, e in exprs]
        node = MapNode(self.graph._graph.next_id(), name, Schema.of(cols, where=label), parallelism=self.parallelism,
                       exprs=tuple(exprs), filter=flt)
        return self._add(node)

    def fork(self, count: int) -> list[DStream]:
        """Broadcast this stream to ``count`` branches, each receiving every row."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 2:
            raise GraphDefinitionError(f"fork on {clip(self.node.name)}: count must be an int >= 2, got {clip(count)}")
        return [self] * count

def _infer_function_schema(func: Callable[..., Any], schema: Schema, where: str, *, name: str | None = None,
                           allow_none: bool = False) -> Schema:
    """The output schema of ``func`` called on an empty batch of ``schema``. ``allow_none`` (udf_engine): the
    function may also return a dict of columns or an Arrow table; None asks for the schema to be given."""
    import pyarrow as pa

    empty = schema.to_arrow().empty_table().to_pandas()
    name = name or getattr(func, "__qualname__", repr(func))
    try:
        result = func(empty)
    except Exception as exc:  # the user's function: report its failure with context
        raise GraphDefinitionError(
            f"{where}: calling {name} on an empty batch to infer its output schema "
            f"failed with {type(exc).__name__}: {exc}"
        ) from exc
    if allow_none and result is None:
        raise GraphDefinitionError(f"{where}: {name} returned None on an empty batch, so its output schema cannot "
                                   "be inferred; pass output_schema={column: type}")
    if allow_none and isinstance(result, pa.Table):
        result = result.to_pandas()
    elif allow_none and isinstance(result, Mapping):
        try:
            result = pd.DataFrame({str(k): v for k, v in result.items()})
        except ValueError as exc:
            raise GraphDefinitionError(f"{where}: {name} returned a dict that is not a table ({exc})") from None
    if not isinstance(result, pd.DataFrame):
        raise GraphDefinitionError(f"{where}: the function must return a pandas DataFrame, got {type(result).__name__}")

    cols = []
    for column in result.columns:
        arrow_type = pa.Schema.from_pandas(result[[column]], preserve_index=False).field(str(column)).type
        if pa.types.is_null(arrow_type) and allow_none and column not in schema:
            raise GraphDefinitionError(f"{where}: column {clip(column)} that {name} returns on an empty batch has no "
                                       "type (an empty object column); pass output_schema={column: type}")
        if pa.types.is_null(arrow_type):  # an empty object column: keep the input's type, else assume text
            cols.append((str(column), schema[column] if column in schema else "string"))  # noqa: SIM401 (Schema has no get)
        else:
            cols.append((str(column), Schema.from_arrow(pa.schema([pa.field(str(column), arrow_type)]),
                                                        where=where).columns[0][1]))
    return Schema.of(cols, where=where)
