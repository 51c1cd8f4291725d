"""Scratch directories of several processes in one root: a new one is never removed before its lock is taken."""

from __future__ import annotations

import multiprocessing

from headwater.storage.locks import create_locked_dir, remove_unlocked_dirs


def _clean_until(root, stop) -> None:
    while not stop.is_set():
        remove_unlocked_dirs(root)


def test_a_directory_being_created_survives_another_process_removing_unlocked_ones(tmp_path):
    # seen in CI (05:25, 2026-11-27): two workers of one data directory started Spark at once, and one removed
    # the other's scratch directory between its mkdir and its lock
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    cleaner = context.Process(target=_clean_until, args=(tmp_path, stop))
    cleaner.start()
    try:
        locks = [create_locked_dir(tmp_path, f"d{i}") for i in range(300)]
    finally:
        stop.set()
        cleaner.join(timeout=60)
    assert all(lock.held and lock.path.parent.is_dir() for lock in locks)
    for lock in locks[::2]:
        lock.release()
    assert remove_unlocked_dirs(tmp_path) == 150
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == sorted(f"d{i}" for i in range(1, 300, 2))


def test_a_directory_is_created_and_locked_under_the_guard_that_removal_takes(tmp_path):
    """Deterministic: at the point between mkdir and the lock, another open of the guard (as another process
    makes) could not take it, which :func:`remove_unlocked_dirs` needs, so it cannot remove the unlocked
    directory there."""
    from headwater.faults import on_fault_point
    from headwater.storage.locks import GUARD_NAME, FileLock

    refused = []

    def try_the_guard() -> None:
        other = FileLock.try_acquire(tmp_path / GUARD_NAME)
        refused.append(other is None)
        if other is not None:
            other.release()

    with on_fault_point("scratch.after_mkdir", try_the_guard):
        lock = create_locked_dir(tmp_path, "new")
    assert refused == [True] and lock.held
