"""Orca's HA tables and graph configuration (issue 24 item 5): arguments checked, mapped and serialised — no Spark."""

from __future__ import annotations

import json

import pytest

import headwater as hw
from headwater.plan.document import from_json, to_json
from headwater.types import TableKind

TICKS = {"time": "timestamp", "sym": "string", "px": "double"}


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
    from headwater.api.session import Session
    from headwater.runtime.embedded import embedded_master
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


# -- subscription settings: set_config_map and set_local_config_once -------------------------------------------
def _parse(config):
    from headwater.plan.subscription import SubscriptionConfig

    return SubscriptionConfig.parse(config, where="test")


def test_orca_and_snake_case_spellings_mean_the_same_settings():
    from datetime import timedelta

    orca = _parse({"subscription.batchSize": 100, "subscription.throttle": 2, "subscription.timeTrigger": False,
                   "subscription.sourceOffset": -1})
    snake = _parse({"subscription.batch_size": 100, "subscription.throttle": "2s", "subscription.time_trigger": False,
                    "subscription.source_offset": -1})
    assert orca == snake
    assert (orca.max_rows, orca.throttle, orca.source_offset) == (100, timedelta(seconds=2), -1)
    assert orca.properties() == {"subscription.batchSize": 100, "subscription.throttle": 2.0,
                                 "subscription.timeTrigger": False, "subscription.sourceOffset": -1}
    assert _parse({"subscription.batchSize": 0}).max_rows is None  # Orca's default: no batching
    assert _parse({"subscription.throttle": 0.25}).throttle == timedelta(milliseconds=250)


@pytest.mark.parametrize(("config", "fragment"), [
    ({"subscription.batchsize": 1}, "unknown key 'subscription.batchsize'; keys: subscription.batchSize"),
    ({"batchSize": 1}, "unknown key 'batchSize'"),
    ({1: 1}, "unknown key 1"),
    ({"subscription.batchSize": -1}, "subscription.batch_size=-1: expected an int of rows"),
    ({"subscription.batchSize": 1.5}, "subscription.batch_size=1.5: expected an int of rows"),
    ({"subscription.batchSize": True}, "subscription.batch_size=True: expected an int of rows"),
    ({"subscription.batchSize": 2**31}, "expected an int of rows"),
    ({"subscription.batchSize": 1, "subscription.batch_size": 2}, "subscription.batchSize is given twice"),
    ({"subscription.throttle": 0}, "subscription.throttle=0: expected seconds"),
    ({"subscription.throttle": float("nan")}, "subscription.throttle=nan: expected seconds"),
    ({"subscription.throttle": 7200}, "subscription.throttle=7200: expected seconds"),
    ({"subscription.throttle": "2 fortnights"}, "subscription.throttle"),
    ({"subscription.throttle": "10us"}, "expected a trigger interval"),
    ({"subscription.throttle": True}, "subscription.throttle=True"),
    ({"subscription.timeTrigger": True}, "subscription.time_trigger=True cannot apply: a micro-batch runs when"),
    ({"subscription.timeTrigger": 1}, "subscription.time_trigger=1: expected True or False"),
    ({"subscription.sourceOffset": -2}, "subscription.source_offset=-2 is not one of Orca's values"),
    ({"subscription.sourceOffset": 0}, "subscription.source_offset=0 is not one of Orca's values"),
    ({"subscription.sourceOffset": True}, "is not one of Orca's values"),
    ({"privateTable.cacheSize": 1000}, "privateTable.cacheSize cannot apply: private tables keep no rows in memory"),
    ({"private_table.cache_size": 1000}, "private_table.cache_size cannot apply"),
])
def test_bad_settings_are_refused_naming_the_key_and_the_reason(session, config, fragment):
    g = session.stream_graph("bad_config")
    with pytest.raises(hw.GraphDefinitionError, match=r"set_config_map on demo\.stream_graph\.bad_config") as info:
        g.set_config_map(config)
    assert fragment in str(info.value)
    with pytest.raises(hw.GraphDefinitionError, match="set_local_config_once on 'ticks'") as info:
        g.source("ticks", TICKS).set_local_config_once(config)
    assert fragment in str(info.value)


def test_a_config_that_is_not_a_dict_is_refused(session):
    with pytest.raises(hw.GraphDefinitionError, match="expected a dict of settings"):
        session.stream_graph("g").set_config_map([("subscription.batchSize", 1)])  # type: ignore[arg-type]


def _configs(g):
    return {g.plan().nodes[sg.input].name + "->" + (g.plan().nodes[(sg.chain or sg.outputs)[0]].name): sg.config
            for sg in g.plan().subgraphs}


def test_edge_settings_override_the_graphs_on_the_subscription_they_name(session):
    g = session.stream_graph("per_edge").set_config_map({"subscription.batchSize": 500, "subscription.throttle": 1})
    g.set_config_map({"subscription.sourceOffset": -1})  # a second call adds keys, overriding the same ones
    ticks = g.source("ticks", TICKS)
    bars = ticks.set_local_config_once({"subscription.batchSize": 100}).time_series_engine(
        window="60s", step="60s", time_column="time", key_column="sym", metrics=["last(px) as close"])
    # engine -> engine: fused into one task, no effect (as Orca's cascade)
    bars.set_local_config_once({"subscription.batchSize": 7}).reactive_state_engine(
        metrics=["cumsum(close) as total"], key_column="sym").sink("totals")
    # into a sink: passed on to the sink's readers (Orca: sink creates no node)
    copied = ticks.map(["sym", "px"]).set_local_config_once({"subscription.throttle": "250ms"}).sink("copied")
    copied.map(["sym", "px * 2 as px2"]).sink("doubled")
    # out of a leading map: still the subscription (Orca: map creates no node)
    ticks.map(["time", "sym", "px"]).set_local_config_once({"subscription.batch_size": 42}).reactive_state_engine(
        metrics=["cumsum(px) as c"], key_column="sym").sink("cums")
    configs = _configs(g)
    assert {k: (c.max_rows, c.throttle.total_seconds(), c.source_offset) for k, c in configs.items()} == {
        "ticks->time_series_ticks": (100, 1.0, -1),
        "ticks->map_4": (500, 1.0, -1),
        "copied->map_6": (500, 0.25, None),  # source_offset: only where a graph's input table is read
        "ticks->map_8": (42, 1.0, -1),
    }
    text = g.explain()
    assert "edge settings without effect (no subscription follows the edge: it joins nodes fused into one task, " \
        "or leads to a table nothing in the graph reads): 1->2" in text
    assert "reads at most 100 rows per micro-batch, trigger interval 1s, from the latest row on start" in text
    assert "edge 0->1 config: {'subscription.batchSize': 100}" in text
    assert "config: {'subscription.batchSize': 500, 'subscription.throttle': 1.0, 'subscription.sourceOffset': -1}" \
        in text


def test_edge_settings_follow_an_edge_split_by_a_private_table(session):
    g = session.stream_graph("fan_out")
    bars = g.source("ticks", TICKS).time_series_engine(window="60s", step="60s", time_column="time",
                                                        key_column="sym", metrics=["last(px) as close"])
    bars.set_local_config_once({"subscription.batchSize": 9}).reactive_state_engine(
        metrics=["cumsum(close) as a"], key_column="sym").sink("a")
    bars.reactive_state_engine(metrics=["cummax(close) as b"], key_column="sym").sink("b")
    plan = g.plan()
    by_head = {plan.nodes[sg.chain[0]].name: sg for sg in plan.subgraphs}
    assert plan.nodes[by_head["reactive_state_time_series_ticks"].input].private  # the fan-out's private table
    assert by_head["reactive_state_time_series_ticks"].config.max_rows == 9
    assert by_head["reactive_state_time_series_ticks_2"].config.max_rows is None
    assert "without effect" not in g.explain()


def test_join_sides_take_edge_settings_where_they_read_a_table(session):
    g = session.stream_graph("join_cfg")
    trades = g.source("trades", TICKS)
    quotes = g.source("quotes", {"time": "timestamp", "sym": "string", "bid": "double"})
    trades.set_local_config_once({"subscription.batchSize": 11}).asof_join_engine(
        quotes, metrics=["px", "bid"], matching_column="sym", time_column="time").sink("joined")
    plan = g.plan()
    sizes = {plan.nodes[sg.input].name: sg.config.max_rows for sg in plan.subgraphs}
    assert sizes["trades"] == 11 and sizes["quotes"] is None


def test_settings_are_part_of_the_graphs_json_and_round_trip(session):
    g = session.stream_graph("config_json").set_config_map({"subscription.throttle": 0.5})
    ticks = g.source("ticks", TICKS)
    ticks.set_local_config_once({"subscription.batchSize": 100, "subscription.sourceOffset": -1}).map(
        ["sym", "px"]).sink("out")
    doc = json.loads(g.to_json())
    assert doc["logical"]["config"] == {"subscription.throttle": 0.5}
    assert doc["logical"]["edges"][0]["config"] == {"subscription.batchSize": 100, "subscription.sourceOffset": -1}
    assert doc["physical"]["subgraphs"][0]["config"] == {"subscription.batchSize": 100, "subscription.throttle": 0.5,
                                                         "subscription.sourceOffset": -1}
    logical, physical = from_json(doc, load_callables=False)
    assert to_json(logical, physical) == doc
    assert logical.edge_configs == g.logical_graph.edge_configs and logical.config == g.logical_graph.config
    assert physical is not None and physical.subgraphs == g.plan().subgraphs
    assert hw.StreamGraph.from_json(session, g.to_json()).explain() == g.explain()


@pytest.mark.parametrize("bad", [{"subscription.batchSize": -5}, {"batch": 1}, [1], {"subscription.timeTrigger": True}])
def test_bad_settings_in_a_document_are_refused(session, bad):
    g = session.stream_graph("bad_doc")
    g.source("ticks", TICKS).set_local_config_once({"subscription.batchSize": 1}).sink("out")
    doc = json.loads(g.to_json())
    doc["physical"]["subgraphs"][0]["config"] = bad
    with pytest.raises(hw.GraphDefinitionError, match="physical subgraph 0 config"):
        from_json(doc, load_callables=False)
    doc = json.loads(g.to_json())
    doc["logical"]["edges"][0]["config"] = bad
    with pytest.raises(hw.GraphDefinitionError, match="edge 0->1 config"):
        from_json(doc, load_callables=False)


# -- the runtime side, without Spark: micro-batch ranges and the probe -------------------------------------------
def test_admission_takes_whole_commits_up_to_the_bound_and_at_least_one():
    from headwater.dataplane.jobs import admit

    sizes = [0, 30, 30, 30, 100, 0, 10, 5]  # rows of versions 1..8 (0: a commit without rows)

    def rows_of(version: int) -> int:
        return sizes[version - 1]

    def naive(start: int, latest: int, bound: int) -> int:  # the newest end whose rows fit, or the first commit
        fitting = [end for end in range(start + 1, latest + 1) if sum(sizes[start:end]) <= bound]
        return max([*fitting, min(start + 1, latest)])

    for start in range(8):
        for bound in (1, 29, 30, 60, 61, 100, 500):
            assert admit(start, 8, rows_of, bound) == naive(start, 8, bound), (start, bound)
    assert admit(3, 3, rows_of, 10) == 3 and admit(0, 8, rows_of, None) == 8


def test_source_offset_moves_where_the_next_new_batch_starts_never_a_recorded_one(tmp_path):
    from headwater.dataplane.jobs import begin_job, next_start, set_start_version, write_job

    assert begin_job(tmp_path, 0, lambda start: start + 3) == (0, 3)  # begun, cut off before its commit
    set_start_version(tmp_path, 10)  # the graph started again with source_offset=-1 at version 10
    assert begin_job(tmp_path, 0, lambda start: 12) == (0, 3)  # the replay keeps its range
    write_job(tmp_path, {"batch": 0, "input": [0, 3], "finished": 1.0})
    assert next_start(tmp_path) == 10
    assert begin_job(tmp_path, 1, lambda start: max(start, 12)) == (10, 12)
    write_job(tmp_path, {"batch": 1, "input": [10, 12], "finished": 2.0})
    assert next_start(tmp_path) == 12 and begin_job(tmp_path, 2, lambda start: 15) == (12, 15)


def test_the_probe_reports_the_end_of_the_next_bounded_range_while_rows_wait(tmp_path):
    import pandas as pd

    from headwater.dataplane.jobs import write_job
    from headwater.spark.fused import SubgraphStreamReader
    from headwater.storage.stream_table import StreamTable
    from headwater.types import Schema

    table = StreamTable.create(tmp_path / "t", Schema.parse({"x": "long"}, where="test"))
    for n in (30, 30, 30, 100):
        table.append(pd.DataFrame({"x": range(n)}))
    checkpoint = tmp_path / "checkpoint"
    probe = SubgraphStreamReader(str(tmp_path / "t"), wait_s=60.0, checkpoint=str(checkpoint), max_rows=70)
    assert probe.latestOffset() == {"version": 2}
    write_job(checkpoint, {"batch": 0, "input": [0, 2], "finished": 1.0})
    assert probe.latestOffset() == {"version": 3}  # rows wait: answered at once, not after wait_s
    write_job(checkpoint, {"batch": 1, "input": [2, 3], "finished": 2.0})
    assert probe.latestOffset() == {"version": 4}
    unbounded = SubgraphStreamReader(str(tmp_path / "t"))
    assert unbounded.latestOffset() == {"version": 4}


def test_the_worker_starts_each_subgraph_with_its_trigger_interval_and_row_bound(session, tmp_path, monkeypatch):
    from datetime import timedelta

    import headwater.spark.fused as fused
    from headwater.runtime.worker import Worker

    g = session.stream_graph("started").set_config_map({"subscription.throttle": "2s"})
    ticks = g.source("ticks", TICKS)
    ticks.set_local_config_once({"subscription.batchSize": 500}).map(["sym", "px"]).sink("bounded")
    ticks.set_local_config_once({"subscription.throttle": 0.5}).map(["sym"]).sink("quick")
    ticks.map(["px"]).sink("plain")
    physical = g.plan()
    calls = {}

    class Started:
        isActive, lastProgress = True, {"batchId": 0}

    def start(spark, plan, checkpoint, **options):
        calls[checkpoint.name] = (options["trigger_interval"], options["max_rows"])
        return Started()

    monkeypatch.setattr(fused, "start_fused_subgraph", start)
    worker = Worker(tmp_path / "w", spark_master="local[1]", trigger_interval=timedelta(milliseconds=100))
    worker._spark = object()  # no Spark: the queries are the fake's
    worker.start_graph(g.name, physical, {t.id: str(tmp_path / t.name) for t in physical.tables()}, tmp_path / "c")
    assert sorted((t.total_seconds(), rows or 0) for t, rows in calls.values()) == [(0.5, 0), (2.0, 0), (2.0, 500)]


def test_source_offset_minus_one_is_set_on_submit_and_start_only(tmp_path):
    import pandas as pd

    from headwater.api.session import Session
    from headwater.dataplane.jobs import start_version
    from headwater.runtime.embedded import embedded_master
    from tests.unit.test_graph_serial import Workers

    master = embedded_master(tmp_path, worker=Workers(), start_spark=False)
    session = Session.embedded(master)
    session.use_catalog("demo")
    session.create_stream_table("ticks", TICKS)
    row = pd.DataFrame({"time": pd.to_datetime(["2026-01-02"]), "sym": ["a"], "px": [1.0]})
    for _ in range(3):
        session.append("ticks", row)  # versions 1..3
    g = session.stream_graph("live").set_config_map({"subscription.sourceOffset": -1})
    g.source("ticks", TICKS).map(["sym", "px"]).sink("live_out")
    g.source("ticks", TICKS).set_local_config_once({"subscription.sourceOffset": -3}).map(["sym"]).sink("all_out")
    g.submit()
    physical = g.plan()
    checkpoints = master._graph_paths(g.name).checkpoints
    starts = lambda: [start_version(checkpoints / sg.key(physical)) for sg in physical.subgraphs]  # noqa: E731
    assert starts() == [3, 0]
    session.stop_stream_graph("live")
    session.append("ticks", row)
    session.start_stream_graph("live")
    assert starts() == [4, 0]
    session.append("ticks", row)
    master.restart(master.store.active_graph(g.name))  # a recovery resumes from the checkpoint: no skip
    assert starts() == [4, 0]
    session.close()
