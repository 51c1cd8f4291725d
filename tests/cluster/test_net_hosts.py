"""The namespace hosts of ``tests.support.netns``: hosts reach each other by address, a cut link or a pairwise
cut stops exactly the traffic it should until restored, and nothing is left behind, whatever happens."""

from __future__ import annotations

import select
import subprocess
import sys
import textwrap
import time

import pytest

from tests.support.netns import NetHosts, _namespaces, net_hosts, remove_orphans
from tests.support.service import wait_for

SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.create_server((sys.argv[1], 0))
    print(s.getsockname()[1], flush=True)
    while True:
        conn, _ = s.accept()
        with conn:
            conn.sendall(b"pong from " + sys.argv[1].encode())
""")

CLIENT = textwrap.dedent("""
    import socket, sys
    try:
        with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0) as c:
            print(c.recv(100).decode())
    except OSError as exc:
        print(f"failed: {exc!r}")
""")


@pytest.fixture
def net() -> NetHosts:
    with net_hosts(3) as hosts:
        yield hosts


def serve(net: NetHosts, i: int, within: float = 30.0) -> int:
    """Start the echo server on host ``i``; its port once it listens."""
    proc = net.run(i, [sys.executable, "-c", SERVER, net.address(i)], stdout=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], within)
    assert ready, f"the server on host {i} did not start within {within:.0f}s"
    return int(proc.stdout.readline())


def reaches(net: NetHosts, i: int, j: int, port: int) -> bool:
    answer = net.python(i, CLIENT, net.address(j), str(port)).stdout.strip()
    assert answer.startswith(("pong", "failed")), answer
    return answer == f"pong from {net.address(j)}"


def test_hosts_reach_each_other_by_address_and_not_through_loopback(net):
    port = serve(net, 1)
    assert reaches(net, 2, 1, port) and reaches(net, 3, 1, port)
    answer = net.python(2, CLIENT, "127.0.0.1", str(port)).stdout  # host 2's loopback is its own
    assert answer.startswith("failed"), answer


def test_a_cut_link_isolates_its_host_until_restored(net):
    port = serve(net, 1)
    net.cut(1)
    assert not reaches(net, 2, 1, port)
    net.restore(1)
    wait_for(lambda: reaches(net, 2, 1, port), 20, "host 2 reaching host 1 after the link is restored")


def test_a_pairwise_cut_leaves_the_other_hosts_connected(net):
    port = serve(net, 1)
    net.cut(1, 2)
    started = time.monotonic()
    assert not reaches(net, 2, 1, port)
    assert time.monotonic() - started >= 0.9  # dropped silently: the connection times out, nothing refuses it
    assert reaches(net, 3, 1, port)
    net.restore(1, 2)
    wait_for(lambda: reaches(net, 2, 1, port), 20, "host 2 reaching host 1 after the cut is restored")


def test_the_hosts_and_their_processes_are_removed_whatever_happens():
    with pytest.raises(RuntimeError, match="the test failed"), net_hosts(2) as net:
        sleeper = net.run(1, [sys.executable, "-c", "import time; time.sleep(600)"])
        # a process the test did not start through net.run, in a session of its own, is removed too
        stray = subprocess.Popen(net.command(2, [sys.executable, "-c", "import time; time.sleep(600)"]),
                                 start_new_session=True)
        names = net.namespaces()
        raise RuntimeError("the test failed")
    assert sleeper.poll() is not None
    assert stray.wait(timeout=30) is not None
    assert not set(names) & set(_namespaces())


def test_namespaces_of_a_test_process_that_was_killed_are_removed_by_the_next():
    with net_hosts(1) as net:  # skips where namespaces cannot be made
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        orphan = f"hw-{int(gone.stdout)}-beef-1"
        # the other xdist lane's net_hosts() removes orphans too, and may take this one while `ip netns add` is
        # still binding it ("Bind /proc/self/ns/net -> /run/netns/... failed"): made again then, a few times
        for _ in range(5):
            made = subprocess.run(["ip", "netns", "add", orphan], capture_output=True, text=True)
            if made.returncode == 0:
                break
        assert made.returncode == 0, made.stderr
        remove_orphans()
        assert orphan not in _namespaces() and set(net.namespaces()) <= set(_namespaces())  # ours are alive


# A master that answers the login, then holds the next call open (a long poll that never ends), saying when it
# has the call.
HOLDING_MASTER = textwrap.dedent("""
    import json, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path == "/v1/login":
                body = json.dumps({"token": "t"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            print("holding", flush=True)
            threading.Event().wait()  # the call is never answered

    ThreadingHTTPServer((sys.argv[1], 8765), Handler).serve_forever()
""")

CALLER = textwrap.dedent("""
    import sys, time
    import httpx
    from headwater.errors import ExecutionError
    from headwater.service.client import RemoteMaster

    master = RemoteMaster(sys.argv[1], user="u", password="p", timeout=300)
    try:
        master._call("/v1/wait", {}, idempotent=True)
    except ExecutionError as exc:
        assert isinstance(exc.__cause__, httpx.TransportError) and "may or may not" in str(exc), exc
        print("failed at", time.time(), type(exc.__cause__).__name__)
""")


def test_a_call_cut_off_mid_wait_fails_within_seconds_not_at_its_timeout(net):
    """A partition drops packets without a reset: the client's keepalive probes (``service.tls.KEEPALIVE``) find
    the dead connection ~11 s after the cut, where the call's own timeout (300 s here) would wait it out."""
    master = net.run(1, [sys.executable, "-c", HOLDING_MASTER, net.address(1)], stdout=subprocess.PIPE, text=True)
    wait_for(lambda: net.python(2, CLIENT, net.address(1), "8765").stdout.strip() != "failed: "
             "ConnectionRefusedError(111, 'Connection refused')", 30, "the master listening")
    caller = net.run(2, [sys.executable, "-c", CALLER, f"http://{net.address(1)}:8765"], stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
    assert select.select([master.stdout], [], [], 60)[0], "the master never got the call"
    assert master.stdout.readline().strip() == "holding"
    cut_at = time.time()
    net.cut(1, 2)
    out, err = caller.communicate(timeout=60)
    assert out.startswith("failed at"), out + err
    noticed = float(out.split()[2]) - cut_at
    assert noticed < 20, f"the cut was noticed after {noticed:.1f} s"
