"""``headwater master`` as a real process, driven by the real ``headwater`` command in subprocesses: a graph
submitted by one client keeps running after that client's process exits and after the master process is
restarted, its sink equal to a pandas reference (nothing lost, nothing duplicated); the command's output as text
and JSON, its exit codes, ``/metrics`` against the API; then the same listings from the data directory alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest

import headwater as hw
from tests.support.postgres import free_port
from tests.support.service import (
    ENV,
    PASSWORD,
    ROOT,
    connect,
    reference,
    results,
    rows,
    start,
    stop,
    submit_from_another_process,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def headwater(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", *args], cwd=ROOT, env=env, input=stdin,
                          capture_output=True, text=True, timeout=300)


def ok(*args: str, env: dict[str, str]) -> str:
    done = headwater(*args, env=env)
    assert done.returncode == 0, f"headwater {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def scrape(url: str, tokens: Path) -> dict[tuple[str, tuple], float]:
    """The master's /metrics, parsed by prometheus_client: (name, sorted labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    token = json.loads(tokens.read_text())[url]
    r = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert r.status_code == 200, r.text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def test_the_command_line_against_a_master_and_its_data_directory(tmp_path):
    data, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in ENV.items() if k not in ("HEADWATER_URL", "HEADWATER_TOKEN", "HEADWATER_USER")}
    env = {**env, "HEADWATER_TOKEN_FILE": str(tmp_path / "tokens.json"), "HEADWATER_PASSWORD": ""}
    master = start("master", data, port)
    try:
        submit_from_another_process(url)
        assert headwater("graphs", "--url", url, env=env).returncode == 3  # not logged in: 3, saying how to
        logged = headwater("login", "--url", url, "--user", "admin", env=env, stdin=PASSWORD + "\n")
        assert logged.returncode == 0, logged.stderr
        assert os.stat(tmp_path / "tokens.json").st_mode & 0o777 == 0o600
        env = {**env, "HEADWATER_URL": url}  # from here on the URL comes from the environment

        graphs = json.loads(ok("graphs", "--json", env=env))
        assert [(g["fqn"], g["status"]) for g in graphs] == [("demo.stream_graph.totals", "running")]
        text = ok("graphs", env=env).splitlines()
        assert text[0].split()[:2] == ["id", "fqn"] and "demo.stream_graph.totals" in text[1] and "running" in text[1]

        frame, more, later = rows(500, seed=1, start=0), rows(100, seed=2, start=500), rows(100, seed=3, start=600)
        frame.to_parquet(tmp_path / "ticks.parquet", index=False)
        more.to_csv(tmp_path / "more.csv", index=False)
        later.to_csv(tmp_path / "later.csv", index=False)
        assert ok("append", "demo.stream_table.ticks", str(tmp_path / "ticks.parquet"), env=env).strip() == "1"
        ok("graph", "wait", "totals", "--catalog", "demo", "--timeout", "300", env=env)

        stop(master)  # the master process ends; the graph is still 'running' in its catalog, and resumes
        master = start("master", data, port)
        assert ok("append", "ticks", str(tmp_path / "more.csv"), "--catalog", "demo", env=env).strip() == "2"
        ok("graph", "wait", "totals", "--catalog", "demo", "--timeout", "300", env=env)
        session = connect(url)
        pd.testing.assert_frame_equal(results(session), reference(pd.concat([frame, more], ignore_index=True)),
                                      check_dtype=False)
        tailed = [json.loads(line) for line in ok("table", "tail", "demo.stream_table.ticks", "--from-version", "2",
                                                  "--max-versions", "1", "--json", env=env).splitlines()]
        assert [(r["x"], r["_version"]) for r in tailed] == [(x, 2) for x in more["x"]]
        lag = json.loads(ok("graph", "lag", "demo.stream_graph.totals", "--json", env=env))
        assert {(r["table_name"], r["latest_version"], r["pending_versions"]) for r in lag} == {
            ("demo.stream_table.ticks", 2, 0)}
        count = json.loads(ok("sql", "select count(*) as n, sum(x) as s from out", "--catalog", "demo", "--json",
                              env=env))
        assert count == [{"n": 600, "s": int(frame["x"].sum() + more["x"].sum())}]

        [worker] = json.loads(ok("workers", "--json", env=env))  # the master's in-process worker, its Spark UI on
        assert worker["alive"] and worker["graphs"] == "demo.stream_graph.totals"
        assert worker["spark_ui"].startswith("http://127.0.0.1:") and httpx.get(worker["spark_ui"]).status_code < 400
        ok("graph", "stop", "demo.stream_graph.totals", env=env)
        assert ok("append", "demo.stream_table.ticks", str(tmp_path / "later.csv"), env=env).strip() == "3"
        stopped_lag = json.loads(ok("graph", "lag", "demo.stream_graph.totals", "--json", env=env))
        assert {(r["pending_versions"], r["pending_rows"]) for r in stopped_lag} == {(1, 100)}  # rises while stopped
        metrics = scrape(url, tmp_path / "tokens.json")
        for r in stopped_lag:  # /metrics says what the API says
            labels = (("graph", "demo.stream_graph.totals"), ("table", r["table_name"]), ("task", r["task_id"]))
            assert metrics[("headwater_task_pending_versions", labels)] == r["pending_versions"]
            assert metrics[("headwater_task_pending_rows", labels)] == r["pending_rows"]
        assert metrics[("headwater_graph_status", (("graph", "demo.stream_graph.totals"), ("status", "stopped")))] == 1
        again = headwater("graph", "stop", "demo.stream_graph.totals", env=env)
        assert again.returncode == 6 and "stopped" in again.stderr  # a state conflict
        missing = headwater("graph", "show", "demo.stream_graph.nope", env=env)
        assert missing.returncode == 5 and "does not exist" in missing.stderr
        bad = headwater("table", "create", "demo.stream_table.t", "{not json", env=env)
        assert bad.returncode == 2 and "not JSON" in bad.stderr
        events = json.loads(ok("events", "--json", env=env))
        assert [e["type"] for e in events][-1] == "STOP"

        ok("user", "create", "bob", "--password", "bob-password", env=env)
        assert [u["name"] for u in json.loads(ok("users", "--json", env=env))] == ["admin", "bob"]
        bob = {**env, "HEADWATER_TOKEN_FILE": str(tmp_path / "bob.json")}
        assert headwater("login", "--user", "bob", env=bob, stdin="bob-password\n").returncode == 0
        refused = headwater("graph", "start", "demo.stream_graph.totals", env=bob)
        assert refused.returncode == 4 and "graph_control" in refused.stderr
        ok("grant", "bob", "graph_control", "demo.stream_graph.totals", env=env)
        ok("graph", "start", "demo.stream_graph.totals", env=bob)
        ok("graph", "wait", "demo.stream_graph.totals", env=env)
        everything = pd.concat([frame, more, later], ignore_index=True)
        pd.testing.assert_frame_equal(results(session), reference(everything), check_dtype=False)
        with pytest.raises(hw.SqlError):
            session.sql("drop table out")
        session.close()
        metrics = scrape(url, tmp_path / "tokens.json")  # caught up: no lag; every row read once since the restart
        assert {v for (name, _), v in metrics.items() if name == "headwater_task_pending_versions"} == {0}
        assert metrics[("headwater_rows_in_total", (("graph", "demo.stream_graph.totals"), ("subgraph", "0")))] == 200
        sql = {labels[0][1]: v for (name, labels), v in metrics.items() if name == "headwater_sql_queries_total"}
        assert sql == {"ok": 3, "refused": 1}  # since the restart: two reads of the sink, one count; one drop
        assert ok("ui", env=env).strip() == f"{url}/ui/"  # where the master's console is
        assert ok("logout", env=bob).startswith("logged out")
        assert headwater("graphs", env=bob).returncode == 3
    finally:
        stop(master, signal.SIGTERM)

    # the master is gone: its data directory answers the same listings
    offline = json.loads(ok("graphs", "--data-dir", str(data), "--json", env=env))
    assert [(g["fqn"], g["status"]) for g in offline] == [("demo.stream_graph.totals", "running")]
    tables = ok("tables", "--data-dir", str(data), env=env)
    assert "demo.stream_table.ticks" in tables and "demo.stream_table.out" in tables
    needs_master = headwater("graph", "wait", "demo.stream_graph.totals", "--data-dir", str(data), env=env)
    assert needs_master.returncode == 2 and "needs a running master" in needs_master.stderr
    served_console_of(data, env)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def served_console_of(data: Path, env: dict[str, str]) -> None:
    """``headwater ui --data-dir``: the console of a data directory no master holds, with its users."""
    port = free_port()
    ui = subprocess.Popen([sys.executable, "-m", "headwater", "ui", "--data-dir", str(data), "--port", str(port)],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        console = f"http://127.0.0.1:{port}"
        assert ui.stdout is not None and ui.stdout.readline().strip() == f"headwater ui: {data} on {console}/ui/"
        deadline = time.monotonic() + 60
        while not _answers(f"{console}/v1/health"):
            assert time.monotonic() < deadline and ui.poll() is None, "headwater ui did not answer within 60 s"
            time.sleep(0.1)  # polling a condition with a deadline
        with httpx.Client(base_url=console, timeout=60) as http:
            assert http.get("/ui/graphs", follow_redirects=False).headers["location"] == "/ui/login"
            assert http.post("/ui/login", json={"user": "bob", "password": "bob-password"}).status_code == 200
            page = http.get("/ui/graphs")
            assert page.status_code == 200 and "demo.stream_graph.totals" in page.text  # bob may control it
        held = headwater("graphs", "--data-dir", str(data), env=env)  # the console holds the directory meanwhile
        assert held.returncode == 6 and "in use" in held.stderr
    finally:
        stop(ui, signal.SIGINT)
    assert ui.returncode == 0
