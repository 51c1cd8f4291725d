"""The cluster's own channels (issue 19, item 5): requests between master and workers are signed (a MAC over the
request with a timestamp and a nonce), the service serves HTTPS when given a certificate, and a path a worker
returns or a master sends is used only where it must lie in the data directory.

No Spark: the worker's app runs with a Worker whose Spark never starts, the master's with a fake worker port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

import headwater as hw
from headwater.errors import ConfigurationError, ExecutionError, WorkerUnavailableError
from headwater.runtime.embedded import embedded_master
from headwater.runtime.protocol import IsRunning, RunSql, encode
from headwater.runtime.worker import Worker
from headwater.service.auth import Authenticator
from headwater.service.pool import WorkerPool
from headwater.service.run import join_master
from headwater.service.server import create_app
from headwater.service.signing import Signer, signed_headers
from headwater.service.tls import client_context, server_options
from headwater.service.worker_http import HttpWorkerPort, create_worker_app
from tests.support.postgres import free_port

SECRET = "channels-worker-secret-0123456789"
PATH = "/v1/worker/request"
ROOT = Path(__file__).resolve().parents[2]


def idle_worker(data: Path) -> Worker:
    """A worker whose Spark is never started: enough for the requests these tests send."""
    return Worker(data, spark_master="local[1]", trigger_interval=timedelta(seconds=1))


@pytest.fixture
def worker_client(tmp_path):
    with TestClient(create_worker_app(idle_worker(tmp_path), SECRET), base_url="http://testserver") as client:
        yield client


def is_running_body() -> bytes:
    return json.dumps(encode(IsRunning("demo.stream_graph.g"))).encode()


# -- signed requests ------------------------------------------------------------------------------------
def test_a_signed_request_is_served_and_its_replay_refused(worker_client):
    body = is_running_body()
    headers = signed_headers(SECRET, "POST", PATH, body)
    first = worker_client.post(PATH, content=body, headers=headers)
    assert first.status_code == 200 and first.json() == {"reply": False}
    replay = worker_client.post(PATH, content=body, headers=headers)  # the same bytes, captured on the wire
    assert replay.status_code == 401 and "nonce was already used" in replay.json()["message"]
    # a fresh signature of the same request is served: only the replay was refused
    assert worker_client.post(PATH, content=body, headers=signed_headers(SECRET, "POST", PATH, body)).status_code == 200


def test_a_forged_or_altered_request_is_refused(worker_client):
    body = is_running_body()
    forged = signed_headers("not-the-worker-secret-0123456789", "POST", PATH, body)
    answer = worker_client.post(PATH, content=body, headers=forged)
    assert answer.status_code == 401 and "signature does not match" in answer.json()["message"]
    # signed with the secret, then its body changed on the way
    headers = signed_headers(SECRET, "POST", PATH, body)
    altered = json.dumps(encode(IsRunning("demo.stream_graph.other"))).encode()
    answer = worker_client.post(PATH, content=altered, headers=headers)
    assert answer.status_code == 401 and "signature does not match" in answer.json()["message"]
    # signed for another path
    headers = signed_headers(SECRET, "POST", "/v1/health", body)
    assert worker_client.post(PATH, content=body, headers=headers).status_code == 401


def test_a_stale_or_future_timestamp_is_refused(worker_client):
    body = is_running_body()
    for skew in (-120.0, 120.0):
        headers = signed_headers(SECRET, "POST", PATH, body, now=time.time() + skew)
        answer = worker_client.post(PATH, content=body, headers=headers)
        assert answer.status_code == 401 and "outside the window" in answer.json()["message"]


def test_the_old_bearer_secret_is_refused(worker_client):
    answer = worker_client.post(PATH, content=is_running_body(), headers={"Authorization": f"Bearer {SECRET}"})
    assert answer.status_code == 401 and "not signed" in answer.json()["message"]


def test_the_masters_port_signs_its_requests(worker_client):
    # HttpWorkerPort's own signer, over the worker's app in process
    worker_client.auth = Signer(SECRET)
    answer = worker_client.post(PATH, json=encode(IsRunning("demo.stream_graph.g")))
    assert answer.status_code == 200 and answer.json() == {"reply": False}


@pytest.fixture
def master_client(tmp_path):
    pool = WorkerPool([], SECRET)
    master = embedded_master(tmp_path / "data", start_spark=False, worker=pool)
    auth = Authenticator(master.store)
    auth.ensure_admin("admin-pw")
    with TestClient(create_app(master, auth, worker_secret=SECRET), base_url="http://testserver") as client:
        yield pool, client
    master.close()


def test_a_worker_joins_only_with_a_valid_signature(master_client):
    pool, client = master_client
    join = {"url": "http://127.0.0.1:9", "group": "default"}
    bearer = client.post("/v1/workers/join", json=join, headers={"Authorization": f"Bearer {SECRET}"})
    assert bearer.status_code == 401 and "signed" in bearer.json()["message"]
    forged = client.post("/v1/workers/join", json=join, auth=Signer("a-fake-worker-secret-0123456789"))
    assert forged.status_code == 401 and "does not match" in forged.json()["message"]
    assert list(pool.ports) == []  # no fake worker registered
    body = json.dumps(join).encode()
    headers = {**signed_headers(SECRET, "POST", "/v1/workers/join", body), "Content-Type": "application/json"}
    joined = client.post("/v1/workers/join", content=body, headers=headers)
    assert joined.status_code == 200 and joined.json() == {"joined": True}
    assert list(pool.ports) == ["http://127.0.0.1:9"]
    replayed = client.post("/v1/workers/join", content=body, headers=headers)
    assert replayed.status_code == 401 and "nonce was already used" in replayed.json()["message"]


# -- paths that cross the channel -----------------------------------------------------------------------
class LyingWorker:
    """A worker port that answers every query with a result directory of its choosing."""

    stops_with_master = False
    name = "lying-worker"

    def __init__(self, path: str) -> None:
        self.path = path

    def request(self, message: Any) -> Any:
        if isinstance(message, RunSql):
            return {"path": self.path, "schema": pa.schema([("x", pa.int64())]).serialize().to_pybytes()}
        return None


@pytest.mark.parametrize("how", ["outside", "dotdot", "symlink", "relative", "spool itself"])
def test_a_returned_path_outside_the_data_directory_is_refused_and_nothing_deleted(tmp_path, how):
    data = tmp_path / "data"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    spool = data / "tmp" / "sql"
    path = {"outside": str(victim), "dotdot": f"{spool}/../../../victim", "symlink": f"{spool}/link",
            "relative": "victim", "spool itself": str(spool)}[how]
    master = embedded_master(data, start_spark=False, worker=LyingWorker(path))
    spool.mkdir(parents=True, exist_ok=True)
    (spool / "link").symlink_to(victim)
    auth = Authenticator(master.store)
    auth.ensure_admin("admin-pw")
    try:
        with pytest.raises(ExecutionError, match="refused the SQL result directory"):
            master.sql("select 1 as x", current_catalog=None)
        with TestClient(create_app(master, auth), base_url="http://testserver") as client:
            token = client.post("/v1/login", json={"user": "admin", "password": "admin-pw"}).json()["token"]
            answer = client.post("/v1/sql", json={"query": "select 1 as x"}, headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 500 and "refused the SQL result directory" in answer.json()["message"]
    finally:
        master.close()
    assert (victim / "precious.txt").read_text() == "keep me"


def test_a_worker_reads_tables_only_under_its_data_directory(tmp_path, monkeypatch):
    data = tmp_path / "data"
    worker = idle_worker(data)
    monkeypatch.setattr(worker, "sql", lambda query: pytest.fail(f"the query reached Spark with {query.views}"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for path in (str(outside), f"{data}/tables/../headwater.db", "/etc", "tables/demo/t"):
        message = RunSql("select * from t", "select * from t", [["t", "demo.stream_table.t", path]], [])
        with pytest.raises(ExecutionError, match="refused the table path"):
            worker.handle(message)


# -- TLS ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return str(cert), str(key)


def serve_in_thread(app: Any, port: int, cert: str, key: str) -> tuple[Any, threading.Thread]:
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           **server_options(cert, key)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the TLS server did not start"
        time.sleep(0.05)  # polling a condition with a deadline
    return server, thread


def test_a_worker_serves_https_to_a_master_that_trusts_its_certificate(tmp_path, certificate):
    cert, key = certificate
    port = free_port()
    server, thread = serve_in_thread(create_worker_app(idle_worker(tmp_path), SECRET), port, cert, key)
    try:
        trusting = HttpWorkerPort(f"https://127.0.0.1:{port}", SECRET, verify=client_context(cert))
        assert trusting.request(IsRunning("demo.stream_graph.g")) is False
        trusting.close()
        untrusting = HttpWorkerPort(f"https://127.0.0.1:{port}", SECRET)  # the system's trust store only
        with pytest.raises(WorkerUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusting.request(IsRunning("demo.stream_graph.g"))
        untrusting.close()
        with pytest.raises(httpx.HTTPError):  # plain HTTP gets no answer from the TLS port
            httpx.post(f"http://127.0.0.1:{port}{PATH}", content=is_running_body(), timeout=5)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_the_master_serves_https_sessions_and_signed_joins(tmp_path, certificate, monkeypatch):
    cert, key = certificate
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    env = {**os.environ, "HEADWATER_ADMIN_PASSWORD": "admin-pw", "HEADWATER_WORKER_SECRET": SECRET,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    log = tmp_path / "master.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "headwater.cli", "master", "--data-dir", str(tmp_path / "data"),
                                 "--port", str(port), "--remote-workers", "--tls-cert", cert, "--tls-key", key],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            try:
                if httpx.get(f"{url}/v1/health", verify=client_context(cert), timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)  # polling a condition with a deadline
        monkeypatch.setenv("HEADWATER_TLS_CA", cert)
        session = hw.connect(url, user="admin", password="admin-pw")
        assert session.stream_graph_meta().empty
        session.close()
        monkeypatch.delenv("HEADWATER_TLS_CA")
        with pytest.raises(ConfigurationError, match="CERTIFICATE_VERIFY_FAILED"):
            hw.connect(url, user="admin", password="admin-pw")  # the system's trust store does not know it
        with httpx.Client(auth=Signer(SECRET), verify=client_context(cert)) as http:
            joined = join_master(http, url, f"https://127.0.0.1:{free_port()}", "default")
        assert joined.status_code == 200 and joined.json() == {"joined": True}, joined.text
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# -- PostgreSQL, Spark and the data directory of `headwater cluster up` ---------------------------------
def test_cluster_postgres_refuses_a_connection_without_its_password():
    import shutil
    import tempfile

    import psycopg

    from headwater.service.postgres import passfile, password, start_postgres

    root = Path(tempfile.mkdtemp(prefix="headwater-pg-"))  # as root, the server's user must reach it: not tmp_path
    server, url = start_postgres(root)
    try:
        assert ":" not in url.split("@")[0].removeprefix("postgresql://")  # no password in the URL
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert passfile(root).stat().st_mode & 0o777 == 0o600
        nowhere = str(root / "no-passfile")  # not ~/.pgpass or $PGPASSFILE either
        for host in ("127.0.0.1", str(root)):  # TCP and the Unix socket
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(host=host, port=port, user="headwater", dbname="postgres", passfile=nowhere,
                                connect_timeout=10).close()
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(host="127.0.0.1", port=port, user="headwater", dbname="postgres", password="guess",
                            passfile=nowhere, connect_timeout=10).close()
        with psycopg.connect(host="127.0.0.1", port=port, user="headwater", dbname="postgres",
                             password=password(root), connect_timeout=10) as conn:
            assert conn.execute("select current_user").fetchone() == ("headwater",)
        with psycopg.connect(url, passfile=str(passfile(root)), connect_timeout=10) as conn:  # what the master does
            assert conn.execute("select 1").fetchone() == (1,)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def test_a_trust_cluster_of_an_earlier_headwater_is_refused(tmp_path):
    from headwater.service.postgres import _refuse_trust

    (tmp_path / "pgdata").mkdir()
    (tmp_path / "pgdata" / "pg_hba.conf").write_text("# TYPE DATABASE USER ADDRESS METHOD\n"
                                                     "host all all 127.0.0.1/32 trust\n")
    with pytest.raises(ConfigurationError, match="without a password"):
        _refuse_trust(tmp_path / "pgdata")


class Started(Exception):
    """Stops `cluster up` after its first process, once its command line is known."""


def test_cluster_up_runs_spark_with_authentication_in_private_directories(tmp_path, monkeypatch):
    from headwater.service import cluster

    spawned: list[list[str]] = []

    def spawn(name: str, argv: list[str], *args: Any, **kwargs: Any) -> Any:
        spawned.append(argv)
        raise Started(name)

    monkeypatch.setattr(cluster, "_spawn", spawn)
    data = tmp_path / "data"
    with pytest.raises(Started, match="spark-master"):
        cluster.up(data, workers=1)
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / "cluster").stat().st_mode & 0o777 == 0o700
    conf = data / "cluster" / "spark-auth.conf"
    assert conf.stat().st_mode & 0o777 == 0o600
    props = dict(line.split(" ", 1) for line in conf.read_text().splitlines())
    assert props["spark.authenticate"] == "true" and len(props["spark.authenticate.secret"]) == 64
    argv = spawned[0]
    assert argv[argv.index("--properties-file") + 1] == str(conf)
    assert props["spark.authenticate.secret"] not in " ".join(argv)  # on no command line
    assert cluster.spark_auth_conf(data / "cluster") == conf and conf.read_text().count("secret") == 1  # kept


def test_a_workers_driver_loads_the_clusters_spark_properties(tmp_path, monkeypatch):
    from pyspark import SparkContext

    from headwater.spark import session

    conf = tmp_path / "spark auth.conf"
    conf.write_text("spark.authenticate true\n")
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)  # as in a worker before its driver starts
    # set, not deleted: monkeypatch then restores the variable that _use_properties_file rewrites (a leaked
    # --properties-file under a test's tmp_path breaks every later Spark driver of the run)
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "pyspark-shell")
    session._use_properties_file(str(conf))
    import shlex

    assert shlex.split(os.environ["PYSPARK_SUBMIT_ARGS"]) == ["--properties-file", str(conf), "pyspark-shell"]


def test_a_new_data_directory_is_the_owners_only(tmp_path):
    master = embedded_master(tmp_path / "fresh", start_spark=False)
    master.close()
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
