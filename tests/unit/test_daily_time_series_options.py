"""daily_time_series_engine's options shared with time_series_engine (force_trigger_time, use_system_time,
update_time, several windows, round_time): small worked examples and clear errors. The per-row reference,
for any split of the input into appends and after a kill, is in ``test_daily_time_series.py``."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

import headwater as hw
from headwater.dataplane.local import LocalRunner

_names = itertools.count()


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("daily_options"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def trades(*rows) -> pd.DataFrame:
    return pd.DataFrame({"time": pd.to_datetime([f"2026-01-05 {t}" for t, _, _ in rows]),
                         "sym": [s for _, s, _ in rows], "volume": [float(v) for _, _, v in rows]})


def bars(session, **kw):
    g = session.stream_graph(f"opt{next(_names)}")
    (g.source("trades", schema={"time": "timestamp", "sym": "string", "volume": "double"})
      .daily_time_series_engine(**{"window": "60s", "step": "60s", "metrics": ["sum(volume) as volume"],
                                   "time_column": "time", "key_column": "sym", "session_begin": ["09:30", "13:00"],
                                   "session_end": ["11:30", "15:00"], **kw})
      .sink("bars"))
    return g


def table(out: pd.DataFrame) -> list[tuple]:
    return [(t.strftime("%H:%M:%S"), sym, v) for t, sym, v in out.itertuples(index=False)]


def test_force_trigger_time_a_row_of_another_key_closes_a_quiet_keys_window(session, tmp_path):
    runner = LocalRunner(bars(session, force_trigger_time="15s").plan(), tmp_path)
    runner.append("trades", trades(("09:30:10", "A", 1), ("09:30:20", "B", 2), ("09:31:14", "B", 4)))
    runner.run_until_idle()
    assert table(runner.read("bars")) == [("09:31:00", "B", 2.0)]  # B's own row; A's window ended only 14 s ago
    # B at 09:31:15 forces A's [09:30, 09:31); A's 09:30:50 is then late; A's 09:31:20 closes nothing of its own
    runner.append("trades", trades(("09:31:15", "B", 8), ("09:30:50", "A", 16), ("09:31:20", "A", 32),
                                   ("09:32:00", "A", 64)))
    runner.run_until_idle()
    assert table(runner.read("bars"))[1:] == [("09:31:00", "A", 1.0), ("09:32:00", "A", 32.0)]
