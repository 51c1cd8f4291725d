"""The worker behind HTTP, and the master's port to it: the Master ↔ Worker protocol over the network.

``headwater worker`` serves a :class:`~headwater.runtime.worker.Worker` (its own SparkSession and queries) with
:func:`create_worker_app`; ``headwater master --worker URL`` reaches it through :class:`HttpWorkerPort`, so the
master process runs no Spark at all. Each request is one message of :mod:`headwater.runtime.protocol` in its
JSON form (:func:`~headwater.runtime.protocol.encode`); replies are plain values with bytes as base64. Both sides
share a secret (``HEADWATER_WORKER_SECRET``) that signs each request (:mod:`headwater.service.signing`: a MAC
over the request with a timestamp and a nonce; the secret itself never travels). The worker and the master see
the same data directory (one machine, or storage every machine mounts at the same path).

>>> decode_reply(encode_reply({"path": "/x", "schema": b"\\x00\\x01"}))
{'path': '/x', 'schema': b'\\x00\\x01'}
"""

from __future__ import annotations

import base64
import json
import ssl
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from headwater.errors import (
    ConfigurationError,
    ExecutionError,
    HeadwaterError,
    WorkerUnavailableError,
    clip,
    error_class,
    http_status,
)
from headwater.runtime.protocol import (
    Health,
    IsRunning,
    Message,
    Progress,
    TaskStatus,
    decode,
    encode,
)
from headwater.runtime.worker import Worker
from headwater.service.doors import WORKER_LIMITS, HttpLimits, guard_worker
from headwater.service.placement import DEFAULT_GROUP
from headwater.service.signing import SignatureError, Signer, Verifier, target_of

QUICK_SECONDS = 10.0


def encode_reply(value: Any) -> Any:
    """A worker's reply in JSON form: bytes become ``{"$bytes": base64}``."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {str(k): encode_reply(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode_reply(v) for v in value]
    return value


def decode_reply(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        return {k: decode_reply(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_reply(v) for v in value]
    return value


def check_secret(secret: str | None) -> str:
    if not secret or len(secret) < 16:
        raise ConfigurationError("set HEADWATER_WORKER_SECRET (at least 16 characters) for both the master and "
                                 "its workers: it authenticates the master's requests")
    return secret


def create_worker_app(worker: Worker, secret: str, *, group: str = DEFAULT_GROUP,
                      limits: HttpLimits = WORKER_LIMITS) -> FastAPI:
    """The HTTP face of ``worker``: ``POST /v1/worker/request`` carries one protocol message; ``/v1/health``
    answers heartbeats with the worker's compute group, load, and whether its Spark driver is ready."""
    import psutil

    app = FastAPI(title="Headwater worker", version="1")
    guard_worker(app, limits=limits)  # unsigned requests are refused there, before the body is read
    verifier = Verifier(check_secret(secret))
    psutil.cpu_percent()  # the first reading is meaningless; later ones cover the time since the previous

    @app.get("/metrics")
    def metrics() -> Response:  # the guard checked the metrics token
        from headwater.runtime.metrics import CONTENT_TYPE, worker_metrics

        return Response(worker_metrics(), media_type=CONTENT_TYPE)

    @app.get("/v1/health")
    async def health() -> dict[str, Any]:  # on the event loop, whatever the threads do (psutil only reads /proc)
        return {"status": "ok", "name": worker.name, "group": group, "spark": worker.spark_state,
                "spark_ui": getattr(worker, "spark_ui", None),
                "cpu": psutil.cpu_percent() / 100.0, "memory": psutil.virtual_memory().percent / 100.0}

    @app.post("/v1/worker/request")
    async def request(http: Request) -> JSONResponse:
        raw = await http.body()  # the signature covers the bytes as sent: checked before they are parsed
        try:
            verifier.verify(http.method, target_of(http.scope), raw, http.headers)
        except SignatureError as exc:
            return JSONResponse({"error": "AuthError", "message": str(exc)}, status_code=401)
        try:
            message = decode(await run_in_threadpool(json.loads, raw))  # parsed off the event loop
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return JSONResponse({"error": "RequestError", "message": clip(str(exc), 500)}, status_code=422)
        try:
            reply = await run_in_threadpool(worker.handle, message)
            return JSONResponse({"reply": encode_reply(reply)})
        except HeadwaterError as exc:
            return JSONResponse({"error": type(exc).__name__, "message": str(exc)}, status_code=http_status(exc))
        except Exception as exc:  # a Spark or Python failure inside the worker: reported, the worker keeps serving
            return JSONResponse({"error": "ExecutionError", "message": f"{type(exc).__name__}: {clip(str(exc), 1500)}"},
                                status_code=500)

    return app


def serve(worker: Worker, app: FastAPI, **options: Any) -> None:
    """Serve ``app`` (``worker``'s, :func:`create_worker_app`) with uvicorn until SIGTERM or SIGINT.

    A stopping uvicorn waits for every request to end, and a master keeps one ``AwaitCommit`` open here: the signal
    therefore tells ``worker`` it is stopping, which ends those at once (27 s of each stop otherwise)."""
    import threading

    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            # not in the signal handler itself: the pulse takes a lock its waiters hold
            threading.Thread(target=worker.stopping, name="headwater-worker-stopping", daemon=True).start()

    server = Server(uvicorn.Config(app, **options))
    server.run()
    if not server.started:
        raise SystemExit(3)  # as uvicorn.run exits when the server could not start (its port taken, ...)


class HttpWorkerPort:
    """The master's port to a worker process at ``url``; its requests are signed with ``secret``; an ``https://``
    worker's certificate is checked against ``verify`` (:func:`headwater.service.tls.client_context`)."""

    stops_with_master = False  # the worker and its queries outlive a master restart

    def __init__(self, url: str, secret: str, *, timeout: float = 900.0, verify: ssl.SSLContext | None = None) -> None:
        from headwater.service.tls import client_context, client_transport

        if not url.startswith(("http://", "https://")):
            raise ConfigurationError(f"worker URL {clip(url)} must start with http:// or https://")
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout, auth=Signer(check_secret(secret)),
                                  transport=client_transport(verify if verify is not None else client_context()))
        self.name = self.url

    def request(self, message: Message) -> Any:
        timeout: Any = httpx.USE_CLIENT_DEFAULT
        if isinstance(message, IsRunning | TaskStatus | Progress | Health):
            timeout = QUICK_SECONDS  # status questions: a frozen worker must not hang the master's answers
        elif getattr(message, "timeout", None) is not None:
            timeout = float(message.timeout) + 60.0  # type: ignore[union-attr]
        try:
            response = self._http.post("/v1/worker/request", json=encode(message), timeout=timeout)
        except httpx.TransportError as exc:
            raise WorkerUnavailableError(f"worker {self.url} cannot be reached: {exc}") from None
        doc = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        if response.is_success:
            return decode_reply(doc.get("reply"))
        kind = error_class(doc.get("error")) or ExecutionError
        raise kind(doc.get("message") or f"worker {self.url} answered {response.status_code}")

    def close(self) -> None:
        self._http.close()
