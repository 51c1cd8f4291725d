"""The Spark home Headwater starts Spark from: the pyspark wheel's programs and jars, without its ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of every Python process it starts:
the daemon that forks the task workers, each streaming query's source runner, each read planner. Python keeps no
bytecode for modules imported from a zip, so each of those processes compiled PySpark's modules from source before
doing anything: a query took 1.4 s from ``start()`` to its first trigger, 0.46 s from this home (measured on the
2-core machine, three queries each after the session's first). This home holds links to the wheel's ``bin/``,
``sbin/`` and jars, and no ``python/``, so those processes import the installed pyspark from ``site-packages``,
the very same files, with their bytecode cache.

Its ``jars/`` links to each of the wheel's jars and holds one more, :data:`JAR`: Headwater's Java classes
(``LocalFileSystem.java`` beside this module), compiled as the home is made by Janino, the Java compiler among
Spark's own jars (a JDK's ``javac`` is not needed). Where that cannot be done (no Java yet), the home has no
:data:`JAR` and Spark runs without those classes.

A ``SPARK_HOME`` set to another Spark installation is left alone: that is the user's choice of Spark.

>>> home = spark_home()
>>> (home / "jars" / JAR).is_file() and not (home / "python" / "lib" / "pyspark.zip").exists()
True
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import version
from pathlib import Path

from headwater.errors import ConfigurationError

HOMES = Path(sys.prefix) / "share" / "headwater"
"""Beside the installation whose pyspark wheel they link to (as the class archives are)."""

LINKED = ("bin", "sbin")  # what Spark's launch scripts and the standalone cluster's processes use, with jars/

JAR = "headwater-spark.jar"
"""Headwater's Java classes, in the home's ``jars/``: on the class path of every JVM started from the home."""

JAVA_SOURCES = (Path(__file__).with_name("LocalFileSystem.java"),)
COMPILER = "org.codehaus.commons.compiler.samples.CompilerDemo"  # Janino's command-line javac

log = logging.getLogger(__name__)


def wheel_home() -> Path:
    """The installed pyspark wheel's directory, which is a Spark home of its own (with ``pyspark.zip``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError("pyspark is not installed: run the README's set-up command")
    return Path(spec.submodule_search_locations[0]).resolve()


def spark_home() -> Path:
    """Where Spark is started from: ``SPARK_HOME`` when it names another Spark installation, else a home made once
    per installed wheel under :data:`HOMES` (the wheel's own directory where that cannot be written)."""
    wheel = wheel_home()
    chosen = os.environ.get("SPARK_HOME")
    if chosen and (where := Path(chosen).resolve()) != wheel and not where.is_relative_to(HOMES.resolve()):
        return Path(chosen)
    # a new wheel, or new Java sources, get a new home
    digest = hashlib.sha256(b"\0".join([str(wheel).encode(), *(p.read_bytes() for p in JAVA_SOURCES)])).hexdigest()[:12]
    home = HOMES / f"spark-home-{version('pyspark')}-{digest}"
    if home.is_dir():
        return home
    try:
        return _make(home, wheel)
    except OSError:  # a read-only installation: the wheel's home works, its Python processes start slower
        return wheel


def _make(home: Path, wheel: Path) -> Path:
    """Create ``home`` whole (links made in a scratch directory, then renamed into place): a process starting
    Spark at the same moment finds either no home or a complete one."""
    home.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    try:
        scratch.chmod(0o755)  # every user of the installation starts Spark from it
        for name in LINKED:
            if (wheel / name).is_dir():
                (scratch / name).symlink_to(wheel / name, target_is_directory=True)
        jars = scratch / "jars"
        jars.mkdir()
        for entry in (wheel / "jars").iterdir():
            (jars / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
        build_jar(wheel / "jars", jars / JAR)
        try:
            scratch.rename(home)
        except OSError:
            if not home.is_dir():  # not another process's home made first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return home


def build_jar(spark_jars: Path, target: Path) -> bool:
    """Compile :data:`JAVA_SOURCES` against ``spark_jars`` into the jar ``target``; False (and a warning) where it
    cannot be done."""
    from headwater.spark.class_archive import java_binary

    java = java_binary()
    if java is None:
        log.warning("no Java to compile Headwater's classes for Spark with: Spark runs without them")
        return False
    jars = sorted(str(p) for p in spark_jars.glob("*.jar"))
    janino = [j for j in jars if Path(j).name.startswith(("janino-", "commons-compiler-"))]
    with tempfile.TemporaryDirectory() as out:
        try:
            done = subprocess.run([str(java), "-cp", os.pathsep.join(janino), COMPILER, "-d", out,
                                   "-classpath", os.pathsep.join(jars), *map(str, JAVA_SOURCES)],
                                  capture_output=True, text=True, timeout=300)
            said = done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            done, said = None, "the compiler ran for more than 300 s"
        classes = sorted(Path(out).rglob("*.class"))
        if done is None or done.returncode != 0 or not classes:
            log.warning("Headwater's classes for Spark did not compile (Spark runs without them): %s", said[-2000:])
            return False
        with zipfile.ZipFile(target, "w") as jar:
            for path in classes:
                jar.write(path, path.relative_to(out).as_posix())
    return True
