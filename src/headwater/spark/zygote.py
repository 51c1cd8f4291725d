"""A warm Python daemon started beside Spark's JVM, to which the daemon Spark starts hands its place.

Spark starts a driver's Python processes one at a time, under one lock (``SparkEnv.createPythonWorker``), and it
holds that lock until its daemon (:mod:`headwater.spark.daemon`) has forked a first worker. That daemon loads every
kernel first (~1.8 s on two cores), so the queries' source runners, which a graph needs to start, wait for it.

A driver with a local master therefore starts a *zygote* as it launches its JVM (:func:`start`): a process that
loads the same kernels while the JVM starts. When Spark later starts its daemon, that process offers the zygote its
environment, its arguments and its standard streams (:func:`hand_over`). The zygote checks that it was started as
Spark would start a daemon (same interpreter, import path and start-up variables), takes the streams over and runs
PySpark's daemon loop; the process Spark started waits for the zygote and forwards SIGTERM to it. Spark's lock is
then held for one Python start, not for the kernels' load.

A zygote serves one daemon; a daemon that finds none (a second daemon, a refused offer) loads the kernels itself,
as before. The hand-over is a Linux abstract socket: only a process of this user that knows its random name and
token is heard, and a bounded number of bad offers ends the zygote.
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
from typing import Any

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
        return  # started early (e.g. as connect() began) and not taken yet
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
    # it ends with Spark's daemon, as its stand-in: reaped then, not left a zombie until this process exits
    threading.Thread(target=_started.wait, name="headwater-zygote-reaper", daemon=True).start()
    os.environ[ENV] = f"{name}:{token}"


def stop() -> None:
    """End the zygote :func:`start` left for a JVM that will not come (``connect()`` failed before Spark started).

    One an active JVM may have handed its daemon's place to is left alone: it ends with that daemon."""
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


def serve(name: str, token: str, warm: Callable[[], None]) -> None:
    """Listen as ``name``, run ``warm``, then take over the first valid offer and run PySpark's daemon loop.

    Returns without serving when the driver (this process's stdin) goes away, after ``IDLE_SECONDS`` without an
    offer, after a refused offer, or after ``MAX_BAD_OFFERS``."""
    os.setpgid(0, 0)  # the terminal's ^C goes to the driver; this process ends when its stdin (the driver) does
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(4)
    warm()
    poller = select.poll()
    poller.register(listener, select.POLLIN)
    poller.register(0, select.POLLIN)
    for _ in range(MAX_BAD_OFFERS):
        ready = dict(poller.poll(IDLE_SECONDS * 1000))
        if not ready or 0 in ready:  # idle, or the driver exited (its pipe's end)
            return
        conn, _addr = listener.accept()
        conn.settimeout(OFFER_SECONDS)
        fds: list[int] = []
        try:
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            offer, fds = _receive_offer(conn)
            if uid != os.getuid() or not hmac.compare_digest(str(offer.get("token", "")), token) or len(fds) != 3:
                raise ValueError("not from this driver's Spark")
        except (OSError, ValueError):
            for fd in fds:
                os.close(fd)
            conn.close()
            continue
        if why := mismatch(offer):
            _answer(conn, ok=False, why=why)
            return
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update({k: v for k, v in offer["environ"].items() if k != ENV})
        sys.argv = [sys.argv[0], *offer["argv"][1:]]
        sys.path[:] = offer["path"]
        listener.close()
        _answer(conn, ok=True, pid=os.getpid())
        conn.close()
        from headwater.spark.daemon import drop_empty_archives, freeze_heap

        drop_empty_archives()  # reads the jar's directory once (30 ms) rather than in every task
        from pyspark.daemon import manager

        freeze_heap()  # last: what the hand-over imported is frozen too
        manager()
        return


def hand_over() -> bool:
    """In the daemon Spark started: hand this process's place to the driver's zygote, then wait for it to end
    (forwarding SIGTERM), and return True; or return False at once when there is none or it refuses."""
    spec = os.environ.pop(ENV, "")
    name, _, token = spec.partition(":")
    if not name or not token:
        return False
    os.setpgid(0, 0)  # as PySpark's daemon: out of the terminal's process group, whose ^C is the driver's
    offer = json.dumps({"token": token, "executable": sys.executable, "argv": sys.argv, "path": sys.path,
                        "environ": dict(os.environ)}).encode()
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


def main(argv: list[str]) -> None:
    """``python -m headwater.spark.zygote NAME``: the token comes on stdin, then stdin stays open until the
    driver ends."""
    from headwater.spark.daemon import disable_transparent_huge_pages, warm_up

    token = sys.stdin.buffer.readline().strip().decode()
    disable_transparent_huge_pages()
    serve(argv[1], token, warm_up)


if __name__ == "__main__":
    main(sys.argv)
