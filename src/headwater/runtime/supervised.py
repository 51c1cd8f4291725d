"""What the master's helpers that watch its graphs (:mod:`~headwater.runtime.supervisor`,
:mod:`~headwater.runtime.disk_wait`) may use of it: the master satisfies this protocol, and the helpers do not
import the master (which creates them)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.runtime.events import EventLog
from headwater.runtime.lifecycle import GraphStatus
from headwater.runtime.protocol import WorkerPort
from headwater.storage.disk_space import DiskSpace
from headwater.storage.metadata import MetadataStore
from headwater.storage.records import GraphRecord


class SupervisedMaster(Protocol):
    data_dir: Path
    store: MetadataStore
    events: EventLog
    worker: WorkerPort
    disk_space: DiskSpace

    def set_status(self, rec: GraphRecord, target: GraphStatus, reason: str = "", *, action: str) -> None: ...

    def restart(self, rec: GraphRecord) -> None: ...

    def is_recovering(self, fqn: str) -> bool: ...

    def checkpoint_settings(self, fqn: str) -> CheckpointConfig: ...
