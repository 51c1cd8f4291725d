"""How the suite shares the machine when run with ``-n 2 --dist load --maxschedchunk 1`` (pytest-xdist, what
``scripts/setup.sh test`` does).

Each worker takes the next test as it finishes one (``--maxschedchunk 1``: without it, xdist hands each worker
a quarter of its share up front as one contiguous run, which put every service, console and cluster test in
one lane, still running them minutes after the other lane had run out of tests). The tests that start Spark,
processes or servers go first, in an order that puts the heaviest last (Spark tests, then security, service
processes, the web console in a browser, the cluster and chaos tests), and the fast unit tests and doctests
after them, so that the two lanes end together. Each worker that runs a Spark test has its own local Spark
session; the process tests' deadlines leave room for the other lane's load. Without xdist the order is the same.

The tests of a module in ``_ONE_LANE`` share a module fixture that is slow to build (a master with graphs): the
scheduler below sends them to one lane together, which builds it once. (Not ``--dist loadgroup``: with pytest 9,
pytest-xdist 3.8 cannot rename items into groups, so its groups are silently ignored; and its scope scheduler hands
each lane a quarter of the suite up front.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import headwater as hw

_ROOT = Path(__file__).resolve().parent

# Every JVM of the suite compiles with the client compiler (C1) alone: each lane's Spark driver, and those of the
# processes the tests start (sessions killed and resumed, workers, masters, `cluster up`'s Spark master and
# workers), which inherit this environment. A test's JVM lives seconds to minutes, mostly starting and warming up,
# where the server compiler's (C2) work is CPU that two shared cores never get back; compilation changes no result.
# Measured on the 2-core machine: a worker's Spark driver starts on 12.6 CPU-s instead of 18.5, and tests/spark
# ran in 217 s instead of 267 s on two lanes.
_C1 = "-XX:TieredStopAtLevel=1"
if _C1 not in os.environ.get("JAVA_TOOL_OPTIONS", ""):
    os.environ["JAVA_TOOL_OPTIONS"] = f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} {_C1}".strip()
# the heavy tests' order: the lighter first, the processes and deadlines last
_HEAVY_ORDER = ("spark", "security", "service", "ui", "cluster")
# modules whose tests run in one lane, one after the other (a module fixture built once)
_ONE_LANE = ("tests/ui/test_console.py",)


def _heavy_rank(item: pytest.Item) -> int | None:
    """Where a test that starts Spark, processes or servers goes (None: a fast test)."""
    try:
        part = Path(str(item.path)).resolve().relative_to(_ROOT).parts[0]
    except ValueError:  # a doctest of src/headwater
        part = ""
    if part in _HEAVY_ORDER:
        return _HEAVY_ORDER.index(part)
    if item.get_closest_marker("spark") or item.get_closest_marker("slow"):
        return 0
    return None


@pytest.fixture
def session(tmp_path: Path) -> Iterator[hw.Session]:
    """An embedded session without Spark on the test's own directory, catalog ``demo`` in use (a test file with
    other needs, e.g. Spark or a module-wide session, defines its own ``session``)."""
    s = hw.connect(tmp_path, start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ranks = {id(item): _heavy_rank(item) for item in items}
    fast = [i for i in items if ranks[id(i)] is None]
    heavy = sorted((i for i in items if ranks[id(i)] is not None), key=lambda i: ranks[id(i)])  # stable
    items[:] = heavy + fast


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist load``, except that the tests of a module in ``_ONE_LANE`` are sent to a lane together."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScheduling

    class OneLaneModules(LoadScheduling):
        def _send_tests(self, node, num: int) -> None:  # type: ignore[no-untyped-def]
            picked = self.pending[:num]
            modules = {m for i in picked if (m := self.collection[i].split("::", 1)[0]) in _ONE_LANE}
            picked += [i for i in self.pending[num:] if self.collection[i].split("::", 1)[0] in modules]
            if picked:
                chosen = set(picked)
                self.pending[:] = [i for i in self.pending if i not in chosen]
                self.node2pending[node].extend(picked)
                node.send_runtest_some(picked)

    return OneLaneModules(config, log)
