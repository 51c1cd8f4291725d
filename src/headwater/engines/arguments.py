"""An engine's arguments as the user gives them (``"60s"``, ``"sym"``, ``["sum(v) as v"]``) and as its spec stores them.

A spec field whose user value needs converting declares how with :func:`arg`; ``DStream``'s engine methods pass
their arguments to :func:`from_arguments`, which builds the spec. So each argument is declared once, on its
spec, and the method is only its signature and docstring.

>>> from headwater.engines.reactive_state import ReactiveStateEngine
>>> from headwater.types import Schema
>>> spec = from_arguments(ReactiveStateEngine, {"self": None, "metrics": ["cumsum(v) as total"], "key_column": "k"},
...                       name="r", input_schema=Schema.parse({"k": "string", "v": "double"}))
>>> spec.key_column, [str(m) for m in spec.metrics]
(('k',), ['cumsum(v) as total'])
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from headwater.durations import parse_duration
from headwater.engines.base import EngineSpec
from headwater.engines.calendar_windows import time_of_day_text
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.parse import metric_items, parse_expr, to_metric, to_metrics

S = TypeVar("S", bound=EngineSpec)


@dataclass(frozen=True)
class Argument:
    """One argument of an engine call: its value, the call's other arguments, and where errors point."""

    value: Any
    name: str  # the argument's name (the field's, unless ``arg(name=...)``)
    field: str  # the spec field it fills
    engine: str  # the engine as errors name it: time_series_engine 'bars'
    arguments: Mapping[str, Any]

    @property
    def where(self) -> str:
        return f"{self.engine} {self.name}"


Convert = Callable[[Argument], Any]


def arg(convert: Convert, *, name: str | None = None) -> dict[str, Any]:
    """The metadata of a spec field whose argument ``convert`` turns into the field's value (``name``: the argument's
    name, if it differs): ``step: timedelta = field(metadata=arg(duration))``."""
    return {"convert": convert, "argument": name}


def from_arguments(spec: type[S], arguments: Mapping[str, Any], **given: Any) -> S:
    """The ``spec`` for an engine call: ``given`` fields as they are, each other init
    field from the argument of its name, converted as its :func:`arg` says; fields without an argument keep their
    default, and arguments that are no field (``self``) are ignored."""
    engine = f"{spec.kind.lower()} {clip(given['name'])}"
    values = dict(given)
    for f in dataclasses.fields(spec):
        name = f.metadata.get("argument") or f.name
        if not f.init or f.name in given or name not in arguments:
            continue
        convert = f.metadata.get("convert")
        value = arguments[name]
        values[f.name] = value if convert is None else convert(Argument(value, name, f.name, engine, arguments))
    return spec(**values)


def optional(convert: Convert) -> Convert:
    """``convert``, with None passed through."""
    return lambda a: None if a.value is None else convert(a)


def duration(a: Argument) -> timedelta:
    return parse_duration(a.value, where=a.where)


def duration_or_zero(a: Argument) -> timedelta:
    return parse_duration(a.value, where=a.where, allow_zero=True)


def columns(a: Argument) -> tuple[str, ...]:
    return as_tuple(a.value, a.where)


def metric_list(a: Argument) -> tuple[Expr, ...]:
    return to_metrics(a.value, where=a.engine)


def expression(a: Argument) -> Expr | None:
    return a.value if a.value is None or isinstance(a.value, Expr) else parse_expr(a.value, where=a.where)


def as_given(kind: Callable[[Any], Any]) -> Convert:
    """The value made a ``kind`` (``tuple``, ``float``), unchecked."""
    return lambda a: kind(a.value)


def as_tuple(value: str | Sequence[str] | None, where: str) -> tuple[str, ...]:
    """A column name or a list of names (None: none) as a tuple; anything else is refused naming ``where``."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise GraphDefinitionError(f"{where} must be a column name or a list of names, got {clip(value)}")


def windows_and_metrics(a: Argument) -> Any:
    """``window`` and ``metrics`` read together: one window and its metrics, or (Orca's vector windowSize) a list of
    windows and a list of metric lists, flattened; the fields ``window``, ``metrics`` and ``metric_windows`` (the
    window index of each metric) each take their part."""
    window, given, where = a.arguments["window"], a.arguments["metrics"], a.engine
    parts: tuple[Any, tuple[Expr, ...], tuple[int, ...]]
    if not isinstance(window, list | tuple):
        parts = parse_duration(window, where=f"{where} window"), to_metrics(given, where=where), ()
    else:
        windows = tuple(parse_duration(w, where=f"{where} window") for w in window)
        if not windows:
            raise GraphDefinitionError(f"{where}: window is an empty list; give a duration or a list of them")
        groups = list(given) if not isinstance(given, str) else [given]
        if len(groups) != len(windows) or any(isinstance(g, str | Expr) for g in groups):
            raise GraphDefinitionError(
                f"{where}: with {len(windows)} windows, metrics must be a list of {len(windows)} lists, one per "
                "window; e.g. window=['1m', '5m'], metrics=[['sum(v) as v1'], ['sum(v) as v5']]"
            )
        flat = [(to_metric(m, where=where), i) for i, group in enumerate(groups) for m in metric_items(group, where=where)]
        parts = windows, tuple(m for m, _ in flat), tuple(i for _, i in flat)
    return parts[("window", "metrics", "metric_windows").index(a.field)]


def duration_pair(a: Argument) -> tuple[timedelta, timedelta]:
    """``"0s:10s"`` or ``("0s", "10s")`` (Orca's ``0s:10s``)."""
    value = a.value
    parts = value.split(":") if isinstance(value, str) else list(value) if isinstance(value, tuple | list) else []
    if len(parts) != 2:
        raise GraphDefinitionError(f"{a.where}: expected a pair like '0s:10s' or ('0s', '10s'), got {clip(value)}")
    lo, hi = (parse_duration(p.strip() if isinstance(p, str) else p, where=a.where, allow_zero=True) for p in parts)
    return lo, hi


def signed_duration_pair(a: Argument) -> tuple[timedelta, timedelta]:
    """``"a:b"`` or ``(a, b)``: two signed durations (``"-5s"``, ``"0s"``, ``timedelta``) or 0 (the window join's)."""
    value, where = a.value, a.engine
    parts = value.split(":") if isinstance(value, str) else list(value) if isinstance(value, list | tuple) else []
    if len(parts) != 2:
        raise GraphDefinitionError(f"{where}: window must be 'a:b' or (a, b), e.g. '-5s:0s' or (0, 0); got {clip(value)}")

    def one(part: Any) -> timedelta:
        if (isinstance(part, int) and not isinstance(part, bool) and part == 0) or part in ("0", " 0"):
            return timedelta(0)
        if isinstance(part, timedelta):
            return part
        text = str(part).strip()
        sign = -1 if text.startswith("-") else 1
        return sign * parse_duration(text.lstrip("-+"), where=f"{where} window", allow_zero=True)

    return one(parts[0]), one(parts[1])


def fill_modes(a: Argument) -> str | float | tuple[Any, ...]:
    """One fill mode or value for every metric, or a list of them, one per metric (checked by the engine)."""
    if isinstance(a.value, str | int | float):
        return a.value
    if isinstance(a.value, Sequence):
        return tuple(a.value)
    raise GraphDefinitionError(f"{a.where}: expected a fill mode ('none', 'null', 'ffill'), a number, or a "
                               f"list of them, got {clip(a.value)}")


def fill_values(a: Argument) -> tuple[Any, ...]:
    """``null_fill`` as a tuple: a list or tuple of values, one per output column."""
    if not isinstance(a.value, list | tuple):
        raise GraphDefinitionError(f"{a.engine}: null_fill must be a list with one value per output column (None "
                                   f"keeps its NULLs), got {clip(a.value)}")
    return tuple(a.value)


def times_of_day(a: Argument) -> tuple[str, ...]:
    """A list of times of day (``"09:30"``, ``"09:30:00"``, ``datetime.time``) as their canonical texts."""
    if isinstance(a.value, str | dt.time) or not isinstance(a.value, Sequence):
        raise GraphDefinitionError(f"{a.where}: expected a list of times of day, got {clip(a.value)}; "
                                   "e.g. ['09:30', '11:30']")
    return tuple(time_of_day_text(v, where=f"{a.where}[{i}]") for i, v in enumerate(a.value))


def times_of_day_or(default: tuple[str, ...]) -> Convert:
    """:func:`times_of_day`, where one time stands for a list of it and None for ``default``."""
    def convert(a: Argument) -> tuple[str, ...]:
        if a.value is None:
            return default
        return times_of_day(dataclasses.replace(a, value=[a.value] if isinstance(a.value, str | dt.time) else a.value))

    return convert
