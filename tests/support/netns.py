"""Hosts for tests on one machine: network namespaces joined by a bridge, each with its own address in
10.77.0.0/24, sharing the file system as hosts share a network file system.

``with net_hosts(3) as net:`` makes namespaces ``hw-<pid>-<tag>-1`` .. ``-3`` (addresses 10.77.0.1 .. .3, loopback
up) and ``hw-<pid>-<tag>-br`` holding the bridge and each host's port on it; nothing outside those namespaces
is addressed or changed. ``net.run(i, argv)`` starts a process on host ``i``; ``net.cut(i)`` takes host ``i``'s
link down, ``net.cut(i, j)`` makes what ``i`` and ``j`` send each other vanish, and
``net.restore(...)`` undoes either. On leaving, whatever happened, every process in the namespaces is killed
and the namespaces are deleted (their links with them). Namespaces left by a test process that was itself
killed are removed by the next one (their name carries the creator's pid). Needs root; skips the test
otherwise.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

NETWORK = "10.77.0"
BRIDGE = "br0"
NOBODY = "02:00:00:00:00:00"  # a locally administered hardware address no interface of these hosts has
NAME = re.compile(r"hw-(\d+)-[0-9a-f]+-(\d+|br)")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def _remove(namespace: str) -> None:
    """Kill every process in ``namespace`` (waiting for them to go), then delete it."""
    deadline = time.monotonic() + 30
    while pids := _ip("netns", "pids", namespace, check=False).stdout.split():
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {pids} in network namespace {namespace} did not die")
        time.sleep(0.05)  # polling their exit with a deadline
    _ip("netns", "delete", namespace, check=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_orphans() -> None:
    """Remove the namespaces of test processes that no longer run (killed before they could clean up)."""
    for namespace in _namespaces():
        match = NAME.fullmatch(namespace)
        if match and not _alive(int(match.group(1))):
            _remove(namespace)


@dataclass
class NetHosts:
    """The hosts of one :func:`net_hosts`; host ``i`` (from 1) is namespace ``name(i)`` at ``address(i)``."""

    prefix: str
    count: int
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    def name(self, i: int) -> str:
        self._check(i)
        return f"{self.prefix}-{i}"

    def address(self, i: int) -> str:
        self._check(i)
        return f"{NETWORK}.{i}"

    def namespaces(self) -> list[str]:
        return [self.bridge, *(self.name(i) for i in range(1, self.count + 1))]

    def command(self, i: int, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name(i), *argv]

    def run(self, i: int, argv: list[str], **popen: object) -> subprocess.Popen:
        """Start ``argv`` on host ``i`` (killed when the hosts are removed)."""
        proc = subprocess.Popen(self.command(i, argv), **popen)  # type: ignore[call-overload]
        self.processes.append(proc)
        return proc

    def python(self, i: int, code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``code`` in this interpreter on host ``i``, to its end."""
        return subprocess.run(self.command(i, [sys.executable, "-c", code, *args]), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def cut(self, i: int, j: int | None = None) -> None:
        """Partition host ``i`` from every other host (its link down), or only ``i`` from ``j``: each sends the
        other's packets to a hardware address nobody has (a permanent neighbour entry), so they vanish without
        an error, as over a cut cable (a connection hangs, it is not refused)."""
        if j is None:
            _ip("-n", self.bridge, "link", "set", f"p{i}", "down")
            return
        for a, b in ((i, j), (j, i)):
            _ip("-n", self.name(a), "neigh", "replace", self.address(b), "lladdr", NOBODY, "dev", "eth0", "nud",
                "permanent")

    def restore(self, i: int, j: int | None = None) -> None:
        """Undo :meth:`cut` with the same arguments."""
        if j is None:
            _ip("-n", self.bridge, "link", "set", f"p{i}", "up")
            return
        for a, b in ((i, j), (j, i)):
            _ip("-n", self.name(a), "neigh", "del", self.address(b), "dev", "eth0")

    def _check(self, i: int) -> None:
        if not 1 <= i <= self.count:
            raise ValueError(f"host {i}: these hosts are 1 to {self.count}")

    def _build(self) -> None:
        """The bridge and the hosts (the bridge's namespace exists already)."""
        _ip("-n", self.bridge, "link", "add", BRIDGE, "type", "bridge")
        _ip("-n", self.bridge, "link", "set", BRIDGE, "up")
        for i in range(1, self.count + 1):
            host = self.name(i)
            _ip("netns", "add", host)
            _ip("-n", host, "link", "set", "lo", "up")
            _ip("-n", self.bridge, "link", "add", f"p{i}", "type", "veth", "peer", "name", "eth0", "netns", host)
            _ip("-n", self.bridge, "link", "set", f"p{i}", "master", BRIDGE, "up")
            _ip("-n", host, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", host, "link", "set", "eth0", "up")

    def _remove(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        for namespace in self.namespaces():
            if namespace in _namespaces():
                _remove(namespace)


@contextlib.contextmanager
def net_hosts(count: int) -> Iterator[NetHosts]:
    """``count`` hosts (2 to 250) on one bridge; removed on leaving, whatever happened."""
    if not 1 <= count <= 250:
        raise ValueError(f"net_hosts({count}): 1 to 250 hosts")
    if os.geteuid() != 0:
        pytest.skip("hosts as network namespaces need root (ip netns add)")
    if shutil.which("ip") is None:
        pytest.skip("hosts as network namespaces need iproute2's ip")
    remove_orphans()
    net = NetHosts(f"hw-{os.getpid()}-{secrets.token_hex(2)}", count)
    try:
        _ip("netns", "add", net.bridge)
    except RuntimeError as exc:
        pytest.skip(f"cannot make network namespaces here: {exc}")
    try:
        net._build()
        yield net
    finally:
        net._remove()
