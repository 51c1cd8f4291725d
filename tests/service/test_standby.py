"""A standby master (``headwater master --standby``) on the same PostgreSQL takes over when the active master
is killed with ``kill -9``: clients that name both masters carry on, the graph keeps running on its worker,
and the sink ends equal to the pandas reference with nothing lost or duplicated."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import numpy as np
import pandas as pd
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

BIG_ROWS = 1_000_000  # 16 of the master's Arrow batches (65,536 rows), in 5 appended files


def big_table(session) -> pd.DataFrame:
    """A public table of ``BIG_ROWS`` rows (many HTTP chunks and Arrow batches of SQL result); returns its rows."""
    rng = np.random.default_rng(11)
    frame = pd.DataFrame({"k": rng.choice(["alpha", "beta", "gamma"], BIG_ROWS), "n": np.arange(BIG_ROWS),
                          "px": rng.random(BIG_ROWS)})
    session.create_stream_table("big", {"k": "string", "n": "long", "px": "double"})
    for first in range(0, BIG_ROWS, BIG_ROWS // 5):
        session.append("big", frame.iloc[first:first + BIG_ROWS // 5])
    return frame


def test_the_standby_takes_over_when_the_active_master_is_killed(tmp_path):
    data = tmp_path / "data"
    with postgres_server() as metadata:
        wport, a, b = free_port(), free_port(), free_port()
        worker = start("worker", data, wport)
        common = ("--worker", f"http://127.0.0.1:{wport}", "--metadata", metadata, "--heartbeat-deadline", "5",
                  "--sql-max-rows", str(2 * BIG_ROWS), "--sql-max-result-bytes", str(2**30))  # the big read
        active = start("master", data, a, *common, fault="sql.result.after_first_batch")
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

            # A large SQL result: the active master is killed (kill -9 at a fault point) once it has sent the
            # first batch; the client reads the whole result again from the standby that takes over.
            one = session.sql("select k, x from ticks where x = 7").to_pandas()
            assert one.to_dict("records") == [{"k": everything["k"][7], "x": 7}]
            big = big_table(session)
            got = session.sql("select k, n, px from big").to_pandas()
            assert active.wait(timeout=60) == -signal.SIGKILL  # it died mid-result, as the fault point says
            pd.testing.assert_frame_equal(got.sort_values("n", ignore_index=True), big, check_dtype=False)
            everything = append_and_check(session, rows(150, seed=4, start=200), everything)  # through the standby
            assert httpx.get(f"{urls[1]}/v1/health").json()["role"] == "active"
            events = session.state_machine_events()
            assert {"SUBMIT", "RECOVER"} <= set(events["type"])  # the log of both masters, in one store
            session.close()
        finally:
            stop(standby)
            stop(active, signal.SIGKILL)
            stop(worker)
