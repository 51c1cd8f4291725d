"""A micro-batch's record holds its input range from before it runs: a replay redoes exactly that range, and
only committed batches count as processed."""

from __future__ import annotations

from headwater.dataplane.jobs import (
    begin_job,
    committed_input_version,
    in_flight,
    newest_job,
    read_jobs,
    write_job,
)


def test_a_replay_gets_the_range_its_first_attempt_recorded(tmp_path):
    assert begin_job(tmp_path, 0, lambda start: 4) == (0, 4)
    assert begin_job(tmp_path, 0, lambda start: 9) == (0, 4)  # the input grew meanwhile: the replay still ends at 4
    assert in_flight(tmp_path) == {"batch": 0, "input": [0, 4]}
    assert read_jobs(tmp_path) == [] and newest_job(tmp_path) is None and committed_input_version(tmp_path) == 0

    write_job(tmp_path, {"batch": 0, "input": [0, 4], "finished": 1.0})
    assert in_flight(tmp_path) is None and committed_input_version(tmp_path) == 4
    assert begin_job(tmp_path, 1, lambda start: start + 2) == (4, 6)  # the next batch starts where it ended
    assert [r["batch"] for r in read_jobs(tmp_path)] == [0] and newest_job(tmp_path)["batch"] == 0


def test_the_newest_job_that_read_input_skips_an_empty_range(tmp_path):
    """Spark may trigger a micro-batch over a range the one before already read to: (3, 3]."""
    write_job(tmp_path, {"batch": 0, "input": [0, 3], "finished": 1.0, "rows_in": 600})
    assert begin_job(tmp_path, 1, lambda start: start) == (3, 3)
    write_job(tmp_path, {"batch": 1, "input": [3, 3], "finished": 2.0, "rows_in": 0})
    assert newest_job(tmp_path)["batch"] == 1 and committed_input_version(tmp_path) == 3
    assert newest_job(tmp_path, read_input=True)["rows_in"] == 600
    assert newest_job(tmp_path / "none", read_input=True) is None
