"""What every engine family of ``bench_engines.py`` shares: the clock's origin, row generators, the
``Workload`` (input appends and the pandas reference) and the ``Family`` record."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

CATALOG = "bench"
T0 = pd.Timestamp("2026-11-20 09:30:00")
FLUSH = T0 + pd.Timedelta(days=2)  # the flush rows' time: after every generated row
TOLERANCE = 1e-9
TRIGGER = "100 milliseconds"  # Headwater's default trigger interval, for the PySpark queries too
WARM_ROWS = 50_000  # per warm-up table: above driver_batch_rows (20,000), so the warm-up runs as Spark tasks
TICKS = {"time": "timestamp", "sym": "string", "price": "double", "volume": "long"}
TRADES = {"time": "timestamp", "sym": "string", "price": "double", "qty": "long"}
QUOTES = {"time": "timestamp", "sym": "string", "bid": "double", "ask": "double"}
DDL = {"string": "string", "double": "double", "long": "bigint", "timestamp": "timestamp", "date": "date",
       "bool": "boolean", "double[]": "array<double>"}
ARROW = {"string": pa.string(), "double": pa.float64(), "long": pa.int64(), "timestamp": pa.timestamp("us"),
         "date": pa.date32(), "bool": pa.bool_(), "double[]": pa.list_(pa.float64())}


# -- workloads ------------------------------------------------------------------------------------------
@dataclass
class Workload:
    """One family's input: appends in order (table, rows), the last ones the flush rows (where needed)."""

    schemas: dict[str, dict[str, str]]
    appends: list[tuple[str, pa.Table]]
    rows: int  # input rows counted for throughput: all tables, flush rows excluded
    reference: pd.DataFrame  # the expected output, from pandas, before the flush time
    params: dict[str, Any] = field(default_factory=dict)
    # tables loaded before the clock: appended to the source and caught up (Headwater), a static Parquet table
    # read by spark.read (PySpark); constant during the timed run
    preload: dict[str, pa.Table] = field(default_factory=dict)


def names(prefix: str, n: int) -> np.ndarray:
    return np.array([f"{prefix}{i:04d}" for i in range(n)], dtype=object)


def rising_times(rng: np.random.Generator, n: int, span_us: int) -> np.ndarray:
    """``n`` strictly increasing random offsets (µs) in ``[0, span_us)``: unique times per table."""
    return np.sort(rng.integers(0, span_us - n, n)) + np.arange(n)


def arrow(schema: dict[str, str], columns: dict[str, np.ndarray]) -> pa.Table:
    """An Arrow table of ``schema``; timestamp columns given as integer µs after T0."""
    out = {}
    for name, kind in schema.items():
        values = columns[name]
        if kind == "timestamp":
            values = np.datetime64(T0, "us") + values.astype("timedelta64[us]")
        out[name] = pa.array(values, type=ARROW[kind])
    return pa.table(out)


def pandas_of(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas()


def chunks(table: pa.Table, size: int) -> list[pa.Table]:
    return [table.slice(i, size) for i in range(0, table.num_rows, size)]


def flush_rows(schema: dict[str, str], keys: np.ndarray, key: str) -> pa.Table:
    """One row per key at FLUSH (values 0): closes every key's windows and settles its joins."""
    n, at = len(keys), (FLUSH - T0) // pd.Timedelta("1us")
    return arrow(schema, {name: keys if name == key else np.full(n, at) if kind == "timestamp"
                          else np.zeros(n, dtype=np.int64 if kind == "long" else np.float64)
                          for name, kind in schema.items()})


def interleave(tables: dict[str, pa.Table], n_slices: int, span_us: int) -> list[tuple[str, pa.Table]]:
    """Appends in time slices: each slice's rows of every table, in the dict's order (time order per table)."""
    edges = (T0 + pd.to_timedelta(np.linspace(0, span_us, n_slices + 1).astype(np.int64), unit="us"))
    edges = edges.to_numpy("datetime64[us]")
    out = []
    cuts = {name: np.searchsorted(t["time"].to_numpy(), edges) for name, t in tables.items()}
    cuts = {name: np.append(c[:-1], tables[name].num_rows) for name, c in cuts.items()}
    for i in range(n_slices):
        for name, t in tables.items():
            a, b = cuts[name][i], cuts[name][i + 1]
            if b > a:
                out.append((name, t.slice(a, b - a)))
    return out



@dataclass(frozen=True)
class Family:
    name: str
    short: str  # prefix of its graph's table names
    what: str
    baseline: str
    target: float | None  # input rows/s end to end, or None
    keys: tuple[str, ...]  # identify an output row
    workload: Callable[[argparse.Namespace, bool], Workload]
    graph: Callable[[Any, str, Workload, int], None]
    spark: Callable[[Any, dict[str, Any], Path, Path, Workload], tuple[list, Callable]]
    # per source and trigger; joins: 1, a time slice per micro-batch (all files at once ran a 4 GB driver out
    # of memory in the as-of join's aggregation); cross-sectional: 1, a micro-batch is then one append
    max_files_per_trigger: int | None = None


def parquet_sink(df: Any, out: Path, ck: Path) -> Any:
    return (df.writeStream.format("parquet").outputMode("append").option("path", str(out))
            .option("checkpointLocation", str(ck)).trigger(processingTime=TRIGGER).start())


# -- what the PySpark jobs share --------------------------------------------------------------------------
def ddl(schema: dict[str, str]) -> str:
    return ", ".join(f"{name} {DDL[kind]}" for name, kind in schema.items())


def read_parquet_dir(path: Path) -> pd.DataFrame:
    files = sorted(path.glob("*.parquet"))
    if not files:
        return pd.DataFrame()
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pandas()


