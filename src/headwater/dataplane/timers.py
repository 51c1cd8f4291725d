"""A timer engine's pause flag and counters, as JSON beside a graph's checkpoints: written by its timer
(:mod:`headwater.runtime.timers`, which documents when timers run), read by ``stream_engine_stat`` on the master
without loading anything.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from headwater.dataplane.files import replacing


def status_path(checkpoints: Path | str, engine: str) -> Path:
    """Where a timer engine's pause flag and counters are kept (read by ``stream_engine_stat``, as JSON)."""
    return Path(checkpoints) / "timers" / f"{engine}.json"


def read_status(path: Path) -> dict[str, Any]:
    """``paused``, ``runs``, ``failures``, ``last_error``, ``last_run`` (seconds since the epoch or None)."""
    status: dict[str, Any] = {"paused": False, "runs": 0, "failures": 0, "last_error": "", "last_run": None}
    with contextlib.suppress(FileNotFoundError, ValueError):
        saved = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(saved, dict):
            status.update({k: v for k, v in saved.items() if k in status})
    return status


def write_status(path: Path, status: dict[str, Any]) -> None:
    """Replace the status file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        tmp.write_text(json.dumps(status), encoding="utf-8")
