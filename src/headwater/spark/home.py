"""The Spark home Headwater starts Spark from: the pyspark wheel's programs and jars, without its ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the ``PYTHONPATH`` of every Python process it starts:
the daemon that forks the task workers, each streaming query's source runner, each read planner. Python keeps no
bytecode for modules imported from a zip, so each of those processes compiled PySpark's modules from source before
doing anything: a query took 1.4 s from ``start()`` to its first trigger, 0.46 s from this home (measured on the
2-core machine, three queries each after the session's first). This home holds links to the wheel's ``bin/``,
``jars/`` and ``sbin/`` and nothing else, so those processes import the installed pyspark from ``site-packages``,
the very same files, with their bytecode cache.

A ``SPARK_HOME`` set to another Spark installation is left alone: that is the user's choice of Spark.

>>> home = spark_home()
>>> (home / "jars").is_dir() and not (home / "python" / "lib" / "pyspark.zip").exists()
True
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

from headwater.errors import ConfigurationError

HOMES = Path(sys.prefix) / "share" / "headwater"
"""Beside the installation whose pyspark wheel they link to (as the class archives are)."""

LINKED = ("bin", "jars", "sbin")  # what Spark's launch scripts and the standalone cluster's processes use


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
    digest = hashlib.sha256(str(wheel).encode()).hexdigest()[:12]
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
        try:
            scratch.rename(home)
        except OSError:
            if not home.is_dir():  # not another process's home made first
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return home
