"""The master's HTTP API (FastAPI): what a remote :class:`~headwater.api.session.Session` calls.

Each operation declared in :mod:`headwater.runtime.operations` is one route, ``POST /v1/<name>``, derived from
its declaration: the body is a JSON object of its arguments (each checked against its declared type by
:mod:`headwater.service.wire`; names parsed by the catalog's rules), or, for an operation that carries rows,
an Arrow IPC stream (``application/vnd.apache.arrow.stream``) with the other arguments as JSON in the query
parameter ``args``. The answer is ``{"result": ...}``; ``/v1/sql`` streams its rows back batch by batch. Every
route but ``/v1/health`` and ``/v1/login`` needs ``Authorization: Bearer <token>``; the caller's privileges
are checked by its :class:`~headwater.runtime.gateway.Gateway`. Errors come back as
``{"error": <Headwater error class>, "message"}``: 401 for a missing or revoked token, 403 for a missing
privilege, 413 for a body over its limit, 400 for anything else refused.

OpenAPI documentation is served at ``/docs``.
"""

from __future__ import annotations

import inspect
import io
import json
import logging
import re
import shutil
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from headwater.catalog import check_identifier
from headwater.errors import ConfigurationError, HeadwaterError, RequestError, clip, http_status
from headwater.faults import fault_point
from headwater.runtime.access import AccessControl
from headwater.runtime.gateway import Gateway
from headwater.runtime.master import Master
from headwater.runtime.operations import OPERATIONS, Operation
from headwater.runtime.protocol import arrow_bytes
from headwater.runtime.wakeup import TABLE_COMMITS, next_look
from headwater.service.auth import Authenticator, AuthError
from headwater.service.client import STANDBY_ERROR
from headwater.service.doors import (
    MASTER_LIMITS,
    BodyTooLarge,
    HttpLimits,
    WaitSlots,
    guard_master,
    read_arrow,
    read_body,
)
from headwater.service.signing import HEADER_SIGNATURE, SignatureError, Verifier, target_of
from headwater.service.wire import from_wire, to_wire

ARROW_STREAM = "application/vnd.apache.arrow.stream"


class Login(BaseModel):
    user: str
    password: str


class JoinWorker(BaseModel):
    url: str
    group: str = "default"


# what a joining worker may give as its address: http(s)://host:port, nothing else reaches the pool
WORKER_URL = re.compile(r"https?://[A-Za-z0-9.-]{1,253}:[0-9]{1,5}")

# HTTP status of a refusal, by error class (anything else a Headwater error says is a bad request: 400)
async def read_json(request: Request, where: str, limit: int, setting: str) -> Any:
    """The request's JSON body, read up to ``limit`` bytes (a longer body is refused before it is parsed)."""
    body = await read_body(request, where, limit, setting)
    try:
        return json.loads(body) if body else {}
    except (ValueError, RecursionError):
        raise RequestError(f"{where}: the body is not JSON") from None


def arguments(op: Operation, doc: Any, rows: pa.Table | None) -> dict[str, Any]:
    """An operation's arguments from their wire form, each checked against its declared type."""
    if not isinstance(doc, dict):
        raise RequestError(f"{op.name}: the arguments are a JSON object")
    hints, params = op.hints, [p for p in op.signature.parameters.values() if p.name != "self"]
    unknown = set(doc) - {p.name for p in params}
    if unknown:
        raise RequestError(f"{op.name}: unknown argument(s) {clip(sorted(unknown))}; "
                           f"expected {', '.join(p.name for p in params)}")
    values: dict[str, Any] = {}
    for p in params:
        if p.name == op.rows_argument:
            values[p.name] = rows
        elif p.name in doc:
            values[p.name] = from_wire(doc[p.name], hints[p.name], f"{op.name}.{p.name}")
        elif p.default is inspect.Parameter.empty:
            raise RequestError(f"{op.name}: argument {p.name} is missing")
    return values


def create_app(master: Master, auth: Authenticator, *, max_body_bytes: int = 512 * 2**20,
               worker_secret: str | None = None, limits: HttpLimits = MASTER_LIMITS, leadership: Any = None,
               access_log: bool = False, console: bool = True) -> FastAPI:
    """The HTTP API over ``master``: one route per declared operation (``POST /v1/<name>``), logins checked by
    ``auth``, privileges by the :class:`~headwater.runtime.gateway.Gateway` of the caller. Arrow bodies up to
    ``max_body_bytes``, the rest within ``limits`` (checked by the doors' guard before a byte of the body is
    read). ``worker_secret``: workers that present it may join (``headwater worker --master``). ``access_log``: a
    log line per request (logger ``headwater.access``, with the user). ``console``: the web console under ``/ui``
    (:mod:`headwater.service.console`)."""
    app = FastAPI(title="Headwater master", version="1")
    guard_master(app, auth.user_of, body_bytes=max_body_bytes, limits=limits,
                 arrow_paths=frozenset(f"/v1/{op.name}" for op in OPERATIONS.values() if op.rows_argument),
                 document_paths=frozenset({"/v1/submit"}))
    if access_log:
        app.add_middleware(AccessLog)  # added last: the outermost layer, it sees the guard's refusals too
    waits = WaitSlots(limits.waits, what="a waiting call (wait_until_caught_up, table_changes)")
    bearer = HTTPBearer(auto_error=False)
    access = AccessControl(master.store)
    # Graph and table lifecycle calls change the catalog and start or stop queries: one at a time. Appends,
    # reads, SQL and waits run concurrently.
    lifecycle = threading.Lock()

    def user(http: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
        checked = http.scope.get("state", {}).get("user")  # the guard's: a bearer token, or the console's cookie
        if checked is not None:
            return str(checked)
        if credentials is None:
            raise AuthError("this call needs a bearer token: POST /v1/login first")
        return auth.user_of(credentials.credentials)

    @app.exception_handler(HeadwaterError)
    def headwater_error(_: Request, exc: HeadwaterError) -> JSONResponse:
        return JSONResponse({"error": type(exc).__name__, "message": str(exc)},
                            status_code=http_status(exc))

    @app.exception_handler(RequestValidationError)
    def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse({"error": "RequestError", "message": clip(f"{where}: {first.get('msg', 'malformed request')}", 500)},
                            status_code=422)

    @app.exception_handler(BodyTooLarge)
    def too_large(_: Request, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse({"error": "RequestError", "message": str(exc)}, status_code=413)

    @app.exception_handler(AuthError)
    def auth_error(_: Request, exc: AuthError) -> JSONResponse:
        return JSONResponse({"error": "AuthError", "message": str(exc)}, status_code=401)

    report = HealthReport(master, leadership)

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:  # on the event loop: answers whatever the thread pool is doing
        return report.now()

    @app.get("/metrics")
    def metrics(http: Request) -> Response:  # the guard checked the token: the metrics token (user None) or a user's
        user = http.scope.get("state", {}).get("user")
        if user is not None and not access.is_admin(str(user)):
            raise access.refuse(str(user), "metrics", "*", "is not an admin (or scrape with the metrics token)")
        from headwater.runtime.master_metrics import master_metrics
        from headwater.runtime.metrics import CONTENT_TYPE

        return Response(master_metrics(master), media_type=CONTENT_TYPE)

    joins = Verifier(worker_secret) if worker_secret else None  # workers sign their join (service.signing)

    @app.post("/v1/workers/join")
    async def join(http: Request) -> dict[str, Any]:
        if joins is None or not http.headers.get(HEADER_SIGNATURE):  # refused before the body is read
            raise AuthError("a worker joins with a request signed with the master's worker secret "
                            "(HEADWATER_WORKER_SECRET)")
        raw = await http.body()
        try:
            joins.verify(http.method, target_of(http.scope), raw, http.headers)
        except SignatureError as exc:
            raise AuthError(str(exc)) from None
        try:
            body = JoinWorker.model_validate_json(raw)
        except ValueError as exc:
            raise RequestError(f"join: {clip(str(exc), 500)}") from None
        return await _in_thread(lambda: _join(body))

    def _join(body: JoinWorker) -> dict[str, Any]:
        if not WORKER_URL.fullmatch(body.url):
            raise RequestError(f"worker URL {clip(body.url)} must be http(s)://host:port")
        group = check_identifier(body.group, what="compute group")
        add = getattr(master.worker, "add", None)
        if add is None:
            raise ConfigurationError("this master runs its worker in its own process; start it with "
                                     "--remote-workers for workers to join")
        return {"joined": bool(add(body.url, group))}

    @app.post("/v1/login")
    def login(body: Login, http: Request) -> dict[str, str]:
        return {"token": auth.login(body.user, body.password, address=http.client.host if http.client else "")}

    @app.post("/v1/logout")
    def logout(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> dict[str, bool]:
        if credentials is None:
            raise AuthError("logout needs the bearer token to revoke")
        return {"revoked": auth.logout(credentials.credentials)}

    for op in OPERATIONS.values():
        json_bytes = limits.document_bytes if op.name == "submit" else limits.json_bytes
        _route(app, op, master, access, user, lifecycle, waits, max_body_bytes, json_bytes, limits)
    if console:
        from headwater.service.console import mount_console

        mount_console(app, master, auth, access)
    return app


def _route(app: FastAPI, op: Operation, master: Master, access: AccessControl, user: Callable[..., str],
           lifecycle: threading.Lock, waits: WaitSlots, max_body_bytes: int, max_json_bytes: int,
           limits: HttpLimits) -> None:
    """``POST /v1/<op.name>``: the caller's arguments checked against the declaration, then its gateway's call."""
    result_type = op.hints["return"]

    async def route(request: Request, caller: str = Depends(user)) -> Any:
        rows = None
        if op.rows_argument is not None:
            try:
                doc = json.loads(request.query_params.get("args", "{}"))
            except ValueError:
                raise RequestError(f"{op.name}: the query parameter args is not JSON") from None
            rows = await read_arrow(request, op.name, max_body_bytes, limits=limits)
        else:
            doc = await read_json(request, op.name, max_json_bytes,
                                  "--max-document-mb" if op.name == "submit" else "--max-json-mb")
        values = arguments(op, doc, rows)
        gateway = Gateway(master, access, caller)

        def call() -> Any:
            if op.serial:
                with lifecycle:
                    return getattr(gateway, op.name)(**values)
            return getattr(gateway, op.name)(**values)

        if op.steps:  # a wait of up to an hour holds no thread: one look at a time, pauses on the event loop
            with waits.slot():
                looks = await _in_thread(lambda: gateway.steps(op, values))
                # a commit in this process during a look or after it ends the pause (headwater.runtime.wakeup)
                seen, looked = TABLE_COMMITS.beats, time.monotonic()
                while not (step := await _in_thread(lambda: _step(looks)))[0]:
                    if await request.is_disconnected():
                        return JSONResponse({"result": None})  # nobody is waiting any more
                    await TABLE_COMMITS.wait_async(step[1], since=seen, not_before=next_look(looked, step[1]))
                    seen, looked = TABLE_COMMITS.beats, time.monotonic()
                result = step[1]
        else:
            result = await _in_thread(call)
        if op.name == "sql":
            directory, schema = result
            return StreamingResponse(_arrow_stream(directory, schema), media_type=ARROW_STREAM)
        if result_type is pa.Table:
            return Response(arrow_bytes(result), media_type=ARROW_STREAM)
        return JSONResponse({"result": to_wire(result, result_type)})

    route.__name__ = op.name
    app.post(f"/v1/{op.name}", name=op.name, summary=op.summary, description=inspect.getdoc(op.function) or "")(route)


class AccessLog:
    """An ASGI layer that logs each request once answered: method, path, status, user (set by the guard), client
    address and seconds, as fields of the line (``--log-format json`` writes them as JSON)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began, status = time.monotonic(), [0]

        async def watched(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            client = scope.get("client") or ("", 0)
            user = scope.get("state", {}).get("user")
            fields = {"method": scope["method"], "path": scope["path"], "status": status[0], "user": user,
                      "client": client[0], "seconds": round(time.monotonic() - began, 4)}
            ACCESS.info("%s %s %s %s %.4fs", fields["method"], fields["path"], fields["status"], user or "-",
                        fields["seconds"], extra=fields)


class HealthReport:
    """The master's health as ``/v1/health`` answers it: its role and lease, the metadata store, every worker.

    Answered from memory on the event loop, so that heartbeats are answered whatever else runs: the metadata
    store is probed (``select 1``) in a thread of its own at most every :attr:`every` seconds, and the answer
    says how old that probe is. ``status`` is ``ok``, or ``degraded`` when the store did not answer, no worker
    does, or the lease is not surely held.
    """

    every = 2.0

    def __init__(self, master: Master, leadership: Any = None) -> None:
        self.master, self.leadership = master, leadership
        self._store: dict[str, Any] = {"ok": None, "latency_ms": None, "error": ""}
        self._checked = -1e9
        self._probing = threading.Lock()

    def _probe(self) -> None:
        try:
            began = time.monotonic()
            self.master.store.ping()
            self._store = {"ok": True, "latency_ms": round((time.monotonic() - began) * 1000, 1), "error": ""}
        except Exception as exc:  # reported, never raised: a health check that fails says why
            self._store = {"ok": False, "latency_ms": None, "error": clip(str(exc), 300)}
        finally:
            self._checked = time.monotonic()
            self._probing.release()

    def now(self) -> dict[str, Any]:
        if time.monotonic() - self._checked > self.every and self._probing.acquire(blocking=False):
            threading.Thread(target=self._probe, name="headwater-health-probe", daemon=True).start()
        heartbeats = getattr(self.master.worker, "heartbeats", None)
        workers = heartbeats() if heartbeats is not None else [
            {"url": self.master.worker.name, "alive": True, "heartbeat_age_s": 0.0}]
        lease = None if self.leadership is None else {"held": self.leadership.holds(), "token": self.leadership.token}
        store = {**self._store, "checked_s_ago": round(time.monotonic() - self._checked, 1)
                 if self._checked > 0 else None}
        healthy = store["ok"] is not False and (not workers or any(w["alive"] for w in workers)) \
            and (lease is None or lease["held"])
        return {"status": "ok" if healthy else "degraded", "role": "active", "lease": lease, "metadata": store,
                "workers": workers}


ACCESS = logging.getLogger("headwater.access")


def _step(looks: Generator[float, None, Any]) -> tuple[bool, Any]:
    """One look of a wait: (False, the pause before the next) or (True, its result)."""
    try:
        return False, next(looks)
    except StopIteration as done:
        return True, done.value


class _Chunks(io.RawIOBase):
    """A write-only file whose bytes are handed out as they are written (nothing accumulates)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


def _arrow_stream(directory: Path, schema: pa.Schema) -> Iterator[bytes]:
    """The result files as one Arrow IPC stream, a batch at a time; the files are deleted afterwards."""
    try:
        chunks = _Chunks()
        with pa.ipc.new_stream(pa.PythonFile(chunks, mode="w"), schema) as writer:
            yield chunks.drain()  # the schema message
            sent = 0
            for file in sorted(directory.glob("part-*.parquet")):
                for batch in pq.ParquetFile(file).iter_batches(batch_size=65_536, use_threads=False):
                    if sent == 1:
                        fault_point("sql.result.after_first_batch")
                    writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
                    yield chunks.drain()
                    sent += 1
        yield chunks.drain()  # the end-of-stream marker
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def _in_thread(fn: Callable[[], Any]) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn)


def create_standby_app(active: Callable[[], str]) -> FastAPI:
    """What a standby master serves until it becomes active: its health, and 503 ``StandbyMaster`` for the rest."""
    app = FastAPI(title="Headwater master (standby)", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/v1/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "role": "standby"}

    @app.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    def refuse(path: str) -> JSONResponse:
        return JSONResponse({"error": STANDBY_ERROR, "message": f"this master is a standby: {active()}"},
                            status_code=503)

    return app


class Switchboard:
    """The ASGI app uvicorn serves: the standby's answers until this master becomes active, then the API."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # neither app needs start-up or shut-down hooks
            return
        await self.inner(scope, receive, send)
