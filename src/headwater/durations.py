"""Durations: ``timedelta`` inside Headwater, strings such as ``"60s"`` accepted at the API edge.

>>> parse_duration("60s", where="window")
datetime.timedelta(seconds=60)
>>> to_micros(parse_duration("1.5ms", where="step"))
1500
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from headwater.errors import GraphDefinitionError, clip


def parse_duration(value: str | timedelta | pd.Timedelta, *, where: str, allow_zero: bool = False) -> timedelta:
    """Parse ``"60s"``, ``"1min"``, ``"500ms"``, ``"1h"`` or a ``timedelta`` into a ``timedelta``."""
    if isinstance(value, (bool, int | float)):
        raise GraphDefinitionError(
            f"{where}: got the bare number {clip(value)}; give a duration with its unit, e.g. '60s', '500ms' "
            "or datetime.timedelta(seconds=60)"
        )
    try:
        delta = pd.Timedelta(value)
    except (ValueError, TypeError):
        raise GraphDefinitionError(
            f"{where}: cannot read {clip(value)} as a duration; expected e.g. '60s', '1min', '500ms', '1h'"
        ) from None
    if pd.isna(delta) or delta < pd.Timedelta(0) or (delta == pd.Timedelta(0) and not allow_zero):
        raise GraphDefinitionError(f"{where}: duration must be {'non-negative' if allow_zero else 'positive'}, got {clip(value)}")
    if delta.value % 1000:
        raise GraphDefinitionError(f"{where}: {clip(value)} is finer than a microsecond, the resolution of timestamps")
    return delta.to_pytimedelta()


def to_micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def format_duration(delta: timedelta) -> str:
    """Shortest exact rendering: ``60s``, ``500ms``, ``1500us``."""
    us = to_micros(delta)
    for unit, size in (("h", 3_600_000_000), ("min", 60_000_000), ("s", 1_000_000), ("ms", 1000)):
        if us % size == 0 and us >= size:
            if unit == "min" and us % 3_600_000_000 == 0:
                continue
            return f"{us // size}{unit}"
    return f"{us}us"
