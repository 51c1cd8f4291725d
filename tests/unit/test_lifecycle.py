"""The graph state machine (Orca A.5) without Spark."""

from __future__ import annotations

import pytest

from headwater.errors import StreamGraphStateError
from headwater.runtime.lifecycle import TRANSITIONS, GraphStatus, check_transition

S = GraphStatus


def test_every_status_has_its_transitions_and_destroyed_is_terminal():
    assert set(TRANSITIONS) == set(GraphStatus)
    assert TRANSITIONS[S.DESTROYED] == frozenset()
    for status in set(GraphStatus) - {S.DESTROYED, S.DESTROYING}:
        assert S.DESTROYING in TRANSITIONS[status], status  # anything live can be dropped


@pytest.mark.parametrize("current, target", [
    (S.STOPPED, S.RUNNING), (S.FAILED, S.RUNNING), (S.DESTROYED, S.BUILDING), (S.FAILED, S.STOPPED),
    (S.DESTROYING, S.RUNNING),
])
def test_illegal_transitions_are_refused_with_what_is_allowed(current, target):
    with pytest.raises(StreamGraphStateError, match=f"it is {current}"):
        check_transition("demo.stream_graph.g", current, target, action="test")
