"""The stream graph state machine (Orca A.5): statuses, the transitions allowed, and the check.

Every status change of a graph goes through :func:`check_transition` (``Master.set_status``), so an
illegal request (starting a running graph, purging a live one) fails with
:class:`~headwater.errors.StreamGraphStateError` naming the status and what is allowed from it.

>>> check_transition("demo.stream_graph.g", GraphStatus.RUNNING, GraphStatus.STOPPED, action="stop")
>>> check_transition("demo.stream_graph.g", GraphStatus.DESTROYED, GraphStatus.RUNNING, action="start")
Traceback (most recent call last):
...
headwater.errors.StreamGraphStateError: start stream graph demo.stream_graph.g: it is destroyed, which allows no further transition
"""

from __future__ import annotations

from enum import StrEnum

from headwater.errors import StreamGraphStateError


class GraphStatus(StrEnum):
    BUILDING = "building"  # queries being started (submit, start, resume after a restart)
    RUNNING = "running"  # every query is running
    ERROR = "error"  # a recoverable failure: the master restarts the graph from its checkpoints
    FAILED = "failed"  # unrecoverable until the user acts (resubmit); state kept for analysis
    STOPPED = "stopped"  # paused by stop_stream_graph; start_stream_graph resumes it
    DESTROYING = "destroying"  # drop in progress
    DESTROYED = "destroyed"  # terminal; the record stays until purge_stream_graph_records


S = GraphStatus
TRANSITIONS: dict[GraphStatus, frozenset[GraphStatus]] = {
    S.BUILDING: frozenset({S.RUNNING, S.ERROR, S.FAILED, S.STOPPED, S.DESTROYING}),
    S.RUNNING: frozenset({S.BUILDING, S.ERROR, S.FAILED, S.STOPPED, S.DESTROYING}),
    S.ERROR: frozenset({S.BUILDING, S.FAILED, S.STOPPED, S.DESTROYING}),
    S.FAILED: frozenset({S.BUILDING, S.DESTROYING}),
    S.STOPPED: frozenset({S.BUILDING, S.DESTROYING}),
    S.DESTROYING: frozenset({S.DESTROYED}),
    S.DESTROYED: frozenset(),
}
RESUMABLE = frozenset({S.BUILDING, S.RUNNING, S.ERROR})  # what a restarted master resumes


def check_transition(fqn: str, current: str, target: str, *, action: str) -> None:
    """Raise :class:`StreamGraphStateError` unless ``current -> target`` is a legal transition.

    Staying in the same status is always legal (it records a new reason).
    """
    allowed = TRANSITIONS[GraphStatus(current)]
    if current == target or GraphStatus(target) in allowed:
        return
    if not allowed:
        raise StreamGraphStateError(f"{action} stream graph {fqn}: it is {current}, which allows no further transition")
    raise StreamGraphStateError(
        f"{action} stream graph {fqn}: not possible while it is {current} (from {current} it can go to "
        f"{', '.join(sorted(allowed))})"
    )
