"""Names are checked whole: a trailing newline (or any control character) is a clear error and nothing is
created. ``re.match`` with ``$`` let ``demo.stream_table.t\\n`` through: the table's directory was made before
the Delta writer failed with a raw error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import headwater as hw
from headwater.errors import ConfigurationError, GraphDefinitionError
from headwater.service.auth import Authenticator

BAD_ENDINGS = ["\n", "\r\n", "\r", "\t", " "]


def tree(root: Path) -> list[str]:
    """Every directory and file under ``root`` (the state a refused call must leave as it was)."""
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, dirs, files in os.walk(root) for n in dirs + files)


@pytest.mark.parametrize("ending", BAD_ENDINGS)
@pytest.mark.parametrize("name", ["t", "demo.stream_table.t", "stream_table.t"])
def test_a_table_name_with_a_trailing_control_character_is_refused_and_nothing_is_created(session, name, ending):
    before = tree(Path(session.data_dir))
    with pytest.raises(GraphDefinitionError, match="is not valid"):
        session.create_stream_table(name + ending, {"a": "long"})
    assert tree(Path(session.data_dir)) == before
    assert [t for t in session._master.master.store.list_tables() if t.fqn.startswith("demo.stream_table.t")] == []


def test_a_catalog_name_with_a_trailing_newline_is_refused(session):
    before = tree(Path(session.data_dir))
    with pytest.raises(GraphDefinitionError, match="catalog name 'c\\\\n' is not valid"):
        session.use_catalog("c\n")
    with pytest.raises(GraphDefinitionError, match="catalog name"):
        session.create_stream_table("c\n.stream_table.t", {"a": "long"})
    assert tree(Path(session.data_dir)) == before


@pytest.mark.parametrize("name", ["g\n", "demo.stream_graph.g\n", "demo\n.stream_graph.g"])
def test_a_graph_name_with_a_trailing_newline_is_refused(session, name):
    before = tree(Path(session.data_dir))
    with pytest.raises(GraphDefinitionError, match="is not valid"):
        session.stream_graph(name)
    assert tree(Path(session.data_dir)) == before
    assert session._master.master.store.list_graphs() == []


def test_names_inside_a_graph_with_a_trailing_newline_are_refused(session):
    session.create_stream_table("trades", {"sym": "string", "px": "double", "ts": "timestamp"})
    graph = session.stream_graph("g")
    source = graph.source("trades", {"sym": "string", "px": "double", "ts": "timestamp"})
    with pytest.raises(GraphDefinitionError, match="is not valid"):
        source.sink("out\n")
    with pytest.raises(GraphDefinitionError, match="is not valid"):
        source.time_series_engine(window="60s", step="60s", metrics=["max(px) as px"], key_column="sym",
                                  time_column="ts") \
            .set_engine_name("bars\n")


def test_a_client_id_with_a_trailing_newline_is_refused(tmp_path):
    with pytest.raises(GraphDefinitionError, match="not a valid client id"):
        hw.connect(tmp_path, start_spark=False, client_id="feed_1\n")


def test_a_user_name_with_a_trailing_newline_is_refused_and_not_stored(session):
    auth = Authenticator(session._master.master.store)
    with pytest.raises(ConfigurationError, match="user name 'bob\\\\n' is not valid"):
        auth.add_user("bob\n", "s3cret-pass")
    assert session._master.master.store.user_password_hash("bob\n") is None
    assert session._master.master.store.user_password_hash("bob") is None


def test_a_time_of_day_with_a_trailing_newline_is_refused():
    from headwater.engines.calendar_windows import parse_time_of_day

    assert parse_time_of_day("09:30", where="w")[0] == parse_time_of_day("09:30:00", where="w")[0]
    with pytest.raises(GraphDefinitionError, match="cannot read '09:30\\\\n' as a time of day"):
        parse_time_of_day("09:30\n", where="w")
