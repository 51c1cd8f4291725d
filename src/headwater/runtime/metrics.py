"""Prometheus metrics (``GET /metrics``) of the workers, with ``prometheus_client``, and the scrape token.

A worker counts what its queries do as they do it: micro-batches, their duration (a histogram), rows in and
out, per graph and subgraph (:func:`observe_batch`, called once per committed micro-batch). The master's are
read when scraped (:mod:`headwater.runtime.master_metrics`).

Scraping needs ``Authorization: Bearer <token>``: on the master an admin's token or the metrics token, on a
worker the metrics token (``HEADWATER_METRICS_TOKEN``; without it a worker's ``/metrics`` is refused).
"""

from __future__ import annotations

import hmac
import os

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

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
