"""Order book family: per-symbol books from a snapshot and Binance spot updates (``crypto_order_book_engine``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from engine_families.common import (
    ARROW,
    T0,
    WARM_ROWS,
    Family,
    Workload,
    chunks,
    names,
    parquet_sink,
    read_parquet_dir,
)

BOOK = {"time": "timestamp", "sym": "string", "incr": "bool", "first_id": "long", "last_id": "long",
        "bidPrice": "double[]", "bidQty": "double[]", "askPrice": "double[]", "askQty": "double[]"}
OUT = ["time", "sym", "bidPrice", "bidQty", "askPrice", "askQty"]
LEVELS = 5  # price levels an update sets a side


def book_rows(args: argparse.Namespace, warm: bool) -> pa.Table:
    """Each symbol's first row a 20-level snapshot (id 1000), then updates of ``LEVELS`` levels a side whose ids
    run on (``U = id + 1``); bids on a grid below 100, asks above (quantity 0 removes a level)."""
    rng = np.random.default_rng(args.seed + 80 + warm)
    n, k = (WARM_ROWS if warm else args.ob_rows), args.ob_symbols
    syms = names("S", k)[rng.integers(0, k, n)]
    seen: dict[str, int] = {}
    incr, first, last = np.ones(n, dtype=bool), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    sizes = np.full(n, LEVELS)
    for i, s in enumerate(syms.tolist()):
        if s not in seen:
            seen[s] = 1000
            incr[i], last[i], sizes[i] = False, 1000, 20
        else:
            step = 1 + (i % 3)
            first[i], last[i] = seen[s] + 1, seen[s] + step
            seen[s] += step

    def side(low: float) -> tuple[list[list[float]], list[list[float]]]:
        prices = [list(np.round(low + 0.01 * rng.integers(0, 400, m), 2)) for m in sizes]
        qtys = [list(rng.integers(0, 5, m).astype(float) * (1 + incr[i])) for i, m in enumerate(sizes)]
        return prices, qtys

    bid_p, bid_q = side(96.0)
    ask_p, ask_q = side(100.01)
    arrays = {"time": np.datetime64(T0, "us") + (np.arange(n) * args.ob_gap_us).astype("timedelta64[us]"),
              "sym": syms, "incr": incr, "first_id": first, "last_id": last, "bidPrice": bid_p, "bidQty": bid_q,
              "askPrice": ask_p, "askQty": ask_q}
    return pa.table(arrays, schema=pa.schema([(name, ARROW[kind]) for name, kind in BOOK.items()]))


def apply_levels(levels: dict[float, float], prices: Any, qtys: Any) -> None:
    for p, q in zip(prices, qtys, strict=True):
        if q == 0:
            levels.pop(float(p), None)
        else:
            levels[float(p)] = float(q)


def spot_books(rows: pd.DataFrame, depth: int) -> pd.DataFrame:
    """Binance's spot procedure, one row at a time in plain Python: a snapshot replaces the book, an update with
    ``U <= id + 1 <= u`` applies; each book made, its best ``depth`` levels."""
    books: dict[str, tuple[dict[float, float], dict[float, float], list[int]]] = {}
    out = []
    for r in rows.itertuples(index=False):
        bids, asks, at = books.setdefault(r.sym, ({}, {}, [0]))
        if not r.incr:
            bids.clear()
            asks.clear()
        elif not r.first_id <= at[0] + 1 <= r.last_id:
            continue
        apply_levels(bids, r.bidPrice, r.bidQty)
        apply_levels(asks, r.askPrice, r.askQty)
        at[0] = r.last_id
        best_bids, best_asks = sorted(bids, reverse=True)[:depth], sorted(asks)[:depth]
        out.append((r.time, r.sym, best_bids, [bids[p] for p in best_bids], best_asks, [asks[p] for p in best_asks]))
    return pd.DataFrame(out, columns=OUT)


def book_workload(args: argparse.Namespace, warm: bool) -> Workload:
    rows = book_rows(args, warm)
    reference = spot_books(rows.to_pandas(), args.ob_depth)
    return Workload({"depth": BOOK}, [("depth", c) for c in chunks(rows, args.chunk)], rows.num_rows, reference,
                    {"rows": rows.num_rows, "symbols": args.ob_symbols, "depth": args.ob_depth,
                     "row_gap_us": args.ob_gap_us, "levels_per_update": LEVELS, "outputs": len(reference)})


def book_graph(g: Any, p: str, w: Workload, tasks: int) -> None:
    src = g.source(f"{p}depth", schema=BOOK)
    if tasks > 1:
        src = src.parallelize("sym", tasks)
    (src.crypto_order_book_engine(input_col_map={"symbol": "sym", "isIncremental": "incr", "eventTime": "time",
                                                 "firstUpdateId": "first_id", "lastUpdateId": "last_id"},
                                  depth=w.params["depth"], update_rule="binance_spot")
        .sync().sink(f"{p}out"))


def book_spark(spark: Any, inputs: dict[str, Any], out: Path, ck: Path, w: Workload) -> tuple[list, Callable]:
    """``groupBy(sym).applyInPandasWithState``: each symbol's book (bids, asks, id) kept as JSON in Spark's
    state store, its rows of a micro-batch applied in id order by the same procedure as the pandas reference;
    append mode, Parquet sink."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    depth, columns = w.params["depth"], OUT

    def apply(levels: dict[float, float], prices: Any, qtys: Any) -> None:  # inside: the workers run a copy
        for p, q in zip(prices, qtys, strict=True):
            if q == 0:
                levels.pop(float(p), None)
            else:
                levels[float(p)] = float(q)

    schema = ("time timestamp, sym string, bidPrice array<double>, bidQty array<double>, askPrice array<double>, "
              "askQty array<double>")

    def step(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        saved = json.loads(state.get[0]) if state.exists else {"bids": [], "asks": [], "id": 0}
        bids, asks, at = dict(saved["bids"]), dict(saved["asks"]), saved["id"]
        rows = pd.concat(list(frames)).sort_values("last_id", kind="stable")  # ids rise: the order they came in
        out = []
        for r in rows.itertuples(index=False):
            if not r.incr:
                bids.clear()
                asks.clear()
            elif not r.first_id <= at + 1 <= r.last_id:
                continue
            apply(bids, r.bidPrice, r.bidQty)
            apply(asks, r.askPrice, r.askQty)
            at = int(r.last_id)
            best_bids, best_asks = sorted(bids, reverse=True)[:depth], sorted(asks)[:depth]
            out.append((r.time, r.sym, best_bids, [bids[p] for p in best_bids], best_asks,
                        [asks[p] for p in best_asks]))
        state.update((json.dumps({"bids": list(bids.items()), "asks": list(asks.items()), "id": at}),))
        yield pd.DataFrame(out, columns=columns)

    books = inputs["depth"].groupBy("sym").applyInPandasWithState(step, schema, "book string", "append",
                                                                     GroupStateTimeout.NoTimeout)
    return [parquet_sink(books, out, ck)], lambda: read_parquet_dir(out)


FAMILIES = [
    Family("order_book", "ob", "per-symbol order books (Binance spot ids), best 10 levels after each update",
           "groupBy(sym).applyInPandasWithState, the book as JSON state", None, ("sym", "time"), book_workload,
           book_graph, book_spark),
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ob-rows", type=int, default=1_000_000, help="order book: depth rows")
    p.add_argument("--ob-symbols", type=int, default=100)
    p.add_argument("--ob-depth", type=int, default=10, help="order book: levels output a side")
    p.add_argument("--ob-gap-us", type=int, default=1000, help="order book: µs between rows")


QUICK = {"ob_rows": 20_000, "ob_symbols": 20}  # smoke-run sizes (--quick)
