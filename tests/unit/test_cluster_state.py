"""``headwater cluster down`` signals only the processes ``up`` started: a stale or forged state file names
other processes in vain, and a malformed one is refused with a reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import headwater as hw
from headwater.service import cluster


def write_state(data_dir, processes):
    (data_dir / "cluster").mkdir(parents=True)
    (data_dir / "cluster" / "state.json").write_text(json.dumps({"data_dir": str(data_dir), "processes": processes}))


def test_down_leaves_alone_processes_that_are_not_the_recorded_ones(tmp_path):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        ticks = cluster._start_ticks(bystander.pid)
        write_state(tmp_path, [
            {"name": "master", "pid": bystander.pid, "started": ticks + 1, "marker": "python"},  # pid reused later
            {"name": "worker-0", "pid": bystander.pid, "started": ticks, "marker": "headwater.cli worker"},  # not it
            {"name": "spark-master", "pid": 1, "started": 0, "marker": ""},  # init, forged
            {"name": "postgres", "pid": os.getpid(), "started": 0, "marker": "pytest"},  # this very process
        ])
        assert [r["running"] for r in cluster.status(tmp_path)] == [False, False, False, False]
        assert cluster.down(tmp_path) == 0
        assert bystander.poll() is None  # still alive
        assert not (tmp_path / "cluster" / "state.json").exists()
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("text", ["not json", "{}", '{"processes": [{"pid": "x"}]}', '{"processes": 5}'])
def test_a_malformed_state_file_is_refused_with_a_reason(tmp_path, text):
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "state.json").write_text(text)
    with pytest.raises(hw.ConfigurationError, match="not a cluster state file"):
        cluster.down(tmp_path)


def test_status_of_a_directory_without_a_cluster_says_so(tmp_path):
    with pytest.raises(hw.ConfigurationError, match="no cluster was started"):
        cluster.status(tmp_path)


def test_a_process_inside_exec_is_still_ours(monkeypatch):
    """``spark-class`` execs Java: while the new image is mapped, ``/proc/<pid>/cmdline`` reads empty. That
    must not count as the process having exited (it once failed ``cluster up`` with an empty log)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "marker"])
    try:
        p = cluster.Process("spark-worker", child.pid, cluster._start_ticks(child.pid), "marker")
        real, empty_reads = cluster._cmdline, ["", ""]
        monkeypatch.setattr(cluster, "_cmdline", lambda pid: empty_reads.pop() if empty_reads else real(pid))
        assert cluster._is_ours(p)
    finally:
        child.kill()
        child.wait()


def test_a_zombie_is_not_running():
    child = subprocess.Popen([sys.executable, "-c", "pass", "marker"])
    ticks = cluster._start_ticks(child.pid)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # it has exited, but is not reaped: a zombie
    try:
        assert not cluster._is_ours(cluster.Process("worker-0", child.pid, ticks, "marker"))
    finally:
        child.wait()
