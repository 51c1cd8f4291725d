"""``python -m headwater.cli.class_archive [--if-missing]``: record the classes Spark's driver loads into the
archive every later driver maps (:mod:`headwater.spark.class_archive`); ``scripts/setup.sh`` runs it once."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from headwater.spark import class_archive


def record(work: Path) -> None:
    """Run one small graph end to end on a new driver, so that it loads what a graph's start and micro-batches
    need, then let its JVM exit (it writes the archive as it does)."""
    import pyarrow as pa

    import headwater as hw

    s = hw.connect(work / "data")
    s.use_catalog("archive")
    g = s.stream_graph("archive")
    (g.source("ticks", schema={"time": "timestamp", "key": "string", "price": "double"})
       .parallelize("key", 2).reactive_state_engine(key_column="key", metrics=["time", "cumsum(price) as c"])
       .sync().sink("out"))
    g.submit()
    s.append("ticks", pa.table({"time": pa.array([0, 1], pa.timestamp("us")), "key": ["a", "b"],
                                "price": [1.0, 2.0]}))
    s.wait_until_caught_up("archive", timeout=300)
    s.sql("select count(*) from out")
    s.close()
    class_archive.wait_for_driver_exit()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--record"]:
        record(Path(argv[1]))
        return
    existing = class_archive.archive_path()
    if argv[:1] == ["--if-missing"] and existing is not None and existing.is_file():
        print(f"class archive: {existing.name} is there")
        return
    started = time.perf_counter()
    written = class_archive.build([sys.executable, "-m", "headwater.cli.class_archive", "--record"])
    print(f"class archive: {written.name} ({written.stat().st_size / 2**20:.0f} MiB) written in "
          f"{time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main(sys.argv[1:])
