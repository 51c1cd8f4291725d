"""Which master is active: a PostgreSQL advisory lock, held for the active master's life.

Masters that share a metadata store (``--metadata postgresql://…``) compete for one session-level
advisory lock, each on a connection of its own. The holder is the active master; a ``--standby`` master
tries again every ``poll`` seconds and takes over as soon as PostgreSQL releases the lock, which it does
the moment the holder's connection ends (its process killed, its machine gone). The active master checks
its connection every ``poll`` seconds too and stops at once if it is lost: the standby may hold the lock
by then, and two active masters must never write the same graphs.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from headwater.errors import ConfigurationError

log = logging.getLogger(__name__)

LOCK_KEY = 0x48574D41  # "HWMA": one lock per metadata database


def _conninfo(url: str) -> str:
    """libpq's URL for a ``postgresql://`` (or SQLAlchemy ``postgresql+psycopg://``) metadata URL."""
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix):]
    if not url.startswith("postgresql://"):
        raise ConfigurationError(f"a standby master needs the metadata in PostgreSQL (--metadata postgresql://...), "
                                 f"not {url.split(':', 1)[0]}")
    return url


class Leadership:
    """The advisory lock on its own connection; :meth:`try_acquire` until it is held, :meth:`holds` after."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._psycopg = psycopg
        self._conn: Any = psycopg.connect(_conninfo(url), autocommit=True, connect_timeout=10)
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True once this master holds it."""
        if not self.held:
            self.held = bool(self._conn.execute("select pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0])
        return self.held

    def holds(self) -> bool:
        """Whether the lock is still ours: the connection that holds it still answers."""
        try:
            self._conn.execute("select 1").fetchone()
            return self.held
        except self._psycopg.Error:
            return False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()  # ending the session releases the lock
        self.held = False
