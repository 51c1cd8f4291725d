"""Orca's subscription settings (``set_config_map``, ``set_local_config_once``) as what they mean on micro-batches.

In Orca a stream task reads a table through a subscription; in Headwater a subgraph's streaming query reads
its input table by micro-batches. Each of Orca's keys becomes a property of those micro-batches, or is refused
with the reason (``docs/orca-mapping.md``):

* ``subscription.batch_size`` (``subscription.batchSize``; rows, 0 = no limit): a micro-batch reads at most
  this many input rows (whole commits, at least one), the rest waits for the next micro-batch. Orca's
  ``batchSize`` also holds the handler back until that many rows wait (up to ``throttle``); a micro-batch
  here starts as soon as its input grows, so the setting bounds the work of a micro-batch, not its start.
* ``subscription.throttle`` (seconds as Orca gives them, or a duration such as ``"500ms"``): the subgraph's
  trigger interval, instead of ``connect(trigger_interval=...)``: micro-batches start at most once per
  interval, rows arriving meanwhile go into the next.
* ``subscription.time_trigger`` (``timeTrigger``): ``False`` is Headwater's behaviour; ``True`` is refused.
* ``subscription.source_offset`` (``sourceOffset``): ``-3`` (Orca's default) reads a source table from its first
  row; ``-1`` starts at the table's latest row when the graph is submitted or started
  (``start_stream_graph``), skipping what was appended before (never on a recovery: a restart after a crash
  or a move resumes from its checkpoint). Only on subgraphs that read one of the graph's input tables.
* ``private_table.cache_size`` (``privateTable.cacheSize``): refused (private tables keep no rows in memory).

>>> SubscriptionConfig.parse({"subscription.batchSize": 100, "subscription.throttle": 0.5}, where="set_config_map")
SubscriptionConfig(batch_size=100, throttle=datetime.timedelta(microseconds=500000), time_trigger=None, source_offset=None)
>>> SubscriptionConfig.parse({"subscription.source_offset": 0}, where="set_config_map")
Traceback (most recent call last):
...
headwater.errors.GraphDefinitionError: set_config_map: subscription.source_offset=0 is not one of Orca's values: -3 (from the first row) or -1 (from the latest row on start)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any

from headwater.durations import parse_duration
from headwater.errors import GraphDefinitionError, clip
from headwater.kernels.base.checks import snake_case

MAX_BATCH_ROWS = 2**31 - 1  # Orca's INT
MIN_THROTTLE = timedelta(milliseconds=1)
MAX_THROTTLE = timedelta(hours=1)
FROM_FIRST_ROW, FROM_LATEST_ROW = -3, -1

# Orca's key (camelCase) -> our field; the snake_case spelling of each key is accepted too
_KEYS = {
    "subscription.batchSize": "batch_size",
    "subscription.throttle": "throttle",
    "subscription.timeTrigger": "time_trigger",
    "subscription.sourceOffset": "source_offset",
}
_REFUSED = {
    "privateTable.cacheSize": "private tables keep no rows in memory (they are tables on the data directory, read "
                              "by version), so there is no cache to size; remove the key",
}


_SPELLINGS = {spelling: key for key in (*_KEYS, *_REFUSED) for spelling in (key, snake_case(key))}


@dataclass(frozen=True)
class SubscriptionConfig:
    """Subscription settings; ``None`` leaves a setting to the graph's (on an edge) or Headwater's default."""

    batch_size: int | None = None
    throttle: timedelta | None = None
    time_trigger: bool | None = None
    source_offset: int | None = None

    def __post_init__(self) -> None:
        if self.batch_size is not None and (isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int)
                                            or not 0 <= self.batch_size <= MAX_BATCH_ROWS):
            raise GraphDefinitionError(f"subscription.batch_size={clip(self.batch_size)}: expected an int of rows in "
                                       f"0..{MAX_BATCH_ROWS} (0: no limit)")
        if self.throttle is not None and (not isinstance(self.throttle, timedelta)
                                          or not MIN_THROTTLE <= self.throttle <= MAX_THROTTLE):
            raise GraphDefinitionError(f"subscription.throttle={clip(self.throttle)}: expected a trigger interval "
                                       f"from {MIN_THROTTLE} to {MAX_THROTTLE}, e.g. 1 (second) or '500ms'")
        if self.time_trigger is not None and not isinstance(self.time_trigger, bool):
            raise GraphDefinitionError(f"subscription.time_trigger={clip(self.time_trigger)}: expected True or False")
        if self.time_trigger:
            raise GraphDefinitionError(
                "subscription.time_trigger=True cannot apply: a micro-batch runs when its input table grows, and a "
                "system-time engine's time is its input's commit time, so a micro-batch without new rows would have "
                "no time to act on (nor replay the same); use an engine's update_time or force_trigger_time, or "
                "append heartbeat rows")
        if self.source_offset is not None and (isinstance(self.source_offset, bool)
                                               or self.source_offset not in (FROM_FIRST_ROW, FROM_LATEST_ROW)):
            raise GraphDefinitionError(
                f"subscription.source_offset={clip(self.source_offset)} is not one of Orca's values: -3 (from the "
                "first row) or -1 (from the latest row on start)")

    @classmethod
    def parse(cls, config: Any, *, where: str) -> SubscriptionConfig:
        """Settings from Orca's keys (camelCase or snake_case); unknown keys, bad values and refused keys raise."""
        if not isinstance(config, Mapping):
            raise GraphDefinitionError(f"{where}: expected a dict of settings, e.g. {{'subscription.batchSize': 100}}, "
                                       f"got {type(config).__name__}")
        values: dict[str, Any] = {}
        for raw, value in config.items():
            key = _SPELLINGS.get(raw) if isinstance(raw, str) else None
            if key is None:
                raise GraphDefinitionError(f"{where}: unknown key {clip(raw)}; keys: {', '.join(_KEYS)} (or their "
                                           "snake_case spellings, e.g. subscription.batch_size)")
            if key in _REFUSED:
                raise GraphDefinitionError(f"{where}: {raw} cannot apply: {_REFUSED[key]}")
            name = _KEYS[key]
            if name in values:
                raise GraphDefinitionError(f"{where}: {key} is given twice (as {key} and {snake_case(key)}); give it once")
            values[name] = _throttle(value, where) if name == "throttle" else value
        try:
            return cls(**values)
        except GraphDefinitionError as exc:
            raise GraphDefinitionError(f"{where}: {exc}") from None

    def over(self, base: SubscriptionConfig) -> SubscriptionConfig:
        """These settings, with ``base``'s where these leave one unset."""
        return replace(base, **{f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None})

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    @property
    def max_rows(self) -> int | None:
        """The most input rows a micro-batch reads (None: no limit)."""
        return self.batch_size or None

    def properties(self) -> dict[str, Any]:
        """The settings given, under Orca's keys (for ``explain()`` and the graph's JSON)."""
        out: dict[str, Any] = {}
        for key, name in _KEYS.items():
            value = getattr(self, name)
            if value is not None:
                out[key] = value.total_seconds() if isinstance(value, timedelta) else value
        return out

    @classmethod
    def from_properties(cls, data: Any, *, where: str) -> SubscriptionConfig:
        """The settings :meth:`properties` wrote (a graph's JSON); anything else raises GraphDefinitionError."""
        if not isinstance(data, Mapping) or not all(k in _KEYS for k in data):
            raise GraphDefinitionError(f"{where}: subscription settings must be an object of {', '.join(_KEYS)}, "
                                       f"got {clip(data)}")
        return cls.parse(data, where=where)

    def describe(self) -> str:
        """What the settings do here, for ``explain()``."""
        parts = []
        if self.max_rows:
            parts.append(f"at most {self.max_rows} rows per micro-batch")
        if self.throttle is not None:
            parts.append(f"trigger interval {self.throttle.total_seconds():g}s")
        if self.source_offset == FROM_LATEST_ROW:
            parts.append("from the latest row on start")
        elif self.source_offset == FROM_FIRST_ROW:
            parts.append("from the first row")
        return ", ".join(parts)


def _throttle(value: Any, where: str) -> timedelta:
    """Orca's throttle is seconds (a number); a duration with its unit is taken too."""
    if isinstance(value, bool):
        raise GraphDefinitionError(f"{where}: subscription.throttle={value}: expected seconds or a duration")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0 or value > MAX_THROTTLE.total_seconds():
            raise GraphDefinitionError(f"{where}: subscription.throttle={clip(value)}: expected seconds in "
                                       f"(0, {MAX_THROTTLE.total_seconds():g}]")
        return timedelta(seconds=value)
    return parse_duration(value, where=f"{where}: subscription.throttle")
