"""What the ``DStream`` mixins (:mod:`headwater.api.joins`, :mod:`headwater.api.tables`) use of the ``DStream``
they are mixed into, declared once for the type checker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from headwater.plan.logical import Node, Parallelism, TableNode


class StreamHandle:
    """The base of ``DStream``'s mixins: a handle on one node of a stream graph."""

    if TYPE_CHECKING:
        graph: Any
        node_id: int
        parallelism: Parallelism | None

        def __init__(self, graph: Any, node_id: int, parallelism: Parallelism | None = None) -> None: ...

        def _add(self, node: Node) -> Self: ...

        def _note_edge(self, dst: int) -> None: ...

        def _changelog_input(self) -> TableNode | None: ...

        @property
        def node(self) -> Node: ...
