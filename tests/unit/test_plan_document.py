"""The plan is data: graphs round-trip through their JSON document, and bad documents are refused clearly."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import sqlalchemy as sa

import headwater as hw
from headwater.engines.base import EngineKind
from headwater.engines.catalog import SPECS
from headwater.plan.codec import TYPES
from headwater.plan.document import PLAN_VERSION, dumps, from_json, same_definition, to_json
from headwater.plan.physical import Partitioning
from headwater.plan.render import explain_logical, explain_physical
from headwater.storage.metadata import MetadataStore
from headwater.types import TableKind
from tests.support.indicators import build_indicator_graph

TRADES = {"sym": "string", "time": "timestamp", "px": "double", "qty": "long", "buyer": "string", "seller": "string"}


def add_notional(batch: pd.DataFrame) -> pd.DataFrame:
    return batch.assign(notional=batch["px"] * batch["qty"])


def every_kind_graph(session: hw.Session) -> hw.StreamGraph:
    """One graph holding every engine kind, both kinds of map, keyed tables and a fan-out."""
    g = session.stream_graph("all")
    src = g.source("trades", schema=TRADES)
    src.time_series_engine(window="1min", step="1min", metrics=["first(px) as open", "sum(qty) as qty"],
                           time_column="time",
                           key_column="sym", fill=0.0).keyed_sink("bars", "sym")
    mapped = src.map(["sym", "time", "px * 2 as px2", "qty"], where="px > 0 and qty % 2 == 1")
    mapped.parallelize("sym", 3).reactive_state_engine(
        metrics=["time", "mavg(px2, 3) as m", "cumsum(qty) as c"], key_column="sym", filter="px2 > 1.5").sink("moving")
    src.map(add_notional).map(lambda b: b.head(len(b))).sink("notional")
    src.narrow_reactive_state_engine(metrics=["px", "cumsum(qty) as f"], metric_names=["factor"],
                                     key_column="sym").sink("narrow")
    src.dual_ownership_reactive_state_engine(metrics1=["cumsum(qty) as b"], metrics2=["cumsum(qty) as s"],
                                             key_column1="buyer", key_column2="seller").sink("dual")
    g.source("cells", schema={"product": "string", "metric": "string", "value": "double"}).reactive_stateless_engine(
        metrics=[{"output": "B:value", "formula": "a + b", "variables": {"a": "A:f1", "b": "A:f2"}}],
        key_column=["product", "metric"], value_column="value").sink("cells_out")
    return g


@pytest.fixture(params=["indicators", "every_kind"])
def graph(request, session):
    return build_indicator_graph(session) if request.param == "indicators" else every_kind_graph(session)


@pytest.mark.parametrize("load_callables", [True, False], ids=["loaded", "opaque"])
def test_graphs_round_trip_through_json(graph, load_callables):
    """Loaded (where a graph runs) or kept as bytes (the master), a document reads back to itself."""
    doc = to_json(graph._graph, graph.plan())
    logical, physical = from_json(dumps(doc), load_callables=load_callables)
    assert physical is not None
    assert to_json(logical, physical) == doc
    assert explain_logical(logical) == explain_logical(graph._graph)
    assert explain_physical(physical) == explain_physical(graph.plan())
    assert json.loads(dumps(doc)) == doc  # plain JSON: no NaN, nothing Python-only


def test_a_plan_with_state_functions_reads_back_where_they_are_not_defined(graph, monkeypatch):
    """A master or worker process has not imported the module that declared the client's @state functions."""
    from headwater.functions import STATE_FUNCTIONS

    doc = to_json(graph._graph, graph.plan())
    for name in list(STATE_FUNCTIONS):
        monkeypatch.delitem(STATE_FUNCTIONS, name)
    logical, physical = from_json(dumps(doc), load_callables=False)
    assert to_json(logical, physical) == doc


def test_decoded_graph_computes_the_same_rows(session, tmp_path):
    from headwater.dataplane.local import run_local

    g = every_kind_graph(session)
    ticks = pd.DataFrame({"sym": ["a", "b", "a", "b", "a"], "time": pd.date_range("2026-01-05 09:30", periods=5,
                                                                                   freq="40s"),
                          "px": [1.0, 2.0, 3.0, 0.5, 4.0], "qty": [1, 3, 5, 7, 9], "buyer": list("xyxyx"),
                          "seller": list("pqpqp")})
    cells = pd.DataFrame({"product": ["A", "A"], "metric": ["f1", "f2"], "value": [1.0, 2.0]})
    inputs = {"trades": [ticks.iloc[:2], ticks.iloc[2:]], "cells": cells}
    _, physical = from_json(g.to_json(), load_callables=True)
    assert physical is not None
    decoded = run_local(physical, inputs, tmp_path / "decoded")
    original = g.run_local(inputs)
    assert decoded.keys() == original.keys()
    for name in original:
        pd.testing.assert_frame_equal(decoded[name], original[name])
    assert len(decoded["notional"]) == 5 and "notional" in decoded["notional"]


def test_only_user_functions_are_pickled_each_by_name(session):
    doc = json.loads(every_kind_graph(session).to_json())
    assert set(doc["callables"]) == {"add_notional", "every_kind_graph.<locals>.<lambda>"}
    text = json.dumps({k: v for k, v in doc.items() if k != "callables"})
    assert '"$callable": "add_notional"' in text


def test_functions_of_the_same_name_are_kept_apart(session, tmp_path):
    g = session.stream_graph("g")
    src = g.source("t", schema={"x": "double"})
    src.map(lambda b: b.assign(x=b["x"] + 1)).sink("plus")
    src.map(lambda b: b.assign(x=b["x"] * 10)).sink("times")
    doc = json.loads(g.to_json())
    assert len(doc["callables"]) == 2
    out = from_json(doc, load_callables=True)[1]
    assert out is not None
    from headwater.dataplane.local import run_local

    rows = run_local(out, {"t": pd.DataFrame({"x": [1.0]})}, tmp_path / "run")
    assert rows["plus"]["x"].tolist() == [2.0] and rows["times"]["x"].tolist() == [10.0]


def test_enums_name_kinds_and_partitioning(session):
    physical = build_indicator_graph(session).plan()
    assert {type(t.table_kind) for t in physical.tables()} == {TableKind}
    assert {e.partition for e in physical.edges} == {Partitioning.SHUFFLE, Partitioning.FORWARD}
    assert {EngineKind(n.type) for n in physical.nodes.values() if n.type != "TABLE"} == {
        EngineKind.TIME_SERIES, EngineKind.REACTIVE_STATE}


def test_every_engine_kind_can_be_stored():
    assert set(SPECS) == set(EngineKind)
    assert all(TYPES[spec.__name__] is spec for spec in SPECS.values())


def test_resubmitting_recognises_the_same_definition(session):
    a = every_kind_graph(session).to_json()
    doc = json.loads(a)
    doc["callables"] = {k: "AAAA" for k in doc["callables"]}  # another process pickles other bytes
    assert same_definition(a, json.dumps(doc))
    doc["logical"]["nodes"][0]["name"] = "other"
    assert not same_definition(a, json.dumps(doc))


def _doc(session) -> dict:
    return json.loads(build_indicator_graph(session).to_json())


BAD_DOCUMENTS = [
    ("not json", lambda d: "{nope", "not JSON"),
    ("a list", lambda d: [1, 2], "expected an object"),
    ("old version", lambda d: {**d, "version": 2}, "plan version 2 is not supported"),
    ("future version", lambda d: {**d, "version": PLAN_VERSION + 1}, "is not supported"),
    ("no fqn", lambda d: {k: v for k, v in d.items() if k != "fqn"}, "'fqn' must be a string"),
    ("unknown type", lambda d: _set(d, ["logical", "nodes", 0, "definition", "$type"], "os.system"),
     "unknown type 'os.system'"),
    ("a builtin type", lambda d: _set(d, ["logical", "nodes", 0, "definition", "$type"], "type"), "unknown type"),
    ("unknown field", lambda d: _set(d, ["logical", "nodes", 0, "definition", "evil"], 1), "has no field 'evil'"),
    ("bad role", lambda d: _set(d, ["logical", "nodes", 0, "definition", "role"], "rm -rf"), "'rm -rf' is not a valid"),
    ("code in an expression", lambda d: _set_metric(d, "__import__('os').system('touch /tmp/pwned')"),
     "unsupported syntax"),
    ("unknown function", lambda d: _set_metric(d, "no_such_fn(close)"), "unknown"),
    ("callable outside its slot", lambda d: _set(d, ["logical", "nodes", 0, "definition", "fqn"], {"$callable": "x"}),
     "where the plan allows none"),
    ("tag with extra keys", lambda d: _set(d, ["logical", "nodes", 0, "definition", "schema"],
                                           {"$expr": "x", "$type": "Schema"}), "exactly one of"),
    ("callable not base64", lambda d: {**d, "callables": {"f": "!!"}}, "not valid base64"),
    ("edge to nowhere", lambda d: _set(d, ["logical", "edges", 0, "outNodeId"], 99), "refers to a node"),
    ("cycle", lambda d: _append(d, ["logical", "edges"], {"inNodeId": 4, "outNodeId": 0}), "cycle"),
    ("node without definition", lambda d: _delete(d, ["logical", "nodes", 0, "definition"]), "needs its 'definition'"),
    ("duplicate node", lambda d: _append(d, ["logical", "nodes"], d["logical"]["nodes"][0]), "duplicate"),
    ("id mismatch", lambda d: _set(d, ["logical", "nodes", 0, "id"], 7), "bad or duplicate"),
    ("bad partitioning", lambda d: _set(d, ["physical", "edges", 0, "partitionType"], "BROADCAST"),
     "partitionType"),
    ("subgraph to nowhere", lambda d: _set(d, ["physical", "subgraphs", 0, "chain"], [42]), "node 42"),
    ("engine that no longer validates", lambda d: _set_window(d, {"$timedelta": -5}), "window"),
    ("too deep", lambda d: _set(d, ["logical", "nodes", 0, "definition", "key_columns"], _deep(500)), "deeper"),
]


def _walk(doc, path):
    target = doc
    for p in path[:-1]:
        target = target[p]
    return target


def _set(doc, path, value):
    _walk(doc, path)[path[-1]] = value
    return doc


def _append(doc, path, value):
    _walk(doc, path)[path[-1]].append(value)
    return doc


def _delete(doc, path):
    del _walk(doc, path)[path[-1]]
    return doc


def _set_metric(doc, text):
    doc["logical"]["nodes"][3]["definition"]["spec"]["metrics"][5] = {"$expr": text}
    return doc


def _set_window(doc, value):
    doc["logical"]["nodes"][1]["definition"]["spec"]["window"] = value
    return doc


def _deep(n):
    value: list = []
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize(("case", "mutate", "message"), BAD_DOCUMENTS, ids=[c[0] for c in BAD_DOCUMENTS])
def test_bad_documents_are_refused_with_a_clear_error(session, case, mutate, message, tmp_path):
    bad = mutate(_doc(session))
    with pytest.raises(hw.GraphDefinitionError, match=message) as info:
        from_json(bad if isinstance(bad, str) else json.dumps(bad), load_callables=True)
    assert len(str(info.value)) <= 2000
    assert not (tmp_path / "pwned").exists()


def test_a_store_of_pickled_graphs_is_refused_unread(session, tmp_path):
    """A data directory written before plans were data: the master refuses it rather than unpickle its graphs."""
    import cloudpickle

    g = build_indicator_graph(session)
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as c:
        c.execute(sa.text("CREATE TABLE stream_graphs (id INTEGER PRIMARY KEY, fqn VARCHAR NOT NULL, "
                          "status VARCHAR NOT NULL, semantics VARCHAR NOT NULL, create_time FLOAT NOT NULL, "
                          "reason VARCHAR NOT NULL, definition BLOB NOT NULL, graph_json TEXT NOT NULL)"))
        c.execute(sa.text("INSERT INTO stream_graphs VALUES (1, :fqn, 'running', 'exactly-once', 0, '', :d, '{}')"),
                  {"fqn": str(g.fqn), "d": cloudpickle.dumps(g._graph)})
    engine.dispose()
    store = MetadataStore(url)
    with pytest.raises(hw.ConfigurationError, match="stored pickled"):
        store.refuse_pickled_graphs()
    assert "definition" in {c["name"] for c in sa.inspect(store.engine).get_columns("stream_graphs")}  # untouched
    store.dispose()


def test_each_metric_is_parsed_once_when_encoded(session, monkeypatch):
    """Encoding tries an expression's text once per metric, never per sub-expression (deep trees stay linear)."""
    from headwater.plan import codec

    calls = []
    real = codec.parse_metric
    monkeypatch.setattr(codec, "parse_metric", lambda text, **kw: calls.append(text) or real(text, **kw))
    deep = " + ".join(f"mavg(px, {i + 2})" for i in range(40))
    g = session.stream_graph("deep")
    g.source("t", schema={"sym": "string", "px": "double"}).reactive_state_engine(
        metrics=[f"{deep} as s", "cumsum(px) as c"], key_column="sym").sink("out")
    doc = to_json(g._graph, None)
    assert len(calls) == 2  # the two metrics of the one engine node
    calls.clear()
    assert str(from_json(doc, load_callables=False)[0].nodes[1].spec.metrics[0]).startswith("mavg(px, window=2) + ")  # type: ignore[attr-defined]
