"""Golden tests of the seed graph's logical and physical plan (explain text, DOT and JSON).

Regenerate after an intended change with ``UPDATE_GOLDEN=1 pytest tests/unit/test_plan_golden.py``
and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import headwater as hw
from headwater.plan.document import PLAN_VERSION
from tests.support.indicators import build_indicator_graph

GOLDEN = Path(__file__).parent.parent / "golden"


@pytest.fixture
def graph(tmp_path):
    s = hw.connect(tmp_path, start_spark=False)
    s.use_catalog("demo")
    return build_indicator_graph(s)


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; review and regenerate with UPDATE_GOLDEN=1"


def test_explain_golden(graph):
    check("indicators.explain.txt", graph.explain() + "\n")


def test_graphviz_golden(graph):
    check("indicators.dot", graph.to_graphviz() + "\n")


def test_json_golden(graph):
    check("indicators.json", graph.to_json() + "\n")


def test_json_is_versioned_and_complete(graph):
    doc = json.loads(graph.to_json())
    assert doc["version"] == PLAN_VERSION
    assert [n["type"] for n in doc["physical"]["nodes"]] == [
        "TABLE", "TIME_SERIES_ENGINE", "TABLE", "REACTIVE_STATE_ENGINE", "TABLE"]
    assert [s["tasks"] for s in doc["physical"]["subgraphs"]] == [["0.0", "0.1", "0.2"], ["1.0", "1.1"]]
    assert {e["partitionType"] for e in doc["physical"]["edges"]} == {"SHUFFLE", "FORWARD"}
