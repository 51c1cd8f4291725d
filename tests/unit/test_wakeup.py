"""A commit in this process ends the pauses of waits at once (headwater.runtime.wakeup)."""

from __future__ import annotations

import asyncio
import threading
import time

from headwater.runtime.master import run_steps
from headwater.runtime.wakeup import MAX_FLOOR_S, TABLE_COMMITS, Pulse, next_look

LONG = 600.0  # a pause no test waits out: each returns at the fire or fails at its join's deadline


def test_a_fire_wakes_every_thread_waiting_for_it():
    pulse = Pulse()
    seen = pulse.beats
    results: list[bool] = []
    waiters = [threading.Thread(target=lambda: results.append(pulse.wait(LONG, since=seen))) for _ in range(3)]
    for w in waiters:
        w.start()
    pulse.fire()
    for w in waiters:
        w.join(60)
        assert not w.is_alive()
    assert results == [True, True, True] and pulse.beats == seen + 1


def test_a_wait_with_no_fire_ends_at_its_timeout():
    pulse = Pulse()
    assert pulse.wait(0.01) is False
    assert asyncio.run(pulse.wait_async(0.01)) is False
    assert pulse._loops == []  # the timed-out waiter left nothing behind


def test_a_fire_from_another_thread_wakes_an_event_loop_s_wait():
    pulse = Pulse()

    async def main() -> bool:
        seen = pulse.beats
        waiting = asyncio.create_task(pulse.wait_async(LONG, since=seen))
        while not pulse._loops:  # registered: the fire below must wake it, not precede it
            await asyncio.sleep(0)
        threading.Thread(target=pulse.fire).start()
        return await asyncio.wait_for(waiting, 60)

    assert asyncio.run(main()) is True
    assert pulse._loops == []


def test_a_fire_before_an_async_wait_since_an_earlier_count_ends_it_at_once():
    pulse = Pulse()
    seen = pulse.beats
    pulse.fire()
    assert asyncio.run(asyncio.wait_for(pulse.wait_async(LONG, since=seen), 60)) is True


def test_a_cancelled_async_wait_is_forgotten_and_a_later_fire_is_harmless():
    pulse = Pulse()

    async def main() -> None:
        waiting = asyncio.create_task(pulse.wait_async(LONG))
        while not pulse._loops:
            await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)

    asyncio.run(main())
    assert pulse._loops == []
    pulse.fire()


def test_a_commit_during_a_look_ends_the_pause_after_it():
    """run_steps reads the count before each look: a commit during the look is not missed by the pause."""
    looked, committed = threading.Event(), threading.Event()

    def steps():
        looked.set()
        committed.wait(60)  # the commit lands while this look is still reading
        yield LONG
        return "caught up"

    result: list[str] = []
    waiter = threading.Thread(target=lambda: result.append(run_steps(steps())))
    waiter.start()
    assert looked.wait(60)
    TABLE_COMMITS.fire()
    committed.set()
    waiter.join(60)
    assert not waiter.is_alive() and result == ["caught up"]


def test_a_woken_wait_still_keeps_its_floor_between_two_looks():
    """However often this process commits, a woken wait lets its floor (half its pause) pass between two looks."""
    pulse = Pulse()
    seen = pulse.beats
    pulse.fire()
    floor = time.monotonic() + 0.05
    assert pulse.wait(LONG, since=seen, not_before=floor) is True
    assert time.monotonic() >= floor
    floor = time.monotonic() + 0.05
    assert asyncio.run(pulse.wait_async(LONG, since=seen, not_before=floor)) is True
    assert time.monotonic() >= floor


def test_a_woken_wait_looks_again_half_its_pause_after_its_last_look_at_most_50_ms():
    assert next_look(100.0, 0.01) == 100.005
    assert next_look(100.0, 0.1) == 100.05
    assert next_look(100.0, LONG) == 100.0 + MAX_FLOOR_S == 100.05
