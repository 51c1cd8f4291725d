"""A PostgreSQL server for one machine's service (``headwater cluster up --postgres``) and for the tests.

Debian's server binaries (``postgresql`` package): a fresh cluster in a directory, listening on 127.0.0.1
only, trust authentication for the local user ``headwater``. PostgreSQL refuses to run as root; as root
the server runs as Debian's ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from headwater.errors import ConfigurationError


def binaries() -> Path | None:
    """The directory of PostgreSQL's ``initdb`` and ``postgres``, if installed."""
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


def start_postgres(root: Path, *, port: int | None = None, timeout: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Create (if new) and start a PostgreSQL cluster under ``root``; return the server process and its URL.

    The server runs in its own session (it outlives the caller) and logs to ``root/postgres.log``.
    """
    bin_dir = binaries()
    if bin_dir is None:
        raise ConfigurationError("PostgreSQL is not installed: apt-get install postgresql (Debian), or pass "
                                 "--metadata postgresql://... for a server you run")
    as_user: list[str] = []
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
        if subprocess.run([*as_user, "test", "-w", str(root)], check=False).returncode != 0:
            raise ConfigurationError(f"as root, PostgreSQL runs as the user postgres, which cannot reach {root}; "
                                     "use a data directory whose parents others may enter (chmod o+x), or "
                                     "--metadata postgresql://... for a server you run")
    data = root / "pgdata"
    if not data.exists():
        subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "headwater", "-A", "trust",
                        "--no-sync", "-E", "UTF8"], check=True, capture_output=True, timeout=120)
    port = port or free_port()
    log = open(root / "postgres.log", "ab")  # noqa: SIM115 - the server writes to it while it lives
    server = subprocess.Popen([*as_user, str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
                               "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={root}"],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    url = f"postgresql://headwater@127.0.0.1:{port}/postgres"
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            raise ConfigurationError(f"PostgreSQL did not start: {(root / 'postgres.log').read_text()[-2000:]}")
        try:
            psycopg.connect(f"host=127.0.0.1 port={port} user=headwater dbname=postgres", connect_timeout=2).close()
            return server, url
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                server.kill()
                raise ConfigurationError(f"PostgreSQL did not accept connections within {timeout:.0f}s") from None
            time.sleep(0.1)  # polling the server's readiness with a deadline
