"""The seed demo: 1-minute OHLC bars and MACD/KDJ/EMA indicators over a trading day of ticks.

``headwater demo`` runs it; the test-suite and the benchmark reuse the graph and the data.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwater.api.graph import StreamGraph
from headwater.api.session import Session
from headwater.functions import ewm_mean, mmax, mmin, state

TRADE_SCHEMA = {"time": "timestamp", "symbol": "string", "price": "double", "volume": "long"}
BAR_METRICS = ["first(price) as open", "max(price) as high", "min(price) as low", "last(price) as close",
               "sum(volume) as volume"]


@state
def ewma(s, n):
    """The seed's EMA: ``ewmMean(S, span=N, adjust=false)``."""
    return ewm_mean(s, span=n, adjust=False)


@state
def macd(close, short=12, long=26, m=9):
    dif = ewma(close, short) - ewma(close, long)
    dea = ewma(dif, m)
    return round(dif, 3), round(dea, 3), round((dif - dea) * 2, 3)


@state
def kdj(close, high, low, n=9, m1=3, m2=3):
    rsv = (close - mmin(low, n)) / (mmax(high, n) - mmin(low, n)) * 100
    k = ewma(rsv, m1 * 2 - 1)
    d = ewma(k, m2 * 2 - 1)
    return k, d, k * 3 - d * 2


def indicator_metrics() -> list:
    return ["time", "high", "low", "close", "volume",
            ewma("close", 20).alias("ema20"), ewma("close", 60).alias("ema60"),
            macd("close").alias("dif", "dea", "macd"), kdj("close", "high", "low").alias("k", "d", "j")]


def build_indicator_graph(session: Session, name: str = "indicators") -> StreamGraph:
    """trade -> parallelize(symbol, 3) -> 1-min bars -> one_min_bar -> parallelize(symbol, 2) -> indicators."""
    g = session.stream_graph(name)
    (g.source("trade", schema=TRADE_SCHEMA)
       .parallelize("symbol", 3)
       .time_series_engine(window="60s", step="60s", time_column="time", key_column="symbol", metrics=BAR_METRICS)
       .sync()
       .buffer("one_min_bar")
       .parallelize("symbol", 2)
       .reactive_state_engine(key_column="symbol", metrics=indicator_metrics())
       .sync()
       .sink("one_min_indicators"))
    return g


def make_ticks(n_symbols: int = 20, minutes: int = 390, ticks_per_minute: int = 10, seed: int = 7) -> pd.DataFrame:
    """Random-walk ticks of a trading day (09:30 + ``minutes``), in time order across symbols."""
    rng = np.random.default_rng(seed)
    n = n_symbols * minutes * ticks_per_minute
    start = pd.Timestamp("2026-11-20 09:30:00")
    offsets = np.sort(rng.integers(0, minutes * 60_000_000, n))
    symbols = np.array([f"S{i:03d}" for i in range(n_symbols)])
    codes = rng.integers(0, n_symbols, n)
    base = 50 + 100 * rng.random(n_symbols)
    steps = rng.normal(0, 0.02, n)
    order = np.argsort(codes, kind="stable")
    walk = np.empty(n)
    walk[order] = np.concatenate([np.cumsum(steps[order][codes[order] == i]) for i in range(n_symbols)])
    price = np.round(base[codes] * np.exp(walk / 10), 2)
    return pd.DataFrame({"time": start + pd.to_timedelta(offsets, unit="us"), "symbol": symbols[codes],
                         "price": price, "volume": rng.integers(1, 5000, n).astype("int64")})
