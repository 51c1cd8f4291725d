"""Issue 6 leftovers: a killed session's Spark scratch stays under <data_dir>/tmp (nothing in /tmp) and the
next session removes it. Runs its own Spark in a child process: the shared test SparkSession is created
before any data directory exists, so the scratch settings cannot apply to it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from tests.support.processes import descendants

import headwater as hw
from headwater.storage.locks import GUARD_NAME

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# what Spark, PySpark and the JVM put into the temp directory by default
SPARK_LIKE = ("spark-", "blockmgr-", "artifacts-", "liblz4", "snappy", "libzstd", "zstd", "jna", "headwater-warehouse",
              "hsperfdata_")
CHILD = textwrap.dedent("""
    import sys
    import pandas as pd
    import headwater as hw
    s = hw.connect(sys.argv[1], start_spark=False)
    spark = s._master.master.worker.worker.spark  # Spark starts here, with the scratch settings
    s.create_stream_table("demo.stream_table.t", {"sym": "string", "px": "double"})
    s.append("demo.stream_table.t", pd.DataFrame({"sym": ["a", "b", "a"], "px": [1.0, 2.0, 3.0]}))
    assert len(s.sql("select sym, count(*) from demo.stream_table.t group by sym")) == 2  # a shuffle
    print(spark.conf.get("spark.local.dir"), spark.sparkContext._jvm.System.getProperty("java.io.tmpdir"), flush=True)
    sys.stdin.read()
""")


def temp_entries(root: Path) -> set[str]:
    names = {p.name for p in root.iterdir()}
    for perf in root.glob("hsperfdata_*"):  # the JVM's per-pid performance files
        if perf.is_dir():
            names |= {f"{perf.name}/{p.name}" for p in perf.iterdir()}
    return names


def private_tmp(fake: Path) -> list[str] | None:
    """A command prefix that runs a process with ``fake`` mounted as its /tmp, if this machine allows it.

    Other processes (other test runs with their own Spark) write to the shared /tmp at the same time;
    a private /tmp shows exactly what the killed session left. Needs a private mount namespace.
    """
    if shutil.which("unshare") is None:
        return None
    tmp = Path("/tmp").resolve()
    if any(tmp in Path(p).resolve().parents for p in (ROOT, sys.executable, sys.prefix)):
        return None  # the checkout or its interpreter lives in /tmp (a CI clone): a private /tmp would hide it
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount --bind "$0" /tmp && exec "$@"',
              str(fake)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, check=False)
    return prefix if probe.returncode == 0 else None


def test_killed_session_leaves_no_spark_scratch_in_tmp_and_the_next_session_removes_it(tmp_path):
    fake_tmp = tmp_path / "tmp"
    fake_tmp.mkdir()
    prefix = private_tmp(fake_tmp)
    if prefix is None:  # shared /tmp: compare listings, only entries Spark and the JVM create count
        temp_root, data_dir, child_data_dir = Path(tempfile.gettempdir()), tmp_path / "data", tmp_path / "data"
    else:  # the child's /tmp is fake_tmp; its data directory lives there too (the real /tmp is hidden)
        temp_root, data_dir, child_data_dir = fake_tmp, fake_tmp / "data", Path("/tmp/data")
    before = temp_entries(temp_root)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'src'}"}
    proc = subprocess.Popen([*(prefix or []), sys.executable, "-c", CHILD, str(child_data_dir)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        local_dir, java_tmp = proc.stdout.readline().split()
        children = descendants(proc.pid)  # the JVM and Spark's Python workers
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert Path(local_dir).parent.parent == child_data_dir / "tmp" == Path(java_tmp).parent.parent
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in children):
        time.sleep(0.1)  # polling interval of a condition wait: the JVM exits once its parent is gone
    assert not any(Path(f"/proc/{p}").exists() for p in children), "Spark processes outlived the killed session"

    new = temp_entries(temp_root) - before - {"data"}
    if prefix is None:
        new = {n for n in new if n.split("/")[-1].startswith(SPARK_LIKE) or n.split("/")[-1] in map(str, children)}
        # a fixed-name directory that sessions of other test lanes may create meanwhile; the child's is in its scratch
        new.discard("headwater-warehouse")
    assert not new, f"the killed session left {sorted(new)} in its temp directory"
    scratch = data_dir / "tmp"
    (left,) = [p for p in scratch.iterdir() if p.name not in ("sql", GUARD_NAME)]  # the dead process's, unlocked
    # ("sql" holds session.sql result files: unlocked too, removed alike at the next start; the guard file stays)
    assert (left / "local").is_dir() and (left / "java").is_dir()

    hw.connect(data_dir, start_spark=False).close()
    assert [p.name for p in scratch.iterdir()] == [GUARD_NAME]
