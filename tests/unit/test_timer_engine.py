"""timer_engine: declared with checked arguments, its function run every interval by the worker that runs the
graph (here a worker without Spark, its timers started as ``start_graph`` starts them), paused and resumed
through ``control_engine`` as observed by the function's own effect, failures counted, fenced, stopped with the
graph. Every wait is on a condition with a deadline."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

import headwater as hw
from headwater.dataplane.engine_stats import engine_rows
from headwater.dataplane.timers import read_status, status_path, write_status
from headwater.errors import ExecutionError, GraphDefinitionError
from headwater.plan.document import dumps, from_json, needs_udf, to_json
from headwater.runtime.timers import Timer
from headwater.runtime.worker import EPOCH_FILE, RunningGraph, Worker
from tests.support.service import wait_for

DEADLINE = 30.0


def append_line(path: str, text: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(text + "\n")


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def fails(message: str) -> None:
    raise ValueError(message)


@pytest.fixture
def session(tmp_path):
    s = hw.connect(tmp_path / "data", start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def timer_graph(session: hw.Session, func=append_line, *args, interval: str = "100ms") -> hw.StreamGraph:
    g = session.stream_graph("timed")
    g.source("trade", {"id": "long", "price": "double"}).timer_engine(interval, func, *args) \
        .set_engine_name("my_job").sink("result")
    return g


@pytest.fixture
def worker(tmp_path):
    """A worker whose graphs are registered by hand (no Spark: only its timers run)."""
    w = Worker(tmp_path / "worker", spark_master="local[1]", trigger_interval=timedelta(seconds=1))
    yield w
    w.close()


def start(worker: Worker, g: hw.StreamGraph, checkpoints: Path, epoch: int = 0) -> RunningGraph:
    """What ``start_graph`` does for timers once the graph's queries run, with the plan as the worker loads it."""
    physical = from_json(dumps(to_json(g._graph, g.plan())), load_callables=True)[1]
    assert physical is not None
    running = RunningGraph(physical, {})
    worker._graphs[g.name] = running
    Worker._start_timers(running, checkpoints, epoch)
    return running


def test_rows_pass_through_unchanged(session):
    g = timer_graph(session, append_line, "/nonexistent", "x")
    rows = pd.DataFrame({"id": [1, 2], "price": [1.5, 2.5]})
    pd.testing.assert_frame_equal(g.run_local({"trade": rows})["result"], rows)


def test_pause_and_resume_through_control_engine_are_seen_in_the_function_s_effect(session, worker, tmp_path):
    out = tmp_path / "ticks.txt"
    g = timer_graph(session, append_line, str(out), "tick")
    running = start(worker, g, tmp_path / "ckpt")
    timer = running.timers["my_job"]
    wait_for(lambda: lines(out) >= 3, DEADLINE, "three runs")
    assert out.read_text().splitlines()[:3] == ["tick"] * 3

    assert worker.control_engine(g.name, "my_job", {"op": "stop_timer_engine"}) == 1
    wait_for(lambda: timer.status()["skipped"] >= 1, DEADLINE, "a tick skipped while paused")
    paused_at = lines(out)  # a run in flight when the pause came has ended: runs are one after another
    wait_for(lambda: timer.status()["skipped"] >= 4, DEADLINE, "three more ticks skipped")
    assert lines(out) == paused_at
    assert read_status(status_path(tmp_path / "ckpt", "my_job"))["paused"] is True

    assert worker.control_engine(g.name, "my_job", {"op": "resume_timer_engine"}) == 1
    wait_for(lambda: lines(out) >= paused_at + 2, DEADLINE, "runs after resume")
    assert read_status(status_path(tmp_path / "ckpt", "my_job"))["paused"] is False

    worker.stop_graph(g.name)
    assert not any(t.name == "headwater-timer-my_job" for t in threading.enumerate())


def test_a_paused_timer_stays_paused_when_the_graph_starts_again(session, worker, tmp_path):
    out = tmp_path / "ticks.txt"
    g = timer_graph(session, append_line, str(out), "tick")
    start(worker, g, tmp_path / "ckpt")
    worker.control_engine(g.name, "my_job", {"op": "stop_timer_engine"})
    worker.stop_graph(g.name)
    again = start(worker, g, tmp_path / "ckpt")  # a restart, or another worker after a failover
    assert again.timers["my_job"].status()["paused"] is True
    wait_for(lambda: again.timers["my_job"].status()["skipped"] >= 3, DEADLINE, "ticks skipped after the restart")
    assert lines(out) == 0


def test_a_function_that_raises_is_counted_and_the_timer_goes_on(session, worker, tmp_path):
    g = timer_graph(session, fails, "no luck")
    checkpoints = tmp_path / "ckpt"
    timer = start(worker, g, checkpoints).timers["my_job"]
    wait_for(lambda: timer.status()["failures"] >= 3, DEADLINE, "three failed runs")
    status = read_status(status_path(checkpoints, "my_job"))
    assert status["runs"] >= 3 and status["failures"] >= 3
    assert status["last_error"] == "ValueError: no luck"
    (row,) = [r for r in engine_rows(g.plan(), checkpoints) if r["name"] == "my_job"]
    assert row["timer_failures"] >= 3 and row["timer_last_error"] == "ValueError: no luck"
    assert row["timer_paused"] is False


def test_a_parallel_timer_engines_counters_are_on_one_task_row_so_they_sum_to_the_engines(session, tmp_path):
    g = session.stream_graph("timed")
    g.source("trade", {"id": "long", "price": "double"}).parallelize("id", 3) \
        .timer_engine("1s", append_line, "/nonexistent", "x").set_engine_name("my_job").sync().sink("result")
    checkpoints = tmp_path / "ckpt"
    write_status(status_path(checkpoints, "my_job"),  # what the one timer of the engine saved
                 {"paused": True, "runs": 7, "failures": 2, "last_error": "ValueError: x", "last_run": 1.0})
    rows = pd.DataFrame([r for r in engine_rows(g.plan(), checkpoints) if r["name"] == "my_job"])
    assert len(rows) == 3  # one row per stream task
    assert rows["timer_runs"].sum() == 7 and rows["timer_failures"].sum() == 2
    assert rows["timer_paused"].tolist().count(True) == 1 and rows["timer_last_error"].count() == 1
    assert rows["timer_runs"].notna().tolist() == [True, False, False]


def test_a_fenced_worker_stops_its_timer(session, worker, tmp_path):
    out = tmp_path / "ticks.txt"
    checkpoints = tmp_path / "ckpt"
    checkpoints.mkdir()
    (checkpoints / EPOCH_FILE).write_text("1")
    g = timer_graph(session, append_line, str(out), "tick")
    timer = start(worker, g, checkpoints, epoch=1).timers["my_job"]
    wait_for(lambda: lines(out) >= 1, DEADLINE, "a run in the current placement")
    (checkpoints / EPOCH_FILE).write_text("2")  # the graph moved to another worker
    assert timer._thread is not None
    wait_for(lambda: not timer._thread.is_alive(), DEADLINE, "the fenced timer stops")


def test_control_engine_refuses_what_is_not_a_running_timer(session, worker, tmp_path):
    g = timer_graph(session, append_line, str(tmp_path / "t.txt"), "x")
    with pytest.raises(ExecutionError, match="runs no timer engine 'my_job'"):
        worker.control_engine(g.name, "my_job", {"op": "stop_timer_engine"})
    spec = next(n.spec for n in g.plan().nodes.values() if n.name == "my_job")
    with pytest.raises(GraphDefinitionError, match="unknown timer change"):
        spec.check_control({"op": "pause"})
    assert spec.check_control({"op": "resume_timer_engine"}) == {"op": "resume_timer_engine"}


@pytest.mark.parametrize(("interval", "args", "message"), [
    (3, (), "bare number"),
    ("10ms", (), r"10ms is outside 100ms\.\.24h"),
    ("2d", (), r"is outside 100ms\.\.24h"),
    ("1s", (object(),), "object values cannot travel as timer arguments"),
    ("1s", ("x" * 70_000,), "over the limit of 65536"),
    ("1s", tuple(range(65)), "65 arguments, more than the limit of 64"),
])
def test_interval_and_arguments_are_checked(session, interval, args, message):
    src = session.stream_graph("bad").source("trade", {"id": "long"})
    with pytest.raises(GraphDefinitionError, match=message):
        src.timer_engine(interval, append_line, *args)


def test_the_plan_carries_the_function_pickled_and_the_arguments_as_values(session):
    g = timer_graph(session, append_line, "/tmp/x", ["a", 1], interval="2s")
    doc = to_json(g._graph, g.plan())
    assert needs_udf(doc) and list(doc["callables"]) == ["append_line"]
    logical, physical = from_json(dumps(doc), load_callables=False)
    assert to_json(logical, physical) == doc
    spec = next(n.spec for n in physical.nodes.values() if n.name == "my_job")
    assert spec.properties() == {"interval": "2s", "func": "append_line", "args": ["/tmp/x", ["a", 1]]}


def test_timer_counts_survive_in_its_file(tmp_path):
    path = tmp_path / "t.json"
    timer = Timer("t", 0.1, lambda: None, path)
    timer.pause()
    assert Timer("t", 0.1, lambda: None, path).status()["paused"] is True
