"""A map(fn) graph submitted over HTTP runs on Spark while the master keeps its function as opaque bytes:
the function is loaded only by the worker (when it starts the graph) and runs in Spark's Python workers.
The security side is in tests/security/test_no_pickle_on_master.py."""

from __future__ import annotations

import json
import os
import traceback

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from headwater.api.session import Session
from headwater.plan import document
from headwater.runtime.access import AccessControl
from headwater.runtime.embedded import embedded_master
from headwater.service.auth import Authenticator
from headwater.service.client import RemoteMaster
from headwater.service.server import create_app

pytestmark = pytest.mark.spark


def test_a_map_function_is_loaded_only_where_the_graph_runs(spark, tmp_path, monkeypatch):
    loads: list[list[str]] = []  # the call stack of every load of a plan's function in this process
    real = document.load_callable

    def recording(fn):
        loads.append([f"{f.filename}:{f.name}" for f in traceback.extract_stack()])
        return real(fn)

    monkeypatch.setattr(document, "load_callable", recording)

    def tagged(batch: pd.DataFrame) -> pd.DataFrame:
        return batch.assign(y=batch["x"] * 2, pid=os.getpid())

    master = embedded_master(tmp_path / "data", driver_batch_rows=0)  # every batch runs in Spark's Python workers
    auth = Authenticator(master.store)
    auth.add_user("alice", "alice-pw")
    AccessControl(master.store).grant("admin", "alice", "manage", "demo")  # every privilege in demo, udf too
    client = TestClient(create_app(master, auth), base_url="http://testserver")
    session = Session(RemoteMaster("http://testserver", user="alice", password="alice-pw", http=client))
    session.use_catalog("demo")
    try:
        g = session.stream_graph("g")
        g.source("t", schema={"k": "string", "x": "double"}).map(tagged).sink("out")
        sent = json.loads(g.to_json())["callables"]
        g.submit()
        stored = session.stream_graph_info("g")["document"]["callables"]
        assert stored == sent  # the master stored the bytes it was sent
        session.append("t", pd.DataFrame({"k": ["a", "b"], "x": [1.0, 2.0]}))
        session.wait_until_caught_up("g")
        session.stop_stream_graph("g")
        session.start_stream_graph("g")  # the master rebuilds the plan from its stored document, still opaque
        session.append("t", pd.DataFrame({"k": ["c"], "x": [3.0]}))
        session.wait_until_caught_up("g")
        out = session.sql("select * from out order by x").to_pandas()
        assert out["y"].tolist() == [2.0, 4.0, 6.0]
        assert os.getpid() not in set(out["pid"])  # it ran in Spark's Python workers
        assert len(loads) == 2  # one load per start, each by the worker handling StartGraph
        for stack in loads:
            assert any(frame.endswith("runtime/worker.py:handle") for frame in stack), stack
    finally:
        session.close()
        client.close()
        master.close()
