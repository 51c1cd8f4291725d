"""Operation arguments and results on the wire, by their declared types (:mod:`headwater.runtime.operations`).

An operation's arguments travel as one JSON object (rows, the one ``pa.Table`` argument, as an Arrow IPC body
with the other arguments in the query string); :func:`to_wire` writes a value of a declared type, :func:`from_wire`
reads it back and checks it strictly, so a request that does not fit its declaration is refused with a
:class:`~headwater.errors.RequestError` naming the argument, before the master sees it.

>>> from headwater.runtime.operations import TableName
>>> to_wire(from_wire("demo.stream_table.t", TableName, "fqn"), TableName)
'demo.stream_table.t'
>>> from_wire(1, bool, "include_tables")
Traceback (most recent call last):
...
headwater.errors.RequestError: include_tables: expected a bool, got 1
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from headwater.catalog import FQN, resolve
from headwater.errors import RequestError, clip
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.storage.records import TableRecord
from headwater.storage.retention import Retention
from headwater.types import Schema

_PLAIN = {str: "a string", int: "an integer", float: "a number", bool: "a bool"}


def _optional(kind: Any) -> tuple[Any, bool]:
    """``(X, True)`` for ``X | None``, else ``(kind, False)``."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(kind)) == 2:
            return args[0], True
    return kind, False


def to_wire(value: Any, kind: Any) -> Any:
    """``value`` (of declared type ``kind``) as JSON-ready data."""
    kind, _ = _optional(kind)
    if value is None:
        return None
    if typing.get_origin(kind) is typing.Annotated or isinstance(value, FQN):
        return str(value)
    if isinstance(value, Schema):
        return [list(c) for c in value.columns]
    if isinstance(value, Retention):
        return {"minutes": value.minutes, "rows": value.rows}
    if isinstance(value, CheckpointConfig):
        return dataclasses.asdict(value)
    if isinstance(value, TableRecord):
        return {"fqn": value.fqn, "kind": value.kind, "schema": [list(c) for c in value.schema.columns],
                "key_columns": list(value.key_columns), "time_column": value.time_column}
    if isinstance(value, tuple):
        return list(value)
    return value


def from_wire(data: Any, kind: Any, name: str) -> Any:
    """The value of declared type ``kind`` that ``data`` encodes; a :class:`RequestError` if it does not fit."""
    kind, optional = _optional(kind)
    if data is None:
        if optional:
            return None
        raise RequestError(f"{name}: a value is required")
    if typing.get_origin(kind) is typing.Annotated:
        schema = typing.get_args(kind)[1]
        return resolve(_expect(data, str, name), schema, current_catalog=None)
    if kind is Schema:
        pairs = _expect(data, list, name)
        if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
            raise RequestError(f"{name}: a schema is a list of [name, type] pairs")
        return Schema.parse(dict(pairs), where=name)
    if kind is Retention:
        doc = _expect(data, dict, name)
        if set(doc) - {"minutes", "rows"}:
            raise RequestError(f"{name}: a retention has minutes and rows only, got {clip(sorted(doc))}")
        return Retention(minutes=doc.get("minutes"), rows=doc.get("rows"))
    if kind is CheckpointConfig:
        return CheckpointConfig.parse(_expect(data, dict, name))
    if kind is TableRecord:
        doc = _expect(data, dict, name)
        return TableRecord(doc["fqn"], "", doc["kind"], Schema(tuple(tuple(c) for c in doc["schema"])),
                           tuple(doc["key_columns"]), doc["time_column"], None)
    origin = typing.get_origin(kind)
    if origin is tuple:
        items = _expect(data, list, name)
        if not all(isinstance(x, str) for x in items):
            raise RequestError(f"{name}: expected a list of strings, got {clip(items)}")
        return tuple(items)
    if origin is dict or kind is dict:
        return _expect(data, dict, name)
    if origin is list:
        return _expect(data, list, name)
    if kind in _PLAIN:
        if kind is float and isinstance(data, int) and not isinstance(data, bool):
            return float(data)
        return _expect(data, kind, name)
    if kind is Any:
        return data
    raise TypeError(f"{name}: no wire form for {kind!r}")  # a declaration the wire does not know: a bug


def _expect(data: Any, kind: type, name: str) -> Any:
    if not isinstance(data, kind) or (kind is int and isinstance(data, bool)):
        raise RequestError(f"{name}: expected {_PLAIN.get(kind, 'a ' + kind.__name__)}, got {clip(data)}")
    return data
