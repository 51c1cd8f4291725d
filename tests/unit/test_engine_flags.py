"""Every engine's True/False options refuse anything else at definition (a truthy 'no' must not switch one
on), and a join's garbage_size is a positive int."""

from __future__ import annotations

import itertools

import pytest

import headwater as hw

_names = itertools.count()
M = ["sum(price) as p"]
J = {"metrics": ["price", "bid"], "matching_column": "sym"}

ENGINES = {
    "time_series_engine": lambda s, flag: s.time_series_engine(window="60s", step="60s", metrics=M, time_column="t",
                                                               **flag),
    "daily_time_series_engine": lambda s, flag: s.daily_time_series_engine(window="60s", step="60s", metrics=M,
                                                                           time_column="t", **flag),
    "time_bucket_engine": lambda s, flag: s.time_bucket_engine(time_cut_points=["09:30", "10:00"], metrics=M,
                                                               time_column="t", **flag),
    "session_window_engine": lambda s, flag: s.session_window_engine(session_gap="5s", metrics=M, time_column="t",
                                                                     **flag),
    "cross_sectional_engine": lambda s, flag: s.cross_sectional_engine(metrics=M, key_column="sym", time_column="t",
                                                                       triggering_pattern="per_batch", **flag),
    "reactive_state_engine": lambda s, flag: s.reactive_state_engine(metrics=["cumsum(price) as c"], key_column="sym",
                                                                     **flag),
}
JOINS = {
    "asof_join_engine": lambda left, right, flag: left.asof_join_engine(right, time_column="t", **J, **flag),
    "window_join_engine": lambda left, right, flag: left.window_join_engine(right, window="-1s:0s", time_column="t",
                                                                  metrics=["price", "avg(bid) as b"],
                                                                  matching_column="sym", **flag),
    "lookup_join_engine": lambda left, right, flag: left.lookup_join_engine(right, **J, **flag),
    "left_semi_join_engine": lambda left, right, flag: left.left_semi_join_engine(right, **J, **flag),
    "snapshot_join_engine": lambda left, right, flag: left.snapshot_join_engine(right, **J, **flag),
}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("flags"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


def sources(session):
    g = session.stream_graph(f"flags{next(_names)}")
    return (g.source("t", schema={"t": "timestamp", "sym": "string", "price": "double"}),
            g.source("q", schema={"t": "timestamp", "sym": "string", "bid": "double"}))


@pytest.mark.parametrize(("engine", "flag"), [
    ("time_series_engine", "use_window_start_time"), ("daily_time_series_engine", "merge_session_end"),
    ("daily_time_series_engine", "key_purge_daily"), ("time_bucket_engine", "use_window_start_time"),
    ("session_window_engine", "use_session_start_time"), ("cross_sectional_engine", "last_batch_only"),
    ("cross_sectional_engine", "use_system_time"), ("reactive_state_engine", "keep_order")])
def test_a_flag_that_is_not_a_bool_fails_naming_the_node_and_value(session, engine, flag):
    left, _ = sources(session)
    with pytest.raises(hw.GraphDefinitionError, match=f"{engine} '.*': {flag} must be True or False, got 'no'"):
        ENGINES[engine](left, {flag: "no"})


@pytest.mark.parametrize(("engine", "option", "value", "message"), [
    ("asof_join_engine", "sort_by_time", "yes", "sort_by_time must be True or False, got 'yes'"),
    ("asof_join_engine", "garbage_size", -1, "garbage_size must be a positive int, got -1"),
    ("asof_join_engine", "garbage_size", "x", "garbage_size must be a positive int, got 'x'"),
    ("window_join_engine", "sort_by_time", 1, "sort_by_time must be True or False, got 1"),
    ("window_join_engine", "null_fill", 5, "null_fill must be a list with one value per output column"),
    ("lookup_join_engine", "keep_duplicates", "x", "keep_duplicates must be True or False, got 'x'"),
    ("left_semi_join_engine", "update_right_table", "x", "update_right_table must be True or False, got 'x'"),
    ("snapshot_join_engine", "is_inner_join", None, "is_inner_join must be True or False, got None"),
])
def test_join_options_of_the_wrong_kind_fail_at_definition(session, engine, option, value, message):
    left, right = sources(session)
    with pytest.raises(hw.GraphDefinitionError, match=f"{engine} '.*': {message}"):
        JOINS[engine](left, right, {option: value})
