"""Background compaction of stream tables: many small micro-batch files become few large ones.

Every ``interval`` the compactor looks at each table of the catalog and compacts those whose snapshot
holds more than ``min_files`` data files (:meth:`StreamTable.compact`: stream readers' replay is not
affected, no file is deleted), then applies the table's retention, if it has one
(:meth:`StreamTable.expire`: the versions it no longer keeps, and the files only they named, go). It runs in the master's process, where every writer of a table takes the
same per-table lock as the compaction, so it never interleaves with an append or a micro-batch commit.

>>> import tempfile, pyarrow as pa
>>> from pathlib import Path
>>> from headwater.storage.stream_table import StreamTable
>>> from headwater.types import Schema
>>> t = StreamTable.create(Path(tempfile.mkdtemp()) / "t", Schema.parse({"x": "long"}))
>>> for i in range(5):
...     _ = t.append(pa.table({"x": [i]}))
>>> Compactor(lambda: [t], min_files=4).run_once()
1
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from datetime import timedelta

from headwater.storage.stream_table import StreamTable

log = logging.getLogger(__name__)


class Compactor:
    """Compacts tables with too many files, once (``run_once``) or every ``interval`` in a thread."""

    def __init__(self, tables: Callable[[], Iterable[StreamTable]], *, min_files: int = 64,
                 interval: timedelta = timedelta(minutes=5)) -> None:
        self.tables, self.min_files, self.interval = tables, min_files, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> int:
        """Compact every table over the threshold, then expire what each table's retention no longer keeps;
        return how many tables were compacted."""
        done = 0
        for table in self.tables():
            try:
                if table.file_count() > self.min_files and table.compact() is not None:
                    done += 1
                expired = table.expire()
                if expired is not None and expired.versions:
                    log.info("stream table %s: retention removed %d version(s) and %d file(s), %d bytes",
                             table.name, expired.versions, expired.files, expired.bytes)
            except Exception:  # a table dropped meanwhile, a full disk: the next round tries again
                log.warning("compaction of stream table %s failed", table.name, exc_info=True)
        return done

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start compacting every ``interval`` in a thread (once; later calls do nothing)."""
        if self._thread is None and not self._stop.is_set():
            self._thread = threading.Thread(target=self._loop, name="headwater-compactor", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval.total_seconds()):
            self.run_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
