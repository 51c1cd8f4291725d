"""The active master's lease on a real PostgreSQL (``headwater.service.leader``): a lease that is not renewed is
taken over once it expires, whatever the old holder's connection does; the old holder's metadata writes are
then refused with ``LeadershipLost`` and change nothing; a holder whose session ended is replaced at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa

from headwater.errors import ConfigurationError, LeadershipLost
from headwater.service.leader import Leadership
from headwater.storage.metadata import MetadataStore
from tests.support.postgres import postgres_server
from tests.support.service import wait_for


@pytest.fixture(scope="module")
def metadata() -> Iterator[str]:
    with postgres_server() as url:
        MetadataStore(url).dispose()  # the catalog's tables
        yield url


@pytest.fixture
def url(metadata: str) -> Iterator[str]:
    """The module's server with no lease and no joined worker left by the previous test."""
    yield metadata
    with psycopg.connect(metadata, autocommit=True) as c:
        c.execute("delete from leases")
        c.execute("delete from workers")


def workers(url: str) -> set[str]:
    with psycopg.connect(url) as c:
        return {r[0] for r in c.execute("select url from workers")}


def test_an_unrenewed_lease_is_taken_over_after_it_expires_and_only_then(url):
    old, new = Leadership(url, lease_seconds=2), Leadership(url, lease_seconds=2)
    try:
        assert old.try_acquire() and old.holds()
        took = time.monotonic()
        assert not new.try_acquire()  # held and live; the old one keeps its session (and its advisory lock)
        wait_for(new.try_acquire, 10, "the takeover of an expired lease")  # the old one is "frozen": no renewal
        assert time.monotonic() - took >= 1.8  # not before the lease ran out (2 s by the database's clock)
        assert new.token == old.token + 1  # a new fencing token
        assert not old.holds() and not old.renew()  # lapsed by its own clock, and the row is no longer its
        assert new.renew() and new.holds()
    finally:
        old.close()
        new.close()


def test_the_old_leader_s_writes_are_refused_after_a_takeover_and_change_nothing(url):
    old, new = Leadership(url, lease_seconds=60), Leadership(url, lease_seconds=60)
    stale, current = MetadataStore(url), MetadataStore(url)
    try:
        assert old.try_acquire()
        old.fence(stale)
        stale.add_worker("http://w1", "default")  # while it leads: written
        with psycopg.connect(url, autocommit=True) as c:  # the takeover as an expired lease gets it
            c.execute("update leases set expires = now() - interval '1 second'")
        assert new.try_acquire()
        new.fence(current)
        assert old.holds()  # by its own clock the old leader does not know yet: the token check refuses it
        with pytest.raises(LeadershipLost, match="taken over by another master"):
            stale.add_worker("http://w2", "default")
        with pytest.raises(LeadershipLost):
            stale.place("demo.stream_graph.g", "http://w1")  # a read, then a write: nothing of it lands
        with pytest.raises(LeadershipLost):
            stale.add_event("SUBMIT", "x", time.time())
        assert workers(url) == {"http://w1"} and stale.placements() == {} and stale.list_events() == []
        current.add_worker("http://w3", "default")  # the new leader writes
        assert workers(url) == {"http://w1", "http://w3"}
    finally:
        stale.dispose()
        current.dispose()
        old.close()
        new.close()


def test_a_leader_whose_lease_lapsed_writes_nothing_even_if_nobody_took_over(url):
    leader, store = Leadership(url, lease_seconds=1), MetadataStore(url)
    try:
        assert leader.try_acquire()
        leader.fence(store)
        wait_for(lambda: not leader.holds(), 5, "the lease lapsing")  # as after a SIGSTOP longer than the lease
        with pytest.raises(LeadershipLost):
            store.add_worker("http://w1", "default")
        leader._valid_until = time.monotonic() + 60  # its clock aside, the database's expiry refuses it too
        with pytest.raises(LeadershipLost):
            store.add_worker("http://w1", "default")
        assert workers(url) == set() and not leader.renew()
    finally:
        store.dispose()
        leader.close()


def test_a_takeover_waits_for_a_fenced_write_in_flight(url):
    """The token check holds the lease row (FOR SHARE) until the write commits: a takeover cannot slip between."""
    leader, store = Leadership(url, lease_seconds=60), MetadataStore(url)
    try:
        assert leader.try_acquire()
        leader.fence(store)
        taken = threading.Event()

        def take_over() -> None:
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("update leases set token = token + 1")
            taken.set()

        with store.engine.begin() as c:
            c.execute(sa.text("insert into workers (url, compute_group) values ('http://w', 'g')"))
            thread = threading.Thread(target=take_over)
            thread.start()
            wait_for(lambda: lock_waits(url) > 0, 10, "the takeover waiting for the write's transaction")
            assert not taken.is_set()
        thread.join(10)
        assert taken.is_set() and workers(url) == {"http://w"}  # the write landed first, then the takeover
        with pytest.raises(LeadershipLost):
            store.add_worker("http://x", "default")
    finally:
        store.dispose()
        leader.close()


def lock_waits(url: str) -> int:
    with psycopg.connect(url) as c:
        return int(c.execute("select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
                             "and query like 'update leases%%'").fetchone()[0])


def test_a_lease_whose_holder_s_session_ended_is_taken_at_once(url):
    old, new = Leadership(url, lease_seconds=3600), Leadership(url, lease_seconds=3600)
    try:
        assert old.try_acquire() and old.renew()  # the renewal records that it holds the advisory lock
        assert not new.try_acquire()
        old._conn.close()  # its process killed: the server ends its session and releases the lock
        wait_for(new.try_acquire, 10, "the takeover through the advisory lock")
        assert new.token == old.token + 1
    finally:
        old.close()
        new.close()


def test_two_standbys_racing_for_an_expired_lease_one_wins(url):
    first = Leadership(url, lease_seconds=60)
    racers = [Leadership(url, lease_seconds=60) for _ in range(4)]
    try:
        assert first.try_acquire()
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("update leases set expires = now() - interval '1 second'")
        won: list[bool] = []
        threads = [threading.Thread(target=lambda r=r: won.append(r.try_acquire())) for r in racers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(won) == [False, False, False, True]
    finally:
        for leadership in (first, *racers):
            leadership.close()


def test_the_lease_connection_has_tcp_keepalives_and_sqlite_has_no_fence(url, tmp_path):
    leader = Leadership(url, lease_seconds=10)
    try:
        params = leader._conn.info.get_parameters()
        assert params["keepalives"] == "1" and int(params["keepalives_idle"]) <= 10
        assert int(params["tcp_user_timeout"]) == 10_000
    finally:
        leader.close()
    with pytest.raises(ConfigurationError, match="needs the metadata in PostgreSQL"):
        MetadataStore.in_directory(tmp_path).set_fencing_token(1)
    with pytest.raises(ConfigurationError, match="at least 1"):
        Leadership(url, lease_seconds=0.5)


def test_the_api_of_a_master_whose_lease_lapsed_answers_standby():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from headwater.service.leader import LeaseGuard

    class Lease:
        valid = True

        def holds(self) -> bool:
            return self.valid

    app, lease = FastAPI(), Lease()

    @app.get("/v1/ok")
    def ok() -> dict[str, str]:
        return {"ok": "yes"}

    @app.get("/v1/write")
    def write() -> None:
        raise LeadershipLost("taken over")

    client = TestClient(LeaseGuard(app, lease))  # type: ignore[arg-type]
    assert client.get("/v1/ok").json() == {"ok": "yes"}
    refused = client.get("/v1/write")  # a write refused mid-request: clients move on, as from a standby
    assert refused.status_code == 503 and refused.json()["error"] == "StandbyMaster"
    lease.valid = False
    lapsed = client.get("/v1/ok")
    assert lapsed.status_code == 503 and "lost its lease" in lapsed.json()["message"]
