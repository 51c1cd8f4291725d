"""Headwater's own service processes for tests: ``headwater master`` and ``headwater worker`` on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "test-admin-password"
WORKER_SECRET = "test-worker-secret-0123456789"
ENV = {**os.environ, "HEADWATER_ADMIN_PASSWORD": PASSWORD, "HEADWATER_WORKER_SECRET": WORKER_SECRET,
       "PYTHONPATH": str(ROOT / "src")}

# A client that declares and submits a graph with a Python function in it, then exits.
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
    g.submit(compute_group=sys.argv[3] if len(sys.argv) > 3 else None)
    s.close()
    print("submitted")
""")


def start(command: str, data: Path, port: int, *extra: str, fault: str | None = None,
          within: float = 120.0) -> subprocess.Popen:
    """Start ``headwater <command>`` and return once it answers ``/v1/health`` (a worker: once its Spark driver is
    ready too) within ``within`` seconds. ``fault``: the fault point (``headwater.faults``) the process kills
    itself at."""
    return ready(spawn(command, data, port, *extra, fault=fault), within)


def spawn(command: str, data: Path, port: int, *extra: str, fault: str | None = None) -> subprocess.Popen:
    """Start ``headwater <command>`` without waiting for it (``ready`` waits): processes started together overlap
    their waits (a JVM's start is mostly CPU, so on two busy cores this gains little)."""
    log_path = data.parent / f"{command}-{port}.log"
    log = open(log_path, "ab")  # noqa: SIM115 - the process writes to it while it lives
    proc = subprocess.Popen([sys.executable, "-m", "headwater.cli", command, "--data-dir", str(data),
                             "--port", str(port), *extra],
                            env={**ENV, **({} if fault is None else {"HEADWATER_FAULT_POINT": fault})},
                            stdout=log, stderr=subprocess.STDOUT)
    proc.headwater = (command, port, log_path)  # type: ignore[attr-defined]  # what ``ready`` asks and reads
    return proc


def ready(proc: subprocess.Popen, within: float = 120.0) -> subprocess.Popen:
    """``proc`` (from ``spawn``) once it answers ``/v1/health`` (a worker: once its Spark driver is ready too)
    within ``within`` seconds."""
    command, port, log_path = proc.headwater  # type: ignore[attr-defined]
    for _ in polls(within):
        assert proc.poll() is None, log_path.read_text()[-3000:]
        try:
            answer = httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=1)
            spark = answer.json().get("spark", "ready") if answer.status_code == 200 else ""
            assert not spark.startswith("failed"), f"headwater {command}'s Spark did not start: {spark}"
            if spark == "ready":
                return proc
        except httpx.TransportError:
            pass
    proc.kill()
    raise AssertionError(f"headwater {command} did not answer within {within:.0f} s: {log_path.read_text()[-3000:]}")


def start_together(data: Path, *commands: tuple[str, int, tuple[str, ...]], within: float = 120.0) -> list[subprocess.Popen]:
    """Start each ``(command, port, extra arguments)`` at once, and return them once every one is ready."""
    procs = [spawn(command, data, port, *extra) for command, port, extra in commands]
    try:
        return [ready(p, within) for p in procs]
    except BaseException:
        for p in procs:
            stop(p, signal.SIGKILL)
        raise


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def submit_from_another_process(url: str, *group: str) -> None:
    done = subprocess.run([sys.executable, "-c", SUBMIT, url, PASSWORD, *group], cwd=ROOT, capture_output=True,
                          text=True, env=ENV, timeout=600)
    assert done.returncode == 0 and "submitted" in done.stdout, done.stdout + done.stderr


def rows(n: int, seed: int, start: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": rng.choice(list("abcdef"), n), "x": np.arange(start, start + n)})


def reference(frame: pd.DataFrame) -> pd.DataFrame:
    """What the SUBMIT graph's sink holds after ``frame``: pandas, independently of Headwater."""
    want = frame.assign(x2=frame["x"] * 2)
    want["total"] = want.groupby("k")["x2"].cumsum()
    return want.sort_values(["k", "x"], ignore_index=True)


def results(session) -> pd.DataFrame:
    return session.sql("select k, x, x2, total from out").to_pandas().sort_values(["k", "x"], ignore_index=True)


def connect(url: str):
    import headwater as hw

    session = hw.connect(url, user="admin", password=PASSWORD)
    session.use_catalog("demo")
    return session


def running_node(session, graph: str = "totals") -> str | None:
    """The one node whose tasks run ``graph`` while it is ``running`` (None: not running, or on several)."""
    meta = session.stream_graph_meta(graph).iloc[-1]
    nodes = {t["node"] for t in meta["tasks"] if t["status"] == "running"}
    return nodes.pop() if meta["status"] == "running" and len(nodes) == 1 else None


def append_and_check(session, new: pd.DataFrame, before: pd.DataFrame) -> pd.DataFrame:
    """Append ``new``, wait for the graph, and check its sink holds exactly the reference of everything so far."""
    everything = pd.concat([before, new], ignore_index=True)
    session.append("ticks", new)
    session.wait_until_caught_up("totals", timeout=300)
    pd.testing.assert_frame_equal(results(session), reference(everything), check_dtype=False)
    assert session.stream_graph_meta("totals").iloc[-1]["status"] == "running"
    return everything


def polls(timeout: float) -> Iterator[None]:
    """Yield until ``timeout`` seconds have passed, pausing between yields: 20 ms at first, growing to 250 ms. A
    check asks a master or a store over the network; at a fixed 50 ms the waits of a long fault test cost a core
    tens of seconds, which the processes under test on two shared cores need more."""
    deadline = time.monotonic() + timeout
    attempt = 0
    while time.monotonic() < deadline:
        yield
        time.sleep(min(0.25, 0.02 * 1.5 ** attempt))  # polling a condition with a deadline
        attempt += 1


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``condition()`` holds (polled), or fail naming ``what``."""
    start = time.monotonic()
    for _ in polls(timeout):
        if condition():
            return time.monotonic() - start
    raise AssertionError(f"{what} did not happen within {timeout:.0f}s")
