"""A master with its worker in this process (what ``hw.connect(path)`` and ``headwater master`` run)."""

from __future__ import annotations

from pathlib import Path

from headwater.durations import parse_duration
from headwater.errors import ConfigurationError, clip
from headwater.runtime.master import Master
from headwater.runtime.protocol import WorkerPort
from headwater.runtime.worker import InProcessWorkerPort, Worker
from headwater.sql.limits import SqlLimits
from headwater.tuning import DRIVER_BATCH_ROWS, TRIGGER_INTERVAL


def embedded_master(data_dir: Path, *, start_spark: bool = True, spark_master: str = "local[*]",
                    trigger_interval: str = TRIGGER_INTERVAL, metadata_url: str | None = None,
                    worker: WorkerPort | None = None, driver_batch_rows: int = DRIVER_BATCH_ROWS,
                    directory_lock: bool = True, sql_limits: SqlLimits | None = None,
                    driver_host: str = "127.0.0.1", bind_address: str | None = None) -> Master:
    """A master on ``data_dir`` (what ``connect(path)`` and ``headwater master`` run), with its worker in this
    process unless ``worker`` is a port to one elsewhere; graphs that were running resume in the background
    unless ``start_spark`` is False. ``directory_lock=False``: for masters kept apart by a lease instead.
    ``driver_host``, ``bind_address``: the in-process worker's Spark driver's (``build_spark``)."""
    if data_dir.exists() and not data_dir.is_dir():
        raise ConfigurationError(f"data directory {clip(str(data_dir), 300)} is a file, not a directory; pass a "
                                 "directory (it is created if missing), e.g. hw.connect('./headwater-data')")
    if worker is None:
        interval = parse_duration(trigger_interval, where="connect(trigger_interval=...)")
        if isinstance(driver_batch_rows, bool) or not isinstance(driver_batch_rows, int) or driver_batch_rows < 0:
            raise ConfigurationError(f"connect(driver_batch_rows={driver_batch_rows!r}): expected an integer >= 0")
        worker = InProcessWorkerPort(Worker(data_dir, spark_master=spark_master, trigger_interval=interval,
                                            driver_batch_rows=driver_batch_rows, driver_host=driver_host,
                                            bind_address=bind_address))
    if sql_limits is not None and not isinstance(sql_limits, SqlLimits):
        raise ConfigurationError(f"connect(sql_limits={clip(sql_limits)}): expected headwater.SqlLimits(...)")
    master = Master(data_dir, worker=worker, metadata_url=metadata_url, directory_lock=directory_lock,
                    sql_limits=sql_limits)
    if start_spark:
        try:
            master.recover()
        except BaseException:
            master.close()  # release the data directory: this session never existed
            raise
    return master
