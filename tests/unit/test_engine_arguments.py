"""Every engine's arguments, one at a time, replaced by a hostile value: the definition either stands or fails
with a Headwater error (a named node and value), never with a raw ``TypeError`` or ``AttributeError``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import inspect
import itertools

import pytest

import headwater as hw
from headwater.api.graph import DStream
from headwater.engines.base import EngineSpec
from headwater.engines.catalog import SPECS
from headwater.errors import MAX_MESSAGE_CHARS, HeadwaterError

HOSTILE = [None, 5, -1, 0, 2.5, float("nan"), float("inf"), "", "nonexistent", "-5s", "0s", "abc:def", "5s:1s",
           ["x"], [], ["price", "price"], [["sym"], ["sym"]], [["sym"]], {"a": 1}, ("2s", "1s"), (1, 2, 3), True,
           object(), 10**30, dt.timedelta(seconds=-1), dt.time(9, 30), b"bytes", "price", "sym", "sum(",
           "sum(price)", "right.bid", "left.nope", "x" * 5000, ["sum(price)", 5], [None], "\x00"]
TRADES = {"time": "timestamp", "sym": "string", "price": "double", "qty": "long"}
QUOTES = {"time": "timestamp", "sym": "string", "bid": "double"}
JOIN = {"metrics": ["price", "bid"], "matching_column": "sym"}
VALID = {
    "asof_join_engine": dict(JOIN, time_column="time", delayed_time=None, garbage_size=5000, sort_by_time=False,
                             use_system_time=False),
    "equal_join_engine": dict(JOIN, time_column="time", garbage_size=5000, max_delayed_time="3s"),
    "lookup_join_engine": dict(JOIN, right_time_column=None, keep_duplicates=False, is_inner_join=False),
    "left_semi_join_engine": dict(JOIN, garbage_size=5000, update_right_table=False),
    "snapshot_join_engine": dict(JOIN, time_column="time", keep_left_duplicates=False, keep_right_duplicates=False,
                                 is_inner_join=True),
    "window_join_engine": dict(JOIN, metrics=["price", "avg(bid)"], window=("-5s", "0s"), time_column="time",
                               closed="left", null_fill=(), sort_by_time=False, max_delayed_time="3s"),
    "time_series_engine": dict(window="1m", step="1m", metrics=["sum(price)"], time_column="time", key_column="sym",
                               accepted_delay="0s", closed="left", use_window_start_time=False, fill="none",
                               round_time=True, update_time=None, force_trigger_time=None, sub_window=None,
                               key_purge_freq=None, use_system_time=False, late_rows_table=None),
    "session_window_engine": dict(session_gap="5s", metrics=["sum(price)"], time_column="time", key_column="sym",
                                  use_session_start_time=True, force_trigger_time=None, late_rows_table=None,
                                  use_system_time=False, update_time=None),
    "time_bucket_engine": dict(time_cut_points=["09:30", "10:00", "11:00"], metrics=["sum(price)"],
                               time_column="time", key_column="sym", use_window_start_time=False, closed="left",
                               fill="none", key_purge_freq_in_second=None, late_rows_table=None),
    "daily_time_series_engine": dict(window="1m", step="1m", metrics=["sum(price)"], time_column="time",
                                     key_column="sym", session_begin="09:30", session_end="16:00",
                                     merge_session_end=False, accepted_delay="0s", closed="left",
                                     use_window_start_time=False, fill="none", key_purge_daily=True,
                                     force_trigger_session_end_time=None),
    "cross_sectional_engine": dict(metrics=["sum(price)"], key_column="sym", triggering_pattern="per_batch",
                                   triggering_interval=None, time_column="time", use_system_time=None,
                                   last_batch_only=False, context_by_column=None, round_time=True, key_filter=None,
                                   updated_context_groups_only=False),
    "anomaly_detection_engine": dict(metrics=["sum(qty) > 5", "qty < 4"], time_column="time", key_column="sym",
                                     window="1m", step="1m", garbage_size=2000, round_time=True,
                                     anomaly_description=()),
    "rule_engine": dict(rule_sets={None: ["price > 1"]}, output_columns=["sym"], policy="shortcut",
                        rule_set_column=None),
    "reactive_state_engine": dict(metrics=["cumsum(price)"], key_column="sym"),
    "crypto_order_book_engine": dict(depth=5, input_col_map={"symbol": "sym", "eventTime": "time",
                                                             "prevUpdateId": "prev_id", "updateId": "qty"},
                                     update_rule="general", caching_interval=5000, timeout=None, cached_depth=None,
                                     error_table=None),
    "udf_engine": dict(func=lambda variables, batch: batch, output_columns=["sym", "price"], variables={"n": 0},
                       output_schema=None),
    "timer_engine": dict(interval="1s", func=print),
}
BOOK = {"time": "timestamp", "sym": "string", "isIncremental": "bool", "askPrice": "double[]", "askQty": "double[]",
        "bidPrice": "double[]", "bidQty": "double[]", "qty": "long", "prev_id": "long", "price": "double"}
SOURCES = {"crypto_order_book_engine": BOOK}  # engines whose input is not TRADES


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("arguments"), start_spark=False)
    s.use_catalog("demo")
    yield s
    s.close()


_graphs = itertools.count()


def define(session: hw.Session, method: str, arguments: dict) -> None:
    g = session.stream_graph(f"g{next(_graphs)}")
    left, right = g.source("trades", schema=SOURCES.get(method, TRADES)), g.source("quotes", schema=QUOTES)
    getattr(left, method)(*([right] if "join" in method else []), **arguments).sink("out")
    g.plan()


@pytest.mark.parametrize("method", sorted(VALID))
def test_each_argument_replaced_by_a_hostile_value_stands_or_fails_with_a_headwater_error(session, method):
    define(session, method, VALID[method])  # the valid definition stands
    raw = []
    for argument, value in itertools.product(VALID[method], HOSTILE):
        try:
            define(session, method, {**VALID[method], argument: value})
        except HeadwaterError as error:
            assert len(str(error)) <= MAX_MESSAGE_CHARS + 200, (argument, value)
        except Exception as error:  # what this test looks for
            raw.append(f"{argument}={value!r:.40}: {type(error).__name__}: {error}")
    assert not raw, "\n".join(raw)


def _engine_methods() -> list[tuple[str, type[EngineSpec]]]:
    specs = {kind.lower(): cls for kind, cls in SPECS.items()}
    methods = sorted(name for name in dir(DStream) if name.endswith("_engine") and not name.startswith("_"))
    assert sorted(specs) == methods, "every engine has one DStream method named after its kind"
    return [(name, specs[name]) for name in methods]


@pytest.mark.parametrize(("method", "spec"), _engine_methods())
def test_each_engine_method_takes_its_specs_arguments(method, spec):
    """An engine method's signature is checked against its spec, where each argument is declared (its field): every
    parameter fills a field, and a field no parameter fills has a default or is filled by the graph."""
    by_graph = {"name", "input_schema", "left_schema", "right_schema", "right_matching_column", "right_time_column"}
    fields = {f.metadata.get("argument") or f.name: f for f in dataclasses.fields(spec) if f.init}
    parameters = [p for p in inspect.signature(getattr(DStream, method)).parameters if p not in ("self", "right")]
    assert [p for p in parameters if p not in fields] == (["callback"] if method == "rule_engine" else [])
    unfilled = [f.name for a, f in fields.items() if a not in parameters and f.name not in by_graph
                and f.default is dataclasses.MISSING]
    assert not unfilled
