"""The web console's doors, without Spark or a browser: no page or asset without a session, the session cookie's
flags, CSRF on every call that rides on the cookie, the asset allow-list, hostile names in URLs. (The pages
themselves are driven in Chromium by tests/ui/test_console.py.)"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from headwater.runtime.access import AccessControl
from headwater.runtime.embedded import embedded_master
from headwater.service.auth import Authenticator
from headwater.service.doors import SESSION_COOKIE, csrf_of
from headwater.service.server import create_app

PAGES = ["/ui/graphs", "/ui/tables", "/ui/sql", "/ui/workers", "/ui/users", "/ui/graph/demo.stream_graph.g",
         "/ui/graph/demo.stream_graph.g/checkpoints", "/ui/table/demo.stream_table.t", "/ui/static/console.js",
         "/ui/static/console.css", "/ui/static/vendor/dagre.min.js", "/ui/api/graphs",
         "/ui/api/graph/demo.stream_graph.g/live", "/ui"]


@pytest.fixture
def served(tmp_path):
    master = embedded_master(tmp_path, start_spark=False)
    auth = Authenticator(master.store)
    auth.ensure_admin("admin-pw")
    auth.add_user("alice", "alice-pw")
    AccessControl(master.store).grant("admin", "alice", "table_read", "demo")
    client = TestClient(create_app(master, auth), base_url="http://testserver", follow_redirects=False)
    yield master, client
    client.close()
    master.close()


def login(client: TestClient, user: str, password: str) -> str:
    """Log in as the console does; the page's CSRF token."""
    r = client.post("/ui/login", json={"user": user, "password": password})
    assert r.status_code == 200, r.text
    return csrf_of(client.cookies[SESSION_COOKIE])


def test_nothing_but_the_login_page_answers_without_a_session(served):
    _, client = served
    for path in PAGES:
        r = client.get(path)
        assert (r.status_code, r.headers.get("location")) == (303, "/ui/login"), path
        assert r.content == b""
    page = client.get("/ui/login")
    assert page.status_code == 200 and 'id="password"' in page.text
    assert "script-src 'nonce-" in page.headers["content-security-policy"]
    forged = client.cookies.set(SESSION_COOKIE, "forged-token") or client.get("/ui/graphs")
    assert forged.status_code == 303
    assert client.post("/ui/api/sql", json={"query": "select 1"}).status_code == 401


def test_a_login_sets_a_strict_http_only_cookie_and_takes_json_only(served):
    _, client = served
    assert client.post("/ui/login", json={"user": "alice", "password": "wrong"}).status_code == 401
    form = client.post("/ui/login", content="user=alice&password=alice-pw",
                       headers={"content-type": "text/plain"})  # what another site's form could send
    assert form.status_code in (415, 422) and SESSION_COOKIE not in client.cookies
    r = client.post("/ui/login", json={"user": "alice", "password": "alice-pw"})
    cookie = r.headers["set-cookie"]
    assert r.status_code == 200 and "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = client.get("/ui/graphs")
    assert page.status_code == 200
    assert re.search(r'name="csrf" content="([0-9a-f]{64})"', page.text).group(1) == csrf_of(client.cookies[SESSION_COOKIE])
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"


def test_every_call_on_the_cookie_needs_the_csrf_token(served):
    _, client = served
    csrf = login(client, "alice", "alice-pw")
    for headers in ({}, {"x-csrf-token": "0" * 64}, {"x-csrf-token": csrf_of("another-session")}):
        for path, body in (("/v1/graph_meta", {}), ("/ui/api/sql", {"query": "select 1"}), ("/ui/logout", {})):
            r = client.post(path, json=body, headers=headers)
            assert r.status_code == 403 and "CSRF" in r.json()["message"], (path, headers)
    r = client.post("/v1/graph_meta", json={}, headers={"x-csrf-token": csrf})
    assert r.status_code == 200 and r.json() == {"result": []}
    # the cookie's user and privileges: alice may not create a table
    r = client.post("/v1/create_public_table", json={"fqn": "demo.stream_table.t", "schema": [["x", "long"]]},
                    headers={"x-csrf-token": csrf})
    assert r.status_code == 403 and "alice" in r.json()["message"]
    assert client.post("/ui/logout", headers={"x-csrf-token": csrf}).status_code == 200
    client.cookies.clear()
    assert client.get("/ui/graphs").status_code == 303


def test_a_bearer_token_does_not_open_the_console_and_the_logout_revokes_the_session(served):
    _, client = served
    token = client.post("/v1/login", json={"user": "alice", "password": "alice-pw"}).json()["token"]
    assert client.get("/ui/graphs", headers={"Authorization": f"Bearer {token}"}).status_code == 303
    csrf = login(client, "alice", "alice-pw")
    session = client.cookies[SESSION_COOKIE]
    client.post("/ui/logout", headers={"x-csrf-token": csrf})
    client.cookies.set(SESSION_COOKIE, session)  # kept by an attacker: revoked
    assert client.get("/ui/graphs").status_code == 303


def test_assets_are_an_allow_list_and_hostile_names_are_refused_not_cleaned(served):
    _, client = served
    login(client, "admin", "admin-pw")
    assert client.get("/ui/static/console.js").status_code == 200
    for name in ("../app.py", "..%2Fapp.py", "vendor/../../app.py", "console.js%00.css", "templates/base.html", "x"):
        r = client.get(f"/ui/static/{name}")
        assert r.status_code == 404 and b"mount_console" not in r.content, name
    for name in ('demo.stream_graph.x"><img src=x onerror=alert(1)>', "a.b", "demo.stream_graph." + "x" * 300,
                 "demo.stream_table.t", "demo.stream_graph.%3Cscript%3Ealert(1)"):
        r = client.get(f"/ui/graph/{name}")
        assert r.status_code in (404, 422), name
        assert "<img" not in r.text and "<script>alert" not in r.text and 'id="message"' in r.text, name


def test_a_tables_page_shows_what_the_api_says(served):
    master, client = served
    login(client, "admin", "admin-pw")
    csrf = csrf_of(client.cookies[SESSION_COOKIE])
    create = client.post("/v1/create_public_table", headers={"x-csrf-token": csrf},
                         json={"fqn": "demo.stream_table.t", "schema": [["k", "string"], ["x", "long"]]})
    assert create.status_code == 200, create.text
    from headwater.runtime.gateway import Gateway

    admin = Gateway(master, AccessControl(master.store), "admin")
    admin.append(admin_fqn := _table("demo.stream_table.t"), _rows(["a", "b"], [1, 2]))
    admin.append(admin_fqn, _rows(["c"], [3]))
    page = client.get("/ui/table/demo.stream_table.t")
    data = json.loads(re.search(r'<script type="application/json" id="data">(.*?)</script>', page.text, re.S).group(1))
    assert data["meta"]["version"] == 2 and data["meta"]["rows"] == 3
    assert [(r["k"], r["x"], r["_version"]) for r in data["sample"]] == [("c", 3, 2)]  # the newest version's rows
    assert data["info"]["schema"] == [["k", "string"], ["x", "long"]]
    listing = client.get("/ui/tables")
    assert "demo.stream_table.t" in listing.text


def _table(name: str):
    from headwater.catalog import resolve

    return resolve(name, "stream_table", current_catalog=None)


def _rows(keys: list[str], xs: list[int]):
    import pyarrow as pa

    return pa.Table.from_pandas(pd.DataFrame({"k": keys, "x": xs}), preserve_index=False)
