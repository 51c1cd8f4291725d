"""The service across hosts (network namespaces of this machine, ``tests.support.netns``): ``cluster up --hosts``
starts each process on the host its inventory names, nothing is reached through 127.0.0.1, a client on another
host runs a graph whose sink equals the pandas reference, and Spark runs its tasks on executors of two hosts."""

from __future__ import annotations

import json
import shutil
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from tests.support.netns import net_hosts
from tests.support.service import PASSWORD

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLI = "import sys; from headwater.cli import main; sys.exit(main(sys.argv[1:]))"

# The client of the cluster-up test (host 1): the graph through both masters' URLs, appends checked against
# pandas, then Spark's own record of where the graph's tasks ran (its driver's REST API).
CLUSTER_CLIENT = textwrap.dedent("""
    import sys
    import httpx
    from tests.support import service as s

    urls = sys.argv[1]
    s.submit_from_another_process(urls)
    session = s.connect(urls)
    everything = s.rows(0, seed=1, start=0)
    for k in range(3):
        everything = s.append_and_check(session, s.rows(3000, seed=k, start=3000 * k), everything)
    (worker,) = [w for w in session.workers().to_dict("records") if w["graphs"]]
    ui = worker["spark_ui"].rstrip("/")
    assert ui.startswith(worker["url"].rsplit(":", 1)[0] + ":"), worker  # the driver is on its worker's address
    (app,) = httpx.get(ui + "/api/v1/applications", timeout=10).json()
    executors = httpx.get(f"{ui}/api/v1/applications/{app['id']}/executors", timeout=10).json()
    hosts = sorted({e["hostPort"].rsplit(":", 1)[0] for e in executors if e["id"] != "driver" and e["totalTasks"]})
    print("checked", len(everything), "tasks on", " ".join(hosts), "node", worker["url"])
""")

# The same client after its graph's worker host was cut off from host 2 (Spark's master and the active master):
# the graph runs again on the other worker, and every append so far is in the sink once.
AFTER_CUT = textwrap.dedent("""
    import sys, time
    from tests.support import service as s

    urls, cut_off, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    session = s.connect(urls)

    def elsewhere():
        node = s.running_node(session)
        return node is not None and cut_off not in node

    s.wait_for(elsewhere, 120, "the graph running on the other worker")
    moved = time.time()
    frames = [s.rows(3000, seed=k, start=3000 * k) for k in range(chunks)]
    s.append_and_check(session, frames[-1], s.pd.concat(frames[:-1], ignore_index=True))
    print("moved at", moved)
""")


def test_cluster_up_on_four_hosts_runs_a_graph_on_executors_of_two_hosts_behind_a_standby(monkeypatch):
    """PostgreSQL and the client on host 1, Spark's master and the active master on 2, the standby master on 3,
    a Headwater worker and a Spark worker on each of hosts 3 and 4: every process on its own address."""
    # the PostgreSQL server runs as the user postgres when the tests run as root: it must reach the data directory
    monkeypatch.setenv("HEADWATER_ADMIN_PASSWORD", PASSWORD)  # the cluster's admin, as the client logs in
    monkeypatch.setenv("HEADWATER_DRIVER_MEMORY", "1g")  # several JVMs on one machine
    base = Path(tempfile.mkdtemp(prefix="headwater-hosts-"))
    base.chmod(0o711)
    data, inventory = base / "data", base / "hosts.toml"
    try:
        with net_hosts(4) as net:
            hosts = "".join(f'h{i} = {{ address = "{net.address(i)}", netns = "{net.name(i)}" }}\n'
                            for i in (1, 2, 3, 4))
            inventory.write_text(f'[hosts]\n{hosts}[roles]\nmaster = "h2"\nspark-master = "h2"\nstandby = "h3"\n'
                                 'postgres = "h1"\nspark-workers = ["h3", "h4"]\nworkers = ["h3", "h4"]\n')
            # `cluster up` runs on host 1: it reaches every process at its address, as an operator's machine would;
            # two cores per worker's driver, which the standalone master spreads over both Spark workers
            up = net.python(1, CLI, "cluster", "up", "--data-dir", str(data), "--hosts", str(inventory), "--postgres",
                            "--cores-per-worker", "2", "--driver-batch-rows", "0", timeout=500)
            assert up.returncode == 0, up.stdout + up.stderr
            try:
                status = net.python(1, CLI, "cluster", "status", "--data-dir", str(data))
                assert status.returncode == 0, status.stdout + status.stderr
                where = {line.split()[0]: line.split()[1] for line in status.stdout.splitlines()}
                assert where == {"spark-master": net.address(2), "spark-worker-0": net.address(3),
                                 "spark-worker-1": net.address(4), "postgres": net.address(1),
                                 "worker-0": net.address(3), "worker-1": net.address(4), "master": net.address(2),
                                 "standby": net.address(3)}
                state = json.loads((data / "cluster" / "state.json").read_text())
                assert state["masters"] == [f"http://{net.address(2)}:8765", f"http://{net.address(3)}:8765"]
                assert state["metadata"].startswith(f"postgresql://headwater@{net.address(1)}:")
                spark = net.python(2, "import httpx, sys; print(httpx.get(sys.argv[1]).text)", state["spark_ui"])
                alive = [w["host"] for w in json.loads(spark.stdout)["workers"] if w["state"] == "ALIVE"]
                assert sorted(alive) == [net.address(3), net.address(4)], spark.stdout  # Spark's own view
                client = net.python(1, CLUSTER_CLIENT, ",".join(state["masters"]), timeout=400)
                logs = "".join(f.read_text(errors="replace")[-1500:] for f in (data / "cluster" / "logs").glob("*.log"))
                assert client.returncode == 0, client.stdout + client.stderr + logs
                assert f"checked 9000 tasks on {net.address(3)} {net.address(4)} node" in client.stdout, \
                    client.stdout + logs

                # the graph's worker host cut off from host 2, Spark's master and the active master: the graph moves
                # to the other worker, whose executors still reach both hosts; then the link comes back
                node = client.stdout.split()[-1]
                cut_off = 3 if f"//{net.address(3)}:" in node else 4
                cut_at = time.time()
                net.cut(cut_off, 2)
                moved = net.python(1, AFTER_CUT, ",".join(state["masters"]), f"@{net.address(cut_off)}:", "4",
                                   timeout=400)
                assert moved.returncode == 0, moved.stdout + moved.stderr + logs
                print(f"worker host cut off from Spark's master and the master: running again after "
                      f"{float(moved.stdout.split()[-1]) - cut_at:.1f} s")
                net.restore(cut_off, 2)
                again = net.python(1, AFTER_CUT, ",".join(state["masters"]), "nowhere", "5", timeout=400)
                assert again.returncode == 0, again.stdout + again.stderr
            finally:
                down = net.python(1, CLI, "cluster", "down", "--data-dir", str(data), timeout=200)
                assert down.returncode == 0 and "stopped 8" in down.stdout, down.stdout + down.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)
