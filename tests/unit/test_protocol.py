"""Master ↔ Worker messages are plain data: every kind round-trips through JSON, and bad ones are refused."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from headwater.runtime.protocol import (
    MESSAGES,
    AwaitCommit,
    ControlEngine,
    Health,
    IsRunning,
    Progress,
    RunSql,
    Shutdown,
    StartGraph,
    StopGraph,
    TaskStatus,
    Warmup,
    arrow_bytes,
    arrow_table,
    decode,
    encode,
)

SAMPLES = [
    StartGraph("demo.stream_graph.g", "{\"version\": 3}", {"0": "/d/t", "2": "/d/o"}, "/d/ck", "7", keep_snapshots=5),
    StopGraph("demo.stream_graph.g"),
    IsRunning("demo.stream_graph.g"),
    Warmup("demo.stream_graph.g", "engine_1", arrow_bytes(pa.table({"x": [1, 2]}))),
    ControlEngine("demo.stream_graph.g", "rule_t", '{"op": "delete_rule", "key": 3}'),
    TaskStatus("demo.stream_graph.g", "{\"version\": 3}"),
    Progress("demo.stream_graph.g"),
    Health(),
    RunSql("select 1", "SELECT 1", [["hw__v", "demo.stream_table.t", "/d/t"]], ["a"],
           {"max_rows": 10, "max_result_bytes": 4096, "timeout_s": 2.5}),
    Shutdown(),
    AwaitCommit(7, 30.0),
]


def test_every_message_kind_has_a_sample():
    assert {type(m).__name__ for m in SAMPLES} == set(MESSAGES)


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_messages_round_trip_through_json(message):
    assert decode(json.loads(json.dumps(encode(message)))) == message


def test_rows_travel_as_arrow_ipc():
    table = pa.table({"t": pa.array([1, None], pa.int64()), "s": ["a", None]})
    assert arrow_table(arrow_bytes(table)).equals(table)


@pytest.mark.parametrize("doc, fragment", [
    ({"type": "FormatDisk"}, "unknown worker message type"),
    ({"type": "StopGraph"}, "fields"),
    ({"type": "StopGraph", "fqn": "x", "extra": 1}, "fields"),
])
def test_bad_messages_are_refused(doc, fragment):
    with pytest.raises(ValueError, match=fragment):
        decode(doc)
