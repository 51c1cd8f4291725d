"""udf_engine: the user's function per micro-batch with variables saved with the batch, exactly-once across any
split of the input and any crash-and-replay point, against an independent pandas reference; and the
declaration's checks (schema inference, output columns, plan round trip, the ``udf`` privilege's trigger)."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane.local import LocalRunner
from headwater.errors import ExecutionError, GraphDefinitionError
from headwater.plan.document import dumps, from_json, needs_udf, to_json
from tests.support.replay import run_with_crashes

ROWS = 60
RNG = np.random.default_rng(11)
TICKS = pd.DataFrame({"sym": RNG.choice(["a", "b", "c", "d"], ROWS), "qty": RNG.integers(1, 100, ROWS)})


def running_totals(variables: dict[str, Any], batch: pd.DataFrame) -> pd.DataFrame:
    """Per symbol running total of qty, and how many rows this task has seen: both kept in the variables."""
    totals = variables["totals"]
    out = []
    for sym, qty in zip(batch["sym"], batch["qty"], strict=True):
        totals[sym] = totals.get(sym, 0) + int(qty)
        variables["seen"] += 1
        out.append((sym, int(qty), totals[sym], variables["seen"]))
    return pd.DataFrame(out, columns=["sym", "qty", "total", "seen"])


def reference(ticks: pd.DataFrame, tasks: int) -> pd.DataFrame:
    """pandas: the running total per symbol; ``seen`` counts the rows of the symbol's task (one task: all rows)."""
    out = ticks.assign(total=ticks.groupby("sym")["qty"].cumsum())
    if tasks == 1:
        return out.assign(seen=np.arange(1, len(out) + 1))
    return out


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("udf"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_names = itertools.count()


def graph(session: hw.Session, *, tasks: int = 1, func: Any = running_totals, **options: Any) -> hw.StreamGraph:
    g = session.stream_graph(f"udf{next(_names)}")
    stream = g.source("ticks", {"sym": "string", "qty": "long"})
    if tasks > 1:
        stream = stream.parallelize("sym", tasks)
    options.setdefault("variables", {"totals": {}, "seen": 0})
    if func is running_totals:
        options.setdefault("output_schema", {"sym": "string", "qty": "long", "total": "long", "seen": "long"})
    stream.udf_engine(func, **options).set_engine_name("totals").sync().sink("out")
    return g


def sorted_frame(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    return frame[columns].sort_values(columns).reset_index(drop=True)


def test_the_variables_carry_over_micro_batches(session):
    out = graph(session).run_local({"ticks": [TICKS.iloc[:7], TICKS.iloc[7:30], TICKS.iloc[30:]]})["out"]
    expected = reference(TICKS, 1)
    pd.testing.assert_frame_equal(out.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(1, ROWS - 1), max_size=6, unique=True),
       crashes=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2)), max_size=3),
       tasks=st.sampled_from([1, 2]))
def test_a_replayed_micro_batch_starts_from_the_variables_before_it(session, cuts, crashes, tasks):
    """Appends cut anywhere; at random micro-batches the process 'dies' after k of its tasks ran (their
    variables saved, nothing committed) and the batch replays: every row is counted once."""
    out = run_with_crashes(graph(session, tasks=tasks).plan(), "ticks", TICKS, cuts, dict(crashes), "out")
    expected = reference(TICKS, tasks)
    assert len(out) == ROWS
    pd.testing.assert_frame_equal(sorted_frame(out, ["sym", "qty", "total"]),
                                  sorted_frame(expected, ["sym", "qty", "total"]), check_dtype=False)
    if tasks == 1:  # the task's own row counter, in the variables too, counted each row once
        assert sorted(out["seen"]) == list(range(1, ROWS + 1))


FAILED: list[int] = []


def fails_once_after_changing_its_variables(variables: dict[str, Any], batch: pd.DataFrame) -> pd.DataFrame:
    out = running_totals(variables, batch)
    if (batch["qty"] == -1).any() and not FAILED:
        FAILED.append(1)
        raise RuntimeError("boom")
    return out


def test_a_function_that_raises_fails_the_batch_and_its_changes_to_the_variables_are_dropped(session, tmp_path):
    g = graph(session, func=fails_once_after_changing_its_variables,
              output_schema={"sym": "string", "qty": "long", "total": "long", "seen": "long"})
    runner = LocalRunner(g.plan(), tmp_path)
    first, second = TICKS.iloc[:10], pd.concat([TICKS.iloc[10:20], pd.DataFrame({"sym": ["a"], "qty": [-1]})])
    runner.append("ticks", first)
    runner.run_until_idle()
    runner.append("ticks", second)
    with pytest.raises(ExecutionError, match=r"udf_engine 'totals': fails_once_after_changing_its_variables raised "
                                              r"RuntimeError: boom"):
        runner.step()
    runner.run_until_idle()  # the batch again, from the variables saved before it
    both = pd.concat([first, second], ignore_index=True)
    pd.testing.assert_frame_equal(runner.read("out").reset_index(drop=True), reference(both, 1), check_dtype=False)


def vectorised_totals(variables: dict[str, Any], batch: pd.DataFrame) -> pd.DataFrame:
    previous = batch["sym"].map(lambda s: variables["totals"].get(s, 0)).astype("int64")
    total = batch.groupby("sym")["qty"].cumsum() + previous
    variables["totals"].update(dict(zip(batch["sym"], total, strict=True)))  # the last row of each symbol wins
    return batch.assign(total=total, seen=0)


def test_output_columns_select_and_the_schema_is_inferred_from_an_empty_batch(session):
    g = graph(session, func=vectorised_totals, output_columns=["sym", "total"])
    (node,) = [n for n in g.plan().nodes.values() if n.name == "totals"]
    assert node.schema.to_dict() == {"sym": "string", "total": "long"}
    out = g.run_local({"ticks": TICKS})["out"]
    assert out["total"].tolist() == reference(TICKS, 1)["total"].tolist()


def test_a_dict_of_columns_an_arrow_table_or_none_are_outputs(session):
    def as_dict(variables, batch):
        variables["n"] += len(batch)
        return {"n": [variables["n"]]}

    def nothing(variables, batch):
        variables["n"] += 1

    out = graph(session, func=as_dict, variables={"n": 0}).run_local({"ticks": [TICKS.iloc[:5], TICKS.iloc[5:]]})
    assert out["out"]["n"].tolist() == [5, ROWS]
    out = graph(session, func=nothing, variables={"n": 0}, output_schema={"n": "long"}).run_local({"ticks": TICKS})
    assert out["out"].empty


def test_declaration_errors_name_the_engine_and_what_to_do(session):
    g = session.stream_graph("udf_errors")
    src = g.source("ticks", {"sym": "string", "qty": "long"})
    with pytest.raises(GraphDefinitionError, match=r"returned None on an empty batch.*pass output_schema"):
        src.udf_engine(lambda variables, batch: None)
    with pytest.raises(GraphDefinitionError, match="column 'total' that running_totals returns on an empty batch "
                                                   "has no type"):
        src.udf_engine(running_totals, variables={"totals": {}, "seen": 0})
    with pytest.raises(GraphDefinitionError, match=r"output column 'nope' is not among the function's columns"):
        src.udf_engine(lambda variables, batch: batch, output_columns=["nope"])
    with pytest.raises(GraphDefinitionError, match="must be a dict of variable name to initial value"):
        src.udf_engine(lambda variables, batch: batch, variables=[1, 2])
    with pytest.raises(GraphDefinitionError, match="is not a Python identifier"):
        src.udf_engine(lambda variables, batch: batch, variables={"a b": 1})
    with pytest.raises(GraphDefinitionError, match="must be a function"):
        src.udf_engine(5, output_schema={"a": "long"})


def test_a_returned_frame_without_the_output_columns_fails_the_batch_clearly(session):
    g = graph(session, func=lambda variables, batch: batch.iloc[:0] if len(batch) == 0 else batch[["sym"]],
              output_schema={"sym": "string", "qty": "long"})
    with pytest.raises(ExecutionError, match=r"returned no column 'qty' \(returned: sym\)"):
        g.run_local({"ticks": TICKS})


def test_variables_that_plain_pickle_refuses_are_saved(session):
    def keeps_a_lambda(variables, batch):
        variables["f"] = lambda x: x + len(batch)
        variables["n"] = variables["f"](variables["n"])
        return batch.assign(n=variables["n"])

    out = graph(session, func=keeps_a_lambda, variables={"n": 0}).run_local(
        {"ticks": [TICKS.iloc[:4], TICKS.iloc[4:10]]})["out"]
    assert out["n"].tolist() == [4] * 4 + [10] * 6


def keeps_a_lock(variables, batch):
    variables["lock"] = threading.Lock()  # not picklable, even by cloudpickle
    return batch.assign(total=0, seen=0)


def test_variables_that_cannot_be_pickled_fail_the_batch_clearly_and_leave_no_temporary_file(session, tmp_path):
    runner = LocalRunner(graph(session, func=keeps_a_lock, variables={},
                               output_schema={"sym": "string", "qty": "long", "total": "long", "seen": "long"}).plan(),
                         tmp_path)
    runner.append("ticks", TICKS.iloc[:5])
    with pytest.raises(ExecutionError, match=r"udf_engine 'totals': its variables must be picklable.*TypeError"):
        runner.step()
    assert [p.name for p in tmp_path.rglob("*.tmp")] == []


def test_the_plan_holds_the_function_and_the_initial_values_as_callables_the_master_never_loads(session):
    g = graph(session)
    doc = to_json(g._graph, g.plan())
    assert sorted(doc["callables"]) == ["InitialValues", "running_totals"]
    assert needs_udf(doc)
    logical, physical = from_json(dumps(doc), load_callables=False)
    assert to_json(logical, physical) == doc  # written back byte for byte, nothing loaded
    (node,) = [n for n in physical.nodes.values() if n.name == "totals"]
    assert node.spec.properties() == {"func": "running_totals", "outputColumns": ["sym", "qty", "total", "seen"],
                                 "variableNames": ["totals", "seen"]}
    loaded = from_json(dumps(doc), load_callables=True)[1]
    spec = next(n for n in loaded.nodes.values() if n.name == "totals").spec
    assert spec.init_values() == {"totals": {}, "seen": 0}
