"""The client side of the master's HTTP API: the master a remote :class:`~headwater.api.session.Session` uses.

:class:`RemoteMaster` implements :class:`~headwater.runtime.operations.MasterApi`: each declared operation is one
HTTP request (``headwater.service.server``), its arguments and result in the wire form of their declared types. An error the
master raised comes back as the same Headwater exception class, with its message.
"""

from __future__ import annotations

import io
import json
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from headwater.errors import (
    AuthenticationError,
    ConfigurationError,
    ExecutionError,
    clip,
    error_class,
)
from headwater.runtime.operations import OPERATIONS, MasterApi, Operation
from headwater.runtime.protocol import arrow_bytes, arrow_table
from headwater.service.tls import client_context, client_transport
from headwater.service.wire import from_wire, to_wire

ARROW_STREAM = "application/vnd.apache.arrow.stream"
STANDBY_ERROR = "StandbyMaster"  # the error a standby master answers every API call with (HTTP 503)


def _is_standby(response: httpx.Response) -> bool:
    try:
        return bool(response.json().get("error") == STANDBY_ERROR)
    except (ValueError, AttributeError):
        return False


class _ByteStream(io.RawIOBase):
    """A readable raw file over an iterator of byte chunks (an HTTP response body, read as it arrives).

    A raw read returns at most one chunk's bytes, so read it through :func:`byte_reader`: pyarrow takes a short
    read for a truncated message.
    """

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.pending = chunks, b""
        self.failure: httpx.TransportError | None = None  # the connection broke mid-body (pyarrow wraps it)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            try:
                chunk = next(self.chunks, None)
            except httpx.TransportError as exc:
                self.failure = exc
                raise
            if chunk is None:
                return 0
            self.pending = chunk
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


def byte_reader(chunks: Iterator[bytes] | _ByteStream) -> io.BufferedReader:
    """A file whose ``read(n)`` returns ``n`` bytes unless the chunks end first, whatever their sizes.

    >>> byte_reader(iter([b"ab", b"", b"cde"])).read(4)
    b'abcd'
    """
    raw = chunks if isinstance(chunks, _ByteStream) else _ByteStream(chunks)
    return io.BufferedReader(raw, buffer_size=1 << 16)


class RemoteMaster(MasterApi):
    """A master reached over HTTP at ``url``, logged in as ``user``: every declared operation is one request.

    ``url`` may list several masters (an active one and standbys, ``--standby``): calls go to the one that
    answers as active. When it stops answering, a call moves on to the next within ``failover_timeout``
    seconds: any call whose request never reached the old master, and, if it was cut off after that, the
    calls that are safe to repeat (reads, submits, appends with a sequence number).
    """

    def __init__(self, url: str | Sequence[str], *, user: str | None = None, password: str | None = None,
                 token: str | None = None, timeout: float = 60.0, http: httpx.Client | None = None,
                 failover_timeout: float = 60.0, tls_ca: str | None = None) -> None:
        # http: a ready client for this URL (tests pass FastAPI's TestClient, which calls the app in process)
        # tls_ca: the CA bundle an https:// master's certificate is checked against (default HEADWATER_TLS_CA, else
        # the system's trust store); token: one from an earlier login (headwater login) instead of user and password
        urls = [url] if isinstance(url, str) else list(url)
        for u in urls:
            if not isinstance(u, str) or not u.startswith(("http://", "https://")):
                raise ConfigurationError(f"master URL {clip(u)} must start with http:// or https://")
        if not urls:
            raise ConfigurationError("connect(): no master URL given")
        self.urls = [u.rstrip("/") for u in urls]
        self._current = 0
        self._timeout = timeout
        self._failover_timeout = failover_timeout
        self._auth: dict[str, str] = {}
        self._http = http if http is not None else httpx.Client(
            base_url=self.url, timeout=timeout, transport=client_transport(client_context(tls_ca)))
        if token is None and (user is None or password is None):
            self._http.close()
            raise ConfigurationError("a master needs user and password, or a token from headwater login")
        try:
            if token is None:
                token = self._call("/v1/login", {"user": user, "password": password}, idempotent=True)["token"]
        except ExecutionError as exc:
            self._http.close()
            if len(self.urls) == 1 and isinstance(exc.__cause__, httpx.TransportError):  # a wrong URL, most likely
                raise ConfigurationError(f"cannot reach the Headwater master at {self.url}: {exc.__cause__}") from None
            raise
        except BaseException:
            self._http.close()
            raise
        self._auth = {"Authorization": f"Bearer {token}"}  # per request: a shared client may serve other users

    @property
    def url(self) -> str:
        return self.urls[self._current]

    @property
    def token(self) -> str:
        """This session's bearer token (``headwater login`` keeps it for later commands)."""
        return self._auth["Authorization"].removeprefix("Bearer ")

    # -- transport ------------------------------------------------------------------------------------
    def _call(self, path: str, body: Any = None, *, content: bytes | None = None, params: dict[str, Any] | None = None,
              timeout: float | None = None, idempotent: bool = False, raw: bool = False) -> Any:
        # raw: the answer's bytes (an Arrow stream), not its JSON
        deadline = time.monotonic() + self._failover_timeout
        tried = 0
        while True:
            try:
                if content is not None:
                    response = self._http.post(path, content=content, params=params,
                                               headers={**self._auth, "Content-Type": ARROW_STREAM},
                                               timeout=timeout or self._timeout)
                else:
                    response = self._http.post(path, json=body, params=params, headers=self._auth,
                                               timeout=timeout or self._timeout)
            except httpx.TransportError as exc:
                # ConnectError: the request never left; anything later may have reached the master
                if len(self.urls) == 1 or not (idempotent or isinstance(exc, httpx.ConnectError)):
                    raise self._unreachable(path, exc) from exc
                tried = self._next_master(tried, deadline, exc)
                continue
            if response.status_code == 503 and len(self.urls) > 1 and _is_standby(response):
                tried = self._next_master(tried, deadline, None)
                continue
            if response.is_success:
                return response.content if raw else response.json()
            raise self._error(response)

    def _unreachable(self, path: str, exc: httpx.TransportError) -> ExecutionError:
        """The error of a call that got no answer: whether it may have taken effect depends on whether it left."""
        what = str(exc) or type(exc).__name__  # a timeout's message can be empty
        if isinstance(exc, httpx.ConnectError):
            return ExecutionError(f"cannot reach the Headwater master at {self.url}: {what}")
        return ExecutionError(f"the call {path} to the Headwater master at {self.url} got no answer ({what}): "
                              "it may or may not have taken effect")

    def _next_master(self, tried: int, deadline: float, exc: Exception | None) -> int:
        """Move on to the next master URL; after each full round, pause briefly (a standby takes over in seconds)."""
        if time.monotonic() > deadline:
            raise ExecutionError(f"no active Headwater master among {', '.join(self.urls)} within "
                                 f"{self._failover_timeout:.0f}s" + (f": {exc}" if exc else "")) from exc
        tried += 1
        self._current = (self._current + 1) % len(self.urls)
        self._http.base_url = httpx.URL(self.url)
        if tried % len(self.urls) == 0:
            time.sleep(0.25)  # every master refused: wait for the standby's takeover (bounded by the deadline)
        return tried

    def _error(self, response: httpx.Response) -> Exception:
        try:
            doc = response.json()
        except ValueError:
            doc = {}
        message = doc.get("message") if isinstance(doc, dict) else None
        if response.status_code == 401:
            return AuthenticationError(f"the Headwater master at {self.url} refused the call: {message or 'unauthorised'}")
        kind = error_class(doc.get("error")) if isinstance(doc, dict) else None
        if kind is not None and message is not None:
            return kind(message)
        return ExecutionError(f"the Headwater master at {self.url} answered {response.status_code}: "
                              f"{clip(message or response.text, 500)}")

    # -- SQL ------------------------------------------------------------------------------------------
    def sql(self, query: str, current_catalog: str | None = None) -> tuple[Path, pa.Schema]:
        """Stream the result into a local Parquet file, a batch at a time; return its directory and schema."""
        directory = Path(tempfile.mkdtemp(prefix="headwater-sql-"))
        try:
            return directory, self._sql_into(directory / "part-00000.parquet", query, current_catalog)
        except BaseException:  # a refused query, a cut-off result: no directory left behind
            shutil.rmtree(directory, ignore_errors=True)
            raise

    def _sql_into(self, path: Path, query: str, current_catalog: str | None) -> pa.Schema:
        body = {"query": query, "current_catalog": current_catalog}
        deadline, tried = time.monotonic() + self._failover_timeout, 0
        while True:  # a read: safe to repeat on another master, from the start
            stream: _ByteStream | None = None
            try:
                with self._http.stream("POST", "/v1/sql", json=body, headers=self._auth, timeout=None) as response:
                    if not response.is_success:
                        response.read()
                        if response.status_code == 503 and len(self.urls) > 1 and _is_standby(response):
                            tried = self._next_master(tried, deadline, None)
                            continue
                        raise self._error(response)
                    stream = _ByteStream(response.iter_bytes())
                    reader = pa.ipc.open_stream(pa.PythonFile(byte_reader(stream), mode="r"))
                    with pq.ParquetWriter(path, reader.schema) as writer:
                        for batch in reader:
                            writer.write_batch(batch)
                return reader.schema
            except (httpx.TransportError, pa.ArrowException, OSError) as exc:
                # a connection cut mid-result surfaces through pyarrow: the stream remembers the real cause
                cause = exc if isinstance(exc, httpx.TransportError) else (stream.failure if stream else None)
                if cause is None:
                    raise
                if len(self.urls) == 1:
                    if isinstance(cause, httpx.ConnectError):
                        raise self._unreachable("/v1/sql", cause) from cause
                    raise ExecutionError(f"the SQL result from {self.url} was cut off: {cause}") from None
                tried = self._next_master(tried, deadline, cause)

    # -- session --------------------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """Nothing to do here: the master resumes its graphs itself."""
        return []

    def logout(self) -> None:
        """Revoke this session's token on the master; later calls are refused (401)."""
        self._call("/v1/logout", {})

    def close(self) -> None:
        """Close the connection; the master and its graphs keep running."""
        self._http.close()


def _remote(op: Operation) -> Any:
    """The client side of one operation: its arguments to their wire form, one request, the result back."""
    hints, rows = op.hints, op.rows_argument

    def call(self: RemoteMaster, *args: Any, **kwargs: Any) -> Any:
        bound = op.signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        values = {k: to_wire(v, hints[k]) for k, v in bound.arguments.items() if k not in ("self", rows)}
        # a call that waits up to `timeout` on the master gets 30 s more here; others the declared or own timeout
        timeout = op.timeout if "timeout" not in values else float(values["timeout"]) + 30.0
        raw = hints["return"] is pa.Table  # an Arrow answer
        if rows is not None:
            doc = self._call(f"/v1/{op.name}", content=arrow_bytes(bound.arguments[rows]),
                             params={"args": json.dumps(values)}, timeout=timeout, idempotent=op.idempotent, raw=raw)
        else:
            doc = self._call(f"/v1/{op.name}", values, timeout=timeout, idempotent=op.idempotent, raw=raw)
        if raw:
            return arrow_table(doc)
        result = doc["result"]
        return None if hints["return"] is type(None) else from_wire(result, hints["return"], f"{op.name} result")

    call.__name__ = op.name
    call.__doc__ = op.function.__doc__
    return call


for _name, _op in OPERATIONS.items():
    if _name not in vars(RemoteMaster):
        setattr(RemoteMaster, _name, _remote(_op))
