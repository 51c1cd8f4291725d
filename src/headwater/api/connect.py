"""``connect()``: a session on an embedded Headwater or on a master.

Kept apart from :mod:`headwater.api.session` so that it starts what a local Spark will need before it imports the
data plane: those imports take a second on one core, and Spark's Python daemon can load its kernels meanwhile
(:mod:`headwater.spark.zygote`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from headwater.errors import ConfigurationError, clip, extra_needed
from headwater.spark import zygote
from headwater.storage.shared_storage import storage_path
from headwater.tuning import DRIVER_BATCH_ROWS, TRIGGER_INTERVAL

if TYPE_CHECKING:
    from headwater.api.session import Session
    from headwater.sql.limits import SqlLimits


def default_data_dir() -> Path:
    """``$HEADWATER_HOME``, or ``~/.headwater``."""
    return storage_path(os.environ.get("HEADWATER_HOME", Path.home() / ".headwater"), where="HEADWATER_HOME")


def connect(data_dir: str | Path | list[str] | None = None, *, user: str | None = None, password: str | None = None,
            start_spark: bool = True, spark_master: str = "local[*]", trigger_interval: str = TRIGGER_INTERVAL,
            client_id: str | None = None, driver_batch_rows: int = DRIVER_BATCH_ROWS,
            sql_limits: SqlLimits | None = None) -> Session:
    """Start an embedded Headwater (master + worker + local Spark) on ``data_dir``, or connect to a master.

    Embedded (a path, or nothing: ``$HEADWATER_HOME`` or ``~/.headwater``): graphs that were running
    when the previous session on the same directory stopped are resumed from their checkpoints.
    ``start_spark=False`` gives a session that can declare and explain graphs without a JVM (Spark
    then starts on first need). One session at a time holds a data directory: a second one (in this
    or another process) raises :class:`DataDirectoryInUseError` until the first is closed or its
    process ends.

    Service mode (an ``http://`` or ``https://`` URL of ``headwater master``, with ``user`` and
    ``password``): the same API, served by the master's process; graphs keep running after this
    session closes, and any number of sessions connect at once. Several URLs (a list, or one string
    separated by commas) name an active master and its standbys: calls follow whichever is active.

    ``driver_batch_rows``: a micro-batch with at most this many input rows (default 20,000) runs in the
    driver instead of as Spark tasks, which saves Spark's ~150 ms job launch (``0``: always Spark tasks).

    ``sql_limits`` (embedded): the rows, result bytes and seconds one :meth:`Session.sql` query may take
    (:class:`~headwater.sql.limits.SqlLimits`; by default 1,000,000 rows, 256 MiB, 300 s, or the
    ``HEADWATER_SQL_*`` environment variables). A remote session gets the master's limits.

    ``client_id`` names the writer for idempotent appends (``append(..., sequence=n)``): a
    restarted client that passes the same id resumes its sequence. 1 to 64 letters, digits,
    ``_``, ``.`` or ``-``; by default a random id per session.

    >>> import headwater as hw, tempfile
    >>> s = hw.connect(tempfile.mkdtemp(), start_spark=False)
    >>> s.use_catalog("demo")
    >>> s.close()
    """
    urls = [u.strip() for u in data_dir.split(",")] if isinstance(data_dir, str) else \
        list(data_dir) if isinstance(data_dir, list | tuple) else None
    if urls and all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        with extra_needed("service", "connecting to a master"):
            from headwater.service.client import RemoteMaster
        from headwater.api.session import Session

        if user is None or password is None:
            raise ConfigurationError(f"connect({clip(data_dir)}): a master needs user=... and password=...")
        return Session(RemoteMaster(urls, user=user, password=password), client_id=client_id)
    if isinstance(data_dir, list | tuple):
        raise ConfigurationError(f"connect({clip(data_dir)}): a list names masters, each http://host:port")
    if start_spark:
        zygote.start(spark_master)  # Spark's Python daemon, warming up on a core the imports below leave idle
    from headwater.api.session import Session
    from headwater.runtime.embedded import embedded_master

    path = storage_path(data_dir) if data_dir is not None else default_data_dir()
    try:
        master = embedded_master(path, start_spark=start_spark, spark_master=spark_master,
                                 trigger_interval=trigger_interval, driver_batch_rows=driver_batch_rows,
                                 sql_limits=sql_limits)
    except BaseException:
        zygote.stop()  # not left loading kernels and idling for a JVM that will not come (a directory in use)
        raise
    return Session.embedded(master, client_id=client_id, data_dir=path)
