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

    def loaded(self, path: Path, name: str) -> DeltaTable:
        """The table's Delta log, loaded once per process and caught up; call with ``lock`` held.

        A table dropped and created again at the same path by another process (a worker's master) is another
        table: then everything cached for the old one is thrown away.
        """
        from deltalake import DeltaTable

        identity = table_identity(path)
        if identity is None:
            raise CatalogError(f"stream table {clip(name)}: no stream table at {path} (deleted?)")
        if self.delta is None or identity != self.identity:
            self.delta, self.index, self.known_version, self.identity = DeltaTable(str(path)), None, 0, identity
        else:
            self.delta.update_incremental()
        return self.delta


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
