"""``headwater cluster up`` on one machine: a Spark standalone master and worker from the pyspark wheel,
PostgreSQL, two Headwater workers (Spark drivers on that cluster) and the master, all on 127.0.0.1.

A graph submitted by a client process that then exits keeps running; this process appends and reads results
equal to the pandas reference, computed by Spark's executors (every micro-batch a Spark job); a worker
killed with ``kill -9`` has its graph moved to the other one with nothing lost or duplicated; ``down`` stops
every process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import headwater as hw
from tests.support.postgres import free_port
from tests.support.service import ROOT, SUBMIT, append_and_check, polls, rows

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def headwater(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HEADWATER_ADMIN_PASSWORD", "HEADWATER_WORKER_SECRET")}
    return subprocess.run([sys.executable, "-m", "headwater.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**env, "PYTHONPATH": str(ROOT / "src")})


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cluster_up_runs_graphs_on_spark_standalone_survives_a_dead_worker_and_goes_down():
    # the PostgreSQL server runs as the user postgres when the tests run as root: it must reach the data directory
    base = Path(tempfile.mkdtemp(prefix="headwater-cluster-"))
    base.chmod(0o711)
    data = base / "data"
    port = free_port()
    started = headwater("cluster", "up", "--data-dir", str(data), "--workers", "2", "--port", str(port),
                        "--postgres", "--driver-batch-rows", "0")
    assert started.returncode == 0, started.stdout + started.stderr
    state = json.loads((data / "cluster" / "state.json").read_text())
    pids = {p["name"]: p["pid"] for p in state["processes"]}
    try:
        assert set(pids) == {"spark-master", "spark-worker", "postgres", "worker-0", "worker-1", "master"}
        assert state["metadata"].startswith("postgresql://headwater@127.0.0.1:")
        checked = headwater("cluster", "status", "--data-dir", str(data))
        assert checked.returncode == 0 and checked.stdout.count("running") == 6, checked.stdout
        url, password = state["master"], (data / "cluster" / "admin-password").read_text().strip()

        submitted = subprocess.run([sys.executable, "-c", SUBMIT, url, password], cwd=ROOT, capture_output=True,
                                   text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr  # that client has exited
        session = hw.connect(url, user="admin", password=password)
        session.use_catalog("demo")
        everything = append_and_check(session, rows(300, seed=1, start=0), rows(0, seed=1, start=0))
        jobs = session.checkpoint_job_info("totals")
        ran = jobs[(jobs["status"] == "SUCCESS") & (jobs["rows_in"] > 0)]
        assert len(ran) and not ran["on_driver"].any()  # Spark's executors on the standalone cluster ran them

        worker = session.stream_graph_meta("totals").iloc[-1]["tasks"][0]["node"]  # worker@127.0.0.1:<port>
        victim = next(i for i, u in enumerate(state["workers"]) if u.endswith(worker.rsplit(":", 1)[1]))
        os.kill(pids[f"worker-{victim}"], signal.SIGKILL)
        for _ in polls(120):
            meta = session.stream_graph_meta("totals").iloc[-1]
            if meta["status"] == "running" and meta["tasks"] and meta["tasks"][0]["node"] != worker:
                break
        else:
            raise AssertionError(f"the graph did not move off the killed worker: {meta.to_dict()}")
        everything = append_and_check(session, rows(200, seed=2, start=300), everything)
        session.close()
        checked = headwater("cluster", "status", "--data-dir", str(data))
        assert checked.returncode == 1 and "worker-" in checked.stdout and "NOT running" in checked.stdout
    finally:
        stopped = headwater("cluster", "down", "--data-dir", str(data))
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    for _ in polls(60):
        if not any(alive(p) for p in pids.values()):
            break
    assert not any(alive(p) for p in pids.values()), {n: p for n, p in pids.items() if alive(p)}
    assert not (data / "cluster" / "state.json").exists()
    shutil.rmtree(base)  # outside pytest's tmp_path (the server's user reaches it): a failed run's stays to look at
