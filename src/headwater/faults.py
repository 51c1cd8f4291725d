"""Named fault points: where tests kill the process to prove crash safety (no timed kills).

``fault_point(name)`` does nothing unless the environment variable ``HEADWATER_FAULT_POINT`` equals
``name``; then the process dies at once with SIGKILL, as ``kill -9`` would. The check is one dictionary
lookup, so points stay in production code.

Points:
    submit.after_first_table   a fresh submit created one of its tables' directories
    submit.before_metadata     every table directory exists; nothing about the graph is in the catalog
    submit.after_metadata      graph, tables and references are committed; no query started
"""

from __future__ import annotations

import os
import signal

ENV = "HEADWATER_FAULT_POINT"


def fault_point(name: str) -> None:
    """Die here with SIGKILL when ``HEADWATER_FAULT_POINT`` names this point."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
