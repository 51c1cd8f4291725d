"""The console's routes on the master's FastAPI app (see :mod:`headwater.service.console`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic import BaseModel

from headwater.errors import HeadwaterError, RequestError, clip, http_status
from headwater.runtime.access import AccessControl
from headwater.runtime.gateway import Gateway
from headwater.runtime.master import Master
from headwater.service.auth import TOKEN_SECONDS, Authenticator, AuthError
from headwater.service.console import views
from headwater.service.console.results import ResultPages
from headwater.service.doors import CONSOLE, SESSION_COOKIE, WaitSlots, csrf_of, session_token

STATIC = Path(__file__).parent / "static"
# the only files served under /ui/static: a name not in this list is not looked for on disk
ASSETS = {"console.css": "text/css", "console.js": "text/javascript", "vendor/dagre.min.js": "text/javascript"}
LIVE_EVERY_S = 2.0  # how often a graph page's numbers are sent
LIVE_FOR_S = 600.0  # a live stream ends after this; the browser reconnects (EventSource does by itself)
LIVE_STREAMS = 64  # live streams at one time: more are refused (429)
PAGES = ("graphs", "tables", "sql", "workers", "users")


class ConsoleLogin(BaseModel):
    user: str
    password: str


def mount_console(app: FastAPI, master: Master, auth: Authenticator, access: AccessControl, *,
                  title: str = "Headwater") -> None:
    """Add the console's routes (``/ui/...``) to ``app``, the master's API (:func:`~headwater.service.server.
    create_app`), whose guard checks the session cookie and CSRF token before any of them runs."""
    templates = Environment(loader=PackageLoader("headwater.service.console", "templates"), autoescape=select_autoescape(["html"]))
    templates.policies["json.dumps_kwargs"] = {"default": str}  # times and the like as text in a page's data
    streams = WaitSlots(LIVE_STREAMS, what="a live graph page", setting="the console's limit of live pages")
    results = ResultPages()

    def gateway(request: Request) -> Gateway:
        return Gateway(master, access, str(request.scope["state"]["user"]))

    def page(request: Request, name: str, data: Any = None, status: int = 200, **extra: Any) -> HTMLResponse:
        gw = gateway(request)
        token = session_token(request.scope) or ""
        html = templates.get_template(f"{name}.html").render(
            title=title, page=name, user=gw.user, is_admin=gw.is_admin, csrf=csrf_of(token), data=data,
            pages=PAGES, **extra)
        return HTMLResponse(html, status_code=status, headers={**_NO_STORE, "content-security-policy": _POLICY})

    async def shown(request: Request, name: str, compose: Callable[[Gateway], Any], **extra: Any) -> HTMLResponse:
        """A page whose data ``compose`` makes in a thread; a refusal is shown as a page with its status."""
        gw = gateway(request)
        try:
            data = await _in_thread(lambda: compose(gw))
        except HeadwaterError as exc:
            return page(request, "error", status=http_status(exc), error=type(exc).__name__, message=str(exc))
        return page(request, name, data, **extra)

    @app.get(CONSOLE, include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse(f"{CONSOLE}/graphs", status_code=303)

    @app.get(f"{CONSOLE}/login", include_in_schema=False)
    def login_page() -> HTMLResponse:
        nonce = secrets.token_urlsafe(16)  # the login page's own script and style, and nothing else inline
        html = templates.get_template("login.html").render(title=title, nonce=nonce)
        policy = _POLICY.replace("script-src 'self'", f"script-src 'nonce-{nonce}'").replace(
            "style-src 'self'", f"style-src 'nonce-{nonce}'")
        return HTMLResponse(html, headers={**_NO_STORE, "content-security-policy": policy})

    @app.post(f"{CONSOLE}/login", include_in_schema=False)
    def login(body: ConsoleLogin, request: Request) -> Response:
        # JSON only: a form another site posts cannot send it without the browser asking this server first (CORS)
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise RequestError("the console's login takes JSON")
        token = auth.login(body.user, body.password, address=request.client.host if request.client else "")
        answer = JSONResponse({"user": body.user}, headers=_NO_STORE)
        answer.set_cookie(SESSION_COOKIE, token, max_age=int(TOKEN_SECONDS), path="/", httponly=True,
                          samesite="strict", secure=request.url.scheme == "https")
        return answer

    @app.post(f"{CONSOLE}/logout", include_in_schema=False)
    def logout(request: Request) -> Response:
        token = session_token(request.scope)
        if token is not None:
            with contextlib.suppress(AuthError):  # expired or revoked already
                auth.logout(token)
        answer = JSONResponse({"logged_out": True}, headers=_NO_STORE)
        answer.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return answer

    @app.get(f"{CONSOLE}/static/{{name:path}}", include_in_schema=False)
    def asset(name: str) -> Response:
        if name not in ASSETS:
            return JSONResponse({"error": "NotFound", "message": "no such asset"}, status_code=404)
        return FileResponse(STATIC / name, media_type=ASSETS[name], headers={"cache-control": "private, max-age=300"})

    # -- pages -----------------------------------------------------------------------------------------------
    @app.get(f"{CONSOLE}/graphs", include_in_schema=False)
    async def graphs_page(request: Request) -> HTMLResponse:
        return await shown(request, "graphs", views.graphs)

    @app.get(f"{CONSOLE}/graph/{{fqn}}", include_in_schema=False)
    async def graph_page(request: Request, fqn: str) -> HTMLResponse:
        return await shown(request, "graph", lambda gw: views.graph_picture(gw, views.graph_name(fqn)))

    @app.get(f"{CONSOLE}/graph/{{fqn}}/checkpoints", include_in_schema=False)
    async def checkpoints_page(request: Request, fqn: str) -> HTMLResponse:
        return await shown(request, "checkpoints", lambda gw: views.checkpoints(gw, views.graph_name(fqn)))

    @app.get(f"{CONSOLE}/tables", include_in_schema=False)
    async def tables_page(request: Request) -> HTMLResponse:
        return await shown(request, "tables", lambda gw: gw.table_meta(None))

    @app.get(f"{CONSOLE}/table/{{fqn}}", include_in_schema=False)
    async def table_page(request: Request, fqn: str) -> HTMLResponse:
        return await shown(request, "table", lambda gw: views.table_page(gw, views.table_name(fqn)))

    @app.get(f"{CONSOLE}/sql", include_in_schema=False)
    async def sql_page(request: Request) -> HTMLResponse:
        return page(request, "sql")

    @app.get(f"{CONSOLE}/workers", include_in_schema=False)
    async def workers_page(request: Request) -> HTMLResponse:
        return await shown(request, "workers", lambda gw: gw.workers())

    @app.get(f"{CONSOLE}/users", include_in_schema=False)
    async def users_page(request: Request) -> HTMLResponse:
        def compose(gw: Gateway) -> Any:
            return {"users": [{**u, "privileges": gw.user_privileges(u["name"])} for u in gw.users()],
                    "audit": gw.audit_log(100)}

        return await shown(request, "users", compose)

    # -- what the pages fetch --------------------------------------------------------------------------------
    @app.get(f"{CONSOLE}/api/graphs", include_in_schema=False)
    async def graphs_now(request: Request) -> JSONResponse:
        gw = gateway(request)
        return JSONResponse(await _in_thread(lambda: views.graphs(gw)), headers=_NO_STORE)

    @app.get(f"{CONSOLE}/api/graph/{{fqn}}/live", include_in_schema=False)
    async def graph_live(request: Request, fqn: str) -> StreamingResponse:
        gw, name = gateway(request), views.graph_name(fqn)
        token = session_token(request.scope) or ""
        picture = await _in_thread(lambda: views.graph_picture(gw, name))  # unknown or hidden: refused here
        if streams.full:
            streams.refuse()  # 429 as the answer, rather than a stream that breaks at once

        def look() -> dict[str, Any]:
            auth.user_of(token)  # a session logged out meanwhile ends its streams too
            return views.graph_live(gw, name, picture)

        async def events() -> AsyncIterator[str]:
            with streams.slot():  # taken once the stream runs, so a stream that never starts holds none
                began = time.monotonic()
                while time.monotonic() - began < LIVE_FOR_S and not await request.is_disconnected():
                    try:
                        yield f"data: {json.dumps(await _in_thread(look), default=str)}\n\n"
                    except (HeadwaterError, AuthError) as exc:  # dropped, privileges revoked, logged out: said
                        yield f"event: failure\ndata: {json.dumps({'message': clip(str(exc), 500)})}\n\n"
                        return
                    await asyncio.sleep(LIVE_EVERY_S)

        return StreamingResponse(events(), media_type="text/event-stream", headers=_NO_STORE)

    @app.post(f"{CONSOLE}/api/sql", include_in_schema=False)
    async def sql(request: Request) -> JSONResponse:
        gw = gateway(request)
        try:
            doc = json.loads(await request.body() or b"{}")
        except ValueError:
            raise RequestError("the console's SQL call takes JSON") from None
        if not isinstance(doc, dict):
            raise RequestError("the console's SQL call takes a JSON object")
        return JSONResponse(await _in_thread(lambda: results.answer(gw, doc)), headers=_NO_STORE)


_NO_STORE = {"cache-control": "no-store"}
# pages run only the console's own scripts: an injected <script> or inline handler would not run
_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
           "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")


async def _in_thread(fn: Callable[[], Any]) -> Any:
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn)
