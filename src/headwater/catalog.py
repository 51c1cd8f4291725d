"""Fully qualified names: ``<catalog>.<stream_graph|stream_table|stream_engine>.<name>``.

>>> resolve("indicators", "stream_graph", current_catalog="demo")
FQN(catalog='demo', schema='stream_graph', name='indicators')
>>> str(resolve("demo.stream_table.trade", "stream_table", current_catalog=None))
'demo.stream_table.trade'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headwater.errors import GraphDefinitionError

SCHEMAS = ("stream_graph", "stream_table", "stream_engine")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class FQN:
    catalog: str
    schema: str
    name: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.schema}.{self.name}"


def check_identifier(name: str, *, what: str) -> str:
    if not isinstance(name, str) or not _IDENT.match(name):
        raise GraphDefinitionError(
            f"{what} name {name!r} is not valid; use letters, digits and '_' and start with a letter, e.g. 'one_min_bar'"
        )
    return name


def resolve(name: str, schema: str, *, current_catalog: str | None) -> FQN:
    """Complete a bare name with the current catalog, or check a full name's schema."""
    if not isinstance(name, str) or not name:
        raise GraphDefinitionError(f"expected a {schema} name, got {name!r}")
    parts = name.split(".")
    if len(parts) == 1:
        if current_catalog is None:
            raise GraphDefinitionError(
                f"{schema} name {name!r} is bare and no catalog is selected; call session.use_catalog('demo') "
                f"or pass a full name such as 'demo.{schema}.{name}'"
            )
        return FQN(current_catalog, schema, check_identifier(name, what=schema.replace("_", " ")))
    if len(parts) == 2 and parts[0] == schema:
        return resolve(parts[1], schema, current_catalog=current_catalog)
    if len(parts) == 3:
        catalog, sch, bare = parts
        if sch != schema:
            raise GraphDefinitionError(f"name {name!r} is in schema {sch!r}; expected a {schema} name such as 'demo.{schema}.{bare}'")
        check_identifier(catalog, what="catalog")
        return FQN(catalog, schema, check_identifier(bare, what=schema.replace("_", " ")))
    raise GraphDefinitionError(f"name {name!r} is not a valid {schema} name; expected 'name' or 'catalog.{schema}.name'")
