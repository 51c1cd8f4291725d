"""A real PostgreSQL server for the tests that need one: Debian's binaries, a fresh cluster in a temporary
directory, listening on 127.0.0.1 only, stopped afterwards.

PostgreSQL refuses to run as root; as root the server runs as Debian's ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _binaries() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a PostgreSQL server in a new temporary directory; yield its URL
    (``postgresql://headwater@127.0.0.1:<port>/postgres``); stop it and remove the directory afterwards."""
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.fail("PostgreSQL is not installed: run the README's test command (it installs Debian's postgresql)")
    as_user: list[str] = []
    # not under pytest's tmp_path: as root, the server's user must be able to reach its directory
    root = Path(tempfile.mkdtemp(prefix="headwater-pg-"))
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data, port = root / "pgdata", free_port()
    subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "headwater", "-A", "trust",
                    "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120)
    log = open(root / "postgres.log", "ab")  # noqa: SIM115 - the server writes to it while it lives
    server = subprocess.Popen([*as_user, str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
                               "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={root}",
                               "-c", "fsync=off"], stdout=log, stderr=subprocess.STDOUT)
    url = f"postgresql://headwater@127.0.0.1:{port}/postgres"
    try:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (root / "postgres.log").read_text()[-2000:]
            try:
                psycopg.connect(f"host=127.0.0.1 port={port} user=headwater dbname=postgres", connect_timeout=2).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # polling the server's readiness with a deadline
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        shutil.rmtree(root, ignore_errors=True)
