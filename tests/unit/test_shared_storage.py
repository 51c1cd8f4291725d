"""The data directory's file system is checked where a master or worker starts (storage.shared_storage)."""

from __future__ import annotations

import errno
import os
import time

import pytest

import headwater as hw
from headwater.cli import main
from headwater.errors import ConfigurationError
from headwater.storage import locks, shared_storage
from headwater.storage.shared_storage import PROBE_PREFIX, Mount, check_storage, mount_of

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
90 27 0:52 / /srv/head\\040water rw,relatime shared:45 - nfs4 nas:/export/hw rw,vers=4.2,local_lock=none,addr=10.0.0.9
91 90 0:53 / /srv/head\\040water/tables rw - tmpfs tmpfs rw
"""


def test_a_local_directory_passes_is_created_owner_only_and_keeps_no_probe_file(tmp_path):
    data = tmp_path / "new" / "data"
    report = check_storage(data)
    assert report.checked == ("put-if-absent", "atomic replace", "exclusive locks")
    assert report.path == data.resolve() and report.mount is not None
    assert list(data.iterdir()) == [] and (data.stat().st_mode & 0o777) == 0o700


def test_the_mount_is_the_longest_mount_point_above_the_path_with_escapes_read():
    nfs = mount_of("/srv/head water/graphs/x", MOUNTINFO)
    assert nfs == Mount("/srv/head water", "nfs4", "nas:/export/hw",
                        ("rw", "relatime", "rw", "vers=4.2", "local_lock=none", "addr=10.0.0.9"))
    assert mount_of("/srv/head water/tables/t", MOUNTINFO).fs_type == "tmpfs"
    assert mount_of("/srv/head waterproof", MOUNTINFO).fs_type == "ext4"  # a prefix of the name is not a parent
    assert mount_of("/", MOUNTINFO).point == "/"


@pytest.mark.parametrize("option", ["local_lock=flock", "local_lock=all", "local_lock=posix", "nolock"])
def test_nfs_whose_locks_stay_on_one_host_is_refused(tmp_path, monkeypatch, option):
    monkeypatch.setattr(shared_storage, "mount_of", lambda path: Mount("/", "nfs4", "nas:/hw", ("rw", option)))
    with pytest.raises(ConfigurationError, match=f"nfs4 nas:/hw on /.*its locks stay on this host \\({option}\\)"):
        check_storage(tmp_path)


def test_nfs_with_shared_locks_passes(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_storage, "mount_of", lambda path: Mount("/", "nfs4", "nas:/hw", ("local_lock=none",)))
    assert check_storage(tmp_path).mount.fs_type == "nfs4"


def test_a_file_system_without_hard_links_is_refused_and_left_clean(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(ConfigurationError, match=r"it has no hard links.*Operation not permitted"):
        check_storage(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_link_that_replaces_an_existing_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "link", lambda src, dst: os.replace(src, dst))  # what some FUSE file systems do
    with pytest.raises(ConfigurationError, match="put-if-absent commits would both win"):
        check_storage(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_locks_that_two_opens_both_take_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "_lock", lambda fd, wait: True)  # as NFS's per-process emulation of flock behaves
    with pytest.raises(ConfigurationError, match="two opens of one file both took its exclusive lock"):
        check_storage(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_probe_left_by_a_killed_check_is_removed_later_one_in_progress_is_not(tmp_path):
    stale, fresh = tmp_path / f"{PROBE_PREFIX}dead.a", tmp_path / f"{PROBE_PREFIX}live.a"
    stale.write_bytes(b"a")
    fresh.write_bytes(b"a")
    old = time.time() - 2 * shared_storage.STALE_PROBE_SECONDS
    os.utime(stale, (old, old))
    check_storage(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [fresh.name]


@pytest.mark.parametrize("url", ["s3://bucket/hw", "gs://b/x", "abfss://c@acct.dfs.core.windows.net/x",
                                 "file:///srv/hw"])
def test_a_url_is_refused_where_it_is_given_and_nothing_is_created(tmp_path, monkeypatch, capsys, url):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match="a URL, not a local path"):
        hw.connect(url, start_spark=False)
    monkeypatch.setenv("HEADWATER_HOME", url)
    with pytest.raises(ConfigurationError, match=r"HEADWATER_HOME .* a URL"):
        hw.connect(start_spark=False)
    with pytest.raises(SystemExit) as exit_:
        main(["graphs", "--data-dir", url])
    assert exit_.value.code == 2 and "a URL, not a local path" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_session_on_a_refused_directory_does_not_start_and_holds_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "_lock", lambda fd, wait: True)
    with pytest.raises(ConfigurationError, match="cannot hold Headwater's data"):
        hw.connect(tmp_path, start_spark=False)
    monkeypatch.undo()
    hw.connect(tmp_path, start_spark=False).close()  # nothing was left locked
