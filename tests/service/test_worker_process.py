"""``headwater worker`` as its own process, reached by the master over HTTP: the worker joins the master named on
its command line (``--master``; joining needs a request signed with the worker secret and a plain
http(s)://host:port), the master (``--remote-workers``) runs no Spark, the graph runs on the worker, and a
``kill -9`` of the master loses and duplicates nothing."""

from __future__ import annotations

import signal

import httpx
import pytest
import sqlalchemy as sa

import headwater as hw
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
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def joined_workers(data) -> list[tuple[str, str]]:
    engine = sa.create_engine(f"sqlite:///{data / 'headwater.db'}")
    try:
        with engine.connect() as c:
            return [tuple(r) for r in c.execute(sa.text("select url, compute_group from workers")).fetchall()]
    finally:
        engine.dispose()


def test_a_master_without_spark_drives_a_worker_that_joined_it_and_survives_kill_9(tmp_path):
    data, worker_port, master_port = tmp_path / "data", free_port(), free_port()
    url, worker_url = f"http://127.0.0.1:{master_port}", f"http://127.0.0.1:{worker_port}"
    master = start("master", data, master_port, "--remote-workers")
    # the first master named is not there: the worker skips it and joins the next
    worker = start("worker", data, worker_port, "--group", "analytics",
                   "--master", f"http://127.0.0.1:{free_port()}", "--master", url)
    try:
        wait_for(lambda: joined_workers(data), 60, "the worker joining")
        assert joined_workers(data) == [(worker_url, "analytics")]
        # joining needs the worker secret and a plain host:port
        refused = httpx.post(f"{url}/v1/workers/join", json={"url": "http://127.0.0.1:1", "group": "default"},
                             auth=Signer("wrong-secret-0123456789"))
        assert refused.status_code == 401
        hostile = httpx.post(f"{url}/v1/workers/join", json={"url": "http://evil/../x?y=1", "group": "default"},
                             auth=Signer(WORKER_SECRET))
        assert hostile.status_code == 422 and "host:port" in hostile.json()["message"]

        # the worker refuses anyone without the master's secret (or its mere bearer), and malformed messages
        assert httpx.post(f"{worker_url}/v1/worker/request", json={"type": "Shutdown"}).status_code == 401
        assert httpx.post(f"{worker_url}/v1/worker/request", json={"type": "Shutdown"},
                          headers={"Authorization": f"Bearer {WORKER_SECRET}"}).status_code == 401
        assert httpx.post(f"{worker_url}/v1/worker/request", json={"type": "Shutdown"},
                          auth=Signer("a-guessed-secret-0123456789")).status_code == 401
        bad = httpx.post(f"{worker_url}/v1/worker/request", json={"type": "RunShell", "cmd": "id"},
                         auth=Signer(WORKER_SECRET))
        assert bad.status_code == 422 and bad.json()["error"] == "RequestError"

        submit_from_another_process(url, "analytics")
        session = connect(url)
        # a graph for a compute group that has no live worker: refused with the reason, the other graph unharmed
        g = session.stream_graph("elsewhere")
        g.source_by_name("ticks").sink("copy")
        with pytest.raises(hw.ExecutionError, match=r"no live worker in compute group 'risk'.*analytics"):
            g.submit(compute_group="risk")
        assert session.stream_graph_meta("elsewhere").iloc[-1]["status"] == "failed"
        with pytest.raises(hw.GraphDefinitionError, match="compute group"):
            g.submit(compute_group="../x")
        first = append_and_check(session, rows(300, seed=3, start=0), rows(0, seed=3, start=0))
        assert session.stream_graph_meta("totals").iloc[-1]["tasks"][0]["node"] == f"worker@127.0.0.1:{worker_port}"
        session.close()

        stop(master, signal.SIGKILL)  # the master dies; the worker and its queries do not
        assert httpx.get(f"{worker_url}/v1/health").status_code == 200
        master = start("master", data, master_port, "--remote-workers")  # it still knows the worker that joined
        session = connect(url)
        append_and_check(session, rows(200, seed=4, start=300), first)
        session.close()
    finally:
        stop(master)
        stop(worker)
