"""udf_engine and timer_engine end to end on Spark, through the session: the udf engine's running totals (its
variables, micro-batches on the driver and as Spark tasks) equal pandas'; a timer paused with
``session.stop_timer_engine`` runs no more while a second timer of the same graph ticks on, and runs again after
``resume_timer_engine``. Every wait is on a condition with a deadline."""

from __future__ import annotations

import pandas as pd
import pytest
from tests.spark.test_engines_on_spark import ran_where
from tests.support.service import wait_for
from tests.unit.test_timer_engine import append_line, lines
from tests.unit.test_udf_engine import TICKS, reference, running_totals

import headwater as hw

pytestmark = pytest.mark.spark

SCHEMA = {"sym": "string", "qty": "long", "total": "long", "seen": "long"}


def test_udf_and_timer_engines_on_spark(spark, tmp_path):
    paused, running = tmp_path / "paused.txt", tmp_path / "running.txt"
    s = hw.connect(tmp_path / "data", driver_batch_rows=20)  # batches over 20 rows run as Spark tasks
    s.use_catalog("demo")
    try:
        g = s.stream_graph("user_code")
        (g.source("ticks", {"sym": "string", "qty": "long"}).parallelize("sym", 2)
           .udf_engine(running_totals, variables={"totals": {}, "seen": 0}, output_schema=SCHEMA)
           .set_engine_name("totals").sync()
           .timer_engine("200ms", append_line, str(paused), "tick").set_engine_name("paused_job")
           .timer_engine("200ms", append_line, str(running), "tick").set_engine_name("running_job")
           .sink("out"))
        g.submit()
        for a, b in ((0, 10), (10, 50), (50, 60)):
            s.append("ticks", TICKS.iloc[a:b])
            s.wait_until_caught_up("user_code")
        out = s.sql("select * from out").to_pandas()
        assert ran_where(s, "user_code") == {True, False}

        wait_for(lambda: lines(paused) >= 2, 60, "the timer's first runs")
        s.stop_timer_engine("paused_job")
        before = lines(running)
        wait_for(lambda: lines(running) >= before + 1, 60, "a tick of the other timer")
        at_pause, other = lines(paused), lines(running)  # a run in flight at the pause has ended meanwhile
        wait_for(lambda: lines(running) >= other + 3, 60, "three more ticks of the other timer")
        assert lines(paused) == at_pause
        stat = s.stream_engine_stat("user_code").set_index("name")
        assert bool(stat.loc["paused_job", "timer_paused"]) and not bool(stat.loc["running_job", "timer_paused"])
        assert stat.loc["paused_job", "timer_runs"] >= 2 and stat.loc["running_job", "timer_failures"] == 0
        s.resume_timer_engine("paused_job")
        wait_for(lambda: lines(paused) >= at_pause + 2, 60, "runs after resume")
    finally:
        s.close()
    key = ["sym", "qty", "total"]
    got = out[key].sort_values(key).reset_index(drop=True)
    want = reference(TICKS, 2)[key].sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
