"""Issue 6.2 and 6.3: a submit killed at any point resumes or resubmits cleanly; one broken graph does not
stop the others from resuming, and connect() returns while graphs resume in the background."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

import headwater as hw
from headwater.faults import ENV_VAR as ENV
from headwater.runtime.worker import Worker

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = {"time": "timestamp", "key": "string", "v": "double"}
SUBMIT = textwrap.dedent("""
    import sys
    import headwater as hw
    from tests.spark.test_crash_safety import build
    session = hw.connect(sys.argv[1])
    session.use_catalog("demo")
    build(session, "g", "ticks", "out").submit()
    print("submitted", flush=True)
""")


STREAM = textwrap.dedent("""
    import os, sys, threading
    import headwater as hw
    from headwater.faults import ENV_VAR
    from tests.spark.test_crash_safety import build, rows
    session = hw.connect(sys.argv[1], driver_batch_rows=int(sys.argv[2]))
    session.use_catalog("demo")
    build(session, "g", "ticks", "out").submit()  # returns after the query's first (empty) micro-batch
    os.environ[ENV_VAR] = sys.argv[3]
    session.append("ticks", rows().iloc[:150])
    threading.Event().wait(300)  # the micro-batch of these rows kills this process at the fault point
""")


def build(session: hw.Session, name: str, source: str, sink: str) -> hw.StreamGraph:
    g = session.stream_graph(name)
    (g.source(source, schema=SCHEMA).parallelize("key", 2)
       .reactive_state_engine(key_column="key", metrics=["time", "v", "cumsum(v) as cs"]).sync().sink(sink))
    return g


def rows(n: int = 400, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "time": pd.Timestamp("2026-11-24 09:30") + pd.to_timedelta(np.arange(n), unit="s"),
        "key": rng.choice(["a", "b", "c", "d", "e"], n),
        "v": rng.integers(0, 100, n).astype(float),
    })


def reference(frame: pd.DataFrame) -> pd.DataFrame:
    want = frame.copy()
    want["cs"] = want.groupby("key")["v"].cumsum()
    return want.sort_values(["key", "time"]).reset_index(drop=True)


def check_output(session: hw.Session, sink: str, frame: pd.DataFrame) -> None:
    got = session.sql(f"select * from {sink}").to_pandas().sort_values(["key", "time"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got[["time", "key", "v", "cs"]], reference(frame), check_dtype=False)


@pytest.mark.parametrize("point", ["submit.after_first_table", "submit.before_metadata", "submit.after_metadata"])
def test_submit_killed_at_a_fault_point_resumes_or_resubmits(spark, tmp_path, point):
    data = tmp_path / "data"
    env = {**os.environ, ENV: point, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    done = subprocess.run([sys.executable, "-c", SUBMIT, str(data)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == -9, done.stdout + done.stderr  # killed at the point, before "submitted"

    session = hw.connect(data)
    session.use_catalog("demo")
    try:
        meta = session.stream_graph_meta()
        tables = set(session.stream_table_meta()["fqn"])
        if point == "submit.after_metadata":  # graph, tables and references landed together
            assert meta["fqn"].tolist() == ["demo.stream_graph.g"]
            assert {"demo.stream_table.ticks", "demo.stream_table.out"} <= tables
        else:  # nothing of the graph is visible
            assert meta.empty and tables == set()
        build(session, "g", "ticks", "out").submit()  # the same definition finishes what was cut off
        assert session.stream_graph_meta("g").loc[0, "status"] == "running"
        with pytest.raises(hw.CatalogError, match="used by"):
            session.drop_stream_table("out")
        frame = rows()
        session.append("ticks", frame.iloc[:150])
        session.append("ticks", frame.iloc[150:])
        session.wait_until_caught_up("g", timeout=300)
        check_output(session, "out", frame)
    finally:
        session.close()


@pytest.mark.parametrize(("point", "driver_batch_rows"), [
    ("batch.before_commit", 0),  # Spark's tasks wrote the files; the replay runs the batch on the driver
    ("batch.before_commit", 20_000),
    ("batch.after_commit", 20_000),  # committed, not logged as done by Spark: the replay must commit nothing
])
def test_a_micro_batch_killed_at_a_fault_point_is_replayed_exactly_once(spark, tmp_path, point, driver_batch_rows):
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    done = subprocess.run([sys.executable, "-c", STREAM, str(data), str(driver_batch_rows), point], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == -9, done.stdout + done.stderr
    out_log = data / "tables" / "demo" / "out" / "_delta_log"
    committed = sorted(p.name for p in out_log.glob("*.json"))
    assert len(committed) == (2 if point == "batch.after_commit" else 1)  # creation (+ the batch)

    session = hw.connect(data)  # resumes the graph; its first batch is the one that was cut off
    session.use_catalog("demo")
    try:
        frame = rows()
        session.append("ticks", frame.iloc[150:])
        session.wait_until_caught_up("g", timeout=300)
        check_output(session, "out", frame)
    finally:
        session.close()


def test_a_broken_graph_fails_alone_and_connect_does_not_wait_for_resuming(spark, tmp_path, monkeypatch):
    data = tmp_path / "data"
    session = hw.connect(data)
    session.use_catalog("demo")
    build(session, "broken", "ticks_b", "out_b").submit()  # resumed first: it must not hold up "good"
    build(session, "good", "ticks_g", "out_g").submit()
    session.close()
    engine = sa.create_engine(f"sqlite:///{data / 'headwater.db'}")
    with engine.begin() as c:  # its stored definition no longer loads (as when a user module is gone)
        c.execute(sa.text("update stream_graphs set graph_json = replace(graph_json, '\"$type\": \"TableNode\"', "
                          "'\"$type\": \"GoneNode\"') where fqn = 'demo.stream_graph.broken'"))
    engine.dispose()

    gate = threading.Event()
    start_graph = Worker.start_graph

    def gated_start(self, *args, **kwargs):
        assert gate.wait(300), "the test never opened the gate"
        return start_graph(self, *args, **kwargs)

    monkeypatch.setattr(Worker, "start_graph", gated_start)
    session = hw.connect(data)  # returns while "good" cannot start yet
    session.use_catalog("demo")
    try:
        assert set(session.stream_graph_meta()["status"]) <= {"building", "failed"}
        assert session.stream_graph_meta("good").loc[0, "status"] == "building"
        frame = rows(seed=2)
        session.append("ticks_g", frame)  # the session is usable while graphs resume
        gate.set()
        session.wait_until_caught_up("good", timeout=300)
        assert session.stream_graph_meta("good").loc[0, "status"] == "running"
        check_output(session, "out_g", frame)
        broken = session.stream_graph_meta("broken").loc[0]
        assert broken["status"] == "failed" and "cannot load its stored definition" in broken["reason"]
        with pytest.raises(hw.StreamGraphStateError, match="is failed: cannot load"):
            session.wait_until_caught_up("broken", timeout=60)
        resumed = session.state_machine_events().query("type == 'RECOVER'")[["detail", "state"]].values.tolist()
        assert sorted(resumed) == [["demo.stream_graph.broken", "failed"], ["demo.stream_graph.good", "finished"]]
    finally:
        gate.set()
        session.close()


def test_a_graph_whose_plan_changed_is_not_resumed_on_foreign_state(spark, tmp_path):
    data = tmp_path / "data"
    session = hw.connect(data)
    session.use_catalog("demo")
    build(session, "g", "ticks", "out").submit()
    session.close()
    engine = sa.create_engine(f"sqlite:///{data / 'headwater.db'}")
    with engine.begin() as c:  # as if an older Headwater had planned it with another parallelism
        doc = json.loads(c.execute(sa.text("select graph_json from stream_graphs")).scalar_one())
        for node in doc["physical"]["nodes"]:
            if node.get("parallelism", {}).get("count") == 2:
                node["parallelism"]["count"] = 4
        c.execute(sa.text("update stream_graphs set graph_json = :j"), {"j": json.dumps(doc)})
    engine.dispose()
    session = hw.connect(data)
    session.use_catalog("demo")
    try:
        with pytest.raises(hw.StreamGraphStateError, match="plan changed"):
            session.wait_until_caught_up("g", timeout=120)
        meta = session.stream_graph_meta("g").iloc[-1]
        assert meta["status"] == "failed"
        assert "parallelism > count: was 4, now 2" in meta["reason"] and "drop it and submit it again" in meta["reason"]
    finally:
        session.close()
