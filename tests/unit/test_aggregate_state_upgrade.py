"""State checkpointed before the aggregates library still restores: a window open across the upgrade
gives the same results as if the upgrade had not happened."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.dataplane.task import SEQ
from headwater.engines.daily_time_series import DailyTimeSeriesEngine
from headwater.kernels.windows import WindowAggregator, WindowSpec
from headwater.parse import parse_metric
from headwater.types import Schema

FUNCS = ["first", "last", "first_not", "last_not", "sum", "count", "std"]
nan = np.nan


def _as_written_before(state: dict, codes: list[str]) -> dict:
    """The time-series kernel's state as the code before the library wrote it (pane_seq per pane;
    first/last without count or arrival; first_not/last_not: arrival + 1 as count)."""
    old = {k: v.copy() for k, v in state.items() if k != "summaries"}
    acc_f, acc_i = old["acc_f"], old["acc_i"]
    pane_seq = np.zeros((len(old["init"]), 2, acc_i.shape[2]), np.int64)
    for a, func in enumerate(codes):
        if func in ("first", "last"):
            pane_seq[:, 0 if func == "first" else 1] = acc_f[:, a, 1]
            acc_i[:, a], acc_f[:, a, 1] = 0, 0.0
        elif func in ("first_not", "last_not"):
            acc_i[:, a] = np.where(acc_i[:, a] > 0, acc_f[:, a, 1] + 1, 0)
            acc_f[:, a, 1] = 0.0
    return {**old, "pane_seq": pane_seq}


def test_a_time_series_window_open_across_the_upgrade():
    agg = WindowAggregator(WindowSpec(window=120, step=60), FUNCS)
    first = (np.array([0, 0, 1]), np.array([10, 70, 75]), [np.array([nan, 2.0, 5.0])] * len(FUNCS))
    second = (np.array([0, 1, 0]), np.array([100, 130, 190]), [np.array([3.0, nan, 1.0])] * len(FUNCS))
    state, _ = agg.run(agg.init_state(), first[0], 2, first[1], first[2])
    _, want = agg.run(state, second[0], 2, second[1], second[2])
    _, got = agg.run(_as_written_before(state, FUNCS), second[0], 2, second[1], second[2])
    assert want.times.tolist() == got.times.tolist() and len(want.times) > 0
    for w, g in zip(want.values, got.values, strict=True):
        np.testing.assert_array_equal(w, g)


def test_a_calendar_window_open_across_the_upgrade():
    schema = Schema.parse({"t": "timestamp", "k": "string", "v": "double"})
    spec = DailyTimeSeriesEngine(
        name="up", input_schema=schema, window=dt.timedelta(minutes=1), step=dt.timedelta(minutes=1),
        metrics=tuple(parse_metric(f"{f}(v) as m_{f}") for f in ("first", "last", "sum", "count", "std")),
        time_column="t", key_column=("k",))
    p = spec.processor()

    def batch(times, values, seq0):
        return pa.table({"t": pa.array(pd.to_datetime(times), pa.timestamp("us")), "k": ["a"] * len(times),
                         "v": values, SEQ: list(range(seq0, seq0 + len(times)))})

    state, _ = p.process(p.new_state(), batch(["2026-01-05 09:31:01", "2026-01-05 09:31:02"], [None, 2.0], 0))
    later = batch(["2026-01-05 09:31:30", "2026-01-05 09:33:00"], [4.0, 1.0], 2)
    _, want = p.process(state, later)
    panes = dict(state["panes"])
    for i in range(5):  # the old partials: a float count of non-NULL values, no arrival for first/last
        n = panes.pop(f"n{i}")
        panes[f"y{i}"] = (n if i > 1 else np.ones_like(n)).astype(np.float64)
        if i <= 1:
            panes[f"z{i}"] = np.zeros(len(n))
    _, got = p.process({**state, "panes": panes}, later)
    assert want.num_rows == 1 and got.to_pylist() == want.to_pylist()
    assert want.to_pylist()[0]["m_first"] is None  # the window's first row is NULL, and first keeps it
