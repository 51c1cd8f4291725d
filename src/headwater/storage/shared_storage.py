"""What Headwater needs of the file system under its data directory, checked when a master or worker starts.

Masters and workers on several hosts share one data directory, mounted on each (a local disk for one host;
NFS or another network file system for several). Headwater relies on four properties of it:

* **put-if-absent**: a hard link to a name that exists fails (Delta commits, job records: of two writers of
  one version, one wins and the other sees it lost);
* **atomic replace**: a rename over an existing name is seen whole (snapshots, plans, job records);
* **exclusive locks per open file**: two opens of one file, in one process or on two hosts, never both hold
  its lock (:mod:`headwater.storage.locks`: one session per directory, one owner per scratch directory);
* **locks that reach every host**: NFS not mounted with ``nolock`` or ``local_lock=flock|posix|all``, which
  keep locks on the host that takes them.

:func:`check_storage` tries the first three on the directory itself (a few files, removed after) and reads
the fourth from the mount's options; a directory that fails is refused, the property named. Object storage
(``s3://`` and the like) has neither links nor renames: :func:`storage_path` refuses such a URL where it is
given instead of taking it for a local directory named ``s3:``.

>>> import tempfile
>>> report = check_storage(Path(tempfile.mkdtemp()))
>>> report.checked
('put-if-absent', 'atomic replace', 'exclusive locks')
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

from headwater.errors import ConfigurationError, clip
from headwater.storage.locks import FileLock

PROBE_PREFIX = ".storage-check-"
STALE_PROBE_SECONDS = 60.0  # a probe file this old was left by a process killed during its check
LOCAL_LOCK_OPTIONS = ("nolock", "local_lock=flock", "local_lock=posix", "local_lock=all")


@dataclass(frozen=True)
class Mount:
    """The mount a path lies on, from ``/proc/self/mountinfo``."""

    point: str
    fs_type: str
    source: str
    options: tuple[str, ...]


@dataclass(frozen=True)
class StorageReport:
    path: Path
    mount: Mount | None
    checked: tuple[str, ...]


def storage_path(given: str | os.PathLike[str], *, where: str = "data directory") -> Path:
    """``given`` as a local path; a URL (``s3://``, ``gs://``, ``abfss://``, ``file://``, ...) is refused.

    >>> storage_path("/srv/headwater")
    PosixPath('/srv/headwater')
    >>> try:
    ...     storage_path("s3://bucket/headwater")
    ... except ConfigurationError as exc:
    ...     print(str(exc)[:71])
    data directory 's3://bucket/headwater': a URL, not a local path (s3://)
    """
    text = os.fspath(given)
    scheme = urlsplit(text).scheme if "://" in text else ""
    if scheme:
        raise ConfigurationError(
            f"{where} {clip(text, 300)}: a URL, not a local path ({scheme}://). Headwater keeps its data on a file "
            "system with hard links (put-if-absent commits), atomic renames and locks: mount the storage on "
            "every host (a local disk, NFS) and give its path. Object storage has no links or renames; "
            "docs/deployment.md, 'Shared storage', says what it would take")
    return Path(text)


def storage_argument(text: str) -> Path:
    """:func:`storage_path` as an argparse ``type``: a command line given a URL stops with the reason."""
    try:
        return storage_path(text)
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def mount_of(path: Path, mountinfo: str | None = None) -> Mount | None:
    """The mount holding ``path`` (the longest mount point above it); None where mountinfo is unreadable."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    target, best = str(path), None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        point = _unescape(fields[4])
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best.point)):
            super_options = fields[dash + 3].split(",") if len(fields) > dash + 3 else []
            best = Mount(point, fields[dash + 1], _unescape(fields[dash + 2]),
                         tuple(fields[5].split(",")) + tuple(super_options))
    return best


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in a path as octal escapes (``\\040``)."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def check_storage(data_dir: Path) -> StorageReport:
    """Check (and create, owner-only) ``data_dir``: refused with the failing property named, or its report."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = data_dir.resolve()
    mount = mount_of(path)
    if mount is not None and mount.fs_type.startswith("nfs"):
        local = [o for o in mount.options if o in LOCAL_LOCK_OPTIONS]
        if local:
            _refuse(path, mount, f"its locks stay on this host ({', '.join(local)}): remount it without that option")
    _remove_stale_probes(path)
    probe = path / f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    files = [probe.with_suffix(s) for s in (".a", ".b", ".target", ".lock")]
    try:
        files[0].write_bytes(b"a")
        files[1].write_bytes(b"b")
        try:
            os.link(files[0], files[2])
        except OSError as exc:
            _refuse(path, mount, f"it has no hard links, which its put-if-absent commits use ({exc.strerror})")
        try:
            os.link(files[1], files[2])
        except FileExistsError:
            pass
        else:
            _refuse(path, mount, "a link over an existing name replaced it: put-if-absent commits would both win")
        os.replace(files[1], files[2])
        if files[2].read_bytes() != b"b":
            _refuse(path, mount, "a rename over an existing name did not replace it")
        held = FileLock.try_acquire(files[3])
        other = FileLock.try_acquire(files[3])
        if held is None or other is not None:
            for lock in (held, other):
                if lock is not None:
                    lock.release()
            _refuse(path, mount, "two opens of one file both took its exclusive lock (the file system's locks "
                                 "are per process, or not kept)")
        held.release()
    finally:
        for file in files:
            with contextlib.suppress(FileNotFoundError):
                file.unlink()
    return StorageReport(path, mount, ("put-if-absent", "atomic replace", "exclusive locks"))


def _remove_stale_probes(path: Path) -> None:
    cutoff = time.time() - STALE_PROBE_SECONDS
    for file in path.glob(f"{PROBE_PREFIX}*"):
        with contextlib.suppress(OSError):
            if file.is_file() and not file.is_symlink() and file.lstat().st_mtime < cutoff:
                file.unlink()


def _refuse(path: Path, mount: Mount | None, reason: str) -> NoReturn:
    on = f" ({mount.fs_type} {mount.source} on {mount.point})" if mount else ""
    raise ConfigurationError(f"data directory {clip(str(path), 300)}{on} cannot hold Headwater's data: {reason}. "
                             "See docs/deployment.md, 'Shared storage'")
