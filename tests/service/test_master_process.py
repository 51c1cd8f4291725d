"""``headwater master`` as a real process: a graph submitted by one client keeps running after that client's
process exits, a second client appends and reads results equal to a pandas reference, and the graph
resumes when the master process is restarted, losing and duplicating nothing. Once with the catalog in
SQLite, once in a real PostgreSQL server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

import headwater as hw
from tests.support.postgres import free_port, postgres_server

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "test-admin-password"

SUBMIT = textwrap.dedent("""
    import sys
    import headwater as hw

    def doubled(frame):                    # a Python function: code the master's workers run
        return frame.assign(x2=frame["x"] * 2)

    s = hw.connect(sys.argv[1], user="admin", password=sys.argv[2])
    s.use_catalog("demo")
    g = s.stream_graph("totals")
    (g.source("ticks", schema={"k": "string", "x": "long"}).map(doubled).parallelize("k", 2)
       .reactive_state_engine(key_column="k", metrics=["x", "x2", "cumsum(x2) as total"]).sync().sink("out"))
    g.submit()
    s.close()
    print("submitted")
""")


def start_master(data: Path, port: int, metadata: str | None) -> subprocess.Popen:
    env = {**os.environ, "HEADWATER_ADMIN_PASSWORD": PASSWORD, "PYTHONPATH": str(ROOT / "src")}
    log = open(data.parent / f"master-{port}.log", "ab")  # noqa: SIM115 - the process owns it
    extra = [] if metadata is None else ["--metadata", metadata]
    proc = subprocess.Popen([sys.executable, "-m", "headwater.cli", "master", "--data-dir", str(data),
                             "--port", str(port), *extra], env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, (data.parent / f"master-{port}.log").read_text()[-3000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(0.2)  # polling a condition with a deadline
    proc.kill()
    raise AssertionError("the master did not answer within 120 s")


def stop_master(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def reference(frame: pd.DataFrame) -> pd.DataFrame:
    want = frame.assign(x2=frame["x"] * 2)
    want["total"] = want.groupby("k")["x2"].cumsum()
    return want.sort_values(["k", "x"], ignore_index=True)


def rows(n: int, seed: int, start: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": rng.choice(list("abcdef"), n), "x": np.arange(start, start + n)})


def results(session: hw.Session) -> pd.DataFrame:
    got = session.sql("select k, x, x2, total from out").to_pandas()
    return got.sort_values(["k", "x"], ignore_index=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def metadata(request):
    """Where the master keeps its catalog: SQLite in the data directory, or a real PostgreSQL server."""
    if request.param == "sqlite":
        yield None
    else:
        with postgres_server() as url:
            yield url


def test_a_graph_outlives_its_client_and_its_master_process(tmp_path, metadata):
    data, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    master = start_master(data, port, metadata)
    try:
        done = subprocess.run([sys.executable, "-c", SUBMIT, url, PASSWORD], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=600)
        assert done.returncode == 0 and "submitted" in done.stdout, done.stdout + done.stderr
        # the submitting client's process has exited; a second client finds the graph running
        session = hw.connect(url, user="admin", password=PASSWORD)
        session.use_catalog("demo")
        assert session.stream_graph_meta("totals").iloc[-1]["status"] == "running"
        first = rows(300, seed=1, start=0)
        for i in range(0, 300, 100):
            assert session.append("ticks", first.iloc[i:i + 100]) == i // 100 + 1  # the committed version
        session.wait_until_caught_up("totals", timeout=300)
        pd.testing.assert_frame_equal(results(session), reference(first), check_dtype=False)
        session.close()

        stop_master(master)  # the master process ends; the graph is still 'running' in its catalog
        master = start_master(data, port, metadata)
        session = hw.connect(url, user="admin", password=PASSWORD)
        session.use_catalog("demo")
        second = rows(200, seed=2, start=300)
        session.append("ticks", second)
        session.wait_until_caught_up("totals", timeout=300)
        pd.testing.assert_frame_equal(results(session), reference(pd.concat([first, second])), check_dtype=False)
        assert session.stream_graph_meta("totals").iloc[-1]["status"] == "running"
        with pytest.raises(hw.SqlError):
            session.sql("drop table out")
        session.close()
    finally:
        stop_master(master)
