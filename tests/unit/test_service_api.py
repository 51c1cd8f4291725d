"""The master's HTTP API in process (FastAPI's TestClient, no Spark): the same Session over HTTP, logins and
tokens, and hostile requests refused with Headwater's own errors before they reach the master."""

from __future__ import annotations

import json
import time

import pandas as pd
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

import headwater as hw
from headwater.api.session import Session
from headwater.runtime.access import AccessControl
from headwater.runtime.embedded import embedded_master
from headwater.service.auth import Authenticator, hash_password, verify_password
from headwater.service.client import AuthenticationError, RemoteMaster
from headwater.service.server import ARROW_STREAM, create_app


@pytest.fixture
def served(tmp_path):
    master = embedded_master(tmp_path, start_spark=False)
    auth = Authenticator(master.store)
    auth.ensure_admin("admin-pw")
    auth.add_user("alice", "alice-pw")
    AccessControl(master.store).grant("admin", "alice", "manage", "demo")  # alice may do anything in demo
    client = TestClient(create_app(master, auth), base_url="http://testserver")
    yield master, auth, client
    client.close()
    master.close()


def remote_session(client: TestClient, user: str = "alice", password: str = "alice-pw") -> Session:
    session = Session(RemoteMaster("http://testserver", user=user, password=password, http=client))
    session.use_catalog("demo")
    return session


def ipc(frame: pd.DataFrame) -> bytes:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_tables_over_http_behave_as_embedded(served):
    master, _, client = served
    s = remote_session(client)
    s.create_stream_table("quotes", {"sym": "string", "px": "double"}, kind="keyed", key_column="sym",
                          retention_rows=100)
    assert s.append("quotes", pd.DataFrame({"sym": ["a", "b", "a"], "px": [1.0, 2.0, 3.0]})) == 1
    assert s.append("quotes", pd.DataFrame({"sym": ["c"], "px": [4.0]}), sequence=0) == 2
    assert s.append("quotes", pd.DataFrame({"sym": ["c"], "px": [4.0]}), sequence=0) == 2  # a retry: stored once
    assert s.committed_sequence("quotes") == 0
    meta = s.stream_table_meta("quotes").iloc[0]
    assert (meta["rows"], meta["version"], meta["retention"]) == (3, 2, "the newest 100 rows")
    # what the server stored is what an embedded session sees
    stored = master._table(master.store.get_table("demo.stream_table.quotes")).to_arrow().to_pandas()
    assert sorted(stored["sym"]) == ["a", "b", "c"] and stored.set_index("sym").loc["a", "px"] == 1.0
    with pytest.raises(hw.CatalogError, match="already exists"):
        s.create_stream_table("quotes", {"x": "long"})
    with pytest.raises(hw.SchemaError):
        s.append("quotes", pd.DataFrame({"sym": ["d"], "px": ["not a number"]}))
    with pytest.raises(hw.ConfigurationError, match="positive"):
        s.set_stream_table_retention("quotes", rows=-1)
    s.drop_stream_table("quotes")
    with pytest.raises(hw.CatalogError, match="does not exist"):
        s.append("quotes", pd.DataFrame({"sym": ["a"], "px": [1.0]}))
    s.close()


@pytest.mark.parametrize("name", ["../../etc/passwd", "demo.stream_table.a.b", "demo.stream_table.x;drop",
                                  "demo.stream_graph.t", "", "demo.stream_table." + "x" * 200, "demo..t"])
def test_hostile_table_names_are_refused_by_the_catalog_rules(served, name):
    _, _, client = served
    token = client.post("/v1/login", json={"user": "alice", "password": "alice-pw"}).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    r = client.post("/v1/append", params={"args": json.dumps({"fqn": name})}, content=ipc(pd.DataFrame({"x": [1]})),
                    headers={**headers, "Content-Type": ARROW_STREAM})
    assert (r.status_code, r.json()["error"]) in ((422, "GraphDefinitionError"), (404, "CatalogError")), r.text
    r = client.post("/v1/create_public_table", json={"fqn": name, "schema": [["x", "long"]]}, headers=headers)
    assert r.status_code == 422 and r.json()["error"] == "GraphDefinitionError", r.text


def test_hostile_bodies_are_refused_with_a_reason(served):
    master, _, client = served
    s = remote_session(client)
    s.create_stream_table("t", {"x": "long"})
    token = client.post("/v1/login", json={"user": "alice", "password": "alice-pw"}).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    for body in (b"", b"not arrow at all", b"\xff" * 1000, ipc(pd.DataFrame({"x": [1]}))[:20]):
        r = client.post("/v1/append", params={"args": '{"fqn": "demo.stream_table.t"}'}, content=body,
                        headers={**headers, "Content-Type": ARROW_STREAM})
        assert r.status_code == 422 and r.json()["error"] == "SchemaError", r.text
    for doc in ("{}", "[]", "not json", '{"plan_version": 999}', "x" * 100_000):
        r = client.post("/v1/submit", json={"document": doc}, headers=headers)
        assert r.status_code == 422 and r.json()["error"] == "GraphDefinitionError", r.text
    r = client.post("/v1/create_public_table", json={"fqn": "demo.stream_table.u", "schema": [["x", "no_such_type"]]},
                    headers=headers)
    assert r.status_code == 422 and r.json()["error"] == "SchemaError", r.text
    for body in ({}, {"fqn": 5, "schema": "x"}, {"fqn": "demo.stream_table.u", "schema": [[1, 2, 3]]}, [1, 2]):
        r = client.post("/v1/create_public_table", json=body, headers=headers)
        assert r.status_code == 422 and r.json()["error"] == "RequestError", r.text
    assert master.store.get_table("demo.stream_table.u") is None
    assert s.stream_table_meta("t").iloc[0]["rows"] == 0  # nothing stored by any of it
    g = s.stream_graph("g")
    g.source("t", schema={"x": "long"}).sink("o")
    doc = g.to_json()
    for config in ({"interval": 1000}, {"enable": False}, {"consecutive_failures": -1}, {"nope": 1},
                   {"max_retained_checkpoints": "5"}, {"max_concurrent_checkpoints": 2}):
        r = client.post("/v1/submit", json={"document": doc, "checkpoint_config": config}, headers=headers)
        assert r.status_code == 422 and r.json()["error"] == "ConfigurationError", r.text
    assert s.stream_graph_meta().empty  # nothing submitted
    for body in ({"engine": "demo.stream_engine.nope", "op": {"op": "delete_rule", "key": 1}},
                 {"engine": "../../etc", "op": {}}, {"engine": 5, "op": "x"}):
        r = client.post("/v1/control_engine", json=body, headers=headers)
        assert 400 <= r.status_code < 500 and r.json()["error"] in ("CatalogError", "RequestError", "GraphDefinitionError")
    s.close()


def test_an_oversized_body_is_refused_unread_and_the_server_keeps_serving(tmp_path):
    master = embedded_master(tmp_path, start_spark=False)
    auth = Authenticator(master.store)
    auth.ensure_admin("pw")
    with TestClient(create_app(master, auth, max_body_bytes=10_000), base_url="http://testserver") as client:
        s = remote_session(client, "admin", "pw")
        s.create_stream_table("t", {"x": "long"})
        with pytest.raises(hw.RequestError, match="limit"):
            s.append("t", pd.DataFrame({"x": range(100_000)}))
        assert s.append("t", pd.DataFrame({"x": [1, 2]})) == 1  # still serving; the refused rows never landed
        assert s.stream_table_meta("t").iloc[0]["rows"] == 2
        s.close()
    master.close()


def test_every_call_but_login_and_health_needs_a_valid_token(served):
    _, _, client = served
    assert client.get("/v1/health").json()["role"] == "active"
    routes = [r.path for r in client.app.routes if getattr(r, "methods", None) == {"POST"}]
    assert len(routes) >= 15
    for path in routes:
        if path in ("/v1/login", "/ui/login"):
            continue
        for headers in ({}, {"Authorization": "Bearer forged"}, {"Authorization": "Basic YWRtaW46YWRtaW4tcHc="}):
            r = client.post(path, json={"fqn": "demo.stream_table.t"}, headers=headers)
            assert r.status_code == 401, (path, headers, r.status_code, r.text)
    for user, password in (("alice", "wrong"), ("mallory", "alice-pw"), ("alice", ""), ("alice", "x" * 5000)):
        assert client.post("/v1/login", json={"user": user, "password": password}).status_code == 401
    with pytest.raises(AuthenticationError, match="wrong user or password"):
        RemoteMaster("http://testserver", user="alice", password="nope", http=client)


def test_an_expired_token_is_refused(served):
    master, auth, client = served
    token = auth.login("alice", "alice-pw")
    assert auth.user_of(token) == "alice"
    from headwater.storage.metadata import tokens

    with master.store.engine.begin() as c:
        c.execute(tokens.update().values(expires=time.time() - 1))
    r = client.post("/v1/table_meta", json={}, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 401 and "expired" in r.json()["message"]


def test_passwords_are_stored_salted_and_the_admin_is_created_once(served):
    master, auth, _ = served
    stored = master.store.user_password_hash("admin")
    assert "admin-pw" not in stored and verify_password("admin-pw", stored)
    assert hash_password("same") != hash_password("same")  # a salt each
    auth.ensure_admin("another")  # a later start keeps the stored password
    assert verify_password("admin-pw", master.store.user_password_hash("admin"))
    with pytest.raises(hw.ConfigurationError):
        auth.add_user("../root", "pw")
    with pytest.raises(hw.ConfigurationError):
        auth.add_user("bob", "")


def test_connect_to_a_url_needs_credentials_and_a_reachable_master():
    with pytest.raises(hw.ConfigurationError, match=r"user=\.\.\. and password"):
        hw.connect("http://127.0.0.1:9")
    with pytest.raises(hw.ConfigurationError, match="cannot reach"):
        hw.connect("http://127.0.0.1:9", user="a", password="b")


def test_a_master_that_stops_answering_is_a_headwater_error_and_a_failed_sql_leaves_no_files(served, tmp_path,
                                                                                                 monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    gone = RemoteMaster("http://127.0.0.1:9", token="a-token-from-an-earlier-login")
    with pytest.raises(hw.ExecutionError, match=r"cannot reach the Headwater master at http://127.0.0.1:9"):
        gone.graph_meta()
    with pytest.raises(hw.ExecutionError, match="cannot reach"):
        Session(gone).sql("select 1")
    gone.close()
    _, _, client = served
    with pytest.raises(hw.SqlError):
        remote_session(client).sql("drop table quotes")  # refused by the master
    assert list((tmp_path / "scratch").iterdir()) == []  # neither left its result directory behind


def test_the_master_command_refuses_bad_settings_in_one_line(tmp_path, capsys, monkeypatch):
    from headwater.cli import main

    monkeypatch.delenv("HEADWATER_ADMIN_PASSWORD", raising=False)
    assert main(["master", "--data-dir", str(tmp_path / "a"), "--metadata", "mysql://x"]) == 2
    assert "expected postgresql://" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["master", "--data-dir", str(tmp_path / "b"), "--spark", "local[*] --conf spark.x=1"])
    assert "is not a Spark master" in capsys.readouterr().err
    # first start without the admin's password: refused before anything listens, and the directory is free again
    assert main(["master", "--data-dir", str(tmp_path / "c"), "--metadata", f"sqlite:///{tmp_path / 'c.db'}"]) == 2
    assert "HEADWATER_ADMIN_PASSWORD" in capsys.readouterr().err
    hw.connect(tmp_path / "c", start_spark=False).close()


def test_http_statuses_say_what_went_wrong(served):
    """401/403 identity and privilege, 404 unknown names, 409 conflicts, 422 bad input (the wait's 504 and the
    waits' 429: tests/security/test_doors.py)."""
    _, auth, client = served
    auth.add_user("bob", "bob-pw")

    def token(user: str) -> dict[str, str]:
        r = client.post("/v1/login", json={"user": user, "password": f"{user}-pw"})
        return {"Authorization": f"Bearer {r.json()['token']}"}

    alice, bob = token("alice"), token("bob")
    table = {"fqn": "demo.stream_table.t", "schema": [["x", "long"]]}

    def answer(path: str, body: dict, headers: dict[str, str]) -> tuple[int, str]:
        r = client.post(path, json=body, headers=headers)
        return r.status_code, r.json()["error"]

    assert answer("/v1/table_meta", {}, {}) == (401, "AuthError")
    assert answer("/v1/create_public_table", table, bob) == (403, "PermissionDenied")
    assert answer("/v1/table_info", {"fqn": "demo.stream_table.nope"}, alice) == (404, "CatalogError")
    assert answer("/v1/wait_until_caught_up", {"fqn": "demo.stream_graph.nope"}, alice) == (404, "CatalogError")
    assert client.post("/v1/create_public_table", json=table, headers=alice).status_code == 200
    assert answer("/v1/create_public_table", table, alice) == (409, "NameTakenError")
    assert answer("/v1/create_public_table", {**table, "schema": [["x", "nonsense"]]}, alice)[0] == 422
    assert answer("/v1/table_info", {"fqn": "not a name"}, alice)[0] == 422
    assert answer("/v1/table_info", {}, alice) == (422, "RequestError")


def test_metrics_parse_and_need_an_admin_or_the_metrics_token(served, monkeypatch):
    from prometheus_client.parser import text_string_to_metric_families

    _, _, client = served
    s = remote_session(client, "admin", "admin-pw")
    s.create_stream_table("quotes", {"sym": "string", "px": "double"})
    with pytest.raises(hw.SqlError):
        s.sql("drop table quotes")  # refused before it runs: counted
    admin = {"Authorization": f"Bearer {client.post('/v1/login', json={'user': 'admin', 'password': 'admin-pw'}).json()['token']}"}
    alice = {"Authorization": f"Bearer {client.post('/v1/login', json={'user': 'alice', 'password': 'alice-pw'}).json()['token']}"}
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=alice).status_code == 403
    r = client.get("/metrics", headers=admin)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(r.text) for s in family.samples}
    assert samples[("headwater_workers_alive", ())] == 1
    assert samples[("headwater_sql_queries_total", (("outcome", "refused"),))] == 1
    monkeypatch.setenv("HEADWATER_METRICS_TOKEN", "scrape-token-0123456789")
    assert client.get("/metrics", headers={"Authorization": "Bearer scrape-token-0123456789"}).status_code == 200
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_a_worker_serves_metrics_to_the_metrics_token_only(monkeypatch):
    from prometheus_client.parser import text_string_to_metric_families

    from headwater.runtime.metrics import observe_batch
    from headwater.service.worker_http import create_worker_app

    class Idle:
        name, spark_state = "worker@test", "ready"

    observe_batch("demo.stream_graph.m", 0, rows_in=10, rows_out=4, seconds=0.2)
    with TestClient(create_worker_app(Idle(), "worker-secret-0123456789"), base_url="http://testserver") as client:
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", headers={"Authorization": "Bearer x"}).status_code == 401  # no token set
        monkeypatch.setenv("HEADWATER_METRICS_TOKEN", "scrape-token-0123456789")
        r = client.get("/metrics", headers={"Authorization": "Bearer scrape-token-0123456789"})
    assert r.status_code == 200
    samples = {(s.name, s.labels.get("graph")): s.value
               for family in text_string_to_metric_families(r.text) for s in family.samples}
    assert samples[("headwater_rows_in_total", "demo.stream_graph.m")] >= 10
    assert samples[("headwater_batch_duration_seconds_count", "demo.stream_graph.m")] >= 1


def test_subscribe_yields_each_committed_row_once_across_a_master_restart(tmp_path):
    """Follow a table over HTTP, restart the master midway, resume from the last version seen + 1: every
    committed row arrives exactly once, in version order; a reader needs table_read."""
    import itertools

    frames = [pd.DataFrame({"x": list(range(i * 10, i * 10 + 10))}) for i in range(6)]

    def serve():
        master = embedded_master(tmp_path, start_spark=False)
        auth = Authenticator(master.store)
        auth.ensure_admin("admin-pw")
        return master, auth, TestClient(create_app(master, auth), base_url="http://testserver")

    master, auth, client = serve()
    auth.add_user("eve", "eve-pw")
    s = remote_session(client, "admin", "admin-pw")
    s.create_stream_table("t", {"x": "long"})
    for frame in frames[:3]:
        s.append("t", frame)
    seen = list(itertools.islice(s.subscribe("t", from_version=1, poll_s=5), 2))
    with pytest.raises(hw.PermissionDenied, match="table_read"):
        next(remote_session(client, "eve", "eve-pw").subscribe("t", from_version=1))
    client.close()
    master.close()  # the master restarts; the subscriber resumes by version

    master, auth, client = serve()
    s = remote_session(client, "admin", "admin-pw")
    for frame in frames[3:]:
        s.append("t", frame)
    last = int(seen[-1]["_version"][0].as_py())
    seen += list(itertools.islice(s.subscribe("t", from_version=last + 1, poll_s=5), 4))
    assert [int(t["_version"][0].as_py()) for t in seen] == [1, 2, 3, 4, 5, 6]
    got = pd.concat([t.to_pandas() for t in seen], ignore_index=True)
    pd.testing.assert_frame_equal(got[["x"]], pd.concat(frames, ignore_index=True))
    # nothing new: a poll comes back empty after its wait, and the loop goes on waiting
    empty = s._master.table_changes(hw.catalog.resolve("demo.stream_table.t", "stream_table", current_catalog=None), 6,
                                    0.2)
    assert empty.num_rows == 0 and empty.schema.metadata[b"headwater.until_version"] == b"6"
    client.close()
    master.close()


def test_health_reports_the_metadata_store_the_lease_and_every_worker(served):
    master, _, client = served
    deadline = time.monotonic() + 30
    while (health := client.get("/v1/health").json())["metadata"]["ok"] is None:  # the first probe runs meanwhile
        assert time.monotonic() < deadline, health
        time.sleep(0.02)  # polling a condition with a deadline
    assert health["status"] == "ok" and health["role"] == "active" and health["lease"] is None  # SQLite: no lease
    assert health["metadata"]["ok"] is True and health["metadata"]["latency_ms"] >= 0
    assert health["workers"] == [{"url": "embedded-worker-0", "alive": True, "heartbeat_age_s": 0.0}]
    working = master.store.ping

    def refuse() -> None:
        raise OSError("the metadata store is gone")

    master.store.ping = refuse
    from headwater.service.server import HealthReport

    report = HealthReport(master)
    report.now()  # starts the probe
    deadline = time.monotonic() + 30
    while (answer := report.now())["metadata"]["ok"] is None:
        assert time.monotonic() < deadline, answer
        time.sleep(0.02)  # polling a condition with a deadline
    assert answer["status"] == "degraded" and "gone" in answer["metadata"]["error"]
    master.store.ping = working


def test_the_access_log_names_the_user_and_json_logs_carry_its_fields(tmp_path, caplog):
    import logging

    from headwater.service.run import JsonFormatter

    master = embedded_master(tmp_path, start_spark=False)
    auth = Authenticator(master.store)
    auth.ensure_admin("admin-pw")
    try:
        with TestClient(create_app(master, auth, access_log=True), base_url="http://testserver") as client, \
                caplog.at_level(logging.INFO, logger="headwater.access"):
            token = client.post("/v1/login", json={"user": "admin", "password": "admin-pw"}).json()["token"]
            client.post("/v1/table_meta", json={}, headers={"Authorization": f"Bearer {token}"})
            client.post("/v1/table_meta", json={})  # refused by the guard: logged too
        lines = [(r.path, r.status, r.user) for r in caplog.records if r.name == "headwater.access"]
        assert lines == [("/v1/login", 200, None), ("/v1/table_meta", 200, "admin"), ("/v1/table_meta", 401, None)]
        doc = json.loads(JsonFormatter().format(caplog.records[-2]))
        assert (doc["logger"], doc["path"], doc["status"], doc["user"]) == ("headwater.access", "/v1/table_meta", 200,
                                                                            "admin")
    finally:
        master.close()
