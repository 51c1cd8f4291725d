"""The crypto order book engine on Spark tasks gives the books and error rows of the naive reference book."""

from __future__ import annotations

import random

import pytest
from tests.unit.test_order_book import arrow, build_stream, canonical, frame, graph, reference, tasks_of

import headwater as hw

pytestmark = pytest.mark.spark


def test_binance_futures_books_and_errors_on_spark_equal_the_reference(spark, tmp_path):
    rng = random.Random(7)
    rows = [{**r, "sym": f"{r['sym']}{k}"} for k in range(6)
            for r in build_stream(lambda options: rng.choice(list(options)))]
    rows.sort(key=lambda r: r["t"])  # six streams of their own symbols, merged by time (each keeps its order)
    s = hw.connect(tmp_path / "spark", driver_batch_rows=0)  # every micro-batch as Spark tasks
    s.use_catalog("demo")
    try:
        g = graph(s, "books", "binance_futures", parallel=True, depth=3, timeout=2500, caching_interval=5000)
        g.submit()
        third = len(rows) // 3
        for part in (rows[:third], rows[third:2 * third], rows[2 * third:]):
            s.append("books_in", arrow(part))
        s.wait_until_caught_up("books", timeout=300)
        got = s.sql("select * from stream_table.books_out").to_pandas()
        errors = s.sql("select * from stream_table.books_errors").to_pandas()
        stats = s.stream_engine_stat("books")
    finally:
        s.close()
    want, want_errors = reference(rows, "binance_futures", 3, 5000, 2500, None, tasks_of(parallel=True))
    assert len(want) > 20 and {c for _, _, c in want_errors} == {1, 2, 3, 4}
    assert canonical(got[list(frame(want).columns)]) == canonical(frame(want))
    assert sorted(zip(errors["symbol"], errors["eventTime"], errors["code"], strict=True)) == sorted(want_errors)
    assert int(stats["late_rows"].sum()) == sum(c in (1, 2) for _, _, c in want_errors)
