"""The seed graph (1-minute bars -> indicators) and an independent pandas reference for it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headwater.demo import (  # noqa: F401  (re-exported for the tests)
    BAR_METRICS,
    TRADE_SCHEMA,
    build_indicator_graph,
    indicator_metrics,
    kdj,
    macd,
    make_ticks,
)


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
