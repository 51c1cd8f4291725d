"""Change-log tables (Orca 3.00.5 changelogSource / changelogSink): the net state of any sequence of inserts,
updates and deletes equals a pandas upsert/delete of the same operations, in the source and in a change-log sink
written from it, however the operations are split into appends and wherever the run is killed; hostile rows are
refused; engines that would count change rows as new rows refuse a change log at definition time."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane import snapshots
from headwater.dataplane.local import LocalRunner
from headwater.storage.changelog import OP_COLUMN, net_state
from headwater.storage.stream_table import StreamTable
from headwater.storage.table_state import forget_state
from headwater.types import Schema

SCHEMA = {"id": "long", "venue": "string", "bal": "double"}
KEYS = ["id", "venue"]
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

operation = st.tuples(st.sampled_from(["N", "U", "D", None]), st.integers(0, 4), st.sampled_from(["x", "y"]),
                      st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)))


def changes(ops: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame({OP_COLUMN: pd.Series([o[0] for o in ops], dtype=object), "id": [o[1] for o in ops],
                         "venue": [o[2] for o in ops], "bal": pd.Series([o[3] for o in ops], dtype=float)})


def reference(ops: list[tuple]) -> pd.DataFrame:
    """The net state, by applying each operation in turn to a pandas frame indexed by the key."""
    state = pd.DataFrame({"bal": pd.Series(dtype=float)},
                         index=pd.MultiIndex.from_tuples([], names=KEYS))
    for op, key, venue, bal in ops:
        if op == "D":
            state = state.drop(index=(key, venue), errors="ignore")
        else:  # 'N', 'U' and NULL: the key's state is this row now
            state.loc[(key, venue), "bal"] = np.nan if bal is None else bal
    return tidy(state.reset_index())


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame[["id", "venue", "bal"]].astype({"id": "int64", "venue": object, "bal": "float64"})
    return frame.sort_values(KEYS).reset_index(drop=True)


def net(rows: pd.DataFrame) -> pd.DataFrame:
    return tidy(net_state(pa.Table.from_pandas(rows, preserve_index=False), KEYS).to_pandas())


def splits(draw_cuts: list[int], n: int) -> list[slice]:
    cuts = sorted({c % (n + 1) for c in draw_cuts} | {0, n})
    return [slice(a, b) for a, b in itertools.pairwise(cuts)]


def graph_plan(tmp):
    session = hw.connect(tmp / "catalog", start_spark=False)
    session.use_catalog("demo")
    g = session.stream_graph("accounts")
    (g.changelog_source("moves", KEYS, SCHEMA).parallelize("id", 2)
       .map(["changelog_type", "id", "venue", "bal"], where="id >= 0").sync().changelog_sink("book", KEYS))
    physical = g.plan()
    session.close()
    return physical


@PROPERTY
@given(ops=st.lists(operation, max_size=60), cuts=st.lists(st.integers(0, 60), max_size=8))
def test_net_state_of_appended_changes_equals_a_pandas_upsert_delete(tmp_path_factory, ops, cuts):
    table = StreamTable.create(tmp_path_factory.mktemp("t") / "moves", Schema.parse({OP_COLUMN: "string", **SCHEMA}),
                               kind="changelog", key_columns=KEYS)
    frame = changes(ops)
    for part in splits(cuts, len(ops)):
        table.append(frame.iloc[part])
    stored = pd.concat([table.read_version(v).to_pandas() for v in range(table.version() + 1)])
    assert len(stored) == len(ops)  # every change is kept, as written
    pd.testing.assert_frame_equal(net(stored), reference(ops))


@PROPERTY
@given(ops=st.lists(operation, min_size=1, max_size=60), cuts=st.lists(st.integers(0, 60), max_size=8),
       before_commit=st.sets(st.integers(0, 8), max_size=3), after_commit=st.sets(st.integers(0, 8), max_size=3))
def test_a_changelog_sink_written_from_a_changelog_source_has_the_same_net_state_across_kills(
        tmp_path_factory, ops, cuts, before_commit, after_commit):
    """Batches killed before their commit (tasks ran, nothing committed) or after it (committed, not recorded as
    done, so run again) leave the sink with the pandas reference's net state, each change once."""
    physical = graph_plan(tmp_path_factory.mktemp("plan"))
    runner = LocalRunner(physical, tmp_path_factory.mktemp("run"))
    frame = changes(ops)
    for i, part in enumerate(splits(cuts, len(ops))):
        runner.append("moves", frame.iloc[part])
        if i in before_commit:
            runner.step(crash_after_tasks=1)
            snapshots._LIVE.clear()  # a killed process keeps nothing in memory
        if i in after_commit:
            offsets, batches = list(runner.offsets), list(runner.batches)
            runner.step()
            runner.offsets, runner.batches = offsets, batches  # the driver never logged the batch as done
            snapshots._LIVE.clear()
            for table in runner.tables.values():
                forget_state(table.path)
        runner.step()
    runner.run_until_idle()
    pd.testing.assert_frame_equal(net(runner.read("moves")), reference(ops))
    book = runner.read("book")
    assert len(book) == len(ops)  # no change lost or written twice
    pd.testing.assert_frame_equal(net(book), reference(ops))


def test_an_engine_writing_a_changelog_sink_upserts_with_a_null_operation(tmp_path):
    session = hw.connect(tmp_path, start_spark=False)
    session.use_catalog("demo")
    g = session.stream_graph("g")
    sink = (g.source("ticks", schema={"id": "long", "px": "double"})
             .reactive_state_engine(key_column="id", metrics=["cumsum(px) as total"]).changelog_sink("totals", "id"))
    assert sink.output_schema() == Schema.parse({OP_COLUMN: "string", "id": "long", "total": "double"})
    out = g.run_local({"ticks": [pd.DataFrame({"id": [1, 2, 1], "px": [1.0, 2.0, 3.0]})]})["totals"]
    assert out[OP_COLUMN].isna().all()
    got = net_state(pa.Table.from_pandas(out, preserve_index=False), ["id"]).to_pandas()
    assert got.sort_values("id").to_dict("list") == {"id": [1, 2], "total": [4.0, 2.0]}
    session.close()


def test_the_operation_column_is_added_first_or_kept_as_declared(tmp_path):
    session = hw.connect(tmp_path, start_spark=False)
    g = session.stream_graph("demo.stream_graph.g")
    assert g.changelog_source("a", "id", {"id": "long"}).output_schema().names == (OP_COLUMN, "id")
    declared = g.changelog_source("b", "id", {"id": "long", OP_COLUMN: "string"})
    assert declared.output_schema().names == ("id", OP_COLUMN)
    with pytest.raises(hw.SchemaError, match="operation column is a string"):
        g.changelog_source("c", "id", {"id": "long", OP_COLUMN: "int"})
    with pytest.raises(hw.GraphDefinitionError, match="cannot be a key column"):
        g.changelog_source("d", OP_COLUMN, {"id": "long"})
    with pytest.raises(hw.GraphDefinitionError, match="column 'nope' is not in"):
        g.changelog_source("e", "nope", {"id": "long"})
    with pytest.raises(hw.GraphDefinitionError, match="'px' is not a key column of the change log"):
        g.changelog_source("f", "id", {"id": "long", "px": "double"}).parallelize("px", 2)
    session.close()


# -- engines over a change log -------------------------------------------------------------------------------------
def _changelog(tmp_path):
    session = hw.connect(tmp_path, start_spark=False)
    session.use_catalog("demo")
    g = session.stream_graph("g")
    return session, g, g.changelog_source("moves", "sym", {"time": "timestamp", "sym": "string", "px": "double"})


@pytest.mark.parametrize("declare", [
    lambda s: s.time_series_engine(window="1m", step="1m", time_column="time", key_column="sym",
                                   metrics=["sum(px) as total"], update_time="0s"),
    lambda s: s.session_window_engine(session_gap="1m", time_column="time", key_column="sym", metrics=["sum(px) as t"]),
    lambda s: s.cross_sectional_engine(key_column="sym", metrics=["sum(px) as total"], triggering_pattern="per_batch"),
    lambda s: s.map(["time", "sym", "px"]).time_series_engine(window="1m", step="1m", time_column="time",
                                                            metrics=["sum(px) as total"]),
])
def test_window_and_other_engines_refuse_a_change_log_with_the_reason(tmp_path, declare):
    session, _, moves = _changelog(tmp_path)
    with pytest.raises(hw.GraphDefinitionError, match=r"is a change log .* Headwater does not retract"):
        declare(moves)
    session.close()


def test_joins_refuse_a_change_log_on_either_side(tmp_path):
    session, g, moves = _changelog(tmp_path)
    quotes = g.source("quotes", schema={"time": "timestamp", "sym": "string", "bid": "double"})
    for left, right in ((moves, quotes), (quotes, moves)):
        with pytest.raises(hw.GraphDefinitionError, match="an input is a change log"):
            left.asof_join_engine(right, metrics=["px"] if left is moves else ["bid"], matching_column="sym",
                                  time_column="time")
    session.close()


def test_the_reactive_state_engine_takes_change_rows_with_stateless_metrics_only(tmp_path):
    session, g, moves = _changelog(tmp_path)
    with pytest.raises(hw.GraphDefinitionError, match=r"cumsum, mavg keep state across rows.*Orca retracts"):
        moves.reactive_state_engine(key_column="sym", metrics=["cumsum(px) as c", "mavg(px, 3) as m"])
    (moves.reactive_state_engine(key_column="sym", metrics=["time", "changelog_type", "px * 2 as px2"])
          .sink("doubled"))
    # buffered into a plain table, the change rows are appends any engine takes
    (moves.buffer("as_rows").reactive_state_engine(key_column="sym", metrics=["cumsum(px) as c"]).sink("sums"))
    rows = pd.DataFrame({OP_COLUMN: ["N", "U", "D"], "time": pd.to_datetime(["2026-01-02 09:30"] * 3),
                         "sym": ["a", "a", "a"], "px": [1.0, 2.0, None]})
    out = g.run_local({"moves": rows})
    assert out["doubled"][OP_COLUMN].tolist() == ["N", "U", "D"]
    np.testing.assert_array_equal(out["doubled"]["px2"], [2.0, 4.0, np.nan])
    assert out["sums"]["c"].tolist() == [1.0, 3.0, 3.0]
    session.close()


# -- storage doors --------------------------------------------------------------------------------------------------
@pytest.fixture
def standalone(tmp_path):
    session = hw.connect(tmp_path / "data", start_spark=False)
    session.use_catalog("demo")
    session.create_stream_table("moves", {OP_COLUMN: "string", "id": "long", "bal": "double"}, kind="changelog",
                                key_column="id")
    yield session
    session.close()


@pytest.mark.parametrize("op", ["X", "n", "INSERT", "", "D "])
def test_an_unknown_operation_is_refused_and_nothing_is_stored(standalone, op):
    with pytest.raises(hw.SchemaError, match=rf"changelog_type '{op}' at row 1 is not an operation; expected one of"):
        standalone.append("moves", pd.DataFrame({OP_COLUMN: ["N", op], "id": [1, 2], "bal": [1.0, 2.0]}))
    assert standalone.stream_table_meta("moves")["rows"].tolist() == [0]


def test_a_null_key_is_refused_and_a_null_operation_is_an_upsert(standalone):
    with pytest.raises(hw.SchemaError, match="key column 'id' is NULL in 1 row"):
        standalone.append("moves", pd.DataFrame({OP_COLUMN: ["N", "N"], "id": pd.array([1, None], "Int64"),
                                                 "bal": [1.0, 2.0]}))
    standalone.append("moves", pd.DataFrame({OP_COLUMN: [None, "N", "D", None], "id": [1, 2, 2, 1],
                                             "bal": [1.0, 2.0, None, 5.0]}))
    assert standalone.stream_table_meta("moves")["rows"].tolist() == [4]  # stored as written


def test_a_missing_operation_column_is_refused(standalone):
    with pytest.raises(hw.SchemaError, match="missing column"):
        standalone.append("moves", pd.DataFrame({"id": [1], "bal": [1.0]}))


def test_a_change_log_takes_no_retention_and_is_never_compacted(standalone, tmp_path):
    with pytest.raises(hw.GraphDefinitionError, match="takes no retention"):
        standalone.set_stream_table_retention("moves", rows=10)
    table = StreamTable.create(tmp_path / "t", Schema.parse({OP_COLUMN: "string", "id": "long"}), kind="changelog",
                               key_columns=["id"])
    for i in range(3):
        table.append(pd.DataFrame({OP_COLUMN: ["N"], "id": [i]}))
    assert table.compact() is None and table.file_count() == 3
    with pytest.raises(hw.SchemaError, match="needs a string column 'changelog_type'"):
        StreamTable.create(tmp_path / "u", Schema.parse({"id": "long"}), kind="changelog", key_columns=["id"])
    with pytest.raises(hw.GraphDefinitionError, match="needs key_columns"):
        StreamTable.create(tmp_path / "v", Schema.parse({OP_COLUMN: "string", "id": "long"}), kind="changelog")
