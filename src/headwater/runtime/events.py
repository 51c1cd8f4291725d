"""The master's event log (Orca's state-machine events): what the master did, when, and how it ended.

Each lifecycle operation of the master is one event: ``SUBMIT``, ``RESUBMIT``, ``START``, ``STOP``, ``DROP``,
``NODE_DOWN`` (a worker stopped answering), ``RECOVER`` (a graph resumed after a master start or moved off a
dead worker), ``DISK_FULL`` (a graph waiting for disk space, ``running`` until it runs again). An event is
stored ``running`` when it begins and ``finished`` or ``failed`` (with the error) when it ends, so a crash
mid-operation leaves it ``running``. ``session.state_machine_events()`` lists them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from enum import StrEnum
from typing import Any, TypeVar

from headwater.errors import shorten
from headwater.storage.metadata import MetadataStore


class EventType(StrEnum):
    SUBMIT = "SUBMIT"
    RESUBMIT = "RESUBMIT"
    START = "START"
    STOP = "STOP"
    DROP = "DROP"
    NODE_DOWN = "NODE_DOWN"
    RECOVER = "RECOVER"
    DISK_FULL = "DISK_FULL"  # a graph waits for disk space; ends when it runs again (headwater.runtime.disk_wait)


class EventLog:
    """Events stored in the metadata store (table ``events``)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @contextlib.contextmanager
    def record(self, kind: EventType, detail: str, *, retries: int = 0) -> Iterator[None]:
        """``retries``: how many attempts at the same thing came before this one (a graph's restarts in a row)."""
        event = self.store.add_event(str(kind), shorten(detail, 2000), time.time(), retries)
        try:
            yield
        except BaseException as exc:
            self.store.end_event(event, "failed", time.time(), shorten(f"{type(exc).__name__}: {exc}", 2000))
            raise
        self.store.end_event(event, "finished", time.time(), "")


F = TypeVar("F", bound=Callable[..., Any])


def recorded(kind: EventType) -> Callable[[F], F]:
    """Record each call of a ``Master`` method as an event whose detail is its first argument (the graph)."""

    def wrap(method: F) -> F:
        first = next(iter(list(inspect.signature(method).parameters)[1:]), "")

        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            subject = args[0] if args else kwargs.get(first)  # the first argument, by position or by name
            with self.events.record(kind, str(getattr(subject, "fqn", subject))):
                return method(self, *args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap
