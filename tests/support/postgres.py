"""A real PostgreSQL server for the tests that need one (:func:`headwater.service.postgres.start_postgres`):
a fresh cluster in a temporary directory, listening on 127.0.0.1 only, stopped and removed afterwards."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.service.hosts import free_port
from headwater.service.postgres import binaries, password, start_postgres

__all__ = ["free_port", "postgres_server"]


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Start a PostgreSQL server in a new temporary directory; yield its URL with the generated password
    (``postgresql://headwater:<password>@127.0.0.1:<port>/postgres``); stop it and remove the directory afterwards."""
    if binaries() is None:
        pytest.fail("PostgreSQL is not installed: run the README's test command (it installs Debian's postgresql)")
    # not under pytest's tmp_path: as root, the server's user must be able to reach its directory
    root = Path(tempfile.mkdtemp(prefix="headwater-pg-"))
    server, url = start_postgres(root)
    try:
        yield url.replace("headwater@", f"headwater:{password(root)}@", 1)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(root, ignore_errors=True)
