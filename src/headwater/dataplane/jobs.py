"""Checkpoint job records: one small JSON file per micro-batch of a subgraph (Orca's checkpoint jobs, A.7).

Every micro-batch is a checkpoint, and its record is what makes a replay exact. Before the batch runs, its
driver records the input versions ``(start, end]`` it covers (:func:`begin_job`); a replay of the batch finds
that range and redoes exactly the same work (its state, file names and commit transaction all derive from
it). After the output is committed, the driver completes the record: when the batch started and ended,
where it ran, and per stream task (Orca's sub-jobs) the rows in and the seconds per stage. The newest
:data:`KEEP_RECORDS` records stay, in ``<subgraph checkpoint>/jobs/``; the master reads the completed ones
for ``checkpoint_job_info``.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> begin_job(d, 0, lambda start: 3)
(0, 3)
>>> write_job(d, {"batch": 0, "input": [0, 3], "finished": 1.0})
>>> [r["batch"] for r in read_jobs(d)], begin_job(d, 1, lambda start: start), committed_input_version(d)
([0], (3, 3), 3)
>>> is_committed(d, 0), is_committed(d, 1)
(True, False)

Two subscription settings (:mod:`headwater.plan.subscription`) shape the ranges: ``batch_size`` bounds the rows a
range covers (:func:`admit`), and ``source_offset=-1`` moves where the next new range starts
(:func:`set_start_version`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from headwater.dataplane.files import replacing

KEEP_RECORDS = 100  # as many as Spark keeps of its offset log by default
START_FILE = "start_version"  # in jobs/: the input version before which new micro-batches read nothing


def _file(directory: Path, batch: int) -> Path:
    return directory / "jobs" / f"{batch:012d}.json"


def write_job(directory: Path, record: dict[str, Any]) -> None:
    """Store the record of micro-batch ``record["batch"]`` (atomically); drop the one ``KEEP_RECORDS`` older."""
    batch = int(record["batch"])
    target = _file(directory, batch)
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target) as tmp:
        tmp.write_text(json.dumps(record))
    with contextlib.suppress(FileNotFoundError):
        _file(directory, batch - KEEP_RECORDS).unlink()


def _records(directory: Path, *, newest_first: bool = False) -> Iterator[dict[str, Any]]:
    """The stored records, completed or not, read one at a time (one being replaced or unreadable is skipped)."""
    for file in sorted((directory / "jobs").glob("[0-9]*.json"), reverse=newest_first):
        with contextlib.suppress(FileNotFoundError, ValueError):
            yield json.loads(file.read_text())


def admit(start: int, latest: int, rows_of: Callable[[int], int], max_rows: int | None) -> int:
    """The end of a micro-batch from ``start``: the newest version ``<= latest`` whose commits after ``start``
    hold at most ``max_rows`` rows (``rows_of(version)``), and at least one commit (a commit is not split).

    >>> sizes = {1: 30, 2: 30, 3: 30, 4: 100, 5: 10}
    >>> [admit(s, 5, sizes.__getitem__, 70) for s in (0, 2, 3, 4)], admit(0, 5, sizes.__getitem__, None)
    ([2, 3, 4, 5], 5)
    """
    if not max_rows:
        return latest
    end, used = start, 0
    for version in range(start + 1, latest + 1):
        rows = rows_of(version)
        if end > start and used + rows > max_rows:
            break
        end, used = version, used + rows
    return end


def set_start_version(directory: Path, version: int) -> None:
    """Let the next new micro-batch start at input ``version`` at the earliest (``source_offset=-1`` on start):
    what was appended up to it is never read. A batch already recorded keeps its range (a replay is exact)."""
    target = directory / "jobs" / START_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    with replacing(target) as tmp:
        tmp.write_text(str(int(version)))


def start_version(directory: Path) -> int:
    """The version :func:`set_start_version` stored (0 if none)."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        return int((directory / "jobs" / START_FILE).read_text())
    return 0


def next_start(directory: Path) -> int:
    """Where the next new micro-batch starts: the newest recorded range's end, or the start version if later."""
    newest = next(_records(directory, newest_first=True), None)
    return max(int(newest["input"][1]) if newest else 0, start_version(directory))


def begin_job(directory: Path, batch: int, latest: Callable[[int], int]) -> tuple[int, int]:
    """The input versions ``(start, end]`` of micro-batch ``batch``, recorded before it runs.

    A replay gets the range its first attempt recorded. A new batch starts where the newest recorded one
    ended (0 before the first; later if :func:`set_start_version` says so) and ends at ``latest(start)``, the
    input's newest version (or an earlier one: :func:`admit`). The record is created only if absent: of two
    drivers racing (a placement being replaced), both run the first's range.
    """
    target = _file(directory, batch)
    if not target.exists():
        previous = next((r for r in _records(directory, newest_first=True) if r["batch"] < batch), None)
        start = max(int(previous["input"][1]) if previous else 0, start_version(directory))
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.begin")
        tmp.write_text(json.dumps({"batch": batch, "input": [start, latest(start)]}))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, target)
        tmp.unlink()
    start, end = json.loads(target.read_text())["input"]
    return int(start), int(end)


def is_committed(directory: Path, batch: int) -> bool:
    """Whether micro-batch ``batch`` was committed (its record completed): a replay of it has nothing to do."""
    with contextlib.suppress(FileNotFoundError, ValueError):
        return "finished" in json.loads(_file(directory, batch).read_text())
    return False


def read_jobs(directory: Path) -> list[dict[str, Any]]:
    """The records of the committed micro-batches, oldest first."""
    return [r for r in _records(directory) if "finished" in r]


def newest_job(directory: Path, *, read_input: bool = False) -> dict[str, Any] | None:
    """The record of the newest committed micro-batch (None before the first).

    With ``read_input``, of the newest that read input versions. A micro-batch reads up to the input's newest
    version, past the offset Spark planned it with, so Spark may then trigger one more over a range already
    read, ``(end, end]``: its figures (no rows in, none out) say nothing of the work the subgraph did last.
    """
    return next((r for r in _records(directory, newest_first=True)
                 if "finished" in r and (not read_input or r["input"][0] < r["input"][1])), None)


def in_flight(directory: Path) -> dict[str, Any] | None:
    """The record of the micro-batch begun but not committed (None if there is none)."""
    record = next(_records(directory, newest_first=True), None)
    return None if record is None or "finished" in record else record


def committed_input_version(directory: Path) -> int:
    """The input version up to which the subgraph has committed its output (0 before any batch)."""
    record = newest_job(directory)
    return int(record["input"][1]) if record else 0
