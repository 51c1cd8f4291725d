"""Fully qualified names: ``<catalog>.<stream_graph|stream_table|stream_engine>.<name>``.

>>> resolve("indicators", "stream_graph", current_catalog="demo")
FQN(catalog='demo', schema='stream_graph', name='indicators')
>>> str(resolve("demo.stream_table.trade", "stream_table", current_catalog=None))
'demo.stream_table.trade'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headwater.errors import GraphDefinitionError, clip

SCHEMAS = ("stream_graph", "stream_table", "stream_engine")
# Matched whole (fullmatch): with re.match, "$" also matches before a trailing newline, and "t\n" would pass.
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names become directory names (tables/<catalog>/<name>, graphs/<catalog>/<graph>/private/<table>) and Spark
# view names (hw__<catalog>__stream_table__<name>); 100 characters keeps each well under 255 bytes.
MAX_NAME_CHARS = 100


@dataclass(frozen=True)
class FQN:
    catalog: str
    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.schema}.{self.name}"


def check_identifier(name: str, *, what: str) -> str:
    """Check a catalog, graph, table or engine name: letters, digits and ``_``, at most 100 characters.

    >>> check_identifier("x" * 101, what="stream table")
    Traceback (most recent call last):
    ...
    headwater.errors.GraphDefinitionError: stream table name 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' has 101 characters; names have at most 100
    """
    if not isinstance(name, str) or not _IDENT.fullmatch(name):
        raise GraphDefinitionError(
            f"{what} name {clip(name, 120)} is not valid; use letters, digits and '_' and start with a letter, "
            "e.g. 'one_min_bar'"
        )
    if len(name) > MAX_NAME_CHARS:
        raise GraphDefinitionError(
            f"{what} name {clip(name, 120)} has {len(name)} characters; names have at most {MAX_NAME_CHARS}")
    return name


def resolve(name: str, schema: str, *, current_catalog: str | None) -> FQN:
    """Complete a bare name with the current catalog, or check a full name's schema."""
    if not isinstance(name, str) or not name:
        raise GraphDefinitionError(f"expected a {schema} name, got {clip(name, 120)}")
    parts = name.split(".")
    if len(parts) == 1:
        if current_catalog is None:
            raise GraphDefinitionError(
                f"{schema} name {clip(name, 120)} is bare and no catalog is selected; call session.use_catalog('demo') "
                f"or pass a full name such as 'demo.{schema}.{name}'"
            )
        return FQN(current_catalog, schema, check_identifier(name, what=schema.replace("_", " ")))
    if len(parts) == 2 and parts[0] == schema:
        return resolve(parts[1], schema, current_catalog=current_catalog)
    if len(parts) == 3:
        catalog, sch, bare = parts
        if sch != schema:
            raise GraphDefinitionError(f"name {clip(name, 120)} is in schema {sch!r}; expected a {schema} name such as 'demo.{schema}.{bare}'")
        check_identifier(catalog, what="catalog")
        return FQN(catalog, schema, check_identifier(bare, what=schema.replace("_", " ")))
    raise GraphDefinitionError(f"name {clip(name, 120)} is not a valid {schema} name; expected 'name' or 'catalog.{schema}.name'")
