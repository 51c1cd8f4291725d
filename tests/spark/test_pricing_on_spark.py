"""pricing_engine end to end on Spark: a graph whose micro-batches run on the driver and as Spark tasks gives the
rows the same pricing functions give in pandas."""

from __future__ import annotations

import pandas as pd
import pytest
from tests.spark.test_engines_on_spark import ran_where
from tests.unit.test_pricing_engine import METHODS, REFERENCE, SCHEMA, expected, rows

import headwater as hw

pytestmark = pytest.mark.spark


def test_pricing_engine_on_spark_equals_the_reference(spark, tmp_path):
    frame = rows(400, seed=11)
    s = hw.connect(tmp_path, driver_batch_rows=100)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("pricing")
        (g.source("quotes", schema=SCHEMA).parallelize("sym", 2)
           .pricing_engine(time_column="time", type_column="kind", security_type=[1, 2, 3], method=METHODS,
                           security_reference=REFERENCE, key_column="sym", extra_metrics=["spot / strike as moneyness"])
           .sync().sink("priced"))
        g.submit()
        for a, b in ((0, 250), (250, 260), (260, 400)):
            s.append("quotes", frame.iloc[a:b])
            s.wait_until_caught_up("pricing")
        out = s.sql("select * from priced").to_pandas()
        assert ran_where(s, "pricing") == {True, False}
    finally:
        s.close()
    key = ["time", "sym"]
    got = out.sort_values(key).reset_index(drop=True)
    want = expected(frame).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False, rtol=1e-13)
