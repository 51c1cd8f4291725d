"""Checkpoint job records: one small JSON file per micro-batch of a subgraph (Orca's checkpoint jobs, A.7).

Every micro-batch is a checkpoint. Its driver writes the record after the batch's output is committed:
the input versions it covered, when it started and ended, where it ran, and per stream task (Orca's
sub-jobs) the rows in and the seconds per stage. The newest :data:`KEEP_RECORDS` records stay, in
``<subgraph checkpoint>/jobs/``; the master reads them for ``checkpoint_job_info``.

>>> import tempfile
>>> d = Path(tempfile.mkdtemp())
>>> write_job(d, {"batch": 0, "input": [0, 1]})
>>> [r["batch"] for r in read_jobs(d)]
[0]
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

KEEP_RECORDS = 100  # as many as Spark keeps of its offset log by default


def _file(directory: Path, batch: int) -> Path:
    return directory / "jobs" / f"{batch:012d}.json"


def write_job(directory: Path, record: dict[str, Any]) -> None:
    """Store the record of micro-batch ``record["batch"]`` (atomically); drop the one ``KEEP_RECORDS`` older."""
    batch = int(record["batch"])
    target = _file(directory, batch)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, target)
    with contextlib.suppress(FileNotFoundError):
        _file(directory, batch - KEEP_RECORDS).unlink()


def read_jobs(directory: Path) -> list[dict[str, Any]]:
    """The stored records, oldest first (a record being replaced or unreadable is skipped)."""
    records = []
    for file in sorted((directory / "jobs").glob("[0-9]*.json")):
        with contextlib.suppress(FileNotFoundError, ValueError):
            records.append(json.loads(file.read_text()))
    return records


def newest_job(directory: Path) -> dict[str, Any] | None:
    """The newest stored record (None before the first): one file read, however many are kept."""
    for file in sorted((directory / "jobs").glob("[0-9]*.json"), reverse=True):
        with contextlib.suppress(FileNotFoundError, ValueError):  # replaced meanwhile: take the one before
            record: dict[str, Any] = json.loads(file.read_text())
            return record
    return None
