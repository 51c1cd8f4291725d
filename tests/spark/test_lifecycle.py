"""Orca's graph lifecycle (A.5): stop/start lose nothing and process nothing twice; failures go through
error to failed; drop, resubmit and purge; illegal requests are refused."""

from __future__ import annotations

import re
import time

import pandas as pd
import pytest
from tests.spark.test_crash_safety import build, check_output, rows

import headwater as hw

pytestmark = pytest.mark.spark


def status(session: hw.Session, name: str) -> str:
    return session.stream_graph_meta(name).iloc[-1]["status"]


def test_stop_then_start_loses_and_duplicates_nothing(spark, tmp_path):
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build(session, "g", "ticks", "out").submit()
        frame = rows(600, seed=3)
        session.append("ticks", frame.iloc[:200])
        session.wait_until_caught_up("g")
        session.stop_stream_graph("g")
        assert status(session, "g") == "stopped"
        with pytest.raises(hw.StreamGraphStateError, match="stopped"):
            session.stop_stream_graph("g")
        with pytest.raises(hw.StreamGraphStateError, match="stopped"):
            session.wait_until_caught_up("g")
        session.append("ticks", frame.iloc[200:400])  # appended while stopped: processed after start
        lag = session.task_subscription_meta("g")  # each task's lag, also while stopped: the version just appended
        assert lag[["task_id", "table_name", "action_name"]].values.tolist() == [
            ["0.0", "demo.stream_table.ticks", "subgraph_0"], ["0.1", "demo.stream_table.ticks", "subgraph_0"]]
        assert lag[["pending_versions", "pending_rows"]].values.tolist() == [[1, 200], [1, 200]]
        assert (lag["latest_version"] == lag["processed_version"] + 1).all() and (lag["last_batch_age_s"] >= 0).all()
        session.start_stream_graph("g")
        assert status(session, "g") == "running"
        with pytest.raises(hw.StreamGraphStateError, match="it is running"):
            session.start_stream_graph("g")
        session.append("ticks", frame.iloc[400:])
        session.wait_until_caught_up("g")
        lag = session.task_subscription_meta()  # every visible graph: caught up
        assert lag[["pending_versions", "pending_rows"]].values.tolist() == [[0, 0], [0, 0]]
        check_output(session, "out", frame)
        assert session.stream_table_meta("out")["rows"].tolist() == [len(frame)]
        # the master's event log: each operation, in order, with how it ended
        events = session.state_machine_events()
        assert events[["type", "state"]].values.tolist() == [
            ["SUBMIT", "finished"], ["STOP", "finished"], ["STOP", "failed"], ["START", "finished"],
            ["START", "failed"]]
        assert (events["detail"] == "demo.stream_graph.g").all()
        assert "stopped" in events.loc[2, "error_message"] and (events["end_time"] >= events["start_time"]).all()
        engines = session.stream_engine_meta("g")
        assert engines[["task_id", "type"]].values.tolist() == [["0.0", "REACTIVE_STATE_ENGINE"],
                                                                ["0.1", "REACTIVE_STATE_ENGINE"]]
        assert ["cs", "double"] in engines.loc[0, "schema"]
        stat = session.stream_engine_stat("g")  # from each task's newest state: the keys it holds
        assert stat["keys"].sum() == frame["key"].nunique() and stat["late_rows"].isna().all()
        assert (stat["state_bytes"] > 0).all() and (stat["last_batch_s"] >= 0).all() and stat["last_error"].isna().all()
        # of the newest micro-batch that read input: one that read two versions (Headwater reads to the newest, past
        # Spark's offset) may be followed by one Spark triggers for the second, with nothing left to read
        assert stat["last_batch_rows_in"].sum() <= len(frame) and (stat["last_batch_rows_in"] > 0).all()
        # each task's own rows out (the reactive engine emits one per row in), so the column sums to the batch's
        assert stat["last_batch_rows_out"].tolist() == stat["last_batch_rows_in"].tolist()
        lineage = {t: session.data_lineage(t)[["graph", "is_deleted", "reads", "writes"]].values.tolist()
                   for t in ("ticks", "out")}
        assert lineage == {"ticks": [["demo.stream_graph.g", False, True, False]],
                           "out": [["demo.stream_graph.g", False, False, True]]}
        info = session.stream_graph_info("g")
        assert info["status"] == "running" and info["document"]["fqn"] == "demo.stream_graph.g"
        # every micro-batch is a checkpoint job; its stream tasks are the sub-jobs
        jobs = session.checkpoint_job_info("g")
        done = jobs[jobs["status"].isin(["SUCCESS", "PURGED"])]
        assert done["rows_in"].sum() == len(frame) and done["rows_out"].sum() == len(frame)
        assert (done["finished_time"] >= done["created_time"]).all()
        assert done["status"].iloc[-3:].tolist() == ["SUCCESS"] * 3 and set(done["status"]) <= {"SUCCESS", "PURGED"}
        subjobs = session.checkpoint_subjob_info("g")
        assert set(subjobs["subjob_id"]) == {"0.0", "0.1"} and subjobs["rows_in"].sum() == len(frame)
        assert subjobs["rows_out"].tolist() == subjobs["rows_in"].tolist()  # each task's own (one row out per row in)
        assert len(subjobs) == 2 * len(done)
        assert session.checkpoint_config("g") == {"enable": True, "consecutive_failures": 3,
                                                  "max_retained_checkpoints": 3, "max_concurrent_checkpoints": 1,
                                                  "checkpoint_mod": "exactly_once"}
    finally:
        session.close()


def test_a_failing_graph_goes_to_error_then_failed_and_can_be_resubmitted(spark, tmp_path, capfd):
    def explode_on_negative(batch: pd.DataFrame) -> pd.DataFrame:
        if (batch["v"] < 0).any():
            raise ValueError("negative value")
        return batch

    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        g = session.stream_graph("fragile")
        g.source("ticks", schema={"time": "timestamp", "key": "string", "v": "double"}).map(explode_on_negative) \
            .sink("out")
        with pytest.raises(hw.ConfigurationError, match="'interval' cannot apply"):
            g.submit(checkpoint_config={"interval": 60_000})
        with pytest.raises(hw.ConfigurationError, match=r"max_retained_checkpoints must be an integer in \[2, 1024\]"):
            g.submit(checkpoint_config={"maxRetainedCheckpoints": 1})
        g.submit(checkpoint_config={"consecutiveFailures": 1})
        frame = rows(50, seed=4)
        session.append("ticks", frame)
        session.wait_until_caught_up("fragile")
        session.append("ticks", frame.assign(v=-1.0).iloc[:1])
        with pytest.raises(hw.ExecutionError, match=r"again after a restart.*ValueError: negative value"):
            session.wait_until_caught_up("fragile", timeout=300)
        meta = session.stream_graph_meta("fragile").iloc[-1]
        assert meta["status"] == "failed" and "negative value" in meta["reason"]
        assert "2 failure(s) in a row, consecutive_failures=1" in meta["reason"]
        recover = session.state_machine_events().query("type == 'RECOVER'")  # the one restart allowed, which failed
        assert recover[["state", "retries"]].values.tolist() == [["failed", 0]]
        assert "negative value" in recover["detail"].iloc[0]
        jobs = session.checkpoint_job_info("fragile")
        assert jobs["status"].iloc[-1] == "FAILED" and "negative value" in jobs["extra"].iloc[-1]
        lag = session.task_subscription_meta("fragile")  # failed: the version it could not process stays pending
        assert lag[["table_name", "pending_versions", "pending_rows"]].values.tolist() == [
            ["demo.stream_table.ticks", 1, 1]]
        with pytest.raises(hw.StreamGraphStateError, match="failed"):
            session.start_stream_graph("fragile")
        with pytest.raises(hw.ExecutionError):  # the bad row is still there: it fails again
            session.resubmit_stream_graph("fragile")
        assert status(session, "fragile") == "failed"
        assert len(session.sql("select * from out")) == len(frame)  # what was committed stays
        err = capfd.readouterr().err
        assert "at org.apache" not in err, err[:2000]  # the failure is reported once, by Headwater
    finally:
        session.close()


def test_drop_resubmit_and_purge(spark, tmp_path):
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build(session, "g", "ticks", "out").submit()
        with pytest.raises(hw.StreamGraphStateError, match="no destroyed run"):
            session.purge_stream_graph_records("g")
        with pytest.raises(hw.StreamGraphStateError, match="resubmit applies"):
            session.resubmit_stream_graph("g")
        session.drop_stream_graph("g", include_tables=True)
        assert status(session, "g") == "destroyed"
        session.resubmit_stream_graph("g")  # anew from the stored definition
        assert session.stream_graph_meta("g")["status"].tolist() == ["destroyed", "running"]
        frame = rows(100, seed=5)
        session.append("ticks", frame)
        session.wait_until_caught_up("g")
        check_output(session, "out", frame)
        session.drop_stream_graph("g")
        assert session.purge_stream_graph_records("g") == 2
        assert session.stream_graph_meta("g").empty
    finally:
        session.close()


def test_a_graph_behind_its_sources_retention_fails_with_the_reason_and_sql_keeps_every_row(spark, tmp_path):
    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build(session, "g", "ticks", "out").submit()
        frame = rows(400, seed=5)
        session.append("ticks", frame.iloc[:100])
        session.wait_until_caught_up("g")
        session.stop_stream_graph("g")
        for i in range(100, 400, 20):  # appended while the graph is stopped
            session.append("ticks", frame.iloc[i:i + 20])
        session.set_stream_table_retention("ticks", rows=50)
        session._master.master.compactor.run_once()
        session._master.master.compactor.run_once()
        meta = session.stream_table_meta("ticks").iloc[0]
        assert meta["first_version"] > 2 and meta["rows"] == 400
        # SQL reads the snapshot, which keeps every row
        got = session.sql("select * from ticks").to_pandas().sort_values("time", ignore_index=True)
        pd.testing.assert_frame_equal(got, frame, check_dtype=False)
        try:  # its first micro-batch reads version 2, which retention removed
            session.start_stream_graph("g")
        except hw.ExecutionError as exc:
            assert re.search(r"RetentionError.*version 2 is no longer kept", str(exc)), exc
        else:
            # the stop came between Headwater's commit of version 1 (all wait_until_caught_up waits for) and Spark's
            # own commit-log write: Spark replays that micro-batch first (Headwater skips it, done already), and the
            # graph is running until its next micro-batch reads version 2
            with pytest.raises(hw.ExecutionError, match=r"RetentionError.*version 2 is no longer kept"):
                session.wait_until_caught_up("g", timeout=300)
        meta = session.stream_graph_meta("g").iloc[-1]
        assert meta["status"] == "failed" and "retention removed the versions before" in meta["reason"]
    finally:
        session.close()


def test_the_master_notices_a_failed_query_by_itself_and_restarts_it(spark, tmp_path):
    """No one waits on the graph: the supervisor finds the failure, records it, and restarts the graph."""
    failures = tmp_path / "fail_once"
    failures.write_text("1")

    def fail_once(batch: pd.DataFrame) -> pd.DataFrame:
        if len(batch) and failures.read_text() == "1":
            failures.write_text("0")
            raise RuntimeError("a transient failure")
        return batch

    session = hw.connect(tmp_path / "data")
    session.use_catalog("demo")
    try:
        g = session.stream_graph("flaky")
        g.source("ticks", schema={"time": "timestamp", "key": "string", "v": "double"}).map(fail_once).sink("out")
        g.submit()
        frame = rows(40, seed=6)
        session.append("ticks", frame)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and session.state_machine_events().query("type == 'RECOVER'").empty:
            time.sleep(0.05)  # polling interval of a condition wait
        recover = session.state_machine_events().query("type == 'RECOVER'")
        assert len(recover) == 1 and "a transient failure" in recover["detail"].iloc[0]
        session.wait_until_caught_up("flaky", timeout=120)
        assert status(session, "flaky") == "running"
        got = session.sql("select * from out").to_pandas().sort_values("time", ignore_index=True)
        pd.testing.assert_frame_equal(got, frame.sort_values("time", ignore_index=True), check_dtype=False)
    finally:
        session.close()
