"""A stream table's definition: its kinds, the Delta configuration that records it, its checks.

Here: the configuration keys under which a table keeps its kind, key, time column, schema and retention,
:func:`create_delta_table` (record a definition in a new table) and :func:`read_definition` (read it back),
:func:`check_definition` (is a definition valid), :func:`conform` (make appended data fit the schema) and
:func:`table_identity` (which table lives at a path).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from headwater.errors import GraphDefinitionError, NameTakenError, SchemaError, clip
from headwater.storage.memory import buffer_pool
from headwater.storage.retention import Retention
from headwater.storage.table_log import log_dir
from headwater.types import ARROW_TYPES, NUMERIC, TEMPORAL, Schema, TableKind, canonical_type, element_of

if TYPE_CHECKING:
    from deltalake import DeltaTable

KINDS = tuple(TableKind)

# Delta table configuration keys. The delta.* ones make the table append-only
# (a stream offset must never lose rows) and keep every commit file, because a
# stopped query resumes from the commit after its checkpointed version.
CONF_FORMAT = "headwater.formatVersion"
CONF_KIND = "headwater.kind"
CONF_KEYS = "headwater.keyColumns"
CONF_TIME = "headwater.timeColumn"
CONF_SCHEMA = "headwater.schema"
CONF_RETENTION = "headwater.retention"
FORMAT_VERSION = "1"

ID_FILE = "_headwater_table_id"  # written once at creation: which table lives at this path


@dataclass(frozen=True)
class TableDefinition:
    """What a stream table is: its name (for messages), schema, kind, key and time column."""

    name: str
    schema: Schema
    kind: str = "plain"
    key_columns: tuple[str, ...] = ()
    time_column: str | None = None


def create_delta_table(path: Path, definition: TableDefinition, retention: Retention | None) -> None:
    """Create the empty Delta table at ``path`` (version 0) recording ``definition``, and write its identity."""
    from deltalake import DeltaTable

    d = definition
    configuration = {
        "delta.appendOnly": "true",
        "delta.enableExpiredLogCleanup": "false",
        # Tombstones of compacted files serve only Delta's vacuum, which never runs on a stream table
        # (its replay reads the commit files, and the files they name stay). Expired at once, they
        # leave the next log checkpoint instead of making every reader load thousands of them.
        "delta.deletedFileRetentionDuration": "interval 0 seconds",
        CONF_FORMAT: FORMAT_VERSION,
        CONF_KIND: d.kind,
        CONF_KEYS: json.dumps(list(d.key_columns)),
        CONF_SCHEMA: json.dumps([list(c) for c in d.schema.columns]),
    }
    if d.time_column is not None:
        configuration[CONF_TIME] = d.time_column
    if retention is not None:
        configuration[CONF_RETENTION] = retention.to_json()
    try:
        DeltaTable.create(str(path), d.schema.to_arrow(), mode="error", name=d.name, configuration=configuration,
                          raise_if_key_not_exists=False)
    except Exception as exc:
        if "exist" in str(exc).lower():
            raise NameTakenError(f"stream table {clip(d.name)}: path {path} already exists") from exc
        raise
    (path / ID_FILE).write_text(uuid.uuid4().hex, encoding="ascii")


def read_definition(dt: DeltaTable, path: Path) -> TableDefinition:
    """The definition the Delta table ``dt`` at ``path`` records (one written by another tool: a plain table)."""
    meta = dt.metadata()
    conf = meta.configuration
    name = meta.name or path.name
    if CONF_SCHEMA in conf:
        schema = Schema(tuple((n, canonical_type(t)) for n, t in json.loads(conf[CONF_SCHEMA])))
    else:
        schema = Schema.from_arrow(pa.schema(dt.schema().to_arrow()), where=f"stream table {clip(name)}")
    return TableDefinition(name, schema, conf.get(CONF_KIND, "plain"), tuple(json.loads(conf.get(CONF_KEYS, "[]"))),
                           conf.get(CONF_TIME))


def table_identity(path: Path) -> str | None:
    """The id written when the table was created (its log directory's inode for a table older than that)."""
    try:
        with open(os.path.join(path, ID_FILE), encoding="ascii") as f:
            return f.read().strip()
    except FileNotFoundError:
        pass
    try:
        return f"inode:{os.stat(log_dir(path)).st_ino}"
    except FileNotFoundError:
        return None


_INTS = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())
_SMALL_INTS = (pa.int8(), pa.int16(), pa.uint8(), pa.uint16())


def _cast_allowed(got: pa.DataType, expected: str) -> bool:
    """Return True if a column of Arrow type ``got`` may be cast to Headwater type ``expected``.

    Only widening casts are allowed by type; the cast itself still runs in safe mode,
    so values that would change (an int64 above 2**53 into double, nanoseconds into
    microseconds) are refused there.
    """
    target = ARROW_TYPES[expected]
    if got == target or pa.types.is_null(got):
        return True
    element = element_of(expected)
    if element is not None:  # an array vector: a list (any field name) whose values fit the element type
        return (pa.types.is_list(got) or pa.types.is_large_list(got)) and _cast_allowed(got.value_type, element)
    if expected == "long":
        return got in _INTS
    if expected == "int":
        return got in _SMALL_INTS or got == pa.int32()
    if expected == "double":
        return got in _INTS or pa.types.is_floating(got)
    if expected == "float":
        return got in _SMALL_INTS or got == pa.float16()
    if expected == "string":
        return (
            pa.types.is_large_string(got)
            or pa.types.is_string_view(got)
            or (
                pa.types.is_dictionary(got)
                and (pa.types.is_string(got.value_type) or pa.types.is_large_string(got.value_type))
            )
        )
    if expected == "timestamp":
        return pa.types.is_timestamp(got) and got.tz is None
    if expected == "date":
        return pa.types.is_date(got)
    return False


def _type_hint(got: pa.DataType, expected: str) -> str:
    if expected == "timestamp" and pa.types.is_timestamp(got) and got.tz is not None:
        return (
            "timestamps are naive (no time zone): convert first, "
            "e.g. series.dt.tz_convert('UTC').dt.tz_localize(None)"
        )
    return f"cast the column to {ARROW_TYPES[expected]} before appending"


def check_definition(
    name: str, schema: Schema, kind: str, key_columns: tuple[str, ...], time_column: str | None
) -> None:
    """Raise if ``kind``, ``key_columns`` and ``time_column`` do not make a valid table over ``schema``."""
    where = f"stream table {clip(name)}"
    if kind not in KINDS:
        raise GraphDefinitionError(f"{where}: unknown kind {clip(kind)}; expected one of {', '.join(KINDS)}")
    for col in (*key_columns, *([time_column] if time_column else [])):
        if col not in schema:
            raise SchemaError(
                f"{where}: column {clip(col)} is not in the schema {schema}; "
                f"expected one of {', '.join(schema.names)}"
            )
    if len(set(key_columns)) != len(key_columns):
        raise GraphDefinitionError(f"{where}: key_columns {list(key_columns)} repeat a column")
    if kind == "plain" and key_columns:
        raise GraphDefinitionError(
            f"{where}: a plain table has no key, got key_columns={list(key_columns)}; "
            "use kind='keyed' or kind='latest_keyed' to de-duplicate by key"
        )
    if kind != "plain" and not key_columns:
        raise GraphDefinitionError(f"{where}: kind={clip(kind)} needs key_columns, e.g. key_columns=['sym']")
    if kind == "changelog":
        from headwater.storage.changelog import OP_COLUMN

        if OP_COLUMN not in schema or schema[OP_COLUMN] != "string" or OP_COLUMN in key_columns:
            raise SchemaError(f"{where}: kind='changelog' needs a string column {OP_COLUMN!r} (the operation: "
                              f"'N', 'U', 'D' or NULL) that is not a key column; got {schema}")
    if kind == "latest_keyed":
        if time_column is None:
            raise GraphDefinitionError(
                f"{where}: kind='latest_keyed' needs time_column (the newest value per key wins)"
            )
        if schema[time_column] not in NUMERIC | TEMPORAL:
            raise SchemaError(
                f"{where}: time_column {clip(time_column)} has type {schema[time_column]}; expected a "
                "timestamp, date or numeric column"
            )
        if time_column in key_columns:
            raise GraphDefinitionError(f"{where}: time_column {clip(time_column)} cannot be a key column")


def conform(data: Any, schema: Schema, arrow_schema: pa.Schema, name: str) -> pa.Table:
    """Return ``data`` (Arrow or pandas) as a table of ``schema``: columns matched by name case-insensitively,
    safe widening casts applied; raise SchemaError otherwise. ``name`` is the table's, for messages."""
    where = f"stream table {clip(name)}"
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    elif not isinstance(data, pa.Table):
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - pandas is a dependency
            pd = None
        if pd is not None and isinstance(data, pd.DataFrame):
            data = pa.Table.from_pandas(data, preserve_index=False)
        else:
            raise SchemaError(
                f"{where}: append expects a pyarrow.Table, RecordBatch or pandas DataFrame, "
                f"got {type(data).__name__}"
            )
    by_table_name: dict[str, str] = {}
    extra = []
    for col in data.column_names:
        real = schema.lookup(col)
        if real is None:
            extra.append(col)
        elif real in by_table_name:
            raise SchemaError(
                f"{where}: data has columns {clip(by_table_name[real])} and {clip(col)} that both "
                f"match table column {clip(real)}; keep one"
            )
        else:
            by_table_name[real] = col
    missing = [n for n in schema.names if n not in by_table_name]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing column(s) {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"unknown column(s) {', '.join(map(repr, extra))}")
        raise SchemaError(
            f"{where}: data has {' and '.join(parts)}; got columns "
            f"({', '.join(data.column_names)}), expected {schema}"
        )
    arrays = []
    for name, typ in schema:
        col = data.column(by_table_name[name])
        target = ARROW_TYPES[typ]
        if not _cast_allowed(col.type, typ):
            raise SchemaError(
                f"{where}: column {clip(name)} has type {col.type}, expected {typ} ({target}); "
                f"{_type_hint(col.type, typ)}"
            )
        if col.type != target:
            try:
                col = pc.cast(col, target, safe=True, memory_pool=buffer_pool())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SchemaError(
                    f"{where}: column {clip(name)} of type {col.type} does not fit {typ} "
                    f"({target}) without changing values: {exc}; "
                    f"{_type_hint(col.type, typ)}"
                ) from None
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=arrow_schema)
