"""The seed graph (1-minute bars -> indicators) and an independent pandas reference for it."""

from __future__ import annotations

import numpy as np
import pandas as pd

import headwater as hw
from headwater import state
from headwater.functions import ewm_mean, mmax, mmin

TRADE_SCHEMA = {"time": "timestamp", "symbol": "string", "price": "double", "volume": "long"}


@state
def ewma(s, n):
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


BAR_METRICS = ["first(price) as open", "max(price) as high", "min(price) as low", "last(price) as close",
               "sum(volume) as volume"]


def indicator_metrics() -> list:
    return ["time", "high", "low", "close", "volume",
            ewma("close", 20).alias("ema20"), ewma("close", 60).alias("ema60"),
            macd("close").alias("dif", "dea", "macd"), kdj("close", "high", "low").alias("k", "d", "j")]


def build_indicator_graph(session: hw.Session, name: str = "indicators") -> hw.StreamGraph:
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
    """Random-walk ticks of a trading day, in time order across symbols (as an exchange feed)."""
    rng = np.random.default_rng(seed)
    n = n_symbols * minutes * ticks_per_minute
    start = pd.Timestamp("2026-11-20 09:30:00")
    offsets = np.sort(rng.integers(0, minutes * 60_000_000, n))
    symbols = np.array([f"S{i:03d}" for i in range(n_symbols)])
    sym = symbols[rng.integers(0, n_symbols, n)]
    base = 50 + 100 * rng.random(n_symbols)
    steps = rng.normal(0, 0.02, n)
    price = np.empty(n)
    for i, s in enumerate(symbols):
        mask = sym == s
        price[mask] = np.round(base[i] * np.exp(np.cumsum(steps[mask]) / 10), 2)
    return pd.DataFrame({"time": start + pd.to_timedelta(offsets, unit="us"), "symbol": sym,
                         "price": price, "volume": rng.integers(1, 5000, n).astype("int64")})


def reference_bars(ticks: pd.DataFrame) -> pd.DataFrame:
    """1-minute left-closed bars, time = window end; each symbol's last window never closes."""
    t = ticks.copy()
    t["time"] = t["time"].dt.floor("60s") + pd.Timedelta("60s")
    bars = t.groupby(["symbol", "time"], sort=True).agg(
        open=("price", "first"), high=("price", "max"), low=("price", "min"), close=("price", "last"),
        volume=("volume", "sum")).reset_index()
    last = bars.groupby("symbol")["time"].transform("max")
    return bars[bars["time"] < last].reset_index(drop=True)[["time", "symbol", "open", "high", "low", "close", "volume"]]


def _round(x: pd.Series, digits: int) -> pd.Series:
    scale = 10.0**digits
    return np.sign(x) * np.floor(np.abs(x) * scale + 0.5) / scale  # DolphinDB rounds half away from zero


def reference_indicators(bars: pd.DataFrame) -> pd.DataFrame:
    """The indicator formulas, written directly in pandas per symbol."""
    out = []
    for sym, b in bars.sort_values(["symbol", "time"]).groupby("symbol", sort=True):
        c, h, low = b["close"], b["high"], b["low"]

        def ema(s: pd.Series, n: int) -> pd.Series:
            return s.ewm(span=n, adjust=False).mean()

        dif = ema(c, 12) - ema(c, 26)
        dea = ema(dif, 9)
        llv, hhv = low.rolling(9).min(), h.rolling(9).max()
        rsv = ((c - llv) / (hhv - llv) * 100).replace([np.inf, -np.inf], np.nan)
        k = ema(rsv, 5)
        d = ema(k, 5)
        out.append(pd.DataFrame({
            "symbol": sym, "time": b["time"], "high": h, "low": low, "close": c, "volume": b["volume"],
            "ema20": ema(c, 20), "ema60": ema(c, 60), "dif": _round(dif, 3), "dea": _round(dea, 3),
            "macd": _round((dif - dea) * 2, 3), "k": k, "d": d, "j": k * 3 - d * 2}))
    return pd.concat(out, ignore_index=True)


def assert_frames_match(got: pd.DataFrame, want: pd.DataFrame, keys: list[str]) -> None:
    """Same rows (no loss, no duplicate), same values (floats to 1e-9 relative)."""
    assert list(got.columns) == list(want.columns), (list(got.columns), list(want.columns))
    assert len(got) == len(want), f"{len(got)} rows, expected {len(want)}"
    assert not got.duplicated(keys).any(), "duplicated rows"
    g = got.sort_values(keys).reset_index(drop=True)
    w = want.sort_values(keys).reset_index(drop=True)
    pd.testing.assert_frame_equal(g, w, check_dtype=False, rtol=1e-9, atol=1e-9)
