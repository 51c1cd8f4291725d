"""The read-only SQL gates without Spark: the statement gate on sqlglot's parse, the plan gates on
hand-made plan JSON (the shape of Spark's ``LogicalPlan.toJSON``)."""

from __future__ import annotations

import pytest

from headwater.errors import SqlError
from headwater.sql.policy import check_analysed_plan, check_parsed_plan, prepare

TABLES = {"demo.stream_table.trades": "/d/trades", "demo.stream_table.quotes": "/d/quotes"}
LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
EXPR = "org.apache.spark.sql.catalyst.expressions."


def is_plan(cls: str) -> bool:
    return cls.startswith(LOGICAL) or cls.endswith(("Relation", "Having", "Qualify", "TableValuedFunction")) or "datasources" in cls


def node(cls: str, **fields):
    return {"class": cls, "num-children": fields.pop("children", 0), **fields}


@pytest.mark.parametrize("query, want", [
    ("select * from trades", "select * from hw__demo__stream_table__trades"),
    ("select t.px from demo.stream_table.trades t", "select t.px from hw__demo__stream_table__trades t"),
    ("with a as (select * from stream_table.quotes) select * from a",
     "with a as (select * from hw__demo__stream_table__quotes) select * from a"),
])
def test_prepare_rewrites_stream_tables_to_views(query, want):
    assert prepare(query, TABLES, "demo").text == want


@pytest.mark.parametrize("query, fragment", [
    ("select * from other", "not a public stream table"),
    ("select * from trades", "not a public stream table"),  # no catalog selected: a bare name is unknown
    ("select * from parquet.`/etc`", "not a public stream table"),
    ("select * from range(3)", "table function"),
    ("drop table trades", "DROP"),
    ("select 1; select 2", "2 statements"),
    ("with `a b` as (select 1) select * from `a b`", "WITH name"),
    ("select (", "cannot parse"),
])
def test_prepare_refuses(query, fragment):
    with pytest.raises(SqlError, match=fragment):
        prepare(query, TABLES, "demo" if "trades" not in query or "from trades" not in query else None)


def test_refusals_are_bounded():
    with pytest.raises(SqlError) as info:
        prepare("select * from " + "x" * 200_000, TABLES, "demo")
    assert len(str(info.value)) < 1_000


def test_parsed_plan_gate():
    q = prepare("select * from trades", TABLES, "demo")
    ok = [node(LOGICAL + "Project", children=1, projectList=[[node(ANALYSIS + "UnresolvedStar")]]),
          node(ANALYSIS + "UnresolvedRelation", multipartIdentifier="[hw__demo__stream_table__trades]")]
    check_parsed_plan(q, ok, is_plan)
    bad = {
        "the operation SetCommand": [node(LOGICAL + "SetCommand")],
        "the relation parquet./etc": [node(ANALYSIS + "UnresolvedRelation", multipartIdentifier="[parquet, /etc]")],
        "the function reflect": [node(LOGICAL + "Project", projectList=[[node(
            ANALYSIS + "UnresolvedFunction", nameParts="[reflect]")]])],
        "the function java_method": [node(LOGICAL + "Generate", generator=[node(
            ANALYSIS + "UnresolvedGenerator", name={"funcName": "java_method"})])],
        "ExpressionWithUnresolvedIdentifier": [node(LOGICAL + "Project", projectList=[[node(
            ANALYSIS + "ExpressionWithUnresolvedIdentifier")]])],
        "the operation UnresolvedTableValuedFunction": [node(ANALYSIS + "UnresolvedTableValuedFunction")],
        "the expression PythonUDF": [node("org.apache.spark.sql.execution.python.PythonUDF")],
    }
    for fragment, plan in bad.items():
        with pytest.raises(SqlError, match=fragment):
            check_parsed_plan(q, plan, is_plan)
    # a nested plan (a subquery inside an expression) is checked too
    nested = [node(LOGICAL + "Filter", condition=[node(EXPR + "ScalarSubquery", plan=[node(LOGICAL + "SetCommand")])])]
    with pytest.raises(SqlError, match="SetCommand"):
        check_parsed_plan(q, nested, is_plan)


def test_analysed_plan_gate():
    q = prepare("select * from trades", TABLES, "demo")
    relation = node("org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation")
    view = node(LOGICAL + "View", children=1, isTempView=True,
                desc={"identifier": {"table": "hw__demo__stream_table__trades"}})
    check_analysed_plan(q, [node(LOGICAL + "Project", children=1), view, relation], is_plan)
    for plan, fragment in [
        ([node(LOGICAL + "Project", children=1), relation], "not a Headwater stream table"),
        ([node("org.apache.spark.sql.execution.datasources.LogicalRelation")], "LogicalRelation"),
        ([node(LOGICAL + "View", children=1, isTempView=True, desc={"identifier": {"table": "other"}}), relation],
         "the view 'other'"),
    ]:
        with pytest.raises(SqlError, match=fragment):
            check_analysed_plan(q, plan, is_plan)
