"""Per-path shared state of the stream tables this process opened.

One :class:`TableState` per table directory: the writer lock of that table in this process, the newest
version seen, the loaded Delta log and the key index of a keyed table (:mod:`headwater.storage.keyed_dedup`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from headwater.errors import CatalogError, clip
from headwater.storage.keyed_dedup import KeyIndex
from headwater.storage.table_log import latest_version, transactions
from headwater.storage.table_meta import table_identity

if TYPE_CHECKING:
    from deltalake import DeltaTable


@dataclass
class TableState:
    """What this process keeps for one table directory; fields other than ``lock`` change under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    known_version: int = 0
    delta: DeltaTable | None = None
    index: KeyIndex | None = None
    identity: str = ""  # of the table the cached state belongs to (table_identity)
    # newest transaction version per application id, as of log version txns_version (-1: not read yet)
    txns: dict[str, int] = field(default_factory=dict)
    txns_version: int = -1
    writable: bool = False  # its Delta protocol was checked (headwater.storage.table_commit.check_writable)

    def _same_table(self, path: Path, name: str) -> None:
        """Forget what is cached when the directory now holds another table.

        A table dropped and created again at the same path by another process (a worker's master) is another
        table: then everything cached for the old one is thrown away.
        """
        identity = table_identity(path)
        if identity is None:
            raise CatalogError(f"stream table {clip(name)}: no stream table at {path} (deleted?)")
        if identity != self.identity:
            self.delta, self.index, self.known_version, self.identity = None, None, 0, identity
            self.txns, self.txns_version, self.writable = {}, -1, False

    def loaded(self, path: Path, name: str) -> DeltaTable:
        """The table's Delta log, loaded once per process and caught up; call with ``lock`` held."""
        from deltalake import DeltaTable

        self._same_table(path, name)
        if self.delta is None:
            self.delta = DeltaTable(str(path))
        else:
            self.delta.update_incremental()
        return self.delta

    def caught_up(self, path: Path, name: str) -> int:
        """The table's newest version, with :attr:`txns` read up to it; call with ``lock`` held.

        Reads only the commits since the last call (a few ``stat`` calls and small files), not delta-rs's
        snapshot: appends need no more to commit (:mod:`headwater.storage.table_commit`).
        """
        self._same_table(path, name)
        latest = latest_version(path, max(self.known_version, self.txns_version, 0))
        try:
            for v in range(self.txns_version + 1 if self.txns_version >= 0 else latest + 1, latest + 1):
                for app, done in transactions(path, v).items():
                    self.txns[app] = max(done, self.txns.get(app, -1))
        except FileNotFoundError:  # retention removed commits not read yet: ask delta-rs again from here
            self.txns = {}
        self.txns_version = latest
        self.known_version = max(self.known_version, latest)
        return latest

    def transaction(self, path: Path, name: str, app_id: str) -> int | None:
        """The newest transaction version ``app_id`` committed (None: none), as of :meth:`caught_up`'s version.

        An application not seen in the commits read since is asked of delta-rs once (its snapshot holds every
        application's newest transaction); call with ``lock`` held, after :meth:`caught_up`.
        """
        if app_id not in self.txns:
            done = self.loaded(path, name).transaction_version(app_id)
            self.txns[app_id] = -1 if done is None else int(done)
        return None if self.txns[app_id] < 0 else self.txns[app_id]

    def committed(self, version: int, txn: tuple[str, int] | None) -> None:
        """Record this process's own commit of ``version`` (the one after :meth:`caught_up`'s), with ``txn``."""
        if txn is not None:
            self.txns[txn[0]] = txn[1]
        self.txns_version = version
        self.known_version = max(self.known_version, version)


_STATES: dict[str, TableState] = {}
_STATES_LOCK = threading.Lock()


def _state_key(path: Path) -> str:
    return os.path.realpath(path)


def table_state(path: Path) -> TableState:
    """The shared state of the table at ``path`` (created on first use)."""
    key = _state_key(path)
    with _STATES_LOCK:
        st = _STATES.get(key)
        if st is None:
            st = _STATES[key] = TableState()
        return st


def forget_state(path: Path) -> None:
    """Drop what this process cached for the table at ``path`` (it was deleted or is being created)."""
    with _STATES_LOCK:
        _STATES.pop(_state_key(path), None)
