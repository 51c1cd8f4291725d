"""Reactive state engine features: key purge, narrow output, dual ownership, multi-output functions."""

from __future__ import annotations

import pickle
from datetime import timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import headwater as hw
from headwater.engines.base import SEQ
from headwater.engines.reactive_state import (
    DualOwnershipReactiveStateEngine,
    NarrowReactiveStateEngine,
    ReactiveStateEngine,
)
from headwater.parse import parse_expr, to_metric
from headwater.types import Schema

SCHEMA = Schema.parse({"sym": "string", "buyer": "string", "seller": "string", "qty": "double", "px": "double"})


def table(df: pd.DataFrame) -> pa.Table:
    t = pa.Table.from_pandas(df, preserve_index=False)
    return t.append_column(SEQ, pa.array(np.arange(len(df), dtype=np.int64)))


def metrics(*texts: str) -> tuple:
    return tuple(to_metric(t, where="test") for t in texts)


@pytest.fixture
def trades() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = 200
    return pd.DataFrame({"sym": rng.choice(["a", "b", "c"], n), "buyer": rng.choice(["b1", "b2"], n),
                         "seller": rng.choice(["s1", "s2", "s3"], n), "qty": rng.integers(1, 10, n).astype(float),
                         "px": rng.normal(10, 1, n)})


def test_narrow_engine_emits_one_row_per_metric_in_input_order(trades):
    eng = NarrowReactiveStateEngine(name="n", input_schema=SCHEMA, metrics=metrics("px", "cumsum(qty) as f1",
                                    "cumavg(px) as f2"), key_column=("sym",), metric_names=("factor1", "factor2"))
    assert eng.output_schema().names == ("sym", "px", "metricName", "value")
    proc = eng.processor()
    _, out = proc.process(proc.new_state(), table(trades))
    got = out.to_pandas()
    assert len(got) == 2 * len(trades)
    assert got["metricName"].tolist()[:4] == ["factor1", "factor2", "factor1", "factor2"]
    want1 = trades.groupby("sym")["qty"].cumsum()
    want2 = trades.groupby("sym")["px"].transform(lambda s: s.expanding().mean())
    np.testing.assert_allclose(got["value"].to_numpy()[0::2], want1.to_numpy())
    np.testing.assert_allclose(got["value"].to_numpy()[1::2], want2.to_numpy())


def test_narrow_engine_needs_one_name_per_computed_metric():
    with pytest.raises(hw.GraphDefinitionError, match="2 computed metrics need 2 metric_names"):
        NarrowReactiveStateEngine(name="n", input_schema=SCHEMA, metrics=metrics("cumsum(qty) as a", "cumsum(px) as b"),
                                  key_column=("sym",), metric_names=("only_one",))


def test_dual_ownership_computes_per_buyer_and_per_seller(trades):
    eng = DualOwnershipReactiveStateEngine(name="d", input_schema=SCHEMA, metrics1=metrics("cumsum(qty) as buy_qty"),
                                           metrics2=metrics("cumsum(qty) as sell_qty"), key_column1=("buyer",),
                                           key_column2=("seller",))
    assert eng.output_schema().names == ("buyer", "seller", "buy_qty", "sell_qty")
    proc = eng.processor()
    state, first = proc.process(proc.new_state(), table(trades.iloc[:70]))
    _, second = proc.process(state, table(trades.iloc[70:]))
    got = pd.concat([first.to_pandas(), second.to_pandas()], ignore_index=True)
    np.testing.assert_allclose(got["buy_qty"], trades.groupby("buyer")["qty"].cumsum())
    np.testing.assert_allclose(got["sell_qty"], trades.groupby("seller")["qty"].cumsum())


def test_key_purge_drops_matching_keys_after_the_interval(trades):
    eng = ReactiveStateEngine(name="p", input_schema=SCHEMA, metrics=metrics("cumsum(qty) as total"),
                              key_column=("sym",), key_purge_filter=parse_expr("total > 0"),
                              key_purge_freq=timedelta(microseconds=1))
    proc = eng.processor()
    state, _ = proc.process(proc.new_state(), table(trades.iloc[:50]), batch_time=100.0)  # starts the clock
    assert len(state.keys) == 3
    state, _ = proc.process(state, table(trades.iloc[50:60]), batch_time=100.0)  # no time passed: no purge
    assert len(state.keys) == 3
    state, _ = proc.process(state, table(trades.iloc[50:60]), batch_time=101.0)
    assert state.keys.keys == []  # every key matched: all purged
    state, out = proc.process(state, table(trades.iloc[60:61]), batch_time=102.0)
    assert out.column("total").to_pylist() == [trades["qty"].iloc[60]]  # a purged key starts afresh


def test_key_purge_is_the_same_on_every_replay(trades):
    """Purge follows the batch's commit time, never the wall clock: replaying a batch from the same state
    gives the same state and output, however much later it runs."""
    eng = ReactiveStateEngine(name="p", input_schema=SCHEMA, metrics=metrics("cumsum(qty) as total"),
                              key_column=("sym",), key_purge_filter=parse_expr("total > 100"),
                              key_purge_freq=timedelta(seconds=30))
    proc = eng.processor()
    state, _ = proc.process(proc.new_state(), table(trades.iloc[:50]), batch_time=1_000.0)
    saved = pickle.dumps(state)  # process may change the state it is given: each replay starts from the snapshot
    runs = [proc.process(pickle.loads(saved), table(trades.iloc[50:90]), batch_time=1_040.0) for _ in range(2)]
    assert pickle.dumps(runs[0][0]) == pickle.dumps(runs[1][0])
    assert runs[0][1].equals(runs[1][1])


def test_engines_do_not_read_the_wall_clock():
    import ast
    from pathlib import Path

    import headwater

    root = Path(headwater.__file__).parent
    calls = []
    for path in [*(root / "engines").glob("*.py"), *(root / "dataplane").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    (node.value.id, node.attr) in {("time", "time"), ("datetime", "now"), ("time", "time_ns")}:
                calls.append(f"{path.name}:{node.lineno}")
    assert calls == []


def test_key_purge_needs_both_parameters():
    with pytest.raises(hw.GraphDefinitionError, match="both key_purge_filter= and key_purge_freq="):
        ReactiveStateEngine(name="p", input_schema=SCHEMA, metrics=metrics("cumsum(qty) as t"), key_column=("sym",),
                            key_purge_filter=parse_expr("t > 0"))


def test_dstream_methods_declare_sibling_engines(tmp_path):
    s = hw.connect(tmp_path, start_spark=False)
    s.use_catalog("demo")
    src = s.stream_graph("g").source("trades", schema=SCHEMA.to_dict())
    narrow = src.narrow_reactive_state_engine(metrics=["px", "cumsum(qty) as f"], metric_names=["factor"],
                                              key_column="sym")
    assert narrow.output_schema().names == ("sym", "px", "metricName", "value")
    dual = src.dual_ownership_reactive_state_engine(metrics1=["cumsum(qty) as b"], metrics2=["cumsum(qty) as s"],
                                                   key_column1="buyer", key_column2="seller")
    assert dual.node.type == "DUAL_OWNERSHIP_REACTIVE_STATE_ENGINE"
    with pytest.raises(hw.GraphDefinitionError, match="common key"):
        src.parallelize("sym", 2).dual_ownership_reactive_state_engine(
            metrics1=["cumsum(qty) as b"], metrics2=["cumsum(qty) as s"], key_column1="buyer", key_column2="seller")
