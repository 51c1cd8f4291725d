"""Benchmark: ticks -> 1-minute OHLC bars -> EMA/MACD/KDJ, Headwater against hand-written PySpark.

All jobs run in one process, on Headwater's SparkSession settings and the same generated ticks
(``headwater.demo.make_ticks``), and their outputs are checked against each other and against
pandas before any number is printed: a benchmark that computes something different is worthless.
Each job has a *cold* run (its first in this process) and ``--repeat`` *warm* runs.

- **headwater**: ``headwater.demo.build_indicator_graph``, embedded (``hw.connect(tmp)``). Spark is
  started, the graph submitted and its first (empty) trigger done before the clock starts; the
  clock runs from the first ``session.append("trade", chunk)`` until ``wait_until_caught_up``
  returns. Cold is the first trading day into the fresh graph; each warm run feeds the next day
  (times + 1 day) into the same running graph.
- **pyspark batch** (the primary baseline): ticks are written to Parquet before the clock; the
  clock covers ``spark.read.parquet`` -> ``groupBy(symbol, window(time, 60 s))`` with
  ``min_by``/``max_by``/``max``/``min``/``sum`` -> ``groupBy(symbol).applyInPandas`` (indicators
  in pandas per symbol, each symbol's last window dropped) -> ``write.parquet``.
- **pyspark streaming** (``--no-streaming`` skips it): the same job as two Structured Streaming
  queries, bars by an event-time window aggregation with a watermark, indicators by
  ``applyInPandasWithState`` carrying the EMA/KDJ state per symbol. (A ``foreachBatch`` that runs
  the batch job per micro-batch would restart every EMA at each batch, so it is not offered.)

Run::

    .venv/bin/python benchmarks/bench_indicators.py [--symbols 20 --ticks-per-minute 200 --chunk 100000 --repeat 2]

Writes ``benchmarks/results/latest.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.json"
GRAPH = "indicators"
CATALOG = "bench"
KEYS = ["symbol", "time"]
COLUMNS = [
    "symbol",
    "time",
    "high",
    "low",
    "close",
    "volume",
    "ema20",
    "ema60",
    "dif",
    "dea",
    "macd",
    "k",
    "d",
    "j",
]
OUT_DDL = (
    "symbol string, time timestamp_ntz, high double, low double, close double, volume long, ema20 double, "
    "ema60 double, dif double, dea double, macd double, k double, d double, j double"
)
TOLERANCE = 1e-9
# what each job's "seconds" include: wall time in this process, one sentence each (written into the JSON)
CLOCK = {
    "headwater": "wall time from the first session.append of the day's ticks to wait_until_caught_up returning; "
                 "starting Spark, submitting the graph and its first, empty trigger come before it",
    "pyspark batch": "wall time from spark.read.parquet of the day's ticks to the indicators' write returning; "
                     "writing the ticks' Parquet file comes before it",
    "pyspark streaming": "wall time from writing the day's first tick file to both queries' processAllAvailable "
                         "returning; starting the queries comes before it",
}


# -- the indicator formulas, as a PySpark user writes them in pandas ------------------------------------
def round_half_away(x: pd.Series | np.ndarray, digits: int) -> Any:
    """Round half away from zero (DolphinDB's ``round``; NumPy's rounds half to even)."""
    scale = 10.0**digits
    return np.sign(x) * np.floor(np.abs(x) * scale + 0.5) / scale


def indicators_pandas(bars: pd.DataFrame) -> pd.DataFrame:
    """One symbol's bars -> indicator rows; the symbol's last window is still open, so it is dropped."""
    b = bars.sort_values("time", kind="stable").iloc[:-1]
    c, h, low = b["close"], b["high"], b["low"]

    def ema(s: pd.Series, n: int) -> pd.Series:
        return s.ewm(span=n, adjust=False).mean()

    dif = ema(c, 12) - ema(c, 26)
    dea = ema(dif, 9)
    llv, hhv = low.rolling(9).min(), h.rolling(9).max()
    rsv = ((c - llv) / (hhv - llv) * 100).replace([np.inf, -np.inf], np.nan)
    k = ema(rsv, 5)
    d = ema(k, 5)
    return pd.DataFrame(
        {
            "symbol": b["symbol"],
            "time": b["time"],
            "high": h,
            "low": low,
            "close": c,
            "volume": b["volume"],
            "ema20": ema(c, 20),
            "ema60": ema(c, 60),
            "dif": round_half_away(dif, 3),
            "dea": round_half_away(dea, 3),
            "macd": round_half_away((dif - dea) * 2, 3),
            "k": k,
            "d": d,
            "j": k * 3 - d * 2,
        }
    )


def pandas_bars(ticks: pd.DataFrame) -> pd.DataFrame:
    """Left-closed 1-minute bars in pandas (time = window end), every window including the last."""
    t = ticks.assign(time=ticks["time"].dt.floor("60s") + pd.Timedelta("60s"))
    return (
        t.groupby(["symbol", "time"], sort=True)
        .agg(
            open=("price", "first"),
            high=("price", "max"),
            low=("price", "min"),
            close=("price", "last"),
            volume=("volume", "sum"),
        )
        .reset_index()
    )


def pandas_reference(ticks: pd.DataFrame) -> pd.DataFrame:
    """Single-process pandas answer for the whole tick history (used to check the warm runs)."""
    bars = pandas_bars(ticks)
    return pd.concat([indicators_pandas(g) for _, g in bars.groupby("symbol", sort=True)], ignore_index=True)


# -- checks ---------------------------------------------------------------------------------------------
def normalise(df: pd.DataFrame) -> pd.DataFrame:
    out = df[COLUMNS].copy()
    out["time"] = out["time"].astype("datetime64[ns]")
    out["symbol"] = out["symbol"].astype(str)
    return out.sort_values(KEYS).reset_index(drop=True)


def compare(name: str, got: pd.DataFrame, want: pd.DataFrame) -> dict[str, Any]:
    """Same keys, same values (relative and absolute 1e-9, NaN where NaN); raises on a mismatch."""
    g, w = normalise(got), normalise(want)
    if len(g) != len(w):
        raise AssertionError(f"{name}: {len(g)} indicator rows, expected {len(w)}")
    if g.duplicated(KEYS).any():
        raise AssertionError(f"{name}: duplicated (symbol, time) rows")
    if not (g["symbol"].equals(w["symbol"]) and g["time"].equals(w["time"])):
        raise AssertionError(f"{name}: the (symbol, time) keys differ")
    worst = 0.0
    for c in COLUMNS[2:]:
        a, b = g[c].to_numpy(dtype=float), w[c].to_numpy(dtype=float)
        ok = np.isclose(a, b, rtol=TOLERANCE, atol=TOLERANCE, equal_nan=True)
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise AssertionError(
                f"{name}: column {c} differs at {g.loc[i, 'symbol']} {g.loc[i, 'time']}: "
                f"{a[i]!r} vs {b[i]!r} ({int((~ok).sum())} rows differ)"
            )
        both = ~(np.isnan(a) | np.isnan(b))
        if both.any():
            worst = max(worst, float(np.max(np.abs(a[both] - b[both]))))
    return {"rows": len(g), "max_abs_diff": worst, "nan_cells": int(g[COLUMNS[2:]].isna().sum().sum())}


# -- headwater ------------------------------------------------------------------------------------------
def _streaming_breakdown(session: Any, since: dict[int, int]) -> dict[str, Any]:
    """Per subgraph: micro-batches and Spark's durationMs phases summed over the batches after ``since``.

    Reads the worker's StreamingQuery handles (private API, diagnostics only).
    """
    try:
        running = session._master.master.worker.worker._graphs[f"{CATALOG}.stream_graph.{GRAPH}"]
    except (AttributeError, KeyError):
        return {}
    out = {}
    for sg_id, q in running.queries.items():
        progress = [p for p in q.recentProgress if p.batchId > since.get(sg_id, -1)]
        phases: dict[str, float] = {}
        for p in progress:
            for k, v in (p.durationMs or {}).items():
                phases[k] = phases.get(k, 0) + v / 1000
        out[f"subgraph_{sg_id}"] = {
            "batches": len(progress),
            "input_rows": sum(p.numInputRows for p in progress),
            "seconds_by_phase": {k: round(v, 3) for k, v in sorted(phases.items())},
            "last_batch": max((p.batchId for p in progress), default=since.get(sg_id, -1)),
        }
    return out


def _last_batches(breakdown: dict[str, Any]) -> dict[int, int]:
    return {int(k.split("_")[1]): v["last_batch"] for k, v in breakdown.items()}


def feed_headwater(session: Any, ticks: pd.DataFrame, chunk: int, timeout: float) -> dict[str, Any]:
    """Timed: append ``ticks`` in chunks, then wait until the graph has processed all of them."""
    chunks = [ticks.iloc[i : i + chunk] for i in range(0, len(ticks), chunk)]
    load = os.getloadavg()[0]
    appends = []
    start = time.perf_counter()
    for c in chunks:
        t = time.perf_counter()
        session.append("trade", c)
        appends.append(time.perf_counter() - t)
    appended = time.perf_counter()
    session.wait_until_caught_up(GRAPH, timeout=timeout)
    end = time.perf_counter()
    return {
        "seconds": end - start,
        "append_seconds": appended - start,
        "wait_seconds": end - appended,
        "appends": len(chunks),
        "max_append_seconds": max(appends),
        "loadavg_1m_before": load,
        "loadavg_1m_after": os.getloadavg()[0],
    }


def run_headwater(
    days: list[pd.DataFrame], args: argparse.Namespace, workdir: Path
) -> tuple[dict[str, Any], list[pd.DataFrame]]:
    """Cold run (day 0 into a fresh graph) and warm runs (the next days into the same graph)."""
    import headwater as hw
    from headwater.demo import build_indicator_graph

    t0 = time.perf_counter()
    session = hw.connect(workdir / "headwater")
    session.use_catalog(CATALOG)
    build_indicator_graph(session, GRAPH).submit()
    submitted = time.perf_counter() - t0
    # The queries' first trigger (no data yet) starts their Python workers; a deployed graph does it before
    # ticks flow, so it is not timed either.
    session.wait_until_caught_up(GRAPH, timeout=args.timeout)
    startup = time.perf_counter() - t0
    first_trigger = _streaming_breakdown(session, {})
    since = _last_batches(first_trigger)
    print(
        f"  Spark started and graph submitted in {submitted:.1f}s, first empty trigger done after "
        f"{startup:.1f}s (not timed)",
        flush=True,
    )
    query = f"select * from {CATALOG}.stream_table.one_min_indicators"
    runs, outputs = [], []
    try:
        for i, day in enumerate(days):
            label = "cold" if i == 0 else f"warm{i}"
            r = feed_headwater(session, day, args.chunk, args.timeout)
            r["label"] = label
            r["breakdown"] = _streaming_breakdown(session, since)
            since = _last_batches(r["breakdown"]) or since
            outputs.append(session.sql(query).to_pandas())  # cumulative; not timed
            r["indicator_rows_total"] = len(outputs[-1])
            runs.append(r)
            print(
                f"  headwater {label}: {len(day):,} ticks in {r['seconds']:.2f}s "
                f"(appends {r['append_seconds']:.2f}s, wait {r['wait_seconds']:.2f}s) = "
                f"{len(day) / r['seconds']:,.0f} ticks/s",
                flush=True,
            )
    finally:
        try:
            session.drop_stream_graph(GRAPH, include_tables=True)
        finally:
            session.close()
    return {
        "submit_seconds": submitted,
        "startup_seconds": startup,
        "first_trigger": first_trigger,
        "runs": runs,
    }, outputs


# -- hand-written PySpark ----------------------------------------------------------------------------------
def write_ticks_parquet(ticks: pd.DataFrame, path: Path, row_group: int, first_seq: int = 0) -> None:
    """Ticks with their arrival sequence number (first/last of a bar break time ties by it)."""
    seq = np.arange(first_seq, first_seq + len(ticks), dtype=np.int64)
    table = pa.Table.from_pandas(ticks.assign(seq=seq), preserve_index=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    # microseconds: Spark does not read Parquet's TIMESTAMP(NANOS); row groups of one append so Spark can split
    pq.write_table(table, path, coerce_timestamps="us", row_group_size=row_group)


def bars_frame(ticks: Any) -> Any:
    """Left-closed 1-minute OHLC bars per symbol, time = window end."""
    from pyspark.sql import functions as F

    order = F.struct("time", "seq")  # first/last by time; equal times by arrival
    return (
        ticks.groupBy("symbol", F.window("time", "60 seconds").alias("w"))
        .agg(
            F.min_by("price", order).alias("open"),
            F.max("price").alias("high"),
            F.min("price").alias("low"),
            F.max_by("price", order).alias("close"),
            F.sum("volume").alias("volume"),
        )
        .select("symbol", F.col("w.end").alias("time"), "open", "high", "low", "close", "volume")
    )


def baseline_batch(spark: Any, ticks_path: Path, out_path: Path) -> dict[str, Any]:
    """Timed: read Parquet -> bars -> indicators per symbol in pandas -> write Parquet."""
    load = os.getloadavg()[0]
    start = time.perf_counter()
    bars = bars_frame(spark.read.parquet(str(ticks_path)))
    bars.groupBy("symbol").applyInPandas(indicators_pandas, schema=OUT_DDL).write.mode("overwrite").parquet(
        str(out_path)
    )
    end = time.perf_counter()
    return {"seconds": end - start, "loadavg_1m_before": load, "loadavg_1m_after": os.getloadavg()[0]}


def run_baseline(
    spark: Any, ticks: pd.DataFrame, args: argparse.Namespace, workdir: Path
) -> tuple[dict[str, Any], pd.DataFrame]:
    ticks_path = workdir / "pyspark" / "ticks.parquet"
    write_ticks_parquet(ticks, ticks_path, args.chunk)
    runs = []
    for i in range(1 + args.repeat):  # the first run is the job's cold run, like Headwater's first day
        out_path = workdir / "pyspark" / "indicators"
        r = baseline_batch(spark, ticks_path, out_path)
        r["label"] = "cold" if i == 0 else f"warm{i}"
        runs.append(r)
        print(
            f"  pyspark batch {r['label']}: {len(ticks):,} ticks in {r['seconds']:.2f}s = "
            f"{len(ticks) / r['seconds']:,.0f} ticks/s",
            flush=True,
        )
    result = pd.read_parquet(workdir / "pyspark" / "indicators")
    return {"runs": runs}, result


# -- hand-written PySpark Structured Streaming ------------------------------------------------------------
BARS_DDL = "symbol string, time timestamp, open double, high double, low double, close double, volume long"
TICKS_DDL = "time timestamp_ntz, symbol string, price double, volume long, seq long"
EMA_SPANS = {"ema20": 20, "ema60": 60, "ema12": 12, "ema26": 26, "dea": 9, "k": 5, "d": 5}


def ema_step(state: list[float], x: float, span: int) -> float:
    """One step of pandas' ``ewm(span=span, adjust=False).mean()`` (its exact recurrence, NaN rules included)."""
    weighted, old_wt = state
    alpha = 1.0 / (1.0 + (span - 1) / 2.0)
    if weighted == weighted:
        old_wt *= 1.0 - alpha
        if x == x:
            if weighted != x:
                weighted = (old_wt * weighted + alpha * x) / (old_wt + alpha)
            old_wt = 1.0
    elif x == x:
        weighted = x
    state[0], state[1] = weighted, old_wt
    return weighted


def indicators_with_state(key: tuple, frames: Any, state: Any) -> Any:
    """applyInPandasWithState: closed bars of one symbol -> indicator rows; EMA and 9-bar state carried over."""
    import json
    import warnings

    # PySpark concatenates the returned frames; early ones have all-NaN k/d/j columns, which pandas warns about
    warnings.filterwarnings("ignore", message="The behavior of DataFrame concatenation with empty or all-NA")
    st: dict[str, Any] = (
        json.loads(state.get[0])
        if state.exists
        else {"ema": {name: [float("nan"), 1.0] for name in EMA_SPANS}, "lows": [], "highs": []}
    )
    parts = [f for f in frames if len(f)]
    if not parts:
        return
    bars = pd.concat(parts, ignore_index=True).sort_values("time", kind="stable")
    rows = []
    for t, h, low, c, v in zip(
        bars["time"], bars["high"], bars["low"], bars["close"], bars["volume"], strict=True
    ):
        ema = {
            name: ema_step(st["ema"][name], c, EMA_SPANS[name])
            for name in ("ema20", "ema60", "ema12", "ema26")
        }
        dif = ema["ema12"] - ema["ema26"]
        dea = ema_step(st["ema"]["dea"], dif, 9)
        st["lows"] = (st["lows"] + [low])[-9:]
        st["highs"] = (st["highs"] + [h])[-9:]
        rsv = float("nan")
        if len(st["lows"]) == 9:
            llv, hhv = min(st["lows"]), max(st["highs"])
            rsv = (c - llv) / (hhv - llv) * 100 if hhv != llv else float("nan")
        k = ema_step(st["ema"]["k"], rsv, 5)
        d = ema_step(st["ema"]["d"], k, 5)
        rows.append(
            (
                key[0],
                t,
                h,
                low,
                c,
                v,
                ema["ema20"],
                ema["ema60"],
                dif,
                dea,
                (dif - dea) * 2,
                k,
                d,
                k * 3 - d * 2,
            )
        )
    state.update((json.dumps(st),))
    out = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("dif", "dea", "macd"):
        out[col] = round_half_away(out[col], 3)
    yield out


def run_streaming_baseline(
    spark: Any, days: list[pd.DataFrame], args: argparse.Namespace, workdir: Path
) -> tuple[dict[str, Any], list[pd.DataFrame]]:
    """Ticks land as Parquet files in a directory; two queries: bars (watermark), indicators (state per symbol)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    root = workdir / "pyspark-streaming"
    src, staging, bars_dir, out_dir = root / "ticks", root / "staging", root / "bars", root / "indicators"
    for d in (src, staging, bars_dir):
        d.mkdir(parents=True, exist_ok=True)
    trigger = "200 milliseconds"  # Headwater's default trigger interval
    # a window closes when the watermark passes it; without no-data batches the last closed ones wait for more ticks
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
    t0 = time.perf_counter()
    ticks = (
        spark.readStream.schema(TICKS_DDL)
        .parquet(str(src))
        .withColumn("time", F.col("time").cast("timestamp"))  # a watermark needs TIMESTAMP (session zone UTC)
        .withWatermark("time", "0 seconds")
    )
    q_bars = (
        bars_frame(ticks)
        .writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(bars_dir))
        .option("checkpointLocation", str(root / "ck-bars"))
        .trigger(processingTime=trigger)
        .start()
    )
    indicators = (
        spark.readStream.schema(BARS_DDL)
        .parquet(str(bars_dir))
        .groupBy("symbol")
        .applyInPandasWithState(
            indicators_with_state, OUT_DDL, "state string", "append", GroupStateTimeout.NoTimeout
        )
    )
    q_ind = (
        indicators.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out_dir))
        .option("checkpointLocation", str(root / "ck-indicators"))
        .trigger(processingTime=trigger)
        .start()
    )
    q_bars.processAllAvailable()
    q_ind.processAllAvailable()
    startup = time.perf_counter() - t0
    print(f"  streaming queries started in {startup:.1f}s (not timed)", flush=True)
    runs, outputs, n_files = [], [], 0
    try:
        for i, day in enumerate(days):
            load = os.getloadavg()[0]
            start = time.perf_counter()
            for j in range(0, len(day), args.chunk):
                chunk = day.iloc[j : j + args.chunk]
                name = f"part-{n_files:06d}.parquet"
                write_ticks_parquet(chunk, staging / name, args.chunk, first_seq=i * len(day) + j)
                os.rename(staging / name, src / name)  # a file source must never see a half-written file
                n_files += 1
            appended = time.perf_counter()
            q_bars.processAllAvailable()
            q_ind.processAllAvailable()
            end = time.perf_counter()
            label = "cold" if i == 0 else f"warm{i}"
            runs.append(
                {
                    "label": label,
                    "seconds": end - start,
                    "append_seconds": appended - start,
                    "wait_seconds": end - appended,
                    "loadavg_1m_before": load,
                    "loadavg_1m_after": os.getloadavg()[0],
                }
            )
            outputs.append(pd.read_parquet(out_dir))
            print(
                f"  pyspark streaming {label}: {len(day):,} ticks in {end - start:.2f}s = "
                f"{len(day) / (end - start):,.0f} ticks/s",
                flush=True,
            )
    finally:
        q_bars.stop()
        q_ind.stop()
    return {"startup_seconds": startup, "runs": runs}, outputs


# -- report ---------------------------------------------------------------------------------------------
def _git_state(where: Path) -> dict[str, Any] | None:
    """Commit and uncommitted ``src/`` files of the git checkout holding ``where`` (None outside git)."""
    git = ["git", "-C", str(where)]
    try:
        top = subprocess.run(
            [*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
        )
        commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        status = subprocess.run(
            ["git", "-C", top.stdout.strip(), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return {
        "checkout": top.stdout.strip(),
        "commit": commit.stdout.strip(),
        "uncommitted_src": [line.strip() for line in status.stdout.splitlines() if line.strip()],
    }


def versions() -> dict[str, Any]:
    import numba
    import pyspark

    import headwater

    out = {
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pandas": pd.__version__,
        "pyarrow": pa.__version__,
        "numpy": np.__version__,
        "numba": numba.__version__,
        "headwater": headwater.__version__,
        "headwater_path": str(Path(headwater.__file__).parent),
    }
    try:
        import deltalake

        out["deltalake"] = deltalake.__version__
    except ImportError:
        pass
    # Headwater may come from another checkout than this script's (PYTHONPATH=<clone>/src): record both
    source = Path(headwater.__file__).resolve().parent
    out["headwater_git"] = _git_state(source)
    out["benchmark_git"] = _git_state(HERE)
    return out


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "loadavg_at_start": list(os.getloadavg()),
    }


def table(jobs: dict[str, dict[str, float | None]], n: int) -> str:
    """One line per job: cold and warm seconds, warm ticks/s, speed against the batch job at the same stage."""
    base = jobs["pyspark batch"]
    head = (
        f"{'job':<20}{'cold s':>9}{'warm s':>9}{'warm ticks/s':>14}{'cold vs batch':>15}{'warm vs batch':>15}"
    )
    lines = [head]
    for name, j in jobs.items():
        cells = []
        for stage in ("cold", "warm"):
            v, b = j[stage], base[stage]
            cells.append(f"{(b / v if v and b else float('nan')):>14.2f}x")
        warm = j["warm"]
        lines.append(
            f"{name:<20}{j['cold'] or float('nan'):>9.2f}{warm or float('nan'):>9.2f}"
            f"{(n / warm if warm else float('nan')):>14,.0f}{cells[0]}{cells[1]}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--symbols", type=int, default=20)
    p.add_argument("--ticks-per-minute", type=int, default=200, help="per symbol; a day is 390 minutes")
    p.add_argument(
        "--chunk", type=int, default=100_000, help="ticks per append (and per Parquet file/row group)"
    )
    p.add_argument("--repeat", type=int, default=2, help="warm runs to time after each job's cold run")
    p.add_argument(
        "--streaming",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the PySpark Structured Streaming baseline",
    )
    p.add_argument("--timeout", type=float, default=900.0, help="wait_until_caught_up timeout per run")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--output", type=Path, default=RESULTS)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)

    from headwater.demo import make_ticks

    info = machine()
    print(
        f"machine: {info['nproc']} CPUs ({info['cpu']}), {info['memory_gib']} GiB; "
        f"load average {' '.join(f'{x:.2f}' for x in info['loadavg_at_start'])}"
    )
    day0 = make_ticks(
        n_symbols=args.symbols, minutes=390, ticks_per_minute=args.ticks_per_minute, seed=args.seed
    )
    days = [day0] + [day0.assign(time=day0["time"] + pd.Timedelta(days=i)) for i in range(1, args.repeat + 1)]
    n = len(day0)
    print(
        f"ticks: {n:,} per day ({args.symbols} symbols x 390 min x {args.ticks_per_minute}/min), "
        f"appended {args.chunk:,} at a time; each job: 1 cold run, {args.repeat} warm",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="hw-bench-"))
    stream_result: dict[str, Any] | None = None
    stream_outputs: list[pd.DataFrame] = []
    try:
        print("headwater:", flush=True)
        hw_result, hw_outputs = run_headwater(days, args, workdir)
        from headwater.spark.session import build_spark

        spark = build_spark("local[*]")  # the session Headwater started: same settings, same JVM
        spark_conf = {
            k: spark.conf.get(k)
            for k in (
                "spark.master",
                "spark.sql.shuffle.partitions",
                "spark.driver.memory",
                "spark.sql.adaptive.enabled",
            )
        }
        jvm = spark.sparkContext._jvm
        java = jvm.System.getProperty("java.version") if jvm is not None else None
        print("pyspark batch:", flush=True)
        base_result, base_out = run_baseline(spark, day0, args, workdir)
        if args.streaming:
            print("pyspark streaming:", flush=True)
            stream_result, stream_outputs = run_streaming_baseline(spark, days, args, workdir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print("checking results ...", flush=True)
    ref = pandas_reference(pd.concat(days, ignore_index=True)) if len(days) > 1 else base_out
    checks = {
        "headwater_day1_vs_pyspark_batch": compare(
            "headwater day 1 vs pyspark batch", hw_outputs[0], base_out
        ),
        "headwater_all_days_vs_pandas": compare("headwater, all days, vs pandas", hw_outputs[-1], ref),
    }
    if stream_outputs:
        checks["streaming_day1_vs_pyspark_batch"] = compare(
            "pyspark streaming day 1 vs pyspark batch", stream_outputs[0], base_out
        )
        checks["streaming_all_days_vs_pandas"] = compare(
            "pyspark streaming, all days, vs pandas", stream_outputs[-1], ref
        )
    ties = int(day0.duplicated(["symbol", "time"]).sum())

    def median(runs: list[dict[str, Any]]) -> float | None:
        return statistics.median(r["seconds"] for r in runs) if runs else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a and b else None

    results = {"headwater": hw_result, "pyspark batch": base_result}
    if stream_result:
        results["pyspark streaming"] = stream_result
    jobs = {
        name: {"cold": median(r["runs"][:1]), "warm": median(r["runs"][1:])} for name, r in results.items()
    }
    base = jobs["pyspark batch"]
    summary: dict[str, Any] = {
        "ticks_per_day": n,
        "indicator_rows_per_day": checks["headwater_day1_vs_pyspark_batch"]["rows"],
        "definition": "cold: each job's first run in this process; warm: median of the next --repeat runs",
        "clock": {k: CLOCK[k] for k in jobs},
        "seconds": jobs,
        "warm_ticks_per_second": {k: ratio(n, j["warm"]) for k, j in jobs.items()},
        "speed_vs_pyspark_batch": {
            k: {stage: ratio(base[stage], j[stage]) for stage in ("cold", "warm")} for k, j in jobs.items()
        },
    }
    if "pyspark streaming" in jobs and jobs["headwater"]["warm"] and jobs["pyspark streaming"]["warm"]:
        summary["headwater_warm_speed_vs_pyspark_streaming_warm"] = (
            jobs["pyspark streaming"]["warm"] / jobs["headwater"]["warm"]
        )

    print()
    print(table(jobs, n))
    print(
        f"\ncold = each job's first run in this JVM; warm = median of the next {args.repeat}; x vs batch = "
        "the batch job's seconds at the same stage / the job's (above 1: faster than the batch job).\n"
        f"All outputs agree: {summary['indicator_rows_per_day']:,} indicator rows a day, max |diff| "
        f"{max(c['max_abs_diff'] for c in checks.values()):.1e}; {ties} same-time tick pairs in a symbol."
    )
    print("runs (seconds, 1-minute load average before):")
    for name, r in results.items():
        print(
            f"  {name:<18} "
            + ", ".join(f"{x['label']} {x['seconds']:.2f}s ({x['loadavg_1m_before']:.1f})" for x in r["runs"])
        )
    print(
        f"load average now {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {info['nproc']} CPUs "
        "(above the CPU count, other work competed for the CPUs)"
    )
    for r in hw_result["runs"]:
        for sg, b in r["breakdown"].items():
            phases = ", ".join(f"{k} {v:.1f}s" for k, v in b["seconds_by_phase"].items() if v >= 0.05)
            print(
                f"  headwater {r['label']} {sg}: {b['batches']} micro-batches, {b['input_rows']:,} rows; {phases}"
            )

    report = {
        "benchmark": "ticks -> 1-minute bars -> ema20/ema60/MACD/KDJ (headwater.demo), end to end",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "parameters": {
            "symbols": args.symbols,
            "minutes": 390,
            "ticks_per_minute": args.ticks_per_minute,
            "chunk": args.chunk,
            "repeat": args.repeat,
            "seed": args.seed,
            "streaming": args.streaming,
        },
        "machine": {**info, "loadavg_at_end": list(os.getloadavg())},
        "versions": {**versions(), "java": java},
        "spark_conf": spark_conf,
        "summary": summary,
        "headwater": hw_result,
        "pyspark_batch": base_result,
        "pyspark_streaming": stream_result,
        "checks": checks,
        "same_time_ticks_within_symbol": ties,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2, default=float) + "\n", encoding="utf-8")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
