"""Issue 6.1: ``session.sql`` is one read-only query over catalog tables; everything else is refused and
nothing stored changes."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import pytest

import headwater as hw
from headwater.sql.functions import ALLOWED_FUNCTIONS, ALLOWED_FUNCTIONS_BY_GROUP

pytestmark = pytest.mark.spark

TRADES = pd.DataFrame({"sym": ["a", "b", "a", "c"], "px": [1.0, 2.0, 3.0, 4.0], "qty": [10, 20, 30, 40]})
QUOTES = pd.DataFrame({"sym": ["a", "b"], "bid": [0.5, 1.5]})


@pytest.fixture(scope="module")
def session(spark, tmp_path_factory):
    s = hw.connect(tmp_path_factory.mktemp("sqldata"))
    s.use_catalog("demo")
    s.create_stream_table("trades", {"sym": "string", "px": "double", "qty": "long"})
    s.create_stream_table("quotes", {"sym": "string", "bid": "double"}, kind="keyed", key_column="sym")
    s.append("trades", TRADES)
    s.append("quotes", QUOTES)
    yield s
    s.close()


def stored_bytes(root: Path) -> dict[str, str]:
    """Every file under the data directory's tables and catalog, by content hash."""
    files = [p for p in sorted((root / "tables").rglob("*")) if p.is_file()] + [root / "headwater.db"]
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def hostile(data: Path, evil: Path) -> list[str]:
    trades = data / "tables" / "demo" / "trades"
    return [
        f"create table t using parquet location '{evil}' as select 1 as a",
        f"create table v (a bigint) using parquet location '{trades}'",
        "insert overwrite table v select 99 as a",
        "insert into demo.stream_table.trades select * from demo.stream_table.trades",
        "insert overwrite directory '/tmp/hw_evil_dir' using parquet select 1",
        "select reflect('java.io.File', 'createTempFile', 'x', '.txt')",
        "select java_method('java.lang.System', 'getProperty', 'user.home')",
        "select try_reflect('java.lang.System', 'getenv', 'HOME')",
        "select * from text.`/etc/hostname`",
        f"select * from parquet.`{trades}`",
        f"select * from delta.`{trades}`",
        "select * from json.`/etc/passwd`",
        "set spark.sql.ansi.enabled=true",
        "set -v",
        "reset",
        "drop table demo.stream_table.trades",
        "drop table if exists trades",
        "truncate table trades",
        "delete from trades where 1 = 1",
        "update trades set px = 0",
        "merge into trades t using quotes q on t.sym = q.sym when matched then delete",
        "alter table trades set tblproperties ('a' = 'b')",
        "add jar /tmp/evil.jar",
        "add file /etc/hostname",
        "cache table trades",
        "uncache table trades",
        "refresh table trades",
        "create temporary view leak as select * from text.`/etc/hostname`",
        "create temporary function f as 'java.lang.String'",
        "use default",
        "load data local inpath '/etc/hostname' into table trades",
        "select * from trades; drop table trades",
        "select * from range(10)",
        "select * from read_files('/etc')",
        "select identifier('reflect')('java.lang.System', 'getenv', 'HOME')",
        "select * from identifier('text.`/etc/hostname`')",
        "select * from hw__demo__stream_table__trades",
        "select * from global_temp.leak",
        "select * from spark_catalog.default.t",
        "select * from trades where px > (select max(length(reflect('java.lang.System', 'getenv', 'HOME'))) from trades)",
        "select transform(array(1), x -> java_method('java.lang.System', 'getenv', 'HOME'))",
        "with a as (select * from text.`/etc/hostname`) select * from a",
        "select * from trades t1 join parquet.`/etc` t2 on true",
        "select * from (select * from json.`/etc/passwd`) s",
        "select * from trades lateral view explode(array(reflect('java.lang.System', 'getenv', 'HOME'))) e as x",
        "values (java_method('java.lang.System', 'getenv', 'HOME'))",
        "select xpath('<a><b>1</b></a>', 'a/b')",
        "select input_file_name() from trades",
        "select from_protobuf(cast('' as binary), 'M', '/etc/hostname')",
        "explain extended select 1",
        "select 1 " + "or 1 = 1 " * 20_000,
    ]


def test_hostile_statements_are_refused_and_nothing_stored_changes(spark, session, tmp_path):
    data = Path(session.data_dir)
    evil = tmp_path / "evil"
    before = stored_bytes(data)
    ansi = spark.conf.get("spark.sql.ansi.enabled")
    statements = hostile(data, evil)
    assert len(statements) >= 30
    for statement in statements:
        with pytest.raises(hw.SqlError) as info:
            session.sql(statement)
        assert len(str(info.value)) < 2_000, statement
    assert stored_bytes(data) == before
    assert not evil.exists() and not Path("/tmp/hw_evil_dir").exists()
    assert spark.conf.get("spark.sql.ansi.enabled") == ansi
    assert [t.name for t in spark.catalog.listTables() if not t.isTemporary] == []
    assert session.sql("select count(*) as n from trades").to_pandas()["n"].tolist() == [len(TRADES)]
    session.create_stream_table("events", {"sym": "string", "px": "double", "qty": "long"})
    session.append("events", TRADES)  # the catalog and Delta tables still take writes
    assert len(session.sql("select * from events")) == len(TRADES)


@pytest.mark.parametrize("statement, fragment", [
    ("drop table demo.stream_table.trades", "DROP"),
    ("select reflect('java.io.File', 'createTempFile', 'x', '.txt')", "function reflect"),
    ("select * from text.`/etc/hostname`", "not a public stream table"),
    ("set spark.sql.ansi.enabled=true", "SET"),
    ("select * from range(10)", "table function"),
    ("select identifier('reflect')('a', 'b')", "cannot parse"),
    ("select 1 from trades where 1 = (select 1 from parquet.`/etc`)", "not a public stream table"),
])
def test_a_refusal_names_what_was_refused(session, statement, fragment):
    with pytest.raises(hw.SqlError, match=fragment):
        session.sql(statement)


def test_read_only_queries_work(session):
    t = TRADES
    got = session.sql("select sym, sum(qty) as q from trades group by sym order by sym").to_pandas()
    want = t.groupby("sym", as_index=False)["qty"].sum().rename(columns={"qty": "q"})
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    got = session.sql("""
        with big as (select * from demo.stream_table.trades where px > 1)
        select b.sym, b.px, q.bid, row_number() over (partition by b.sym order by b.px) as rn
        from big b join stream_table.quotes q on b.sym = q.sym
        where b.px > (select min(px) from trades) order by b.sym, b.px""").to_pandas()
    want = t[t.px > 1].merge(QUOTES, on="sym").sort_values(["sym", "px"]).reset_index(drop=True)
    want["rn"] = want.groupby("sym").cumcount() + 1
    pd.testing.assert_frame_equal(got, want[["sym", "px", "bid", "rn"]], check_dtype=False)
    assert session.sql("select * from trades lateral view explode(array(1, 2)) e as x").to_pandas().shape == (8, 4)
    assert session.sql("values (1, 'a'), (2, 'b')").to_pandas().shape == (2, 2)
    assert session.sql("select upper(sym) u, round(px * 2, 1) d from trades union all select 'z', 0.0").to_pandas().shape == (5, 2)


def test_unknown_column_is_a_clear_error_without_a_java_stack_trace(session, capfd):
    capfd.readouterr()
    with pytest.raises(hw.SqlError, match="nope") as info:
        session.sql("select nope from trades")
    message = str(info.value)
    assert "hw__" not in message
    assert "at org.apache" not in message and len(message) < 1_000
    _out, err = capfd.readouterr()
    assert "at org.apache" not in err and "Exception" not in err, err[:2000]


@pytest.mark.parametrize("query", [None, 42, "", "   ", b"select 1"])
def test_non_queries_are_sql_errors(session, query):
    with pytest.raises(hw.SqlError):
        session.sql(query)


def test_allowed_functions_exist_in_spark_and_dangerous_ones_are_not_allowed(spark):
    registry = spark._jsparkSession.sessionState().functionRegistry()
    known = {f.funcName() for f in jvm_iter(registry.listFunction())}
    assert known >= ALLOWED_FUNCTIONS, sorted(ALLOWED_FUNCTIONS - known)
    for name in ("reflect", "java_method", "try_reflect", "input_file_name", "xpath", "from_protobuf",
                 "assert_true", "raise_error", "current_user"):
        assert name not in ALLOWED_FUNCTIONS
    assert ALLOWED_FUNCTIONS_BY_GROUP["misc_funcs"] == ("typeof",)


def jvm_iter(seq):
    it = seq.iterator()
    while it.hasNext():
        yield it.next()


def test_results_stream_in_order_as_bounded_batches_and_are_removed(session):
    n = 200_000
    got = session.sql(f"select id, id % 7 as m from (select explode(sequence(1, {n})) as id) order by m desc, id")
    assert len(got) == n
    sizes, last = [], None
    for batch in got.to_batches(batch_size=10_000):
        sizes.append(batch.num_rows)
        keys = list(zip(batch.column("m").to_pylist(), batch.column("id").to_pylist(), strict=True))
        ordered = [(-m, i) for m, i in keys]
        assert ordered == sorted(ordered) and (last is None or last <= ordered[0])
        last = ordered[-1]
    assert sum(sizes) == n and max(sizes) <= 10_000 and len(sizes) >= 20
    files = list(got._files)
    assert files and all(f.exists() for f in files)
    got.close()
    assert not any(f.exists() for f in files)
