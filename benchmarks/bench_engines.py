"""Benchmark: each engine family, Headwater against the same job hand-written in PySpark, in one run.

Every family runs the same generated rows through three implementations and checks that their outputs
agree before any number is printed:

- **headwater**: source table(s) -> the engine -> sink, embedded (``hw.connect(tmp)``) on Spark. A
  throw-away graph with the same engine first runs a batch larger than ``driver_batch_rows`` as Spark
  tasks (it loads the kernels in Spark's Python workers); then the timed graph is submitted and its
  first, empty trigger done. The clock runs from the first ``session.append`` of the prepared Arrow
  chunks to ``wait_until_caught_up`` returning.
- **pyspark**: the same job as a hand-written Structured Streaming query on the same SparkSession: a
  Parquet file source (one file per append, written and renamed into the directory inside the clock),
  Spark's own window / session-window aggregation, stream-stream join with watermarks or stream-static
  join (with a table the workload preloads, read by ``spark.read``), Parquet (or ``foreachBatch``) sink.
  The same job first runs once on the warm-up rows; the clock runs from writing the first file to
  ``processAllAvailable`` returning. For the as-of join, which Spark has no streaming operator for, also
  a batch ``cogroup().applyInPandas(pd.merge_asof)`` (Spark's documented as-of recipe), timed from
  writing the same files to its output written.
- **pandas**: a single-process reference of the same result (``groupby``, ``merge_asof``, ``merge``).

A workload's preloaded tables (reference data) are loaded before either clock: appended to their Headwater
source and processed, written as the PySpark job's static table.

Windows and joins that wait for later rows close per key in Headwater and on Spark's global watermark
in PySpark. The last append of each workload is a *flush*: one row per key two days after the data,
which closes every window/session and settles every join in both; results at or after the flush time
are left out of the comparison.

Run::

    .venv/bin/python benchmarks/bench_engines.py [--family time_series ...] [--quick]

Writes ``benchmarks/results/engines.json``; see ``benchmarks/README.md`` for what each baseline is.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the engine_families package beside this script
from engine_families import alerts, calendars, cross, joins, keyed_joins, order_book, pricing, time_windows
from engine_families.common import FLUSH, TOLERANCE, Family, Workload, ddl
from engine_families.joins import asof_spark_batch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "engines.json"
CATALOG = "bench"
# each: FAMILIES, add_arguments(parser), QUICK (smoke-run sizes)
MODULES = (time_windows, calendars, cross, joins, keyed_joins, alerts, pricing, order_book)
FAMILIES = {f.name: f for module in MODULES for f in module.FAMILIES}


# -- headwater --------------------------------------------------------------------------------------------
def read_table(session: Any, name: str) -> pd.DataFrame:
    # delta-rs, not Spark SQL: large results would go through the driver JVM
    from headwater.storage.stream_table import StreamTable

    return StreamTable.open(session.stream_table_meta(name)["path"].iloc[0]).to_arrow().to_pandas()


def stage_split(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per subgraph: micro-batches, input rows and task seconds by stage between two ``progress`` calls."""
    out = {}
    for sg, a in after.items():
        b = before.get(sg, {})
        secs = {k: round(v - b.get("task_seconds", {}).get(k, 0.0), 3) for k, v in a["task_seconds"].items()}
        out[sg] = {"batches": (a["last_batch"] or 0) - (b.get("last_batch") or 0),
                   "rows_in": a["rows_in"] - b.get("rows_in", 0), "task_seconds": secs}
    return out


def run_headwater(session: Any, fam: Family, w: Workload, warm: Workload | None,
                  args: argparse.Namespace) -> tuple[dict[str, Any], pd.DataFrame]:
    short = fam.short
    if warm is not None:  # a throw-away graph runs this engine's first Spark-task batches, untimed
        wg = session.stream_graph(f"{short}_warm")
        fam.graph(wg, f"{short}_w_", warm, args.tasks)
        wg.submit()
        preload(session, f"{short}_w_", f"{short}_warm", warm, args.timeout)
        for table, rows in warm.appends:
            session.append(f"{short}_w_{table}", rows)
        session.wait_until_caught_up(f"{short}_warm", timeout=args.timeout)
        session.drop_stream_graph(f"{short}_warm", include_tables=True)
    g = session.stream_graph(fam.name)
    fam.graph(g, f"{short}_", w, args.tasks)
    t0 = time.perf_counter()
    g.submit()
    session.wait_until_caught_up(fam.name, timeout=args.timeout)  # the first, empty trigger: not timed
    preload(session, f"{short}_", fam.name, w, args.timeout)  # caught up: the engine holds it before the clock
    startup = time.perf_counter() - t0
    before = session.progress(fam.name)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    for table, rows in w.appends:
        session.append(f"{short}_{table}", rows)
    appended = time.perf_counter()
    session.wait_until_caught_up(fam.name, timeout=args.timeout)
    end = time.perf_counter()
    split = stage_split(before, session.progress(fam.name))
    out = read_table(session, f"{short}_out")
    session.drop_stream_graph(fam.name, include_tables=True)
    return {"seconds": end - start, "append_seconds": appended - start, "wait_seconds": end - appended,
            "appends": len(w.appends), "startup_seconds": startup, "loadavg_1m_before": load,
            "loadavg_1m_after": os.getloadavg()[0], "subgraphs": split}, out


def preload(session: Any, prefix: str, graph: str, w: Workload, timeout: float) -> None:
    """Append the workload's preloaded tables and wait until the graph has processed them."""
    if w.preload:
        for table, rows in w.preload.items():
            session.append(f"{prefix}{table}", rows)
        session.wait_until_caught_up(graph, timeout=timeout)


# -- hand-written PySpark -----------------------------------------------------------------------------------
def write_file(rows: pa.Table, staging: Path, target: Path) -> None:
    """One append as one Parquet file, renamed into the source directory (a file source must never see a
    half-written file). Times as UTC timestamps, which Spark reads as TIMESTAMP (a watermark needs one)."""
    i = rows.schema.get_field_index("time")
    if i >= 0:
        rows = rows.set_column(i, "time", rows["time"].cast(pa.timestamp("us", tz="UTC")))
    pq.write_table(rows, staging)
    os.rename(staging, target)


def query_phases(queries: list[Any], since: dict[str, int]) -> dict[str, Any]:
    """Per query: micro-batches and Spark's ``durationMs`` phases summed over the batches after ``since``
    (idle triggers report the next batch's id without running it: they have no ``addBatch``)."""
    out = {}
    for i, q in enumerate(queries):
        progress = [p for p in q.recentProgress
                    if p.batchId > since.get(str(i), -1) and "addBatch" in (p.durationMs or {})]
        phases: dict[str, float] = {}
        for p in progress:
            for k, v in (p.durationMs or {}).items():
                phases[k] = phases.get(k, 0.0) + v / 1000
        out[str(i)] = {"batches": len(progress), "input_rows": sum(p.numInputRows for p in progress),
                       "seconds_by_phase": {k: round(v, 3) for k, v in sorted(phases.items())},
                       "last_batch": max((p.batchId for p in progress), default=since.get(str(i), -1))}
    return out


def run_spark_job(spark: Any, fam: Family, w: Workload, root: Path, timeout: float) -> tuple[dict[str, Any],
                                                                                              pd.DataFrame]:
    """Start the family's queries on empty source directories (and static tables of the preloaded rows),
    then time: write every append as a file, wait until the queries have processed all of them."""
    root.mkdir(parents=True)
    dirs = {table: root / "in" / table for table in w.schemas}
    for d in dirs.values():
        d.mkdir(parents=True)
    (root / "staging").mkdir()
    inputs = {}
    for table, schema in w.schemas.items():
        reader = spark.readStream.schema(ddl(schema))
        if fam.max_files_per_trigger:
            reader = reader.option("maxFilesPerTrigger", fam.max_files_per_trigger)
        inputs[table] = reader.parquet(str(dirs[table]))
    for table, rows in w.preload.items():  # static tables: read by spark.read, joined stream-static
        (root / "static" / table).mkdir(parents=True)
        write_file(rows, root / "staging" / f"{table}.parquet", root / "static" / table / "part-0.parquet")
        inputs[table] = spark.read.parquet(str(root / "static" / table))
    t0 = time.perf_counter()
    queries, read = fam.spark(spark, inputs, root / "out", root / "checkpoint", w)
    try:
        for q in queries:
            q.processAllAvailable()
        startup = time.perf_counter() - t0
        since = {k: v["last_batch"] for k, v in query_phases(queries, {}).items()}
        load = os.getloadavg()[0]
        start = time.perf_counter()
        for i, (table, rows) in enumerate(w.appends):
            write_file(rows, root / "staging" / f"{i:05d}.parquet", dirs[table] / f"part-{i:05d}.parquet")
        appended = time.perf_counter()
        deadline = time.monotonic() + timeout
        for q in queries:
            q.processAllAvailable()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{fam.name}: the PySpark job did not finish within {timeout:.0f}s")
        end = time.perf_counter()
    finally:
        for q in queries:
            q.stop()
    phases = query_phases(queries, since)  # after stop: the last batch's progress is in
    return {"seconds": end - start, "append_seconds": appended - start, "wait_seconds": end - appended,
            "files": len(w.appends), "startup_seconds": startup, "loadavg_1m_before": load,
            "loadavg_1m_after": os.getloadavg()[0], "queries": phases}, read()


def run_asof_batch(spark: Any, w: Workload, root: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """Timed: write the appends as files (as the streaming job does), then one batch job over all of them."""
    dirs = {table: root / "in" / table for table in w.schemas}
    for d in dirs.values():
        d.mkdir(parents=True)
    (root / "staging").mkdir()
    load = os.getloadavg()[0]
    start = time.perf_counter()
    for i, (table, rows) in enumerate(w.appends):
        write_file(rows, root / "staging" / f"{i:05d}.parquet", dirs[table] / f"part-{i:05d}.parquet")
    written = time.perf_counter()
    out = asof_spark_batch(spark, dirs, root / "out")
    end = time.perf_counter()
    return {"seconds": end - start, "append_seconds": written - start, "loadavg_1m_before": load,
            "loadavg_1m_after": os.getloadavg()[0]}, out


def run_baselines(spark: Any, fam: Family, w: Workload, warm: Workload | None, root: Path,
                  args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, pd.DataFrame]]:
    if warm is not None:  # the same job once on the warm-up rows: Spark's code generation, Python workers
        run_spark_job(spark, fam, warm, root / "warm", args.timeout)
    result, out = run_spark_job(spark, fam, w, root / "timed", args.timeout)
    runs, outputs = {"pyspark": result}, {"pyspark": out}
    if fam.name == "asof_join":  # Spark's batch as-of recipe on the same appends, also warmed up first
        if warm is not None:
            run_asof_batch(spark, warm, root / "batch-warm")
        runs["pyspark_batch"], outputs["pyspark_batch"] = run_asof_batch(spark, w, root / "batch")
    return runs, outputs


# -- checks ------------------------------------------------------------------------------------------------
def normalise(df: pd.DataFrame, columns: list[str], keys: list[str]) -> pd.DataFrame:
    out = df[columns].copy()
    for c in columns:
        if pd.api.types.is_datetime64_any_dtype(out[c]):
            col = out[c]
            if col.dt.tz is not None:  # Spark's Parquet: UTC timestamps
                col = col.dt.tz_convert("UTC").dt.tz_localize(None)
            out[c] = col.astype("datetime64[ns]")
        elif out[c].dtype == object:  # text; array vectors (lists, or arrays from Parquet) as lists of floats
            out[c] = [str([float(x) for x in v]) if isinstance(v, list | np.ndarray) else str(v) for v in out[c]]
    return out.sort_values(keys, kind="stable").reset_index(drop=True)


def compare(name: str, got: pd.DataFrame, want: pd.DataFrame, keys: list[str]) -> dict[str, Any]:
    """Same rows (by ``keys``), no duplicates, every value within 1e-9 (relative and absolute), NULL where
    NULL; raises AssertionError naming the first difference. Rows at or after the flush time are dropped."""
    columns = list(want.columns)
    if len(got) == 0:
        got = want.iloc[:0]
    lacking = [c for c in columns if c not in got.columns]
    if lacking:
        raise AssertionError(f"{name}: columns {lacking} missing (got {list(got.columns)})")
    g, w = normalise(got, columns, keys), normalise(want, columns, keys)
    g = g[g["time"] < FLUSH].reset_index(drop=True)
    if len(g) != len(w):
        raise AssertionError(f"{name}: {len(g)} rows, expected {len(w)}")
    if g.duplicated(keys).any():
        raise AssertionError(f"{name}: duplicated {keys} rows")
    for k in keys:
        if not g[k].equals(w[k]):
            i = int(np.flatnonzero(g[k].to_numpy() != w[k].to_numpy())[0])
            raise AssertionError(f"{name}: key column {k} differs at row {i}: {g[k].iloc[i]!r} vs {w[k].iloc[i]!r}")
    worst = 0.0
    for c in columns:
        if c in keys:
            continue
        if w[c].dtype == object or pd.api.types.is_datetime64_any_dtype(w[c]):
            if not g[c].equals(w[c]):
                raise AssertionError(f"{name}: column {c} differs")
            continue
        a, b = g[c].to_numpy(dtype=float), w[c].to_numpy(dtype=float)
        ok = np.isclose(a, b, rtol=TOLERANCE, atol=TOLERANCE, equal_nan=True)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise AssertionError(f"{name}: column {c} differs at {g.loc[i, keys].to_dict()}: {a[i]!r} vs {b[i]!r} "
                                 f"({int((~ok).sum())} rows differ)")
        both = ~(np.isnan(a) | np.isnan(b))
        if both.any():
            worst = max(worst, float(np.max(np.abs(a[both] - b[both]))))
    return {"rows": len(g), "max_abs_diff": worst, "passed": True}



# -- report -----------------------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    import pyspark

    import headwater

    return {"nproc": os.cpu_count(), "cpu": model, "platform": platform.platform(),
            "python": platform.python_version(), "pyspark": pyspark.__version__, "pandas": pd.__version__,
            "pyarrow": pa.__version__, "headwater_path": str(Path(headwater.__file__).parent),
            "loadavg_at_start": list(os.getloadavg())}


def table(results: dict[str, Any]) -> str:
    wide = max([16, *(len(name) + 2 for name in results)])
    head = f"{'family':<{wide}}{'baseline':<15}{'headwater rows/s':>18}{'baseline rows/s':>17}{'ratio':>8}" \
           f"{'target':>10}{'load':>6}  met?"
    lines = [head]
    for name, r in results.items():
        target = r["target_rows_per_s"]
        for base, rate in r["rows_per_s"]["baselines"].items():
            ratio, met = r["ratio"][base], r["met"][base]
            lines.append(f"{name:<{wide}}{base:<15}{r['rows_per_s']['headwater']:>18,.0f}{rate:>17,.0f}{ratio:>7.2f}x"
                         f"{(f'{target / 1e6:.0f} M' if target else '-'):>10}"
                         f"{r['headwater']['loadavg_1m_before']:>6.1f}  {'yes' if met else 'NO'}")
    return "\n".join(lines)


# what each run's "seconds" include: wall time in this process, one sentence each (written into the JSON)
CLOCK = {
    "headwater": "wall time from the first session.append of the workload's prepared Arrow chunks to "
                 "wait_until_caught_up returning; the warm-up graph, submitting the timed graph, its first empty "
                 "trigger and the preloaded tables come before it, reading the output back after it",
    "pyspark": "wall time from writing the first append's Parquet file into the source directory to "
               "processAllAvailable returning on every query; the warm-up run and starting the queries come "
               "before it",
    "pyspark_batch": "wall time from writing the first append's Parquet file to the batch job's output written "
                     "(as-of join only)",
}


QUICK = {"chunk": 20_000, "warmup": False,
         **{k: v for module in MODULES for k, v in module.QUICK.items()}}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--family", action="append", choices=list(FAMILIES), help="repeatable; default: all")
    p.add_argument("--quick", action="store_true", help=f"smoke run: tiny sizes, no warm-up ({QUICK})")
    p.add_argument("--chunk", type=int, default=1_000_000, help="rows per append (joins: per time slice, "
                   "both tables)")
    p.add_argument("--tasks", type=int, default=2, help="parallelize(key, n) before engines that allow it")
    for module in MODULES:
        module.add_arguments(p)
    p.add_argument("--baseline-partitions", type=int, default=os.cpu_count() or 2,
                   help="spark.sql.shuffle.partitions of the PySpark jobs (state store partitions); default: "
                        "the CPU count (Headwater's session has 4)")
    p.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True,
                   help="run each job once on 50,000 rows per table before timing it")
    p.add_argument("--timeout", type=float, default=1800.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    if args.quick:
        p.set_defaults(**QUICK)
        args = p.parse_args(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    families = [FAMILIES[f] for f in dict.fromkeys(args.family or FAMILIES)]
    import headwater as hw
    from headwater.spark.session import build_spark

    info = machine()
    print(f"machine: {info['nproc']} CPUs ({info['cpu']}); load average "
          f"{' '.join(f'{x:.2f}' for x in info['loadavg_at_start'])}; families: "
          f"{', '.join(f.name for f in families)}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="hw-bench-engines-"))
    results: dict[str, Any] = {}
    session = hw.connect(workdir / "headwater")
    try:
        session.use_catalog(CATALOG)
        spark = build_spark("local[*]")  # the session Headwater started: same JVM, same settings
        # the baselines' own SQL settings; Spark closes windows in a batch without new rows only with this
        base = spark.newSession()
        base.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        base.conf.set("spark.sql.shuffle.partitions", str(args.baseline_partitions))
        for fam in families:
            w = fam.workload(args, False)
            warm = fam.workload(args, True) if args.warmup else None
            print(f"{fam.name}: {w.rows:,} input rows in {len(w.appends)} appends; {w.params}", flush=True)
            hw_run, hw_out = run_headwater(session, fam, w, warm, args)
            base_runs, base_out = run_baselines(base, fam, w, warm, workdir / "pyspark" / fam.name, args)
            keys = list(fam.keys)
            checks = {"headwater_vs_pandas": compare(f"{fam.name}: headwater vs pandas", hw_out, w.reference, keys)}
            for b, out in base_out.items():
                checks[f"{b}_vs_pandas"] = compare(f"{fam.name}: {b} vs pandas", out, w.reference, keys)
            hw_rate = w.rows / hw_run["seconds"]
            rates = {b: w.rows / r["seconds"] for b, r in base_runs.items()}
            results[fam.name] = {
                "what": fam.what, "baseline": fam.baseline, "params": w.params, "input_rows": w.rows,
                "target_rows_per_s": fam.target,
                "rows_per_s": {"headwater": hw_rate, "baselines": rates},
                "ratio": {b: hw_rate / r for b, r in rates.items()},
                "met": {b: hw_rate >= r and (fam.target is None or hw_rate >= fam.target) for b, r in rates.items()},
                "headwater": hw_run, "pyspark": base_runs, "checks": checks,
            }
            print(f"  outputs equal ({checks['headwater_vs_pandas']['rows']:,} rows; headwater, "
                  f"{', '.join(base_out)} and pandas agree); headwater {hw_rate:,.0f} rows/s "
                  f"({hw_run['seconds']:.2f}s), " + ", ".join(f"{b} {r:,.0f} rows/s ({base_runs[b]['seconds']:.2f}s)"
                                                             for b, r in rates.items()), flush=True)
    finally:
        session.close()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(table(results))
    print("ratio = headwater rows/s / baseline rows/s, same run; load = 1-minute load average before the "
          f"headwater run; {info['nproc']} CPUs")
    report = {
        "benchmark": "engine families: headwater vs hand-written PySpark, end to end, outputs checked equal",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "parameters": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {**info, "loadavg_at_end": list(os.getloadavg())},
        "clock": CLOCK,
        "families": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=float) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
