"""The HTTP doors (docs/security.md, HTTP limits), over real uvicorn servers on 127.0.0.1 so that bodies really
stream: a body without a valid token is refused before it is read, an oversized body is cut off while it arrives,
an Arrow bomb is refused before it is decompressed, and health checks answer while every thread is busy.

Memory is measured as the server process's peak resident set (``VmHWM``), which no later free can hide."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
import pytest
import uvicorn

from headwater.service.signing import Signer
from tests.support.postgres import free_port

ROOT = Path(__file__).resolve().parents[2]
MB = 2**20
SECRET = "doors-test-worker-secret-0123456789"
ARROW = {"Content-Type": "application/vnd.apache.arrow.stream"}

# the master's API in a process of its own (no Spark), so that its memory can be measured
SERVE_MASTER = textwrap.dedent("""
    import sys
    from pathlib import Path

    import uvicorn

    from headwater.runtime.embedded import embedded_master
    from headwater.service.auth import Authenticator
    from headwater.service.server import create_app

    master = embedded_master(Path(sys.argv[1]), start_spark=False)
    auth = Authenticator(master.store)
    auth.ensure_admin("admin-pw")
    uvicorn.run(create_app(master, auth, max_body_bytes=64 * 2**20), host="127.0.0.1", port=int(sys.argv[2]),
                log_level="warning", access_log=False, lifespan="off")
""")


def until(condition: Any, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.02)  # polling a condition with a deadline


def reset_peak(pid: int) -> None:
    """Start the process's peak resident set afresh (Linux ``clear_refs``; else it keeps its earlier peak, which
    only makes a growth smaller: a test that passes would pass)."""
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (Linux ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    """One client for every call (each new client costs a TLS context: ~0.2 s of CPU)."""
    with httpx.Client(timeout=60, limits=httpx.Limits(max_connections=200, max_keepalive_connections=200)) as client:
        yield client


@pytest.fixture(scope="module")
def master_process(tmp_path_factory, http) -> Iterator[tuple[str, int, dict[str, str]]]:
    """A master serving its API in its own process: its URL, its pid, and an admin's auth header; it has a
    table ``demo.stream_table.t`` (one string column) and has served a few calls already (imports done)."""
    tmp_path, port = tmp_path_factory.mktemp("master"), free_port()
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT / "src"))}
    log = open(tmp_path / "master.log", "wb")  # noqa: SIM115 - the process writes to it while it lives
    proc = subprocess.Popen([sys.executable, "-c", SERVE_MASTER, str(tmp_path / "data"), str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        def answers() -> bool:
            assert proc.poll() is None, (tmp_path / "master.log").read_text()[-3000:]
            with contextlib.suppress(httpx.TransportError):
                return http.get(f"{url}/v1/health", timeout=1).status_code == 200
            return False

        until(answers, "the master answers /v1/health", 120)
        token = http.post(f"{url}/v1/login", json={"user": "admin", "password": "admin-pw"}).json()["token"]
        auth = {"Authorization": f"Bearer {token}"}
        r = http.post(f"{url}/v1/create_public_table", json={"fqn": "demo.stream_table.t", "schema": [["s", "string"]]},
                       headers=auth)
        assert r.status_code == 200, r.text
        small = pa.table({"s": ["a", "b"]})
        r = http.post(f"{url}/v1/append", params={"args": '{"fqn": "demo.stream_table.t"}'}, content=ipc(small),
                       headers={**auth, **ARROW})
        assert r.status_code == 200, r.text
        assert http.post(f"{url}/v1/table_meta", json={}).status_code == 401
        yield url, proc.pid, auth
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def ipc(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def chunks(total: int, sent: list[int], size: int = 64 * 1024) -> Iterator[bytes]:
    """A chunked body of ``total`` bytes (httpx sends a generator without Content-Length); ``sent`` counts."""
    while sent[0] < total:
        sent[0] += size
        yield b"x" * size


def post(http: httpx.Client, url: str, **kwargs: Any) -> httpx.Response | None:
    """A POST whose connection the server may close while the body is still being sent (then None)."""
    try:
        return http.post(url, **kwargs)
    except (httpx.WriteError, httpx.ReadError, httpx.RemoteProtocolError):
        return None


def test_an_unauthenticated_50_mb_body_is_refused_without_being_read(master_process, http):
    url, pid, auth = master_process
    body = b'{"fqn": "demo.stream_table.u", "schema": [["x", "long"]], "pad": "' + b"x" * (50 * MB) + b'"}'
    reset_peak(pid)
    before = peak_rss(pid)
    for headers in ({}, {"Authorization": "Bearer forged-token"}, {"Authorization": "Basic YWRtaW46YWRtaW4tcHc="}):
        r = post(http, f"{url}/v1/create_public_table", content=body, headers={**headers, "Content-Type": "application/json"})
        assert r is None or r.status_code == 401, r.text
        sent = [0]
        r = post(http, f"{url}/v1/submit", content=chunks(50 * MB, sent), headers=headers)
        assert r is None or r.status_code == 401, r.text
    grown = peak_rss(pid) - before
    assert grown < 20 * MB, f"the master's peak memory grew by {grown / MB:.0f} MB on bodies it should not read"
    # an authenticated call still works, and nothing of the refused calls was created
    r = http.post(f"{url}/v1/table_meta", json={"fqn": "demo.stream_table.u"}, headers=auth)
    assert r.status_code == 200 and r.json() == {"result": []}, r.text


def test_an_oversized_body_is_refused_with_413_while_it_arrives(master_process, http):
    url, pid, auth = master_process
    reset_peak(pid)
    before = peak_rss(pid)
    sent = [0]
    r = http.post(f"{url}/v1/table_meta", content=chunks(40 * MB, sent), headers=auth, timeout=60)
    assert r.status_code == 413 and r.json()["error"] == "RequestError", r.text
    assert "--max-json-mb" in r.json()["message"]
    declared = b"[" + b"1," * (4 * MB) + b"1]"  # with Content-Length: refused before a byte is read
    r = http.post(f"{url}/v1/table_meta", content=declared, headers={**auth, "Content-Type": "application/json"},
                   timeout=60)
    assert r.status_code == 413 and "the limit is 1048576 (--max-json-mb)" in r.json()["message"], r.text
    grown = peak_rss(pid) - before
    assert grown < 20 * MB, f"the master's peak memory grew by {grown / MB:.0f} MB on bodies over 1 MB"
    assert http.post(f"{url}/v1/table_meta", json={}, headers=auth).status_code == 200  # still serving


def test_an_arrow_bomb_is_refused_with_413_before_it_is_decompressed(master_process, http):
    url, pid, auth = master_process
    bomb = ipc(pa.table({"s": np.zeros(25_000_000, dtype="int64")}), compression="zstd")  # 200 MB of zeros
    assert len(bomb) < 20_000
    reset_peak(pid)
    before = peak_rss(pid)
    r = http.post(f"{url}/v1/append", params={"args": '{"fqn": "demo.stream_table.t"}'}, content=bomb,
                   headers={**auth, **ARROW}, timeout=60)
    assert r.status_code == 413 and r.json()["error"] == "RequestError", r.text
    assert "decompresses to more than" in r.json()["message"] and "--max-arrow-ratio" in r.json()["message"]
    grown = peak_rss(pid) - before
    assert grown < 30 * MB, f"the master's peak memory grew by {grown / MB:.0f} MB decoding a {len(bomb)}-byte body"
    rows = http.post(f"{url}/v1/table_meta", json={"fqn": "demo.stream_table.t"}, headers=auth).json()["result"][0]["rows"]
    assert rows == 2  # nothing appended (the fixture's two rows)
    # a compressed body within the ratio is accepted
    fine = ipc(pa.table({"s": [f"row {i}" for i in range(1000)]}), compression="zstd")
    r = http.post(f"{url}/v1/append", params={"args": '{"fqn": "demo.stream_table.t"}'}, content=fine,
                   headers={**auth, **ARROW}, timeout=60)
    assert r.status_code == 200, r.text


def test_a_malformed_arrow_body_is_a_schema_error_never_a_crash():
    from headwater.errors import SchemaError
    from headwater.service.doors import BodyTooLarge, HttpLimits, arrow_table

    clean = ipc(pa.table({"x": np.arange(300), "s": ["v"] * 300}), compression="lz4")
    outcomes = set()
    for seed in range(300):  # flip a few bytes, in the metadata or the data
        body = bytearray(clean)
        rng = np.random.default_rng(seed)
        for at in rng.integers(0, len(body), size=1 + seed % 4):
            body[at] = int(rng.integers(0, 256))
        try:
            arrow_table(bytes(body), where="append to t", limits=HttpLimits())
            outcomes.add("read")
        except (SchemaError, BodyTooLarge) as exc:
            outcomes.add(type(exc).__name__)
    assert "SchemaError" in outcomes and "read" in outcomes


# -- health and waits, on in-process servers -----------------------------------------------------------------
@contextlib.contextmanager
def serving(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread on 127.0.0.1; its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True, name="doors-test-server")
    thread.start()
    try:
        until(lambda: server.started, "uvicorn started")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


class BlockingWorker:
    """A worker whose calls block until released."""

    name = "worker@test"
    spark_state = "ready"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.block_all = True
        self.lock = threading.Lock()
        self.entered = 0

    def handle(self, message: Any) -> Any:
        if self.block_all:
            with self.lock:
                self.entered += 1
            self.release.wait(120)
        return True


def worker_call(http: httpx.Client, url: str, message: dict[str, Any], timeout: float = 120) -> httpx.Response:
    """A request to a worker as its master sends it: signed with the worker secret."""
    return http.post(f"{url}/v1/worker/request", json=message, auth=Signer(SECRET), timeout=timeout)


def test_worker_health_answers_while_every_request_thread_is_blocked(http):
    from headwater.service.worker_http import create_worker_app

    worker = BlockingWorker()
    with serving(create_worker_app(worker, SECRET)) as url, ThreadPoolExecutor(45) as clients:
        try:
            calls = [clients.submit(worker_call, http, url, {"type": "IsRunning", "fqn": "demo.stream_graph.g"})
                     for _ in range(45)]
            until(lambda: worker.entered >= 40, "40 requests block in the worker")
            started = time.monotonic()
            health = http.get(f"{url}/v1/health", timeout=2)
            assert health.status_code == 200 and health.json()["spark"] == "ready"
            assert time.monotonic() - started < 2
        finally:
            worker.release.set()
        assert all(c.result().status_code == 200 for c in calls)


def test_master_waits_hold_no_thread_and_past_their_limit_are_refused(tmp_path, monkeypatch, http):
    """45 clients wait for a graph at once: 32 (--max-waits) wait, holding no thread between looks, so that with
    the server's whole thread pool cut to 2 threads health, other calls and the waits' own looks still answer;
    the other 13 are refused at once, naming the setting."""
    import anyio.to_thread

    from headwater.errors import CaughtUpTimeout
    from headwater.runtime.embedded import embedded_master
    from headwater.service.auth import Authenticator
    from headwater.service.server import create_app

    master = embedded_master(tmp_path, start_spark=False)
    auth = Authenticator(master.store)
    auth.ensure_admin("admin-pw")
    release, lock, entered, looks = threading.Event(), threading.Lock(), [0], [0]

    def catch_up(fqn: Any, timeout: float) -> Iterator[float]:
        with lock:
            entered[0] += 1
        while not release.is_set():
            looks[0] += 1
            yield 0.05

    monkeypatch.setattr(master, "catch_up", catch_up)
    try:
        app = create_app(master, auth)

        @app.post("/test/threads")
        async def threads() -> dict[str, int]:  # the server's thread pool (per event loop), cut to 2
            anyio.to_thread.current_default_thread_limiter().total_tokens = 2
            return {"threads": 2}

        with serving(app) as url, ThreadPoolExecutor(45) as clients:
            token = http.post(f"{url}/v1/login", json={"user": "admin", "password": "admin-pw"}).json()["token"]
            headers = {"Authorization": f"Bearer {token}"}
            assert http.post(f"{url}/test/threads", headers=headers).status_code == 200
            try:
                waits = [clients.submit(http.post, f"{url}/v1/wait_until_caught_up", json={"fqn": "demo.stream_graph.g"},
                                        headers=headers, timeout=120) for _ in range(45)]
                until(lambda: entered[0] >= 32 and sum(w.done() for w in waits) >= 13, "32 wait, 13 are refused")
                seen = looks[0]
                until(lambda: looks[0] >= seen + 64, "the waits keep looking, on 2 threads")
                started = time.monotonic()
                assert http.get(f"{url}/v1/health", timeout=2).json()["role"] == "active"
                r = http.post(f"{url}/v1/table_meta", json={}, headers=headers, timeout=5)
                assert r.status_code == 200, r.text
                assert time.monotonic() - started < 5
            finally:
                release.set()
            answers = [w.result() for w in waits]
            refused = [a for a in answers if a.status_code == 429]
            assert len(refused) == 13 and all(a.json()["error"] == "BusyError" and "--max-waits" in a.json()["message"]
                                            for a in refused)
            assert all(a.status_code == 200 and a.json() == {"result": None} for a in answers if a not in refused)

            def timed_out(fqn: Any, timeout: float) -> Iterator[float]:
                yield 0.01
                raise CaughtUpTimeout(f"stream graph {fqn} did not catch up within {timeout:.0f}s")

            monkeypatch.setattr(master, "catch_up", timed_out)
            r = http.post(f"{url}/v1/wait_until_caught_up", json={"fqn": "demo.stream_graph.g", "timeout": 3}, headers=headers)
            assert r.status_code == 504 and r.json()["error"] == "CaughtUpTimeout", r.text  # errors come back as before
    finally:
        master.close()


@pytest.mark.parametrize("role", ["master", "worker"])
def test_every_http_limit_is_documented_with_its_default(role):
    import argparse

    from headwater.service import run

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    (run.add_master_command if role == "master" else run.add_worker_command)(sub)
    command = sub.choices[role]
    limits = [a for a in command._actions if any(o.startswith("--max-") for o in a.option_strings)]
    text = (ROOT / "docs" / "security.md").read_text()
    assert len(limits) >= 1
    for action in limits:
        row = f"`headwater {role} {action.option_strings[0]}` | `{action.default:g}`"
        assert row in text, f"docs/security.md (HTTP limits) has no row {row!r}"
