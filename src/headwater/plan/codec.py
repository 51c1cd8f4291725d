"""Plan values as JSON: graph nodes, engine specs and expressions, decoded only into allow-listed types.

A value encodes to plain JSON (enumerations, all ``StrEnum``, as their text): numbers, strings, ``null``, lists (Python tuples), and objects tagged with
``"$type"`` (a frozen dataclass from :data:`TYPES`, its init fields by name), ``"$expr"`` (an expression
as the text the user would write, whenever parsing that text gives the same expression back),
``"$timedelta"``
(microseconds), ``"$float"`` (NaN and infinities), ``"$datetime"``/``"$date"`` (ISO) or ``"$callable"``.
A user's Python function is the only thing pickled, and only in the slots of :data:`CALLABLE_SLOTS`
(``map(fn)``, ``generic_state_iterate(func=fn)``) and the fields an engine spec lists in ``CALLABLE_FIELDS``
(``udf_engine``, ``timer_engine``): the encoding names it, and its cloudpickle travels beside
the plan under that name. Decoding builds nothing outside :data:`TYPES`, every dataclass validates itself
again, and a function stays an :class:`~headwater.plan.callables.OpaqueCallable` unless the caller hands
over the loaded ones (:func:`load_callable`, only where the graph runs), so a hand-edited or hostile
document fails with a clear :class:`~headwater.errors.GraphDefinitionError` instead of building an arbitrary
object or running code.

>>> from headwater.parse import parse_metric
>>> callables: dict[str, bytes] = {}
>>> data = encode(parse_metric("mavg(price, 3) as m"), callables)
>>> data
{'$expr': 'mavg(price, window=3) as m'}
>>> str(decode(data, {}))
'mavg(price, window=3) as m'
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import math
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle
import numpy as np

from headwater.engines.catalog import SPECS
from headwater.engines.reactive_stateless import Formula
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Alias, Call, Col, Expr, Item, Lit, MultiExpr
from headwater.parse import builtins_only, parse_metric
from headwater.plan.callables import OpaqueCallable
from headwater.plan.logical import EngineNode, HaOptions, MapNode, Parallelism, TableNode
from headwater.types import Schema

# Everything a plan may hold: every engine spec (headwater.engines.catalog) and the parts of a plan.
TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    Schema, Parallelism, TableNode, HaOptions, EngineNode, MapNode, Col, Lit, Call, Item, Alias, MultiExpr, Formula,
    *SPECS.values(),
)}

# Where a plan may hold a Python function: a MapNode's ``fn``, and the named parameter of the functions that
# take a callable (function name -> parameter). A "$callable" anywhere else is refused before anything loads.
CALLABLE_SLOTS: dict[str, str] = {"generic_state_iterate": "func"}

_MAX_DEPTH = 200  # deeper documents are refused before Python's recursion limit is
_TAGS = ("$type", "$expr", "$timedelta", "$float", "$datetime", "$date", "$callable")


def encode(value: Any, callables: dict[str, bytes]) -> Any:
    """``value`` as JSON-ready data; user functions are pickled into ``callables`` under their names."""
    return _encode(value, callables, as_text=True)


def _encode(value: Any, callables: dict[str, bytes], *, as_text: bool) -> Any:
    """``as_text``: an expression may become its text; inside an expression's tree it may not (one parse
    per metric, not one per sub-expression)."""
    if as_text and isinstance(value, Expr):
        tree = _encode(value, callables, as_text=False)
        text = str(value)
        try:
            with builtins_only():  # a user's @state function may not exist where the plan is read
                same = _encode(parse_metric(text), callables, as_text=False) == tree
        except Exception:  # an expression the parser cannot read back (e.g. a traced @state call)
            same = False
        return {"$expr": text} if same else tree
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else {"$float": repr(float(value))}
    if isinstance(value, dt.timedelta):
        return {"$timedelta": value // dt.timedelta(microseconds=1)}
    if isinstance(value, dt.datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, tuple):
        return [_encode(v, callables, as_text=as_text) for v in value]
    if isinstance(value, OpaqueCallable):  # a dataclass itself, but stored as the function it stands for
        return {"$callable": _store_callable(value, callables)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if TYPES.get(name) is not type(value):
            raise TypeError(f"cannot store a {type(value).__qualname__} in a plan")
        out: dict[str, Any] = {"$type": name}
        inner = as_text and not isinstance(value, (Expr, MultiExpr))
        for f in dataclasses.fields(value):
            if f.init:
                out[f.name] = _encode(getattr(value, f.name), callables, as_text=inner)
        return out
    if callable(value):
        return {"$callable": _store_callable(value, callables)}
    raise TypeError(f"cannot store a {type(value).__qualname__} in a plan")


def _store_callable(fn: Callable[..., Any], callables: dict[str, bytes]) -> str:
    if isinstance(fn, OpaqueCallable):  # the master writes back the bytes it was given, never loading them
        pickled, base = fn.data, fn.name
    else:
        pickled = cloudpickle.dumps(fn)
        base = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    name, n = base, 1
    while callables.get(name, pickled) != pickled:  # another function of the same name
        n += 1
        name = f"{base}#{n}"
    callables[name] = pickled
    return name


def decode(data: Any, callables: Mapping[str, Any], *, where: str = "plan", used: set[str] | None = None) -> Any:
    """Rebuild a value from :func:`encode`'s data; anything not allow-listed raises GraphDefinitionError.

    ``callables`` maps each function name the data may refer to (``{"$callable": name}``) to the value put in
    its place: an :class:`OpaqueCallable` (nothing is loaded) or the function :func:`load_callable` returned.
    ``used`` collects the names referred to.
    """
    return _decode(data, callables, where, 0, used if used is not None else set(), allow_callable=False)


def _decode(data: Any, callables: Mapping[str, Any], where: str, depth: int, used: set[str], *,
            allow_callable: bool) -> Any:
    if depth > _MAX_DEPTH:
        raise GraphDefinitionError(f"{where}: nested deeper than {_MAX_DEPTH} levels")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return tuple(_decode(v, callables, where, depth + 1, used, allow_callable=False) for v in data)
    if not isinstance(data, dict):
        raise GraphDefinitionError(f"{where}: unexpected value {clip(data)}")
    tags = [t for t in _TAGS if t in data]
    if len(tags) != 1 or (tags[0] != "$type" and len(data) != 1):
        raise GraphDefinitionError(f"{where}: unexpected object {clip(data)}; a tagged value has exactly one of "
                                   f"{', '.join(_TAGS)} (and a $type its fields)")
    try:
        if "$type" in data:
            cls = TYPES.get(data["$type"]) if isinstance(data["$type"], str) else None
            if cls is None:
                raise GraphDefinitionError(f"{where}: unknown type {clip(data['$type'])}; "
                                           f"a plan holds only {', '.join(sorted(TYPES))}")
            fields = {f.name for f in dataclasses.fields(cls) if f.init}
            unknown = sorted(set(data) - fields - {"$type"})
            if unknown:
                raise GraphDefinitionError(f"{where}: {cls.__name__} has no field {clip(unknown[0])}")
            args = {}
            for k, v in data.items():
                if k == "$type":
                    continue
                w = f"{where} > {k}"
                if cls is Call and k == "params":
                    args[k] = _decode_params(v, data.get("func"), callables, w, depth + 1, used)
                else:
                    args[k] = _decode(v, callables, w, depth + 1, used, allow_callable=k in _callable_fields(cls))
            return cls(**args)
        if "$expr" in data:
            if not isinstance(data["$expr"], str):
                raise GraphDefinitionError(f"{where}: an expression must be text, got {clip(data['$expr'])}")
            return parse_metric(data["$expr"], where=where)
        if "$timedelta" in data:
            return dt.timedelta(microseconds=int(data["$timedelta"]))
        if "$float" in data:
            if data["$float"] not in ("nan", "inf", "-inf"):
                raise GraphDefinitionError(f"{where}: bad float {clip(data['$float'])}")
            return float(data["$float"])
        if "$datetime" in data:
            return dt.datetime.fromisoformat(data["$datetime"])
        if "$date" in data:
            return dt.date.fromisoformat(data["$date"])
        name = data["$callable"]
        if not allow_callable:
            slots = ", ".join(f"{f}({p}=...)" for f, p in CALLABLE_SLOTS.items())
            raise GraphDefinitionError(f"{where}: a Python function ({clip(name)}) where the plan allows none; "
                                       f"functions go only in map(fn), udf_engine, timer_engine and {slots}. "
                                       "Refused before anything was loaded")
        if not isinstance(name, str) or name not in callables:
            raise GraphDefinitionError(f"{where}: function {clip(name)} is not among the plan's callables")
        used.add(name)
        return callables[name]
    except GraphDefinitionError:
        raise
    except Exception as exc:  # a spec that no longer validates, a wrong field type, a bad enum value
        raise GraphDefinitionError(f"{where}: {type(exc).__name__}: {clip(str(exc))}") from None


def _callable_fields(cls: type) -> tuple[str, ...]:
    """The fields of ``cls`` that may hold a Python function: a MapNode's ``fn``, and those an engine spec lists in
    its ``CALLABLE_FIELDS`` (udf_engine's ``func`` and initial values, timer_engine's ``func``)."""
    return ("fn",) if cls is MapNode else tuple(getattr(cls, "CALLABLE_FIELDS", ()))


def _decode_params(data: Any, func: Any, callables: Mapping[str, Any], where: str, depth: int,
                   used: set[str]) -> tuple[tuple[str, Any], ...]:
    """A Call's ``(name, value)`` parameters; a function only as the parameter :data:`CALLABLE_SLOTS` names."""
    if not isinstance(data, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                             for p in data):
        raise GraphDefinitionError(f"{where}: expected a list of [name, value] pairs, got {clip(data)}")
    slot = CALLABLE_SLOTS.get(func) if isinstance(func, str) else None
    return tuple((k, _decode(v, callables, f"{where} > {k}", depth + 1, used, allow_callable=k == slot))
                 for k, v in data)


def load_callable(fn: OpaqueCallable) -> Any:
    """Unpickle a plan's function: runs code, so only where the graph runs (never on the master)."""
    try:
        return cloudpickle.loads(fn.data)
    except Exception as exc:  # a module the function needs is missing here, or the bytes are not a pickle
        raise GraphDefinitionError(f"plan function {clip(fn.name)} (sha256 {fn.digest[:12]}) cannot be loaded: "
                                   f"{type(exc).__name__}: {clip(str(exc))}") from None


def pack_callables(callables: Mapping[str, bytes]) -> dict[str, str]:
    """``callables`` for a JSON document (base64)."""
    return {name: base64.b64encode(b).decode("ascii") for name, b in sorted(callables.items())}


def unpack_callables(packed: Any, *, where: str = "plan") -> dict[str, bytes]:
    if not isinstance(packed, dict):
        raise GraphDefinitionError(f"{where}: 'callables' must be an object of name to base64 pickle")
    try:
        return {str(name): base64.b64decode(text, validate=True) for name, text in packed.items()}
    except (TypeError, ValueError) as exc:
        raise GraphDefinitionError(f"{where}: a callable is not valid base64 ({exc})") from None
