"""Waits that wake when this process commits to a table, not at their next look.

A wait is written one look at a time (``Master.catch_up``, ``Master.table_changes_steps``): a look reads a few
files, and the pause between looks grows from 10 ms to 100 ms. A caller of ``wait_until_caught_up`` therefore
learned of the micro-batch it waited for up to 100 ms after that micro-batch's commit, 50 ms on average. Commits
made in this process now fire :data:`TABLE_COMMITS`: a micro-batch of a graph on the in-process worker, and an
append through this master. The fire ends every pause at once, in threads (:meth:`Pulse.wait`) and on event loops
(:meth:`Pulse.wait_async`). A master also fires it when one of its worker processes reports a commit
(:mod:`headwater.service.pool` asks each for its next one). An append by another client's process straight to
the storage is still seen at the next look.

A waiter reads :attr:`Pulse.beats` before it looks and waits ``since`` that count. A commit that lands between
its look and its wait then ends the wait at once instead of being missed. A woken waiter still lets half its pause
pass after its last look began, 50 ms at most (:func:`next_look`, ``not_before``). A process that commits all
the time then at most doubles a wait's looks (20 a second at the longest pause), rather than turning each wait
into a loop of looks:

>>> pulse = Pulse()
>>> seen = pulse.beats
>>> pulse.fire()             # a commit after the look
>>> pulse.wait(60.0, since=seen)
True
>>> pulse.wait(0.0)          # nothing since now
False
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

MAX_FLOOR_S = 0.05
"""The longest a woken wait still waits after its last look began: half the longest pause (100 ms)."""


class Pulse:
    """Counts fires and wakes whoever waits for the next one."""

    def __init__(self) -> None:
        self._fired = threading.Condition()
        self.beats = 0  # how many times it has fired
        self._loops: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def fire(self) -> None:
        with self._fired:
            self.beats += 1
            self._fired.notify_all()
            waiting, self._loops = self._loops, []
        for loop, future in waiting:
            with contextlib.suppress(RuntimeError):  # that loop has closed meanwhile
                loop.call_soon_threadsafe(_resolve, future)

    def wait(self, timeout: float, since: int | None = None, not_before: float = 0.0) -> bool:
        """Block until a fire after ``since`` (a :attr:`beats` count; None: now), at most ``timeout`` seconds.
        Woken, it still waits until ``not_before`` (a ``time.monotonic()`` instant), within the same timeout.
        Returns whether it fired."""
        deadline = time.monotonic() + timeout
        with self._fired:
            start = self.beats if since is None else since
            fired = self._fired.wait_for(lambda: self.beats != start, timeout)
        if fired and (rest := min(not_before, deadline) - time.monotonic()) > 0:
            time.sleep(rest)  # the waiter's floor between two looks
        return fired

    async def wait_async(self, timeout: float, since: int | None = None, not_before: float = 0.0) -> bool:
        """:meth:`wait` on the running event loop, which it leaves free meanwhile."""
        deadline = time.monotonic() + timeout
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._fired:
            fired = since is not None and self.beats != since
            if not fired:
                self._loops.append(entry)
        if not fired:
            try:
                fired = bool((await asyncio.wait({future}, timeout=timeout))[0])
            finally:
                with self._fired, contextlib.suppress(ValueError):  # a fire has already taken it off
                    self._loops.remove(entry)
        if fired and (rest := min(not_before, deadline) - time.monotonic()) > 0:
            await asyncio.sleep(rest)
        return fired


def next_look(looked: float, pause: float) -> float:
    """The earliest instant (``time.monotonic()``) a woken wait looks again, its last look having begun at
    ``looked`` before a ``pause``: half the pause later, at most :data:`MAX_FLOOR_S`."""
    return looked + min(pause / 2, MAX_FLOOR_S)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # a waiter cancelled meanwhile (its client went away)
        future.set_result(None)


TABLE_COMMITS = Pulse()
"""Fired after a micro-batch of this process's worker has committed (its job record written), after an append
through this process's master, and when a worker process of this master reports a commit."""
