"""Logins and tokens over the master's HTTP API (no Spark): revocation, throttling, equal work for unknown users,
admin rotation, and another user's objects refused (each failed on the code before access control)."""

from __future__ import annotations

import hashlib

import pandas as pd
import pytest
from fastapi.testclient import TestClient

import headwater as hw
from headwater.api.session import Session
from headwater.runtime import access as access_module
from headwater.runtime.embedded import embedded_master
from headwater.service.auth import Authenticator, LoginLimits
from headwater.service.client import AuthenticationError, RemoteMaster
from headwater.service.server import create_app


@pytest.fixture
def served(tmp_path):
    master = embedded_master(tmp_path, start_spark=False)
    auth = Authenticator(master.store, LoginLimits(attempts=3, window=3600.0))
    auth.ensure_admin("admin-pw")
    auth.add_user("alice", "alice-pw")
    auth.add_user("bob", "bob-pw")
    client = TestClient(create_app(master, auth), base_url="http://testserver")
    yield master, auth, client
    client.close()
    master.close()


def session(client, user: str, password: str) -> Session:
    s = Session(RemoteMaster("http://testserver", user=user, password=password, http=client))
    s.use_catalog("demo")
    return s


def token(client, user: str, password: str) -> str:
    r = client.post("/v1/login", json={"user": user, "password": password})
    assert r.status_code == 200, r.text
    return r.json()["token"]


def meta(client, tok: str) -> int:
    return client.post("/v1/table_meta", json={}, headers={"Authorization": f"Bearer {tok}"}).status_code


def test_logout_revokes_the_token(served):
    _, _, client = served
    tok = token(client, "alice", "alice-pw")
    assert meta(client, tok) == 200
    assert client.post("/v1/logout", headers={"Authorization": f"Bearer {tok}"}).json() == {"revoked": True}
    assert meta(client, tok) == 401
    s = session(client, "alice", "alice-pw")
    s._master.logout()  # type: ignore[attr-defined]
    with pytest.raises(AuthenticationError, match="revoked"):
        s.stream_table_meta()


def test_a_password_change_or_a_dropped_user_revokes_its_tokens(served):
    _, _, client = served
    old, other = token(client, "alice", "alice-pw"), token(client, "bob", "bob-pw")
    alice = session(client, "alice", "alice-pw")
    alice.set_password("alice", "alice-new")  # type: ignore[attr-defined]
    assert meta(client, old) == 401 and meta(client, other) == 200
    assert client.post("/v1/login", json={"user": "alice", "password": "alice-pw"}).status_code == 401
    admin = session(client, "admin", "admin-pw")
    admin.drop_user("bob")  # type: ignore[attr-defined]
    assert meta(client, other) == 401
    assert client.post("/v1/login", json={"user": "bob", "password": "bob-pw"}).status_code == 401


def test_a_login_flood_is_throttled_per_user_and_per_address(served):
    _, _, client = served
    for _ in range(3):
        assert client.post("/v1/login", json={"user": "alice", "password": "guess"}).status_code == 401
    r = client.post("/v1/login", json={"user": "alice", "password": "alice-pw"})  # right, but throttled now
    assert r.status_code == 401 and "too many failed logins" in r.json()["message"]
    # the address is throttled too: the same client cannot move on to guess another user's password
    r = client.post("/v1/login", json={"user": "bob", "password": "bob-pw"})
    assert r.status_code == 401 and "too many failed logins" in r.json()["message"]


def test_unknown_and_known_users_cost_the_same_password_work(served, monkeypatch):
    _, auth, _ = served
    calls = []
    real = hashlib.scrypt

    def counting(*args, **kwargs):
        calls.append(kwargs.get("n"))
        return real(*args, **kwargs)

    monkeypatch.setattr(access_module.hashlib, "scrypt", counting)
    fresh = Authenticator(auth.store, LoginLimits(attempts=100, window=1.0))
    for user in ("alice", "nobody", "x" * 500):
        calls.clear()
        with pytest.raises(Exception, match="wrong user or password"):
            fresh.login(user, "wrong")
        assert calls == [2**14], (user, calls)  # one scrypt at full cost each: unknown users are not faster


def test_the_admin_password_rotates_at_a_start_that_asks_for_it(served):
    _master, auth, client = served
    tok = token(client, "admin", "admin-pw")
    auth.ensure_admin("rotated")  # a plain restart keeps the stored password
    assert meta(client, tok) == 200
    auth.ensure_admin("rotated", rotate=True)
    assert meta(client, tok) == 401
    token(client, "admin", "rotated")


def test_another_user_cannot_drop_or_write_someone_else_s_table(served):
    master, _, client = served
    admin = session(client, "admin", "admin-pw")
    admin.create_stream_table("t", {"x": "long"})
    admin.append("t", pd.DataFrame({"x": [1, 2]}))
    bob = session(client, "bob", "bob-pw")
    with pytest.raises(hw.PermissionDenied, match="lacks table_drop"):
        bob.drop_stream_table("t")
    with pytest.raises(hw.PermissionDenied, match="lacks table_write"):
        bob.append("t", pd.DataFrame({"x": [3]}))
    with pytest.raises(hw.PermissionDenied, match="lacks table_read"):
        bob.sql("select * from t")
    assert bob.stream_table_meta().empty  # he cannot even see it
    assert master.store.get_table("demo.stream_table.t") is not None
    assert admin.stream_table_meta("t").iloc[0]["rows"] == 2
    denied = admin.audit_log()  # type: ignore[attr-defined]
    assert list(denied["action"]) == ["drop_public_table", "append", "sql"]
    assert set(denied["user_name"]) == {"bob"} and set(denied["outcome"]) == {"denied"}
    admin.grant("bob", "table_read", "demo.stream_table.t")  # type: ignore[attr-defined]
    assert list(bob.stream_table_meta()["fqn"]) == ["demo.stream_table.t"]  # now he sees it
    assert bob.user_privileges("bob").to_dict("records")[0]["privilege"] == "table_read"  # type: ignore[attr-defined]
