"""Workers that join a master by themselves (``headwater worker --master URL``): the master started with
``--remote-workers`` runs graphs on them; joining needs a request signed with the worker secret and a plain http(s)://host:port."""

from __future__ import annotations

import time

import httpx
import pytest
import sqlalchemy as sa

from headwater.service.signing import Signer
from tests.support.postgres import free_port
from tests.support.service import (
    WORKER_SECRET,
    append_and_check,
    connect,
    rows,
    start,
    stop,
    submit_from_another_process,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_a_worker_joins_the_master_named_on_its_command_line(tmp_path):
    data = tmp_path / "data"
    mport, wport = free_port(), free_port()
    url = f"http://127.0.0.1:{mport}"
    master = start("master", data, mport, "--remote-workers")
    # the first master named is not there: the worker skips it and joins the next
    worker = start("worker", data, wport, "--master", f"http://127.0.0.1:{free_port()}", "--master", url)
    try:
        engine = sa.create_engine(f"sqlite:///{data / 'headwater.db'}")
        deadline = time.monotonic() + 60
        joined: list = []
        while time.monotonic() < deadline and not joined:
            with engine.connect() as c:
                joined = c.execute(sa.text("select url, compute_group from workers")).fetchall()
            time.sleep(0.2)  # polling a condition with a deadline
        engine.dispose()
        assert [tuple(r) for r in joined] == [(f"http://127.0.0.1:{wport}", "default")]

        refused = httpx.post(f"{url}/v1/workers/join", json={"url": "http://127.0.0.1:1", "group": "default"},
                             auth=Signer("wrong-secret-0123456789"))
        assert refused.status_code == 401
        hostile = httpx.post(f"{url}/v1/workers/join", json={"url": "http://evil/../x?y=1", "group": "default"},
                             auth=Signer(WORKER_SECRET))
        assert hostile.status_code == 422 and "host:port" in hostile.json()["message"]

        submit_from_another_process(url)
        session = connect(url)
        append_and_check(session, rows(120, seed=8, start=0), rows(0, seed=8, start=0))
        assert session.stream_graph_meta("totals").iloc[-1]["tasks"][0]["node"] == f"worker@127.0.0.1:{wport}"
        session.close()
    finally:
        stop(master)
        stop(worker)
