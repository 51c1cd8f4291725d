"""``headwater demo``: the indicator graph over a generated trading day, embedded."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from headwater.storage.shared_storage import storage_argument


def demo(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import headwater as hw
    from headwater.demo import build_indicator_graph, make_ticks

    scratch = args.data_dir is None  # a directory of its own: removed at the end, unless kept
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
    _wait_with_progress(session, len(ticks), args.timeout)
    elapsed = time.perf_counter() - start

    import pandas as pd  # here: every other command would pay for importing it

    bars = session.sql("select * from demo.stream_table.one_min_bar order by time, symbol").to_pandas()
    ind = session.sql("select * from demo.stream_table.one_min_indicators order by time, symbol").to_pandas()
    with pd.option_context("display.width", 160, "display.max_columns", 20, "display.precision", 3):
        print("\none_min_bar (last rows):")
        print(bars.tail(5).to_string(index=False))
        print("\none_min_indicators (last rows):")
        print(ind.tail(5).to_string(index=False))
        print("\nstream_graph_meta():")
        print(session.stream_graph_meta()[["id", "fqn", "status", "semantics", "create_time"]].to_string(index=False))
    for name, p in session.progress("indicators").items():
        split = ", ".join(f"{stage} {sec:.2f}s" for stage, sec in p["task_seconds"].items())
        print(f"{name}: {p['rows_in']:,} rows in, {p['rows_out']:,} rows out; task time by stage: {split}")
    print(f"\nthroughput: {len(ticks):,} ticks -> {len(bars):,} bars -> {len(ind):,} indicator rows in "
          f"{elapsed:.1f}s = {len(ticks) / elapsed:,.0f} ticks/s end to end (append + both queries, embedded, "
          f"{args.chunk:,}-tick appends)")
    if not args.keep:
        session.drop_stream_graph("indicators", include_tables=True)
        print("dropped the graph and its tables")
    session.close()
    if scratch and not args.keep:
        shutil.rmtree(data_dir, ignore_errors=True)
        print(f"removed {data_dir}")
    return 0


def _wait_with_progress(session: object, total: int, timeout: float) -> None:
    """Wait until caught up, showing ticks processed by the first subgraph and the bars/indicators written."""
    import threading

    from tqdm import tqdm

    done: list[BaseException | None] = []

    def wait() -> None:
        try:
            session.wait_until_caught_up("indicators", timeout=timeout)  # type: ignore[attr-defined]
            done.append(None)
        except BaseException as exc:  # re-raised in the main thread
            done.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    with tqdm(total=total, unit="tick", desc="processed", unit_scale=True) as bar:
        while waiter.is_alive():
            waiter.join(0.5)
            progress = session.progress("indicators")  # type: ignore[attr-defined]
            seen = progress.get("subgraph_0", {}).get("rows_in", 0)
            bar.update(max(seen - bar.n, 0))
            bar.set_postfix_str(_progress_text(progress))
        bar.update(total - bar.n)
    if done and done[0] is not None:
        raise done[0]


def _progress_text(progress: dict) -> str:
    return " ".join(f"{k}: batch {v['last_batch']} rows out {v['rows_out']}" for k, v in progress.items())


def add_demo_command(sub: argparse._SubParsersAction) -> None:
    from headwater.service.run import Help

    p = sub.add_parser("demo", help="run the 1-minute bars + indicators graph over a generated trading day",
                       formatter_class=Help)
    p.add_argument("--symbols", type=int, default=20, help="symbols in the generated market")
    p.add_argument("--ticks-per-minute", type=int, default=50, help="ticks per symbol and minute")
    p.add_argument("--chunk", type=int, default=50_000, help="ticks per append call")
    p.add_argument("--data-dir", type=storage_argument, default=None, help="where the demo's data goes (default: a new temporary directory)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the graph to catch up")
    p.add_argument("--keep", action="store_true", help="keep the graph, its tables and the data directory after the demo")
    p.set_defaults(func=demo)
