"""Defaults of the streaming loop, with the measurements behind them (``benchmarks/README.md``, latency).

- ``TRIGGER_INTERVAL``: how often each subgraph's query looks for new input. A row waits on average half
  an interval per subgraph before its micro-batch starts; an idle query costs one version probe per
  interval. 100 ms gives a two-subgraph graph p50 ~210 ms append → sink at 10 k rows/s (200 ms: ~380 ms).
- ``DRIVER_BATCH_ROWS``: micro-batches with at most this many input rows run in the driver rather than as
  Spark tasks (:mod:`headwater.spark.fused`). A Spark job costs ~150 ms before its first task; the
  engines process ~0.5-2 M rows/s per core, so below ~75 k rows the driver alone finishes first even
  for heavy engines; 20 k leaves a margin.
"""

from __future__ import annotations

TRIGGER_INTERVAL = "100ms"
DRIVER_BATCH_ROWS = 20_000
