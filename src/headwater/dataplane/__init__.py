"""The data plane: what a stream task does with one micro-batch, free of Spark.

``task`` (read → maps → partition → engines → write → commit), ``maps`` (the one expression
evaluator applied to a batch), ``partition`` (key hash → task), ``snapshots`` (engine state per input
version). Two drivers run it: Spark (``headwater.spark.fused``) and this process (``local``,
``StreamGraph.run_local``).
"""
