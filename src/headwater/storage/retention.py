"""How far back a stream table can be replayed: its retention rule and the truncation of its log.

A stream table's log (``_delta_log/<version>.json``) is its stream: readers replay commits by version.
A :class:`Retention` rule (Orca's ``retentionMinutes``, or a row count) says which commits stay
replayable; :func:`truncate_log` removes the others together with the micro-batch files only they
name. The snapshot is not touched: files still in it (rows not yet compacted) stay until compaction
has merged them, so SQL over the table still sees every row. A reader that asks for a removed version
gets :class:`~headwater.errors.RetentionError` naming the first version still kept.

>>> Retention(minutes=60).describe()
'60 minutes'
>>> Retention.from_json(Retention(rows=1_000_000).to_json())
Retention(minutes=None, rows=1000000)
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from headwater.errors import ConfigurationError, clip

_VERSION_DIGITS = 20


@dataclass(frozen=True)
class Retention:
    """Which commits of a stream table stay replayable.

    ``minutes``: commits made more than this long ago expire. ``rows``: commits older than the newest
    ``rows`` rows expire. With both, a commit expires when either rule expires it. The newest commit
    never expires.
    """

    minutes: float | None = None
    rows: int | None = None

    def __post_init__(self) -> None:
        if self.minutes is None and self.rows is None:
            raise ConfigurationError("retention needs minutes=... or rows=... (or both); "
                                     "to keep every version, set no retention")
        if self.minutes is not None:
            if isinstance(self.minutes, bool) or not isinstance(self.minutes, int | float | np.integer | np.floating) \
                    or not math.isfinite(self.minutes) or self.minutes <= 0:
                raise ConfigurationError(f"retention minutes must be a positive number, got {clip(self.minutes)}")
            object.__setattr__(self, "minutes", float(self.minutes))
        if self.rows is not None:
            if isinstance(self.rows, bool) or not isinstance(self.rows, int | np.integer) or self.rows <= 0:
                raise ConfigurationError(f"retention rows must be a positive integer, got {clip(self.rows)}")
            object.__setattr__(self, "rows", int(self.rows))

    def describe(self) -> str:
        parts = []
        if self.minutes is not None:
            parts.append(f"{self.minutes:g} minutes")
        if self.rows is not None:
            parts.append(f"the newest {self.rows} rows")
        return " or ".join(parts)

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in (("minutes", self.minutes), ("rows", self.rows)) if v is not None})

    @classmethod
    def from_json(cls, text: str) -> Retention:
        doc = json.loads(text)
        if not isinstance(doc, dict) or set(doc) - {"minutes", "rows"}:
            raise ConfigurationError(f"stored retention {clip(text)} is not a retention rule")
        return cls(minutes=doc.get("minutes"), rows=doc.get("rows"))


def log_versions(log_dir: str) -> list[int]:
    """The versions whose commit file is in ``log_dir``, ascending."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    return sorted(int(n[:_VERSION_DIGITS]) for n in names
                  if len(n) == _VERSION_DIGITS + 5 and n.endswith(".json") and n[:_VERSION_DIGITS].isdigit())


def last_checkpoint(log_dir: str) -> int | None:
    """The version of the table's newest log checkpoint (``_last_checkpoint``), or None."""
    try:
        with open(os.path.join(log_dir, "_last_checkpoint"), encoding="utf-8") as f:
            return int(json.load(f)["version"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def first_kept_version(retention: Retention, versions: list[int], *, now: float,
                       commit_time: Callable[[int], float], commit_rows: Callable[[int], int]) -> int:
    """The oldest version ``retention`` keeps replayable among ``versions`` (ascending, contiguous)."""
    newest = versions[-1]
    cut = versions[0]
    if retention.minutes is not None:
        # commit times grow with the version (commits are serialised); a clock step back only keeps more
        horizon = now - retention.minutes * 60.0
        times = _LazyTimes(versions, commit_time)
        cut = max(cut, versions[min(bisect.bisect_left(times, horizon), len(versions) - 1)])
    if retention.rows is not None:
        kept, v = 0, newest
        while v > versions[0]:
            kept += commit_rows(v)
            if kept >= retention.rows:
                break
            v -= 1
        cut = max(cut, v)
    return min(cut, newest)


class _LazyTimes:
    """Commit times as a sequence that ``bisect`` reads a few of (log₂ n commit files, not n)."""

    def __init__(self, versions: list[int], commit_time: Callable[[int], float]) -> None:
        self.versions, self.commit_time = versions, commit_time

    def __len__(self) -> int:
        return len(self.versions)

    def __getitem__(self, i: int) -> float:
        return self.commit_time(self.versions[i])


def expired_log_files(log_dir: str, below: int, keep_checkpoint: int | None) -> Iterable[str]:
    """Log files of versions below ``below``, commit files first in version order (readers then always
    see a contiguous log), then checkpoints other than ``keep_checkpoint``."""
    names = []
    with contextlib.suppress(FileNotFoundError):
        names = os.listdir(log_dir)
    by_version = sorted((int(n[:_VERSION_DIGITS]), n) for n in names
                        if n[:_VERSION_DIGITS].isdigit() and len(n) > _VERSION_DIGITS and n[_VERSION_DIGITS] == ".")
    commits = [n for v, n in by_version if v < below and n.endswith(".json") and len(n) == _VERSION_DIGITS + 5]
    others = [n for v, n in by_version if v < below and n not in commits and v != keep_checkpoint]
    return [os.path.join(log_dir, n) for n in (*commits, *others)]
