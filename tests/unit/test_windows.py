"""Tests of the incremental per-key window aggregator against pandas and a naive raw-row model."""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headwater.errors import ExecutionError, GraphDefinitionError
from headwater.kernels import windows
from headwater.kernels.windows import AGGREGATES, WindowAggregator, WindowOutput, WindowSpec

SEC = 1_000_000  # times are microseconds
MIN = 60 * SEC
T0 = int(np.datetime64("2024-01-02T09:30:00", "us").astype(np.int64))


def us(hms: str) -> int:
    return int(np.datetime64(f"2024-01-02T{hms}", "us").astype(np.int64))


def run_batches(
    agg: WindowAggregator,
    slots: np.ndarray,
    times: np.ndarray,
    args: Sequence[np.ndarray],
    splits: Sequence[int] = (),
) -> tuple[dict[str, np.ndarray], WindowOutput]:
    """Feed the rows in batches cut at ``splits``, growing n_keys as a caller would."""
    state = agg.init_state()
    bounds = [0, *sorted(splits), len(times)]
    n_keys = 0
    parts: list[WindowOutput] = []
    for lo, hi in itertools.pairwise(bounds):
        if hi > lo:
            n_keys = max(n_keys, int(slots[lo:hi].max()) + 1)
        state, out = agg.run(state, slots[lo:hi], n_keys, times[lo:hi], [a[lo:hi] for a in args])
        out.trigger_rows = out.trigger_rows + lo
        parts.append(out)
    merged = WindowOutput(
        slots=np.concatenate([p.slots for p in parts]),
        times=np.concatenate([p.times for p in parts]),
        values=[np.concatenate([p.values[i] for p in parts]) for i in range(len(agg.aggregates))],
        trigger_rows=np.concatenate([p.trigger_rows for p in parts]),
        empty=np.concatenate([p.empty for p in parts]),
        final=np.concatenate([p.final for p in parts]),
    )
    return state, merged


def to_frame(out: WindowOutput, names: Sequence[str]) -> pd.DataFrame:
    df = pd.DataFrame({"key": out.slots, "time": out.times})
    for name, values in zip(names, out.values, strict=True):
        df[name] = values
    return df.sort_values(["key", "time"], kind="stable").reset_index(drop=True)


def assert_outputs_equal(a: WindowOutput, b: WindowOutput) -> None:
    np.testing.assert_array_equal(a.slots, b.slots)
    np.testing.assert_array_equal(a.times, b.times)
    np.testing.assert_array_equal(a.trigger_rows, b.trigger_rows)
    np.testing.assert_array_equal(a.empty, b.empty)
    np.testing.assert_array_equal(a.final, b.final)
    assert len(a.values) == len(b.values)
    for x, y in zip(a.values, b.values, strict=True):
        np.testing.assert_array_equal(x, y)  # NaN == NaN here; batching must not change a single bit


def assert_emission_order(out: WindowOutput) -> None:
    trig = out.trigger_rows
    assert np.all(np.diff(trig) >= 0)
    same = (np.diff(trig) == 0) & (np.diff(out.slots) == 0)
    assert np.all(np.diff(out.times)[same] > 0)


def market_data(n_rows: int = 3000, n_keys: int = 7, seed: int = 0, nan_share: float = 0.0) -> pd.DataFrame:
    """In-order ticks of several keys, with duplicate times and rows exactly on minute boundaries."""
    rng = np.random.default_rng(seed)
    gaps = rng.choice([0, SEC // 2, 3 * SEC, 17 * SEC, 90 * SEC], size=n_rows, p=[0.1, 0.4, 0.3, 0.15, 0.05])
    times = T0 + 7 * SEC + np.cumsum(gaps)
    on_boundary = rng.random(n_rows) < 0.05
    times = np.where(on_boundary, (times // MIN) * MIN, times)
    times = np.maximum.accumulate(times)
    price = np.round(100 + np.cumsum(rng.normal(0, 0.1, n_rows)), 2)
    price[rng.random(n_rows) < nan_share] = np.nan
    keys = rng.integers(0, n_keys, n_rows)
    return pd.DataFrame({"key": keys.astype(np.int64), "time": times.astype(np.int64), "price": price})


def pandas_windows(
    df: pd.DataFrame, *, window: int, step: int, closed: str, use_start: bool = False
) -> pd.DataFrame:
    """Independent reference: explode rows into their windows, group, drop never-closed windows."""
    pane = (df.time // step) if closed == "left" else ((df.time - 1) // step)
    m = window // step
    arrival = np.arange(len(df))
    parts = [df.assign(start=(pane - j) * step, arrival=arrival) for j in range(m)]
    # groupby keeps row order inside a group: sort by arrival so first/last follow it
    rows = pd.concat(parts, ignore_index=True).sort_values("arrival", kind="stable")
    g = rows.groupby(["key", "start"], sort=True).price
    res = pd.DataFrame(
        {
            "first": g.first(skipna=False),
            "max": g.max(),
            "min": g.min(),
            "last": g.last(skipna=False),
            "sum": g.sum(min_count=1),
            "count": g.count().astype(float),
            "avg": g.mean(),
            "std": g.std(ddof=1),
        }
    ).reset_index()
    end = res.start + window
    max_t = res.key.map(df.groupby("key").time.max())
    closed_windows = (end <= max_t) if closed == "left" else (end < max_t)
    res = res[closed_windows.to_numpy()].copy()
    res.insert(1, "time", res.start if use_start else res.start + window)
    return res.drop(columns="start").reset_index(drop=True)


PANDAS_AGGS = ["first", "max", "min", "last", "sum", "count", "avg", "std"]


def run_frame(df: pd.DataFrame, spec: WindowSpec, splits: Sequence[int] = ()) -> pd.DataFrame:
    agg = WindowAggregator(spec, PANDAS_AGGS)
    price = df.price.to_numpy(np.float64)
    _, out = run_batches(agg, df.key.to_numpy(), df.time.to_numpy(), [price] * len(PANDAS_AGGS), splits)
    assert_emission_order(out)
    return to_frame(out, PANDAS_AGGS)


def test_accepted_delay_doc_example() -> None:
    spec = WindowSpec(window=MIN, step=MIN, accepted_delay=5 * SEC)
    agg = WindowAggregator(spec, ["sum", "count"])
    times = np.array([us(h) for h in ("10:00:10", "10:00:40", "10:01:02", "10:00:55", "10:01:06")])
    values = np.array([10.0, 20.0, 1.0, 30.0, 2.0])
    for splits in ([], [1], [2, 3], [4], [1, 2, 3, 4]):
        _, out = run_batches(agg, np.zeros(5, dtype=np.int64), times, [values, values], splits)
        assert out.times.tolist() == [us("10:01:00")]
        assert out.values[0].tolist() == [60.0]
        assert out.values[1].tolist() == [3.0]
        assert out.trigger_rows.tolist() == [4]  # emitted by 10:01:06, not by 10:01:02


def test_without_delay_late_row_is_dropped() -> None:
    agg = WindowAggregator(WindowSpec(window=MIN, step=MIN), ["sum"])
    times = np.array([us(h) for h in ("10:00:10", "10:00:40", "10:01:02", "10:00:55", "10:02:06")])
    values = np.array([10.0, 20.0, 1.0, 30.0, 2.0])
    _, out = run_batches(agg, np.zeros(5, dtype=np.int64), times, [values])
    assert out.times.tolist() == [us("10:01:00"), us("10:02:00")]
    assert out.values[0].tolist() == [30.0, 1.0]
    assert out.trigger_rows.tolist() == [2, 4]


@pytest.mark.parametrize("closed", ["left", "right"])
@pytest.mark.parametrize("use_start", [False, True])
def test_one_minute_ohlc_matches_pandas(closed: str, use_start: bool) -> None:
    df = market_data(seed=1)
    spec = WindowSpec(window=MIN, step=MIN, closed=closed, use_window_start_time=use_start)
    expected = pandas_windows(df, window=MIN, step=MIN, closed=closed, use_start=use_start)
    assert len(expected) > 100
    for splits in ([], [1, 500, 501, 2999], list(range(0, 3000, 97))):
        got = run_frame(df, spec, splits)
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, rtol=1e-9)


def test_boundary_row_goes_to_next_window_left_and_previous_right() -> None:
    times = np.array([us("10:00:30"), us("10:01:00"), us("10:01:30"), us("10:02:30")])
    values = np.array([1.0, 2.0, 4.0, 8.0])
    slots = np.zeros(4, dtype=np.int64)
    left = WindowAggregator(WindowSpec(window=MIN, step=MIN), ["sum"])
    _, out = run_batches(left, slots, times, [values])
    assert out.times.tolist() == [us("10:01:00"), us("10:02:00")]
    assert out.values[0].tolist() == [1.0, 6.0]
    assert out.trigger_rows.tolist() == [1, 3]
    right = WindowAggregator(WindowSpec(window=MIN, step=MIN, closed="right"), ["sum"])
    _, out = run_batches(right, slots, times, [values])
    assert out.times.tolist() == [us("10:01:00"), us("10:02:00")]
    assert out.values[0].tolist() == [3.0, 4.0]
    assert out.trigger_rows.tolist() == [2, 3]


def test_ohlc_with_nulls_matches_pandas() -> None:
    df = market_data(seed=2, nan_share=0.3)
    expected = pandas_windows(df, window=MIN, step=MIN, closed="left")
    assert expected["sum"].isna().any() and expected["first"].isna().any()
    got = run_frame(df, WindowSpec(window=MIN, step=MIN), [700, 1400])
    pd.testing.assert_frame_equal(got, expected, check_dtype=False, rtol=1e-9)


@pytest.mark.parametrize("closed", ["left", "right"])
def test_sliding_window_matches_pandas(closed: str) -> None:
    df = market_data(seed=3, nan_share=0.05)
    spec = WindowSpec(window=2 * MIN, step=MIN, closed=closed)
    expected = pandas_windows(df, window=2 * MIN, step=MIN, closed=closed)
    for splits in ([], [1000, 1001, 2500]):
        got = run_frame(df, spec, splits)
        pd.testing.assert_frame_equal(got, expected, check_dtype=False, rtol=1e-9)


def test_sliding_window_first_output_holds_first_row() -> None:
    agg = WindowAggregator(WindowSpec(window=3 * MIN, step=MIN), ["count", "first"])
    times = np.array([us("10:00:30"), us("10:01:30"), us("10:03:10")])
    values = np.array([1.0, 2.0, 3.0])
    _, out = run_batches(agg, np.zeros(3, dtype=np.int64), times, [values, values])
    # windows [09:58, 10:01), [09:59, 10:02), [10:00, 10:03)
    assert out.times.tolist() == [us("10:01:00"), us("10:02:00"), us("10:03:00")]
    assert out.values[0].tolist() == [1.0, 2.0, 2.0]
    assert out.values[1].tolist() == [1.0, 1.0, 1.0]
    assert out.trigger_rows.tolist() == [1, 2, 2]


@pytest.mark.parametrize("fill", ["null", "ffill", -1.5, 0])
@pytest.mark.parametrize("window", [MIN, 2 * MIN])
def test_fill_matches_pandas(fill: str | float, window: int) -> None:
    df = market_data(seed=4, n_rows=1500, nan_share=0.1)
    expected = pandas_windows(df, window=window, step=MIN, closed="left")
    expected["time"] = expected.time.astype(np.int64)
    max_t = df.groupby("key").time.max()
    filled = []
    for key, part in expected.groupby("key"):
        # from the key's first window (never empty) to the last one its last row closed
        full = np.arange(part.time.min(), (max_t[key] // MIN) * MIN + 1, MIN)
        part = part.set_index("time")
        if fill == "ffill":
            part = part.reindex(full, method="ffill")
        else:
            part = part.reindex(full)
            value = math.nan if fill == "null" else float(fill)
            empty = ~np.isin(full, expected.time[expected.key == key])
            part.loc[empty, PANDAS_AGGS] = value
        part["key"] = key
        filled.append(part.rename_axis("time").reset_index())
    reference = pd.concat(filled, ignore_index=True)[["key", "time", *PANDAS_AGGS]]
    assert len(reference) > len(expected)
    got = run_frame(df, WindowSpec(window=window, step=MIN, fill=fill), [300, 301, 900])
    pd.testing.assert_frame_equal(got, reference, check_dtype=False, rtol=1e-9)


def test_fill_none_skips_long_gap_quickly() -> None:
    agg = WindowAggregator(WindowSpec(window=2, step=1, fill="none"), ["sum"])
    times = np.array([0, 1, 10**15, 10**15 + 5])
    _, out = run_batches(agg, np.zeros(4, dtype=np.int64), times, [np.ones(4)])
    assert out.times.tolist() == [1, 2, 3, 10**15 + 1, 10**15 + 2]
    assert out.values[0].tolist() == [1.0, 2.0, 1.0, 1.0, 1.0]


def test_one_row_closing_thousands_of_windows_grows_the_output() -> None:
    spec = WindowSpec(window=3, step=1, fill="ffill")
    agg = WindowAggregator(spec, ["sum", "last"])
    slots = np.array([0, 1, 0, 1, 0])
    times = np.array([0, 0, 1, 5000, 5000])
    values = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    _, out = run_batches(agg, slots, times, [values, values])
    assert len(out) == 2 * 5000
    assert out.trigger_rows.tolist() == [2] + [3] * 5000 + [4] * 4999
    assert out.values[0][:4].tolist() == [1.0, 2.0, 2.0, 2.0]
    assert out.values[0][5001:5005].tolist() == [5.0, 5.0, 4.0, 4.0]  # [-1, 2), [0, 3), [1, 4), ffill
    naive = naive_windows(spec, agg.aggregates, slots, times, values)
    assert_outputs_equal(out, naive)


def test_a_micro_batch_emits_up_to_the_output_limit_and_a_row_past_it_fails_before_the_buffers_grow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "MAX_OUTPUT_WINDOWS", 1000)
    agg = WindowAggregator(WindowSpec(window=1, step=1, fill="null"), ["sum"])
    one = np.zeros(2, dtype=np.int64)
    _, out = run_batches(agg, one, np.array([0, 1000]), [np.ones(2)])  # [0, 1) ... [999, 1000): the limit
    assert len(out) == 1000
    runs: list[int] = []
    kernel = windows._run_kernel
    monkeypatch.setattr(windows, "_run_kernel", lambda *a: runs.append(1) or kernel(*a))
    with pytest.raises(ExecutionError, match="would emit more than 1,000 windows"):
        run_batches(agg, one, np.array([0, 10**15]), [np.ones(2)])  # a time far past the key's rows
    assert len(runs) == 1  # refused when its first buffers filled, not after growing them to the limit (17 s and
    # GiBs at the real one)
    with pytest.raises(ExecutionError, match="would emit more than 1,000 windows"):  # each key fits, not both
        run_batches(agg, np.array([0, 1, 0, 1]), np.array([0, 0, 600, 600]), [np.ones(4)])


def test_fill_emits_only_between_first_window_and_trigger() -> None:
    agg = WindowAggregator(WindowSpec(window=10, step=10, fill="null"), ["count", "sum"])
    slots = np.array([0, 1, 0, 1])
    times = np.array([5, 33, 42, 47])
    values = np.array([1.0, 2.0, 3.0, 4.0])
    _, out = run_batches(agg, slots, times, [values, values])
    # key 1 starts at [30, 40): nothing is filled before its first window
    assert out.slots.tolist() == [0, 0, 0, 0, 1]
    assert out.times.tolist() == [10, 20, 30, 40, 40]
    # DolphinDB fills count with NULL too
    np.testing.assert_array_equal(out.values[0], [1.0, np.nan, np.nan, np.nan, 1.0])
    assert out.trigger_rows.tolist() == [2, 2, 2, 2, 3]


def test_nulls_are_skipped() -> None:
    aggs = list(AGGREGATES)
    agg = WindowAggregator(WindowSpec(window=10, step=10), aggs)
    times = np.array([1, 2, 3, 4, 11, 12, 20])
    values = np.array([np.nan, 2.0, 4.0, np.nan, np.nan, np.nan, 0.0])
    _, out = run_batches(agg, np.zeros(7, dtype=np.int64), times, [values] * len(aggs))
    got = {name: out.values[i].tolist() for i, name in enumerate(aggs)}
    nan = math.nan
    expected = {
        "first": [nan, nan],
        "last": [nan, nan],
        "max": [4.0, nan],
        "min": [2.0, nan],
        "sum": [6.0, nan],
        "count": [2.0, 0.0],
        "avg": [3.0, nan],
        "std": [math.sqrt(2.0), nan],
        "var": [2.0, nan],
        "stdp": [1.0, nan],
        "varp": [1.0, nan],
        "sum2": [20.0, nan],
        "first_not": [2.0, nan],
        "prod": [8.0, nan],
        "last_not": [4.0, nan],
    }
    for name in aggs:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_state_is_not_modified_and_pickles() -> None:
    agg = WindowAggregator(WindowSpec(window=2 * MIN, step=MIN, accepted_delay=SEC), ["sum", "first"])
    df = market_data(seed=5, n_rows=400)
    slots, times, price = df.key.to_numpy(), df.time.to_numpy(), df.price.to_numpy()
    n_keys = int(slots.max()) + 1
    state, _ = agg.run(agg.init_state(), slots[:200], n_keys, times[:200], [price[:200]] * 2)
    snapshot = pickle.loads(pickle.dumps(state))
    _, out1 = agg.run(state, slots[200:], n_keys, times[200:], [price[200:]] * 2)
    for name, arr in snapshot.items():
        np.testing.assert_array_equal(state[name], arr)
    _, out2 = agg.run(snapshot, slots[200:], n_keys, times[200:], [price[200:]] * 2)
    assert_outputs_equal(out1, out2)
    assert all(arr.shape[0] == n_keys for arr in state.values())
    assert all(arr.shape[0] == 0 for arr in agg.init_state().values())


def test_state_grows_to_n_keys() -> None:
    agg = WindowAggregator(WindowSpec(window=10, step=10), ["count"])
    state, _ = agg.run(agg.init_state(), np.array([0]), 1, np.array([1]), [np.ones(1)])
    state, out = agg.run(state, np.array([3, 0]), 5, np.array([2, 15]), [np.ones(2)])
    assert len(state["init"]) == 5
    assert out.slots.tolist() == [0] and out.values[0].tolist() == [1.0]


def test_empty_batch() -> None:
    agg = WindowAggregator(WindowSpec(window=10, step=5), ["sum", "count"])
    _state, out = agg.run(
        agg.init_state(), np.empty(0, np.int64), 0, np.empty(0, np.int64), [np.empty(0)] * 2
    )
    assert len(out) == 0 and len(out.values) == 2 and out.times.dtype == np.int64


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"window": 90, "step": 60}, "window 90 must be a multiple of step 60"),
        ({"window": 0, "step": 60}, "window must be a positive integer"),
        ({"window": 60, "step": 60, "closed": "both"}, "'left', 'right'"),
        ({"window": 60, "step": 60, "accepted_delay": -1}, "accepted_delay"),
        ({"window": 60, "step": 60, "fill": "prev"}, "'none', 'null', 'ffill'"),
        ({"window": 60, "step": 60, "fill": True}, "or a number"),
        ({"window": 60, "step": 60, "align": 0}, "align"),
        ({"window": 100_001, "step": 1}, "span 100,001 steps, over the limit of 100,000"),
        ({"window": 60, "step": 1, "accepted_delay": 99_941}, "span 100,001 steps"),
    ],
)
def test_spec_validation(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as info:
        WindowSpec(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, GraphDefinitionError)


def test_unknown_aggregate_lists_choices() -> None:
    with pytest.raises(GraphDefinitionError, match="expected one of first, last"):
        WindowAggregator(WindowSpec(window=60, step=60), ["sum", "median"])


def test_run_argument_errors() -> None:
    agg = WindowAggregator(WindowSpec(window=10, step=10), ["sum"])
    state = agg.init_state()
    with pytest.raises(ValueError, match="1 aggregates"):
        agg.run(state, np.array([0]), 1, np.array([1]), [])
    with pytest.raises(ValueError, match="n_keys=1"):
        agg.run(state, np.array([1]), 1, np.array([1]), [np.ones(1)])
    other = WindowAggregator(WindowSpec(window=20, step=10), ["sum"])
    with pytest.raises(ValueError, match="another spec"):
        agg.run(
            other.run(other.init_state(), np.array([0]), 1, np.array([1]), [np.ones(1)])[0],
            np.array([0]),
            1,
            np.array([2]),
            [np.ones(1)],
        )


# ---------------------------------------------------------------------------------------------
# Property: any batch split gives the output of one batch, which matches a naive raw-row model.


def naive_windows(
    spec: WindowSpec,
    aggs: Sequence[str],
    slots: np.ndarray,
    times: np.ndarray,
    values: np.ndarray,
    splits: Sequence[int] = (),
) -> WindowOutput:
    """Keep every accepted row; at each trigger recompute the closing windows from scratch.

    ``splits`` (batch boundaries) matter only with ``update=0``, which emits open windows at each batch's end.
    """
    w, step, d = spec.window, spec.step, spec.accepted_delay
    left = spec.closed == "left"
    align = spec.align or step
    lo, hi = spec.sub_window or (0, w)
    ends = {b - 1 for b in splits if 0 < b < len(times)} | {len(times) - 1}

    def inside(t: int, s: int) -> bool:
        return s <= t < s + w if left else s < t <= s + w

    def in_sub(t: int, s: int) -> bool:
        return s + lo <= t < s + hi if left else s + lo < t <= s + hi

    def closes(t: int, s: int) -> bool:
        return t >= s + hi + d if left else t > s + hi + d

    keys: dict[int, dict] = {}
    out: list[tuple[int, int, int, list[float], bool, bool]] = []

    def label(key: dict) -> int:
        return key["start"] if spec.use_window_start_time else key["start"] + w

    def window_rows(key: dict) -> list[float]:
        return [v for (tt, v) in key["rows"] if inside(tt, key["start"]) and in_sub(tt, key["start"])]

    def close(k: int, key: dict, i: int) -> None:
        vals = window_rows(key)
        if vals:
            res = [naive_aggregate(a, np.array(vals)) for a in aggs]
        elif spec.fill == "none":
            res = None
        elif spec.fill == "null":
            res = [math.nan] * len(aggs)
        elif spec.fill == "ffill":
            res = list(key["last"])
        else:
            res = [float(spec.fill)] * len(aggs)
        if res is not None:
            key["last"] = res
            out.append((k, label(key), i, res, not vals, True))
        key["pending"] = False
        key["start"] += step

    for i, (k, t) in enumerate(zip(slots.tolist(), times.tolist(), strict=True)):
        if spec.force_trigger is not None:
            for k2, other in keys.items():
                while k2 != k and t - spec.force_trigger >= other["start"] + hi:
                    close(k2, other, i)
        if k not in keys:
            x = t if left else t - 1
            start = (x // align) * align + step - w
            while not inside(t, start):
                start += step
            keys[k] = {"start": start, "rows": [], "last": [math.nan] * len(aggs), "pending": False, "mark": 0}
        key = keys[k]
        while closes(t, key["start"]):
            close(k, key, i)
        offset = (t if left else t - 1) - key["start"]
        if spec.update and key["pending"] and offset >= 0 and offset // spec.update > key["mark"]:
            out.append((k, label(key), i, [naive_aggregate(a, np.array(window_rows(key))) for a in aggs],
                        False, False))
            key["pending"] = False
        if (t >= key["start"]) if left else (t > key["start"]):
            key["rows"].append((t, values[i]))
            if in_sub(t, key["start"] + (offset // step) * step):
                key["pending"] = True
                key["mark"] = offset // (spec.update or 1)
        if spec.update == 0 and i in ends:
            for k2, other in keys.items():
                if other["pending"]:
                    out.append((k2, label(other), i,
                                [naive_aggregate(a, np.array(window_rows(other))) for a in aggs], False, False))
                    other["pending"] = False
    return WindowOutput(
        slots=np.array([o[0] for o in out], dtype=np.int64),
        times=np.array([o[1] for o in out], dtype=np.int64),
        values=[np.array([o[3][j] for o in out], dtype=np.float64) for j in range(len(aggs))],
        trigger_rows=np.array([o[2] for o in out], dtype=np.int64),
        empty=np.array([o[4] for o in out], dtype=np.bool_),
        final=np.array([o[5] for o in out], dtype=np.bool_),
    )


def naive_aggregate(name: str, vals: np.ndarray) -> float:
    nn = vals[~np.isnan(vals)]
    if name == "first":
        return float(vals[0])
    if name == "last":
        return float(vals[-1])
    if name == "count":
        return float(len(nn))
    if len(nn) == 0:
        return math.nan
    if name in ("std", "var") and len(nn) < 2:
        return math.nan
    return float(
        {
            "max": np.max,
            "min": np.min,
            "sum": np.sum,
            "avg": np.mean,
            "std": lambda v: np.std(v, ddof=1),
            "var": lambda v: np.var(v, ddof=1),
            "stdp": np.std,
            "varp": np.var,
            "sum2": lambda v: np.sum(v * v),
            "prod": np.prod,
            "first_not": lambda v: v[0],
            "last_not": lambda v: v[-1],
        }[name](nn)
    )


@st.composite
def window_cases(draw: st.DrawFn) -> tuple[WindowSpec, np.ndarray, np.ndarray, np.ndarray, list[int]]:
    step = draw(st.integers(1, 5))
    window = step * draw(st.integers(1, 3))
    mode = draw(st.sampled_from(["plain", "plain", "force", "update", "sub"]))
    triggers: dict = {"accepted_delay": draw(st.sampled_from([0, 0, 1, 3, 7]))}
    if mode == "force":
        triggers = {"force_trigger": draw(st.integers(0, 8))}
    elif mode == "update":
        step = window = draw(st.integers(1, 6))
        triggers = {"update": draw(st.sampled_from([0, *[u for u in range(1, step + 1) if step % u == 0]]))}
    elif mode == "sub":
        step = window = draw(st.integers(2, 8))
        lo = draw(st.integers(0, window - 1))
        triggers["sub_window"] = (lo, draw(st.integers(lo + 1, window)))
    spec = WindowSpec(
        window=window,
        step=step,
        closed=draw(st.sampled_from(["left", "right"])),
        use_window_start_time=draw(st.booleans()),
        fill=draw(st.sampled_from(["none", "none", "null", "ffill", -2.5])),
        align=draw(st.sampled_from([None, None, 1, 2, 3, 8])),
        **triggers,
    )
    n_keys = draw(st.integers(1, 4))
    late = draw(st.booleans())  # out-of-order rows per key, exercising accepted_delay and drops
    rows = draw(
        st.lists(
            st.tuples(
                st.integers(0, n_keys - 1),
                st.integers(-4 if late else 0, 6),
                st.one_of(st.just(math.nan), st.integers(-50, 50).map(float), st.floats(-1e3, 1e3)),
            ),
            max_size=60,
        )
    )
    start = draw(st.integers(-30, 30))
    clock: dict[int, int] = {}
    order: dict[int, int] = {}
    slots, times, values = [], [], []
    for key, dt, value in rows:
        clock[key] = clock.get(key, start) + dt
        slots.append(order.setdefault(key, len(order)))  # slots handed out on first sight, like the caller
        times.append(clock[key])
        values.append(value)
    splits = draw(st.lists(st.integers(0, len(rows)), max_size=5))
    return (
        spec,
        np.array(slots, dtype=np.int64),
        np.array(times, dtype=np.int64),
        np.array(values, dtype=np.float64),
        splits,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window_cases())
def test_batched_equals_one_shot_and_naive_model(
    case: tuple[WindowSpec, np.ndarray, np.ndarray, np.ndarray, list[int]],
) -> None:
    spec, slots, times, values, splits = case
    aggs = list(AGGREGATES)
    agg = WindowAggregator(spec, aggs)
    args = [values] * len(aggs)
    _, one_shot = run_batches(agg, slots, times, args)
    _, batched = run_batches(agg, slots, times, args, splits)
    if spec.update == 0:  # emits each batch's open windows: the split is part of the input
        assert_matches_naive(batched, naive_windows(spec, aggs, slots, times, values, splits), aggs)
    else:
        assert_outputs_equal(batched, one_shot)
    assert_emission_order(one_shot)
    assert_matches_naive(one_shot, naive_windows(spec, aggs, slots, times, values), aggs)


def assert_matches_naive(got: WindowOutput, naive: WindowOutput, aggs: Sequence[str]) -> None:
    np.testing.assert_array_equal(got.slots, naive.slots)
    np.testing.assert_array_equal(got.times, naive.times)
    np.testing.assert_array_equal(got.trigger_rows, naive.trigger_rows)
    np.testing.assert_array_equal(got.empty, naive.empty)
    np.testing.assert_array_equal(got.final, naive.final)
    for name, g, want in zip(aggs, got.values, naive.values, strict=True):
        np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-9, err_msg=name)
