"""Spark's Python workers come from Headwater's daemon (headwater.spark.daemon), with huge pages off."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_the_python_workers_run_without_transparent_huge_pages(spark):
    def thp_enabled(_: object) -> str:  # defined here: shipped by value, not imported from this test module
        with open("/proc/self/status") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("THP_enabled:")), "")

    answers = spark.sparkContext.parallelize(range(2), 2).map(thp_enabled).collect()
    if answers == ["", ""]:
        pytest.skip("this kernel does not report THP_enabled (Linux < 5.0)")
    assert answers == ["0", "0"]  # inherited from the daemon that forked them


def test_the_python_workers_are_forked_by_the_drivers_zygote(spark):
    """On a local master the daemon Spark starts hands its place to the zygote build_spark started with the JVM
    (headwater.spark.zygote): the workers' parent is that process, warm before Spark asked for it."""

    def parent(_: object) -> str:
        with open(f"/proc/{__import__('os').getppid()}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()

    parents = set(spark.sparkContext.parallelize(range(2), 2).map(parent).collect())
    assert len(parents) == 1 and "-m headwater.spark.zygote" in parents.pop()


def test_a_forked_worker_loads_a_graphs_task_plan_without_importing(spark, tmp_path):
    """The daemon's warm-up (what the zygote runs before Spark forks workers from it) imports everything a task's
    plan needs: unpickling it in a new worker imports no module, the first micro-batch's task included."""
    import subprocess
    import sys

    from tests.spark.test_crash_safety import build

    import headwater as hw

    session = hw.connect(tmp_path)
    session.use_catalog("demo")
    try:
        build(session, "g", "ticks", "out").submit()
        plans = sorted(tmp_path.glob("graphs/**/task_plan.pkl"))
        assert plans
        probe = (
            "import sys, pickle\n"
            "from headwater.spark.daemon import warm_up\n"
            "warm_up()\n"
            "before = set(sys.modules)\n"
            f"for path in {[str(p) for p in plans]!r}:\n"
            "    with open(path, 'rb') as f:\n"
            "        pickle.load(f)\n"
            "print(sorted(set(sys.modules) - before))\n")
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
        assert done.stdout.strip() == "[]", done.stdout
    finally:
        session.close()


def test_the_workers_import_path_holds_no_archive_without_python(spark):
    """Spark puts its core jar (no Python in it) on the workers' path; each task's importlib.invalidate_caches()
    would read its 6,000-entry directory again (30-80 ms a task). The daemon takes it off."""

    def archives(_: object) -> list[str]:
        import sys
        import zipimport

        return sorted(k for k, v in sys.path_importer_cache.items() if isinstance(v, zipimport.zipimporter))

    assert spark.sparkContext.parallelize(range(2), 2).map(archives).collect() == [[], []]


def test_the_workers_garbage_collector_skips_what_the_daemon_loaded(spark):
    """PySpark's daemon collects garbage in a worker after each task; over the kernels' ~170,000 objects that took
    60-80 ms, in front of the next micro-batch's task. The daemon freezes them before it forks: a worker's
    collections leave them out."""

    def frozen(_: object) -> int:
        import gc

        return gc.get_freeze_count()

    assert all(n > 100_000 for n in spark.sparkContext.parallelize(range(2), 2).map(frozen).collect())


def test_a_querys_source_runner_runs_in_a_process_the_zygote_forks(spark, tmp_path):
    """Spark starts a new interpreter for each streaming query's source runner, and for the daemon of each kind of
    its planners; Headwater's source has them started through the launcher, whose process waits while the zygote's
    runs in its place (a refused one would have become the interpreter itself), and which Spark's stop ends."""
    import contextlib
    import threading
    import time

    import psutil

    from headwater.spark.fused import SOURCE_NAME, register_source
    from headwater.spark.zygote import LAUNCHER
    from headwater.storage.stream_table import StreamTable
    from headwater.types import Schema

    def stand_ins(module: str = "pyspark.sql.streaming.python_streaming_source_runner") -> set[int]:
        """This driver's (its JVM's children; tests in other processes run their own)."""
        found = set()
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                line = " ".join(proc.cmdline())
                if LAUNCHER in line and f"-m {module}" in line:
                    found.add(proc.pid)
        return found

    before = stand_ins()
    table = StreamTable.create(tmp_path / "input", Schema.parse({"x": "long"}))
    register_source(spark)
    ran = threading.Event()
    query = (spark.readStream.format(SOURCE_NAME).option("input", str(table.path)).load()
             .writeStream.foreachBatch(lambda _df, _batch: ran.set())
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(processingTime="10 milliseconds").start())
    try:
        assert ran.wait(120), query.exception()
        mine = stand_ins() - before
        assert len(mine) == 1
        assert stand_ins("pyspark.daemon")  # the planners' (they stay for the session)
    finally:
        query.stop()
    deadline = time.monotonic() + 60
    while stand_ins() & mine:
        assert time.monotonic() < deadline, "the source runner's stand-in outlived its query"
        time.sleep(0.05)
