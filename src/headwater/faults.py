"""Named fault points: crash tests kill the process at an exact step instead of at a timed moment.

A test starts a child process with ``HEADWATER_FAULT_POINT=<name>``; when the child reaches
``fault_point(<name>)`` it kills itself with SIGKILL (no cleanup, no ``finally``, no atexit: a
``kill -9`` at that line). Unset, a fault point costs one dictionary lookup.

Points (keep this list true when adding one):

- ``stream_table.append.after_commit``: an append's Delta commit has landed, before
  :meth:`StreamTable.append` returns (so ``session.append`` never returns its version).
- ``submit.after_first_table``: a fresh submit created one of its tables' directories.
- ``submit.before_metadata``: every table directory exists; nothing of the graph is in the catalog.
- ``submit.after_metadata``: graph, tables and references are committed; no query started.
- ``batch.before_commit``: a micro-batch's output files and engine state are written; nothing of it
  is committed to its output tables.
- ``sql.result.after_first_batch``: the master has sent a SQL result's schema and first batch of rows (a
  result of one batch never reaches it), before the second.
- ``batch.after_commit``: a micro-batch's output is committed to its tables; Spark has not logged
  the batch as done, so a resumed query runs it again.
- ``move.before_start``: a failover move (``Master._move``) found the graph running, before it starts
  it on another worker.
- ``stop.before_store``: a stop asked the graph's worker to stop it, before it stores ``stopped``.
- ``graph.lock.wait``: a stop, drop or move of a graph must wait for another one of them in progress
  (:mod:`headwater.runtime.serial`).
- ``scratch.after_mkdir``: a process created its scratch directory (:func:`headwater.storage.locks.create_locked_dir`),
  before it locks it.
- ``snapshot.before_fence``: a fenced stream task wrote an engine's new state to a temporary file,
  before it checks its placement's epoch and puts the snapshot in place.

In-process tests may instead run an action at a point (:func:`on_fault_point`), e.g. to start a
competing call exactly there.

>>> fault_point("stream_table.append.after_commit")  # not selected: returns
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

ENV_VAR = "HEADWATER_FAULT_POINT"

_ACTIONS: dict[str, Callable[[], None]] = {}  # in-process tests only (on_fault_point)


def fault_point(name: str) -> None:
    """Kill this process with SIGKILL if ``HEADWATER_FAULT_POINT`` names ``name``; run the action a test set."""
    if os.environ.get(ENV_VAR) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    action = _ACTIONS.get(name)
    if action is not None:
        action()


@contextlib.contextmanager
def on_fault_point(name: str, action: Callable[[], None]) -> Iterator[None]:
    """While the block runs, every thread of this process that reaches ``fault_point(name)`` runs ``action``.

    >>> hits = []
    >>> with on_fault_point("graph.lock.wait", lambda: hits.append(1)):
    ...     fault_point("graph.lock.wait")
    >>> fault_point("graph.lock.wait"); hits
    [1]
    """
    _ACTIONS[name] = action
    try:
        yield
    finally:
        _ACTIONS.pop(name, None)
