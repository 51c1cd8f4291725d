"""Orca's HA tables and graph configuration (issue 24 item 5): arguments checked, mapped and serialised — no Spark."""

from __future__ import annotations

import json

import pytest

import headwater as hw
from headwater.plan.document import from_json, to_json
from headwater.types import TableKind

TICKS = {"time": "timestamp", "sym": "string", "px": "double"}


@pytest.fixture
def session(tmp_path):
    s = hw.connect(tmp_path, start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


# -- HA tables ---------------------------------------------------------------------------------------------------
def test_ha_tables_are_the_plain_and_keyed_tables_with_their_arguments_recorded(session):
    g = session.stream_graph("ha")
    src = g.ha_source("ticks", TICKS, 2, 50_000)
    keyed = g.ha_keyed_source("refs", "sym", {"sym": "string", "name": "string"}, "group_a", 1000, retention_minutes=60)
    buf = src.ha_buffer("copy", 3, 2000)
    buf.ha_keyed_sink("latest", "sym", 3, 2000, 30)
    src.map(["sym", "px"]).ha_sink("out", 2, 10)
    keyed.ha_keyed_buffer("refs_copy", "sym", 2, 1000).sink("refs_out")
    tables = {n.name: n for n in g.logical_graph.nodes.values() if n.type == "TABLE"}
    kinds = {name: (str(t.role), t.table_kind) for name, t in tables.items()}
    assert kinds == {"ticks": ("source", TableKind.PLAIN), "refs": ("source", TableKind.KEYED),
                     "copy": ("buffer", TableKind.PLAIN), "latest": ("sink", TableKind.KEYED),
                     "out": ("sink", TableKind.PLAIN), "refs_copy": ("buffer", TableKind.KEYED),
                     "refs_out": ("sink", TableKind.PLAIN)}
    assert tables["ticks"].properties()["ha"] == {"raftGroup": 2, "cacheLimit": 50_000, "retentionMinutes": 1440}
    assert tables["refs"].properties()["ha"] == {"raftGroup": "group_a", "cacheLimit": 1000, "retentionMinutes": 60}
    # Orca raises a cache below 1000 rows to 1000; nothing is cached here, so the value is kept as given
    assert tables["out"].ha is not None and tables["out"].ha.cache_limit == 10
    assert tables["refs_out"].ha is None and "ha" not in tables["refs_out"].properties()
    assert tables["latest"].key_columns == ("sym",)
    text = g.explain()
    assert "ha={'raftGroup': 2, 'cacheLimit': 50000, 'retentionMinutes': 1440}" in text
    assert "ticks (public, plain, ha: durable as the data directory's storage)" in text


def test_ha_options_round_trip_through_the_graph_json(session):
    g = session.stream_graph("ha_json")
    g.ha_keyed_source("ticks", "sym", TICKS, "g2", 5000, 90.5).ha_sink("out", 2, 1000)
    doc = json.loads(g.to_json())
    logical, physical = from_json(doc, load_callables=False)
    assert to_json(logical, physical) == doc
    assert logical.nodes[0].ha == g.logical_graph.nodes[0].ha
    assert physical is not None and physical.nodes[1].ha is not None and physical.nodes[1].ha.raft_group == 2


@pytest.mark.parametrize(("args", "fragment"), [
    ((1, 1000), "raft_group: expected an int > 1"),
    ((0, 1000), "raft_group: expected an int > 1"),
    ((True, 1000), "raft_group: expected an int > 1"),
    (("", 1000), "raft_group: expected an int > 1"),
    (("group 2; drop", 1000), "raft_group: expected an int > 1"),
    ((2.0, 1000), "raft_group: expected an int > 1"),
    ((2, 0), "cache_limit: expected an int of rows"),
    ((2, 1000.0), "cache_limit: expected an int of rows"),
    ((2, 2**31), "cache_limit: expected an int of rows"),
    ((2, 1000, 0), "retention_minutes: expected a number of minutes > 0"),
    ((2, 1000, float("inf")), "retention_minutes: expected a number of minutes > 0"),
    ((2, 1000, "1d"), "retention_minutes: expected a number of minutes > 0"),
])
def test_ha_arguments_are_checked_as_orca_checks_them(session, args, fragment):
    g = session.stream_graph("bad_ha")
    with pytest.raises(hw.GraphDefinitionError, match=fragment) as info:
        g.ha_source("ticks", TICKS, *args)
    assert "ha_source 'ticks'" in str(info.value)
    src = g.source("plain", TICKS)
    with pytest.raises(hw.GraphDefinitionError, match=fragment) as info:
        src.ha_keyed_sink("out", "sym", *args)
    assert "ha_keyed_sink 'out'" in str(info.value)


def test_ha_table_declared_twice_with_other_options_is_refused(session):
    g = session.stream_graph("twice")
    src = g.source("ticks", TICKS)
    src.ha_sink("out", 2, 1000)
    with pytest.raises(hw.GraphDefinitionError, match="already declares this table with HA options"):
        src.map(["time", "sym", "px"]).ha_sink("out", 3, 1000)


def test_ha_retention_minutes_becomes_the_new_tables_replay_retention(tmp_path):
    from headwater.api.session import Session, embedded_master
    from tests.unit.test_graph_serial import Workers

    master = embedded_master(tmp_path, worker=Workers(), start_spark=False)
    session = Session.embedded(master)
    session.use_catalog("demo")
    g = session.stream_graph("ha_submit")
    g.ha_source("ticks", TICKS, 2, 1000, retention_minutes=90).map(["sym", "px"]).ha_keyed_sink("out", "sym", 2, 1000)
    g.submit()
    meta = session.stream_table_meta().set_index("fqn")["retention"].to_dict()
    assert meta == {"demo.stream_table.ticks": "90 minutes", "demo.stream_table.out": "1440 minutes"}
    session.close()
