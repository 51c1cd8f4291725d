"""The doors of the HTTP services: what a request must show before its body is read, and how much it may bring.

Every HTTP caller is untrusted until its token says otherwise (``docs/security.md``, HTTP limits). The master
and the workers put a :class:`Guard` in front of their FastAPI apps, an ASGI layer that runs before FastAPI
reads or parses anything:

- a request to any path but the open ones (health, login, the API docs) must carry ``Authorization: Bearer
  <token>``, and the token must pass the service's check (the master's user tokens, the worker secret), before
  one byte of its body is read: 401 otherwise;
- the web console's requests (``/ui/...``, and its calls of the API) carry the token in the session cookie
  instead: a page without a valid one is sent to the login page, and every request but a page's ``GET`` must
  also carry the session's CSRF token in ``X-CSRF-Token`` (:func:`csrf_of`), which another site cannot read
  or send (403 otherwise);
- a body is counted while it arrives: a declared ``Content-Length`` over the route's limit is refused at once, a
  chunked body as soon as it passes the limit (413), so no route ever holds more than its limit;
- an Arrow IPC body is decoded only after :func:`decoded_size` (which reads the stream's metadata, not its
  data) shows that its decompressed size is within an absolute limit and a ratio to the body's size.

Health checks are async routes doing no blocking work, so they answer from the event loop whatever the thread
pool is doing. Calls that wait for minutes (a graph catching up) hold no thread: the server takes one look
at a time (:meth:`~headwater.runtime.master.Master.catch_up`) and pauses on its event loop in between, and
:class:`WaitSlots` bounds how many such waits may be in progress, refusing the next with a clear error.

>>> from headwater.runtime.protocol import arrow_bytes
>>> limits = HttpLimits(arrow_decoded_bytes=10_000, arrow_ratio=100.0)
>>> body = arrow_bytes(pa.table({"x": list(range(100))}))
>>> decoded_size(body) <= len(body), arrow_table(body, where="append to t", limits=limits).num_rows
(True, 100)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import json
import re
import struct
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio.to_thread
import pyarrow as pa

from headwater.errors import BusyError, ConfigurationError, RequestError, SchemaError, clip

MiB = 2**20
OPEN_PATHS = frozenset({"/v1/health", "/v1/login", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
JOIN_PATH = "/v1/workers/join"
METRICS_PATH = "/metrics"
WORKER_REQUEST_PATH = "/v1/worker/request"
CONSOLE = "/ui"  # the web console's pages, assets and answers (headwater.service.console)
CONSOLE_OPEN_PATHS = frozenset({"/ui/login"})
SESSION_COOKIE = "headwater_session"
CSRF_HEADER = "x-csrf-token"
_COOKIE = re.compile(rf"(?:^|;)\s*{SESSION_COOKIE}=([\x21-\x2b\x2d-\x3a\x3c-\x7e]{{1,4096}})\s*(?:;|$)")
# a bearer token's shape: what is checked before anything else is done with it
_BEARER = re.compile(r"Bearer ([\x21-\x7e]{1,4096})")

Check = Callable[[str], Awaitable[object]]  # a token -> the user it belongs to (or anything); AuthError if refused


def csrf_of(token: str) -> str:
    """The CSRF token of a console session: derived from its secret token, so it needs no storage and holds on
    every master that accepts the token (a standby that takes over included).

    >>> csrf_of("abc") == csrf_of("abc") != csrf_of("abd")
    True
    """
    return hmac.new(token.encode(), b"headwater-console-csrf", hashlib.sha256).hexdigest()


def session_token(scope: Any) -> str | None:
    """The console session's token from the request's cookie, or None."""
    header = _header(scope, b"cookie")
    found = _COOKIE.search(header) if header is not None else None
    return found.group(1) if found else None


class BodyTooLarge(RequestError):
    """A request body, or what it decompresses to, is over its limit (HTTP 413; sent as ``RequestError``)."""


@dataclass(frozen=True)
class HttpLimits:
    """The limits of the HTTP doors, each a command-line setting (see :func:`add_limit_flags`)."""

    json_bytes: int = 1 * MiB  # --max-json-mb: a JSON request to the master
    document_bytes: int = 16 * MiB  # --max-document-mb: a graph document (/v1/submit)
    message_bytes: int = 1024 * MiB  # --max-message-mb: a message from the master to a worker (warm-up rows)
    arrow_decoded_bytes: int = 1024 * MiB  # --max-arrow-mb: an Arrow body once decompressed
    arrow_ratio: float = 100.0  # --max-arrow-ratio: decompressed size / body size
    waits: int = 32  # --max-waits: calls that wait (for a graph to catch up) at one time

    def __post_init__(self) -> None:
        for name, flag in _FLAGS.items():
            value = getattr(self, name)
            if name == "arrow_ratio" and not (isinstance(value, int | float) and value >= 1.0):
                raise ConfigurationError(f"HTTP limit {flag} is {value!r}; expected a number >= 1")
            if name != "arrow_ratio" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigurationError(f"HTTP limit {flag} is {value!r}; expected a whole number >= 1 (MiB for "
                                         "the sizes)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> HttpLimits:
        """The limits given on the command line (``headwater master`` or ``headwater worker``)."""
        given = {"json_bytes": _mib(getattr(args, "max_json_mb", None)),
                 "document_bytes": _mib(getattr(args, "max_document_mb", None)),
                 "message_bytes": _mib(getattr(args, "max_message_mb", None)),
                 "arrow_decoded_bytes": _mib(getattr(args, "max_arrow_mb", None)),
                 "arrow_ratio": getattr(args, "max_arrow_ratio", None), "waits": getattr(args, "max_waits", None)}
        return cls(**{k: v for k, v in given.items() if v is not None})


_FLAGS = {"json_bytes": "--max-json-mb", "document_bytes": "--max-document-mb", "message_bytes": "--max-message-mb",
          "arrow_decoded_bytes": "--max-arrow-mb", "arrow_ratio": "--max-arrow-ratio", "waits": "--max-waits"}
MASTER_LIMITS = HttpLimits()
WORKER_LIMITS = HttpLimits()


def _mib(value: int | None) -> int | None:
    return None if value is None else value * MiB


def add_limit_flags(parser: argparse.ArgumentParser, *, role: str) -> None:
    """The HTTP limits as flags of ``headwater master`` (``role="master"``) or ``headwater worker``."""
    d = HttpLimits()
    if role not in ("master", "worker"):
        raise ValueError(f"role {role!r}: expected 'master' or 'worker'")
    if role == "master":
        parser.add_argument("--max-json-mb", type=int, default=d.json_bytes // MiB,
                            help="the largest JSON request body (graph documents excepted)")
        parser.add_argument("--max-document-mb", type=int, default=d.document_bytes // MiB,
                            help="the largest graph document a submit may send")
        parser.add_argument("--max-arrow-mb", type=int, default=d.arrow_decoded_bytes // MiB,
                            help="the largest an append or warm-up body may be once decompressed")
        parser.add_argument("--max-arrow-ratio", type=float, default=d.arrow_ratio,
                            help="the most an append or warm-up body may grow when decompressed (times its size)")
        parser.add_argument("--max-waits", type=int, default=d.waits,
                            help="calls waiting at one time (for a graph to catch up, for a table's next version); "
                                 "more are refused (429)")
    else:
        parser.add_argument("--max-message-mb", type=int, default=d.message_bytes // MiB,
                            help="the largest request the master may send (warm-up rows travel in it)")


@dataclass(frozen=True)
class Limit:
    """A body limit and the setting that raises it (named when a body is refused)."""

    bytes: int
    setting: str


@dataclass
class _Exchange:
    """One request passing the guard: what its app sent, and whether the guard answered in its place."""

    started: bool = False
    answered: bool = False
    received: int = 0


class _Refused(Exception):
    """Raised into the app when its body passes the limit (the guard has answered 413 already)."""


class Guard:
    """An ASGI app in front of ``app``: tokens are checked and bodies limited before ``app`` reads anything.

    ``check`` checks the bearer token of every path but ``open_paths`` (``path_checks`` gives a path its own
    check, e.g. the worker secret for a joining worker); its result is left in ``scope["state"]["user"]``.
    ``limits`` gives a path its body limit, ``default`` every other path's.
    """

    def __init__(self, app: Any, *, check: Check, default: Limit, limits: Mapping[str, Limit] | None = None,
                 open_paths: frozenset[str] = OPEN_PATHS, path_checks: Mapping[str, Check] | None = None,
                 signed_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        # paths whose requests are signed with the worker secret (headwater.service.signing): their headers are
        # checked here before the body is read; the signature over the body is checked by the route
        self.signed_paths = signed_paths
        self.check = check
        self.default = default
        self.limits = dict(limits or {})
        self.open_paths = open_paths
        self.path_checks = dict(path_checks or {})
        # imported here: the command line builds its flags from this module without loading the metadata store
        from headwater.service.auth import AuthError

        self._refused = AuthError

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path in self.signed_paths:
            refusal = _unsigned(scope)
            if refusal is not None:
                await _answer(send, 401, "AuthError", refusal)
                return
        elif path not in self.open_paths and path not in CONSOLE_OPEN_PATHS:
            header = _header(scope, b"authorization")
            bearer = _BEARER.fullmatch(header) if header is not None else None
            console = path == CONSOLE or path.startswith(CONSOLE + "/")
            page = console and scope["method"] == "GET"
            token = bearer.group(1) if bearer is not None and not console else session_token(scope)
            try:
                if token is None:
                    raise self._refused("this call needs 'Authorization: Bearer <token>': POST /v1/login first (a "
                                        "worker: the worker secret)")
                user = await self.path_checks.get(path, self.check)(token)
            except self._refused as exc:  # a console page goes to the login page; anything else is told why
                await (_redirect(send, f"{CONSOLE}/login") if page else _answer(send, 401, "AuthError", str(exc)))
                return
            # a cookie is sent by the browser whoever made the page: a call that rides on it must also show the
            # CSRF token that only the console's own pages know (a page's GET changes nothing and needs none)
            if bearer is None or console:
                sent = _header(scope, CSRF_HEADER.encode()) or ""
                if not page and not hmac.compare_digest(sent, csrf_of(token)):
                    await _answer(send, 403, "PermissionDenied", f"{scope['method']} {path}: the console's CSRF "
                                                                 "token is missing or wrong (reload the page)")
                    return
            scope.setdefault("state", {})["user"] = user
        limit = self.limits.get(path, self.default)
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit.bytes):
            size = int(declared) if declared.isdigit() else clip(declared, 40)
            await _answer(send, 413, "RequestError", f"{scope['method']} {path}: the body has {size} bytes; the "
                                                     f"limit is {limit.bytes} ({limit.setting})")
            return
        exchange = _Exchange()

        async def counted_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                exchange.received += len(message.get("body", b""))
                if exchange.received > limit.bytes:
                    if not exchange.started:
                        exchange.answered = True
                        await _answer(send, 413, "RequestError", f"{scope['method']} {path}: the body is over the "
                                                                 f"limit of {limit.bytes} bytes ({limit.setting})")
                    raise _Refused
            return message

        async def watched_send(message: Any) -> None:
            if exchange.answered:  # the app's own answer to the refused body: the client has the guard's
                return
            if message["type"] == "http.response.start":
                exchange.started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except _Refused:
            if not exchange.answered:
                raise


def _unsigned(scope: Any) -> str | None:
    """Why a signed path's request is refused before its body is read (no signature, or a stale one), or None."""
    from headwater.service.signing import HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIME, window_from_env

    if any(_header(scope, h.encode()) is None for h in (HEADER_SIGNATURE, HEADER_NONCE, HEADER_TIME)):
        return "this call is not signed with the worker secret (HEADWATER_WORKER_SECRET)"
    try:
        sent = float(_header(scope, HEADER_TIME.encode()) or "")
    except ValueError:
        return "the request's timestamp is not a number"
    window = window_from_env()
    if not abs(time.time() - sent) <= window:
        return (f"the request's timestamp is {time.time() - sent:+.0f} s from this clock, outside the window of "
                f"±{window:.0f} s (HEADWATER_SIGNATURE_WINDOW)")
    return None


def _header(scope: Any, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _answer(send: Any, status: int, error: str, message: str) -> None:
    """A JSON answer in Headwater's error shape; the connection closes after it (the body stays unread)."""
    body = json.dumps({"error": error, "message": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Any, location: str) -> None:
    """A page asked for without a valid session: to the login page (303)."""
    await send({"type": "http.response.start", "status": 303,
                "headers": [(b"location", location.encode()), (b"content-length", b"0"), (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": b""})


def in_thread(fn: Callable[[str], object]) -> Check:
    """A blocking token check (a metadata-store lookup) run off the event loop."""

    async def check(token: str) -> object:
        return await anyio.to_thread.run_sync(fn, token)

    return check


def secret_check(secret: str | None, refusal: str) -> Check:
    """A check that accepts exactly ``secret`` (compared in constant time); none accepts nothing."""
    import hmac

    from headwater.service.auth import AuthError

    expected = (secret or "").encode()

    async def check(token: str) -> object:
        if not secret or not hmac.compare_digest(token.encode(), expected):
            raise AuthError(refusal)
        return None

    return check


def guard_master(app: Any, user_of: Callable[[str], object], *, body_bytes: int, limits: HttpLimits,
                 arrow_paths: frozenset[str], document_paths: frozenset[str]) -> None:
    """Put the master's :class:`Guard` in front of ``app`` (the FastAPI app of :func:`~.server.create_app`):
    ``arrow_paths`` take rows (``--max-body-mb``), ``document_paths`` a graph document, the rest small JSON; a
    joining worker signs its request with the worker secret."""
    arrow = Limit(body_bytes, "--max-body-mb")
    app.add_middleware(
        Guard, check=in_thread(user_of), default=Limit(limits.json_bytes, "--max-json-mb"),
        limits={**dict.fromkeys(arrow_paths, arrow),
                **dict.fromkeys(document_paths, Limit(limits.document_bytes, "--max-document-mb"))},
        signed_paths=frozenset({JOIN_PATH}), path_checks={METRICS_PATH: metrics_or(in_thread(user_of))})


def metrics_or(check: Check | None) -> Check:
    """A scrape's check: the metrics token (``HEADWATER_METRICS_TOKEN``), else ``check`` (none: refused)."""
    from headwater.runtime.metrics import TOKEN_ENV, is_metrics_token
    from headwater.service.auth import AuthError

    async def scrape(token: str) -> object:
        if is_metrics_token(token):
            return None
        if check is None:
            raise AuthError(f"/metrics needs the metrics token (set {TOKEN_ENV} and scrape with it as bearer token)")
        return await check(token)

    return scrape


def guard_worker(app: Any, *, limits: HttpLimits) -> None:
    """Put a worker's :class:`Guard` in front of ``app``: only requests signed by the master get a body read."""
    app.add_middleware(Guard, check=secret_check(None, "a worker answers only requests signed by its master"),
                       default=Limit(limits.message_bytes, "--max-message-mb"),
                       signed_paths=frozenset({WORKER_REQUEST_PATH}), path_checks={METRICS_PATH: metrics_or(None)})


# -- Arrow bodies ------------------------------------------------------------------------------------------
async def read_body(request: Any, where: str, limit: int, setting: str) -> bytes:
    """The request's body, read up to ``limit`` bytes: a longer one is refused before more of it is read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"{where}: the body has {int(declared)} bytes; the limit is {limit} ({setting})")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"{where}: the body is over the limit of {limit} bytes ({setting})")
    return bytes(body)


async def read_arrow(request: Any, where: str, limit: int, *, limits: HttpLimits | None = None) -> pa.Table:
    """The request's Arrow IPC body as a table: at most ``limit`` bytes, decoded within ``limits``, off the loop."""
    body = await read_body(request, where, limit, "--max-body-mb")
    return await anyio.to_thread.run_sync(lambda: arrow_table(body, where=where, limits=limits or HttpLimits()))


def arrow_table(body: bytes, *, where: str, limits: HttpLimits) -> pa.Table:
    """``body`` (an Arrow IPC stream) as a table, refused with :class:`BodyTooLarge` before anything is
    decompressed if it would grow past ``limits.arrow_decoded_bytes`` or ``limits.arrow_ratio`` times its size."""
    ratio_bytes = int(limits.arrow_ratio * len(body))
    cap, setting = ((limits.arrow_decoded_bytes, "--max-arrow-mb") if limits.arrow_decoded_bytes <= ratio_bytes
                    else (ratio_bytes, f"--max-arrow-ratio {limits.arrow_ratio:g}"))
    try:
        size = decoded_size(body, stop_after=cap)
    except (pa.ArrowInvalid, OSError, ValueError, struct.error) as exc:
        raise SchemaError(f"{where}: the body is not an Arrow IPC stream ({clip(str(exc))})") from None
    if size > cap:
        raise BodyTooLarge(f"{where}: the {len(body)}-byte Arrow body decompresses to more than {cap} bytes "
                           f"(the limit, {setting}); send it in smaller appends")
    try:
        return pa.ipc.open_stream(body).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise SchemaError(f"{where}: the body is not an Arrow IPC stream ({clip(str(exc))})") from None


_RECORD_BATCH, _DICTIONARY_BATCH = 3, 2  # flatbuffers MessageHeader union tags (Arrow's Message.fbs)


def decoded_size(body: bytes, *, stop_after: int | None = None) -> int:
    """What the Arrow IPC stream ``body`` takes once decoded, read from its messages' metadata only.

    Each batch counts its buffers at their decompressed size (a compressed buffer starts with it) plus one
    byte per value (a null column has no buffers but is not free downstream). Counting stops once the total
    passes ``stop_after``. A malformed stream raises ``ValueError`` or ``pa.ArrowInvalid``.
    """
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(pa.py_buffer(body)))
    total = 0
    while stop_after is None or total <= stop_after:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        if message.type not in ("record batch", "dictionary"):
            continue
        total += _batch_size(memoryview(message.metadata), memoryview(message.body) if message.body else b"")
    return total


def _batch_size(meta: memoryview | bytes, body: memoryview | bytes) -> int:
    fb = _Flat(meta)
    root = fb.root()
    kind = fb.scalar(root, 1, "<B")
    header = fb.table(root, 2)
    if header is None:
        raise ValueError("an Arrow message without its header")
    if kind == _DICTIONARY_BATCH:
        header = fb.table(header, 1)
        if header is None:
            raise ValueError("an Arrow dictionary batch without its data")
    elif kind != _RECORD_BATCH:
        raise ValueError(f"an Arrow message of kind {kind} where a record batch was expected")
    compressed = fb.table(header, 3) is not None
    values = sum(fb.struct(at, "<q")[0] for at in fb.vector(header, 1, 16))
    size = 0
    for at in fb.vector(header, 2, 16):
        offset, length = fb.struct(at, "<qq")
        if offset < 0 or length < 0 or offset + length > len(body):
            raise ValueError("an Arrow buffer outside its message's body")
        if not compressed or length == 0:
            size += length
            continue
        if length < 8:
            raise ValueError("a compressed Arrow buffer without its length")
        (decompressed,) = struct.unpack_from("<q", body, offset)
        size += length - 8 if decompressed == -1 else decompressed
        if decompressed < -1:
            raise ValueError("a compressed Arrow buffer with a negative length")
    return size + max(values, 0)


class _Flat:
    """Just enough of a flatbuffers reader for Arrow's Message and RecordBatch tables, every read bounds-checked."""

    def __init__(self, buf: memoryview | bytes) -> None:
        self.buf = buf

    def _read(self, fmt: str, at: int) -> tuple[Any, ...]:
        if at < 0 or at + struct.calcsize(fmt) > len(self.buf):
            raise ValueError("malformed Arrow message metadata")
        return struct.unpack_from(fmt, self.buf, at)

    def root(self) -> int:
        return int(self._read("<I", 0)[0])

    def _field(self, table: int, index: int) -> int | None:
        vtable = table - self._read("<i", table)[0]
        (vtable_size,) = self._read("<H", vtable)
        slot = 4 + 2 * index
        if slot + 2 > vtable_size:
            return None
        (offset,) = self._read("<H", vtable + slot)
        return None if offset == 0 else table + offset

    def scalar(self, table: int, index: int, fmt: str) -> Any:
        at = self._field(table, index)
        return 0 if at is None else self._read(fmt, at)[0]

    def table(self, table: int, index: int) -> int | None:
        at = self._field(table, index)
        return None if at is None else at + self._read("<I", at)[0]

    def vector(self, table: int, index: int, item_size: int) -> range:
        at = self._field(table, index)
        if at is None:
            return range(0)
        start = at + self._read("<I", at)[0]
        (count,) = self._read("<I", start)
        if start + 4 + count * item_size > len(self.buf):
            raise ValueError("malformed Arrow message metadata")
        return range(start + 4, start + 4 + count * item_size, item_size)

    def struct(self, at: int, fmt: str) -> tuple[Any, ...]:
        return self._read(fmt, at)


# -- waits ---------------------------------------------------------------------------------------------------
class WaitSlots:
    """How many calls may wait (for a graph to catch up) at one time: ``size``. A call that finds them all taken
    is refused at once with :class:`BusyError` (HTTP 429) naming the setting, rather than queued behind waits of up to
    an hour. Waits hold no thread (the server looks at the graph between pauses on its event loop); this bounds
    the looks. Used from the event loop only, so a counter is enough.
    """

    def __init__(self, size: int, *, what: str, setting: str = "--max-waits") -> None:
        self.size, self.what, self.setting = size, what, setting
        self.taken = 0

    @property
    def full(self) -> bool:
        return self.taken >= self.size

    def refuse(self) -> None:
        raise BusyError(f"{self.what}: {self.size} waits are in progress already, the limit ({self.setting}); retry "
                        "once one ends")

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        if self.full:
            self.refuse()
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1
