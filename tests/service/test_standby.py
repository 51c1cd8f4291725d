"""A standby master (``headwater master --standby``) on the same PostgreSQL takes over when the active master
is killed with ``kill -9``: clients that name both masters carry on, the graph keeps running on its worker,
and the sink ends equal to the pandas reference with nothing lost or duplicated."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import pytest

import headwater as hw
from tests.support.postgres import free_port, postgres_server
from tests.support.service import (
    ENV,
    PASSWORD,
    ROOT,
    append_and_check,
    rows,
    start,
    stop,
    submit_from_another_process,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_the_standby_takes_over_when_the_active_master_is_killed(tmp_path):
    data = tmp_path / "data"
    with postgres_server() as metadata:
        wport, a, b = free_port(), free_port(), free_port()
        worker = start("worker", data, wport)
        common = ("--worker", f"http://127.0.0.1:{wport}", "--metadata", metadata, "--heartbeat-deadline", "5")
        active = start("master", data, a, *common)
        standby = start("master", data, b, *common, "--standby")
        urls = [f"http://127.0.0.1:{a}", f"http://127.0.0.1:{b}"]
        try:
            assert httpx.get(f"{urls[0]}/v1/health").json()["role"] == "active"
            assert httpx.get(f"{urls[1]}/v1/health").json()["role"] == "standby"
            refused = httpx.post(f"{urls[1]}/v1/login", json={"user": "admin", "password": PASSWORD})
            assert refused.status_code == 503 and refused.json()["error"] == "StandbyMaster"
            third = subprocess.run([sys.executable, "-m", "headwater.cli", "master", "--data-dir", str(data),
                                    "--port", str(free_port()), *common], env=ENV, cwd=ROOT, capture_output=True,
                                   text=True, timeout=120)
            assert third.returncode == 2 and "another master is active" in third.stderr, third.stderr

            submit_from_another_process(",".join(urls))
            session = hw.connect(urls, user="admin", password=PASSWORD)
            session.use_catalog("demo")
            everything = append_and_check(session, rows(200, seed=3, start=0), rows(0, seed=3, start=0))

            stop(active, signal.SIGKILL)
            everything = append_and_check(session, rows(150, seed=4, start=200), everything)  # through the standby
            assert httpx.get(f"{urls[1]}/v1/health").json()["role"] == "active"
            events = session.state_machine_events()
            assert {"SUBMIT", "RECOVER"} <= set(events["type"])  # the log of both masters, in one store
            session.close()
        finally:
            stop(standby)
            stop(active, signal.SIGKILL)
            stop(worker)
