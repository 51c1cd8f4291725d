"""Column types and schemas.

A schema is an ordered mapping of column name to a Headwater type name. Type names
are the user-facing vocabulary (``"timestamp"``, ``"double"``, ...); each maps to
one Arrow type, which is what tables store and what Spark sees.

>>> s = Schema.parse({"time": "timestamp", "price": "double"})
>>> s.names
('time', 'price')
>>> s["price"]
'double'
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

import pyarrow as pa

from headwater.errors import SchemaError, clip

# Canonical type name -> Arrow type. Timestamps are naive (no zone) microseconds:
# they round-trip pandas' naive datetimes and map to Spark's TIMESTAMP_NTZ.
SCALAR_TYPES: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "timestamp": pa.timestamp("us"),
    "date": pa.date32(),
}
# "<type>[]": Orca's array vectors (a list per row), e.g. the rule engine's policy='all' result (bool[]) or a
# window join's to_array(qty) (long[]). Engines compute on scalars only; arrays pass through and are stored.
ARROW_TYPES: dict[str, pa.DataType] = {**SCALAR_TYPES, **{f"{n}[]": pa.list_(t) for n, t in SCALAR_TYPES.items()}}


def array_of(type_name: str) -> str:
    """The array type of a scalar type: ``array_of("long") == "long[]"``."""
    return f"{type_name}[]"


def element_of(type_name: str) -> str | None:
    """The element type of an array type, None for a scalar type: ``element_of("long[]") == "long"``."""
    return type_name[:-2] if type_name.endswith("[]") else None

ALIASES: dict[str, str] = {
    "boolean": "bool",
    "integer": "int",
    "int32": "int",
    "int64": "long",
    "bigint": "long",
    "float32": "float",
    "float64": "double",
    "str": "string",
    "symbol": "string",
    "varchar": "string",
    "datetime": "timestamp",
    "timestamp_ntz": "timestamp",
}

NUMERIC = frozenset({"int", "long", "float", "double"})
INTEGRAL = frozenset({"int", "long"})
TEMPORAL = frozenset({"timestamp", "date"})


def canonical_type(name: str, *, where: str = "schema") -> str:
    """Return the canonical type name for ``name`` or raise a SchemaError listing valid names."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in ARROW_TYPES:
        valid = ", ".join(sorted(ARROW_TYPES))
        raise SchemaError(f"{where}: unknown column type {clip(name)}; expected one of {valid}")
    return key


def type_from_arrow(dtype: pa.DataType, *, where: str = "data") -> str:
    """Map an Arrow type to the canonical Headwater type name."""
    if pa.types.is_timestamp(dtype):
        return "timestamp"
    if pa.types.is_large_string(dtype) or pa.types.is_string(dtype) or pa.types.is_dictionary(dtype):
        return "string"
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):  # any name of the list's field
        element = type_from_arrow(dtype.value_type, where=where)
        if element_of(element) is None:
            return array_of(element)
    for name, arrow in ARROW_TYPES.items():
        if dtype == arrow:
            return name
    if pa.types.is_integer(dtype):
        return "long"
    if pa.types.is_floating(dtype):
        return "double"
    raise SchemaError(f"{where}: column type {dtype} is not supported; expected one of {sorted(ARROW_TYPES)}")


class TableKind(StrEnum):
    """How a stream table treats rows of a key it already holds (see ``headwater.storage.keyed_dedup``)."""

    PLAIN = "plain"
    KEYED = "keyed"
    LATEST_KEYED = "latest_keyed"
    CHANGELOG = "changelog"  # every change row kept; readers see changes or the net state (storage.changelog)


MAX_COLUMNS = 10_000
MAX_COLUMN_NAME_CHARS = 255
RESERVED_PREFIX = "_hw_"  # hidden columns: _hw_seq (stream order), _hw_pos (bucketed files)


def check_column_names(names: Iterable[str], *, where: str) -> None:
    """Refuse a column name given twice, also in another case, a reserved or overlong name, and more than
    :data:`MAX_COLUMNS` columns.

    Every :class:`Schema` is checked here, whichever way it is built (declared, an engine's or a map's outputs,
    read from data): Delta Lake's column names are case-insensitive, so ``Price`` and ``price`` cannot be two
    columns of one table.

    >>> check_column_names(["Price", "volume", "price"], where="source 'trade'")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    headwater.errors.SchemaError: source 'trade': columns 'Price' and 'price' differ only in case; ...
    """
    seen: dict[str, str] = {}
    for name in names:
        if len(name) > MAX_COLUMN_NAME_CHARS:
            raise SchemaError(f"{where}: column name {clip(name)} has {len(name):,} characters; names have at most "
                              f"{MAX_COLUMN_NAME_CHARS} (name a metric with 'as')")
        if len(seen) == MAX_COLUMNS:
            raise SchemaError(f"{where}: more than {MAX_COLUMNS:,} columns; a table has at most {MAX_COLUMNS:,}")
        first = seen.get(name.lower())
        if first == name:
            raise SchemaError(f"{where}: duplicate column name {clip(name)}")
        if first is not None:
            raise SchemaError(f"{where}: columns {clip(first)} and {clip(name)} differ only in case; column names "
                              "are case-insensitive (as in Delta Lake, which stores the tables), so one table "
                              "cannot hold both: rename one of them (with 'as' in a metric)")
        if name.lower().startswith(RESERVED_PREFIX):
            raise SchemaError(f"{where}: column name {clip(name)} is reserved (names starting with "
                              f"{RESERVED_PREFIX!r} are Headwater's own, e.g. _hw_seq); rename it")
        seen[name.lower()] = name


@dataclass(frozen=True)
class Schema:
    """An ordered, immutable list of (column name, type name) pairs."""

    columns: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        check_column_names((n for n, _ in self.columns), where="schema")

    @classmethod
    def parse(cls, spec: Mapping[str, str] | Schema, *, where: str = "schema") -> Schema:
        """Build a schema from ``{"name": "type"}`` (or return ``spec`` if it is one)."""
        if isinstance(spec, Schema):
            return spec
        if not isinstance(spec, Mapping) or not spec:
            raise SchemaError(
                f"{where}: expected a non-empty dict of column name to type, got {clip(spec)}; "
                'e.g. {"time": "timestamp", "price": "double"}'
            )
        cols = []
        for name, typ in spec.items():
            if not isinstance(name, str) or not name.isidentifier():
                raise SchemaError(f"{where}: column name {clip(name)} must be an identifier")
            cols.append((name, canonical_type(typ, where=f"{where} column {clip(name)}")))
        check_column_names(spec, where=where)
        return cls(tuple(cols))

    @classmethod
    def of(cls, columns: Iterable[tuple[str, str]], *, where: str) -> Schema:
        """The schema of (name, canonical type) pairs built by ``where`` (a map, a function's result): its names
        pass :func:`check_column_names`, whose errors name ``where``."""
        cols = tuple(columns)
        check_column_names((n for n, _ in cols), where=f"{where}: output schema")
        return cls(cols)

    @classmethod
    def from_arrow(cls, schema: pa.Schema, *, where: str = "data") -> Schema:
        return cls(tuple((f.name, type_from_arrow(f.type, where=f"{where} column {clip(f.name)}")) for f in schema))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.columns)

    def __getitem__(self, name: str) -> str:
        for n, t in self.columns:
            if n == name:
                return t
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(n == name for n, _ in self.columns)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.columns)

    def __len__(self) -> int:
        return len(self.columns)

    def lookup(self, name: str) -> str | None:
        """Return the real column name matching ``name`` case-insensitively (Orca rule), or None (also for a
        ``name`` that is not a string, e.g. a list given where one column is expected)."""
        if not isinstance(name, str):
            return None
        if name in self:
            return name
        lowered = name.lower()
        for n, _ in self.columns:
            if n.lower() == lowered:
                return n
        return None

    def to_arrow(self) -> pa.Schema:
        return pa.schema([pa.field(n, ARROW_TYPES[t]) for n, t in self.columns])

    def to_dict(self) -> dict[str, str]:
        return dict(self.columns)

    def __str__(self) -> str:
        return "(" + ", ".join(f"{n} {t}" for n, t in self.columns) + ")"
