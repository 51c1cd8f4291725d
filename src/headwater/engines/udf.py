"""User code as engines: ``udf_engine`` (a function per micro-batch with state it keeps) and ``timer_engine``
(a function every interval), Orca's udfEngine and timerEngine (reference B.3).

**udf_engine** maps Orca's ``udfEngine(func, outputColumns, [variableNames], [initValues])``: Orca passes each
variable to ``func`` as a ``mutable`` parameter before the message table; Python has no such parameters, so
``func(variables, batch)`` receives the variables as one dict, ``variables={"name": initial value, ...}``
(Orca's ``variableNames`` zipped with ``initValues``), and changes it in place (``variables["n"] += 1``). It
returns the micro-batch's output: a pandas DataFrame, an Arrow table, a dict of columns (Orca's dictionary) or
None (no rows); ``output_columns`` of it go downstream (all of them when not given). The dict is the engine's
state: saved with every micro-batch in the engine's state snapshots (:mod:`headwater.dataplane.snapshots`), one
per stream task, so a micro-batch replayed after a crash starts from the variables as they were before it and
the function's effect on them counts once (exactly-once). The function is called once per micro-batch and
stream task that has rows; its other side effects (files, network) are not undone by a replay: keep them
idempotent or write through the output.

>>> import pyarrow as pa
>>> from headwater.engines.base import SEQ
>>> from headwater.types import Schema
>>> def count_calls(variables, batch):
...     variables["calls"] += 1
...     return batch.assign(calls=variables["calls"])
>>> schema = Schema.parse({"price": "double"})
>>> spec = UdfEngine(name="u", input_schema=schema, func=count_calls, output_columns=("price", "calls"),
...                  variable_names=("calls",), init_values=InitialValues({"calls": 5}),
...                  result_schema=Schema.parse({"price": "double", "calls": "long"}))
>>> p = spec.processor()
>>> state, out = p.process(p.new_state(), pa.table({"price": [1.0, 2.0], SEQ: [0, 1]}))
>>> out.column("calls").to_pylist(), state.variables
([6, 6], {'calls': 6})

**timer_engine** runs ``func(*args)`` every ``interval`` on the worker that runs the graph (in its driver
process, which loaded the graph's functions; never on the master), in a thread of its own, without touching
the rows, which pass through unchanged. See :mod:`headwater.runtime.timers` for when ticks happen.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import cloudpickle
import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.durations import format_duration, parse_duration
from headwater.engines.arguments import Argument, arg
from headwater.engines.base import SEQ, EngineKind, OneInputEngine, Processor
from headwater.errors import ExecutionError, GraphDefinitionError, clip, shorten
from headwater.types import Schema

MAX_VARIABLES = 1_000
MAX_STATE_BYTES = 256 * 2**20  # a udf_engine task's variables, pickled: saved whole with every micro-batch
MIN_TIMER_INTERVAL = timedelta(milliseconds=100)
MAX_TIMER_INTERVAL = timedelta(days=1)
MAX_TIMER_ARGS = 64
MAX_ARG_CHARS = 65_536
TIMER_OPS = ("stop_timer_engine", "resume_timer_engine")  # Orca's stopTimerEngine / resumeTimerEngine


def _callable_name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or type(fn).__qualname__)


class InitialValues:
    """A udf_engine's initial variables: travels pickled beside the plan (it is the user's data, any picklable
    value) and is loaded only where the graph runs; each call returns a fresh deep copy."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = dict(values)

    def __call__(self) -> dict[str, Any]:
        return copy.deepcopy(self.values)


class UdfState:
    """One stream task's variables: pickled with cloudpickle inside the snapshot (a variable may hold a value
    plain pickle refuses, e.g. a lambda), with a clear error naming the engine when they cannot be saved."""

    def __init__(self, variables: dict[str, Any], where: str = "udf_engine") -> None:
        self.variables, self.where = variables, where

    def __reduce__(self) -> tuple[Any, ...]:
        try:
            data = cloudpickle.dumps(self.variables, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise ExecutionError(f"{self.where}: its variables must be picklable, as they are saved with every "
                                 f"micro-batch, and these are not ({type(exc).__name__}: {shorten(str(exc), 500)}); "
                                 "keep only picklable values (numbers, strings, lists, dicts, DataFrames) in them"
                                 ) from None
        if len(data) > MAX_STATE_BYTES:
            raise ExecutionError(f"{self.where}: its variables pickle to {len(data)} bytes, over the limit of "
                                 f"{MAX_STATE_BYTES} (they are saved whole with every micro-batch); keep less "
                                 "in them, e.g. write history to a table through the output")
        return _load_udf_state, (data, self.where)


def _load_udf_state(data: bytes, where: str) -> UdfState:
    return UdfState(cloudpickle.loads(data), where)


def _function(a: Argument) -> Callable[..., Any]:
    if not callable(a.value) or isinstance(a.value, type):
        raise GraphDefinitionError(f"{a.where} must be a function, got {clip(a.value)}")
    return a.value  # type: ignore[no-any-return]


def _variables(a: Argument) -> Mapping[str, Any]:
    value = {} if a.value is None else a.value
    if not isinstance(value, Mapping):
        raise GraphDefinitionError(f"{a.where} must be a dict of variable name to initial value (Orca's "
                                   f"variableNames and initValues), got {clip(value)}; e.g. variables={{'count': 0}}")
    if len(value) > MAX_VARIABLES:
        raise GraphDefinitionError(f"{a.where}: {len(value)} variables, more than the limit of {MAX_VARIABLES}; "
                                   "group them in one dict")
    bad = [k for k in value if not isinstance(k, str) or not k.isidentifier() or len(k) > 128]
    if bad:
        raise GraphDefinitionError(f"{a.where}: variable name {clip(bad[0])} is not a Python identifier (of at most "
                                   "128 characters)")
    return value


def initial_variables(value: Mapping[str, Any] | None, *, where: str) -> dict[str, Any]:
    """A deep copy of the variables as ``udf_engine(variables=...)`` gives them, checked."""
    return copy.deepcopy(dict(_variables(Argument(value, "variables", "variables", where, {}))))


def _variable_names(a: Argument) -> tuple[str, ...]:
    return tuple(_variables(a))


def _initial_values(a: Argument) -> InitialValues:
    values = _variables(a)
    try:
        cloudpickle.dumps(values)
    except Exception as exc:
        raise GraphDefinitionError(f"{a.where}: the initial values cannot be pickled ({type(exc).__name__}: "
                                   f"{shorten(str(exc), 500)}); they travel with the graph to the worker") from None
    return InitialValues(values)


def _output_columns(a: Argument) -> tuple[str, ...] | None:
    if a.value is None:
        return None
    value = (a.value,) if isinstance(a.value, str) else a.value
    if not isinstance(value, list | tuple) or not value or not all(isinstance(c, str) for c in value):
        raise GraphDefinitionError(f"{a.where} must be a non-empty list of column names (or None: every column "
                                   f"the function returns), got {clip(a.value)}")
    return tuple(value)


def _schema(a: Argument) -> Schema | None:
    if a.value is None:
        return None
    if not isinstance(a.value, Mapping | Schema):
        raise GraphDefinitionError(f"{a.where} must be a dict of column name to type, e.g. {{'price': 'double'}}, "
                                   f"got {clip(a.value)}")
    return Schema.parse(a.value, where=a.where)


@dataclass(frozen=True)
class UdfEngine(OneInputEngine):
    """Parameters of ``udf_engine``; ``output_schema`` is given or inferred by ``DStream.udf_engine``."""

    kind: ClassVar[EngineKind] = EngineKind.UDF
    # the fields that hold functions: pickled beside the plan, loaded only where the graph runs (plan.codec)
    CALLABLE_FIELDS: ClassVar[tuple[str, ...]] = ("func", "init_values")
    func: Callable[..., Any] = field(default=None, metadata=arg(_function))  # type: ignore[assignment]
    output_columns: tuple[str, ...] | None = field(default=None, metadata=arg(_output_columns))
    variable_names: tuple[str, ...] = field(default=(), metadata=arg(_variable_names, name="variables"))
    init_values: Callable[[], dict[str, Any]] = field(default=None, metadata=arg(_initial_values,  # type: ignore[assignment]
                                                                                  name="variables"))
    result_schema: Schema | None = field(default=None, metadata=arg(_schema, name="output_schema"))
    func_name: str = ""  # as the user's code names it (the master sees the function only as opaque bytes)

    def validate(self) -> None:
        if self.func is None or not callable(self.func):
            raise GraphDefinitionError(f"{self.where}: func must be a function, got {clip(self.func)}")
        if not self.func_name:
            object.__setattr__(self, "func_name", _callable_name(self.func))
        if self.init_values is None:
            object.__setattr__(self, "init_values", InitialValues({}))
        schema = self.result_schema
        if schema is None:
            raise GraphDefinitionError(f"{self.where}: no output schema; pass output_schema={{column: type}}")
        if self.output_columns is not None:
            missing = [c for c in self.output_columns if c not in schema]
            if missing:
                raise GraphDefinitionError(f"{self.where}: output column {clip(missing[0])} is not among the "
                                           f"function's columns ({', '.join(schema.names)})")
            if len(set(self.output_columns)) != len(self.output_columns):
                raise GraphDefinitionError(f"{self.where}: output_columns names a column twice")
            schema = Schema(tuple((c, schema[c]) for c in self.output_columns))
            object.__setattr__(self, "result_schema", schema)
        if not schema.columns:
            raise GraphDefinitionError(f"{self.where}: the output has no columns")
        if SEQ in schema:
            raise GraphDefinitionError(f"{self.where}: {SEQ!r} is a reserved column name")

    def output_schema(self) -> Schema:
        assert self.result_schema is not None
        return self.result_schema

    def properties(self) -> dict[str, Any]:
        return {"func": self.func_name, "outputColumns": list(self.output_schema().names),
                "variableNames": list(self.variable_names)}


class UdfProcessor(Processor, runs=UdfEngine):
    def __init__(self, spec: UdfEngine) -> None:
        self.spec = spec
        self.schema = spec.output_schema().to_arrow()

    def new_state(self) -> UdfState:
        return UdfState(self.spec.init_values(), self.spec.where)

    def stats(self, state: Any) -> dict[str, int]:
        return {}

    def process(self, state: UdfState, table: pa.Table, *, batch_time: float = 0.0) -> tuple[UdfState, pa.Table]:
        spec, where = self.spec, self.spec.where
        seq = table[SEQ].to_numpy()
        batch = table.drop_columns([SEQ]).to_pandas()
        try:
            result = spec.func(state.variables, batch)
        except Exception as exc:  # the user's function: fail the micro-batch (it replays from the state before)
            raise ExecutionError(f"{where}: {spec.func_name} raised {type(exc).__name__}: "
                                 f"{shorten(str(exc), 500)}") from exc
        if result is None:  # no rows for this micro-batch
            return state, self.schema.append(pa.field(SEQ, pa.int64())).empty_table()
        out = _as_arrow(result, where)
        missing = [c for c in self.schema.names if c not in out.column_names]
        if missing:
            raise ExecutionError(f"{where}: {spec.func_name} returned no column {clip(missing[0])} "
                                 f"(returned: {', '.join(out.column_names) or 'no columns'}); it must return the "
                                 f"output columns {', '.join(self.schema.names)}")
        try:
            out = out.select(list(self.schema.names)).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise ExecutionError(f"{where}: {spec.func_name} returned columns that do not fit the "
                                 f"output schema {spec.output_schema()}: {shorten(str(exc), 500)}") from None
        # rows in, rows out: each keeps its input row's order key; otherwise all follow the batch's last row
        out_seq = seq if out.num_rows == len(seq) else np.full(out.num_rows, seq[-1] if len(seq) else 0)
        return state, out.append_column(SEQ, pa.array(out_seq, pa.int64()))


def _as_arrow(result: Any, where: str) -> pa.Table:
    if isinstance(result, pa.Table):
        return result
    if isinstance(result, Mapping):
        try:
            result = pd.DataFrame({str(k): v for k, v in result.items()})
        except ValueError as exc:
            raise ExecutionError(f"{where}: the function returned a dict whose columns do not make a table: "
                                 f"{shorten(str(exc), 500)}") from None
    if isinstance(result, pd.DataFrame):
        try:
            return pa.Table.from_pandas(result, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ExecutionError(f"{where}: the function's DataFrame cannot be read as columns: "
                                 f"{shorten(str(exc), 500)}") from None
    raise ExecutionError(f"{where}: the function must return a pandas DataFrame, an Arrow table, a dict of "
                         f"columns or None, got {type(result).__name__}")


# -- timer_engine ----------------------------------------------------------------------------------------
_PLAIN = (type(None), bool, int, float, str)


def _timer_interval(a: Argument) -> timedelta:
    interval = parse_duration(a.value, where=a.where)
    if not MIN_TIMER_INTERVAL <= interval <= MAX_TIMER_INTERVAL:
        raise GraphDefinitionError(f"{a.where}: {format_duration(interval)} is outside "
                                   f"{format_duration(MIN_TIMER_INTERVAL)}..{format_duration(MAX_TIMER_INTERVAL)}")
    return interval


def _plain(value: Any, where: str) -> Any:
    """A timer argument as the plan stores it: None, bool, int, float, str, or a list/tuple of them (a tuple)."""
    if isinstance(value, list | tuple):
        return tuple(_plain(v, where) for v in value)
    if isinstance(value, str) and len(value) > MAX_ARG_CHARS:
        raise GraphDefinitionError(f"{where}: a text of {len(value)} characters, over the limit of {MAX_ARG_CHARS}")
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        raise GraphDefinitionError(f"{where}: {clip(value)} does not fit 64 bits")
    if not isinstance(value, _PLAIN):
        raise GraphDefinitionError(
            f"{where}: {type(value).__name__} values cannot travel as timer arguments (they are stored in the plan "
            "as text: None, bool, int, float, str, or lists of them); for other values close over them instead, "
            "e.g. timer_engine('5s', functools.partial(func, value))")
    return value


def _timer_args(a: Argument) -> tuple[Any, ...]:
    args = tuple(a.value) if isinstance(a.value, list | tuple) else (a.value,)
    if len(args) > MAX_TIMER_ARGS:
        raise GraphDefinitionError(f"{a.where}: {len(args)} arguments, more than the limit of {MAX_TIMER_ARGS}")
    return tuple(_plain(v, f"{a.where}[{i}]") for i, v in enumerate(args))


@dataclass(frozen=True)
class TimerEngine(OneInputEngine):
    """Parameters of ``timer_engine``: rows pass through; ``func(*args)`` runs every ``interval`` on the worker."""

    kind: ClassVar[EngineKind] = EngineKind.TIMER
    CALLABLE_FIELDS: ClassVar[tuple[str, ...]] = ("func",)
    interval: timedelta = field(default=timedelta(seconds=1), metadata=arg(_timer_interval))
    func: Callable[..., Any] = field(default=None, metadata=arg(_function))  # type: ignore[assignment]
    args: tuple[Any, ...] = field(default=(), metadata=arg(_timer_args))
    func_name: str = ""

    def validate(self) -> None:
        if self.func is None or not callable(self.func):
            raise GraphDefinitionError(f"{self.where}: func must be a function, got {clip(self.func)}")
        if not self.func_name:
            object.__setattr__(self, "func_name", _callable_name(self.func))
        if not MIN_TIMER_INTERVAL <= self.interval <= MAX_TIMER_INTERVAL:
            raise GraphDefinitionError(f"{self.where}: interval {clip(self.interval)} is outside "
                                       f"{format_duration(MIN_TIMER_INTERVAL)}..{format_duration(MAX_TIMER_INTERVAL)}")

    def output_schema(self) -> Schema:
        return self.input_schema

    def properties(self) -> dict[str, Any]:
        return {"interval": format_duration(self.interval), "func": self.func_name,
                "args": [list(a) if isinstance(a, tuple) else a for a in self.args]}

    def check_control(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """``{"op": "stop_timer_engine"}`` or ``{"op": "resume_timer_engine"}`` (Orca's stopTimerEngine and
        resumeTimerEngine through useOrcaStreamEngine), checked."""
        kind = op.get("op")
        if kind not in TIMER_OPS or set(op) != {"op"}:
            raise GraphDefinitionError(f"{self.where}: unknown timer change {clip(dict(op))}; expected "
                                       f"{{'op': one of {', '.join(TIMER_OPS)}}}")
        return {"op": kind}


class TimerProcessor(Processor, runs=TimerEngine):
    """Rows pass through untouched; the timer itself runs beside the queries (headwater.runtime.timers)."""

    def __init__(self, spec: TimerEngine) -> None:
        self.spec = spec

    def new_state(self) -> None:
        return None

    def process(self, state: None, table: pa.Table, *, batch_time: float = 0.0) -> tuple[None, pa.Table]:
        return state, table
