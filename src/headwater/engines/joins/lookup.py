"""The lookup join engine: each left row joined at once with the right side as it stands (Orca C.14).

Only left rows trigger output; nothing waits. The right side is a cache of the right stream: by default
the latest row per key (latest by ``right_time_column`` when given, ties to the last arrival; else the
last arrival), or every row with ``keep_duplicates=True`` (then the join is inner and a left row can
emit several rows). A left row sees the right rows committed before it in the join input's commit
order (see :mod:`headwater.engines.joins.base`), so a replay gives the same rows; a different
interleaving of the two inputs is a different input here, as in Orca. Output: the matching columns,
then the metrics (no time column). Unmatched left rows carry NULL right columns (``is_inner_join=False``,
the default) or are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.engines.base import SEQ, EngineKind, KeyTable, Processor
from headwater.engines.joins.base import SLOT, TIME, JoinEngine, Sides, concat, frame, with_work_columns


@dataclass(frozen=True)
class LookupJoinEngine(JoinEngine):
    """Parameters of ``lookup_join_engine`` (validated against both input schemas on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.LOOKUP_JOIN
    prefix_time: ClassVar[bool] = False
    keep_duplicates: bool = False
    is_inner_join: bool = False

    def check(self) -> None:
        if self.keep_duplicates and not self.is_inner_join:
            object.__setattr__(self, "is_inner_join", True)  # Orca: keeping duplicates makes the join inner

    def properties(self) -> dict[str, Any]:
        props = {**super().properties(), "keepDuplicates": self.keep_duplicates, "isInnerJoin": self.is_inner_join}
        if self.right_time_column:
            props["rightTimeColumn"] = self.right_time_column
        return props



class LookupJoinProcessor(Processor, runs=LookupJoinEngine):
    def __init__(self, spec: LookupJoinEngine) -> None:
        self.spec = spec
        self.sides = Sides(spec)
        self.time = spec.right_time_column
        self.time_type = spec.right_schema[self.time] if self.time else None

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "right": None}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec, sides = self.spec, self.sides
        left, right = sides.layout.split(table)
        keys = KeyTable(state["keys"])
        if self.time:
            assert self.time_type
            right = right.filter(right[self.time].is_valid())
        times = sides.times(right, self.time, self.time_type) if self.time and self.time_type else None
        new_right = with_work_columns(right, sides.slots(keys, right, 1), times)
        cache = concat([t for t in (state["right"], new_right) if t is not None])
        lefts = frame(with_work_columns(left, sides.slots(keys, left, 0)), SLOT, SEQ)
        rights = frame(cache, *((SLOT, SEQ, TIME) if self.time else (SLOT, SEQ))).sort_values(SEQ, kind="stable")
        if spec.keep_duplicates:
            pairs = lefts.merge(rights, on=SLOT, suffixes=("", "_r"))
            pairs = pairs[pairs[f"{SEQ}_r"] < pairs[SEQ]].sort_values([SEQ, f"{SEQ}_r"], kind="stable")
            right_pos = pairs["pos_r"].to_numpy(np.float64)
            kept = cache
        else:
            rights["best"] = self._best_so_far(rights)
            pairs = pd.merge_asof(lefts.sort_values(SEQ), rights[[SEQ, SLOT, "best"]], on=SEQ, by=SLOT,
                                  direction="backward", allow_exact_matches=False)
            if spec.is_inner_join:
                pairs = pairs[pairs["best"].notna()]
            right_pos = pairs["best"].to_numpy(np.float64)
            last = rights.groupby(SLOT, sort=False)["best"].last().to_numpy(np.int64)
            kept = cache.take(pa.array(np.sort(last))) if len(last) else cache
        missing = np.isnan(right_pos)
        left_rows = left.take(pa.array(pairs["pos"].to_numpy()))
        right_rows = cache.take(pa.array(np.where(missing, 0, right_pos).astype(np.int64), mask=missing)) \
            if len(pairs) else None
        out = sides.output(left_rows, right_rows, sides.keys_of(left_rows, None), pairs[SEQ].to_numpy())
        return {"keys": keys.keys, "right": kept if kept.num_rows else None}, out

    def _best_so_far(self, rights: pd.DataFrame) -> np.ndarray:
        """For each right row (in arrival order), the position of its key's current row once it arrived: the
        row itself, or with ``right_time_column`` the latest in time so far (ties: the later arrival)."""
        if not self.time:
            return rights["pos"].to_numpy()
        newest = rights.groupby(SLOT, sort=False)[TIME].cummax()
        best = rights["pos"].where(rights[TIME] >= newest)
        return best.groupby(rights[SLOT]).ffill().to_numpy(np.float64)
