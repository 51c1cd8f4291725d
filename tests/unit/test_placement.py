"""Placement on synthetic clusters (no processes): the compute-group rule is never broken, dead workers get
nothing, and idle workers of a group end balanced within the largest graph's complexity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.service.placement import GRAPH_WEIGHT, GraphDemand, WorkerLoad, place, score

GROUPS = ("analytics", "risk")


def cluster(seed: int, n_workers: int = 10, n_graphs: int = 50, dead: int = 2):
    rng = np.random.default_rng(seed)
    workers = [WorkerLoad(f"http://w{i}", group=GROUPS[i % 2], alive=i >= dead) for i in range(n_workers)]
    graphs = [GraphDemand(f"demo.stream_graph.g{j}", int(rng.integers(1, 9)), GROUPS[j % 2]) for j in range(n_graphs)]
    return workers, graphs


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_ten_workers_fifty_graphs_groups_kept_dead_skipped_and_balanced(seed):
    workers, graphs = cluster(seed)
    result = place(graphs, workers)
    by_url = {w.url: w for w in workers}
    assert set(result) == {g.fqn for g in graphs}
    for g in graphs:
        w = by_url[result[g.fqn]]
        assert w.alive and w.group == g.group  # never outside its compute group, never on a dead worker
    for group in GROUPS:
        live = [w.url for w in workers if w.alive and w.group == group]
        load = {url: 0 for url in live}
        for g in graphs:
            if g.group == group:
                load[result[g.fqn]] += g.complexity
        biggest = max(g.complexity for g in graphs if g.group == group)
        assert max(load.values()) - min(load.values()) <= biggest, load  # the stated tolerance


def test_busier_workers_get_less():
    idle, busy = WorkerLoad("http://idle"), WorkerLoad("http://busy", cpu=0.9, memory=0.8)
    result = place([GraphDemand(f"g{i}", 2) for i in range(6)], [busy, idle])
    assert sum(url == "http://idle" for url in result.values()) > sum(url == "http://busy" for url in result.values())
    # the busy worker's head start is 0.6*0.9 + 0.4*0.8 = 0.86, i.e. about 8.6 operators of graphs
    assert score(busy, 0) == pytest.approx(0.86) and GRAPH_WEIGHT == 0.1


def test_graphs_already_placed_count():
    workers = [WorkerLoad("http://a"), WorkerLoad("http://b")]
    assert place([GraphDemand("g", 1)], workers, already={"http://a": 5}) == {"g": "http://b"}


def test_a_group_without_a_live_worker_is_a_clear_error():
    workers = [WorkerLoad("http://a", group="analytics", alive=False), WorkerLoad("http://b", group="risk")]
    with pytest.raises(hw.ExecutionError, match=r"no live worker in compute group 'analytics'.*risk"):
        place([GraphDemand("demo.stream_graph.g", 1, "analytics")], workers)


def test_placement_is_deterministic():
    workers, graphs = cluster(7)
    assert place(graphs, workers) == place(list(reversed(graphs)), workers)


def test_a_worker_still_starting_spark_is_chosen_only_when_no_ready_one_is_eligible():
    starting, busy = WorkerLoad("http://starting", ready=False), WorkerLoad("http://busy", cpu=0.9, memory=0.9)
    assert place([GraphDemand("g", 1)], [starting, busy]) == {"g": "http://busy"}
    gone = WorkerLoad("http://busy", alive=False)
    assert place([GraphDemand("g", 1)], [starting, gone]) == {"g": "http://starting"}
