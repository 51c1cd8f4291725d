"""A state snapshot or a side file (counters, timer status, job record) whose write fails leaves no temporary
file behind and the files it would have replaced as they were."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from headwater.dataplane.jobs import write_job
from headwater.dataplane.snapshots import SnapshotStore
from headwater.dataplane.timers import write_status
from headwater.engines.udf import UdfState
from headwater.errors import ExecutionError


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("state", "stats", "error"), [
    (UdfState({"lock": threading.Lock()}, "udf_engine 'u'"), None,
     r"udf_engine 'u': its variables must be picklable"),
    ({"n": 2}, {"rows": object()}, r"not JSON serializable"),  # the counters beside it
])
def test_a_failed_snapshot_write_leaves_the_store_as_it_was(tmp_path, state, stats, error):
    store = SnapshotStore(str(tmp_path))
    store.save(0, 1, {"n": 1}, stats={"rows": 1})
    before = files(tmp_path)
    with pytest.raises((ExecutionError, TypeError), match=error):
        store.save(0, 2, state, stats=stats)
    assert files(tmp_path) == before
    assert SnapshotStore(str(tmp_path)).load(0, 3) == {"n": 1}


def test_a_failed_side_file_write_leaves_no_temporary_file(tmp_path):
    status = tmp_path / "timers" / "t.json"
    write_status(status, {"runs": 1})
    write_job(tmp_path, {"batch": 0, "input": [0, 1]})
    before = files(tmp_path)
    with pytest.raises(TypeError):
        write_status(status, {"runs": object()})
    with pytest.raises(TypeError):
        write_job(tmp_path, {"batch": 0, "input": object()})
    assert files(tmp_path) == before


def test_a_token_file_write_that_fails_keeps_the_old_file_and_leaves_no_temporary_one(tmp_path, monkeypatch):
    from headwater.cli import credentials

    file = tmp_path / "tokens.json"
    monkeypatch.setenv(credentials.TOKEN_FILE_ENV, str(file))
    credentials.save_token("http://127.0.0.1:8765", "first")
    assert oct(file.stat().st_mode & 0o777) == "0o600"

    def full_disk(*_: object, **__: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(credentials.json, "dump", full_disk)
    with pytest.raises(OSError, match="No space left"):
        credentials.save_token("http://127.0.0.1:8765", "second")
    assert [p.name for p in tmp_path.iterdir()] == ["tokens.json"]
    assert credentials.saved_token("http://127.0.0.1:8765") == "first"
