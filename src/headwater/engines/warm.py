"""Load every Numba kernel once, with the argument types the engines pass, so no micro-batch compiles one.

A kernel compiles the first time it meets an argument type (seconds to a minute each) and is cached beside its
source (``__pycache__``); later processes load it from there in milliseconds. :func:`warm_up` runs each engine
kind's processor over two small micro-batches of Arrow rows, as a stream task hands them over, and every state
function through the operator the reactive engines call: together they reach every kernel of
:func:`kernel_dispatchers`. ``scripts/setup.sh`` calls it once (the compiling run), and Spark's Python daemon
(:mod:`headwater.spark.daemon`) before it forks its workers (the loading run). Kernel inputs are read-only
whatever the data (:mod:`headwater.kernel_inputs`), so these types are the only ones a graph meets.

``python -m headwater.engines.warm`` warms up and prints how long it took.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

import headwater.aggregates
import headwater.engines
import headwater.kernels
from headwater.aggregates.rules import CATALOG, METRIC_AGGREGATES
from headwater.engines.arguments import from_arguments
from headwater.engines.base import SEQ, EngineKind, EngineSpec
from headwater.engines.catalog import SPECS
from headwater.engines.joins import JoinEngine
from headwater.parse import to_metrics
from headwater.types import Schema

PACKAGES = (headwater.aggregates, headwater.kernels, headwater.engines)
"""Where kernels live: the layers that compute (``tests/unit/test_warm.py`` checks no other module has one)."""

SCHEMA = Schema.parse({"time": "timestamp", "sym": "string", "x": "double", "v": "long"})
T0 = np.datetime64("2026-11-20T09:30:00", "us")
ROWS = 16  # per micro-batch: two keys, 20 s apart, so windows and sessions open and close in each

_AGGREGATES = [f"{f}(x) as a_{f}" for f in METRIC_AGGREGATES]
_UNORDERED = [f"{f}(x) as a_{f}" for f in METRIC_AGGREGATES if not CATALOG[f].ordered]
_RIGHT_AGGREGATES = [f"{f}(right.x) as a_{f}" for f in METRIC_AGGREGATES]
_KEYED = {"time_column": "time", "key_column": "sym"}

ENGINES: dict[EngineKind, dict[str, Any]] = {
    EngineKind.TIME_SERIES: {"window": "60s", "step": "60s", "metrics": _AGGREGATES, **_KEYED},
    EngineKind.SESSION_WINDOW: {"session_gap": "30s", "metrics": _AGGREGATES, **_KEYED},
    EngineKind.TIME_BUCKET: {"time_cut_points": ["09:30", "09:32", "09:34"], "metrics": _AGGREGATES, **_KEYED},
    EngineKind.DAILY_TIME_SERIES: {"window": "60s", "step": "60s", "metrics": _AGGREGATES, **_KEYED},
    EngineKind.CROSS_SECTIONAL: {"metrics": [*_UNORDERED, "rank(x) as r"], "key_column": "v",
                                 "context_by_column": "sym", "triggering_pattern": "per_row"},
    EngineKind.REACTIVE_STATE: {"metrics": ["ewm_mean(x, span=3, adjust=false) as e", "mmax(x, 3) as m"],
                                "key_column": "sym"},
    EngineKind.NARROW_REACTIVE_STATE: {"metrics": ["msum(x, 3)"], "metric_names": ["s"], "key_column": "sym"},
    EngineKind.DUAL_OWNERSHIP_REACTIVE_STATE: {
        "metrics1": ["cumsum(x) as c1"], "metrics2": ["cumsum(x) as c2"], "key_column1": "sym", "key_column2": "v"},
    EngineKind.REACTIVE_STATELESS: {
        "metrics": [{"output": "b", "formula": "p + 1", "variables": {"p": "a"}}], "key_column": "sym",
        "value_column": "x"},
    EngineKind.ANOMALY_DETECTION: {"metrics": ["x > 3", "sum(x) > 5", "avg(x) > x"], "window": "60s", "step": "60s",
                                   **_KEYED},
    EngineKind.RULE: {"rule_sets": {None: ["x > 0"]}, "output_columns": ["sym"]},
    EngineKind.ASOF_JOIN: {"metrics": ["x", "right.x as rx"], "time_column": "time"},
    EngineKind.WINDOW_JOIN: {"window": "-30s:0s", "metrics": ["x", *_RIGHT_AGGREGATES], "time_column": "time",
                             "max_delayed_time": None},
    EngineKind.EQUAL_JOIN: {"metrics": ["x", "right.x as rx"], "time_column": "time"},
    EngineKind.LOOKUP_JOIN: {"metrics": ["x", "right.x as rx"], "right_time_column": "time"},
    EngineKind.LEFT_SEMI_JOIN: {"metrics": ["x", "right.x as rx"]},
    EngineKind.SNAPSHOT_JOIN: {"metrics": ["x", "right.x as rx"], "time_column": "time"},
    EngineKind.PRICING: {"time_column": "time", "type_column": "v", "security_type": [0, 1],
                         "method": ["x * 2", "x + 1"], "extra_metrics": ["x as x"]},
    EngineKind.CRYPTO_ORDER_BOOK: {"depth": 5, "input_col_map": {"symbol": "sym", "eventTime": "time"}},
    EngineKind.UDF: {"func": lambda variables, batch: batch, "variables": {"calls": 0},
                     "output_schema": {"sym": "string", "x": "double"}},
    EngineKind.TIMER: {"interval": "1s", "func": lambda: None, "args": ()},
}
"""One small engine of each kind, as its ``DStream`` method's arguments (joins: both sides ``SCHEMA``, on ``sym``)."""

SCHEMAS: dict[EngineKind, Schema] = {EngineKind.CRYPTO_ORDER_BOOK: Schema.parse(
    {"time": "timestamp", "sym": "string", "isIncremental": "bool", **dict.fromkeys(
        ("askPrice", "askQty", "bidPrice", "bidQty"), "double[]")})}
"""The input of the engines that do not read ``SCHEMA``."""


def warm_up() -> None:
    """Compile (first run) or load every kernel; nothing is printed."""
    from headwater.kernels.registry import STATE_OPS, make_state_op

    for kind in ENGINES:
        run_engine(kind)
    # every state function through its operator, as the reactive engines call it (the operator makes the
    # kernels' inputs read-only): two keys, 32 rows each, one time unit apart, and windows (required numbers:
    # 24) of more rows than a buffer's first width (8; top + 1 for a TopN), so that the buffers widen
    slots = np.arange(64, dtype=np.int64) % 2
    values = np.arange(64, dtype=np.float64) // 2
    values[5] = np.nan
    for name, spec in STATE_OPS.items():
        params = {p: 0.5 if p == "alpha" else 24 for p in spec.required} | STATE_PARAMS.get(name, {})
        op = make_state_op(name, params)
        state, _ = op.run(op.init_state(), slots, 2, [values] * op.n_args)
        op.run(state, slots, 2, [values] * op.n_args)
    warm_pricing()


def warm_pricing() -> None:
    """Every pricing kernel, as the evaluator calls them (float64 arrays; days for dates)."""
    from headwater.kernels import pricing

    days = np.array([19_000.0, 19_100.0])
    later = days + 3_000.0
    rate, one = np.array([0.05, np.nan]), np.ones(2)
    for kind in ("bond_dirty_price", "bond_duration", "bond_convexity"):
        getattr(pricing, kind)(days, later, rate, rate, one * 2, one, one * 0, strict=False)
    pricing.bond_accr_int(days, later, rate, one * 2, one * 100, one, strict=False)
    pricing.bond_yield(days, later, rate, one * 99, one * 100, one * 2, one, strict=False)
    for style in ("european", "american"):
        pricing.vanilla_option(days, later, days, one * 100, one * 100, rate, rate, one / 5, one,
                               np.array([style] * 2, dtype=object), one, steps=5, strict=False)


STATE_PARAMS: dict[str, dict[str, Any]] = {
    **{name: {"span": 3} for name in ("ewm_mean", "ewm_std", "ewm_var", "ewm_corr", "ewm_cov")},
    "mrank": {"ascending": True}, "tmrank": {"ascending": True},
    "moving": {"func": "sum"}, "tmoving": {"func": "sum"}, "window": {"d1": -24, "d2": 0, "func": "sum"},
    "segmentby": {"func": "cumsum"}, "accumulate": {"func": "add"}, "talib": {"func": "msum", "window": 3},
    "state_iterate": {"iterate_func": "msum", "combine_coeff": (0.5, 0.5), "iterate_window": 3},
    "conditional_iterate": {"false_iter_func": "msum", "func_window": 3}, "generic_state_iterate": {"func": "sum_add"},
    "ma": {"ma_type": 0}, "dynamic_group_cumsum": {"group_count": 3}, "dynamic_group_cumcount": {"group_count": 3},
}
"""Parameters of the state functions whose required ones are not all numbers (the others get 24)."""


def engine_spec(kind: EngineKind) -> EngineSpec:
    """The small engine of ``kind`` that :func:`warm_up` runs."""
    spec, arguments = SPECS[kind], ENGINES[kind]
    name = f"warm_{kind.lower()}"
    if issubclass(spec, JoinEngine):
        time_column = arguments.get("time_column")
        times = {} if time_column is None else {"time_column": time_column, "right_time_column": time_column}
        return from_arguments(spec, {"self": None, **arguments}, name=name, left_schema=SCHEMA, right_schema=SCHEMA,
                              metrics=to_metrics(arguments["metrics"], where=name), matching_column=("sym",),
                              right_matching_column=("sym",), **times)
    return from_arguments(spec, {"self": None, **arguments}, name=name, input_schema=SCHEMAS.get(kind, SCHEMA))


def run_engine(kind: EngineKind, rows: Callable[[Schema, int], pa.Table] | None = None) -> None:
    """Run the small engine of ``kind`` over two micro-batches, ``rows(input schema, batch)`` (default:
    :func:`sample_rows`)."""
    spec = engine_spec(kind)
    schema = spec.layout.merged() if isinstance(spec, JoinEngine) else spec.input_schema  # type: ignore[attr-defined]
    processor = spec.processor()
    state = processor.new_state()
    for batch in range(2):
        table = (rows or sample_rows)(schema, batch)
        state, _, _ = processor.process_routed(state, table, batch_time=1.8e9 + batch)


def sample_rows(schema: Schema, batch: int) -> pa.Table:
    """Micro-batch ``batch`` of ``schema``'s columns and ``_hw_seq``: keys a/b (a join's rows alternate between
    its sides), times 20 s apart from 09:30, no NULLs."""
    i = np.arange(batch * ROWS, (batch + 1) * ROWS)
    columns: list[pa.Array] = []
    for field in schema.to_arrow():
        t = field.type
        if pa.types.is_timestamp(t):
            values: Any = T0 + i * np.timedelta64(20, "s")
        elif pa.types.is_string(t):
            values = np.where(i % 4 < 2, "a", "b").astype(object)
        elif pa.types.is_floating(t):
            values = (i % 7) + 0.5
        elif pa.types.is_boolean(t):
            values = i % 2 == 0
        elif pa.types.is_list(t):  # array vectors: two elements a row
            values = [[float(x % 7) + 1.0, float(x % 7) + 2.0] for x in i]
        else:  # integers; a join's side column alternates left (0) and right (1)
            values = i % 2
        columns.append(pa.array(values).cast(t))
    return pa.Table.from_arrays([*columns, pa.array(i, pa.int64())], names=[*schema.names, SEQ])


def kernel_dispatchers() -> Iterator[Any]:
    """Every Numba dispatcher defined in :data:`PACKAGES` (importing their modules)."""
    from numba.core.registry import CPUDispatcher

    for package in PACKAGES:
        modules = [package, *(importlib.import_module(m.name)
                              for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}."))]
        for module in modules:
            for value in vars(module).values():
                if isinstance(value, CPUDispatcher) and value.py_func.__module__ == module.__name__:
                    yield value


def inlined(dispatcher: Any) -> bool:
    """A kernel written into each caller (``inline="always"``): it compiles as part of them, never on its own."""
    return bool(dispatcher.targetoptions.get("inline") == "always")


if __name__ == "__main__":
    started = time.perf_counter()
    warm_up()
    kernels = [d for d in kernel_dispatchers() if not inlined(d)]
    ready = sum(len(d.signatures) for d in kernels)
    print(f"warm-up: {len(kernels)} kernels ({ready} signatures) compiled or loaded in "
          f"{time.perf_counter() - started:.1f}s")
