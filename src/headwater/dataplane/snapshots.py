"""The state of one engine per stream task, by input-table version: full snapshots, a changelog between them,
and the newest state kept in memory.

Files under ``<root>/task=<t>/`` (each written atomically):

- ``<v>.pkl``: the whole state after input version ``v`` (a snapshot);
- ``<v>.<b>.delta``: a changelog record, the changes from the state at version ``b`` to the state at ``v``: only
  the keys the micro-batch touched (:meth:`~headwater.engines.base.KeyedState.changes`);
- ``<v>.stats.json``: its counters, read by the master without loading any state.

The state at ``v`` is its snapshot, or the state at ``b`` with the record applied (a chain back to a snapshot).
A save writes a record when the state is a :class:`~headwater.engines.base.KeyedState` loaded from this store
and the chain since its snapshot is short (fewer than :data:`COMPACT_RECORDS` records, fewer bytes than the
snapshot); otherwise, and for every other state, a snapshot (the compaction). A micro-batch therefore writes
what it touched, and a recovery reads one snapshot and at most as many bytes again of records.

The state a process saved last stays in memory (the live state): the next micro-batch of that task in the same
process takes it instead of reading files, when the files still name it the newest (the same file, unchanged).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from headwater.dataplane.files import removed_on_failure, replacing, temporary_name
from headwater.engines.base import KeyedState
from headwater.errors import ExecutionError
from headwater.faults import fault_point

KEEP_SNAPSHOTS = 3  # the default; at least 2: a batch cut off before its commit replays from the one before
COMPACT_RECORDS = 1000  # changelog records after a snapshot before the next save is a snapshot again
LIVE_TASKS = 256  # states kept in memory per process (the least recently used go first)

_FILE = re.compile(r"(\d+)\.pkl|(\d+)\.(\d+)\.delta")


@dataclass(frozen=True)
class _File:
    """The file holding the state at ``version``: a snapshot (``base`` None) or a record over ``base``."""

    version: int
    base: int | None
    name: str


@dataclass(frozen=True)
class _Chain:
    """Where a state came from: its version, file (with its stat, to tell it unchanged), and the chain's size."""

    version: int
    token: tuple[str, int, int, int]
    records: int  # changelog records since the snapshot
    record_bytes: int
    snapshot_bytes: int


_LIVE: OrderedDict[tuple[str, int], tuple[_Chain, Any]] = OrderedDict()  # (root, task) → its live state
_LIVE_LOCK = threading.Lock()  # the driver runs several subgraphs' small batches at once


class SnapshotStore:
    """The versioned state of one engine per stream task, under ``root`` (see the module's docstring)."""

    def __init__(self, root: str, *, keep: int = KEEP_SNAPSHOTS) -> None:
        self.root = root
        self.keep = max(keep, 2)
        self._loaded: dict[int, _Chain] = {}  # per task: the chain of the state load() returned

    def _dir(self, task: int) -> str:
        return os.path.join(self.root, f"task={task}")

    def _files(self, task: int) -> dict[int, _File]:
        """The file holding each version (a snapshot rather than a record where both are there)."""
        try:
            names = os.listdir(self._dir(task))
        except FileNotFoundError:
            return {}
        files: dict[int, _File] = {}
        for name in sorted(names, key=lambda n: n.endswith(".pkl")):  # snapshots last: they win
            m = _FILE.fullmatch(name)
            if m is not None:
                full = m.group(1) is not None
                version = int(m.group(1) if full else m.group(2))
                files[version] = _File(version, None if full else int(m.group(3)), name)
        return files

    def _chain(self, task: int, files: Mapping[int, _File], version: int) -> list[_File]:
        """The files that make the state at ``version``: its snapshot first, then the records in order."""
        chain = [files[version]]
        while chain[-1].base is not None:
            base = files.get(chain[-1].base)  # type: ignore[arg-type]
            if base is None or base.version >= chain[-1].version:
                raise ExecutionError(f"engine state {self._dir(task)}: {chain[-1].name} needs the state at "
                                     f"version {chain[-1].base}, which is not there; the state cannot be rebuilt")
            chain.append(base)
        return chain[::-1]

    def _token(self, task: int, file: _File) -> tuple[str, int, int, int]:
        st = os.stat(os.path.join(self._dir(task), file.name))
        return file.name, st.st_ino, st.st_mtime_ns, st.st_size

    def newest_bytes(self, task: int) -> int | None:
        """The bytes of the task's newest state on disk, its snapshot and records (None before the first)."""
        files = self._files(task)
        if not files:
            return None
        with contextlib.suppress(FileNotFoundError, ExecutionError):  # removed meanwhile: say nothing
            return sum(os.path.getsize(os.path.join(self._dir(task), f.name))
                       for f in self._chain(task, files, max(files)))
        return None

    def load(self, task: int, before: int) -> Any | None:
        """The newest state strictly older than ``before``, or None."""
        files = self._files(task)
        older = [v for v in files if v < before]
        if not older:
            self._loaded.pop(task, None)
            return None
        version = max(older)
        token = self._token(task, files[version])
        with _LIVE_LOCK:
            live = _LIVE.pop((self.root, task), None)  # taken: the batch may change it in place
        if live is not None and live[0].version == version and live[0].token == token:
            self._loaded[task] = live[0]
            return live[1]
        chain = self._chain(task, files, version)
        sizes = [os.path.getsize(os.path.join(self._dir(task), f.name)) for f in chain]
        with open(os.path.join(self._dir(task), chain[0].name), "rb") as f:
            state = pickle.load(f)
        for record in chain[1:]:
            with open(os.path.join(self._dir(task), record.name), "rb") as f:
                state.apply(pickle.load(f))
        if isinstance(state, KeyedState):
            state.saved()
        self._loaded[task] = _Chain(version, token, len(chain) - 1, sum(sizes[1:]), sizes[0])
        return state

    def newest_stats(self, task: int) -> dict[str, Any] | None:
        """The counters saved beside the task's newest state (``save(stats=...)``), read as JSON: the master
        reports them without loading the state itself (it never unpickles)."""
        files = self._files(task)
        if not files:
            return None
        try:
            with open(os.path.join(self._dir(task), f"{max(files)}.stats.json"), encoding="utf-8") as f:
                doc: dict[str, Any] = json.load(f)
                return doc
        except (FileNotFoundError, ValueError):  # saved without counters, or removed meanwhile
            return None

    def save(self, task: int, version: int, state: Any, *, fence: Callable[[], None] | None = None,
             stats: Mapping[str, Any] | None = None) -> None:
        """Save ``state`` as the state at ``version`` (and ``stats``, its counters, beside it as JSON): a changelog
        record over the state :meth:`load` returned when it can be, else a snapshot; then remove what restoring
        the newest ``keep`` versions does not need.

        ``fence`` (the placement's check, :func:`headwater.dataplane.fence.check_fence`) runs once the new
        file is written and before it replaces anything or any old file is removed: a worker whose graph
        was placed elsewhere meanwhile raises there and leaves the state as it was.
        """
        d = self._dir(task)
        os.makedirs(d, exist_ok=True)
        base = self._loaded.get(task)
        record, data = None, None
        if isinstance(state, KeyedState) and base is not None and base.version < version \
                and base.records + 1 < COMPACT_RECORDS:
            record = state.changes()
            if record is not None:
                data = pickle.dumps(record, protocol=5)
                if base.record_bytes + len(data) >= base.snapshot_bytes:  # the records outweigh the snapshot
                    record = data = None
        name = f"{version}.{base.version}.delta" if record is not None and base is not None else f"{version}.pkl"
        tmp = temporary_name(os.path.join(d, name))
        with removed_on_failure(tmp):  # a state that cannot be pickled, a full disk, a fence: no file is left
            with open(tmp, "wb") as f:  # not fsynced, as no other file is: a process crash loses nothing
                if data is None:
                    pickle.dump(state, f, protocol=5)  # streamed: a large state is not copied in memory
                else:
                    f.write(data)
                size = f.tell()
            if fence is not None:
                fault_point("snapshot.before_fence")
                fence()
            if stats is not None:  # first: the state it describes then never lacks it
                with replacing(os.path.join(d, f"{version}.stats.json")) as side:
                    side.write_text(json.dumps(dict(stats)), encoding="utf-8")
            os.replace(tmp, os.path.join(d, name))
        if record is not None:  # a snapshot at this version would hide the record
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(d, f"{version}.pkl"))
        written = _File(version, base.version if record is not None and base is not None else None, name)
        token = self._token(task, written)
        chain = (_Chain(version, token, base.records + 1, base.record_bytes + size, base.snapshot_bytes)
                 if record is not None and base is not None else _Chain(version, token, 0, 0, size))
        if isinstance(state, KeyedState):
            state.saved()
        self._loaded[task] = chain
        with _LIVE_LOCK:
            _LIVE[(self.root, task)] = (chain, state)
            _LIVE.move_to_end((self.root, task))
            while len(_LIVE) > LIVE_TASKS:
                _LIVE.popitem(last=False)
        fault_point("snapshot.before_prune")
        self._prune(task, version)

    def _prune(self, task: int, version: int) -> None:
        """Remove the files that restoring the newest ``keep`` versions up to ``version`` does not need (files
        of later versions, left by a batch that was not committed, are left to be replaced)."""
        files = self._files(task)
        needed: set[str] = set()
        for v in sorted(v for v in files if v <= version)[-self.keep:]:
            with contextlib.suppress(ExecutionError):  # a broken chain (a record left by a crash) needs nothing
                needed.update(f.name for f in self._chain(task, files, v))
        d = self._dir(task)
        for name in os.listdir(d):
            m = _FILE.fullmatch(name)
            if m is None:
                continue
            v = int(m.group(1) or m.group(2))
            if v < version and name not in needed:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(d, name))
                if v in files and files[v].name == name:  # the version's own file: its counters go too
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(os.path.join(d, f"{v}.stats.json"))
