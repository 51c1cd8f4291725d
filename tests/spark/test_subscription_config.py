"""Orca's subscription settings on Spark: ``batch_size`` bounds the rows of a micro-batch, ``source_offset=-1`` starts
a source at its latest row on submit and on start. Driven by appends and ``wait_until_caught_up``; the outputs are
checked against pandas over the rows each setting lets through, the micro-batches against the job records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import headwater as hw

pytestmark = pytest.mark.spark

SCHEMA = {"seq": "long", "sym": "string", "px": "double"}


def frames(sizes: list[int], seed: int, first: int = 0) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    out, seq = [], first
    for n in sizes:
        out.append(pd.DataFrame({"seq": np.arange(seq, seq + n, dtype="int64"),
                                 "sym": rng.choice(["a", "b", "c"], n), "px": rng.normal(100, 5, n).round(2)}))
        seq += n
    return out


def reference(rows: pd.DataFrame) -> pd.DataFrame:
    """A running total of px per sym over ``rows`` in order (pandas, not the engine)."""
    ref = rows.copy()
    ref["total"] = ref.groupby("sym")["px"].cumsum()
    return ref[["seq", "sym", "total"]].sort_values("seq", ignore_index=True)


def totals(session: hw.Session, table: str) -> pd.DataFrame:
    got = session.sql(f"select seq, sym, total from stream_table.{table}").to_pandas()
    return got.sort_values("seq", ignore_index=True)


def declare(g: hw.StreamGraph, source: str, sink: str) -> None:
    g.source(source, SCHEMA).reactive_state_engine(metrics=["seq", "cumsum(px) as total"], key_column="sym").sink(sink)


def test_batch_size_bounds_the_rows_of_each_micro_batch(spark, tmp_path):
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        s.create_stream_table("ticks", SCHEMA)
        backlog = frames([30] * 6, seed=1)
        for frame in backlog:  # six commits of 30 rows before the graph starts
            s.append("ticks", frame)
        g = s.stream_graph("bounded").set_config_map({"subscription.batchSize": 70})
        declare(g, "ticks", "bounded_out")
        g.submit()
        s.wait_until_caught_up("bounded")
        big = frames([100], seed=2, first=180)[0]  # one commit larger than the bound: read whole, alone
        s.append("ticks", big)
        s.wait_until_caught_up("bounded")
        jobs = s.checkpoint_job_info("bounded")
        ran = jobs.loc[jobs["rows_in"] > 0].sort_values("checkpoint_id")
        # 30-row commits under a 70-row bound: two commits per micro-batch; the 100-row commit on its own
        assert ran["rows_in"].tolist() == [60, 60, 60, 100]
        assert ran["input_versions"].tolist() == ["(0, 2]", "(2, 4]", "(4, 6]", "(6, 7]"]
        pd.testing.assert_frame_equal(totals(s, "bounded_out"), reference(pd.concat([*backlog, big])),
                                      check_dtype=False)
    finally:
        s.close()


def test_source_offset_minus_one_starts_at_the_latest_row_on_submit_and_on_start(spark, tmp_path):
    s = hw.connect(tmp_path)
    s.use_catalog("demo")
    try:
        s.create_stream_table("ticks", SCHEMA)
        old, new1, new2, while_stopped, after = frames([20, 15, 25, 10, 30], seed=3)
        s.append("ticks", old)
        live = s.stream_graph("live").set_config_map({"subscription.sourceOffset": -1})
        declare(live, "ticks", "live_out")
        everything = s.stream_graph("everything").set_config_map({"subscription.source_offset": -3})
        declare(everything, "ticks", "all_out")
        live.submit()
        everything.submit()
        for frame in (new1, new2):
            s.append("ticks", frame)
        s.wait_until_caught_up("live")
        pd.testing.assert_frame_equal(totals(s, "live_out"), reference(pd.concat([new1, new2])), check_dtype=False)

        s.stop_stream_graph("live")
        s.append("ticks", while_stopped)
        s.start_stream_graph("live")  # -1 on start: what was appended while stopped is skipped, state is kept
        s.append("ticks", after)
        s.wait_until_caught_up("live")
        s.wait_until_caught_up("everything")
        pd.testing.assert_frame_equal(totals(s, "live_out"), reference(pd.concat([new1, new2, after])),
                                      check_dtype=False)
        pd.testing.assert_frame_equal(totals(s, "all_out"),
                                      reference(pd.concat([old, new1, new2, while_stopped, after])), check_dtype=False)
    finally:
        s.close()
