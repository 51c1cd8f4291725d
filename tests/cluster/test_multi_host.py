"""The service across hosts: a master on one namespace host, a worker (its Spark driver on the worker's own
address) on another, a client on a third; nothing reaches anything through 127.0.0.1, and the sink equals the
pandas reference."""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.support.netns import NetHosts, net_hosts
from tests.support.service import ENV, ROOT

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLIENT = textwrap.dedent("""
    import sys
    import httpx
    from tests.support import service as s

    master, worker = sys.argv[1], sys.argv[2]

    def ready():
        try:
            spark = httpx.get(worker + "/v1/health", timeout=1).json()["spark"]
            assert not spark.startswith("failed"), f"the worker's Spark did not start: {spark}"
            return spark == "ready" and httpx.get(master + "/v1/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    s.wait_for(ready, 150, "the master and the worker answering")
    s.submit_from_another_process(master)
    session = s.connect(master)
    everything = s.rows(0, seed=1, start=0)
    for k in range(2):
        everything = s.append_and_check(session, s.rows(200, seed=k, start=200 * k), everything)
    (row,) = session.workers().to_dict("records")
    assert row["url"] == worker and row["alive"] and row["graphs"], row
    assert row["spark_ui"].startswith(worker.rsplit(":", 1)[0] + ":"), row  # the driver is on the worker's address
    print("checked", len(everything))
""")


def headwater(net: NetHosts, i: int, log, *argv: str):
    return net.run(i, [sys.executable, "-m", "headwater.cli", *argv, "--host", net.address(i)], env=ENV,
                   stdout=log, stderr=log, cwd=ROOT)


def test_a_graph_runs_with_master_worker_and_client_on_three_hosts(tmp_path):
    data = tmp_path / "data"  # one file system for all: as a network file system is mounted on every host
    with net_hosts(3) as net, open(tmp_path / "service.log", "ab") as log:
        worker_url, master_url = f"http://{net.address(2)}:8766", f"http://{net.address(1)}:8765"
        worker = headwater(net, 2, log, "worker", "--data-dir", str(data), "--port", "8766", "--spark", "local[1]")
        master = headwater(net, 1, log, "master", "--data-dir", str(data), "--port", "8765", "--worker", worker_url)
        done = net.python(3, CLIENT, master_url, worker_url, timeout=240)
        service = (tmp_path / "service.log").read_text(errors="replace")[-4000:]
        assert done.returncode == 0 and "checked 400" in done.stdout, done.stdout + done.stderr + service
        assert worker.poll() is None and master.poll() is None, service
