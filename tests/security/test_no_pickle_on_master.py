"""No user code on the master (issue 19, item 3): a plan's Python functions stay opaque bytes there.

Each document carries a pickle whose ``__reduce__`` writes a file when it is loaded. Through the HTTP app and
the embedded master (submit, stop/start, resubmit, drop, meta, restart and recovery) the file is never written,
and the worker is sent the bytes unchanged. A pickle anywhere a plan allows none, an unused callables entry, or
a type outside the codec's list is refused before anything is loaded, even where graphs run. A ``map(fn)``
graph still runs once its document has been through the master (in process here; on Spark in
tests/spark/test_no_pickle_on_master.py).
"""

from __future__ import annotations

import base64
import json
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

import headwater as hw
from headwater.api.session import Session
from headwater.catalog import resolve
from headwater.dataplane.local import run_local
from headwater.functions import generic_state_iterate
from headwater.plan.callables import OpaqueCallable
from headwater.plan.document import dumps, from_json, needs_udf, to_json
from headwater.runtime.access import AccessControl
from headwater.runtime.embedded import embedded_master
from headwater.runtime.master import Master
from headwater.runtime.protocol import Message, StartGraph, StopGraph
from headwater.service.auth import Authenticator
from headwater.service.server import create_app
from headwater.storage.metadata import graphs

FQN = "demo.stream_graph.g"


def doubled(batch: pd.DataFrame) -> pd.DataFrame:
    return batch.assign(y=batch["x"] * 2)


class WritesFile:
    """Unpickling this writes ``path``: what a hostile caller would put in a plan's callables."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return Path.write_text, (Path(self.path), "pwned")


def payload(marker: Path) -> str:
    return base64.b64encode(pickle.dumps(WritesFile(marker))).decode("ascii")


class RecordingWorker:
    """A worker port that keeps what the master sends and runs nothing (so nothing here loads a plan)."""

    name = "recording"
    stops_with_master = False

    def __init__(self) -> None:
        self.plans: list[str] = []
        self.running: set[str] = set()

    def request(self, message: Message) -> Any:
        if isinstance(message, StartGraph):
            self.plans.append(message.plan)
            self.running.add(message.fqn)
        elif isinstance(message, StopGraph):
            self.running.discard(message.fqn)
        name = type(message).__name__
        return {"IsRunning": lambda: getattr(message, "fqn", None) in self.running, "TaskStatus": list,
                "Health": dict, "Progress": dict, "ControlEngine": lambda: 1}.get(name, lambda: None)()


def build(session: Session) -> hw.StreamGraph:
    g = session.stream_graph("g")
    src = g.source("t", schema={"k": "string", "x": "double"})
    src.map(doubled).sink("out")
    src.reactive_state_engine(metrics=["cumsum(x) as c"], key_column="k").sink("sums")
    return g


@pytest.fixture
def benign(tmp_path) -> str:
    """The document of a map(fn) graph, as a client sends it."""
    session = hw.connect(tmp_path / "client", start_spark=False)
    session.use_catalog("demo")
    try:
        return build(session).to_json()
    finally:
        session.close()


def hostile(document: str, marker: Path) -> str:
    """``document`` with its map's function replaced by the file-writing pickle (in the function's own slot)."""
    doc = json.loads(document)
    (name,) = doc["callables"]
    doc["callables"][name] = payload(marker)
    return json.dumps(doc)


def stored_callables(plan: str) -> dict[str, str]:
    return dict(json.loads(plan)["callables"])


def test_the_payload_is_live_where_graphs_run(benign, tmp_path):
    """The control: loading the document where a graph runs does run the pickle (so 'not written' means something)."""
    marker = tmp_path / "pwned"
    from_json(hostile(benign, marker), load_callables=True)
    assert marker.read_text() == "pwned"


@pytest.fixture
def served(tmp_path) -> Iterator[tuple[Master, RecordingWorker, TestClient, dict[str, str]]]:
    worker = RecordingWorker()
    master = embedded_master(tmp_path / "data", start_spark=False, worker=worker)
    auth = Authenticator(master.store)
    auth.add_user("mallory", "mallory-pw")
    AccessControl(master.store).grant("admin", "mallory", "manage", "demo")  # every privilege in demo, udf too
    client = TestClient(create_app(master, auth), base_url="http://testserver")
    token = client.post("/v1/login", json={"user": "mallory", "password": "mallory-pw"}).json()["token"]
    yield master, worker, client, {"Authorization": f"Bearer {token}"}
    client.close()
    master.close()


def test_a_pickle_submitted_over_http_is_never_loaded_by_the_master(served, benign, tmp_path):
    master, worker, client, headers = served
    marker = tmp_path / "pwned"
    document = hostile(benign, marker)

    def post(path: str, body: dict[str, Any]) -> Any:
        r = client.post(path, json=body, headers=headers)
        assert r.status_code == 200, r.text
        return r.json()

    post("/v1/submit", {"document": document})
    assert worker.plans and stored_callables(worker.plans[-1]) == json.loads(document)["callables"]  # bytes as sent
    post("/v1/submit", {"document": document})  # the same definition again
    for path in ("/v1/graph_info", "/v1/graph_meta", "/v1/engine_meta", "/v1/checkpoint_jobs",
                 "/v1/checkpoint_subjobs", "/v1/stop_graph", "/v1/start_graph"):
        post(path, {"fqn": FQN})
    r = client.post("/v1/control_engine", json={"engine": "demo.stream_engine.none", "op": {}}, headers=headers)
    assert r.json()["error"] == "CatalogError", r.text  # after looking through every running graph's engines
    post("/v1/drop_graph", {"fqn": FQN, "include_tables": False})
    post("/v1/resubmit_graph", {"fqn": FQN})  # a destroyed graph, anew from its stored document
    assert master.graph_meta(None)[-1]["status"] == "running"
    assert len(worker.plans) == 3 and all(stored_callables(p) == stored_callables(document) for p in worker.plans)
    assert not marker.exists()


def _store_hostile(master: Master, worker: RecordingWorker, benign: str, marker: Path) -> None:
    """Submit the benign graph, then replace its stored document by the hostile one (as a master would have
    stored it had it been submitted over HTTP)."""
    logical, physical = from_json(benign, load_callables=True)
    assert physical is not None
    master.submit(logical, physical)
    with master.store.engine.begin() as c:
        c.execute(sa.update(graphs).where(graphs.c.fqn == FQN).values(graph_json=hostile(benign, marker)))
    worker.plans.clear()


def _graph() -> Any:
    return resolve(FQN, "stream_graph", current_catalog=None)


def _control_an_engine(master: Master) -> None:
    with pytest.raises(hw.CatalogError):  # after looking through every running graph's engines
        master.control_engine(resolve("demo.stream_engine.none", "stream_engine", current_catalog=None), {})


OPERATIONS: dict[str, Callable[[Master], Any]] = {
    "start a stopped graph": lambda m: m.start_graph(_graph()),
    "resubmit a failed graph": lambda m: m.resubmit_graph(_graph()),
    "drop": lambda m: m.drop_graph(_graph(), include_tables=False),
    "engine meta": lambda m: m.engine_meta(_graph()),
    "checkpoint jobs": lambda m: m.checkpoint_jobs(None),
    "control an engine": _control_an_engine,
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_the_embedded_master_keeps_a_stored_pickle_opaque(tmp_path, benign, operation):
    worker = RecordingWorker()
    master = embedded_master(tmp_path / "data", start_spark=False, worker=worker)
    marker = tmp_path / "pwned"
    try:
        _store_hostile(master, worker, benign, marker)
        rec = master.store.active_graph(FQN)
        assert rec is not None
        if operation == "start a stopped graph":
            master.stop_graph(_graph())
        if operation == "resubmit a failed graph":
            master.store.set_status(rec.id, "failed", "it failed")
        OPERATIONS[operation](master)
        if operation in ("start a stopped graph", "resubmit a failed graph"):  # the worker gets the bytes as stored
            assert [stored_callables(p) for p in worker.plans] == [stored_callables(hostile(benign, marker))]
    finally:
        master.close()
    assert not marker.exists()


def test_a_restarted_master_recovers_a_stored_pickle_without_loading_it(tmp_path, benign):
    data = tmp_path / "data"
    marker = tmp_path / "pwned"
    master = embedded_master(data, start_spark=False, worker=RecordingWorker())
    try:
        _store_hostile(master, master.worker, benign, marker)  # type: ignore[arg-type]
    finally:
        master.close()
    worker = RecordingWorker()
    master = embedded_master(data, worker=worker)  # recovers what was running, in the background
    try:
        master.wait_until_caught_up(resolve(FQN, "stream_graph", current_catalog=None), timeout=60)
        assert master.graph_meta(None)[-1]["status"] == "running"
        assert [stored_callables(p) for p in worker.plans] == [stored_callables(hostile(benign, marker))]
    finally:
        master.close()
    assert not marker.exists()


def _node(doc: dict[str, Any], node_type: str) -> dict[str, Any]:
    return next(n["definition"] for n in doc["logical"]["nodes"] if n["type"] == node_type)


def _evil(doc: dict[str, Any], marker: Path) -> dict[str, Any]:
    doc["callables"]["evil"] = payload(marker)
    return {"$callable": "evil"}


def _in_table_name(doc: dict[str, Any], marker: Path) -> None:
    _node(doc, "TABLE")["name"] = _evil(doc, marker)


def _in_map_filter(doc: dict[str, Any], marker: Path) -> None:
    _node(doc, "MAP")["filter"] = _evil(doc, marker)


def _in_map_exprs(doc: dict[str, Any], marker: Path) -> None:
    _node(doc, "MAP")["exprs"] = [["y", _evil(doc, marker)]]


def _in_a_parameter_that_takes_none(doc: dict[str, Any], marker: Path) -> None:
    _node(doc, "REACTIVE_STATE_ENGINE")["spec"]["metrics"] = [
        {"$type": "Call", "func": "generic_state_iterate",
         "args": [{"$type": "Col", "name": "x"}, {"$type": "Col", "name": "x"}],
         "params": [["window", _evil(doc, marker)], ["func", "sum_add"]]}]


def _unused_entry(doc: dict[str, Any], marker: Path) -> None:
    _evil(doc, marker)


def _type_outside_the_list(doc: dict[str, Any], marker: Path) -> None:
    (name,) = doc["callables"]
    doc["callables"][name] = payload(marker)  # in its own slot, in a node decoded before the bad one
    doc["logical"]["nodes"][-1]["definition"]["$type"] = "Popen"


REFUSED: dict[str, tuple[Callable[[dict[str, Any], Path], None], str]] = {
    "pickle as a table's name": (_in_table_name, "where the plan allows none"),
    "pickle as a map's filter": (_in_map_filter, "where the plan allows none"),
    "pickle as a map's expression": (_in_map_exprs, "where the plan allows none"),
    "pickle as a parameter that takes none": (_in_a_parameter_that_takes_none, "where the plan allows none"),
    "callables entry no node uses": (_unused_entry, "not used by any node"),
    "type outside the codec's list": (_type_outside_the_list, "unknown type 'Popen'"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_pickle_where_none_is_allowed_is_refused_before_anything_loads(served, benign, tmp_path, case):
    _, worker, client, headers = served
    mutate, message = REFUSED[case]
    marker = tmp_path / "pwned"
    doc = json.loads(benign)
    mutate(doc, marker)
    with pytest.raises(hw.GraphDefinitionError, match=message):
        from_json(json.dumps(doc), load_callables=True)  # even where graphs run
    r = client.post("/v1/submit", json={"document": json.dumps(doc)}, headers=headers)
    assert r.status_code == 422 and r.json()["error"] == "GraphDefinitionError", r.text
    assert message in r.json()["message"]
    assert not worker.plans and not marker.exists()


def test_needs_udf_tells_graphs_with_python_functions(tmp_path, benign):
    session = hw.connect(tmp_path / "s", start_spark=False)
    session.use_catalog("demo")
    try:
        plain = session.stream_graph("plain")
        plain.source("t", schema={"k": "string", "x": "double"}).map(["k", "x * 2 as y"]).sink("out")
        stateful = session.stream_graph("stateful")
        stateful.source("t2", schema={"k": "string", "x": "double"}).reactive_state_engine(
            metrics=[generic_state_iterate("x", "x", window=1, func=lambda last, x: last[0] + x)],
            key_column="k").sink("o2")
        assert not needs_udf(plain.to_json()) and not needs_udf(plain._graph)
        assert needs_udf(stateful.to_json()) and needs_udf(stateful._graph)
    finally:
        session.close()
    marker = tmp_path / "pwned"
    assert needs_udf(benign) and needs_udf(hostile(benign, marker))
    assert needs_udf(from_json(hostile(benign, marker), load_callables=False)[0])
    assert not marker.exists()


def test_a_map_graph_runs_in_process_after_its_document_went_through_the_master(benign, tmp_path):
    """Client -> master (opaque, re-encoded as it stores and sends it) -> worker (loads) -> the same rows."""
    logical, physical = from_json(benign, load_callables=False)
    assert physical is not None
    fn = next(n.fn for n in physical.nodes.values() if getattr(n, "fn", None) is not None)  # type: ignore[attr-defined]
    assert isinstance(fn, OpaqueCallable)
    with pytest.raises(hw.ExecutionError, match="not loaded in this process"):
        run_local(physical, {"t": pd.DataFrame({"k": ["a"], "x": [1.0]})}, tmp_path / "opaque")
    sent = dumps(to_json(logical, physical))
    assert json.loads(sent)["callables"] == json.loads(benign)["callables"]  # byte for byte
    _, loaded = from_json(sent, load_callables=True)
    assert loaded is not None
    frame = pd.DataFrame({"k": ["a", "b", "a"], "x": [1.0, 2.0, 3.0]})
    out = run_local(loaded, {"t": frame}, tmp_path / "run")
    assert out["out"]["y"].tolist() == [2.0, 4.0, 6.0]
    assert out["sums"]["c"].tolist() == [1.0, 2.0, 4.0]


def keep(variables: dict[str, Any], batch: pd.DataFrame) -> pd.DataFrame:
    return batch


def tick(path: str) -> None:
    Path(path).write_text("tick")


@pytest.mark.parametrize("engine", ["udf_engine", "timer_engine"])
def test_udf_and_timer_engines_functions_stay_opaque_on_the_master(served, tmp_path, engine):
    """udf_engine's function and initial values, timer_engine's function: each replaced by the payload, submitted
    over HTTP, the timer paused and resumed through the master: nothing is loaded."""
    _, worker, client, headers = served
    session = hw.connect(tmp_path / "client", start_spark=False)
    session.use_catalog("demo")
    g = session.stream_graph("g")
    src = g.source("t", schema={"k": "string", "x": "double"})
    stream = src.udf_engine(keep, variables={"n": 0}) if engine == "udf_engine" else \
        src.timer_engine("1s", tick, str(tmp_path / "ticked"))
    stream.set_engine_name("user_code").sink("out")
    doc = json.loads(g.to_json())
    session.close()
    marker = tmp_path / "pwned"
    assert set(doc["callables"]) == ({"keep", "InitialValues"} if engine == "udf_engine" else {"tick"})
    doc["callables"] = {name: payload(marker) for name in doc["callables"]}
    r = client.post("/v1/submit", json={"document": json.dumps(doc)}, headers=headers)
    assert r.status_code == 200, r.text
    assert stored_callables(worker.plans[-1]) == doc["callables"]
    for op in ("stop_timer_engine", "resume_timer_engine"):
        r = client.post("/v1/control_engine", json={"engine": "demo.stream_engine.user_code", "op": {"op": op}},
                        headers=headers)
        if engine == "udf_engine":  # refused by the spec the master rebuilt, functions unloaded
            assert r.json()["error"] == "GraphDefinitionError" and "accepts no changes" in r.text, r.text
    assert not marker.exists() and not (tmp_path / "ticked").exists()
