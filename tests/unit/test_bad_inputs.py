"""Issue 6.6: bad inputs raise Headwater errors with clear, bounded messages (no raw library errors)."""

from __future__ import annotations

import re

import pandas as pd
import pyarrow as pa
import pytest

import headwater as hw
from headwater.errors import MAX_MESSAGE_CHARS

SCHEMA = {"sym": "string", "px": "double"}


@pytest.fixture
def session(tmp_path):
    s = hw.connect(tmp_path / "data", start_spark=False)
    s.use_catalog("demo")
    s.create_stream_table("quotes", SCHEMA)
    yield s
    s.close()


def test_text_in_a_double_column_names_the_column(session):
    with pytest.raises(hw.SchemaError, match=r"column 'px' .*'n/a'") as info:
        session.append("quotes", pd.DataFrame({"sym": ["a", "b"], "px": [1.0, "n/a"]}))
    assert "ArrowInvalid" not in str(info.value)
    assert session.stream_table_meta("quotes")["rows"].tolist() == [0]  # nothing stored


def test_duplicate_column_names_are_refused(session):
    frame = pd.DataFrame([["a", 1.0, 2.0]], columns=["sym", "px", "px"])
    with pytest.raises(hw.SchemaError, match=r"\['px'\] more than once"):
        session.append("quotes", frame)


def test_a_300_character_table_name_hits_the_documented_limit(session):
    with pytest.raises(hw.GraphDefinitionError, match="has 300 characters; names have at most 100") as info:
        session.create_stream_table("t" * 300, SCHEMA)
    assert len(str(info.value)) < 400
    g = session.stream_graph("g")
    with pytest.raises(hw.GraphDefinitionError, match="at most 100"):
        g.source("s" * 101, schema=SCHEMA)
    session.create_stream_table("t" * 100, SCHEMA)  # the limit itself is fine


def test_connecting_to_a_regular_file_is_a_clear_error(tmp_path):
    path = tmp_path / "not_a_dir"
    path.write_text("x")
    with pytest.raises(hw.ConfigurationError, match="is a file, not a directory"):
        hw.connect(path, start_spark=False)
    assert path.read_text() == "x"


@pytest.mark.parametrize("metric", [
    "sum(" * 50_000,
    "x" * 200_000 + " +",
    "(" * 5_000 + "price" + ")" * 5_000,
    "price +" * 1_500 + " price",
])
def test_huge_or_deep_metrics_give_bounded_messages(session, metric):
    g = session.stream_graph("g")
    src = g.source("ticks", schema={"time": "timestamp", "sym": "string", "price": "double"})
    with pytest.raises(hw.GraphDefinitionError) as info:
        src.reactive_state_engine(key_column="sym", metrics=[metric])
    assert len(str(info.value)) < 1_000


def test_huge_names_and_types_give_bounded_messages(session):
    g = session.stream_graph("g")
    src = g.source("ticks", schema={"time": "timestamp", "sym": "string", "price": "double"})
    with pytest.raises(hw.GraphDefinitionError) as info:
        src.parallelize("c" * 100_000, 2)
    assert len(str(info.value)) < 1_000
    with pytest.raises(hw.HeadwaterError) as info:
        g.source("other", schema={"a": "x" * 100_000})
    assert len(str(info.value)) <= MAX_MESSAGE_CHARS


def test_every_headwater_error_is_bounded():
    assert len(str(hw.GraphDefinitionError("x" * 1_000_000))) <= MAX_MESSAGE_CHARS
    assert len(str(hw.CatalogError("y" * 1_000_000))) <= MAX_MESSAGE_CHARS


def test_non_frames_are_schema_errors(session):
    with pytest.raises(hw.SchemaError, match="expected a pandas DataFrame or a pyarrow Table, got list"):
        session.append("quotes", [1, 2])
    table = pa.table({"sym": ["a"], "px": ["1.5"]})  # a string column where a double is expected
    with pytest.raises(hw.SchemaError, match="column 'px' has type string, expected double"):
        session.append("quotes", table)


@pytest.mark.parametrize("declare", [
    lambda s, g: g.source("t", schema={"_hw_seq": "long", "x": "double"}),
    lambda s, g: s.create_stream_table("t2", {"_HW_pos": "long"}),
    lambda s, g: g.source("t", schema={"k": "string", "x": "double"}).map(["k", "x * 2 as _hw_x"]),
    lambda s, g: g.source("t", schema={"k": "string", "x": "double"})
                  .reactive_state_engine(key_column="k", metrics=["cumsum(x) as _hw_seq"]),
])
def test_reserved_column_names_are_refused(session, declare):
    with pytest.raises(hw.SchemaError, match="is reserved"):
        declare(session, session.stream_graph("g"))


TRADES = {"time": "timestamp", "k": "string", "x": "double"}


@pytest.mark.parametrize(("declare", "where"), [
    (lambda s, g: g.source("t", schema={"Price": "double", "price": "double"}), "source 't'"),
    (lambda s, g: s.create_stream_table("t2", {"Price": "double", "price": "double"}), "stream table"),
    (lambda s, g: g.source("t", schema=TRADES).map(["x as Price", "x * 2 as price"]), "map '"),
    (lambda s, g: g.source("t", schema=TRADES).map(lambda b: pd.DataFrame({"Price": b.x, "price": b.x})), "map '"),
    (lambda s, g: g.source("t", schema=TRADES).reactive_state_engine(
        key_column="k", metrics=["cumsum(x) as Price", "x as price"]), "reactive_state_engine '"),
    (lambda s, g: g.source("t", schema=TRADES).time_series_engine(
        window="60s", step="60s", time_column="time", metrics=["max(x) as Price", "min(x) as price"]),
     "time_series_engine '"),
    (lambda s, g: g.source("t", schema=TRADES).time_series_engine(
        window="60s", step="60s", time_column="time", key_column="k", metrics=["max(x) as K"]),
     "time_series_engine '"),
    (lambda s, g: g.source("t", schema=TRADES).cross_sectional_engine(
        key_column="k", metrics=["sum(x) as Price", "avg(x) as price"]), "cross_sectional_engine '"),
    (lambda s, g: g.source("t", schema=TRADES).udf_engine(
        lambda state, b: pd.DataFrame({"Price": b.x, "price": b.x})), "udf_engine "),
])
def test_column_names_differing_only_in_case_are_refused_at_declaration(session, declare, where):
    """Delta Lake's column names are case-insensitive: refused on the user's line, not later inside delta-rs."""
    with pytest.raises(hw.SchemaError, match=r"columns '(\w+)' and '(\w+)' differ only in case") as info:
        declare(session, session.stream_graph("g"))
    message = str(info.value)
    assert message.startswith(where)
    first, second = re.search(r"columns '(\w+)' and '(\w+)'", message).groups()
    assert first != second and first.lower() == second.lower()


def test_a_huge_unknown_change_log_operation_gives_a_bounded_message(session):
    session.create_stream_table("moves", {"changelog_type": "string", "id": "long"}, kind="changelog", key_column="id")
    with pytest.raises(hw.SchemaError, match="is not an operation; expected one of 'N', 'U', 'D'") as info:
        session.append("moves", pd.DataFrame({"changelog_type": ["x" * 1_000_000], "id": [1]}))
    assert len(str(info.value)) < 400
    assert session.stream_table_meta("moves")["rows"].tolist() == [0]


@pytest.mark.parametrize(("schema", "refusal"), [
    ({"a" * 256: "double"}, "has 256 characters; names have at most 255"),
    ({f"c{i}": "double" for i in range(10_001)}, "more than 10,000 columns"),
])
def test_an_overlong_column_name_or_too_many_columns_are_refused_when_declared(session, schema, refusal):
    with pytest.raises(hw.SchemaError, match=refusal):
        session.stream_graph("wide").source("t", schema)
