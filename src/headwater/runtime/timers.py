"""timer_engine's timers: ``func(*args)`` every ``interval``, in the worker process that runs the graph.

**Where.** The worker that runs a graph starts one thread per timer engine once the graph's queries run, and
stops it with the graph (a stop, a drop, a warm-up or state edit that restarts the graph, the worker's end).
The function was loaded there with the plan (``from_json(load_callables=True)``); the master never loads it.
One timer per engine, whatever the engine's ``parallelize`` count: the timer does not see the rows.

**When.** First one interval after the start, then on a fixed schedule counted from the start. Runs never
overlap: a run longer than the interval delays the next one, and ticks missed meanwhile are skipped, not made
up. A run shares the driver process (and its GIL) with the graph's small micro-batches: keep it short.

**Pause and resume** (Orca's ``useOrcaStreamEngine(name, stopTimerEngine)`` / ``resumeTimerEngine``):
``session.stop_timer_engine(name)`` / ``session.resume_timer_engine(name)``, carried as
``control_engine(engine, {"op": "stop_timer_engine"})`` to the worker. The flag is kept in
``<checkpoints>/timers/<engine>.json`` beside the counters, so a paused timer stays paused across a stop and
start, a restart and a move to another worker.

**Failures.** A run that raises is counted (``timer_failures``, ``last_error`` in ``stream_engine_stat``) and
the timer goes on; nothing of it reaches the graph's queries or the worker.

**Delivery.** Ticks are wall-clock events, recorded nowhere as done, so they are *at most once per scheduled
tick of one placement*, not exactly-once and not at-least-once: ticks fall out while the graph is stopped,
failing over or restarting, and are not made up. A worker whose placement was fenced (the graph moved) checks
the fence before each run and stops its timer there, so after a failover the old and the new worker may both
run for at most one interval. Make the function idempotent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headwater.dataplane.fence import FencedError
from headwater.dataplane.timers import read_status, write_status
from headwater.errors import shorten

log = logging.getLogger(__name__)

STOP_WAIT_S = 5.0  # a stop waits this long for a run in progress; a run that hangs is left to finish alone


class Timer:
    """Runs ``call()`` every ``interval`` seconds in a thread of its own (see the module's docstring).

    >>> import tempfile
    >>> calls = []
    >>> timer = Timer("t", 0.1, lambda: calls.append(1), Path(tempfile.mkdtemp()) / "t.json")
    >>> timer.pause()
    >>> timer.status()["paused"]
    True
    """

    def __init__(self, engine: str, interval: float, call: Callable[[], Any], path: Path, *,
                 fence: Callable[[], None] | None = None) -> None:
        self.engine, self.interval, self.call, self.path, self.fence = engine, interval, call, path, fence
        self._status = read_status(path)
        self._skipped = 0  # ticks passed while paused, since this start (not saved)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"headwater-timer-{self.engine}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop ticking; waits up to :data:`STOP_WAIT_S` for a run in progress."""
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S)

    def pause(self) -> None:
        self._set_paused(True)

    def resume(self) -> None:
        self._set_paused(False)

    def status(self) -> dict[str, Any]:
        """The saved status (:func:`read_status`) and ``skipped``: ticks passed while paused since this start."""
        with self._lock:
            return {**self._status, "skipped": self._skipped}

    def _set_paused(self, paused: bool) -> None:
        with self._lock:
            self._status["paused"] = paused
            write_status(self.path, self._status)

    def _run(self) -> None:
        next_at = time.monotonic() + self.interval
        while not self._stopped.wait(max(0.0, next_at - time.monotonic())):  # the schedule, not a synchronisation
            now = time.monotonic()
            next_at += self.interval
            if next_at <= now:  # a run outlasted the interval: skip the ticks missed, do not make them up
                next_at = now + self.interval
            with self._lock:
                paused = self._status["paused"]
                self._skipped += paused
            if paused:
                continue
            if self.fence is not None:
                try:
                    self.fence()
                except FencedError as exc:
                    log.warning("timer engine %s stops: %s", self.engine, exc)
                    return
            error = ""
            try:
                self.call()
            except BaseException as exc:  # the user's function: count it, keep the timer (and the worker)
                error = shorten(f"{type(exc).__name__}: {exc}", 2000)
                log.warning("timer engine %s: its function raised %s", self.engine, error)
            with self._lock:
                self._status["runs"] += 1
                self._status["last_run"] = time.time()
                if error:
                    self._status["failures"] += 1
                    self._status["last_error"] = error
                try:
                    write_status(self.path, self._status)
                except OSError as exc:  # a full or gone disk: the counters wait for the next run
                    log.warning("timer engine %s: cannot save its counters: %s", self.engine, exc)
