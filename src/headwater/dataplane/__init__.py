"""The data plane: what a stream task does with one micro-batch, free of Spark.

``task`` (read → maps → partition by the key hash of ``headwater.storage.buckets`` → engines → write →
commit), ``maps`` (the one expression evaluator applied to a batch), ``snapshots`` (engine state per input
version), ``jobs`` (a record per micro-batch), ``engine_stats``, ``fence`` (the placement epoch check),
``files`` (files written whole or not at all). Two drivers run it: Spark (``headwater.spark.fused``) and this
process (``local``, ``StreamGraph.run_local``).
"""
