"""Listings a non-admin makes without naming a graph: made graph by visible graph, never filtered by a column
their rows do not have (a regression: ``task_subscription_meta()`` and ``checkpoint_jobs()`` answered 500)."""

from __future__ import annotations

from types import SimpleNamespace

from headwater.runtime.access import AccessControl
from headwater.runtime.gateway import Gateway
from headwater.service.auth import Authenticator
from headwater.storage.metadata import MetadataStore


class TwoGraphs:
    """A master with two running graphs, whose per-graph listings name the graph in a column of their own."""

    def __init__(self, store: MetadataStore) -> None:
        graphs = ("demo.stream_graph.mine", "other.stream_graph.theirs")
        self.store = SimpleNamespace(list_graphs=lambda: [SimpleNamespace(fqn=g, status="running") for g in graphs])
        self.asked: list[str] = []

    def task_subscription_meta(self, fqn):
        self.asked.append(str(fqn))
        return [{"graph": str(fqn), "task_id": "0.0", "pending_rows": 1}]

    def checkpoint_jobs(self, fqn):
        self.asked.append(str(fqn))
        return [{"job_id": 1, "checkpoint_id": 0}]


def test_a_non_admin_lists_the_lag_and_jobs_of_the_graphs_it_may_see(tmp_path):
    store = MetadataStore.in_directory(tmp_path)
    Authenticator(store).add_user("alice", "alice-pw")
    access = AccessControl(store)
    access.grant("admin", "alice", "graph_control", "demo")
    master = TwoGraphs(store)
    alice = Gateway(master, access, "alice")  # type: ignore[arg-type]
    assert alice.task_subscription_meta(None) == [{"graph": "demo.stream_graph.mine", "task_id": "0.0",
                                                  "pending_rows": 1}]
    assert alice.checkpoint_jobs(None) == [{"job_id": 1, "checkpoint_id": 0}]
    assert master.asked == ["demo.stream_graph.mine"] * 2
    store.dispose()
