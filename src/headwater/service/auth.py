"""Logins, bearer tokens and their limits in the service mode.

Passwords are stored as scrypt hashes (:mod:`headwater.runtime.access`); a login hands out a random bearer
token, of which only the SHA-256 is stored, with an expiry, in the metadata store (so a token stays valid
across a master restart). A token ends at its expiry, at ``logout``, or when its user's password changes or
the user is dropped.

Logins are limited per user name and per client address (:class:`LoginLimits`: at most ``attempts`` failed
logins in ``window`` seconds, after which further tries are refused without being checked until the window
has passed); an unknown user's password is checked against a decoy hash, so a wrong user name costs what a
wrong password does and user names cannot be told apart by time.

>>> limits = LoginLimits(attempts=2, window=60.0)
>>> t = RateWindow(limits); t.fail("u", 0.0); t.fail("u", 1.0); t.blocked("u", 2.0)
True
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass

from headwater.errors import ConfigurationError
from headwater.runtime.access import (
    DECOY_HASH,
    MAX_PASSWORD_CHARS,
    check_password,
    check_user_name,
    hash_password,
    verify_password,
)
from headwater.storage.metadata import MetadataStore

TOKEN_SECONDS = 24 * 3600.0


class AuthError(Exception):
    """Wrong user or password, or a missing, unknown, revoked or expired token (HTTP 401)."""


@dataclass(frozen=True)
class LoginLimits:
    """At most ``attempts`` failed logins per user name, and per client address, within ``window`` seconds."""

    attempts: int = 10
    window: float = 300.0


class RateWindow:
    """Failed attempts per key in a sliding window (bounded: at most ``max_keys`` keys are remembered)."""

    def __init__(self, limits: LoginLimits, max_keys: int = 100_000) -> None:
        self.limits, self.max_keys = limits, max_keys
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.limits.window:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def blocked(self, key: str, now: float) -> bool:
        with self._lock:
            return len(self._recent(key, now)) >= self.limits.attempts

    def fail(self, key: str, now: float) -> None:
        with self._lock:
            if key not in self._failures and len(self._failures) >= self.max_keys:
                self._failures.pop(next(iter(self._failures)))  # the oldest key: memory stays bounded
            self._failures.setdefault(key, deque()).append(now)

    def clear(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)


class Authenticator:
    """Logins, token checks and logouts against the metadata store."""

    def __init__(self, store: MetadataStore, limits: LoginLimits | None = None) -> None:
        self.store = store
        self.users = RateWindow(limits or LoginLimits())
        self.addresses = RateWindow(limits or LoginLimits())

    def ensure_admin(self, password: str | None, *, rotate: bool = False) -> None:
        """Create the ``admin`` user at first start; with ``rotate``, set its password to ``password`` (its
        tokens are revoked). Otherwise later starts keep the stored password."""
        exists = self.store.user_password_hash("admin") is not None
        if exists and not rotate:
            return
        if password is None:
            raise ConfigurationError("give the admin's password in the environment variable HEADWATER_ADMIN_PASSWORD"
                                     + (" to rotate it" if exists else " at the master's first start"))
        self.store.put_user("admin", hash_password(check_password(password)), is_admin=True)
        if exists:
            self.store.delete_tokens("admin")

    def add_user(self, name: str, password: str, *, is_admin: bool = False) -> None:
        self.store.put_user(check_user_name(name), hash_password(check_password(password)), is_admin=is_admin)

    def login(self, user: object, password: object, *, address: str = "") -> str:
        """A new bearer token for ``user``, or :class:`AuthError` (also while its name or address is throttled)."""
        now = time.monotonic()
        name = user if isinstance(user, str) and len(user) <= 64 else "?"
        if self.users.blocked(name, now) or self.addresses.blocked(address, now):
            raise AuthError(f"too many failed logins: wait up to {self.users.limits.window:.0f}s and try again")
        good = isinstance(password, str) and len(password) <= MAX_PASSWORD_CHARS
        stored = self.store.user_password_hash(name) if isinstance(user, str) else None
        # the same scrypt work whether or not the user exists: no user name is revealed by timing
        ok = verify_password(password if isinstance(password, str) and good else "", stored or DECOY_HASH) \
            and good and stored is not None
        if not ok:
            self.users.fail(name, now)
            self.addresses.fail(address, now)
            raise AuthError("wrong user or password")
        self.users.clear(name)
        token = secrets.token_urlsafe(32)
        self.store.put_token(_digest(token), name, time.time() + TOKEN_SECONDS)
        return token

    def user_of(self, token: str) -> str:
        user = self.store.token_user(_digest(token))
        if user is None:
            raise AuthError("the token is unknown, revoked or expired: log in again")
        return user

    def logout(self, token: str) -> bool:
        """Revoke ``token`` (an :class:`AuthError` if it is not live)."""
        return self.store.delete_tokens(self.user_of(token), _digest(token)) > 0


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
