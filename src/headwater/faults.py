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

>>> fault_point("stream_table.append.after_commit")  # not selected: returns
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "HEADWATER_FAULT_POINT"


def fault_point(name: str) -> None:
    """Kill this process with SIGKILL if ``HEADWATER_FAULT_POINT`` names ``name``."""
    if os.environ.get(ENV_VAR) == name:
        os.kill(os.getpid(), signal.SIGKILL)
