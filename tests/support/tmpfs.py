"""A small tmpfs to fill up in tests: mounted for one test, always unmounted after it."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(where: Path, size_mb: int) -> Iterator[Path]:
    """Mount a ``size_mb`` tmpfs at ``where`` (skips the test if this process may not mount), unmount it after."""
    where.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("a full-disk test needs mount(8) to make a small tmpfs")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"a full-disk test needs to mount a tmpfs (root or CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)  # busy: detach it


def fill(directory: Path) -> Path:
    """Write a filler file in ``directory`` until its file system is full (ENOSPC); return its path."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (2**20, 2**12, 1):
            block = b"\0" * chunk
            try:
                while True:
                    f.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    assert shutil.disk_usage(directory).free < 2**12, shutil.disk_usage(directory)
    return filler


def free_bytes(directory: Path) -> int:
    return shutil.disk_usage(os.fspath(directory)).free
