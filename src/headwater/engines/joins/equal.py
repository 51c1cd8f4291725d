"""The equal join engine: rows of the two sides with the same key and the same time, joined once (Orca C.13).

Each side's rows wait until the other side's row with the same (key, time) arrives; the pair is emitted
then, once. Made for inputs unique on (key, time) per side, e.g. one bar per symbol and minute from two
time-series engines. Where a side repeats a (key, time), the **first** row of that side is the one joined
and later repeats are dropped: unlike Orca's keyed cache (where a repeat replaces a waiting row), this
keeps the output the same for any interleaving of the two inputs.

Memory: when a side holds more than ``garbage_size`` waiting rows, those older than that side's newest
time by more than ``max_delayed_time`` are dropped and can no longer match (Orca's rule, so results may
then differ from a SQL equi-join); the (key, time) pairs already joined are forgotten by the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.durations import format_duration, to_micros
from headwater.engines.arguments import arg, duration_or_zero
from headwater.engines.base import SEQ, EngineKind, KeyTable, Processor
from headwater.engines.joins.base import SLOT, TIME, JoinEngine, Sides, concat, frame, with_work_columns
from headwater.errors import GraphDefinitionError


@dataclass(frozen=True)
class EqualJoinEngine(JoinEngine):
    """Parameters of ``equal_join_engine`` (validated against both input schemas on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.EQUAL_JOIN
    garbage_size: int = 5000
    max_delayed_time: timedelta = field(default=timedelta(seconds=3), metadata=arg(duration_or_zero))

    def check(self) -> None:
        if not self.time_column:
            raise GraphDefinitionError(f"{self.where}: time_column is required (rows join on key and time)")
        if self.max_delayed_time < timedelta(0):
            raise GraphDefinitionError(f"{self.where}: max_delayed_time must not be negative")

    def properties(self) -> dict[str, Any]:
        return {**super().properties(), "garbageSize": self.garbage_size,
                "maxDelayedTime": format_duration(self.max_delayed_time)}



class EqualJoinProcessor(Processor, runs=EqualJoinEngine):
    def __init__(self, spec: EqualJoinEngine) -> None:
        self.spec = spec
        self.sides = Sides(spec)
        assert spec.time_column
        self.time_names = (spec.time_column, spec.right_time_column or spec.time_column)
        self.time_types = (spec.left_schema[self.time_names[0]], spec.right_schema[self.time_names[1]])
        self.max_delay = to_micros(spec.max_delayed_time)

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "waiting": [None, None], "joined": pd.DataFrame({SLOT: [], TIME: []}, dtype=np.int64),
                "newest": [None, None]}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        sides = self.sides
        keys = KeyTable(state["keys"])
        joined: pd.DataFrame = state["joined"]
        waiting, newest = list(state["waiting"]), list(state["newest"])
        for side, rows in enumerate(sides.layout.split(table)):
            rows = rows.filter(rows[self.time_names[side]].is_valid())
            times = sides.times(rows, self.time_names[side], self.time_types[side])
            rows = with_work_columns(rows, sides.slots(keys, rows, side), times)
            if rows.num_rows:
                top = int(times.max())
                newest[side] = top if newest[side] is None else max(newest[side], top)
            waiting[side] = self._first_only(waiting[side], rows, joined)
        left, right = waiting
        if left is None or right is None:
            return {**state, "keys": keys.keys, "waiting": waiting, "newest": newest}, sides.empty()
        pairs = frame(left, SLOT, TIME, SEQ).merge(frame(right, SLOT, TIME, SEQ), on=[SLOT, TIME],
                                                   suffixes=("_l", "_r"))
        trigger = np.maximum(pairs[f"{SEQ}_l"].to_numpy(), pairs[f"{SEQ}_r"].to_numpy())
        order = np.lexsort((pairs[f"{SEQ}_l"].to_numpy(), trigger))
        left_rows = left.take(pa.array(pairs["pos_l"].to_numpy()[order]))
        right_rows = right.take(pa.array(pairs["pos_r"].to_numpy()[order]))
        out = sides.output(left_rows, right_rows,
                           [left_rows[self.time_names[0]].combine_chunks(), *sides.keys_of(left_rows, None)],
                           trigger[order])
        joined = pd.concat([joined, pairs[[SLOT, TIME]]], ignore_index=True)
        for side, pos in ((0, pairs["pos_l"]), (1, pairs["pos_r"])):
            rest = np.ones(waiting[side].num_rows, dtype=bool)
            rest[pos.to_numpy()] = False
            waiting[side] = self._collect(waiting[side].filter(pa.array(rest)), newest[side])
        if len(joined) > self.spec.garbage_size:
            joined = joined[joined[TIME] >= max(n for n in newest if n is not None) - self.max_delay]
        return {"keys": keys.keys, "waiting": waiting, "joined": joined.reset_index(drop=True), "newest": newest}, out

    def _first_only(self, waiting: pa.Table | None, rows: pa.Table, joined: pd.DataFrame) -> pa.Table | None:
        """``waiting`` plus the new rows whose (key, time) this side has not seen yet (waiting or joined)."""
        if rows.num_rows == 0:
            return waiting
        seen = pd.concat([joined, frame(waiting, SLOT, TIME)[[SLOT, TIME]]]) if waiting is not None else joined
        new = frame(rows, SLOT, TIME)
        fresh = ~new.duplicated([SLOT, TIME]).to_numpy()
        if len(seen):
            known = pd.MultiIndex.from_frame(seen[[SLOT, TIME]].astype(np.int64))
            fresh &= ~pd.MultiIndex.from_frame(new[[SLOT, TIME]]).isin(known)
        rows = rows.filter(pa.array(fresh))
        return concat([t for t in (waiting, rows) if t is not None]) if rows.num_rows or waiting is None else waiting

    def _collect(self, waiting: pa.Table, newest: int | None) -> pa.Table | None:
        if waiting.num_rows > self.spec.garbage_size and newest is not None:
            waiting = waiting.filter(pa.array(waiting[TIME].to_numpy() >= newest - self.max_delay))
        return waiting if waiting.num_rows else None
