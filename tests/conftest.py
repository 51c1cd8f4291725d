"""How the suite shares the machine when run with ``-n 2`` (pytest-xdist, what ``scripts/setup.sh test`` does).

Tests that start Spark, processes or servers, or that measure time, memory or a deadline, run one at a time, on
one worker (``xdist_group("serial")``), in an order that puts the heaviest last: Spark tests, then security,
then service processes, then the web console in a browser, then the cluster and chaos tests. Every other test
(the fast unit tests and the doctests) runs on the other worker meanwhile, so that by the time the
timing-sensitive process tests start the unit tests are done and the two cores are theirs. Without xdist the
order is the same and nothing else changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent
# the serial tests' order: the lighter first, the processes and deadlines last (the unit tests are done by then)
_SERIAL_ORDER = ("spark", "security", "service", "ui", "cluster")


def _serial_rank(item: pytest.Item) -> int | None:
    """Where a serial test goes (None: a test free to run beside others)."""
    try:
        part = Path(str(item.path)).resolve().relative_to(_ROOT).parts[0]
    except ValueError:  # a doctest of src/headwater
        part = ""
    if part in _SERIAL_ORDER:
        return _SERIAL_ORDER.index(part)
    if item.get_closest_marker("spark") or item.get_closest_marker("slow"):
        return 0
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ranks = {id(item): _serial_rank(item) for item in items}
    free = [i for i in items if ranks[id(i)] is None]
    serial = sorted((i for i in items if ranks[id(i)] is not None), key=lambda i: ranks[id(i)])  # stable
    for item in serial:
        item.add_marker(pytest.mark.xdist_group("serial"))
    # the group first: xdist hands it to one worker at the start, and the free tests to the other
    items[:] = serial + free
