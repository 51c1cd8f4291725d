"""Hostile rows through every engine (in-process data plane): NULL keys and times, NaN and ±inf values,
times at the ends of the timestamp range, duplicate and out-of-order times, empty and NUL-bearing keys.
Each engine runs them without a raw exception, and twice over the same appends gives the same rows
(apart from processing-time stamps)."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from tests.unit.test_engine_arguments import QUOTES, SOURCES, TRADES, VALID

T0 = pd.Timestamp("2026-11-25 09:30")
ODD_TIMES = [None, pd.Timestamp("1970-01-01"), pd.Timestamp("2262-04-01"), pd.Timestamp("1677-09-22"), T0, T0]


def hostile(schema: dict[str, str], rng: np.random.Generator, rows: int = 40) -> pd.DataFrame:
    times = [T0 + pd.Timedelta(seconds=int(x)) for x in rng.integers(-100, 100_000, rows)]
    for i in np.flatnonzero(rng.random(rows) < 0.2):
        times[i] = ODD_TIMES[rng.integers(len(ODD_TIMES))]
    frame = pd.DataFrame({"time": pd.Series(times, dtype="datetime64[us]"),
                          "sym": [None if rng.random() < 0.1 else str(rng.choice(["a", "b", "", "é\x00"]))
                                  for _ in range(rows)]})
    for column, kind in schema.items():
        if column in frame:
            continue
        if kind == "double":
            values = rng.normal(0, 1e3, rows)
            values[rng.random(rows) < 0.15] = np.nan
            values[rng.random(rows) < 0.05] = np.inf
            values[rng.random(rows) < 0.05] = -np.inf
            frame[column] = values
        elif kind == "bool":
            frame[column] = pd.array([None if rng.random() < 0.1 else bool(x) for x in rng.integers(0, 2, rows)],
                                     dtype="boolean")
        elif kind == "double[]":  # pairs of arrays (prices, quantities) have equal lengths: 2 each, or NULL
            frame[column] = [None if rng.random() < 0.1 else [float(rng.choice([np.nan, np.inf, 0.0, 1.5, -2.0])),
                                                              float(rng.normal(100, 5))] for _ in range(rows)]
        else:
            frame[column] = pd.array([None if rng.random() < 0.1 else int(x)
                                      for x in rng.integers(-2**62, 2**62, rows)], dtype="Int64")
    return frame


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("hostile"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_graphs = itertools.count()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf in a sum is NaN
@pytest.mark.parametrize("method", sorted(VALID))
@pytest.mark.parametrize("seed", [0, 1])
def test_hostile_rows_run_and_replay_identically(session, method, seed):
    rng = np.random.default_rng(seed)
    source = SOURCES.get(method, TRADES)
    inputs = {"trades": [hostile(source, rng), hostile(source, rng)]}
    if "join" in method:
        inputs["quotes"] = [hostile(QUOTES, rng), hostile(QUOTES, rng)]
    g = session.stream_graph(f"g{next(_graphs)}")
    left, right = g.source("trades", schema=source), g.source("quotes", schema=QUOTES)
    getattr(left, method)(*([right] if "join" in method else []), **VALID[method]).sink("out")
    first, again = g.run_local(inputs)["out"], g.run_local(inputs)["out"]
    if method == "cross_sectional_engine":  # per_batch triggers stamp rows with the batch's processing time
        first, again = first.drop(columns="time"), again.drop(columns="time")
    pd.testing.assert_frame_equal(first, again)
    assert len(first) > 0 or method in {"equal_join_engine", "time_bucket_engine", "cross_sectional_engine"}


def test_hostile_rows_into_a_change_log_are_refused_or_stored_as_written(session):
    """NULL keys are refused whole (nothing stored); NULL operations are upserts, stored as written with every
    NaN, inf and odd time; a change-log sink replays identically."""
    rng = np.random.default_rng(7)
    frame = hostile(TRADES, rng)
    frame.insert(0, "changelog_type", rng.choice(np.array(["N", "U", "D", None], dtype=object), len(frame)))
    assert frame["sym"].isna().any()
    g = session.stream_graph(f"g{next(_graphs)}")
    g.changelog_source("moves", "sym", TRADES).map(list(frame.columns)).changelog_sink("book", "sym")
    with pytest.raises(hw.SchemaError, match="key column 'sym' is NULL"):
        g.run_local({"moves": frame})
    kept = [frame[frame["sym"].notna()].iloc[:20], frame[frame["sym"].notna()].iloc[20:]]
    first, again = g.run_local({"moves": kept})["book"], g.run_local({"moves": kept})["book"]
    pd.testing.assert_frame_equal(first, again)
    want = pd.concat(kept, ignore_index=True)
    pd.testing.assert_frame_equal(first[list(want.columns)], want, check_dtype=False)
