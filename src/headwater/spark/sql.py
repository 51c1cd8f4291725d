"""SQL over public stream tables: names like ``demo.stream_table.t`` are rewritten to Spark temp views."""

from __future__ import annotations

import pyarrow as pa
import sqlglot
from pyspark.sql import SparkSession
from sqlglot import exp

from headwater.errors import CatalogError, GraphDefinitionError


def _view_name(fqn: str) -> str:
    return "hw__" + fqn.replace(".", "__")


def rewrite(query: str, public_tables: dict[str, str], current_catalog: str | None) -> tuple[str, dict[str, str]]:
    """Return the Spark SQL text and the views it needs (view name -> table path)."""
    try:
        tree = sqlglot.parse_one(query, read="spark")
    except sqlglot.errors.ParseError as exc:
        raise GraphDefinitionError(f"sql: cannot parse {query!r}: {exc}") from None
    views: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        parts = [p for p in (table.catalog, table.db, table.name) if p]
        if len(parts) == 3:
            fqn = ".".join(parts)
        elif len(parts) == 2 and parts[0] == "stream_table" and current_catalog:
            fqn = f"{current_catalog}.stream_table.{parts[1]}"
        elif len(parts) == 1 and current_catalog and f"{current_catalog}.stream_table.{parts[0]}" in public_tables:
            fqn = f"{current_catalog}.stream_table.{parts[0]}"
        else:
            continue
        if fqn not in public_tables:
            known = ", ".join(sorted(public_tables)) or "none"
            raise CatalogError(f"sql: stream table {fqn} does not exist; known public tables: {known}")
        view = _view_name(fqn)
        views[view] = public_tables[fqn]
        alias = table.alias
        table.replace(exp.to_table(view).as_(alias) if alias else exp.to_table(view))
    return tree.sql(dialect="spark"), views


def run_sql(spark: SparkSession, query: str, public_tables: dict[str, str], current_catalog: str | None) -> pa.Table:
    text, views = rewrite(query, public_tables, current_catalog)
    from headwater.spark.runner import spark_schema
    from headwater.storage.stream_table import StreamTable

    for view, path in views.items():
        schema = spark_schema(StreamTable.open(path).schema, hidden=False)  # explicit: leaves _hw_seq out
        spark.read.format("headwater_stream_table").schema(schema).option("path", path).load().createOrReplaceTempView(view)
    return spark.sql(text).toArrow()
