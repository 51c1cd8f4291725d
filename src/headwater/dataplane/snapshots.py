"""Engine state snapshots of one engine, versioned by input-table version and written atomically."""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
from collections.abc import Callable, Mapping
from typing import Any

from headwater.faults import fault_point

KEEP_SNAPSHOTS = 3  # the default; at least 2: a batch cut off before its commit replays from the one before


class SnapshotStore:
    """Versioned state snapshots of one engine: ``<root>/task=<t>/<version>.pkl``, written atomically."""

    def __init__(self, root: str, *, keep: int = KEEP_SNAPSHOTS) -> None:
        self.root = root
        self.keep = max(keep, 2)

    def _dir(self, task: int) -> str:
        return os.path.join(self.root, f"task={task}")

    def _versions(self, task: int) -> list[int]:
        try:
            names = os.listdir(self._dir(task))
        except FileNotFoundError:
            return []
        return sorted(int(n[:-4]) for n in names if re.fullmatch(r"\d+\.pkl", n))

    def newest_bytes(self, task: int) -> int | None:
        """The size of the task's newest snapshot file (None before the first)."""
        for version in reversed(self._versions(task)):
            with contextlib.suppress(FileNotFoundError):  # removed meanwhile: the one before
                return os.path.getsize(os.path.join(self._dir(task), f"{version}.pkl"))
        return None

    def load(self, task: int, before: int) -> Any | None:
        """The newest snapshot strictly older than ``before``, or None."""
        older = [v for v in self._versions(task) if v < before]
        if not older:
            return None
        with open(os.path.join(self._dir(task), f"{older[-1]}.pkl"), "rb") as f:
            return pickle.load(f)

    def newest_stats(self, task: int) -> dict[str, Any] | None:
        """The counters saved beside the task's newest snapshot (``save(stats=...)``), read as JSON: the master
        reports them without loading the state itself (it never unpickles)."""
        for version in reversed(self._versions(task)):
            try:
                with open(os.path.join(self._dir(task), f"{version}.stats.json"), encoding="utf-8") as f:
                    doc: dict[str, Any] = json.load(f)
                    return doc
            except FileNotFoundError:  # a snapshot saved without counters, or removed meanwhile
                return None
            except ValueError:
                return None
        return None

    def save(self, task: int, version: int, state: Any, *, fence: Callable[[], None] | None = None,
             stats: Mapping[str, Any] | None = None) -> None:
        """Write the snapshot at ``version`` (and ``stats``, its counters, beside it as JSON) and remove those
        beyond ``keep``.

        ``fence`` (the placement's check, :func:`headwater.dataplane.fence.check_fence`) runs once the new
        file is written and before it replaces anything or any old snapshot is removed: a worker whose graph
        was placed elsewhere meanwhile raises there and leaves the snapshots as they were.
        """
        d = self._dir(task)
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{version}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=5)
            f.flush()
            os.fsync(f.fileno())
        if fence is not None:
            try:
                fault_point("snapshot.before_fence")
                fence()
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(tmp)
                raise
        if stats is not None:  # first: the snapshot it describes then never lacks it
            side = os.path.join(d, f".{version}.stats.{os.getpid()}.tmp")
            with open(side, "w", encoding="utf-8") as f:
                json.dump(dict(stats), f)
            os.replace(side, os.path.join(d, f"{version}.stats.json"))
        os.replace(tmp, os.path.join(d, f"{version}.pkl"))
        for old in self._versions(task)[:-self.keep]:
            if old < version:
                for name in (f"{old}.pkl", f"{old}.stats.json"):
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(d, name))
