"""Partitions, not deaths: hosts cut off from each other while the processes on them keep running.

Six hosts (network namespaces, ``tests.support.netns``) sharing one data directory as a network file system
would: PostgreSQL and Spark's standalone master on 1, the active master on 2, a standby on 3, workers on 4 and 5
(each a Spark driver, beside a Spark worker of one core), the client on 6, which appends without pause
(idempotent appends). In turn:

* the worker running the graph is cut off from the active master: the master declares it down and moves the
  graph; the cut-off worker keeps running and is fenced (its commits refused), then the link comes back;
* the active master is cut off from PostgreSQL: it loses its lease, the standby takes over and resumes the
  graph, and the old master stops without writing;
* the graph's worker host is cut off from Spark's standalone master alone, until that master counts its Spark
  worker dead: the driver reaches its executors directly and micro-batches go on; restored, it registers again;
* (the appender stopped) the client is cut off from the active master, the old one restarted as the
  standby, as it makes an append: the call keeps trying both masters and completes once the link returns,
  within its failover timeout;

after each the graph is running again within its deadline, and at the end the sink equals the pandas
reference: nothing lost, nothing duplicated. The recovery times are printed (``docs/deployment.md``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from headwater.service.cluster import SPARK_MASTER_CLASS, SPARK_WORKER_CLASS, _spark_env
from tests.support.netns import NetHosts, net_hosts
from tests.support.service import ENV, ROOT, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow]

PG, ACTIVE, STANDBY, CLIENT_HOST = 1, 2, 3, 6
WORKERS = (4, 5)
LEASE_S = 10.0
HEARTBEAT_DEADLINE_S = 3.0
MOVED_WITHIN_S = 90.0  # heartbeat deadline, then a start on a worker whose Spark runs (a first batch, cold)
TAKEOVER_WITHIN_S = 120.0  # the lease, the standby's poll, its start and the graph resumed on the workers
# a Spark worker unheard of this long is dead to Spark's master (60 s by default), so that a cut outlasts it; 5 s
# made executors flap on the loaded 2-core machine (heartbeats late)
SPARK_TIMEOUT_S = 15

# One step of the client (host 6): actions on the graph through both masters' URLs, printing what it saw.
CLIENT = textwrap.dedent("""
    import sys, time
    import httpx
    from tests.support import service as s

    action, urls = sys.argv[1], sys.argv[2]

    node = s.running_node

    if action == "ready":
        def ready():
            try:
                answers = [httpx.get(u + "/v1/health", timeout=1).json() for u in sys.argv[3:]]
                return all(a.get("spark", "ready") == "ready" for a in answers)
            except (httpx.TransportError, ValueError):
                return False
        s.wait_for(ready, 200, "every process answering")
        s.submit_from_another_process(urls)
        print("submitted")
    elif action == "check":  # the sink holds exactly the chunks the appender committed
        chunks = int(sys.argv[3])
        session = s.connect(urls)
        session.wait_until_caught_up("totals", timeout=300)
        want = s.reference(s.pd.concat([s.rows(200, seed=k, start=200 * k) for k in range(chunks)],
                                       ignore_index=True))
        s.pd.testing.assert_frame_equal(s.results(session), want, check_dtype=False)
        print("node", node(session))
    elif action == "append-one":  # chunk argv[3], as the appender would have made it
        import headwater as hw
        k = int(sys.argv[3])
        session = hw.connect(urls, user="admin", password=s.PASSWORD, client_id="appender")
        session.use_catalog("demo")
        session.append("ticks", s.rows(200, seed=k, start=200 * k), sequence=k)
        print("appended", k)
    elif action == "spark-workers":  # Spark's master has (at least, or exactly) this many workers alive
        exactly = sys.argv[5:] == ["exactly"]
        def alive():
            try:
                n = httpx.get(sys.argv[3], timeout=1).json()["aliveworkers"]
            except (httpx.TransportError, ValueError, KeyError):
                return False
            return n == int(sys.argv[4]) if exactly else n >= int(sys.argv[4])
        s.wait_for(alive, 120, "the Spark workers registered")
    elif action == "node":
        session = s.connect(urls)
        s.wait_for(lambda: node(session) is not None, 120, "the graph running")
        print("node", node(session))
    elif action == "moved-from":
        session = s.connect(urls)
        s.wait_for(lambda: node(session) not in (None, sys.argv[3]), float(sys.argv[4]), "the graph moved")
        print("at", time.time(), "node", node(session))
    elif action == "role":
        def role():
            try:
                return httpx.get(sys.argv[3] + "/v1/health", timeout=1).json().get("role") == sys.argv[4]
            except (httpx.TransportError, ValueError):
                return False
        s.wait_for(role, 120, sys.argv[3] + " " + sys.argv[4])
    elif action == "active":
        url = sys.argv[3]
        def active():
            try:
                return httpx.get(url + "/v1/health", timeout=1).json().get("role") == "active"
            except (httpx.TransportError, ValueError):
                return False
        s.wait_for(active, float(sys.argv[4]), url + " active")
        session = s.connect(urls)
        s.wait_for(lambda: node(session) is not None, float(sys.argv[4]), "the graph running")
        print("at", time.time(), "node", node(session))
""")


# Appends chunk after chunk (idempotent: a fixed client id and a sequence per chunk, so a call repeated after a
# cut commits once) until the file argv[3] exists; prints each chunk committed.
APPENDER = textwrap.dedent("""
    import os, sys
    import headwater as hw
    from tests.support import service as s

    session = hw.connect(sys.argv[1], user="admin", password=s.PASSWORD, client_id="appender")
    session.use_catalog("demo")
    k = 0
    while not os.path.exists(sys.argv[2]):
        session.append("ticks", s.rows(200, seed=k, start=200 * k), sequence=k)
        print("appended", k, flush=True)
        k += 1
        session.wait_until_caught_up("totals", timeout=300)  # one chunk per micro-batch or so: no flood
    print("total", k, flush=True)
""")


class Appender:
    """The appender on the client's host, its progress read as it prints it."""

    def __init__(self, net: NetHosts, urls: list[str], stop: Path) -> None:
        self.stop, self.lines = stop, []
        self.proc = net.run(CLIENT_HOST, [sys.executable, "-c", APPENDER, ",".join(urls), str(stop)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.reader.start()

    def appended(self) -> int:
        return sum(line.startswith("appended") for line in list(self.lines))

    def more(self, n: int, within: float, why: str) -> None:
        """Wait until ``n`` more chunks are committed (the appender still alive)."""
        target = self.appended() + n

        def done() -> bool:
            assert self.proc.poll() is None, f"the appender stopped: {self.proc.stderr.read()[-3000:]}"
            return self.appended() >= target

        wait_for(done, within, f"{n} more appends {why}")

    def finish(self) -> int:
        self.stop.touch()
        self.proc.wait(timeout=300)
        self.reader.join(timeout=10)
        assert self.proc.returncode == 0, self.proc.stderr.read()[-3000:]
        return int(next(line.split()[1] for line in self.lines if line.startswith("total")))


START_POSTGRES = textwrap.dedent("""
    import sys
    from pathlib import Path
    from headwater.service.hosts import Host
    from headwater.service.postgres import password, start_postgres

    root = Path(sys.argv[1])
    server, url = start_postgres(root, host=Host("pg", sys.argv[2]))
    print(url.replace("headwater@", f"headwater:{password(root)}@", 1))
""")


def connecting(net: NetHosts, host: int, to: int) -> bool:
    """Whether a process on ``host`` is trying to open a TCP connection to ``to`` (a SYN sent, unanswered)."""
    sockets = subprocess.run(net.command(host, ["ss", "-Htn", "state", "syn-sent", "dst", net.address(to)]),
                             capture_output=True, text=True, check=True)
    return bool(sockets.stdout.strip())


class Service:
    def __init__(self, net: NetHosts, data: Path, metadata: str, log) -> None:
        self.net, self.data, self.metadata, self.log = net, data, metadata, log
        self.urls = [self.url(ACTIVE, 8765), self.url(STANDBY, 8765)]
        self.worker_urls = [self.url(w, 8766) for w in WORKERS]

    def url(self, host: int, port: int) -> str:
        return f"http://{self.net.address(host)}:{port}"

    def headwater(self, host: int, *argv: str):
        return self.net.run(host, [sys.executable, "-m", "headwater.cli", *argv, "--host", self.net.address(host),
                                   "--log-level", "info"], env=ENV, stdout=self.log, stderr=self.log, cwd=ROOT)

    def master(self, host: int, *extra: str):
        workers = [a for w in self.worker_urls for a in ("--worker", w)]
        return self.headwater(host, "master", "--data-dir", str(self.data), "--port", "8765", "--metadata",
                              self.metadata, "--heartbeat", "0.5", "--heartbeat-deadline", str(HEARTBEAT_DEADLINE_S),
                              "--lease-seconds", str(LEASE_S), *workers, *extra)

    def spark(self) -> str:
        """Spark's standalone master on PostgreSQL's host and a Spark worker (one core) on each worker's host;
        returns the master's URL once both workers have registered."""
        env = {**_spark_env(self.data.parent / "spark"),
               "SPARK_MASTER_OPTS": f"-Dspark.worker.timeout={SPARK_TIMEOUT_S}"}
        spark_class = str(Path(env["SPARK_HOME"]) / "bin" / "spark-class")
        on = self.net.address(PG)
        self.net.run(PG, [spark_class, SPARK_MASTER_CLASS, "--host", on, "--port", "7077", "--webui-port", "8080"],
                     env={**env, "SPARK_LOCAL_IP": on}, stdout=self.log, stderr=self.log)
        for w in WORKERS:
            at = self.net.address(w)
            self.net.run(w, [spark_class, SPARK_WORKER_CLASS, "--host", at, "--cores", "1", "--memory", "1g",
                             "--work-dir", str(self.data.parent / "spark" / f"work-{w}"), f"spark://{on}:7077"],
                         env={**env, "SPARK_LOCAL_IP": at}, stdout=self.log, stderr=self.log)
        self.client("spark-workers", f"http://{on}:8080/json/", str(len(WORKERS)))
        return f"spark://{on}:7077"

    def worker(self, host: int, spark: str):
        return self.headwater(host, "worker", "--data-dir", str(self.data), "--port", "8766", "--spark", spark,
                              "--spark-cores", "1", "--driver-batch-rows", "0")

    def client(self, action: str, *args: str, timeout: float = 400) -> str:
        done = self.net.python(CLIENT_HOST, CLIENT, action, ",".join(self.urls), *args, timeout=timeout)
        assert done.returncode == 0, f"client {action}: {done.stdout}{done.stderr[-3000:]}{self.tail()}"
        return done.stdout

    def tail(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-6000:]


def test_cut_off_worker_master_and_client_lose_and_duplicate_nothing(monkeypatch):
    monkeypatch.setitem(ENV, "HEADWATER_DRIVER_MEMORY", "1g")  # several JVMs on one machine
    # the PostgreSQL server runs as the user postgres when the tests run as root: it must reach its directory
    base = Path(tempfile.mkdtemp(prefix="headwater-partitions-"))
    base.chmod(0o711)
    recoveries: dict[str, float] = {}
    try:
        with net_hosts(6) as net, open(base / "service.log", "ab") as log:
            # started from host 1, which its readiness check must reach; it outlives that process (its own
            # session) and is killed with the hosts' processes
            started = net.python(PG, START_POSTGRES, str(base / "pg"), net.address(PG), timeout=120)
            assert started.returncode == 0, started.stdout + started.stderr
            metadata = started.stdout.split()[-1]
            service = Service(net, base / "data", metadata, log)
            spark = service.spark()
            workers = {w: service.worker(w, spark) for w in WORKERS}
            active = service.master(ACTIVE)
            service.client("role", service.urls[0], "active")  # it holds the lease before the standby starts
            standby = service.master(STANDBY, "--standby")
            assert "submitted" in service.client("ready", service.urls[0], *service.worker_urls)
            appender = Appender(net, service.urls, base / "stop-appending")
            appender.more(2, 120, "before any cut")
            node = service.client("node").split()[-1]

            # 1. the worker running the graph, cut off from the active master
            cut_off = next(w for w in WORKERS if node.endswith(f"@{net.address(w)}:8766"))
            cut_at = time.time()
            net.cut(ACTIVE, cut_off)
            moved = service.client("moved-from", node, str(MOVED_WITHIN_S)).split()
            recoveries["worker cut off from the master"] = float(moved[1]) - cut_at
            appender.more(2, 120, "on the other worker (the cut-off one fenced)")
            net.restore(ACTIVE, cut_off)
            appender.more(1, 120, "after the link came back")
            assert workers[cut_off].poll() is None, "a fenced worker keeps serving (its graph was moved away)"

            # 2. the active master, cut off from PostgreSQL
            cut_at = time.time()
            net.cut(ACTIVE, PG)
            took_over = service.client("active", service.urls[1], str(TAKEOVER_WITHIN_S)).split()
            recoveries["active master cut off from PostgreSQL"] = float(took_over[1]) - cut_at
            appender.more(2, 120, "through the new active master")
            net.restore(ACTIVE, PG)
            assert active.wait(timeout=LEASE_S * 6) == 3, "the master that lost its lease stops (exit status 3)"
            assert standby.poll() is None

            # 4. the graph's worker (its Spark driver, and the Spark worker on its host) cut off from Spark's
            # master alone, until that master counts the Spark worker dead: the driver reaches its executors
            # directly, so micro-batches go on; the link restored, the Spark worker registers again
            node = service.client("node").split()[-1]
            cut_off = next(w for w in WORKERS if node.endswith(f"@{net.address(w)}:8766"))
            spark_ui = f"http://{net.address(PG)}:8080/json/"
            cut_at = time.time()
            net.cut(cut_off, PG)
            service.client("spark-workers", spark_ui, str(len(WORKERS) - 1), "exactly")
            appender.more(2, 120, "while the graph's worker is cut off from Spark's master")
            recoveries["worker cut off from Spark's master (cut, still appending)"] = time.time() - cut_at
            net.restore(cut_off, PG)
            service.client("spark-workers", spark_ui, str(len(WORKERS)))
            appender.more(1, 120, "after Spark's master came back in reach")

            total = appender.finish()
            service.client("check", str(total))  # every chunk the appender committed, exactly once

            # 3. the client, cut off from the active master (the old one restarted as the standby) as it appends: the
            # call keeps trying both masters until the link returns, within its failover timeout (60 s)
            service.master(ACTIVE, "--standby")
            service.client("role", service.urls[0], "standby")
            net.cut(CLIENT_HOST, STANDBY)
            calling = net.run(CLIENT_HOST, [sys.executable, "-c", CLIENT, "append-one", ",".join(service.urls),
                                            str(total)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT)
            wait_for(lambda: connecting(net, CLIENT_HOST, STANDBY) or calling.poll() is not None, 60,
                     "the cut-off client trying the active master")
            assert calling.poll() is None, "the call cannot have ended: the active master was out of reach"
            restored_at = time.time()
            net.restore(CLIENT_HOST, STANDBY)
            out, err = calling.communicate(timeout=300)
            assert calling.returncode == 0, out + err + service.tail()
            recoveries["client cut off from the active master (from the link's return)"] = time.time() - restored_at
            service.client("check", str(total + 1))
            print("recovery after a partition:", {k: round(v, 1) for k, v in recoveries.items()})
    finally:
        shutil.rmtree(base, ignore_errors=True)
