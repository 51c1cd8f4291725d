"""reactive_stateless_engine: Orca C.8's documented example, batch by batch."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import headwater as hw
from headwater.engines.base import SEQ


def engine(tmp_path, **kw):
    s = hw.connect(tmp_path, start_spark=False)
    s.use_catalog("demo")
    src = s.stream_graph("g").source("cells", schema={"product": "string", "metric": "string", "value": "double"})
    metrics = kw.pop("metrics", [
        {"output": "B:value", "formula": "a + b + c", "variables": {"a": "A:f1", "b": "A:f2", "c": "B:f1"}},
        {"output": "C:value", "formula": "v * f", "variables": {"v": "B:value", "f": "C:f1"}},
    ])
    node = src.reactive_stateless_engine(metrics=metrics, key_column=["product", "metric"], value_column="value", **kw)
    return node.node.spec


def feed(proc, state, rows):
    df = pd.DataFrame(rows, columns=["product", "metric", "value"])
    t = pa.Table.from_pandas(df, preserve_index=False).append_column(SEQ, pa.array(np.arange(len(df), dtype=np.int64)))
    state, out = proc.process(state, t)
    return state, [(f"{p}:{m}", v) for p, m, v in zip(out["product"].to_pylist(), out["metric"].to_pylist(),
                                                       out["value"].to_pylist(), strict=True)]


def test_documented_example(tmp_path):
    proc = engine(tmp_path).processor()
    st = proc.new_state()
    st, out = feed(proc, st, [("A", "f1", 1.0), ("A", "f2", 2.0)])
    assert out == [("B:value", None), ("C:value", None)]
    st, out = feed(proc, st, [("B", "f1", 1.0)])
    assert out == [("B:value", 4.0), ("C:value", None)]
    st, out = feed(proc, st, [("C", "f1", 2.0)])
    assert out == [("C:value", 8.0)]
    st, out = feed(proc, st, [("C", "f1", 3.0)])
    assert out == [("C:value", 12.0)]
    st, out = feed(proc, st, [("A", "f1", 2.0), ("A", "f2", 1.0)])
    assert out == [("B:value", 4.0), ("C:value", 12.0)]  # emitted again although unchanged


def test_trigger_on_and_filter(tmp_path):
    proc = engine(tmp_path, metrics=[
        {"output": "X:value1", "formula": "a + b + c", "variables": {"a": "X:f1", "b": "X:f2", "c": "X:f3"},
         "trigger_on": "X:f3"},
        {"output": "X:value2", "formula": "v * c", "variables": {"v": "X:value1", "c": "X:f3"}, "filter": (2.0, 100.0)},
    ]).processor()
    st = proc.new_state()
    st, out = feed(proc, st, [("X", "f1", 1.0), ("X", "f2", 1.0)])
    assert out == []  # only an update of f3 triggers value1, and value2 depends on value1 or f3
    st, out = feed(proc, st, [("X", "f3", 1.0)])
    assert out == [("X:value1", 3.0), ("X:value2", 3.0)]
    st, out = feed(proc, st, [("X", "f3", 50.0)])
    assert out == [("X:value1", 52.0)]  # value2 = 2600 is outside [2, 100]
    st, out = feed(proc, st, [("X", "f4", 9.0)])
    assert out == []


def test_cycles_and_unknown_variables_are_rejected(tmp_path):
    with pytest.raises(hw.GraphDefinitionError, match="cycle"):
        engine(tmp_path, metrics=[{"output": "A:x", "formula": "y", "variables": {"y": "A:y"}},
                                  {"output": "A:y", "formula": "x", "variables": {"x": "A:x"}}])
    with pytest.raises(hw.GraphDefinitionError, match="without a cell"):
        engine(tmp_path, metrics=[{"output": "A:x", "formula": "y + z", "variables": {"y": "A:y"}}])
