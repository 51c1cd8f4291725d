"""The as-of join engine: each left row with the latest right row of its key at or before its time (Orca C.12).

A left row of key k at time t is joined once the right side of k has a row later than t: then every
right row at or before t is known (each side arrives in time order per key), and the match is the last
of them (SQL ``aj``: an equal time wins; among equal times, the last to arrive). A left row is always
output, with NULL right columns when nothing matched. Because the match only depends on right rows that
arrived before the trigger, the output is the same for any interleaving of the two inputs.

``delayed_time`` trades that exactness for latency: a waiting left row is joined with what has arrived
when its key's newest left row is more than ``delayed_time`` later, or when it has waited
``2 × delayed_time`` (at least 2 s) of processing time, measured in micro-batch commit times so that a
replay forces exactly the same rows. ``use_system_time=True`` joins every left row on arrival with the
right rows that arrived before it; its output time is the micro-batch's commit time.

``sort_by_time=True`` (Orca's sortByTime) is for inputs in time order across keys: a left row at t is
joined once the right side of *any* key has a row later than t, and the output is in time order across
keys (ties in arrival order). Its rows must then meet in one task, so it cannot follow ``parallelize``.

Rows older than an earlier row of their key on the same side are dropped (Orca: inputs must be ordered);
with ``sort_by_time``, rows older than an earlier row of any key on their side.
Right rows that no future left row can match are purged, so ``garbage_size`` is accepted but has no
effect on memory or results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.durations import format_duration, to_micros
from headwater.engines.arguments import arg, duration, optional
from headwater.engines.base import SEQ, EngineKind, KeyTable, Processor
from headwater.engines.columns import to_arrow
from headwater.engines.joins.base import (
    ARRIVAL,
    SLOT,
    TIME,
    JoinEngine,
    Sides,
    concat,
    frame,
    grow,
    with_work_columns,
)
from headwater.engines.joins.ordering import NO_TIME, RightRows, in_order, in_time_order, newest_time
from headwater.errors import GraphDefinitionError


@dataclass(frozen=True)
class AsofJoinEngine(JoinEngine):
    """Parameters of ``asof_join_engine`` (validated against both input schemas on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.ASOF_JOIN
    use_system_time: bool = False
    delayed_time: timedelta | None = field(default=None, metadata=arg(optional(duration)))
    garbage_size: int = 5000
    sort_by_time: bool = False

    def check(self) -> None:
        if not self.use_system_time and not self.time_column:
            raise GraphDefinitionError(f"{self.where}: time_column is required unless use_system_time=True")
        if self.delayed_time is not None and (self.use_system_time or self.delayed_time <= timedelta(0)):
            raise GraphDefinitionError(f"{self.where}: delayed_time must be positive and needs event time "
                                       "(use_system_time=False)")
        if self.sort_by_time and (self.use_system_time or self.delayed_time is not None):
            raise GraphDefinitionError(f"{self.where}: sort_by_time needs event time and no delayed_time (Orca: "
                                       "the inputs are in time order across keys, so no row waits long)")

    @property
    def needs_one_task(self) -> bool:
        return self.sort_by_time

    def prefix(self) -> list[tuple[str, str]]:
        if self.use_system_time:
            taken = self.time_column or "time"
            return [(taken, "timestamp")] + [(k, self.left_schema[k]) for k in self.matching_column]
        return super().prefix()

    def properties(self) -> dict[str, Any]:
        props = super().properties()
        props["useSystemTime"] = self.use_system_time
        if self.delayed_time is not None:
            props["delayedTime"] = format_duration(self.delayed_time)
        if self.sort_by_time:
            props["sortByTime"] = True
        return props



class AsofJoinProcessor(Processor, runs=AsofJoinEngine):
    def __init__(self, spec: AsofJoinEngine) -> None:
        self.spec = spec
        self.sides = Sides(spec)
        self.left_time_type = spec.left_schema[spec.time_column] if spec.time_column else None
        self.right_time_type = spec.right_schema[spec.right_time_column or spec.time_column] if spec.time_column else None
        self.delay = to_micros(spec.delayed_time) if spec.delayed_time else None

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "left": None, "right": None, "left_latest": np.empty(0, np.int64),
                "right_latest": np.empty(0, np.int64), "dropped": 0}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec, sides = self.spec, self.sides
        left, right = sides.layout.split(table)
        keys = KeyTable(state["keys"])
        if spec.use_system_time:
            return self._on_arrival(state, keys, left, right, batch_time)
        lt_name, rt_name = spec.time_column, spec.right_time_column or spec.time_column
        assert lt_name and rt_name and self.left_time_type and self.right_time_type
        valid_left, valid_right = left.filter(left[lt_name].is_valid()), right.filter(right[rt_name].is_valid())
        dropped = state["dropped"] + (left.num_rows - valid_left.num_rows) + (right.num_rows - valid_right.num_rows)
        ls, rs = sides.slots(keys, valid_left, 0), sides.slots(keys, valid_right, 1)
        lt = sides.times(valid_left, lt_name, self.left_time_type)
        rt = sides.times(valid_right, rt_name, self.right_time_type)
        left_latest = grow(state["left_latest"], len(keys), NO_TIME)
        right_latest = grow(state["right_latest"], len(keys), NO_TIME)
        ordered = in_time_order if spec.sort_by_time else in_order
        keep_left, keep_right = ordered(ls, lt, left_latest), ordered(rs, rt, right_latest)
        dropped += int((~keep_left).sum() + (~keep_right).sum())
        new_left = with_work_columns(valid_left.filter(pa.array(keep_left)), ls[keep_left], lt[keep_left], batch_time)
        new_right = with_work_columns(valid_right.filter(pa.array(keep_right)), rs[keep_right], rt[keep_right])
        pending = concat([t for t in (state["left"], new_left) if t is not None])
        history = concat([t for t in (state["right"], new_right) if t is not None])

        waiting = frame(pending, SLOT, TIME, SEQ, ARRIVAL)
        passed = newest_time(right_latest) if spec.sort_by_time else right_latest[waiting[SLOT].to_numpy()]
        due = passed > waiting[TIME].to_numpy()
        forced = np.zeros(len(waiting), dtype=bool)
        if self.delay is not None:
            newest = left_latest[waiting[SLOT].to_numpy()]
            forced = ~due & ((newest - waiting[TIME].to_numpy() > self.delay) |
                             (batch_time - waiting[ARRIVAL].to_numpy() >= max(2 * self.delay / 1e6, 2.0)))
        joined = waiting[due | forced]
        rights = RightRows.of(history)
        match, later = rights.around(joined[SLOT].to_numpy(), joined[TIME].to_numpy())
        batch_end = int(table[SEQ].to_numpy().max()) if table.num_rows else 0
        later_seq = np.where(later < 0, -1, rights.seq[np.maximum(later, 0)])
        trigger = np.where(due[due | forced], np.maximum(joined[SEQ].to_numpy(), later_seq), batch_end)
        order = np.lexsort((joined[SEQ].to_numpy(), joined[TIME].to_numpy() if spec.sort_by_time else trigger))
        trigger = np.maximum.accumulate(trigger[order]) if len(order) else trigger  # ordered output, ordered keys
        left_rows = pending.take(pa.array(joined["pos"].to_numpy()[order]))
        found = match[order]
        right_rows = history.take(pa.array(rights.pos[np.maximum(found, 0)], mask=found < 0)) if len(order) else None
        out = sides.output(left_rows, right_rows,
                           [left_rows[lt_name].combine_chunks(), *sides.keys_of(left_rows, None)], trigger)

        still = pending.filter(pa.array(~(due | forced)))
        new_state = {"keys": keys.keys, "left": still if still.num_rows else None,
                     "right": self._purge(history, rights, still, left_latest), "left_latest": left_latest,
                     "right_latest": right_latest, "dropped": dropped}
        return new_state, out

    @staticmethod
    def _purge(history: pa.Table, rights: RightRows, waiting: pa.Table, left_latest: np.ndarray) -> pa.Table | None:
        """Keep, per key, the right rows from the last one at or before the earliest time a left row can still
        have (a waiting row's, else the key's newest left time): earlier ones can never be a match again."""
        if history.num_rows == 0:
            return None
        floor = left_latest.copy()
        if waiting.num_rows:
            w = frame(waiting, SLOT, TIME).groupby(SLOT)[TIME].min()
            floor[w.index.to_numpy()] = np.minimum(floor[w.index.to_numpy()], w.to_numpy())
        slots = np.flatnonzero(floor > NO_TIME)
        cut = np.full(len(floor), NO_TIME, dtype=np.int64)  # per key: drop right rows before this time
        found, _ = rights.around(slots, floor[slots])
        cut[slots[found >= 0]] = rights.time[found[found >= 0]]
        times = history[TIME].to_numpy()
        keep = times >= cut[history[SLOT].to_numpy()]
        kept = history.filter(pa.array(keep))
        return kept if kept.num_rows else None

    def _on_arrival(self, state: dict[str, Any], keys: KeyTable, left: pa.Table, right: pa.Table,
                    batch_time: float) -> tuple[dict[str, Any], pa.Table]:
        """use_system_time: each left row with the last right row of its key that arrived before it."""
        sides = self.sides
        new_right = with_work_columns(right, sides.slots(keys, right, 1))
        history = concat([t for t in (state["right"], new_right) if t is not None])
        lefts = frame(with_work_columns(left, sides.slots(keys, left, 0)), SLOT, SEQ)
        rights = frame(history, SLOT, SEQ)
        match = pd.merge_asof(lefts.sort_values(SEQ), rights.rename(columns={"pos": "rpos"}), on=SEQ, by=SLOT,
                              direction="backward", allow_exact_matches=False)
        right_pos = match["rpos"].to_numpy(np.float64)
        right_rows = history.take(pa.array(np.where(np.isnan(right_pos), 0, right_pos).astype(np.int64),
                                           mask=np.isnan(right_pos))) if len(match) else None
        left_rows = left.take(pa.array(match["pos"].to_numpy()))
        stamp = to_arrow(np.full(len(match), batch_time * 1e6), "timestamp")
        out = sides.output(left_rows, right_rows, [stamp, *sides.keys_of(left_rows, None)], match[SEQ].to_numpy())
        slots = history[SLOT].to_numpy()
        latest = pd.Series(np.arange(len(slots))).groupby(slots).max().to_numpy()  # one right row per key suffices
        kept = history.take(pa.array(np.sort(latest))) if len(latest) else None
        return {**state, "keys": keys.keys, "right": kept}, out
