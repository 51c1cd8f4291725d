"""Defaults of the streaming loop, with the measurements behind them (``benchmarks/README.md``, latency).

- ``TRIGGER_INTERVAL``: how often Spark runs an idle subgraph's query. An idle query's probe waits for the
  input's next commit, looking every 5 ms for up to one interval (``headwater.spark.fused``), so a commit starts
  a micro-batch within ~5 ms whatever the interval; the interval bounds how long a stop waits for a probe and
  how often an idle query costs Spark a trigger.
- ``DRIVER_BATCH_ROWS``: micro-batches with at most this many input rows run in the driver rather than as
  Spark tasks (:mod:`headwater.spark.fused`). A Spark job costs ~150 ms before its first task; the
  engines process ~0.5-2 M rows/s per core, so below ~75 k rows the driver alone finishes first even
  for heavy engines; 20 k leaves a margin.
"""

from __future__ import annotations

TRIGGER_INTERVAL = "100ms"
DRIVER_BATCH_ROWS = 20_000
