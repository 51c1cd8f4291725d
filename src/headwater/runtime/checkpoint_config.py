"""Orca's checkpoint configuration (A.7), mapped onto micro-batches.

In Headwater every micro-batch is a checkpoint: Spark logs the batch's input range before it runs, the
engines save their state at its end, and its output commits with the batch's id. So Orca's keys mean:

=============================== ====================================================================
key (Orca's camelCase)          here
=============================== ====================================================================
``enable``                      always on: exactly-once rests on it. ``True`` accepted, ``False`` refused
``interval``                    refused: a checkpoint is taken at every micro-batch, paced by the
                                trigger interval (``connect(trigger_interval=...)``)
``timeout``                     refused: a micro-batch runs until it ends or fails; a failure is
                                handled by ``consecutive_failures``
``aligned_timeout``             refused: micro-batch boundaries are aligned by construction, there are
                                no barriers to wait for
``min_interval_between_ckpt``   refused: as ``interval``
``consecutive_failures``        failed restarts in a row (no micro-batch committed in between) after
                                which the graph goes from ``error`` to ``failed``; 0-102400, default 3
``max_concurrent_checkpoints``  1 only: a subgraph's micro-batches run one after another
``max_retained_checkpoints``    engine state snapshots kept per stream task (the newest N; older
                                checkpoints are reported ``PURGED``); 2-1024, default 3. At least 2:
                                a batch cut off before its commit is replayed from the one before
=============================== ====================================================================

>>> config = CheckpointConfig.parse({"maxRetainedCheckpoints": 5, "consecutive_failures": 1})
>>> config.max_retained_checkpoints, config.consecutive_failures
(5, 1)
>>> CheckpointConfig.parse({"interval": 60_000})
Traceback (most recent call last):
...
headwater.errors.ConfigurationError: checkpoint_config: 'interval' cannot apply: a checkpoint is taken at every micro-batch, paced by the trigger interval (connect(trigger_interval=...)); remove it
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from headwater.errors import ConfigurationError, clip

SEMANTICS_MODE = "exactly_once"  # Orca's checkpointMod: every output commit is idempotent (batch id)

REFUSED = {
    "interval": "a checkpoint is taken at every micro-batch, paced by the trigger interval "
                "(connect(trigger_interval=...))",
    "min_interval_between_ckpt": "a checkpoint is taken at every micro-batch, paced by the trigger interval "
                                 "(connect(trigger_interval=...))",
    "timeout": "a micro-batch runs until it ends or fails, and a failure restarts the graph "
               "(see consecutive_failures)",
    "aligned_timeout": "micro-batch boundaries are aligned by construction: there are no barriers to wait for",
}
RANGES = {"consecutive_failures": (0, 102_400), "max_retained_checkpoints": (2, 1024),
          "max_concurrent_checkpoints": (1, 1)}


def snake_case(key: str) -> str:
    """``maxRetainedCheckpoints`` -> ``max_retained_checkpoints`` (snake_case keys pass through)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


@dataclass(frozen=True)
class CheckpointConfig:
    consecutive_failures: int = 3
    max_retained_checkpoints: int = 3

    @classmethod
    def parse(cls, config: Mapping[str, Any] | None) -> CheckpointConfig:
        """Validate Orca's keys (camelCase or snake_case); a key that cannot apply is refused with the reason."""
        if config is None:
            return cls()
        if not isinstance(config, Mapping):
            raise ConfigurationError(f"checkpoint_config must be a dict, e.g. {{'max_retained_checkpoints': 5}}; "
                                     f"got {type(config).__name__}")
        values: dict[str, int] = {}
        for raw, value in config.items():
            key = snake_case(str(raw))
            if key in REFUSED:
                raise ConfigurationError(f"checkpoint_config: {clip(raw)} cannot apply: {REFUSED[key]}; remove it")
            if key == "enable":
                if value is not True:
                    raise ConfigurationError("checkpoint_config: enable must be True: every micro-batch is a "
                                             "checkpoint, and exactly-once rests on them")
                continue
            if key not in RANGES:
                known = ", ".join(["enable", *RANGES, *REFUSED])
                raise ConfigurationError(f"checkpoint_config: unknown key {clip(raw)}; Orca's keys are {known}")
            low, high = RANGES[key]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigurationError(f"checkpoint_config: {key} must be an integer in [{low}, {high}], "
                                         f"got {clip(value)}")
            if key != "max_concurrent_checkpoints":
                values[key] = value
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | None) -> CheckpointConfig:
        return cls() if text is None else cls(**json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        """What ``session.checkpoint_config(graph)`` shows: the settings and what is fixed here."""
        return {"enable": True, **asdict(self), "max_concurrent_checkpoints": 1, "checkpoint_mod": SEMANTICS_MODE}
