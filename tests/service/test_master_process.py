"""``headwater master`` as a real process: a graph submitted by one client keeps running after that client's
process exits, a second client appends and reads results equal to a pandas reference, and the graph
resumes when the master process is restarted, losing and duplicating nothing. Once with the catalog in
SQLite, once in a real PostgreSQL server."""

from __future__ import annotations

import pandas as pd
import pytest

import headwater as hw
from tests.support.postgres import free_port, postgres_server
from tests.support.service import (
    append_and_check,
    connect,
    reference,
    results,
    rows,
    start,
    stop,
    submit_from_another_process,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(params=["sqlite", "postgresql"])
def metadata(request):
    """Where the master keeps its catalog: SQLite in the data directory, or a real PostgreSQL server."""
    if request.param == "sqlite":
        yield []
    else:
        with postgres_server() as url:
            yield ["--metadata", url]


def test_a_graph_outlives_its_client_and_its_master_process(tmp_path, metadata):
    data, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    master = start("master", data, port, *metadata)
    try:
        submit_from_another_process(url)
        # the submitting client's process has exited; a second client finds the graph running
        session = connect(url)
        assert session.stream_graph_meta("totals").iloc[-1]["status"] == "running"
        first = rows(300, seed=1, start=0)
        for i in range(0, 300, 100):
            assert session.append("ticks", first.iloc[i:i + 100]) == i // 100 + 1  # the committed version
        session.wait_until_caught_up("totals", timeout=300)
        pd.testing.assert_frame_equal(results(session), reference(first), check_dtype=False)
        session.close()

        stop(master)  # the master process ends; the graph is still 'running' in its catalog
        master = start("master", data, port, *metadata)
        session = connect(url)
        append_and_check(session, rows(200, seed=2, start=300), first)
        with pytest.raises(hw.SqlError):
            session.sql("drop table out")
        session.close()
    finally:
        stop(master)
