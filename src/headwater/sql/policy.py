"""What ``session.sql`` accepts: one read-only query over Headwater stream tables.

A query passes three gates, each an allow-list:

1. **The statement** (parsed with sqlglot): exactly one ``SELECT``/``WITH``/``VALUES`` query; every
   relation names a public stream table of the catalog (``demo.stream_table.t``, ``stream_table.t`` or a
   bare ``t`` under the current catalog) or a ``WITH`` name of the same query. Relations become temporary
   views (``hw__<catalog>__stream_table__<name>``) in the SQL text handed to Spark.
2. **Spark's parse of that text** (:func:`check_parsed_plan`): every plan operator is a query operator
   (no command, no table-valued function, no path such as ``parquet.`/x```), every relation is one of
   the views or ``WITH`` names, every function is in :data:`~headwater.sql.functions.ALLOWED_FUNCTIONS`.
   This is the text Spark runs, so a syntax sqlglot reads differently cannot slip past.
3. **Spark's analysed plan** (:func:`check_analysed_plan`): the only relations are Headwater's views
   (plus inline ``VALUES``), before a single row is read.

The checks here work on Spark's JSON rendering of a plan (``LogicalPlan.toJSON``), so this module needs
no JVM and is unit-tested without one.

>>> prepare("select sym, max(px) from trades group by sym", {"demo.stream_table.trades": "/d/t"}, "demo").text
'SELECT sym, MAX(px) FROM hw__demo__stream_table__trades GROUP BY sym'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp

from headwater.errors import SqlError, clip, shorten
from headwater.sql.functions import ALLOWED_FUNCTIONS

MAX_QUERY_CHARS = 100_000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch only

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
_ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."

# Query operators as Spark's parser emits them. Commands (CreateTable, InsertIntoStatement, SetCommand,
# AddJarsCommand, CacheTable, ...) and table-valued functions are absent, hence refused.
PARSED_OPERATORS = frozenset(
    [_LOGICAL + n for n in (
        "Project", "Filter", "Aggregate", "Join", "LateralJoin", "Sort", "GlobalLimit", "LocalLimit",
        "LimitAll", "Offset", "Tail", "Union", "Intersect", "Except", "Distinct", "SubqueryAlias",
        "UnresolvedWith", "WithWindowDefinition", "Window", "Generate", "OneRowRelation", "LocalRelation",
        "Pivot", "Unpivot", "Sample", "RepartitionByExpression", "UnresolvedHint",
    )]
    + [_ANALYSIS + n for n in (
        "UnresolvedRelation", "UnresolvedHaving", "UnresolvedQualify", "UnresolvedSubqueryColumnAliases",
        "UnresolvedInlineTable",
    )]
)
# Expressions of the parser's own making outside the expressions package; anything else there (such as
# ExpressionWithUnresolvedIdentifier, which names a function at run time) is refused.
PARSED_ANALYSIS_EXPRESSIONS = frozenset(
    _ANALYSIS + n for n in (
        "UnresolvedAttribute", "UnresolvedAlias", "UnresolvedExtractValue", "UnresolvedFunction",
        "UnresolvedGenerator", "UnresolvedOrdinal", "UnresolvedStar", "UnresolvedStarExceptOrReplace",
        "UnresolvedRegex",
    )
)
# Leaves an analysed plan may have: Headwater's views (a DataSourceV2Relation under a View), inline
# VALUES, and references to a WITH clause of the same query.
ANALYSED_LEAVES = frozenset({
    "org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation",
    _LOGICAL + "LocalRelation", _LOGICAL + "OneRowRelation", _LOGICAL + "CTERelationRef",
    _LOGICAL + "UnionLoopRef",
})


@dataclass(frozen=True)
class PreparedQuery:
    """A query that passed the statement gate: the SQL text for Spark and the views it reads."""

    source: str  # the user's query, for messages
    text: str
    views: dict[str, tuple[str, str]]  # view name -> (stream table FQN, table path)
    cte_names: frozenset[str]

    @property
    def relations(self) -> frozenset[str]:
        """Names a relation of Spark's parsed plan may carry."""
        return frozenset(self.views) | self.cte_names


def view_name(fqn: str) -> str:
    return "hw__" + fqn.replace(".", "__")


def _refuse(query: str, what: str, fix: str) -> SqlError:
    return SqlError(f"sql: {what} in {clip(query)}; {fix}")


_READ_ONLY = ("session.sql runs one read-only query (SELECT or WITH ... SELECT) over stream tables, "
              "e.g. 'select * from demo.stream_table.trades'")


def prepare(query: object, public_tables: Mapping[str, str], current_catalog: str | None) -> PreparedQuery:
    """Check ``query`` against the statement gate and rewrite its relations to Headwater's views.

    ``public_tables`` maps each public stream table's FQN to its path.
    """
    if not isinstance(query, str):
        raise SqlError(f"sql: expected the query as a str, got {type(query).__name__} {clip(query)}; {_READ_ONLY}")
    if not query.strip():
        raise SqlError(f"sql: the query is empty; {_READ_ONLY}")
    if len(query) > MAX_QUERY_CHARS:
        raise SqlError(f"sql: the query has {len(query):,} characters, more than the {MAX_QUERY_CHARS:,} allowed: "
                       f"{clip(query)}")
    sqlglot_log = logging.getLogger("sqlglot")
    level = sqlglot_log.level
    sqlglot_log.setLevel(logging.ERROR)  # "falling back to parsing as a Command" is our refusal, not a warning
    try:
        statements = [s for s in sqlglot.parse(query, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        where = f" at line {first.get('line')}, column {first.get('col')}" if first else ""
        raise SqlError(f"sql: cannot parse {clip(query)}{where}: {shorten(str(first.get('description', exc)), 300)}") from None
    except sqlglot.errors.SqlglotError as exc:
        raise SqlError(f"sql: cannot parse {clip(query)}: {shorten(str(exc), 300)}") from None
    finally:
        sqlglot_log.setLevel(level)
    if len(statements) != 1:
        raise _refuse(query, f"{len(statements)} statements", "send one query per call")
    tree = statements[0]
    if not isinstance(tree, exp.Query | exp.Values):
        raise _refuse(query, f"a {type(tree).__name__.upper()} statement", _READ_ONLY)

    cte_names = set()
    for cte in tree.find_all(exp.CTE):
        if not _IDENT.fullmatch(cte.alias):
            raise _refuse(query, f"WITH name {clip(cte.alias)}", "name it with letters, digits and '_'")
        cte_names.add(cte.alias)

    views: dict[str, tuple[str, str]] = {}
    for table in list(tree.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            raise _refuse(query, f"the table function {clip(table.this.sql(dialect='spark'), 100)}",
                          "read stream tables by name")
        parts = [p for p in (table.catalog, table.db, table.name) if p]
        if len(parts) == 1 and parts[0] in cte_names:
            continue
        fqn = _resolve(parts, current_catalog)
        if fqn not in public_tables:
            known = ", ".join(sorted(public_tables)) or "none"
            raise SqlError(f"sql: {clip('.'.join(parts), 200)} is not a public stream table "
                           f"(paths, files and other catalogs cannot be read); known public tables: {clip(known, 400)}")
        view = view_name(fqn)
        views[view] = (fqn, public_tables[fqn])
        table.replace(exp.to_table(view).as_(table.alias) if table.alias else exp.to_table(view))
    return PreparedQuery(query, tree.sql(dialect="spark"), views, frozenset(cte_names))


def _resolve(parts: list[str], current_catalog: str | None) -> str:
    if len(parts) == 3:
        return ".".join(parts)
    if len(parts) == 2 and parts[0] == "stream_table" and current_catalog:
        return f"{current_catalog}.stream_table.{parts[1]}"
    if len(parts) == 1 and current_catalog:
        return f"{current_catalog}.stream_table.{parts[0]}"
    return ".".join(parts)


# -- Spark's plans, as JSON ---------------------------------------------------------------------------

def plan_nodes(plan_json: Any) -> Iterator[dict[str, Any]]:
    """Every plan and expression node of a ``LogicalPlan.toJSON`` rendering, nested plans included."""
    stack = [plan_json]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "class" in item:
                yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _seq(rendered: Any) -> str:
    """A Scala ``Seq[String]`` field as Spark's JSON renders it (``"[a, b]"``), as ``a.b``."""
    text = str(rendered)
    return text[1:-1].replace(", ", ".") if text.startswith("[") and text.endswith("]") else text


def check_parsed_plan(query: PreparedQuery, plan_json: Any, is_plan: Callable[[str], bool]) -> None:
    """Gate 2: refuse anything but a query over the prepared views and allowed functions.

    ``is_plan(class_name)`` tells a logical plan class from an expression class (the Spark layer asks
    the JVM once per class).
    """
    relations = query.relations
    for node in plan_nodes(plan_json):
        cls = node["class"]
        short = cls.rsplit(".", 1)[-1]
        if is_plan(cls):
            if cls not in PARSED_OPERATORS:
                raise _refuse(query.source, f"the operation {short}", _READ_ONLY)
            if short == "UnresolvedRelation":
                name = _seq(node.get("multipartIdentifier"))
                if name not in relations:
                    raise _refuse(query.source, f"the relation {shorten(name, 200)}", "read stream tables by name")
        elif cls.startswith(_ANALYSIS) and cls not in PARSED_ANALYSIS_EXPRESSIONS:
            raise _refuse(query.source, f"the expression {short}", "call functions by their plain name")
        elif short in ("UnresolvedFunction", "UnresolvedGenerator"):
            name = _function_name(node)
            if name not in ALLOWED_FUNCTIONS:
                raise _refuse(query.source, f"the function {shorten(name, 100)}",
                              "docs/sql.md lists the functions session.sql allows")
        elif not cls.startswith(_EXPRESSIONS) and not cls.startswith(_ANALYSIS):
            raise _refuse(query.source, f"the expression {short}", _READ_ONLY)


def _function_name(node: dict[str, Any]) -> str:
    if "nameParts" in node:
        return _seq(node["nameParts"]).lower()
    name = node.get("name")
    if isinstance(name, dict):  # UnresolvedGenerator carries a FunctionIdentifier
        return str(name.get("funcName", "")).lower()
    return str(name).lower()


def check_analysed_plan(query: PreparedQuery, plan_json: Any, is_plan: Callable[[str], bool]) -> None:
    """Gate 3: the analysed plan reads Headwater's views and nothing else."""
    views = 0
    relations = 0
    for node in plan_nodes(plan_json):
        cls = node["class"]
        if not is_plan(cls):
            continue
        short = cls.rsplit(".", 1)[-1]
        if short == "View":
            table = (node.get("desc") or {}).get("identifier", {}).get("table")
            if not node.get("isTempView") or table not in query.views:
                raise _refuse(query.source, f"the view {clip(table, 200)}", "read stream tables by name")
            views += 1
        elif node.get("num-children") == 0:
            if cls not in ANALYSED_LEAVES:
                raise _refuse(query.source, f"the relation {short}", "read stream tables by name")
            relations += short == "DataSourceV2Relation"
    if relations != views:  # every data source relation must sit under one of Headwater's views
        raise _refuse(query.source, "a relation that is not a Headwater stream table", "read stream tables by name")
