"""The master's Prometheus metrics, read when scraped from the same places as the API's monitoring calls, so
the two agree: each graph's status, each task's lag (``task_subscription_meta``), each engine's state
(``stream_engine_stat``), restarts, SQL queries and their cancellations, workers alive; and the rows its
graphs' micro-batches read and wrote (their job records). A worker's own: :mod:`headwater.runtime.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from headwater.runtime.master import Master
from headwater.runtime.metrics import worker_metrics


class MasterCollector(Collector):
    """The master's metrics, read at each scrape."""

    def __init__(self, master: Master) -> None:
        self.master = master

    def collect(self) -> Iterator[Metric]:
        master = self.master
        status = GaugeMetricFamily("headwater_graph_status", "1 for each graph's current status",
                                   labels=["graph", "status"])
        restarts = CounterMetricFamily("headwater_graph_restarts", "Restarts from the checkpoints after a failure "
                                       "(since this master started)", labels=["graph"])
        graphs = [r for r in master.store.list_graphs() if r.status != "destroyed"]
        for rec in graphs:
            status.add_metric([rec.fqn, str(rec.status)], 1)
            restarts.add_metric([rec.fqn], master.supervisor.restarts.get(rec.fqn, 0))
        yield status
        yield restarts

        pending_versions = GaugeMetricFamily("headwater_task_pending_versions", "Input versions committed upstream "
                                             "and not yet processed", labels=["graph", "task", "table"])
        pending_rows = GaugeMetricFamily("headwater_task_pending_rows", "Input rows committed upstream and not yet "
                                         "processed", labels=["graph", "task", "table"])
        age = GaugeMetricFamily("headwater_task_last_batch_age_seconds", "Seconds since the newest committed "
                                "micro-batch (the checkpoint's age)", labels=["graph", "task"])
        for row in _quiet(lambda: master.task_subscription_meta(None)):
            labels = [row["graph"], row["task_id"], row["table_name"]]
            pending_versions.add_metric(labels, row["pending_versions"])
            pending_rows.add_metric(labels, row["pending_rows"])
            if row["last_batch_age_s"] is not None:
                age.add_metric(labels[:2], row["last_batch_age_s"])
        yield pending_versions
        yield pending_rows
        yield age

        state = GaugeMetricFamily("headwater_engine_state_bytes", "Size of the newest state snapshot",
                                  labels=["graph", "task", "engine"])
        keys = GaugeMetricFamily("headwater_engine_keys", "Keys (groups) in the engine's state",
                                 labels=["graph", "task", "engine"])
        late = GaugeMetricFamily("headwater_engine_late_rows", "Rows dropped as late or out of order (total)",
                                 labels=["graph", "task", "engine"])
        for rec in graphs:
            for row in _quiet(lambda fqn=rec.fqn: master.engine_meta(fqn)):
                labels = [rec.fqn, row["task_id"], row["name"]]
                for family, value in ((state, row["state_bytes"]), (keys, row["keys"]), (late, row["late_rows"])):
                    if value is not None:
                        family.add_metric(labels, value)
        yield state
        yield keys
        yield late

        sql = CounterMetricFamily("headwater_sql_queries", "SQL queries run, by outcome", labels=["outcome"])
        for outcome, n in sorted(master.sql_outcomes.items()):
            sql.add_metric([outcome], n)
        yield sql
        workers = GaugeMetricFamily("headwater_workers_alive", "Workers answering their heartbeats")
        workers.add_metric([], sum(1 for w in master.workers() if w["alive"]))
        yield workers


def _quiet(rows: Any) -> list[dict[str, Any]]:
    """``rows()``, or nothing if the graph went away meanwhile (a scrape never fails for one graph)."""
    from headwater.errors import HeadwaterError

    try:
        return list(rows())
    except (HeadwaterError, OSError):
        return []


def master_metrics(master: Master) -> bytes:
    """The master's metrics, and its in-process worker's when it has one (a worker process serves its own)."""
    registry = CollectorRegistry()
    registry.register(MasterCollector(master))
    return generate_latest(registry) + (worker_metrics() if master.worker.stops_with_master else b"")
