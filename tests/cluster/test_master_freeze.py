"""Chaos: the active master is frozen (SIGSTOP) under load. Its TCP connections stay open — PostgreSQL keeps its
session and its advisory lock — but its lease is not renewed: the standby takes over within the documented
deadline (``--lease-seconds`` plus one poll). Then the old master is woken (SIGCONT): it finds its lease lapsed
and exits at once, writing nothing to the metadata store (every table is compared before it wakes and after it
has exited, with the new active master held still meanwhile). The feed carries on through the standby, and the
sink ends equal to the pandas reference: nothing lost, nothing duplicated."""

from __future__ import annotations

import signal
import threading
import time

import pandas as pd
import psycopg
import pytest

from headwater.api.session import Session
from headwater.service.client import RemoteMaster
from headwater.service.run import LEADERSHIP_POLL_S
from tests.support.postgres import free_port, postgres_server
from tests.support.service import (
    PASSWORD,
    reference,
    results,
    rows,
    start,
    stop,
    submit_from_another_process,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LEASE_S = 8.0  # --lease-seconds for both masters (renewed every third of it)
# the documented deadline: the lease runs out at most LEASE_S after the freeze, and the standby polls every
# LEADERSHIP_POLL_S; the margin is for a machine shared with other test runs
TAKEOVER_WITHIN_S = LEASE_S + LEADERSHIP_POLL_S + 3.0
CHUNK = 40


def lease(metadata: str) -> tuple[str, int] | None:
    with psycopg.connect(metadata) as c:
        row = c.execute("select holder, token from leases where name = 'master'").fetchone()
    return None if row is None else (str(row[0]), int(row[1]))


def dump(metadata: str) -> dict[str, list[tuple]]:
    """Every row of every table of the metadata store."""
    with psycopg.connect(metadata) as c:
        names = [r[0] for r in c.execute("select tablename from pg_tables where schemaname = 'public'")]
        return {n: sorted(map(repr, c.execute(f'select * from "{n}"').fetchall())) for n in sorted(names)}


def role(url: str) -> str:
    import httpx

    try:
        return str(httpx.get(f"{url}/v1/health", timeout=1).json().get("role", ""))
    except (httpx.HTTPError, ValueError):
        return ""


class Feed:
    """Appends chunk after chunk (idempotent, with sequence numbers) from a thread until stopped."""

    def __init__(self, session: Session) -> None:
        self.session, self.sent = session, []
        self.stopping, self.error = threading.Event(), None
        self.thread = threading.Thread(target=self._run, name="feed")

    def _run(self) -> None:
        try:
            n = 0
            while not self.stopping.is_set():
                chunk = rows(CHUNK, seed=100 + n, start=CHUNK * n)
                self.session.append("ticks", chunk, sequence=n)
                self.sent.append(chunk)
                n += 1
        except BaseException as exc:  # reported by the test
            self.error = exc

    def appended(self) -> int:
        return len(self.sent)


def test_a_frozen_active_master_loses_its_lease_and_writes_nothing_when_it_wakes(tmp_path):
    data = tmp_path / "data"
    with postgres_server() as metadata:
        wport, a, b = free_port(), free_port(), free_port()
        worker = start("worker", data, wport, within=600)  # a Spark driver: slow on a busy machine
        common = ("--worker", f"http://127.0.0.1:{wport}", "--metadata", metadata, "--lease-seconds", str(LEASE_S),
                  "--heartbeat-deadline", "5", "--log-level", "info")
        old = start("master", data, a, *common)
        standby = start("master", data, b, *common, "--standby")
        urls = [f"http://127.0.0.1:{a}", f"http://127.0.0.1:{b}"]
        feed = None
        try:
            submit_from_another_process(",".join(urls))
            # a request stuck in the frozen master times out after 10 s and moves on to the other one
            session = Session(RemoteMaster(urls, user="admin", password=PASSWORD, timeout=10.0), client_id="feed")
            session.use_catalog("demo")
            first = lease(metadata)
            assert first is not None and role(urls[0]) == "active" and role(urls[1]) == "standby"

            feed = Feed(session)
            feed.thread.start()
            wait_for(lambda: feed.appended() >= 3, 120, "appends through the active master")
            old.send_signal(signal.SIGSTOP)
            frozen = time.monotonic()
            took = wait_for(lambda: (lease(metadata) or first)[1] > first[1], TAKEOVER_WITHIN_S + 5,
                            "the standby taking the lease")
            assert took <= TAKEOVER_WITHIN_S, f"took {took:.1f}s; the deadline is {TAKEOVER_WITHIN_S:.0f}s"
            assert lease(metadata)[0] != first[0]
            wait_for(lambda: role(urls[1]) == "active", 60, "the standby serving as the active master")
            at = feed.appended()
            wait_for(lambda: feed.appended() >= at + 3, 120, "appends through the new active master")
            assert feed.error is None, feed.error
            assert old.poll() is None  # still there, frozen, its connections open

            standby.send_signal(signal.SIGSTOP)  # held still: any change to the store from now on is the old one's
            try:
                before = dump(metadata)
                old.send_signal(signal.SIGCONT)
                wait_for(lambda: old.poll() is not None, 5, "the woken master exiting")
                after = dump(metadata)
            finally:
                standby.send_signal(signal.SIGCONT)
            assert old.returncode == 3, old.returncode  # run.py's exit for a lost leadership
            assert after == before  # it wrote nothing
            log = (tmp_path / f"master-{a}.log").read_text()
            assert "lost the master's lease" in log, log[-2000:]
            assert time.monotonic() - frozen > LEASE_S

            at = feed.appended()
            wait_for(lambda: feed.appended() >= at + 3, 120, "appends after the old master woke")
            feed.stopping.set()
            feed.thread.join(120)
            assert feed.error is None, feed.error
            session.wait_until_caught_up("totals", timeout=300)
            everything = pd.concat(feed.sent, ignore_index=True)
            pd.testing.assert_frame_equal(results(session), reference(everything), check_dtype=False)  # 0 lost, 0 dup
            assert session.stream_graph_meta("totals").iloc[-1]["status"] == "running"
            session.close()
        finally:
            if feed is not None:
                feed.stopping.set()
            if old.poll() is None:
                old.send_signal(signal.SIGCONT)
            stop(old, signal.SIGKILL)
            stop(standby)
            stop(worker)
