"""The join engines as ``DStream`` methods (Orca B.9): ``left.asof_join_engine(right, ...)``.

Each call declares, besides the engine, a private join input table and one small map per side that
writes that side's rows into it (see :mod:`headwater.engines.joins.base` for why); ``explain()`` shows
them. A join runs as one stream task, or, after ``parallelize`` by one of its matching columns, as that
many tasks with both sides partitioned by that column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self

from headwater.api.handle import StreamHandle
from headwater.catalog import resolve
from headwater.engines.arguments import from_arguments
from headwater.engines.joins import (
    AsofJoinEngine,
    EqualJoinEngine,
    JoinEngine,
    LeftSemiJoinEngine,
    LookupJoinEngine,
    SnapshotJoinEngine,
    WindowJoinEngine,
)
from headwater.engines.joins.base import LEFT, RIGHT, _pair, time_pair
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.parse import to_metrics
from headwater.plan.logical import EngineNode, MapNode, Parallelism, TableNode, TableRole

if TYPE_CHECKING:
    pass

Metrics = Sequence[Expr | str]


class JoinMethods(StreamHandle):
    """Mixed into ``DStream``: ``self`` is the left input."""

    def _join(self, right: Self, engine: type[JoinEngine], arguments: Mapping[str, Any]) -> Self:
        """Declare the join ``engine`` builds from a join method's ``arguments`` (its ``locals()``), with its
        feeders; each argument converted as the spec's field declares (``headwater.engines.arguments``)."""
        left = self
        name = left.graph._engine_name(engine.kind, left.node_id)
        where = f"{engine.kind.lower()} {clip(name)}"
        if not isinstance(right, JoinMethods) or right.graph is not left.graph:
            raise GraphDefinitionError(f"{where}: the right input must be a DStream of the same stream graph "
                                       f"{left.graph.fqn}, got {clip(right)}")
        if any(s._changelog_input() is not None for s in (left, right)):
            raise GraphDefinitionError(f"{where}: an input is a change log (inserts, updates and deletes of keys), which "
                                       "a join would take as new rows; join its net state from a keyed table, or "
                                       "buffer(...) the change rows into a plain table to treat them as appends")
        left_keys, right_keys = _pair(arguments["matching_column"], "matching_column", where)
        times: dict[str, Any] = {}
        if arguments.get("time_column") is not None:
            times["time_column"], times["right_time_column"] = time_pair(arguments["time_column"], where)
        spec = from_arguments(engine, arguments, name=name, left_schema=left.node.schema, right_schema=right.node.schema,
                              metrics=to_metrics(arguments["metrics"], where=where),
                              matching_column=left_keys, right_matching_column=right_keys, **times)
        parallelism = None
        if left.parallelism is not None:
            if spec.needs_one_task:
                raise GraphDefinitionError(
                    f"{where}: sort_by_time=True orders the output across keys, so every key meets in one task; remove "
                    f"parallelize({left.parallelism.key!r}, {left.parallelism.count}) or sort_by_time")
            if left.parallelism.key not in spec.matching_column:
                raise GraphDefinitionError(
                    f"{where}: parallelize({left.parallelism.key!r}, {left.parallelism.count}) before a join must use a "
                    f"matching column ({', '.join(spec.matching_column)}): both sides of a key meet in one task")
            index = spec.matching_column.index(left.parallelism.key)
            parallelism = Parallelism(f"k{index}", left.parallelism.count)
        graph = left.graph._graph
        layout = spec.layout
        fqn = resolve(name, "stream_engine", current_catalog=left.graph.fqn.catalog)
        feeders = []
        for side, stream in ((LEFT, left), (RIGHT, right)):
            label = "left" if side == LEFT else "right"
            feeder = MapNode(graph.next_id(), f"{name}_{label}", layout.merged(), exprs=layout.feeder(side))
            graph.add(feeder, inputs=(stream.node_id,))
            stream._note_edge(feeder.id)
            feeders.append(feeder.id)
        table_name = f"{name}_input"
        table = TableNode(graph.next_id(), table_name, layout.merged(), fqn=f"{left.graph.fqn}.{table_name}",
                          role=TableRole.BUFFER, private=True)
        graph.add(table, inputs=tuple(feeders))
        node = EngineNode(graph.next_id(), name, spec.output_schema(), parallelism=parallelism, spec=spec, fqn=str(fqn))
        graph.add(node, inputs=(table.id,))
        return type(self)(left.graph, node.id, parallelism)

    def asof_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any,
                         time_column: Any = None, use_system_time: bool = False,
                         delayed_time: str | timedelta | None = None, garbage_size: int = 5000,
                         sort_by_time: bool = False) -> Self:
        """Join each left row with the latest right row of its key at or before its time (Orca's asofJoinEngine).

        ``matching_column``: a name, names, or ``[[left names], [right names]]``; ``time_column``: a name or
        ``[left, right]``. Metrics use left columns by name and right ones as ``right.x`` (or by name when the
        left has no such column). ``sort_by_time=True``: inputs in time order across keys, output too (one task).
        See :mod:`headwater.engines.joins.asof`.
        """
        return self._join(right, AsofJoinEngine, locals())

    def equal_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any, time_column: Any,
                          garbage_size: int = 5000, max_delayed_time: str | timedelta = timedelta(seconds=3)) -> Self:
        """Join rows of the two sides with equal key and time, once (Orca's equalJoinEngine); see
        :mod:`headwater.engines.joins.equal`."""
        return self._join(right, EqualJoinEngine, locals())

    def lookup_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any,
                           right_time_column: str | None = None, keep_duplicates: bool = False,
                           is_inner_join: bool = False) -> Self:
        """Join each left row at once with the right side's latest row of its key (Orca's lookupJoinEngine); see
        :mod:`headwater.engines.joins.lookup`."""
        return self._join(right, LookupJoinEngine, locals())

    def left_semi_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any,
                              garbage_size: int = 5000, update_right_table: bool = False) -> Self:
        """Emit each left row once its key has a right row (Orca's leftSemiJoinEngine); see
        :mod:`headwater.engines.joins.semi`."""
        return self._join(right, LeftSemiJoinEngine, locals())

    def snapshot_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any,
                             time_column: Any = None, keep_left_duplicates: bool = False,
                             keep_right_duplicates: bool = False, is_inner_join: bool = True) -> Self:
        """Join a row arriving on either side with the other side's cached rows of its key (Orca's
        snapshotJoinEngine); see :mod:`headwater.engines.joins.snapshot`."""
        return self._join(right, SnapshotJoinEngine, locals())

    def window_join_engine(self, right: Self, *, window: Any, metrics: Metrics, matching_column: Any,
                           time_column: Any = None, use_system_time: bool = False, garbage_size: int = 5000,
                           max_delayed_time: str | timedelta | None = timedelta(seconds=3),
                           closed: str = "left", null_fill: Sequence[Any] = (), sort_by_time: bool = False) -> Self:
        """Each left row with aggregates of its key's right rows in ``[t + a, t + b]`` for ``window=(a, b)``
        (``"-5s:0s"`` or ``("-5s", "0s")``; ``(0, 0)``: since the key's previous left row) (Orca's
        windowJoinEngine); ``null_fill``: one value per output column replacing its NULLs (None keeps them);
        ``sort_by_time=True``: inputs in time order across keys, output too (one task). ``use_system_time=True``
        (no ``time_column``): rows are timed by their micro-batch's commit time and a window is computed once
        that clock is past it; a ``(0, 0)`` window is computed at each left row over the right rows that arrived
        since the key's previous one. ``garbage_size`` is accepted and has no effect (right rows no window can
        reach are purged). See :mod:`headwater.engines.joins.window`."""
        return self._join(right, WindowJoinEngine, locals())

