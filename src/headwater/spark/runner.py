"""The relational route: subgraphs with expression maps, which run as Spark columns in the JVM.

(Other subgraphs take the fused route, ``headwater.spark.fused``.) One subgraph = one streaming query::

    readStream(input table versions, with _hw_seq)
      -> foreachBatch(batch_df, batch_id):
           drop NULL partition keys; _hw_task = pmod(hash(key), n); repartition(n, key)
           (Spark's hash partitioning is the same Murmur3 pmod, so Spark partition p holds exactly task p)
           sortWithinPartitions(_hw_task, _hw_seq)           # replay-deterministic order per task
           visit each chain node: engine -> mapInArrow(stage) | expression map -> select (JVM) | fn map -> mapInArrow
           toArrow -> stable sort by _hw_seq -> StreamTable.append(txn=(run id, batch_id)) per output table

Engine state is a snapshot per (engine, task, batch id) beside the query's checkpoint: a
batch loads the newest snapshot older than itself, so a replayed batch starts from exactly
the state the first attempt started from and writes identical rows, which the idempotent
table commit then skips.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from headwater.engines.base import SEQ, EngineSpec
from headwater.plan.logical import EngineNode, MapNode, Node
from headwater.plan.physical import PhysicalGraph, Subgraph
from headwater.runtime.task import SnapshotStore
from headwater.spark.exprs import to_column
from headwater.types import Schema

TASK = "_hw_task"

SPARK_TYPES: dict[str, T.DataType] = {
    "bool": T.BooleanType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "float": T.FloatType(),
    "double": T.DoubleType(),
    "string": T.StringType(),
    "timestamp": T.TimestampNTZType(),
    "date": T.DateType(),
}


def spark_schema(schema: Schema, *, hidden: bool = True) -> T.StructType:
    fields = [T.StructField(n, SPARK_TYPES[t], True) for n, t in schema]
    if hidden:
        fields += [T.StructField(SEQ, T.LongType(), True), T.StructField(TASK, T.IntegerType(), True)]
    return T.StructType(fields)


_PROCESSORS: dict[str, Any] = {}


def _processor(spec_blob: bytes) -> Any:
    """Build each engine's processor once per Python worker (kernels compile once)."""
    key = hashlib.sha1(spec_blob).hexdigest()
    if key not in _PROCESSORS:
        spec: EngineSpec = pickle.loads(spec_blob)
        _PROCESSORS[key] = spec.processor()
    return _PROCESSORS[key]


def engine_stage(spec_blob: bytes, state_root: str, batch_id: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The mapInArrow function running one engine over the tasks of a Spark partition."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        processor = _processor(spec_blob)
        store = SnapshotStore(state_root)
        states: dict[int, Any] = {}
        for rb in batches:
            if rb.num_rows == 0:
                continue
            table = pa.Table.from_batches([rb])
            tasks = table[TASK].to_numpy()
            cuts = np.flatnonzero(np.diff(tasks)) + 1
            for start, end in zip([0, *cuts], [*cuts, len(tasks)], strict=True):
                task = int(tasks[start])
                if task not in states:
                    loaded = store.load(task, batch_id)
                    states[task] = processor.new_state() if loaded is None else loaded
                part = table.slice(start, end - start).drop_columns([TASK])
                states[task], out = processor.process(states[task], part)
                if out.num_rows:
                    out = out.append_column(TASK, pa.array(np.full(out.num_rows, task, dtype=np.int32)))
                    yield from out.to_batches()
        for task, state in states.items():
            store.save(task, batch_id, state)

    return run


def function_map_stage(fn: Callable[..., Any], out_schema: pa.Schema) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """mapInArrow wrapper of a user's pandas function; hidden order columns are carried along."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for rb in batches:
            if rb.num_rows == 0:
                continue
            table = pa.Table.from_batches([rb])
            seq, task = table[SEQ].to_numpy(), table[TASK].to_numpy()
            result = fn(table.drop_columns([SEQ, TASK]).to_pandas())
            out = pa.Table.from_pandas(result, preserve_index=False)
            n = out.num_rows
            # same row count: a row-wise transform keeps each row's order key; otherwise rows share the batch's first
            out_seq = seq if n == len(seq) else np.full(n, seq[0], dtype=np.int64)
            out_task = task if n == len(task) else np.full(n, task[0], dtype=np.int32)
            out = out.select(out_schema.names[:-2]).cast(pa.schema(list(out_schema)[:-2]))
            out = out.append_column(SEQ, pa.array(out_seq, pa.int64())).append_column(TASK, pa.array(out_task, pa.int32()))
            yield from out.to_batches()

    return run


# -- the visitor over a subgraph's chain ----------------------------------------------------------------
UNSUPPORTED: dict[type, str] = {}


class ChainCompiler:
    """Visits the compute nodes of a subgraph in order, each a DataFrame -> DataFrame step."""

    def __init__(self, state_root: Path, batch_id: int) -> None:
        self.state_root = state_root
        self.batch_id = batch_id

    def visit(self, node: Node, df: DataFrame) -> DataFrame:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is None:
            raise NotImplementedError(UNSUPPORTED.get(type(node), f"no Spark lowering for {type(node).__name__}"))
        return method(node, df)

    def visit_EngineNode(self, node: EngineNode, df: DataFrame) -> DataFrame:
        assert node.spec is not None
        stage = engine_stage(pickle.dumps(node.spec), str(self.state_root / node.name), self.batch_id)
        return df.mapInArrow(stage, spark_schema(node.schema))

    def visit_MapNode(self, node: MapNode, df: DataFrame) -> DataFrame:
        if node.filter is not None:
            df = df.where(to_column(node.filter))
        if node.fn is not None:
            return df.mapInArrow(function_map_stage(node.fn, _arrow_with_hidden(node.schema)), spark_schema(node.schema))
        cols = [to_column(e).cast(SPARK_TYPES[t]).alias(n) for (n, e), (_, t) in zip(node.exprs, node.schema, strict=True)]
        return df.select(*cols, F.col(SEQ), F.col(TASK))


def _arrow_with_hidden(schema: Schema) -> pa.Schema:
    return schema.to_arrow().append(pa.field(SEQ, pa.int64())).append(pa.field(TASK, pa.int32()))


def partition_for(df: DataFrame, subgraph: Subgraph) -> DataFrame:
    """Hash rows into the subgraph's tasks (Orca: rows with a NULL partition key are dropped)."""
    par = subgraph.parallelism
    if par is None:
        return df.withColumn(TASK, F.lit(0).cast("int")).repartition(1).sortWithinPartitions(SEQ)
    key = F.col(par.key)
    df = df.where(key.isNotNull()).withColumn(TASK, F.pmod(F.hash(key), F.lit(par.count)).cast("int"))
    return df.repartition(par.count, key).sortWithinPartitions(TASK, SEQ)


def start_subgraph(
    spark: SparkSession,
    physical: PhysicalGraph,
    subgraph: Subgraph,
    table_paths: dict[int, str],
    checkpoint_root: Path,
    *,
    app_id: str,
    trigger_interval: timedelta,
    on_batch: Callable[[int, int], None] | None = None,
) -> Any:
    """Start the streaming query of one subgraph; returns the StreamingQuery."""
    from headwater.storage.stream_table import StreamTable

    input_path = table_paths[subgraph.input]
    outputs = [(table_paths[o], physical.nodes[o].schema) for o in subgraph.outputs]
    chain = [physical.nodes[n] for n in subgraph.chain]
    ckpt = checkpoint_root / f"subgraph_{subgraph.id}"
    state_root = ckpt / "state"

    def process_batch(batch_df: DataFrame, batch_id: int) -> None:
        df = partition_for(batch_df, subgraph)
        compiler = ChainCompiler(state_root, batch_id)
        for node in chain:
            df = compiler.visit(node, df)
        result = df.toArrow()
        if result.num_rows:
            order = pa.compute.sort_indices(result, sort_keys=[(SEQ, "ascending")])  # stable
            result = result.take(order)
        if result.num_rows:  # an empty batch writes nothing: its replay is empty too
            for path, schema in outputs:
                rows = result.select(list(schema.names)).cast(schema.to_arrow())
                StreamTable.open(path).append(rows, txn=(app_id, batch_id))
        if on_batch is not None:
            on_batch(batch_id, result.num_rows)

    in_schema = physical.nodes[subgraph.input].schema
    read_schema = T.StructType([*spark_schema(in_schema, hidden=False).fields, T.StructField(SEQ, T.LongType(), True)])
    source = spark.readStream.format("headwater_stream_table").schema(read_schema).option("path", input_path).load()
    return (
        source.writeStream.foreachBatch(process_batch)
        .option("checkpointLocation", str(ckpt / "spark"))
        .queryName(f"{physical.fqn}/subgraph_{subgraph.id}")
        .trigger(processingTime=f"{max(int(trigger_interval.total_seconds() * 1000), 1)} milliseconds")
        .start()
    )
