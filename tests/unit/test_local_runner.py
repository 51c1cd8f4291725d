"""The in-process runner drives the same data plane as Spark: whole graphs, streaming == batch for any split
of the input into appends and any crash-and-replay point, against the independent pandas reference."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.plan.logical import ComputeNode, EngineNode, MapNode
from headwater.storage.table_log import read_batch
from tests.support.indicators import (
    assert_frames_match,
    build_indicator_graph,
    make_ticks,
    reference_bars,
    reference_indicators,
)

TICKS = make_ticks(n_symbols=4, minutes=60, ticks_per_minute=3, seed=7)
BARS = reference_bars(TICKS)
INDICATORS = reference_indicators(BARS)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    session = hw.connect(tmp_path_factory.mktemp("local"), start_spark=False)
    session.use_catalog("demo")
    yield build_indicator_graph(session)
    session.close()


def test_the_seed_graph_runs_locally_and_equals_the_pandas_reference(graph):
    out = graph.run_local({"trade": TICKS})
    assert set(out) == {"one_min_bar", "one_min_indicators"}
    assert_frames_match(out["one_min_bar"], BARS, ["symbol", "time"])
    assert_frames_match(out["one_min_indicators"], INDICATORS, ["symbol", "time"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, len(TICKS) - 1), max_size=6, unique=True),
       crashes=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 3)), max_size=3))
def test_streaming_equals_batch_for_any_split_and_crash(graph, cuts, crashes):
    """Appends cut anywhere; at random micro-batches the process 'dies' after k tasks and replays."""
    bounds = [0, *sorted(cuts), len(TICKS)]
    crash_at = dict(crashes)  # append index -> tasks that run before the crash
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(graph.plan(), Path(tmp))
        for i, (a, b) in enumerate(itertools.pairwise(bounds)):
            runner.append("trade", TICKS.iloc[a:b])
            if i in crash_at:
                runner.step(crash_after_tasks=crash_at[i])
            runner.step()
        runner.run_until_idle()
        assert_frames_match(runner.read("one_min_bar"), BARS, ["symbol", "time"])
        assert_frames_match(runner.read("one_min_indicators"), INDICATORS, ["symbol", "time"])


def test_maps_and_filters_run_locally_with_the_documented_rules(graph):
    session = graph._session
    g = session.stream_graph("rules")
    (g.source("t", schema={"k": "string", "x": "double"})
       .map(["k", "x", "x % 3 as m"], where="x < 5")
       .parallelize("k", 2)
       .reactive_state_engine(key_column="k", metrics=["x", "m", "cumcount(x) as n"]).sync().sink("o"))
    out = g.run_local({"t": [pd.DataFrame({"k": ["a", "b", None], "x": [-7.0, None, 1.0]}),
                             pd.DataFrame({"k": ["a", "a"], "x": [9.0, 4.0]})]})["o"]
    # NULL x passes x < 5 (NULL is the smallest value); the NULL key is dropped; -7 % 3 == 2
    got = out.sort_values(["k", "n"]).reset_index(drop=True)
    assert got["k"].tolist() == ["a", "a", "b"]
    np.testing.assert_allclose(got["m"], [2.0, 1.0, np.nan], equal_nan=True)
    assert got["n"].tolist() == [1, 2, 0]


def test_every_compute_node_kind_runs_in_the_data_plane():
    # SubgraphTask.run_task runs EngineNodes through their processor and MapNodes through apply_map;
    # a new kind of compute node must be added there before this list.
    assert set(ComputeNode.__subclasses__()) == {EngineNode, MapNode}


def test_unknown_input_table_is_a_clear_error(graph):
    with pytest.raises(hw.GraphDefinitionError, match="no table named 'nope'"):
        graph.run_local({"nope": TICKS})


def test_compacting_the_source_mid_stream_changes_nothing(graph):
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(graph.plan(), Path(tmp))
        parts = np.array_split(np.arange(len(TICKS)), 6)
        for i, idx in enumerate(parts):
            runner.append("trade", TICKS.iloc[idx])
            if i == 3:
                assert runner.tables["trade"].compact() is not None  # a rewrite commit the readers skip
            runner.step()
        runner.run_until_idle()
        assert_frames_match(runner.read("one_min_bar"), BARS, ["symbol", "time"])
        assert_frames_match(runner.read("one_min_indicators"), INDICATORS, ["symbol", "time"])


def test_a_batch_replayed_with_other_task_groups_commits_each_row_once(graph):
    """Crashed attempts ran the batch's tasks in groups (tasks t..n-1, as the driver runs a small batch or
    a worker with fewer cores groups them); the replay runs them one by one (as on more cores). No
    attempt's file is mistaken for another's."""
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(graph.plan(), Path(tmp))
        runner.append("trade", TICKS)
        first = runner.tasks[0]
        assert first.n_tasks > 1
        for t in range(first.n_tasks):
            first.run_tasks(tuple(range(t, first.n_tasks)), read_batch(first.input_path, 0, 1))  # files and state written, then a crash
        runner.run_until_idle()  # the replay: one group per task
        assert_frames_match(runner.read("one_min_bar"), BARS, ["symbol", "time"])
        assert_frames_match(runner.read("one_min_indicators"), INDICATORS, ["symbol", "time"])


def test_a_micro_batch_reads_each_commit_of_its_input_once(graph, monkeypatch):
    """The runner reads the batch's commits and hands them to every stream task (which used to read them
    again each, and once more for the batch's time: 11 commit files opened here instead of 3)."""
    from headwater.storage import table_log

    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(graph.plan(), Path(tmp))
        for part in np.array_split(np.arange(len(TICKS)), 3):
            runner.append("trade", TICKS.iloc[part])
        log = str(runner.tables["trade"].path / "_delta_log")
        opened: list[str] = []

        def counting_open(file, *args, **kwargs):
            if str(file).startswith(log):
                opened.append(Path(file).name)
            return open(file, *args, **kwargs)

        monkeypatch.setattr(table_log, "open", counting_open, raising=False)
        assert runner.tasks[0].n_tasks > 1
        runner.step()
        assert sorted(opened) == [f"{v:020d}.json" for v in (1, 2, 3)]
