"""Prometheus metrics (``GET /metrics``) of the master and the workers, with ``prometheus_client``.

A worker counts what its queries do as they do it: micro-batches, their duration (a histogram), rows in and
out, per graph and subgraph (:func:`observe_batch`, called once per committed micro-batch). The master's are
read when scraped (:class:`MasterCollector`) from the same places as the API's monitoring calls, so the two
agree: each graph's status, each task's lag (``task_subscription_meta``), each engine's state
(``stream_engine_stat``), restarts, SQL queries and their cancellations, workers alive.

Scraping needs ``Authorization: Bearer <token>``: on the master an admin's token or the metrics token, on a
worker the metrics token (``HEADWATER_METRICS_TOKEN``; without it a worker's ``/metrics`` is refused).
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from headwater.runtime.master import Master

TOKEN_ENV = "HEADWATER_METRICS_TOKEN"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

WORKER_REGISTRY = CollectorRegistry()  # a worker process's own (its graphs' batches)
_BATCHES = Counter("headwater_batches", "Micro-batches committed", ["graph", "subgraph"], registry=WORKER_REGISTRY)
_ROWS_IN = Counter("headwater_rows_in", "Rows read by committed micro-batches", ["graph", "subgraph"],
                   registry=WORKER_REGISTRY)
_ROWS_OUT = Counter("headwater_rows_out", "Rows written by committed micro-batches", ["graph", "subgraph"],
                    registry=WORKER_REGISTRY)
_DURATION = Histogram("headwater_batch_duration_seconds", "Duration of a micro-batch, read to commit",
                      ["graph", "subgraph"], registry=WORKER_REGISTRY,
                      buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0))


def observe_batch(graph: str, subgraph: int, rows_in: int, rows_out: int, seconds: float) -> None:
    labels = (graph, str(subgraph))
    _BATCHES.labels(*labels).inc()
    _ROWS_IN.labels(*labels).inc(rows_in)
    _ROWS_OUT.labels(*labels).inc(rows_out)
    _DURATION.labels(*labels).observe(seconds)


def metrics_token() -> str | None:
    return os.environ.get(TOKEN_ENV) or None


def is_metrics_token(token: str) -> bool:
    expected = metrics_token()
    return expected is not None and hmac.compare_digest(token.encode(), expected.encode())


def worker_metrics() -> bytes:
    return generate_latest(WORKER_REGISTRY)


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
