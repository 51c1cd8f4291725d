"""Refuse, never rewrite: the text ``session.sql`` hands Spark is the user's query with only its relation
names replaced. sqlglot's regenerated text used to drop PIVOT, UNPIVOT, TABLESAMPLE and VERSION AS OF
(``select * from t pivot (...)`` ran as ``select * from t``), and deep nesting was a RecursionError (HTTP 500).
No Spark here: the prepared text is compared character for character."""

from __future__ import annotations

import pytest
import sqlglot

from headwater.errors import SqlError
from headwater.sql.policy import MAX_NESTING, _check_unchanged, check_parsed_plan, prepare

TABLES = {"demo.stream_table.t": "/d/t", "demo.stream_table.u": "/d/u"}
T, U = "hw__demo__stream_table__t", "hw__demo__stream_table__u"
LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
ANALYSIS = "org.apache.spark.sql.catalyst.analysis."

KEPT = [
    "select * from {t} pivot (sum(px) for sym in ('a', 'b'))",
    "select * from {t} pivot (sum(px) as s, avg(qty) for (sym, qty) in (('a', 10) as a10, ('b', 20) as b20))",
    "select * from {t} x pivot (sum(px) for sym in ('a' as a)) order by 1",
    "select * from {t} unpivot (v for k in (px, qty))",
    "select * from {t} unpivot include nulls (v for k in (px as p, qty as q)) as u",
    "select * from {t} tablesample (2 rows)",
    "select * from {t} tablesample (50 percent)",
    "select * from {t} tablesample (50 percent) repeatable (7)",
    "select * from {t} tablesample (bucket 1 out of 2)",
    "select * from {t} tablesample (3 rows) x join {u} tablesample (1 rows) y on x.sym = y.sym",
    "select percentile_cont(0.5) within group (order by px) from {t}",
    "select sym from {t} qualify row_number() over (partition by sym order by px) = 1",
    "select * from {t} order by px desc nulls first",
    "select /*+ broadcast(y), repartition(3) */ * from {t} x join {u} y on x.sym = y.sym",
    "select * from {t} lateral view outer explode(array(1, 2)) e as n",
    "select sym, sum(px) over w from {t} window w as (partition by sym order by px rows 1 preceding)",
    "with a as (select * from {t} tablesample (2 rows)) select * from a pivot (max(px) for sym in ('a'))",
    "select * from (select * from {t}) pivot (count(*) for sym in ('a', 'b'))",
]


@pytest.mark.parametrize("template", KEPT)
@pytest.mark.parametrize("names", [("t", "u"), ("demo.stream_table.t", "stream_table.u"),
                                   ("`demo`.`stream_table`.`t`", "demo . stream_table . /* c */ u")])
def test_every_clause_is_kept_and_only_relation_names_change(template, names):
    query = template.format(t=names[0], u=names[1])
    assert prepare(query, TABLES, "demo").text == template.format(t=T, u=U)


@pytest.mark.parametrize("query", [
    "select * from t version as of 3",
    "select * from t timestamp as of '2024-01-01'",
    "select * from demo.stream_table.t version as of 1 x",
    "select * from u join t version as of 0 on true",
    "select * from (select * from stream_table.t timestamp as of current_timestamp())",
])
def test_time_travel_is_refused_naming_it(query):
    with pytest.raises(SqlError, match=r"time travel \((VERSION|TIMESTAMP) AS OF .*\) on demo\.stream_table\.t"):
        prepare(query, TABLES, "demo")


@pytest.mark.parametrize("query", [
    "select /*+ broadcast(u) */ * from t join u on true",
    "select /*+ merge(t, y) */ * from demo.stream_table.t join u y on true",
    "select /*+ broadcast(stream_table.u) */ * from t x join u y on true",
])
def test_a_hint_naming_a_stream_table_is_refused_as_it_cannot_follow_the_rename(query):
    with pytest.raises(SqlError, match=r"the hint naming stream table .*name the alias in the hint"):
        prepare(query, TABLES, "demo")


def test_a_hint_naming_an_alias_or_a_with_name_is_kept():
    query = "with a as (select * from t) select /*+ broadcast(a), shuffle_hash(u) */ * from a join t u on true"
    assert prepare(query, TABLES, "demo").text == query.replace("join t u", f"join {T} u").replace("from t)", f"from {T})")
    query = "select /*+ broadcast(t) */ * from u join (select * from u) t on true"  # a subquery aliased t
    assert prepare(query, TABLES, "demo").text == query.replace(" u", f" {U}")


def test_a_splice_that_would_lose_a_clause_is_refused_naming_it():
    query = "select * from t pivot (sum(px) for sym in ('a')) tablesample (1 rows)"
    tree = sqlglot.parse_one(query.replace(" t ", f" {T} "), read="spark")
    _check_unchanged(query, tree, query.replace(" t ", f" {T} "))  # the same tree: accepted
    with pytest.raises(SqlError, match=r"would change when its relations are renamed \(lost: .*Pivot"):
        _check_unchanged(query, tree, f"select * from {T} tablesample (1 rows)")
    with pytest.raises(SqlError, match=r"lost: .*TableSample"):
        _check_unchanged(query, tree, f"select * from {T} pivot (sum(px) for sym in ('a'))")
    with pytest.raises(SqlError, match="would change"):  # same kinds of node, another value
        _check_unchanged(query, tree, f"select * from {T} pivot (sum(px) for sym in ('b')) tablesample (1 rows)")


def test_a_view_spark_does_not_read_as_a_relation_is_refused():
    query = prepare("select * from t join u on true", TABLES, "demo")
    relation = {"class": ANALYSIS + "UnresolvedRelation", "num-children": 0, "multipartIdentifier": f"[{T}]"}
    join = {"class": LOGICAL + "Join", "num-children": 2}
    with pytest.raises(SqlError, match=r"demo\.stream_table\.u where Spark does not read a relation"):
        check_parsed_plan(query, [join, relation, relation], lambda cls: cls.startswith((LOGICAL, ANALYSIS)))


NESTED = {
    "parentheses": lambda n: "select " + "(" * n + "1" + ")" * n + " from {t}",
    "subqueries": lambda n: "select * from " + "(select * from " * n + "{t}" + ")" * n,
    "functions": lambda n: "select " + "abs(" * n + "px" + ")" * n + " from {t}",
    "case": lambda n: "select " + "case when px > 0 then " * n + "1" + " end" * n + " from {t}",
    "not": lambda n: "select " + "not " * n + "true from {t}",
    "minus": lambda n: "select " + "- " * n + "px from {t}",
    "arrays": lambda n: "select " + "array(" * (n - 1) + "px[0" + "]" + ")" * (n - 1) + " from {t}",
}


def deepen(frames: int, call):
    """Call ``call`` from ``frames`` frames deeper (a caller with its own stack: a server, a notebook)."""
    return call() if frames == 0 else deepen(frames - 1, call)


@pytest.mark.parametrize("kind", NESTED)
def test_nesting_up_to_the_limit_is_accepted_beyond_it_is_a_clear_sql_error(kind):
    make = NESTED[kind]
    text = deepen(150, lambda: prepare(make(MAX_NESTING).format(t="t"), TABLES, "demo").text)
    assert text == make(MAX_NESTING).format(t=T)
    with pytest.raises(SqlError, match=f"nested more than the {MAX_NESTING} levels allowed"):
        prepare(make(MAX_NESTING + 1).format(t="t"), TABLES, "demo")
    with pytest.raises(SqlError, match="nested more than the 5 levels allowed"):
        prepare(make(6).format(t="t"), TABLES, "demo", max_nesting=5)


@pytest.mark.parametrize("query", [
    "select " + "(" * 5_000 + "1" + ")" * 5_000,
    "select * from t where " + "not " * 20_000 + "true",
    "select px" + "[0]" * 5_000 + " from t",  # brackets that close at once: caught as a RecursionError
    "select " + "(" * 40_000,
])
def test_deep_nesting_is_a_sql_error_never_a_recursion_error(query):
    with pytest.raises(SqlError, match="nested"):
        prepare(query, TABLES, "demo")


def test_parentheses_in_strings_comments_and_quoted_names_do_not_count():
    query = "select '" + "(" * 100 + "' as `" + "(" * 100 + "` /* " + "(" * 100 + " */ from t"
    assert prepare(query, TABLES, "demo").text == query.replace(" from t", f" from {T}")


def test_the_documented_nesting_limit_is_the_one_enforced():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    assert f"nested more than {MAX_NESTING} levels deep" in (docs / "sql.md").read_text()
    assert f"`prepare(..., max_nesting=)` | {MAX_NESTING} |" in (docs / "security.md").read_text()
