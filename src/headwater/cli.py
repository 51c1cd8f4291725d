"""The ``headwater`` command line: ``headwater demo``, ``headwater explain-demo``."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import pandas as pd


def demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import headwater as hw
    from headwater.demo import build_indicator_graph, make_ticks

    data_dir = args.data_dir or tempfile.mkdtemp(prefix="headwater-demo-")
    print(f"Headwater demo: 1-minute bars and indicators for {args.symbols} symbols over a trading day")
    print(f"data directory: {data_dir}\n")
    ticks = make_ticks(n_symbols=args.symbols, minutes=390, ticks_per_minute=args.ticks_per_minute)
    print(f"generated {len(ticks):,} ticks from {ticks['time'].min()} to {ticks['time'].max()}")

    t0 = time.perf_counter()
    session = hw.connect(data_dir)
    session.use_catalog("demo")
    g = build_indicator_graph(session)
    print("\n" + g.explain() + "\n")
    print("starting Spark and submitting the graph ...", flush=True)
    g.submit()
    print(f"graph running after {time.perf_counter() - t0:.1f}s\n")

    chunks = [ticks.iloc[i:i + args.chunk] for i in range(0, len(ticks), args.chunk)]
    start = time.perf_counter()
    with tqdm(total=len(ticks), unit="tick", desc="appended", unit_scale=True) as bar:
        for chunk in chunks:
            session.append("trade", chunk)
            bar.update(len(chunk))
            bar.set_postfix_str(_progress_text(session.progress("indicators")))
    print("waiting until every tick is processed ...", flush=True)
    session.wait_until_caught_up("indicators", timeout=args.timeout)
    elapsed = time.perf_counter() - start

    bars = session.sql("select * from demo.stream_table.one_min_bar order by time, symbol").to_pandas()
    ind = session.sql("select * from demo.stream_table.one_min_indicators order by time, symbol").to_pandas()
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 3):
        print("\none_min_bar (last rows):")
        print(bars.tail(5).to_string(index=False))
        print("\none_min_indicators (last rows):")
        print(ind.tail(5).to_string(index=False))
        print("\nstream_graph_meta():")
        print(session.stream_graph_meta()[["id", "fqn", "status", "semantics", "create_time"]].to_string(index=False))
    print(f"\nthroughput: {len(ticks):,} ticks -> {len(bars):,} bars -> {len(ind):,} indicator rows in "
          f"{elapsed:.1f}s = {len(ticks) / elapsed:,.0f} ticks/s end to end (append + both queries, embedded, "
          f"{args.chunk:,}-tick appends)")
    if not args.keep:
        session.drop_stream_graph("indicators", include_tables=True)
        print("dropped the graph and its tables")
    session.close()
    return 0


def _progress_text(progress: dict) -> str:
    return " ".join(f"{k}: batch {v['last_batch']} rows {v['rows_out']}" for k, v in progress.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="headwater", description="Headwater stream graphs on Spark")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the 1-minute bars + indicators graph over a generated trading day")
    p.add_argument("--symbols", type=int, default=20)
    p.add_argument("--ticks-per-minute", type=int, default=50, help="per symbol")
    p.add_argument("--chunk", type=int, default=50_000, help="ticks per append call")
    p.add_argument("--data-dir", default=None, help="default: a new temporary directory")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--keep", action="store_true", help="keep the graph and tables after the demo")
    p.set_defaults(func=demo)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
