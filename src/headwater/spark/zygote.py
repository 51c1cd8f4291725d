"""A warm Python process started beside Spark's JVM, which forks the Python processes Spark starts on this machine.

Spark starts a driver's Python processes one at a time, under one lock (``SparkEnv.createPythonWorker``), and it
holds that lock until its daemon (:mod:`headwater.spark.daemon`) has forked a first worker. That daemon loads every
kernel first (~1.8 s on two cores), so the queries' source runners, which a graph needs to start, wait for it.

A driver with a local master therefore starts a *zygote* as it launches its JVM (:func:`start`): a process that
loads the same kernels while the JVM starts. When Spark later starts its daemon, that process offers the zygote its
environment, its arguments and its standard streams (:func:`hand_over`). The zygote checks that it was started as
Spark would start a daemon (same interpreter, import path and start-up variables), and forks a process that takes
the streams over and runs PySpark's daemon loop; the process Spark started waits for that one and forwards SIGTERM
to it. Spark's lock is then held for one Python start, not for the kernels' load.

Spark also starts a new interpreter for each streaming query's source runner, on the query's first trigger, and for
the daemon of each kind of the source's planners: 0.3 s of imports (PySpark, Arrow) each before the query can plan.
Headwater's source is registered with :data:`LAUNCHER` as its interpreter
(:func:`headwater.spark.fused.register_source`), which offers such a process's place to the zygote in the same way
(:func:`stand_in`); any other command it runs as the interpreter would.

The zygote serves until its driver ends (its stdin closes), or for ``IDLE_SECONDS`` when no offer came; a process
that finds no zygote, or is refused, runs as Spark started it. The hand-over is a Linux abstract socket: only a
process of this user that knows its random name and token is heard, only the modules of
:data:`STAND_IN_MODULES` are run, and a bounded number of bad offers ends the zygote.
"""

from __future__ import annotations

import contextlib
import hmac
import importlib.util
import json
import os
import re
import secrets
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

ENV = "HEADWATER_PYTHON_ZYGOTE"
"""``<socket name>:<token>`` in the environment of Spark's JVM, so of the daemon it starts."""

SWITCH = "HEADWATER_ZYGOTE"
"""``off``: no zygote (Spark's daemon loads the kernels itself, as a remote executor's does)."""

MAX_OFFER_BYTES = 1 << 20  # an offer is a JSON environment and path list: kilobytes
OFFER_SECONDS = 10.0  # to read an offer, which its daemon sends at once
# how long a daemon waits for the zygote's answer, which comes once the kernels are loaded: a fresh install
# compiles them first (minutes), and a daemon that gave up would compile them again beside the zygote
ANSWER_SECONDS = 600.0
IDLE_SECONDS = 600.0  # a zygote no daemon came for (a driver that never ran Python workers) ends
MAX_BAD_OFFERS = 8
# variables the interpreter, its allocator and the data plane's libraries read as they start or load: a zygote
# started with other values is not what Spark would have started. The others are read when used, so after the
# zygote took the daemon's environment over (PySpark's PYTHON_WORKER_FACTORY_SECRET, Headwater's own settings).
_START_SENSITIVE = re.compile(r"^(PYTHON(?!_)|NUMBA_|OMP_|OPENBLAS_|MKL_|ARROW_|LD_|MALLOC_|GLIBC_TUNABLES$)")
_SKIPPED = {ENV, "PYTHONPATH"}  # the name differs by design; the import path is compared as sys.path
STAND_IN_MODULES = frozenset({"pyspark.sql.streaming.python_streaming_source_runner", "pyspark.daemon"})
"""What Spark starts as a new interpreter for Headwater's source that the zygote may fork instead: each streaming
query's source runner, whose start (0.3 s of imports) is part of the query's first trigger, and the daemons of the
source's planners (one per kind of planner: finding the source, planning its reads)."""
LAUNCHER = "headwater-spark-python"
"""The command (installed beside the interpreter) that offers such a process's place to the zygote (:func:`stand_in`)."""

_started: subprocess.Popen[bytes] | None = None


def spark_environment(environ: dict[str, str]) -> dict[str, str]:
    """The start-up variables Spark gives its Python daemon beyond the driver's own (``PythonRunner``)."""
    return {"PYTHONHASHSEED": environ.get("PYTHONHASHSEED", "0"), "PYTHONUNBUFFERED": "YES",
            "OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS", "1")}


def start(master: str = "local[*]") -> None:
    """Start a zygote for the JVM this process is about to launch, and name it in ``os.environ`` for the JVM.

    Only for a local ``master`` (whose daemon Spark starts on this machine), where Spark will fork this
    interpreter (``PYSPARK_PYTHON``), on Linux, unless
    ``HEADWATER_ZYGOTE=off``; not when this process's JVM runs already."""
    global _started
    if _started is not None and _started.poll() is None and ENV in os.environ:
        return  # started early (as connect() began), or serving an earlier JVM of this process: it serves this one
    os.environ.pop(ENV, None)
    if not isinstance(master, str) or not master.startswith("local") or os.environ.get(SWITCH, "on") == "off":
        return
    if not sys.platform.startswith("linux") or not hasattr(os, "pidfd_open"):
        return
    if _jvm_runs():
        return  # this process's JVM runs already, and with it its daemon
    if os.path.realpath(os.environ.get("PYSPARK_PYTHON", sys.executable)) != os.path.realpath(sys.executable):
        return
    name, token = f"headwater-zygote-{secrets.token_hex(16)}", secrets.token_hex(16)
    env = {**os.environ, **spark_environment(dict(os.environ))}
    try:
        _started = subprocess.Popen([sys.executable, "-m", "headwater.spark.zygote", name], env=env,
                                    # the token on its stdin, not its command line; the pipe's end is the driver's
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        assert _started.stdin is not None
        _started.stdin.write(token.encode() + b"\n")
        _started.stdin.flush()
    except OSError:
        return  # only slower: Spark's daemon loads the kernels itself
    # reaped as it ends (with this process, or idle), not left a zombie until this process exits
    threading.Thread(target=_started.wait, name="headwater-zygote-reaper", daemon=True).start()
    os.environ[ENV] = f"{name}:{token}"


def stop() -> None:
    """End the zygote :func:`start` left for a JVM that will not come (``connect()`` failed before Spark started).

    One serving an active JVM is left alone: it forks that JVM's source runners, and ends with this process."""
    global _started
    if _started is None or _jvm_runs():
        return
    if _started.stdin is not None:
        with contextlib.suppress(OSError):
            _started.stdin.close()  # its driver's end: a zygote ends with its stdin
    os.environ.pop(ENV, None)
    _started = None


def _jvm_runs() -> bool:
    """Whether this process's Spark JVM runs (without importing PySpark when it was never imported)."""
    context = getattr(sys.modules.get("pyspark.core.context"), "SparkContext", None)
    return getattr(context, "_active_spark_context", None) is not None


def _import_path(paths: list[str]) -> list[str]:
    """The entries of ``sys.path`` that can hold a module: Spark puts its home's ``pyspark.zip`` (absent there) and
    a jar of the pyspark wheel (no Python in it) on the daemon's path."""
    spec = importlib.util.find_spec("pyspark")
    spark_dirs = [os.environ.get("SPARK_HOME", "\0"), *((spec and spec.submodule_search_locations) or [])]
    entries = [os.path.abspath(p) for p in paths]  # "" is the working directory, as "-m" puts it first
    return [p for p in entries
            if os.path.exists(p) and not (os.path.isfile(p) and any(p.startswith(d + os.sep) for d in spark_dirs))]


def mismatch(offer: dict[str, Any]) -> str:
    """Why this process cannot stand in for the daemon that made ``offer``, or ``""``."""
    if offer.get("executable") != sys.executable:
        return f"interpreter {offer.get('executable')!r}, zygote {sys.executable!r}"
    theirs = offer.get("environ", {})
    for key in sorted(set(theirs) | set(os.environ)):
        if _START_SENSITIVE.match(key) and key not in _SKIPPED and theirs.get(key) != os.environ.get(key):
            return f"{key}={theirs.get(key)!r}, zygote {os.environ.get(key)!r}"
    if _import_path(list(offer.get("path", []))) != _import_path(sys.path):
        return "another import path"
    return ""


def _answer(conn: socket.socket, **reply: Any) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(reply).encode() + b"\n")


def _receive_offer(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One length-prefixed JSON offer and the three descriptors sent with its first bytes."""
    head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
    if len(head) < 4:
        raise ValueError("short offer")
    (size,) = struct.unpack("!I", head)
    if size > MAX_OFFER_BYTES:
        raise ValueError(f"offer of {size} bytes")
    body = b""
    while len(body) < size:
        chunk = conn.recv(min(size - len(body), 65536))
        if not chunk:
            raise ValueError("short offer")
        body += chunk
    offer = json.loads(body)
    if not (isinstance(offer, dict) and _strings(offer.get("argv")) and _strings(offer.get("path"))
            and isinstance(offer.get("environ"), dict) and _strings(list(offer["environ"].items()), depth=2)):
        raise ValueError("not an offer")
    return offer, fds


def _strings(values: object, depth: int = 1) -> bool:
    """``values`` is a list of strings (``depth=2``: of lists or pairs of strings)."""
    if not isinstance(values, list | tuple):
        return False
    return all(_strings(v) if depth == 2 else isinstance(v, str) for v in values)


def _take_offer(conn: socket.socket, token: str) -> tuple[dict[str, Any], list[int]] | None:
    """A valid offer from a process of this user that knows the token, with its three descriptors; or None (the
    descriptors closed)."""
    fds: list[int] = []
    try:
        if struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1] != os.getuid():
            raise ValueError("another user's")  # before a byte of its offer is read
        offer, fds = _receive_offer(conn)
        if not hmac.compare_digest(str(offer.get("token", "")), token) or len(fds) != 3 \
                or offer.get("module") not in (None, *STAND_IN_MODULES) or not isinstance(offer.get("cwd", ""), str):
            raise ValueError("not from this driver's Spark")
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return None
    return offer, fds


def serve(name: str, token: str, warm: Callable[[], None]) -> None:
    """Listen as ``name``, run ``warm``, then fork a process in the place of each valid offer's: PySpark's daemon
    loop, or the offer's module (:data:`STAND_IN_MODULES`).

    Returns when the driver (this process's stdin) goes away, after ``IDLE_SECONDS`` without a first offer, or
    after ``MAX_BAD_OFFERS`` bad or refused ones."""
    os.setpgid(0, 0)  # the terminal's ^C goes to the driver; this process ends when its stdin (the driver) does
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(4)
    warm()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the processes it forks are reaped as they end
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    poller.register(0, select.POLLIN)
    idle_ms, bad = IDLE_SECONDS * 1000, 0
    while bad < MAX_BAD_OFFERS:
        ready = dict(poller.poll(idle_ms))
        if not ready or 0 in ready:  # idle, or the driver exited (its pipe's end)
            return
        conn, _addr = listener.accept()
        with conn:
            conn.settimeout(OFFER_SECONDS)
            taken = _take_offer(conn, token)
            if taken is None:
                bad += 1
                continue
            offer, fds = taken
            if why := mismatch(offer):
                for fd in fds:
                    os.close(fd)
                _answer(conn, ok=False, why=why)
                bad += 1
                continue
            pid = os.fork()
            if pid == 0:
                listener.close()
                conn.close()
                _run_offer(offer, fds)
            for fd in fds:
                os.close(fd)
            _answer(conn, ok=True, pid=pid)
        idle_ms = -1  # it served Spark: it stays for the next query's source runner as long as its driver runs


def _run_offer(offer: dict[str, Any], fds: list[int]) -> NoReturn:
    """In a process just forked from the zygote: become the process that made ``offer``, run it, and exit."""
    code = 1
    try:
        os.setpgid(0, 0)  # as the process it stands in for; PySpark's daemon signals its own group as it stops
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update({k: v for k, v in offer["environ"].items() if k != ENV})
        sys.path[:] = offer["path"]
        with contextlib.suppress(OSError):
            os.chdir(offer.get("cwd") or os.getcwd())
        from headwater.spark.daemon import drop_empty_archives, freeze_heap

        drop_empty_archives()  # a daemon's workers: the jar's directory read once (30 ms) rather than in every task
        freeze_heap()  # what the hand-over imported, too
        module = offer.get("module")
        if module is None:  # Spark's daemon (headwater.spark.daemon)
            from pyspark.daemon import manager

            sys.argv = [sys.argv[0], *offer["argv"][1:]]
            manager()
        else:
            import runpy

            sys.argv = [module, *offer["argv"][1:]]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def hand_over(module: str | None = None) -> bool:
    """In a process Spark started (its daemon; with ``module``, a process running that module): hand this process's
    place to the driver's zygote, then wait for the process it forks in its place to end (forwarding SIGTERM), and
    return True; or return False at once when there is none or it refuses."""
    spec = os.environ.pop(ENV, "")
    name, _, token = spec.partition(":")
    if not name or not token:
        return False
    os.setpgid(0, 0)  # as PySpark's daemon: out of the terminal's process group, whose ^C is the driver's
    offer = json.dumps({"token": token, "executable": sys.executable, "argv": sys.argv, "path": sys.path,
                        "environ": dict(os.environ), "module": module, "cwd": os.getcwd()}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(ANSWER_SECONDS)
            conn.connect("\0" + name)
            socket.send_fds(conn, [struct.pack("!I", len(offer))], [0, 1, 2])
            conn.sendall(offer)
            reply = json.loads(conn.makefile("rb").readline(4096) or b"{}")
    except (OSError, ValueError):
        return False
    if not reply.get("ok") or not isinstance(reply.get("pid"), int):
        return False
    try:
        pidfd = os.pidfd_open(reply["pid"])
    except OSError:
        return True  # it took over and already ended
    # Spark stops its daemon so (a pidfd, not the pid: that may be another process's once the zygote ended)
    signal.signal(signal.SIGTERM, lambda *_: signal.pidfd_send_signal(pidfd, signal.SIGTERM))
    ended = select.poll()
    ended.register(pidfd, select.POLLIN)
    while not ended.poll():
        pass
    return True


def launcher() -> str | None:
    """The executable Spark should start the source's runners and planners' daemons with (:func:`stand_in`), when a
    zygote serves this process's Spark; else None (Spark starts the interpreter itself)."""
    if ENV not in os.environ:
        return None
    path = os.path.join(os.path.dirname(sys.executable), LAUNCHER)
    return path if os.access(path, os.X_OK) else None


def stand_in() -> None:
    """``headwater-spark-python ARGS``: as ``python ARGS``, but ``-m`` one of :data:`STAND_IN_MODULES` runs in a
    process the driver's zygote forks, which has imported what it needs already."""
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "-m" and args[1] in STAND_IN_MODULES:
        sys.argv = [args[1], *args[2:]]  # as "python -m MODULE ARGS" has them
        sys.path[0] = os.getcwd()  # likewise, rather than this script's directory
        if hand_over(args[1]):
            return
    os.execv(sys.executable, [sys.executable, *args])


def main(argv: list[str]) -> None:
    """``python -m headwater.spark.zygote NAME``: the token comes on stdin, then stdin stays open until the
    driver ends."""
    from headwater.spark.daemon import disable_transparent_huge_pages, freeze_heap, warm_up

    def warm() -> None:
        warm_up()
        for module in STAND_IN_MODULES:  # what they import, imported once here; they themselves run as __main__
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
            sys.modules.pop(module, None)
        freeze_heap()  # inherited by every process it forks

    token = sys.stdin.buffer.readline().strip().decode()
    disable_transparent_huge_pages()
    serve(argv[1], token, warm)


if __name__ == "__main__":
    main(sys.argv)
