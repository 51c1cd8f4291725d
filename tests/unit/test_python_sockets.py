"""The directory of the Unix sockets between Spark and its Python workers: private to this user, or not used."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from headwater.spark import session
from headwater.storage.locks import LOCK_NAME


@pytest.fixture
def temp_root(tmp_path, monkeypatch):
    short = tempfile.mkdtemp(prefix="hw-", dir="/tmp")  # tmp_path may be too long for a socket's path
    monkeypatch.setattr(tempfile, "tempdir", short)
    monkeypatch.setattr(session, "_SOCKETS", None)
    yield short
    if session._SOCKETS is not None:
        session._SOCKETS.release()
    import shutil

    shutil.rmtree(short, ignore_errors=True)


def test_the_directory_is_this_users_alone_and_locked_while_the_process_lives(temp_root):
    path = session.python_socket_dir()
    assert path is not None and path.parent == session.Path(temp_root) / f"headwater-{os.getuid()}"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert (path / LOCK_NAME).exists() and session._SOCKETS is not None and session._SOCKETS.held
    assert session.python_socket_dir() == path  # one per process


def test_a_dead_processes_directory_is_removed(temp_root):
    root = session.Path(temp_root) / f"headwater-{os.getuid()}"
    (root / "dead").mkdir(parents=True, mode=0o700)
    os.chmod(root, 0o700)
    (root / "dead" / LOCK_NAME).write_text("12345\n")  # its holder died, and its lock with it
    path = session.python_socket_dir()
    assert path is not None and sorted(p.name for p in root.iterdir() if p.is_dir()) == [path.name]


def test_a_root_others_may_enter_is_not_used(temp_root):
    root = session.Path(temp_root) / f"headwater-{os.getuid()}"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)  # another user's doing, or a umask's: Spark authenticates no Unix socket
    assert session.python_socket_dir() is None
    assert list(root.iterdir()) == [] and stat.S_IMODE(root.stat().st_mode) == 0o755  # left as it was


def test_a_temp_directory_too_long_for_a_sockets_path_is_not_used(temp_root, monkeypatch):
    deep = os.path.join(temp_root, "d" * 60)
    os.mkdir(deep)
    monkeypatch.setattr(tempfile, "tempdir", deep)
    assert session.python_socket_dir() is None
    assert os.listdir(deep) == []
