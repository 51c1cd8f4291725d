"""Process-lifetime file locks: one session per data directory, one owner per scratch directory.

Locks are open file description locks (``F_OFD_SETLK``) on the whole file: exclusive between two opens,
in one process or in two, and released by the kernel when the holder dies (``kill -9`` included), so a
stale lock never needs breaking. Unlike ``flock``, which NFS emulates with per-process POSIX locks, they
keep that meaning on a network file system and reach every host that mounts it
(:mod:`headwater.storage.shared_storage` checks it). The holder writes its pid into the file for error
messages only; the lock itself is the kernel's.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> lock = FileLock.try_acquire(d / ".lock")
>>> FileLock.try_acquire(d / ".lock") is None  # held, even within this process
True
>>> lock.release()
>>> FileLock.try_acquire(d / ".lock") is not None
True
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path

from headwater.errors import DataDirectoryInUseError
from headwater.faults import fault_point

LOCK_NAME = ".lock"
# struct flock: l_type, l_whence, l_start, l_len (0: to the end of the file), l_pid (0 for OFD locks), padding
_WHOLE_FILE_WRITE_LOCK = struct.pack("@hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)


def _lock(fd: int, *, wait: bool) -> bool:
    """Take the write lock of the open file ``fd`` (waiting for it if ``wait``); False if another open holds it."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK, _WHOLE_FILE_WRITE_LOCK)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class FileLock:
    """An exclusive lock held on ``path`` until :meth:`release` or the process ends."""

    def __init__(self, path: Path, fd: int | None) -> None:  # None: not held (release does nothing)
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def try_acquire(cls, path: Path, *, wait: bool = False) -> FileLock | None:
        """Lock ``path`` (created if missing); None if another holder has it, unless ``wait``: then wait for it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            held = _lock(fd, wait=wait)
        except BaseException:
            os.close(fd)
            raise
        if not held:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Release the lock (idempotent); the file stays, it is reused by the next holder."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor releases the lock

    def __del__(self) -> None:
        self.release()


def holder_pid(path: Path) -> str:
    """The pid the current holder wrote into ``path`` ("unknown" if unreadable)."""
    with contextlib.suppress(OSError, ValueError):
        return str(int(path.read_text().strip()))
    return "unknown"


def lock_data_dir(data_dir: Path) -> FileLock:
    """Take ``<data_dir>/.lock`` for this session, or explain who holds it."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # tables, metadata, checkpoints: the owner's only
    path = data_dir / LOCK_NAME
    lock = FileLock.try_acquire(path)
    if lock is None:
        pid = holder_pid(path)
        who = "this process" if pid == str(os.getpid()) else f"process {pid}"
        raise DataDirectoryInUseError(
            f"data directory {data_dir} is in use by another Headwater session ({who} holds {path}); "
            "close that session first (session.close()) or connect to another directory"
        )
    return lock


GUARD_NAME = ".guard"


@contextlib.contextmanager
def _guarded(root: Path) -> Iterator[None]:
    """Hold ``root/.guard`` (waiting for it): creating a locked directory and removing unlocked ones take it, so
    that another process never removes a directory between its creation and its lock."""
    root.mkdir(parents=True, exist_ok=True)
    guard = FileLock.try_acquire(root / GUARD_NAME, wait=True)
    assert guard is not None  # waited for
    try:
        yield
    finally:
        guard.release()


def create_locked_dir(root: Path, name: str) -> FileLock:
    """Create ``root/name`` and take its ``.lock`` for this process (:func:`remove_unlocked_dirs` spares it).

    >>> import tempfile
    >>> lock = create_locked_dir(Path(tempfile.mkdtemp()), "mine")
    >>> remove_unlocked_dirs(lock.path.parent.parent), lock.path.parent.is_dir()
    (0, True)
    """
    with _guarded(root):
        path = root / name
        path.mkdir()
        fault_point("scratch.after_mkdir")
        lock = FileLock.try_acquire(path / LOCK_NAME)
    assert lock is not None, f"{path} was just created by this process"
    return lock


def remove_unlocked_dirs(root: Path) -> int:
    """Remove every subdirectory of ``root`` whose ``.lock`` is free (its owner process is dead).

    A directory made by :func:`create_locked_dir` is locked from its creation; return how many were removed.
    """
    if not root.is_dir():
        return 0
    removed = 0
    with contextlib.suppress(FileNotFoundError), _guarded(root):
        for child in root.iterdir():
            if not child.is_dir() or child.is_symlink():
                continue
            lock = FileLock.try_acquire(child / LOCK_NAME)
            if lock is None:
                continue  # a live process owns it
            try:
                shutil.rmtree(child, ignore_errors=True)
            finally:
                lock.release()
            removed += 1
    return removed
