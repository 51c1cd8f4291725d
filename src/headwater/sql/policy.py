"""What ``session.sql`` accepts: one read-only query over Headwater stream tables.

A query passes three gates, each an allow-list:

1. **The statement** (parsed with sqlglot): exactly one ``SELECT``/``WITH``/``VALUES`` query; every
   relation names a public stream table of the catalog (``demo.stream_table.t``, ``stream_table.t`` or a
   bare ``t`` under the current catalog) or a ``WITH`` name of the same query. Relations become temporary
   views (``hw__<catalog>__stream_table__<name>``) in the SQL text handed to Spark: the user's own text
   with only those names replaced, so every clause reaches Spark as written (refuse, never rewrite). A
   query nested deeper than :data:`MAX_NESTING` is refused before it is parsed.
2. **Spark's parse of that text** (:func:`check_parsed_plan`): every plan operator is a query operator
   (no command, no table-valued function, no path such as ``parquet.`/x```), every relation is one of
   the views or ``WITH`` names and every view is read as a relation, every function is in
   :data:`~headwater.sql.functions.ALLOWED_FUNCTIONS`.
   This is the text Spark runs, so a syntax sqlglot reads differently cannot slip past.
3. **Spark's analysed plan** (:func:`check_analysed_plan`): the only relations are Headwater's views
   (plus inline ``VALUES``), before a single row is read.

The checks here work on Spark's JSON rendering of a plan (``LogicalPlan.toJSON``), so this module needs
no JVM and is unit-tested without one.

>>> prepare("select sym, max(px) from trades group by sym", {"demo.stream_table.trades": "/d/t"}, "demo").text
'select sym, max(px) from hw__demo__stream_table__trades group by sym'
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from headwater.errors import SqlError, clip, shorten
from headwater.sql.functions import ALLOWED_FUNCTIONS

MAX_QUERY_CHARS = 100_000
# How deeply a query may nest (check_nesting). sqlglot's parser takes ~20 Python frames per level and
# Python stops at 1,000 frames, near 45 levels; 32 leaves room for the caller's own frames and is far
# deeper than written queries go. Anything deeper, or a RecursionError anyway, is a SqlError.
MAX_NESTING = 32
_SPARK = sqlglot.Dialect.get_or_raise("spark")
_OPENS = frozenset({TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE, TokenType.CASE})
_CLOSES = frozenset({TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE, TokenType.END})
_UNARY = frozenset({TokenType.NOT, TokenType.DASH, TokenType.PLUS, TokenType.TILDE, TokenType.EXCLAMATION})
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


def prepare(query: object, public_tables: Mapping[str, str], current_catalog: str | None, *,
            max_nesting: int = MAX_NESTING) -> PreparedQuery:
    """Check ``query`` against the statement gate and put Headwater's view names in place of its relations.

    ``public_tables`` maps each public stream table's FQN to its path. The text handed to Spark is the
    user's own text with only the relation names replaced (spliced at their positions): no clause is
    regenerated, so none can be dropped or changed on the way (sqlglot's generator once dropped PIVOT,
    UNPIVOT, TABLESAMPLE and VERSION AS OF, and turns ``percentile_cont`` into ``percentile_approx``).
    A check that the spliced text parses to the same tree, names aside, refuses anything else.
    """
    if not isinstance(query, str):
        raise SqlError(f"sql: expected the query as a str, got {type(query).__name__} {clip(query)}; {_READ_ONLY}")
    if not query.strip():
        raise SqlError(f"sql: the query is empty; {_READ_ONLY}")
    if len(query) > MAX_QUERY_CHARS:
        raise SqlError(f"sql: the query has {len(query):,} characters, more than the {MAX_QUERY_CHARS:,} allowed: "
                       f"{clip(query)}")
    try:
        check_nesting(query, max_nesting)
        return _prepare(query, public_tables, current_catalog)
    except RecursionError:  # a construct the nesting scan does not count: the same refusal, never a crash
        raise _too_deep(query, max_nesting) from None


def check_nesting(query: str, max_nesting: int = MAX_NESTING) -> None:
    """Refuse a query nested deeper than ``max_nesting`` before it is parsed (parsers recurse per level).

    Each open ``(``, ``[``, ``{`` and ``CASE`` counts one level until it closes; a run of unary operators
    (``NOT``, ``-``, ``+``, ``~``, ``!``) counts one level each. Tokenizing is a loop, not a recursion.

    >>> check_nesting("select ((1))", max_nesting=2)
    >>> check_nesting("select (((1)))", max_nesting=2)
    Traceback (most recent call last):
    ...
    headwater.errors.SqlError: sql: 'select (((1)))' is nested more than the 2 levels allowed (parentheses, brackets, CASE ... END and unary operators each count a level); flatten it, e.g. with a WITH clause
    """
    depth = deepest = run = 0
    for token in _tokens(query):
        kind = token.token_type
        if kind in _UNARY:
            run += 1
            deepest = max(deepest, depth + run)
        else:
            run = 0
            if kind in _OPENS:
                depth += 1
                deepest = max(deepest, depth)
            elif kind in _CLOSES:
                depth = max(0, depth - 1)
        if deepest > max_nesting:
            raise _too_deep(query, max_nesting)


def _too_deep(query: str, max_nesting: int) -> SqlError:
    return SqlError(f"sql: {clip(query)} is nested more than the {max_nesting} levels allowed (parentheses, "
                    "brackets, CASE ... END and unary operators each count a level); flatten it, e.g. with a WITH clause")


def _tokens(query: str) -> list[Any]:
    try:
        return list(_SPARK.tokenize(query))
    except sqlglot.errors.SqlglotError as exc:
        raise SqlError(f"sql: cannot parse {clip(query)}: {shorten(str(exc), 300)}") from None


def _prepare(query: str, public_tables: Mapping[str, str], current_catalog: str | None) -> PreparedQuery:
    tree = _parse_one(query)
    if not isinstance(tree, exp.Query | exp.Values):
        raise _refuse(query, f"a {type(tree).__name__.upper()} statement", _READ_ONLY)

    cte_names = set()
    for cte in tree.find_all(exp.CTE):
        if not _IDENT.fullmatch(cte.alias):
            raise _refuse(query, f"WITH name {clip(cte.alias)}", "name it with letters, digits and '_'")
        cte_names.add(cte.alias)

    views: dict[str, tuple[str, str]] = {}
    splices: list[tuple[int, int, str]] = []  # (start, end exclusive, view) in the user's text
    tables = list(tree.find_all(exp.Table))
    hinted = [t for t in tables if t.find_ancestor(exp.Hint) is not None]  # /*+ BROADCAST(t) */ names no read
    for table in [t for t in tables if t.find_ancestor(exp.Hint) is None]:
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
        if table.args.get("version") is not None:
            raise _refuse(query, f"time travel ({shorten(table.args['version'].sql(dialect='spark'), 100)}) on {fqn}",
                          "a stream table is read at its latest version; VERSION AS OF and TIMESTAMP AS OF "
                          "are not supported")
        view = view_name(fqn)
        views[view] = (fqn, public_tables[fqn])
        splices.append(_rename(query, table, view))
    # A hint names relations by their alias. Its text is tokenized apart (no positions in the query), so
    # a stream table's own name in a hint cannot follow the rename: refused, as Spark would ignore it.
    aliases = {a.name for a in tree.find_all(exp.TableAlias)} | cte_names  # of tables, subqueries, VALUES
    for table in hinted:
        parts = [p for p in (table.catalog, table.db, table.name) if p]
        if len(parts) == 1 and parts[0] in aliases:
            continue
        if _resolve(parts, current_catalog) in public_tables:
            raise _refuse(query, f"the hint naming stream table {'.'.join(parts)}",
                          "give the table an alias in FROM (… from trades t) and name the alias in the hint")

    text = query
    for start, end, view in sorted(splices, reverse=True):
        text = text[:start] + view + text[end:]
    _check_unchanged(query, tree, text)
    return PreparedQuery(query, text, views, frozenset(cte_names))


def _parse_one(query: str) -> exp.Expr:
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
    return statements[0]


def _rename(query: str, table: exp.Table, view: str) -> tuple[int, int, str]:
    """Name ``view`` in ``table``'s place in the tree; return where the name is written in ``query``.

    The tree gets the same name as the text, so the spliced text must parse back to exactly this tree.
    """
    start, end = _name_span(query, table)
    table.set("catalog", None)
    table.set("db", None)
    table.set("this", exp.to_identifier(view))
    return start, end, view


def _name_span(query: str, table: exp.Table) -> tuple[int, int]:
    """Where the table's (possibly qualified, possibly quoted) name is written in ``query``."""
    parts = [p for p in (table.args.get("catalog"), table.args.get("db"), table.this) if p is not None]
    for part in parts:
        meta = part.meta
        quoted = part.args.get("quoted")
        spelled = f"`{part.name.replace('`', '``')}`" if quoted else part.name
        if "start" not in meta or "end" not in meta or query[meta["start"]:meta["end"] + 1] != spelled:
            raise _refuse(query, f"the relation {clip(table.sql(dialect='spark'), 200)} (its position in the text is "
                          "unknown)", "write relations as plain names, e.g. demo.stream_table.trades")
    return parts[0].meta["start"], parts[-1].meta["end"] + 1


def _check_unchanged(query: str, renamed: exp.Expr, text: str) -> None:
    """Refuse unless ``text`` parses to ``renamed``: no clause was lost, added or changed by the splice."""
    spliced = _parse_one(text)
    if spliced == renamed:
        return
    before, after = _node_kinds(renamed), _node_kinds(spliced)
    lost, added = sorted((before - after).elements()), sorted((after - before).elements())
    changes = "; ".join(f"{what}: {', '.join(sorted(set(kinds)))}" for what, kinds in
                        (("lost", lost), ("added", added)) if kinds) or "a clause changed"
    raise _refuse(query, f"a query that would change when its relations are renamed ({changes})",
                  "Headwater refuses rather than runs a different query; please report it with the query")


def _node_kinds(tree: exp.Expr) -> Counter[str]:
    return Counter(type(node).__name__ for node in tree.walk())


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
    read = set()
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
                read.add(name)
        elif cls.startswith(_ANALYSIS) and cls not in PARSED_ANALYSIS_EXPRESSIONS:
            raise _refuse(query.source, f"the expression {short}", "call functions by their plain name")
        elif short in ("UnresolvedFunction", "UnresolvedGenerator"):
            name = _function_name(node)
            if name not in ALLOWED_FUNCTIONS:
                raise _refuse(query.source, f"the function {shorten(name, 100)}",
                              "docs/sql.md lists the functions session.sql allows")
        elif not cls.startswith(_EXPRESSIONS) and not cls.startswith(_ANALYSIS):
            raise _refuse(query.source, f"the expression {short}", _READ_ONLY)
    # Each name put in place of a relation is a relation to Spark too: sqlglot and Spark agree on where
    # the relations are, so the splice renamed nothing else.
    for view in sorted(set(query.views) - read):
        raise _refuse(query.source, f"{query.views[view][0]} where Spark does not read a relation",
                      "write stream tables only where a query reads a relation (FROM, JOIN)")


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
