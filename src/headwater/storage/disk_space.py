"""Disk space: an append that cannot be stored is refused in Headwater's words, and a graph waits for room.

Threat: the data directory's file system fills (a client appends too much, a graph's output grows, another
program writes there). The operating system then answers ``OSError: [Errno 28]`` from whichever write hit the
wall — an append that may or may not have landed, a micro-batch that fails again on every restart.

- An append is checked against free space before anything is written (:meth:`DiskSpace.check_append`): it
  needs ``append_factor`` × its Arrow size plus ``reserve`` bytes free, so appends stop while the graphs and the
  metadata still have ``reserve`` bytes to work with. A write that still meets ENOSPC/EDQUOT (the check is a
  forecast; another writer may take the room meanwhile) is refused the same way once Headwater has made sure
  that its commit did not land (:func:`storage_full_error`). Either way the error is
  :class:`~headwater.errors.StorageFullError`, which says that nothing was appended: a retry with the same
  ``sequence=`` lands once.
- A graph whose micro-batch failed for want of space (:func:`is_disk_full` on its reason, or less than
  ``reserve`` free when it failed) is not counted against its ``consecutive_failures``: the supervisor waits
  until ``resume`` bytes are free and starts it again from its checkpoints (``headwater.runtime.supervisor``).

Settings (environment variables of the process that runs the master; read when it starts):

- ``HEADWATER_DISK_RESERVE_MB`` (default 256): free space appends leave for graphs, checkpoints and metadata.
- ``HEADWATER_DISK_APPEND_FACTOR`` (default 2): an append needs this many times its Arrow size free (Parquet
  files without compression are about the Arrow size; the factor covers the Delta log and bucketing).
- ``HEADWATER_DISK_RESUME_MB`` (default 64): free space at which a graph waiting for room starts again.

>>> space = DiskSpace(reserve=100, append_factor=2.0, usage=lambda _: _Usage(1000, 800, 200))
>>> space.needed(50)
200
>>> space.check_append("/data/tables/demo/t", 60, table="demo.stream_table.t")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
headwater.errors.StorageFullError: append to stream table demo.stream_table.t refused: ...
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from headwater.errors import ConfigurationError, StorageFullError, clip, shorten

ENV_RESERVE_MB = "HEADWATER_DISK_RESERVE_MB"
ENV_APPEND_FACTOR = "HEADWATER_DISK_APPEND_FACTOR"
ENV_RESUME_MB = "HEADWATER_DISK_RESUME_MB"
DEFAULT_RESERVE_MB = 256
DEFAULT_APPEND_FACTOR = 2.0
DEFAULT_RESUME_MB = 64
MB = 2**20

# How a full disk reads in an error's text: Python's and pyarrow's "[Errno 28]", delta-rs's "(os error 28)",
# the JVM's "No space left on device", SQLite's "database or disk is full", and quota errors (EDQUOT).
_FULL = re.compile(
    r"No space left on device|Disk quota exceeded|database or disk is full|\[Errno (?:28|122)\]|os error (?:28|122)"
    r"|\bStorageFullError\b",
    re.IGNORECASE,
)


class _HasFree(Protocol):
    @property
    def free(self) -> int: ...


class _Usage(NamedTuple):
    total: int
    used: int
    free: int


@dataclass(frozen=True)
class DiskSpace:
    """The free-space rules of one data directory (see the module's documentation for the settings)."""

    reserve: int = DEFAULT_RESERVE_MB * MB
    append_factor: float = DEFAULT_APPEND_FACTOR
    resume: int = DEFAULT_RESUME_MB * MB
    usage: Callable[[str], _HasFree] = field(default=shutil.disk_usage, repr=False, compare=False)  # tests inject

    def __post_init__(self) -> None:
        if self.reserve < 0 or self.resume < 0 or not self.append_factor >= 1.0:
            raise ConfigurationError(
                f"disk space settings: reserve={self.reserve} and resume={self.resume} bytes must be >= 0 and "
                f"append_factor={self.append_factor} >= 1; e.g. {ENV_RESERVE_MB}=256, {ENV_APPEND_FACTOR}=2")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DiskSpace:
        """The settings from ``HEADWATER_DISK_*`` environment variables, defaults for those unset."""
        env = os.environ if environ is None else environ

        def number(name: str, default: float) -> float:
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                value = float("nan")
            if not value >= 0:  # also refuses NaN
                raise ConfigurationError(f"{name}={clip(raw, 60)} is not a number >= 0; e.g. {name}={default:g}")
            return value

        return cls(reserve=int(number(ENV_RESERVE_MB, DEFAULT_RESERVE_MB) * MB),
                   append_factor=number(ENV_APPEND_FACTOR, DEFAULT_APPEND_FACTOR),
                   resume=int(number(ENV_RESUME_MB, DEFAULT_RESUME_MB) * MB))

    def needed(self, nbytes: int) -> int:
        """Free bytes an append of ``nbytes`` Arrow bytes needs: its files, with their margin, and the reserve."""
        return int(nbytes * self.append_factor) + self.reserve

    def free(self, path: str | Path) -> int:
        """Free bytes (for an unprivileged writer) on the file system holding ``path`` (or its nearest parent)."""
        return int(self.usage(os.fspath(_existing(path))).free)

    def check_append(self, path: str | Path, nbytes: int, *, table: str) -> None:
        """Raise :class:`StorageFullError` unless an append of ``nbytes`` Arrow bytes to ``table`` at ``path`` fits."""
        need = self.needed(nbytes)
        free = self.free(path)
        if free < need:
            raise storage_full_error(table, path, free=free, needed=need,
                                     why=f"{self.append_factor:g} × its {_size(nbytes)} of rows + the "
                                         f"{_size(self.reserve)} reserve ({ENV_RESERVE_MB})")

    def has_room(self, path: str | Path) -> bool:
        """Whether a graph waiting for space may start again: ``resume`` bytes free at ``path``."""
        return self.free(path) >= self.resume


def is_disk_full(error: BaseException | str) -> bool:
    """Whether ``error`` (an exception, or a failure's text) says that a file system is full (ENOSPC, EDQUOT).

    >>> is_disk_full(OSError(28, "Error writing bytes to file")), is_disk_full("ValueError: negative value")
    (True, False)
    """
    if isinstance(error, BaseException):
        seen: set[int] = set()
        exc: BaseException | None = error
        while exc is not None and id(exc) not in seen:  # the error and what caused it
            seen.add(id(exc))
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                return True
            if _FULL.search(str(exc)):
                return True
            exc = exc.__cause__ or exc.__context__
        return False
    return bool(_FULL.search(error))


def storage_full_error(table: str, path: str | Path, *, free: int, needed: int | None = None, why: str = "",
                       cause: BaseException | None = None) -> StorageFullError:
    """The error of an append to ``table`` refused for want of space on the file system holding ``path``."""
    fs = mount_point(path)
    need = f"; this append needs {_size(needed)} ({why})" if needed is not None else ""
    got = f"; the write failed with: {shorten(str(cause), 300)}" if cause is not None else ""
    return StorageFullError(
        f"append to stream table {table} refused: the data directory's file system {fs} (holding {path}) has "
        f"{_size(free)} free{need}{got}. Nothing was appended. Free space on {fs} (or lower {ENV_RESERVE_MB}), "
        "then retry the append; with the same sequence= it lands once")


def mount_point(path: str | Path) -> str:
    """The mount point of the file system holding ``path``."""
    p = Path(os.path.abspath(_existing(path)))
    while not os.path.ismount(p) and p.parent != p:
        p = p.parent
    return str(p)


def _existing(path: str | Path) -> Path:
    p = Path(os.path.abspath(path))
    while not p.exists() and p.parent != p:
        p = p.parent
    return p


def _size(n: int) -> str:
    """``n`` bytes, readably: ``1.5 MB (1572864 bytes)``."""
    return f"{n / MB:.1f} MB ({n} bytes)" if n >= MB else f"{n} bytes"
