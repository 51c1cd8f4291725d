"""A PostgreSQL server for one machine's service (``headwater cluster up --postgres``) and for the tests.

Debian's server binaries (``postgresql`` package): a fresh cluster in a directory, listening on 127.0.0.1
only unless given another address (then also accepting the networks that address is on, ``samenet``), for the user ``headwater`` with a generated password and ``scram-sha-256`` authentication on every
connection (TCP and the Unix socket): a local user without the password cannot connect. The password is kept
in ``<root>/pgpass`` (mode 600, libpq's password-file format): clients name it with ``PGPASSFILE``
(:func:`passfile`), so it appears on no command line and in no URL. PostgreSQL refuses to run as root; as
root the server runs as Debian's ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from headwater.errors import ConfigurationError
from headwater.service.hosts import LOOPBACK, Host, is_loopback, is_wildcard, url_host


def binaries() -> Path | None:
    """The directory of PostgreSQL's ``initdb`` and ``postgres``, if installed."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(versions[-1]).parent if versions else None


USER = "headwater"


def passfile(root: Path) -> Path:
    """The password file of the server under ``root`` (for ``PGPASSFILE``)."""
    return root / "pgpass"


def password(root: Path) -> str:
    """The password of the user ``headwater`` on the server under ``root``."""
    return passfile(root).read_text().strip().rsplit(":", 1)[1]


def _write_private(file: Path, text: str, owner: str | None = None) -> None:
    """Write ``text`` to a new file readable by its owner only (mode 600, never wider, even for a moment)."""
    file.unlink(missing_ok=True)
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    if owner is not None:
        shutil.chown(file, owner)


def _refuse_trust(data: Path) -> None:
    """A cluster made by an earlier Headwater let any local user in (``trust``): refuse to serve it so."""
    hba = data / "pg_hba.conf"
    lines = [line.split() for line in hba.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if any("trust" in fields for fields in lines):
        raise ConfigurationError(f"the PostgreSQL cluster in {data} accepts connections without a password (trust "
                                 f"authentication in {hba}, made by an earlier Headwater): set a password for the "
                                 "user headwater and change trust to scram-sha-256 there, or remove the directory "
                                 "to start anew (its metadata is lost)")
    if not passfile(data.parent).exists():
        raise ConfigurationError(f"the PostgreSQL cluster in {data} has no password file {passfile(data.parent)}: "
                                 f"write *:*:*:{USER}:<its password> there (mode 600)")


HBA_NETWORKS = f"host all {USER} samenet scram-sha-256"


def _accept_networks(data: Path) -> None:
    """Let clients of the server's own networks in (``samenet``; still with the password only)."""
    hba = data / "pg_hba.conf"
    text = hba.read_text()
    if HBA_NETWORKS not in text.splitlines():
        hba.write_text(f"{text.rstrip()}\n# headwater: clients on the networks of the server's address\n{HBA_NETWORKS}\n")


def postmaster_pid(root: Path) -> int:
    """The PID of the server started under ``root`` (from ``postmaster.pid``): as root the process
    :func:`start_postgres` returns is the ``runuser`` wrapper, which a signal to stop the server must not target."""
    return int((root / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])


def start_postgres(root: Path, *, port: int | None = None, timeout: float = 60.0,
                   host: Host | None = None) -> tuple[subprocess.Popen, str]:
    """Create (if new) and start a PostgreSQL cluster under ``root``; return the server process and its URL.

    ``host``: where it listens (its address, and network namespace if it has one); 127.0.0.1 of this machine
    by default. A server listening on another address also accepts clients of that address's networks.

    The URL carries no password: connect with ``PGPASSFILE`` set to :func:`passfile`, or add :func:`password`.
    The server runs in its own session (it outlives the caller) and logs to ``root/postgres.log``.
    """
    bin_dir = binaries()
    if bin_dir is None:
        raise ConfigurationError("PostgreSQL is not installed: apt-get install postgresql (Debian), or pass "
                                 "--metadata postgresql://... for a server you run")
    as_user: list[str] = []
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    root.chmod(0o700)
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
        if subprocess.run([*as_user, "test", "-w", str(root)], check=False).returncode != 0:
            raise ConfigurationError(f"as root, PostgreSQL runs as the user postgres, which cannot reach {root}; "
                                     "use a data directory whose parents others may enter (chmod o+x), or "
                                     "--metadata postgresql://... for a server you run")
    data = root / "pgdata"
    if not data.exists():
        secret = secrets.token_urlsafe(24)
        pwfile = root / "initdb-password"  # read by initdb (as the server's user), removed at once
        _write_private(pwfile, secret + "\n", owner="postgres" if as_user else None)
        try:
            subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=scram-sha-256",
                            f"--pwfile={pwfile}", "--no-sync", "-E", "UTF8"], check=True, capture_output=True,
                           timeout=120)
        finally:
            pwfile.unlink(missing_ok=True)
        _write_private(passfile(root), f"*:*:*:{USER}:{secret}\n")  # whichever address the server has
    _refuse_trust(data)
    host = host or Host("local", LOOPBACK)
    if not is_loopback(host.address):
        _accept_networks(data)
    port = port or host.free_port()
    log = open(root / "postgres.log", "ab")  # noqa: SIM115 - the server writes to it while it lives
    server = subprocess.Popen(host.command([*as_user, str(bin_dir / "postgres"), "-D", str(data), "-p", str(port),
                                            "-c", f"listen_addresses={host.address}",
                                            "-c", f"unix_socket_directories={root}"]),
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    reach = LOOPBACK if is_wildcard(host.address) else host.address
    url = f"postgresql://{USER}@{url_host(reach)}:{port}/postgres"
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            raise ConfigurationError(f"PostgreSQL did not start: {(root / 'postgres.log').read_text()[-2000:]}")
        try:
            psycopg.connect(host=reach, port=port, user=USER, dbname="postgres", password=password(root),
                            connect_timeout=2).close()
            return server, url
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                server.kill()
                raise ConfigurationError(f"PostgreSQL did not accept connections within {timeout:.0f}s") from None
            time.sleep(0.1)  # polling the server's readiness with a deadline
