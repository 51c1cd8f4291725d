"""Signed requests between the master and its workers: an HMAC-SHA256 keyed by the worker secret.

Each request carries, in headers, a timestamp, a random nonce and the MAC of
``method, path (with its query), SHA-256 of the body, timestamp, nonce``; the secret itself never travels.
The receiver (:class:`Verifier`) refuses a wrong MAC, a timestamp further than ``window`` seconds from its own
clock (``HEADWATER_SIGNATURE_WINDOW``, default 60 s), and a nonce it has already accepted within that window
(a replay): accepted nonces are remembered until their timestamp leaves the window, at most ``max_nonces`` at
once. The sender is an :class:`httpx.Auth` (:class:`Signer`), so every request of a client is signed.

>>> secret = "a-worker-secret-of-16+"
>>> headers = signed_headers(secret, "POST", "/v1/worker/request", b"{}")
>>> verifier = Verifier(secret)
>>> verifier.verify("POST", "/v1/worker/request", b"{}", headers)
>>> try:
...     verifier.verify("POST", "/v1/worker/request", b"{}", headers)
... except SignatureError as exc:
...     print(str(exc)[:61])
refused POST '/v1/worker/request': its nonce was already used
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable, Generator, Mapping
from typing import Any

import httpx

from headwater.errors import ConfigurationError, HeadwaterError, clip

HEADER_TIME = "x-headwater-time"
HEADER_NONCE = "x-headwater-nonce"
HEADER_SIGNATURE = "x-headwater-signature"
SCHEME = "headwater-hmac-sha256-v1"  # in the signed text: a MAC for another use of the secret is never valid here

WINDOW_SECONDS = 60.0  # default of HEADWATER_SIGNATURE_WINDOW: how far a request's clock may be from ours
MAX_NONCES = 200_000  # nonces remembered at once (a window's worth of requests); beyond it requests are refused
WINDOW_ENV = "HEADWATER_SIGNATURE_WINDOW"


class SignatureError(HeadwaterError, PermissionError):
    """A request between master and worker whose signature is missing, wrong, stale or replayed (HTTP 401)."""


def window_from_env() -> float:
    """The signature window in seconds: ``HEADWATER_SIGNATURE_WINDOW`` or 60."""
    text = os.environ.get(WINDOW_ENV)
    if not text:
        return WINDOW_SECONDS
    try:
        window = float(text)
    except ValueError:
        window = -1.0
    if not 1.0 <= window <= 3600.0:
        raise ConfigurationError(f"{WINDOW_ENV}={clip(text)}: expected seconds between 1 and 3600 (default 60)")
    return window


def signature(secret: str, method: str, target: str, body: bytes, timestamp: str, nonce: str) -> str:
    """The hex MAC of one request (``target``: the path with its query string, as sent)."""
    text = "\n".join((SCHEME, method.upper(), target, hashlib.sha256(body).hexdigest(), timestamp, nonce))
    return hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha256).hexdigest()


def signed_headers(secret: str, method: str, target: str, body: bytes, *, now: float | None = None) -> dict[str, str]:
    """The headers that sign one request: its timestamp, a fresh nonce and the MAC."""
    timestamp = f"{time.time() if now is None else now:.3f}"
    nonce = secrets.token_hex(16)
    return {HEADER_TIME: timestamp, HEADER_NONCE: nonce,
            HEADER_SIGNATURE: signature(secret, method, target, body, timestamp, nonce)}


class Signer(httpx.Auth):
    """Signs every request of an :class:`httpx.Client` with the worker secret."""

    requires_request_body = True

    def __init__(self, secret: str) -> None:
        self._secret = secret

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(signed_headers(self._secret, request.method, request.url.raw_path.decode("ascii"),
                                              request.content))
        yield request


def target_of(scope: Mapping[str, Any]) -> str:
    """The path and query of an ASGI request exactly as the client sent them (what :class:`Signer` signed)."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else str(scope.get("path", ""))
    query = scope.get("query_string") or b""
    return f"{path}?{query.decode('latin-1')}" if query else path


class Verifier:
    """Checks the signature of requests signed with ``secret``; remembers accepted nonces for the window."""

    def __init__(self, secret: str, *, window: float | None = None, max_nonces: int = MAX_NONCES,
                 clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self.window = window_from_env() if window is None else window
        self.max_nonces = max_nonces
        self._clock = clock
        self._seen: dict[str, float] = {}  # nonce -> when it leaves the window
        self._expiries: list[tuple[float, str]] = []  # a heap of the same, to forget them in order
        self._lock = threading.Lock()

    def verify(self, method: str, target: str, body: bytes, headers: Mapping[str, str]) -> None:
        """Return if the request is signed with the secret, recent and new; raise :class:`SignatureError`."""
        timestamp, nonce, mac = (headers.get(HEADER_TIME), headers.get(HEADER_NONCE), headers.get(HEADER_SIGNATURE))
        if not timestamp or not nonce or not mac:
            raise SignatureError(f"refused {method} {clip(target, 100)}: the request is not signed (headers "
                                 f"{HEADER_TIME}, {HEADER_NONCE}, {HEADER_SIGNATURE}); master and workers sign "
                                 "their requests with the worker secret (HEADWATER_WORKER_SECRET) - a bearer "
                                 "secret is no longer accepted: run the same Headwater version on both sides")
        expected = signature(self._secret, method, target, body, timestamp, nonce)
        if len(nonce) > 128 or not hmac.compare_digest(mac.encode("utf-8", "replace"), expected.encode("ascii")):
            raise SignatureError(f"refused {method} {clip(target, 100)}: its signature does not match; the sender "
                                 "does not hold this side's worker secret (HEADWATER_WORKER_SECRET), or the request "
                                 "was altered on the way")
        try:
            sent = float(timestamp)
        except ValueError:
            sent = float("nan")
        now = self._clock()
        if not abs(now - sent) <= self.window:  # NaN too
            raise SignatureError(f"refused {method} {clip(target, 100)}: its timestamp {clip(timestamp, 40)} is "
                                 f"{now - sent:+.0f} s from this clock, outside the window of ±{self.window:.0f} s "
                                 f"({WINDOW_ENV}); a replayed request, or clocks that need synchronising (NTP)")
        with self._lock:
            while self._expiries and self._expiries[0][0] < now:
                self._seen.pop(heapq.heappop(self._expiries)[1], None)
            if nonce in self._seen:
                raise SignatureError(f"refused {method} {clip(target, 100)}: its nonce was already used within the "
                                     f"last {self.window:.0f} s: a replayed request")
            if len(self._seen) >= self.max_nonces:
                raise SignatureError(f"refused {method} {clip(target, 100)}: over {self.max_nonces} signed requests "
                                     f"within {self.window:.0f} s, more than this side can remember to refuse "
                                     "replays; retry shortly")
            self._seen[nonce] = sent + self.window
            heapq.heappush(self._expiries, (sent + self.window, nonce))
