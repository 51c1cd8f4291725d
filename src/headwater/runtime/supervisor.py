"""What happens when a graph's query fails (Orca A.5 and A.7's ``consecutiveFailures``).

The master asks its workers every ``every`` seconds how their graphs are (:class:`Health`). A graph whose
query stopped with an error goes to ``error`` with that error as its reason and is restarted from its
checkpoints (``building`` → ``running``; a ``RECOVER`` event). A graph left in ``error`` because its worker
could not be reached is started again every ``RETRY_ERROR_S`` seconds, without counting as a failure. A graph that fails again before committing
a micro-batch extends its streak of failures; once the streak exceeds its checkpoint configuration's
``consecutive_failures`` it goes to ``failed`` and stays stopped until the user resubmits it. A micro-batch
committed after a restart ends the streak. A graph that failed because the data directory's file system is full
is no failure of the graph: it waits for space, uncounted, and starts again by itself (``runtime/disk_wait.py``).

``wait_until_caught_up`` reports a failure it meets through the same :meth:`Supervisor.check`, so a
failure is handled once, in one place, whoever notices it first.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from headwater.errors import ExecutionError, shorten
from headwater.runtime.disk_wait import DiskWaits
from headwater.runtime.events import EventType
from headwater.runtime.lifecycle import GraphStatus
from headwater.runtime.protocol import Health, IsRunning, StopGraph

if TYPE_CHECKING:
    from headwater.runtime.supervised import SupervisedMaster

log = logging.getLogger(__name__)

RETRY_ERROR_S = 5.0  # how often a graph left in error by an unreachable worker is tried again


class Supervisor:
    """Restarts failed graphs from their checkpoints, and fails them after too many failures in a row."""

    def __init__(self, master: SupervisedMaster, *, every: float = 1.0) -> None:
        # a weak reference, as the compactor's: an unclosed master is still freed (and its directory unlocked)
        self._master = weakref.ref(master)
        self.every = every
        self.streaks: dict[str, int] = {}  # graph -> failures in a row (no micro-batch committed in between)
        self.restarts: dict[str, int] = {}  # graph -> restarts from its checkpoints since this master started
        self._retried: dict[str, float] = {}  # graph in error -> when its last restart was tried
        self.disk_waits = DiskWaits()  # graphs that failed for want of disk space: restarted once there is room
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="headwater-supervisor", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every) and self._master() is not None:
            try:
                self.check()
            except Exception:  # a worker that cannot answer now is the heartbeats' business, not a crash here
                log.debug("supervision round failed", exc_info=True)

    def check(self) -> None:
        """Handle every failed graph the workers report (once each: a restarted graph no longer reports it)."""
        master = self._master()
        if master is None:
            return
        with self._lock:
            for fqn, health in master.worker.request(Health()).items():
                if health["failed"]:
                    self._on_failure(master, fqn, str(health["failed"]), int(health["batches"]))
            for rec, reason in self.disk_waits.retry_due(master):
                self._fail_or_restart(master, rec, reason, batches=0)
            now = time.monotonic()
            for rec in master.store.list_graphs():
                # left in error by a start whose worker could not be reached: retry, without counting it
                if rec.status == GraphStatus.ERROR and not master.is_recovering(rec.fqn) \
                        and rec.fqn not in self.disk_waits \
                        and now - self._retried.get(rec.fqn, 0.0) >= RETRY_ERROR_S:
                    self._retried[rec.fqn] = now
                    self.restarts[rec.fqn] = self.restarts.get(rec.fqn, 0) + 1
                    try:
                        with master.events.record(EventType.RECOVER, f"{rec.fqn}: {shorten(rec.reason, 500)}"):
                            master.restart(rec)
                    except ExecutionError as exc:  # started, then failed: a failure like any other
                        self._fail_or_restart(master, rec, str(exc), batches=0)

    def _on_failure(self, master: SupervisedMaster, fqn: str, reason: str, batches: int) -> None:
        rec = master.store.active_graph(fqn)
        if rec is None or rec.status != GraphStatus.RUNNING or master.is_recovering(fqn):
            return  # stopped, dropped or being moved meanwhile: whoever changed it owns it now
        if master.worker.request(IsRunning(fqn)):
            return  # restarted meanwhile
        if fqn in self.disk_waits:
            return  # waiting for disk space already (its status could not be stored on the full disk)
        if self.disk_waits.is_full(master, reason):
            self.disk_waits.begin(master, rec, reason)  # not the graph's failure: it waits for room, uncounted
            return
        self._fail_or_restart(master, rec, reason, batches)

    def _fail_or_restart(self, master: SupervisedMaster, rec: Any, reason: str, batches: int) -> None:
        """Count the failure; restart the graph from its checkpoints, or fail it once the streak is too long."""
        fqn = rec.fqn
        streak = 0 if batches else self.streaks.get(fqn, 0)
        allowed = master.checkpoint_settings(fqn).consecutive_failures
        while True:
            streak += 1
            self.streaks[fqn] = streak
            if streak > allowed:
                master.worker.request(StopGraph(fqn))
                again = "again after a restart from its checkpoints" if streak > 1 else "(no restart allowed)"
                master.set_status(rec, GraphStatus.FAILED, f"failed {again}; {streak} failure(s) in a row, "
                                   f"consecutive_failures={allowed}: {shorten(reason, 600)}", action="run")
                log.error("stream graph %s failed %d time(s) in a row: %s", fqn, streak, reason)
                return
            master.set_status(rec, GraphStatus.ERROR, shorten(reason, 600), action="run")
            log.warning("stream graph %s failed, restarting it from its checkpoints: %s", fqn, reason)
            self.restarts[fqn] = self.restarts.get(fqn, 0) + 1
            try:
                with master.events.record(EventType.RECOVER, f"{fqn}: {shorten(reason, 500)}", retries=streak - 1):
                    master.restart(rec)
                return
            except ExecutionError as exc:  # it failed again while starting (its first batch replays the failure)
                reason = str(exc)
                if self.disk_waits.is_full(master, reason):
                    self.disk_waits.begin(master, master.store.active_graph(fqn) or rec, reason)
                    return

    def wait_for_space(self, rec: Any, reason: str) -> None:
        """Put a graph that could not start for want of disk space to wait for room (uncounted)."""
        master = self._master()
        if master is not None:
            with self._lock:
                self.disk_waits.begin(master, rec, reason)

    def forget(self, fqn: str) -> Any:
        """A graph stopped, resubmitted or dropped by the user starts a new streak (and waits for space no more)."""
        master = self._master()
        if master is not None:
            with self._lock:
                self.disk_waits.forget(master, fqn)
        return self.streaks.pop(fqn, None)
