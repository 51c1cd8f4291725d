"""Which master is active: a lease in the metadata database, with a fencing token; an advisory lock as fast path.

Masters that share a metadata store (``--metadata postgresql://…``) compete for one row of the ``leases``
table: its holder, a fencing token (one more at every change of holder) and an expiry by the database's
clock. The active master renews it every ``lease / 3`` seconds; a ``--standby`` master tries every ``poll``
seconds and takes it, in one conditional statement, once it has expired. So leadership does not depend on a
connection ending: a master frozen (SIGSTOP) or cut off keeps its connection, and its advisory lock, but not
its lease. Once it wakes, it finds its lease lapsed by its own clock and stops at once; before that, every
metadata write it tries checks its token in the writing transaction
(:meth:`headwater.storage.metadata.MetadataStore.set_fencing_token`) and is refused.

The session-level advisory lock stays as a fast path: whoever holds it knows that the previous holder's
session ended (its process killed, its machine gone), so it may take a lease whose holder held the lock
without waiting for its expiry. The lock's connection uses TCP keepalives, so a dead peer is noticed in
seconds rather than hours.

The deadline: a master that stops renewing loses its leadership ``lease_seconds`` after its last renewal
(``--lease-seconds``, :data:`LEASE_SECONDS` by default); a standby takes over within one poll after that.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from datetime import timedelta
from typing import Any

from headwater.errors import ConfigurationError, LeadershipLost

log = logging.getLogger(__name__)

LOCK_KEY = 0x48574D41  # "HWMA": one lock per metadata database
LEASE_SECONDS = 10.0  # the default of --lease-seconds: how long a master stays leader without renewing
MIN_LEASE_SECONDS = 1.0

# take the lease if it has expired, or if we hold the advisory lock that its holder held (its session ended);
# renewals and takeovers are single statements: two standbys cannot both win
_TAKE = """
INSERT INTO leases (name, holder, token, expires, locked) VALUES (%(name)s, %(me)s, 1, now() + %(lease)s, %(locked)s)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, token = leases.token + 1, expires = excluded.expires,
                                 locked = excluded.locked
WHERE leases.expires <= now() OR (%(locked)s AND leases.locked)
RETURNING token
"""
_RENEW = """
UPDATE leases SET expires = now() + %(lease)s, locked = %(locked)s
WHERE name = %(name)s AND token = %(token)s AND holder = %(me)s AND expires > now()
RETURNING token
"""


def _conninfo(url: str) -> str:
    """libpq's URL for a ``postgresql://`` (or SQLAlchemy ``postgresql+psycopg://``) metadata URL."""
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix):]
    if not url.startswith("postgresql://"):
        raise ConfigurationError(f"a standby master needs the metadata in PostgreSQL (--metadata postgresql://...), "
                                 f"not {url.split(':', 1)[0]}")
    return url


def keepalive_params(lease_seconds: float) -> dict[str, Any]:
    """libpq's TCP keepalive settings for a connection that must notice a dead peer well within the lease.

    >>> keepalive_params(10.0)
    {'keepalives': 1, 'keepalives_idle': 3, 'keepalives_interval': 1, 'keepalives_count': 3, 'tcp_user_timeout': 10000}
    """
    idle = max(int(lease_seconds / 3), 1)
    return {"keepalives": 1, "keepalives_idle": idle, "keepalives_interval": max(idle // 3, 1),
            "keepalives_count": 3, "tcp_user_timeout": int(lease_seconds * 1000)}


class Leadership:
    """The master's lease (and the advisory lock) on its own connection.

    :meth:`try_acquire` until it is held; then :meth:`renew` every :attr:`renew_every` seconds. :meth:`holds`
    answers from this process's own clock, without the database: False once the lease may have lapsed.
    """

    def __init__(self, url: str, *, lease_seconds: float = LEASE_SECONDS) -> None:
        import psycopg

        if not lease_seconds >= MIN_LEASE_SECONDS:
            raise ConfigurationError(f"--lease-seconds {lease_seconds!r}: expected at least {MIN_LEASE_SECONDS:g} "
                                     f"(the default is {LEASE_SECONDS:g})")
        self._psycopg = psycopg
        self._conninfo = _conninfo(url)
        self.lease_seconds = lease_seconds
        self.renew_every = lease_seconds / 3
        self.me = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.token: int | None = None
        self.held = False
        self.locked = False  # the advisory lock, on self._conn
        self._valid_until = 0.0  # time.monotonic() before which the lease is surely still ours
        self._conn: Any = self._connect()
        self._create_table()

    def _connect(self) -> Any:
        return self._psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10,
                                     **keepalive_params(self.lease_seconds))

    def _create_table(self) -> None:
        import sqlalchemy as sa

        from headwater.storage.metadata import leases, metadata_url

        engine = sa.create_engine(metadata_url(self._conninfo))
        try:
            for attempt in range(3):  # two masters starting together may race to create it
                try:
                    leases.create(engine, checkfirst=True)
                    return
                except sa.exc.DBAPIError:
                    if attempt == 2:
                        raise
        finally:
            engine.dispose()

    def _lock(self) -> bool:
        if not self.locked:
            self.locked = bool(self._conn.execute("select pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0])
        return self.locked

    def _params(self) -> dict[str, Any]:
        from headwater.storage.metadata import MASTER_LEASE

        return {"name": MASTER_LEASE, "me": self.me, "lease": timedelta(seconds=self.lease_seconds),
                "locked": self.locked, "token": self.token}

    def try_acquire(self) -> bool:
        """Take the lease if it is free, expired, or its holder's session ended; True once this master holds it."""
        if self.held:
            return self.holds()
        self._lock()
        sent = time.monotonic()
        row = self._conn.execute(_TAKE, self._params()).fetchone()
        if row is not None:
            self.token, self.held, self._valid_until = int(row[0]), True, sent + self.lease_seconds
            log.warning("this master holds the lease (fencing token %d, %g s)", self.token, self.lease_seconds)
        return self.held

    def renew(self) -> bool:
        """Extend the lease; False once it is lost (it lapsed, or another master took it): stop being active.

        A database that does not answer is retried on a new connection at the next renewal, as long as the
        lease has not lapsed by this process's clock.
        """
        if not self.holds():
            return False
        try:
            if self._conn.closed:
                self._conn, self.locked = self._connect(), False
            self._lock()  # a master that took an expired lease gets the lock once its old holder's session ends
            sent = time.monotonic()
            row = self._conn.execute(_RENEW, self._params()).fetchone()
        except self._psycopg.Error as exc:
            log.error("could not renew the master's lease (it lapses in %.1f s): %s",
                      self._valid_until - time.monotonic(), exc)
            with contextlib.suppress(Exception):
                self._conn.close()
            return self.holds()
        if row is None:
            self.held = False
            return False
        self._valid_until = sent + self.lease_seconds
        return True

    def holds(self) -> bool:
        """Whether the lease is surely still ours, by this process's monotonic clock (no database call).

        The database's expiry is at least ``lease_seconds`` after the renewal was sent, so this errs early.
        """
        return self.held and time.monotonic() < self._valid_until

    def fence(self, store: Any) -> None:
        """Make every write of ``store`` (a :class:`~headwater.storage.metadata.MetadataStore`) check this lease."""
        assert self.token is not None, "try_acquire() first"
        store.set_fencing_token(self.token, lease_seconds=self.lease_seconds, valid=self.holds)

    def close(self) -> None:
        """Give the lease back (a standby takes over at its next poll) and end the lock's session."""
        with contextlib.suppress(Exception):
            if self.held:
                self._conn.execute("UPDATE leases SET expires = now() WHERE name = %(name)s AND token = %(token)s "
                                   "AND holder = %(me)s", self._params())
        with contextlib.suppress(Exception):
            self._conn.close()  # ending the session releases the lock
        self.held = self.locked = False


class LeaseGuard:
    """The active master's ASGI app behind a check of its lease: once it may have lapsed, every request is
    refused with 503 ``StandbyMaster`` (clients move on to the other master) while the process stops."""

    def __init__(self, inner: Any, leadership: Leadership) -> None:
        self.inner, self.leadership = inner, leadership
        inner.add_exception_handler(LeadershipLost, self._lost)  # a write refused mid-request: the same answer

    @staticmethod
    def _refusal(message: str) -> Any:
        from starlette.responses import JSONResponse

        from headwater.service.client import STANDBY_ERROR

        return JSONResponse({"error": STANDBY_ERROR, "message": message}, status_code=503)

    def _lost(self, _: Any, exc: Exception) -> Any:
        return self._refusal(str(exc))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.leadership.holds():
            await self._refusal("this master lost its lease: another master is active, or will be within the "
                                "lease")(scope, receive, send)
            return
        await self.inner(scope, receive, send)
