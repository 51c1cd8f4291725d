"""headwater.spark.zygote: Spark's daemon and source runners hand their place to a warm zygote, which forks a process
in their place, or run as Spark started them when they may not.

Each daemon test starts the daemon as Spark's ``PythonWorkerFactory`` does (its module, Spark's variables, stdin and
stdout pipes), reads the port it reports and asks it for a worker, as Spark does: the worker's parent says who
forked it (the zygote's process in the daemon's place, or the daemon itself).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import struct
import subprocess
import sys
import time

import psutil
import pytest

from headwater.spark import zygote

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets are Linux's")

# a zygote with nothing to load, so that these tests take a second, not the kernels' load
QUICK_ZYGOTE = "import sys; from headwater.spark import zygote; zygote.serve(sys.argv[1], sys.argv[2], lambda: None)"
DEADLINE_S = 60


# a driver process: starts its zygote as build_spark does, says where it listens, then lives until its stdin ends
DRIVER = """
import os, sys
from headwater.spark import zygote
zygote.start()
print(os.environ[zygote.ENV], zygote._started.pid, flush=True)
sys.stdin.read()
"""


def spark_environment(**extra: str) -> dict[str, str]:
    """What Spark gives its daemon: the driver's environment, its variables, its archives first on the path."""
    spark_files = f"{os.environ.get('SPARK_HOME', '/nonexistent')}/python/lib/pyspark.zip"
    path = os.pathsep.join(p for p in (spark_files, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **zygote.spark_environment(dict(os.environ)), "PYTHONPATH": path,
            "PYTHON_WORKER_FACTORY_SECRET": "s", "SPARK_REUSE_WORKER": "1", **extra}


def quick_zygote() -> tuple[subprocess.Popen[bytes], str]:
    """A zygote (nothing to load), listening, and the value of ``HEADWATER_PYTHON_ZYGOTE`` that names it."""
    name, token = f"headwater-zygote-test-{secrets.token_hex(8)}", secrets.token_hex(8)
    proc = subprocess.Popen([sys.executable, "-c", QUICK_ZYGOTE, name, token], stdin=subprocess.PIPE,
                            env={**os.environ, **zygote.spark_environment(dict(os.environ))})
    wait_listening(proc, name)
    return proc, f"{name}:{token}"


def wait_listening(proc: subprocess.Popen[bytes], name: str) -> None:
    """Until the zygote listens (a real one has seconds to, while Spark's JVM starts)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        with open("/proc/net/unix") as sockets:
            if any(line.rstrip().endswith(" @" + name) for line in sockets):
                return
        assert time.monotonic() < deadline and proc.poll() is None, "the zygote did not start listening"
        time.sleep(0.01)


def start_daemon(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "headwater.spark.daemon", "pyspark.worker"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def fork_worker(daemon: subprocess.Popen[bytes]) -> int:
    """Spark's ``createWorker``: the port from the daemon's stdout, a connection, the forked worker's pid."""
    assert daemon.stdout is not None
    (port,) = struct.unpack("!i", daemon.stdout.read(4))
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as conn:
        (pid,) = struct.unpack("!i", conn.makefile("rb").read(4))
    return pid


def forked_by(pid: int) -> int:
    """The process that forked ``pid``'s parent: a worker of a daemon the zygote forked has the zygote there."""
    return psutil.Process(psutil.Process(pid).ppid()).ppid()


def wait_ended(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        proc.wait(timeout=DEADLINE_S)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while psutil.pid_exists(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        assert time.monotonic() < deadline, f"process {pid} did not end"
        time.sleep(0.01)


def stop(daemon: subprocess.Popen[bytes]) -> None:
    """What Spark does to stop its daemon: close its stdin."""
    assert daemon.stdin is not None
    daemon.stdin.close()


def test_the_daemon_spark_starts_hands_its_place_to_the_drivers_warm_zygote():
    env = {k: v for k, v in os.environ.items() if k != zygote.ENV}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert driver.stdout is not None
        spec, pid = driver.stdout.readline().decode().split()
        wait_listening(driver, spec.partition(":")[0])  # the real zygote, loading every kernel; Spark's JVM takes seconds
        daemon = start_daemon(spark_environment(**{zygote.ENV: spec}))
        worker = fork_worker(daemon)
        in_its_place = psutil.Process(worker).ppid()
        assert forked_by(worker) == int(pid)  # by the daemon the zygote forked, not by the one Spark started
        assert daemon.poll() is None  # Spark's daemon process waits for the one in its place
        stop(daemon)
        wait_ended(daemon)
        wait_gone(in_its_place)
        assert psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE  # serves the driver's next JVM
    finally:
        stop(driver)
        wait_ended(driver)
    wait_gone(int(pid))  # it ends with its driver


def test_a_zygote_started_unlike_spark_would_is_refused_and_the_daemon_loads_the_kernels_itself():
    proc, spec = quick_zygote()
    daemon = start_daemon(spark_environment(**{zygote.ENV: spec, "PYTHONHASHSEED": "7"}))
    try:
        worker = fork_worker(daemon)
        assert psutil.Process(worker).ppid() == daemon.pid
        assert proc.poll() is None  # refused one offer, it still serves the driver's next process
    finally:
        stop(daemon)
        wait_ended(daemon)
        stop(proc)
        wait_ended(proc)


@pytest.mark.parametrize("bad", [
    {"token": "0" * 16, "environ": {}, "argv": [], "path": []},  # another token
    {"environ": dict(os.environ), "argv": [], "path": list(sys.path), "module": "os"},  # a module not stood in for
    {"environ": {"A": 1}, "argv": [], "path": []},  # not strings
    {"environ": [], "argv": [], "path": []},
    {"environ": {}, "argv": "pyspark.worker", "path": []},
    [],
    "x" * 100,
], ids=["token", "module", "environ-values", "environ-list", "argv-string", "list", "string"])
def test_bad_offers_are_not_taken_and_the_daemons_is(bad):
    proc, spec = quick_zygote()
    name, _, token = spec.partition(":")
    if isinstance(bad, dict):
        bad = {"token": token, "executable": sys.executable, **bad}
    with open(os.devnull, "rb") as devnull, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect("\0" + name)
        offer = json.dumps(bad).encode()
        socket.send_fds(conn, [struct.pack("!I", len(offer))], [devnull.fileno()] * 3)
        conn.sendall(offer)
        assert conn.recv(100) == b""  # closed without an answer
    daemon = start_daemon(spark_environment(**{zygote.ENV: spec}))
    try:
        assert forked_by(fork_worker(daemon)) == proc.pid
    finally:
        stop(daemon)
        stop(proc)
        wait_ended(proc, daemon)


def test_sigterm_to_the_daemon_ends_the_process_in_its_place():
    proc, spec = quick_zygote()
    daemon = start_daemon(spark_environment(**{zygote.ENV: spec}))
    worker = fork_worker(daemon)
    in_its_place = psutil.Process(worker).ppid()
    assert psutil.Process(in_its_place).ppid() == proc.pid
    daemon.terminate()  # Spark's stopDaemon destroys the process it started
    wait_ended(daemon)
    wait_gone(in_its_place)
    wait_gone(worker)  # PySpark's daemon ends its workers as it stops
    stop(proc)
    wait_ended(proc)


def test_a_zygote_ends_with_its_driver():
    proc, _spec = quick_zygote()
    assert proc.stdin is not None
    proc.stdin.close()
    wait_ended(proc)


FAILED_CONNECT = """
import os, sys
import headwater as hw
from headwater.spark import zygote
held = hw.connect(sys.argv[1], start_spark=False)
started, stop = [], zygote.stop
zygote.stop = lambda: (started.append(zygote._started.pid), stop())
try:
    hw.connect(sys.argv[1])
except hw.DataDirectoryInUseError:
    print(started[0], zygote.ENV in os.environ, flush=True)
sys.stdin.read()
"""


def test_a_connect_that_fails_before_spark_starts_ends_its_zygote(tmp_path):
    """connect() starts the zygote before it opens the data directory: one in use raises, and the zygote ends then
    rather than idling (about 260 MB) until its driver exits or for IDLE_SECONDS."""
    env = {k: v for k, v in os.environ.items() if k != zygote.ENV}
    driver = subprocess.Popen([sys.executable, "-c", FAILED_CONNECT, str(tmp_path)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    try:
        assert driver.stdout is not None
        pid, named = driver.stdout.readline().decode().split()
        assert named == "False"  # named to no JVM any more
        wait_gone(int(pid))
    finally:
        stop(driver)
        wait_ended(driver)


def test_without_a_zygote_the_daemon_hands_nothing_over(monkeypatch):
    monkeypatch.delenv(zygote.ENV, raising=False)
    assert zygote.hand_over() is False
    monkeypatch.setenv(zygote.ENV, f"headwater-zygote-test-{secrets.token_hex(8)}:x")  # nobody listens there
    assert zygote.hand_over() is False


def test_mismatch_names_what_spark_would_have_started_differently(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_NUM_THREADS", "2")
    same = {"executable": sys.executable, "path": list(sys.path), "environ": dict(os.environ)}
    assert zygote.mismatch(same) == ""
    assert "interpreter" in zygote.mismatch({**same, "executable": "/usr/bin/python3.9"})
    assert "NUMBA_NUM_THREADS" in zygote.mismatch({**same, "environ": {**os.environ, "NUMBA_NUM_THREADS": "1"}})
    # Spark's own variables and Headwater's are read when used, and Spark's archives hold no module of ours
    assert zygote.mismatch({**same, "environ": {**os.environ, "PYTHON_WORKER_FACTORY_SECRET": "s",
                                                "HEADWATER_SPARK_UI": "on"},
                            "path": [*sys.path, "/nonexistent/python/lib/pyspark.zip"]}) == ""
    assert zygote.mismatch({**same, "path": [str(tmp_path), *sys.path]}) == "another import path"


def test_archives_without_python_leave_the_import_path(tmp_path):
    import zipfile

    from headwater.spark.daemon import without_empty_archives

    jar, modules = tmp_path / "core.jar", tmp_path / "pyspark.zip"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("org/apache/spark/Foo.class", b"\xca\xfe")
    with zipfile.ZipFile(modules, "w") as z:
        z.writestr("pyspark/__init__.py", "")
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    paths = [str(tmp_path), str(jar), str(modules), str(tmp_path / "absent.zip"), str(tmp_path / "broken.zip")]
    assert without_empty_archives(paths) == [str(tmp_path), str(modules), str(tmp_path / "absent.zip"),
                                              str(tmp_path / "broken.zip")]


# a module the zygote may run in a process's place in these tests: says who forked it, then echoes a line
PROBE = """
import os, sys
print(os.getpid(), os.getppid(), os.environ.get("PROBE"), *sys.argv[1:], flush=True)
print(sys.stdin.readline().strip(), flush=True)
"""
ALLOW_PROBE = "from headwater.spark import zygote; zygote.STAND_IN_MODULES = frozenset({'hw_probe'}); "


def probe_environment(tmp_path, **extra: str) -> dict[str, str]:
    (tmp_path / "hw_probe.py").write_text(PROBE)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **zygote.spark_environment(dict(os.environ)), "PYTHONPATH": path, **extra}


@pytest.fixture
def probing_zygote(tmp_path):
    """A quick zygote that may run ``hw_probe`` in a process's place, and its name; ended with the test."""
    name, token = f"headwater-zygote-test-{secrets.token_hex(8)}", secrets.token_hex(8)
    proc = subprocess.Popen([sys.executable, "-c", ALLOW_PROBE + "import sys; zygote.serve(sys.argv[1], sys.argv[2], "
                             "lambda: None)", name, token], stdin=subprocess.PIPE, env=probe_environment(tmp_path))
    wait_listening(proc, name)
    yield proc, f"{name}:{token}"
    stop(proc)
    wait_ended(proc)


def start_stand_in(env: dict[str, str], allow: bool = True, *args: str) -> subprocess.Popen[bytes]:
    """``headwater-spark-python -m hw_probe ARGS``, as Spark starts a source runner (or a planners' daemon)."""
    code = (ALLOW_PROBE if allow else "from headwater.spark import zygote; ") + \
        f"import sys; sys.argv = ['headwater-spark-python', '-m', 'hw_probe', *{list(args)!r}]; zygote.stand_in()"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def test_a_source_runners_place_goes_to_a_process_the_zygote_forks(tmp_path, probing_zygote):
    proc, spec = probing_zygote
    runner = start_stand_in(probe_environment(tmp_path, PROBE="runner", **{zygote.ENV: spec}), True, "an-argument")
    out, _ = runner.communicate(b"a line\n", timeout=DEADLINE_S)
    first, echoed = out.decode().splitlines()
    pid, parent, variable, argument = first.split()
    # its streams, its environment, its arguments
    assert (int(parent), variable, argument, echoed) == (proc.pid, "runner", "an-argument", "a line")
    assert int(pid) != runner.pid and runner.returncode == 0  # the process Spark started waited for it
    assert proc.poll() is None  # and serves the next


def test_sigterm_to_a_stood_in_source_runner_ends_the_process_in_its_place(tmp_path, probing_zygote):
    proc, spec = probing_zygote
    runner = start_stand_in(probe_environment(tmp_path, **{zygote.ENV: spec}))
    assert runner.stdout is not None
    pid, parent, _ = runner.stdout.readline().decode().split()
    assert int(parent) == proc.pid
    runner.terminate()  # Spark destroys a source runner so as its query stops
    wait_ended(runner)
    wait_gone(int(pid))


def test_what_the_zygote_may_not_run_runs_as_spark_started_it(tmp_path, probing_zygote):
    """A module not stood in for, and any module when no zygote listens: the interpreter runs it, in that process."""
    _proc, spec = probing_zygote
    nobody = f"headwater-zygote-none-{secrets.token_hex(4)}:x"
    for env, allow in [(probe_environment(tmp_path, **{zygote.ENV: spec}), False),
                       (probe_environment(tmp_path, **{zygote.ENV: nobody}), True)]:
        runner = start_stand_in(env, allow)
        out, _ = runner.communicate(b"x\n", timeout=DEADLINE_S)
        pid, parent, _ = out.decode().split()[:3]
        assert (int(pid), int(parent)) == (runner.pid, os.getpid())
