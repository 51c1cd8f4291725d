"""Where graphs run: Orca's greedy placement (A.6) over the workers' reported load, as a pure function.

A graph is placed whole (all of its stream tasks on one worker), so sibling tasks are always together. Each
eligible worker (alive, in the graph's compute group) has a score, lower is better::

    score = CPU_WEIGHT * cpu + MEMORY_WEIGHT * memory + GRAPH_WEIGHT * (complexity already placed on it)

``cpu`` and ``memory`` are the utilisation (0 to 1) the worker reported in its last heartbeat, and a graph's
complexity is its number of operators (engines and maps). Graphs are placed most complex first, each on the
eligible worker with the lowest score (ties: the order the workers were given), whose score then grows by
the graph's complexity. On idle workers this is the longest-processing-time rule: within a compute group,
the placed complexity of any two workers differs by at most the largest single graph's complexity.
A worker whose Spark driver is still starting is chosen only when no eligible worker is ready: a graph
placed there waits for that start (several seconds) before it runs.

>>> workers = [WorkerLoad("http://a"), WorkerLoad("http://b")]
>>> place([GraphDemand("g1", 3), GraphDemand("g2", 2), GraphDemand("g3", 2)], workers)
{'g1': 'http://a', 'g2': 'http://b', 'g3': 'http://b'}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from headwater.errors import ExecutionError

CPU_WEIGHT = 0.6
MEMORY_WEIGHT = 0.4
GRAPH_WEIGHT = 0.1  # per operator: ten operators weigh as much as a fully busy CPU
DEFAULT_GROUP = "default"


@dataclass(frozen=True)
class WorkerLoad:
    url: str
    group: str = DEFAULT_GROUP
    cpu: float = 0.0  # utilisation in [0, 1], from the worker's heartbeat
    memory: float = 0.0
    alive: bool = True
    ready: bool = True  # its Spark driver has started
    spark_ui: str | None = None  # its driver's Spark UI, if it serves one


@dataclass(frozen=True)
class GraphDemand:
    fqn: str
    complexity: int = 1  # operators: engines and maps
    group: str = DEFAULT_GROUP


def score(worker: WorkerLoad, placed_complexity: float) -> float:
    return CPU_WEIGHT * worker.cpu + MEMORY_WEIGHT * worker.memory + GRAPH_WEIGHT * placed_complexity


def place(graphs: Iterable[GraphDemand], workers: Sequence[WorkerLoad],
          already: Mapping[str, float] | None = None) -> dict[str, str]:
    """Assign each graph a worker URL; ``already``: complexity placed on each worker before these graphs.

    Raises :class:`ExecutionError` for a graph whose compute group has no live worker.
    """
    placed = {w.url: float((already or {}).get(w.url, 0.0)) for w in workers}
    order = {w.url: i for i, w in enumerate(workers)}
    result: dict[str, str] = {}
    for graph in sorted(graphs, key=lambda g: (-g.complexity, g.fqn)):
        eligible = [w for w in workers if w.alive and w.group == graph.group]
        if not eligible:
            groups = sorted({w.group for w in workers if w.alive})
            raise ExecutionError(f"stream graph {graph.fqn}: no live worker in compute group {graph.group!r} "
                                 f"(live workers' groups: {', '.join(groups) or 'none'})")
        best = min(eligible, key=lambda w: (not w.ready, score(w, placed[w.url]), order[w.url]))
        placed[best.url] += graph.complexity
        result[graph.fqn] = best.url
    return result
