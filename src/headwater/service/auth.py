"""Users, passwords and bearer tokens of the service mode.

Passwords are stored as scrypt hashes (Python's ``hashlib.scrypt``, a random salt each); a login hands out
a random bearer token, of which only the SHA-256 is stored, with an expiry. Both live in the metadata
store, so a token stays valid across a master restart.

>>> h = hash_password("s3cret")
>>> verify_password("s3cret", h), verify_password("guess", h)
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time

from headwater.errors import ConfigurationError, clip
from headwater.storage.metadata import MetadataStore

_N, _R, _P = 2**14, 8, 1  # scrypt cost: ~50 ms a check, 16 MiB of memory
TOKEN_SECONDS = 24 * 3600.0
_USER = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
MAX_PASSWORD_CHARS = 1024


class AuthError(Exception):
    """Wrong user or password, or a missing, unknown or expired token (HTTP 401)."""


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode("utf-8"), salt=salt, n=_N, r=_R, p=_P)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode("utf-8"), salt=bytes.fromhex(salt), n=int(n), r=int(r), p=int(p))
    except ValueError:
        return False
    return hmac.compare_digest(got, bytes.fromhex(digest))


def check_user_name(name: object) -> str:
    if not isinstance(name, str) or not _USER.fullmatch(name):
        raise ConfigurationError(f"user name {clip(name)} is not valid: 1 to 64 letters, digits, '_', '.' or '-', "
                                 "starting with a letter")
    return name


def check_password(password: object) -> str:
    if not isinstance(password, str) or not password or len(password) > MAX_PASSWORD_CHARS:
        raise ConfigurationError(f"a password is a non-empty string of at most {MAX_PASSWORD_CHARS} characters")
    return password


class Authenticator:
    """Logins and token checks against the metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def ensure_admin(self, password: str | None) -> None:
        """Create the ``admin`` user at first start; later starts keep its stored password."""
        if self.store.user_password_hash("admin") is not None:
            return
        if password is None:
            raise ConfigurationError("first start of the master: give the admin's password in the environment "
                                     "variable HEADWATER_ADMIN_PASSWORD")
        self.store.put_user("admin", hash_password(check_password(password)), is_admin=True)

    def add_user(self, name: str, password: str) -> None:
        self.store.put_user(check_user_name(name), hash_password(check_password(password)))

    def login(self, user: object, password: object) -> str:
        """A new bearer token for ``user``, or :class:`AuthError`."""
        if not isinstance(user, str) or not isinstance(password, str) or len(password) > MAX_PASSWORD_CHARS:
            raise AuthError("wrong user or password")
        stored = self.store.user_password_hash(user)
        if stored is None or not verify_password(password, stored):
            raise AuthError("wrong user or password")
        token = secrets.token_urlsafe(32)
        self.store.put_token(_digest(token), user, time.time() + TOKEN_SECONDS)
        return token

    def user_of(self, token: str) -> str:
        user = self.store.token_user(_digest(token))
        if user is None:
            raise AuthError("the token is unknown or expired: log in again")
        return user


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
