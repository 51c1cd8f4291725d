"""warmup_stream_engine: state is built from history without output, then live rows continue from it."""

from __future__ import annotations

import pandas as pd
import pytest
from tests.spark.test_reactive_recovery import SCHEMA, batch_reference, make_rows

import headwater as hw

pytestmark = pytest.mark.spark

METRICS = ["time", "price", "ewm_mean(price, span=5, adjust=False) as e", "msum(volume, 4) as v", "cumsum(volume) as c"]


def test_warmed_engine_continues_from_history_without_emitting_it(spark, tmp_path):
    rows = make_rows(4000, keys=8)
    history, live = rows.iloc[:2500], rows.iloc[2500:]
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        g = s.stream_graph("warm")
        (g.source("ticks", schema=SCHEMA).parallelize("key", 2)
           .reactive_state_engine(key_column="key", metrics=METRICS).set_engine_name("factors")
           .sync().sink("out"))
        g.submit()
        assert s.warmup_stream_engine("factors", history) == len(history)
        s.append("ticks", live)
        s.wait_until_caught_up("warm")
        got = s.sql("select * from stream_table.out").to_pandas()
        with pytest.raises(hw.CatalogError, match="not part of a running graph"):
            s.warmup_stream_engine("nope", history)
    finally:
        s.close()
    want = batch_reference(rows, METRICS).iloc[2500:]
    assert len(got) == len(live)
    key = ["key", "time", "c"]
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True)[want.columns],
                                  want.sort_values(key).reset_index(drop=True), check_dtype=False)
