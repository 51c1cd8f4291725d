"""The master's HTTP API (FastAPI): what a remote :class:`~headwater.api.session.Session` calls.

Every route but ``/v1/health`` and ``/v1/login`` needs ``Authorization: Bearer <token>``. Bodies are JSON,
rows travel as Arrow IPC streams (``application/vnd.apache.arrow.stream``): appends and warm-up data in the
request body, ``/v1/sql`` results streamed back batch by batch. Names arrive as text and are parsed by
the catalog's own rules (:func:`headwater.catalog.resolve`) before anything reaches the master; a graph
arrives as its JSON document and is rebuilt by :func:`headwater.plan.document.from_json`, which refuses
anything it could not have written. Errors come back as ``{"error": <Headwater error class>, "message"}``.

OpenAPI documentation is served at ``/docs``.
"""

from __future__ import annotations

import io
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from headwater.catalog import FQN, check_identifier, resolve
from headwater.errors import (
    ConfigurationError,
    GraphDefinitionError,
    HeadwaterError,
    RequestError,
    SchemaError,
    clip,
)
from headwater.plan.document import from_json
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.runtime.master import Master
from headwater.runtime.protocol import arrow_table
from headwater.service.auth import Authenticator, AuthError
from headwater.service.client import STANDBY_ERROR
from headwater.service.signing import HEADER_SIGNATURE, SignatureError, Verifier, target_of
from headwater.storage.retention import Retention
from headwater.types import Schema

ARROW_STREAM = "application/vnd.apache.arrow.stream"
MAX_WAIT_SECONDS = 3600.0


def fqn(name: object, schema: str) -> FQN:
    """A full name sent by a client, checked by the catalog's rules (a bare name has no catalog here)."""
    return resolve(name, schema, current_catalog=None)  # type: ignore[arg-type]


class BodyTooLarge(Exception):
    """A request body over the master's limit (HTTP 413)."""


async def read_arrow(request: Request, where: str, limit: int) -> pa.Table:
    """The request's Arrow IPC body as a table, read up to ``limit`` bytes (a longer body is refused unread)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"{where}: the body has {int(declared)} bytes; the limit is {limit} (--max-body-mb)")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise BodyTooLarge(f"{where}: the body is over the limit of {limit} bytes (--max-body-mb)")
    try:
        return arrow_table(bytes(body))
    except (pa.ArrowInvalid, OSError) as exc:
        raise SchemaError(f"{where}: the body is not an Arrow IPC stream ({clip(str(exc))})") from None


class Login(BaseModel):
    user: str
    password: str


class Name(BaseModel):
    fqn: str


class JoinWorker(BaseModel):
    url: str
    group: str = "default"


# what a joining worker may give as its address: http(s)://host:port, nothing else reaches the pool
WORKER_URL = re.compile(r"https?://[A-Za-z0-9.-]{1,253}:[0-9]{1,5}")


class CreateTable(BaseModel):
    fqn: str
    schema_: list[list[str]]
    kind: str = "plain"
    key_columns: list[str] = []
    time_column: str | None = None
    retention: dict[str, Any] | None = None

    model_config = {"populate_by_name": True, "alias_generator": lambda f: "schema" if f == "schema_" else f}


class SetRetention(BaseModel):
    fqn: str
    retention: dict[str, Any] | None = None


class Submit(BaseModel):
    document: str
    compute_group: str | None = None
    checkpoint_config: dict[str, Any] | None = None


class SetCheckpointConfig(BaseModel):
    fqn: str
    config: dict[str, Any]


class EngineChange(BaseModel):
    engine: str
    op: dict[str, Any]


class DropGraph(BaseModel):
    fqn: str
    include_tables: bool = False


class Wait(BaseModel):
    fqn: str
    timeout: float = 120.0


class CommittedSequence(BaseModel):
    fqn: str
    client_id: str


class Sql(BaseModel):
    query: Any = None  # checked by the SQL policy, which names what is wrong
    current_catalog: str | None = None


class Limit(BaseModel):
    limit: int = 1000


class Meta(BaseModel):
    fqn: str | None = None


def _retention(doc: dict[str, Any] | None) -> Retention | None:
    return None if doc is None else Retention(minutes=doc.get("minutes"), rows=doc.get("rows"))


def create_app(master: Master, auth: Authenticator, *, max_body_bytes: int = 512 * 2**20,
               worker_secret: str | None = None) -> FastAPI:
    """The HTTP API over ``master``; logins checked by ``auth``; Arrow bodies up to ``max_body_bytes``.
    ``worker_secret``: workers that present it may join (``headwater worker --master``)."""
    app = FastAPI(title="Headwater master", version="1")
    bearer = HTTPBearer(auto_error=False)
    # Graph and table lifecycle calls change the catalog and start or stop queries: one at a time. Appends,
    # reads, SQL and waits run concurrently.
    lifecycle = threading.Lock()

    def user(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> str:
        if credentials is None:
            raise AuthError("this call needs a bearer token: POST /v1/login first")
        return auth.user_of(credentials.credentials)

    @app.exception_handler(HeadwaterError)
    def headwater_error(_: Request, exc: HeadwaterError) -> JSONResponse:
        return JSONResponse({"error": type(exc).__name__, "message": str(exc)}, status_code=400)

    @app.exception_handler(RequestValidationError)
    def malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return JSONResponse({"error": "RequestError", "message": clip(f"{where}: {first.get('msg', 'malformed request')}", 500)},
                            status_code=400)

    @app.exception_handler(BodyTooLarge)
    def too_large(_: Request, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse({"error": "RequestError", "message": str(exc)}, status_code=413)

    @app.exception_handler(AuthError)
    def auth_error(_: Request, exc: AuthError) -> JSONResponse:
        return JSONResponse({"error": "AuthError", "message": str(exc)}, status_code=401)

    def locked(fn: Callable[[], Any]) -> Any:
        with lifecycle:
            return fn()

    @app.get("/v1/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "role": "active"}

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
    def login(body: Login) -> dict[str, str]:
        return {"token": auth.login(body.user, body.password)}

    # -- tables ---------------------------------------------------------------------------------------
    @app.post("/v1/tables/info")
    def table_info(body: Name, _: str = Depends(user)) -> dict[str, Any]:
        rec = master.table_info(fqn(body.fqn, "stream_table"))
        return {"fqn": rec.fqn, "kind": rec.kind, "schema": [list(c) for c in rec.schema.columns],
                "key_columns": list(rec.key_columns), "time_column": rec.time_column}

    @app.post("/v1/tables/create")
    def create_table(body: CreateTable, _: str = Depends(user)) -> dict[str, str]:
        name = fqn(body.fqn, "stream_table")
        if any(len(column) != 2 for column in body.schema_):
            raise RequestError(f"create {name}: schema is a list of [name, type] pairs")
        schema = Schema.parse(dict(body.schema_), where=f"stream table {name}")
        locked(lambda: master.create_public_table(name, schema, body.kind, tuple(body.key_columns), body.time_column,
                                                  _retention(body.retention)))
        return {"fqn": str(name)}

    @app.post("/v1/tables/drop")
    def drop_table(body: Name, _: str = Depends(user)) -> dict[str, str]:
        locked(lambda: master.drop_public_table(fqn(body.fqn, "stream_table")))
        return {"fqn": body.fqn}

    @app.post("/v1/tables/retention")
    def set_retention(body: SetRetention, _: str = Depends(user)) -> dict[str, str]:
        locked(lambda: master.set_retention(fqn(body.fqn, "stream_table"), _retention(body.retention)))
        return {"fqn": body.fqn}

    @app.post("/v1/tables/meta")
    def table_meta(body: Meta, _: str = Depends(user)) -> list[dict[str, Any]]:
        return master.table_meta(None if body.fqn is None else fqn(body.fqn, "stream_table"))

    @app.post("/v1/tables/append")
    async def append(request: Request, table: str, client_id: str | None = None, sequence: int | None = None,
                     _: str = Depends(user)) -> dict[str, int]:
        name = fqn(table, "stream_table")
        data = await read_arrow(request, f"append to {name}", max_body_bytes)
        if sequence is None:
            return {"version": await _in_thread(lambda: master.append(name, data))}
        if client_id is None:
            raise GraphDefinitionError(f"append to {name}: a sequence needs the client_id it belongs to")
        return {"version": await _in_thread(
            lambda: master.append_once(name, data, client_id=client_id, sequence=sequence))}

    @app.post("/v1/tables/committed_sequence")
    def committed_sequence(body: CommittedSequence, _: str = Depends(user)) -> dict[str, int | None]:
        return {"sequence": master.committed_sequence(fqn(body.fqn, "stream_table"), body.client_id)}

    # -- graphs ---------------------------------------------------------------------------------------
    @app.post("/v1/graphs/submit")
    def submit(body: Submit, _: str = Depends(user)) -> dict[str, str]:
        logical, physical = from_json(body.document)
        if physical is None:
            raise GraphDefinitionError("submit: the graph document has no physical plan")
        group = None if body.compute_group is None else check_identifier(body.compute_group, what="compute group")
        config = None if body.checkpoint_config is None else CheckpointConfig.parse(body.checkpoint_config)
        locked(lambda: master.submit(logical, physical, compute_group=group, checkpoint_config=config))
        return {"fqn": logical.fqn}

    def graph_action(path: str, action: Callable[[Master, FQN], Any]) -> None:
        def route(body: Name, _: str = Depends(user)) -> dict[str, Any]:
            return {"result": locked(lambda: action(master, fqn(body.fqn, "stream_graph")))}

        app.post(path, name=path.rsplit("/", 1)[-1])(route)

    graph_action("/v1/graphs/stop", Master.stop_graph)
    graph_action("/v1/graphs/start", Master.start_graph)
    graph_action("/v1/graphs/resubmit", Master.resubmit_graph)
    graph_action("/v1/graphs/purge", Master.purge_records)

    @app.post("/v1/graphs/drop")
    def drop_graph(body: DropGraph, _: str = Depends(user)) -> dict[str, str]:
        locked(lambda: master.drop_graph(fqn(body.fqn, "stream_graph"), body.include_tables))
        return {"fqn": body.fqn}

    @app.post("/v1/graphs/wait")
    def wait(body: Wait, _: str = Depends(user)) -> dict[str, str]:
        master.wait_until_caught_up(fqn(body.fqn, "stream_graph"), min(max(body.timeout, 0.0), MAX_WAIT_SECONDS))
        return {"fqn": body.fqn}

    @app.post("/v1/graphs/meta")
    def graph_meta(body: Meta, _: str = Depends(user)) -> list[dict[str, Any]]:
        rows = master.graph_meta(None if body.fqn is None else fqn(body.fqn, "stream_graph"))
        return [{**r, "create_time": r["create_time"].isoformat()} for r in rows]

    @app.post("/v1/graphs/info")
    def graph_info(body: Name, _: str = Depends(user)) -> dict[str, Any]:
        return master.graph_info(fqn(body.fqn, "stream_graph"))

    @app.post("/v1/graphs/engines")
    def engine_meta(body: Name, _: str = Depends(user)) -> list[dict[str, Any]]:
        return master.engine_meta(fqn(body.fqn, "stream_graph"))

    @app.post("/v1/events")
    def events(body: Limit, _: str = Depends(user)) -> list[dict[str, Any]]:
        return master.state_machine_events(max(1, min(body.limit, 100_000)))

    @app.post("/v1/graphs/checkpoint_config")
    def checkpoint_config(body: Name, _: str = Depends(user)) -> dict[str, Any]:
        return master.checkpoint_config(fqn(body.fqn, "stream_graph"))

    @app.post("/v1/graphs/set_checkpoint_config")
    def set_checkpoint_config(body: SetCheckpointConfig, _: str = Depends(user)) -> dict[str, str]:
        config = CheckpointConfig.parse(body.config)
        locked(lambda: master.set_checkpoint_config(fqn(body.fqn, "stream_graph"), config))
        return {"fqn": body.fqn}

    @app.post("/v1/checkpoints/jobs")
    def checkpoint_jobs(body: Meta, _: str = Depends(user)) -> list[dict[str, Any]]:
        return master.checkpoint_jobs(None if body.fqn is None else fqn(body.fqn, "stream_graph"))

    @app.post("/v1/checkpoints/subjobs")
    def checkpoint_subjobs(body: Meta, _: str = Depends(user)) -> list[dict[str, Any]]:
        return master.checkpoint_subjobs(None if body.fqn is None else fqn(body.fqn, "stream_graph"))

    @app.post("/v1/graphs/progress")
    def progress(body: Name, _: str = Depends(user)) -> dict[str, Any]:
        return master.progress(fqn(body.fqn, "stream_graph"))

    @app.post("/v1/engines/warmup")
    async def warmup(request: Request, engine: str, _: str = Depends(user)) -> dict[str, int]:
        name = fqn(engine, "stream_engine")
        data = await read_arrow(request, f"warm-up of {name}", max_body_bytes)
        return {"rows": await _in_thread(lambda: locked(lambda: master.warmup(name, data)))}

    @app.post("/v1/engines/control")
    def control_engine(body: EngineChange, _: str = Depends(user)) -> dict[str, int]:
        name = fqn(body.engine, "stream_engine")
        return {"tasks": locked(lambda: master.control_engine(name, body.op))}

    # -- SQL ------------------------------------------------------------------------------------------
    @app.post("/v1/sql")
    def sql(body: Sql, _: str = Depends(user)) -> StreamingResponse:
        directory, schema = master.sql(body.query, current_catalog=body.current_catalog)
        return StreamingResponse(_arrow_stream(directory, schema), media_type=ARROW_STREAM)

    return app


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
            for file in sorted(directory.glob("part-*.parquet")):
                for batch in pq.ParquetFile(file).iter_batches(batch_size=65_536, use_threads=False):
                    writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=schema))
                    yield chunks.drain()
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
