"""A class-data-sharing archive of what Spark's driver loads, so that its JVM starts in about half the time.

Most of a Spark driver's start is its JVM loading and verifying some twenty thousand classes from Spark's jars;
a second query pays for those its first one did not need. The JVM can instead map them, already parsed and
verified, from an archive (class data sharing, JDK 13+). ``python -m headwater.cli.class_archive``
(``scripts/setup.sh`` passes ``--if-missing``) runs one small graph on a driver started with
``-XX:ArchiveClassesAtExit``, and keeps the archive that JVM writes as it exits; every later driver maps it
(:func:`java_options`). Measured on the
2-core machine: the session ready in 3.8–4.4 s against 5.6–8.4 s, its first query in 1.8–2.2 s against
3.2–4.4 s.

An archive belongs to one Java build and one set of Spark jars, so its file name carries their fingerprint:
after an upgrade of either it is not found (the driver starts as it would without one) until setup runs again.
The JVM checks the archive itself too and ignores one that does not fit; its messages about that are off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from headwater.dataplane.files import replacing

DUMP_ENV = "HEADWATER_CLASS_ARCHIVE_DUMP"
"""Set (to a file) only in the process :func:`build` starts: its driver writes the archive there as it exits."""

OFF_ENV = "HEADWATER_CLASS_ARCHIVE"
"""``off``: start drivers without the archive (to measure what it saves)."""

ARCHIVES = Path(sys.prefix) / "share" / "headwater"
"""Beside the installation whose Java and Spark they belong to."""

QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM that cannot use an archive says so on stdout; it still runs


def java_binary() -> Path | None:
    """The ``java`` that Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on the path."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_path() -> Path | None:
    """Where this Java and these Spark jars' archive is (whether or not it exists yet); None without Java."""
    java = java_binary()
    if java is None:
        return None
    from headwater.spark.home import spark_home

    # the jars as the driver's class path names them (through the Spark home it starts from)
    return ARCHIVES / f"spark-driver-{fingerprint(java, spark_home() / 'jars')}.jsa"


def fingerprint(java: Path, jars: Path) -> str:
    """What an archive was made for: the Java binary and Spark's jars (paths, sizes, modification times)."""
    digest = hashlib.sha256()
    for path in [java, *sorted(jars.glob("*.jar"))]:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def java_options() -> str:
    """The driver JVM's options for the archive: map it when it exists, write it when :func:`build` asks."""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {QUIET}"
    if os.environ.get(OFF_ENV) == "off":
        return ""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path is not None and path.is_file() else ""


def build(record: list[str], timeout: float = 600.0) -> Path:
    """Write the archive (replacing one of the same fingerprint; removing those of other fingerprints): run
    ``record + [work directory]``, a command that starts a driver, runs a small graph on it and waits for its JVM
    to exit (:mod:`headwater.cli.class_archive`), with :data:`DUMP_ENV` set."""
    path = archive_path()
    if path is None:
        raise RuntimeError("no Java runtime found: the class archive is made for the Java that Spark runs on")
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="headwater-class-archive-") as work:
        dump = Path(work) / "spark.jsa"
        run = subprocess.run([*record, work], env={**os.environ, DUMP_ENV: str(dump)}, timeout=timeout,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"recording the driver's classes failed:\n{run.stderr[-3000:]}")
        if not dump.is_file():
            raise RuntimeError("the driver JVM exited without writing its class archive")
        with replacing(path) as tmp:  # a driver starting now maps the old archive or the new one, never half of one
            shutil.move(dump, tmp)
    for stale in path.parent.glob("spark-driver-*.jsa"):  # made for a Java or Spark no longer installed
        if stale != path:
            stale.unlink(missing_ok=True)
    return path


def wait_for_driver_exit(timeout: float = 300.0) -> None:
    """Close this process's driver JVM's stdin and wait for it to exit (writing the archive as it does)."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.proc.stdin.close()  # the JVM exits when its stdin closes
        gateway.proc.wait(timeout=timeout)
