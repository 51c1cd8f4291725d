"""Graphs waiting for disk space: a micro-batch that failed because the data directory's file system is full is
not a failure of the graph, so it does not consume the graph's ``consecutive_failures``.

Such a graph goes to ``error`` with a reason that starts ``waiting for disk space`` and a ``DISK_FULL`` event
that stays ``running`` while it waits. The supervisor probes the free space every round (a ``statvfs``, no
write) and starts the graph again from its checkpoints once ``HEADWATER_DISK_RESUME_MB`` are free; a restart
that meets a full disk again waits once more, each time twice as long before its next attempt (2 s, 4 s, …
up to ``MAX_BACKOFF_S``). When the graph runs again its ``DISK_FULL`` event ends ``finished``. A failure that is not
about space, met on the way, is counted as any other (:class:`~headwater.runtime.supervisor.Supervisor`).

The metadata store may sit on the same full file system (SQLite in the data directory): what this module
writes there is written when it can be, and the waits themselves are kept in memory.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.errors import ExecutionError, shorten
from headwater.runtime.events import EventType
from headwater.runtime.lifecycle import GraphStatus
from headwater.storage.disk_space import ENV_RESUME_MB, is_disk_full, mount_point

if TYPE_CHECKING:
    from headwater.runtime.supervised import SupervisedMaster

log = logging.getLogger(__name__)

WAITING = "waiting for disk space"  # how the reason of a graph waiting for room starts
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0


@dataclass
class _Wait:
    reason: str
    since: float
    next_try: float
    backoff: float = FIRST_BACKOFF_S
    attempts: int = 0  # restarts that met a full disk again
    event: int | None = None


class DiskWaits:
    """The graphs of one master that wait for disk space (held by its supervisor, called under its lock)."""

    def __init__(self) -> None:
        self._waits: dict[str, _Wait] = {}

    def __contains__(self, fqn: object) -> bool:
        return fqn in self._waits

    @staticmethod
    def is_full(master: SupervisedMaster, reason: str) -> bool:
        """Whether a failure is for want of space: its text says so, or the data directory lacks room now."""
        if is_disk_full(reason):
            return True
        try:
            return not master.disk_space.has_room(master.data_dir)
        except OSError:  # the probe itself failed: judge by the text alone
            return False

    def begin(self, master: SupervisedMaster, rec: Any, reason: str) -> None:
        """Put a graph whose micro-batch failed for want of space to wait (not counted as a failure)."""
        fqn = rec.fqn
        now = time.monotonic()
        wait = self._waits.get(fqn)
        if wait is None:
            wait = self._waits[fqn] = _Wait(reason, now, now)  # tried as soon as there is room
            fs = mount_point(master.data_dir)
            log.warning("stream graph %s waits for disk space on %s (not counted as a failure): %s", fqn, fs, reason)
            try:
                wait.event = master.store.add_event(str(EventType.DISK_FULL), shorten(
                    f"{fqn}: waiting for disk space on {fs}: {reason}", 2000), time.time())
            except Exception:  # the metadata store is on the full disk too: recorded when the graph resumes
                log.debug("could not record the DISK_FULL event of %s yet", fqn, exc_info=True)
        else:  # a restart met a full disk again: wait longer before the next attempt
            wait.attempts += 1
            wait.backoff = min(wait.backoff * 2, MAX_BACKOFF_S)
            wait.next_try = now + wait.backoff
            wait.reason = reason
        self._set_waiting(master, rec, reason)

    def retry_due(self, master: SupervisedMaster) -> list[tuple[Any, str]]:
        """Start again the waiting graphs whose time has come and that have room; return the graphs whose restart
        failed for another reason than space, with that reason (the supervisor counts those as failures)."""
        failed: list[tuple[Any, str]] = []
        now = time.monotonic()
        for fqn, wait in list(self._waits.items()):
            if now < wait.next_try:
                continue
            try:
                room = master.disk_space.has_room(master.data_dir)
            except OSError:
                room = False
            if not room:  # probing is cheap (a statvfs): look again next round
                continue
            rec = master.store.active_graph(fqn)
            if rec is None or rec.status not in (GraphStatus.ERROR, GraphStatus.RUNNING, GraphStatus.BUILDING):
                self._end(master, fqn, "failed", f"left by the user while waiting: {rec.status if rec else 'dropped'}")
                continue
            try:
                with master.events.record(EventType.RECOVER, f"{fqn}: {shorten(wait.reason, 500)}",
                                          retries=wait.attempts):
                    master.restart(rec)
            except ExecutionError as exc:
                if self.is_full(master, str(exc)):
                    self.begin(master, master.store.active_graph(fqn) or rec, str(exc))
                else:
                    self._end(master, fqn, "failed", str(exc))
                    failed.append((master.store.active_graph(fqn) or rec, str(exc)))
                continue
            log.warning("stream graph %s runs again after %.1f s waiting for disk space", fqn, now - wait.since)
            self._end(master, fqn, "finished", "")
        return failed

    def forget(self, master: SupervisedMaster, fqn: str) -> None:
        """The user stopped, resubmitted or dropped the graph: it waits no more."""
        if fqn in self._waits:
            self._end(master, fqn, "failed", "left by the user while waiting for disk space")

    def describe(self, fqn: str) -> str | None:
        """Why ``fqn`` is not running, if it waits for disk space (None if it does not)."""
        wait = self._waits.get(fqn)
        if wait is None:
            return None
        return (f"is still {WAITING} (since {time.monotonic() - wait.since:.0f} s): {shorten(wait.reason, 400)}; "
                "it resumes by itself once there is room")

    def _set_waiting(self, master: SupervisedMaster, rec: Any, reason: str) -> None:
        fs = mount_point(master.data_dir)
        text = (f"{WAITING} on {fs}: {shorten(reason, 500)}; it starts again by itself from its checkpoints once "
                f"{master.disk_space.resume} bytes are free ({ENV_RESUME_MB}), not counted against "
                "consecutive_failures")
        try:
            master.set_status(rec, GraphStatus.ERROR, text, action="run")
        except Exception:  # the metadata store is on the full disk too: the wait is kept in memory meanwhile
            log.debug("could not store that %s waits for disk space", rec.fqn, exc_info=True)

    def _end(self, master: SupervisedMaster, fqn: str, state: str, error: str) -> None:
        wait = self._waits.pop(fqn)
        try:
            event = wait.event
            if event is None:
                event = master.store.add_event(str(EventType.DISK_FULL), shorten(
                    f"{fqn}: waiting for disk space on {mount_point(master.data_dir)}: {wait.reason}", 2000),
                    time.time() - (time.monotonic() - wait.since))
            master.store.end_event(event, state, time.time(), shorten(error, 2000))
        except Exception:
            log.warning("could not record the end of %s's wait for disk space", fqn, exc_info=True)
