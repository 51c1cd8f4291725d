"""rule_engine (Orca C.11): the documented example, both policies, NULL rules, bad arguments, and rule changes
kept in the engine's state snapshots (through a replayed micro-batch)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.errors import GraphDefinitionError, SchemaError

SCHEMA = {"sym": "long", "value": "double", "price": "double"}
DOC_SETS = {1: ["value > 1"], 2: ["price < 2", "price > 6"], None: ["value * price > 10"]}
DOC_ROWS = pd.DataFrame({"sym": [1, 1, 2, 2, 2, 3, 3], "value": [0.0, 2, 2, 2, 2, 2, 2],
                         "price": [2.0, 2, 0, 4, 8, 3, 6]})


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("rules"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_names = iter(range(10**6))


def graph(session: hw.Session, **kw):
    g = session.stream_graph(f"r{next(_names)}")
    g.source("t", schema=SCHEMA).rule_engine(**{"output_columns": ["sym", "value", "price"], **kw}).sink("out")
    return g


def test_the_documented_example_with_policy_all(session):
    g = graph(session, rule_sets=DOC_SETS, policy="all", rule_set_column="sym")
    out = g.run_local({"t": DOC_ROWS})["out"]
    assert [list(r) for r in out.result] == [[False], [True], [True, False], [False, False], [False, True], [False],
                                             [True]]


def test_shortcut_gives_the_first_failing_rule_or_null(session):
    g = graph(session, rule_sets=DOC_SETS, rule_set_column="sym")
    out = g.run_local({"t": DOC_ROWS})["out"]
    assert out.result.astype("Int64").tolist() == [0, pd.NA, 1, 0, 0, 0, pd.NA]


def test_without_a_rule_set_column_every_row_takes_the_default_and_a_null_rule_fails(session):
    g = graph(session, rule_sets={None: ["value > 1", "price > 1"]})
    rows = pd.DataFrame({"sym": [1, 2, 3], "value": [2.0, np.nan, 2.0], "price": [2.0, 2.0, 0.5]})
    out = g.run_local({"t": rows})["out"]
    # NULL > 1 is false (Orca: NULL is the smallest value), so the second row fails rule 0
    assert out.result.astype("Int64").tolist() == [pd.NA, 0, 1]


def test_rule_changes_live_in_the_state_and_survive_a_replayed_batch(session, tmp_path):
    g = graph(session, rule_sets={None: ["price > 1"]}, rule_set_column="sym")
    runner = LocalRunner(g.plan(), tmp_path)
    engine = next(n.name for n in g.plan().nodes.values() if getattr(n, "spec", None) is not None)
    rows = pd.DataFrame({"sym": [7, 8], "value": [1.0, 1.0], "price": [0.5, 5.0]})
    runner.append("t", rows)
    runner.run_until_idle()
    (task,) = runner.tasks
    task.control(engine, {"op": "update_rule", "key": 7, "rules": ["value > 0"]}, runner.offsets[0])
    runner.append("t", rows)
    runner.step(crash_after_tasks=1)  # the batch ran with the new rule, then the process died before its commit
    runner.step()
    task.control(engine, {"op": "delete_rule", "key": 7}, runner.offsets[0])
    runner.append("t", rows)
    runner.run_until_idle()
    result = runner.read("out").result.astype("Int64").tolist()
    assert result == [0, pd.NA, pd.NA, pd.NA, 0, pd.NA]  # sym 7: default, its own set, default again


@pytest.mark.parametrize(("kw", "error", "message"), [
    ({"rule_sets": {1: ["value > 1"]}, "rule_set_column": "sym"}, GraphDefinitionError, "default rule set"),
    ({"rule_sets": {None: ["value + 1"]}}, GraphDefinitionError, "must be true or false, got a double"),
    ({"rule_sets": {None: ["nope > 1"]}}, SchemaError, "unknown column 'nope'"),
    ({"rule_sets": {"x": ["value > 1"], None: ["value > 1"]}, "rule_set_column": "sym"}, GraphDefinitionError,
     "rule set key 'x' does not fit rule_set_column of type long"),
    ({"rule_sets": {None: ["value > 1"]}, "rule_set_column": "price"}, GraphDefinitionError, "expected string or"),
    ({"rule_sets": {None: ["value > 1"]}, "policy": "some"}, GraphDefinitionError, "policy must be one of"),
    ({"rule_sets": {None: ["value > 1"]}, "output_columns": ["nope"]}, GraphDefinitionError, "not an input column"),
    ({"rule_sets": {None: ["value > 1"]}, "callback": print}, GraphDefinitionError, "callback is not supported"),
])
def test_bad_arguments_fail_at_definition(session, kw, error, message):
    with pytest.raises(error, match=message):
        graph(session, **kw)


def test_bad_rule_changes_are_refused_before_reaching_a_worker(session):
    g = graph(session, rule_sets={None: ["value > 1"]}, rule_set_column="sym")
    spec = next(n.spec for n in g.plan().nodes.values() if getattr(n, "spec", None) is not None)
    with pytest.raises(GraphDefinitionError, match="cannot be deleted"):
        spec.check_control({"op": "delete_rule", "key": None})
    with pytest.raises(GraphDefinitionError, match="must be true or false"):
        spec.check_control({"op": "update_rule", "key": 3, "rules": ["value"]})
    with pytest.raises(GraphDefinitionError, match="unknown rule change"):
        spec.check_control({"op": "drop_table", "key": 3})


@pytest.mark.parametrize("policy", ["shortcut", "all"])
def test_string_sets_null_and_unknown_values_and_both_policies_match_a_per_row_reference(session, policy):
    sets = {"a": ["price > 1", "value < 3", "value * price < 10"], "b": ["price < 5"], None: ["value > 0", "price > 0"]}
    g = session.stream_graph(f"r{next(_names)}")
    (g.source("t", schema={"side": "string", "value": "double", "price": "double"})
      .rule_engine(rule_sets=sets, output_columns=["side"], policy=policy, rule_set_column="side").sink("out"))
    rng = np.random.default_rng(3)
    rows = pd.DataFrame({"side": rng.choice(np.array(["a", "b", "c", None], dtype=object), 200),
                         "value": rng.integers(-1, 5, 200).astype(float), "price": rng.integers(-1, 7, 200).astype(float)})
    checks = {"price > 1": lambda r: r.price > 1, "value < 3": lambda r: r.value < 3,
              "value * price < 10": lambda r: r.value * r.price < 10, "price < 5": lambda r: r.price < 5,
              "value > 0": lambda r: r.value > 0, "price > 0": lambda r: r.price > 0}
    want = []
    for r in rows.itertuples():
        outcomes = [bool(checks[c](r)) for c in sets.get(r.side, sets[None])]
        want.append(outcomes if policy == "all" else next((i for i, ok in enumerate(outcomes) if not ok), None))
    out = g.run_local({"t": rows})["out"]
    got = [list(x) for x in out.result] if policy == "all" else [None if pd.isna(x) else int(x) for x in out.result]
    assert got == want
