"""The snapshot join engine: a row arriving on either side joined with the other side's cache (Orca C.17).

Both sides trigger. Each side caches its latest row per key (or every row, with
``keep_left_duplicates`` / ``keep_right_duplicates``); an arriving row is joined with the other side's
cached rows of its key as they stand (rows committed before it in the join input, see
:mod:`headwater.engines.joins.base`). ``is_inner_join=True`` (the default) emits only matches; ``False``
also emits an arrival without a match, the other side NULL. Output: the matching columns, the left and
the right time column (the right one named ``right_<name>`` if the left has that name; without
``time_column``, the commit times of the micro-batches the rows arrived in, as ``left_time`` and
``right_time``), then the metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.engines.base import SEQ, EngineKind, KeyTable, Processor
from headwater.engines.columns import to_arrow
from headwater.engines.joins.base import (
    ARRIVAL,
    LEFT,
    RIGHT,
    SLOT,
    JoinEngine,
    Sides,
    concat,
    frame,
    with_work_columns,
)


@dataclass(frozen=True)
class SnapshotJoinEngine(JoinEngine):
    """Parameters of ``snapshot_join_engine`` (validated against both input schemas on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.SNAPSHOT_JOIN
    keep_left_duplicates: bool = False
    keep_right_duplicates: bool = False
    is_inner_join: bool = True

    def time_names(self) -> tuple[tuple[str, str], tuple[str, str]]:
        """(output name, type) of the left and the right time column."""
        if not self.time_column:
            return ("left_time", "timestamp"), ("right_time", "timestamp")
        right = self.right_time_column or self.time_column
        taken = {self.time_column, *self.matching_column}
        right_name = f"right_{right}" if right in taken else right
        return (self.time_column, self.left_schema[self.time_column]), (right_name, self.right_schema[right])

    def prefix(self) -> list[tuple[str, str]]:
        return [(k, self.left_schema[k]) for k in self.matching_column] + list(self.time_names())

    def properties(self) -> dict[str, Any]:
        return {**super().properties(), "keepLeftDuplicates": self.keep_left_duplicates,
                "keepRightDuplicates": self.keep_right_duplicates, "isInnerJoin": self.is_inner_join}



class SnapshotJoinProcessor(Processor, runs=SnapshotJoinEngine):
    def __init__(self, spec: SnapshotJoinEngine) -> None:
        self.spec = spec
        self.sides = Sides(spec)
        self.keep_all = (spec.keep_left_duplicates, spec.keep_right_duplicates)

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "cache": [None, None]}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        sides = self.sides
        keys = KeyTable(state["keys"])
        caches = []
        for side, rows in enumerate(sides.layout.split(table)):
            rows = with_work_columns(rows, sides.slots(keys, rows, side), arrival=batch_time)
            caches.append(concat([t for t in (state["cache"][side], rows) if t is not None]))
        first_new = int(table[SEQ].to_numpy().min()) if table.num_rows else 0
        frames = [frame(c, SLOT, SEQ) for c in caches]
        pieces = []  # (left pos, right pos, trigger seq) per output row; -1: that side is NULL
        for side in (LEFT, RIGHT):
            other = 1 - side
            arrivals = frames[side][frames[side][SEQ] >= first_new]
            pairs = arrivals.merge(frames[other], on=SLOT, how="left" if not self.spec.is_inner_join else "inner",
                                   suffixes=("", "_o"))
            pairs = pairs[~(pairs[f"{SEQ}_o"] >= pairs[SEQ])] if len(pairs) else pairs  # only rows already there
            if not self.keep_all[other] and len(pairs):  # only the latest of the other side's rows
                pairs = pairs[pairs[f"{SEQ}_o"].isna() | (pairs[f"{SEQ}_o"] == pairs.groupby("pos")[f"{SEQ}_o"].transform("max"))]
            if not self.spec.is_inner_join:
                unmatched = arrivals[~arrivals["pos"].isin(pairs.loc[pairs[f"{SEQ}_o"].notna(), "pos"])]
                pairs = pd.concat([pairs[pairs[f"{SEQ}_o"].notna()],
                                   unmatched.assign(**{"pos_o": np.nan, f"{SEQ}_o": np.nan})], ignore_index=True)
            own, theirs = pairs["pos"].to_numpy(np.float64), pairs["pos_o"].to_numpy(np.float64)
            pieces.append(pd.DataFrame({"l": own if side == LEFT else theirs, "r": theirs if side == LEFT else own,
                                        "seq": pairs[SEQ].to_numpy(np.int64), "o": pairs[f"{SEQ}_o"].fillna(-1).to_numpy()}))
        rows = pd.concat(pieces, ignore_index=True).sort_values(["seq", "o"], kind="stable")
        out = self._output(caches, rows) if len(rows) else sides.empty()
        kept = [self._keep(c, keep_all) for c, keep_all in zip(caches, self.keep_all, strict=True)]
        return {"keys": keys.keys, "cache": kept}, out

    def _output(self, caches: list[pa.Table], rows: pd.DataFrame) -> pa.Table:
        sides, spec = self.sides, self.spec
        taken = []
        for side, column in ((LEFT, "l"), (RIGHT, "r")):
            pos = rows[column].to_numpy(np.float64)
            missing = np.isnan(pos)
            taken.append(caches[side].take(pa.array(np.where(missing, 0, pos).astype(np.int64), mask=missing)))
        left_rows, right_rows = taken
        if spec.time_column:
            times = [left_rows[spec.time_column].combine_chunks(),
                     right_rows[spec.right_time_column or spec.time_column].combine_chunks()]
        else:
            times = [to_arrow(t[ARRIVAL].to_numpy(zero_copy_only=False) * 1e6, "timestamp") for t in taken]
        return sides.output(left_rows, right_rows, [*sides.keys_of(left_rows, right_rows), *times],
                            rows["seq"].to_numpy(np.int64))

    @staticmethod
    def _keep(cache: pa.Table, keep_all: bool) -> pa.Table | None:
        if not keep_all and cache.num_rows:
            latest = pd.Series(np.arange(cache.num_rows)).groupby(cache[SLOT].to_numpy()).max().to_numpy()
            cache = cache.take(pa.array(np.sort(latest)))
        return cache if cache.num_rows else None
