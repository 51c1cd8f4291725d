"""The join engines as ``DStream`` methods (Orca B.9): ``left.asof_join_engine(right, ...)``.

Each call declares, besides the engine, a private join input table and one small map per side that
writes that side's rows into it (see :mod:`headwater.engines.joins.base` for why); ``explain()`` shows
them. A join runs as one stream task, or, after ``parallelize`` by one of its matching columns, as that
many tasks with both sides partitioned by that column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self

from headwater.catalog import resolve
from headwater.durations import parse_duration
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
    from headwater.plan.logical import Node

Metrics = Sequence[Expr | str]


class JoinMethods:
    """Mixed into ``DStream``: ``self`` is the left input."""

    if TYPE_CHECKING:  # what the DStream it is mixed into provides
        graph: Any
        node_id: int
        parallelism: Parallelism | None

        def __init__(self, graph: Any, node_id: int, parallelism: Parallelism | None = None) -> None: ...

        @property
        def node(self) -> Node: ...

    def _join(self, right: Self, kind: str, make: Callable[[str, dict[str, Any]], JoinEngine],
              matching_column: Any, metrics: Metrics, time_column: Any = None) -> Self:
        left = self
        name = left.graph._engine_name(kind, left.node_id)
        where = f"{kind.lower()} {clip(name)}"
        if not isinstance(right, JoinMethods) or right.graph is not left.graph:
            raise GraphDefinitionError(f"{where}: the right input must be a DStream of the same stream graph "
                                       f"{left.graph.fqn}, got {clip(right)}")
        left_keys, right_keys = _pair(matching_column, "matching_column", where)
        times: dict[str, Any] = {}
        if time_column is not None:
            times["time_column"], times["right_time_column"] = time_pair(time_column, where)
        spec = make(name, {"name": name, "left_schema": left.node.schema, "right_schema": right.node.schema,
                           "metrics": to_metrics(metrics, where=where),
                           "matching_column": left_keys, "right_matching_column": right_keys, **times})
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
            feeders.append(feeder.id)
        table_name = f"{name}_input"
        table = TableNode(graph.next_id(), table_name, layout.merged(), fqn=f"{left.graph.fqn}.{table_name}",
                          role=TableRole.BUFFER, private=True)
        graph.add(table, inputs=tuple(feeders))
        engine = EngineNode(graph.next_id(), name, spec.output_schema(), parallelism=parallelism, spec=spec, fqn=str(fqn))
        graph.add(engine, inputs=(table.id,))
        return type(self)(left.graph, engine.id, parallelism)

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
        def make(name: str, common: dict[str, Any]) -> JoinEngine:
            delay = None if delayed_time is None else parse_duration(delayed_time, where=f"asof_join_engine {clip(name)} delayed_time")
            return AsofJoinEngine(**common, use_system_time=use_system_time, delayed_time=delay,
                                  garbage_size=garbage_size, sort_by_time=sort_by_time)

        return self._join(right, AsofJoinEngine.kind, make, matching_column, metrics, time_column)

    def equal_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any, time_column: Any,
                          garbage_size: int = 5000, max_delayed_time: str | timedelta = timedelta(seconds=3)) -> Self:
        """Join rows of the two sides with equal key and time, once (Orca's equalJoinEngine); see
        :mod:`headwater.engines.joins.equal`."""
        def make(name: str, common: dict[str, Any]) -> JoinEngine:
            delay = parse_duration(max_delayed_time, where=f"equal_join_engine {clip(name)} max_delayed_time", allow_zero=True)
            return EqualJoinEngine(**common, garbage_size=garbage_size, max_delayed_time=delay)

        return self._join(right, EqualJoinEngine.kind, make, matching_column, metrics, time_column)

    def lookup_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any,
                           right_time_column: str | None = None, keep_duplicates: bool = False,
                           is_inner_join: bool = False) -> Self:
        """Join each left row at once with the right side's latest row of its key (Orca's lookupJoinEngine); see
        :mod:`headwater.engines.joins.lookup`."""
        def make(name: str, common: dict[str, Any]) -> JoinEngine:
            return LookupJoinEngine(**common, right_time_column=right_time_column, keep_duplicates=keep_duplicates,
                                    is_inner_join=is_inner_join)

        return self._join(right, LookupJoinEngine.kind, make, matching_column, metrics)

    def left_semi_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any,
                              garbage_size: int = 5000, update_right_table: bool = False) -> Self:
        """Emit each left row once its key has a right row (Orca's leftSemiJoinEngine); see
        :mod:`headwater.engines.joins.semi`."""
        def make(name: str, common: dict[str, Any]) -> JoinEngine:
            return LeftSemiJoinEngine(**common, garbage_size=garbage_size, update_right_table=update_right_table)

        return self._join(right, LeftSemiJoinEngine.kind, make, matching_column, metrics)

    def snapshot_join_engine(self, right: Self, *, metrics: Metrics, matching_column: Any,
                             time_column: Any = None, keep_left_duplicates: bool = False,
                             keep_right_duplicates: bool = False, is_inner_join: bool = True) -> Self:
        """Join a row arriving on either side with the other side's cached rows of its key (Orca's
        snapshotJoinEngine); see :mod:`headwater.engines.joins.snapshot`."""
        def make(name: str, common: dict[str, Any]) -> JoinEngine:
            return SnapshotJoinEngine(**common, keep_left_duplicates=keep_left_duplicates,
                                      keep_right_duplicates=keep_right_duplicates, is_inner_join=is_inner_join)

        return self._join(right, SnapshotJoinEngine.kind, make, matching_column, metrics, time_column)

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
        def make(name: str, common: dict[str, Any]) -> JoinEngine:
            where = f"window_join_engine {clip(name)}"
            delay = None if max_delayed_time is None else \
                parse_duration(max_delayed_time, where=f"{where} max_delayed_time", allow_zero=True)
            return WindowJoinEngine(**common, window=_window(window, where), max_delayed_time=delay, closed=closed,
                                    null_fill=_fill_values(null_fill, where=f"window_join_engine {clip(name)}"), sort_by_time=sort_by_time,
                                    use_system_time=use_system_time, garbage_size=garbage_size)

        return self._join(right, WindowJoinEngine.kind, make, matching_column, metrics, time_column)


def _window(value: Any, where: str) -> tuple[timedelta, timedelta]:
    """``"a:b"`` or ``(a, b)``: two signed durations (``"-5s"``, ``"0s"``, ``timedelta``) or 0."""
    parts = value.split(":") if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else []
    if len(parts) != 2:
        raise GraphDefinitionError(f"{where}: window must be 'a:b' or (a, b), e.g. '-5s:0s' or (0, 0); got {clip(value)}")

    def one(part: Any) -> timedelta:
        if (isinstance(part, int) and not isinstance(part, bool) and part == 0) or part in ("0", " 0"):
            return timedelta(0)
        if isinstance(part, timedelta):
            return part
        text = str(part).strip()
        sign = -1 if text.startswith("-") else 1
        return sign * parse_duration(text.lstrip("-+"), where=f"{where} window", allow_zero=True)

    return one(parts[0]), one(parts[1])


def _fill_values(value: Any, *, where: str) -> tuple[Any, ...]:
    """``null_fill`` as a tuple: a list or tuple of values, one per output column."""
    if not isinstance(value, list | tuple):
        raise GraphDefinitionError(f"{where}: null_fill must be a list with one value per output column (None keeps "
                                   f"its NULLs), got {clip(value)}")
    return tuple(value)
