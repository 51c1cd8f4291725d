"""One change of a graph's placement at a time: stop, drop and a failover move of the same graph are serialised.

Without it, a move that found the graph running could start it on another worker after a stop or drop of
it had finished: the graph would run again though stopped, or run without its catalog entry. Each of these
calls holds its graph's lock from the moment it reads the graph's status until its change is stored, so a
stop that comes during a move waits for it (and then stops the graph where it moved), and a move that comes
after a stop finds the graph stopped and leaves it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from headwater.faults import fault_point

F = TypeVar("F", bound=Callable[..., Any])


class GraphLocks:
    """A re-entrant lock per graph name (a drop inside a resubmit, for instance, takes it again)."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def hold(self, fqn: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(fqn, threading.RLock())
        if not lock.acquire(blocking=False):
            fault_point("graph.lock.wait")  # another stop, drop or move of this graph is in progress
            lock.acquire()
        try:
            yield
        finally:
            lock.release()


def one_per_graph(method: F) -> F:
    """Run a master's method under its graph's lock (``self.graph_locks``; the graph is the ``fqn`` argument)."""
    signature = inspect.signature(method)

    @functools.wraps(method)
    def serialised(self: Any, *args: Any, **kwargs: Any) -> Any:
        fqn = str(signature.bind(self, *args, **kwargs).arguments["fqn"])
        with self.graph_locks.hold(fqn):
            return method(self, *args, **kwargs)

    return serialised  # type: ignore[return-value]
