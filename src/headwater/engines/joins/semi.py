"""The left semi join engine: each left row emitted once, with the right row of its key (Orca C.16).

A left row whose key has a right row is emitted at once; otherwise it waits until the first right row
of its key arrives. The right side keeps one row per key: the first (``update_right_table=False``, the
default: the output is then the same for any interleaving of the inputs) or the latest to arrive
(``True``: a left row gets the right row current when it is matched). Right rows are never purged, so
the number of keys must be bounded. Output: the matching columns, then the metrics. Left rows with a
NULL in a matching column wait like any other key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.engines.base import SEQ, EngineKind, KeyTable, Processor
from headwater.engines.joins.base import SLOT, JoinEngine, Sides, concat, frame, with_work_columns


@dataclass(frozen=True)
class LeftSemiJoinEngine(JoinEngine):
    """Parameters of ``left_semi_join_engine`` (validated against both input schemas on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.LEFT_SEMI_JOIN
    prefix_time: ClassVar[bool] = False
    garbage_size: int = 5000
    update_right_table: bool = False

    def properties(self) -> dict[str, Any]:
        return {**super().properties(), "updateRightTable": self.update_right_table}



class LeftSemiJoinProcessor(Processor, runs=LeftSemiJoinEngine):
    def __init__(self, spec: LeftSemiJoinEngine) -> None:
        self.spec = spec
        self.sides = Sides(spec)

    def new_state(self) -> dict[str, Any]:
        return {"keys": [], "left": None, "right": None}

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        sides = self.sides
        left, right = sides.layout.split(table)
        keys = KeyTable(state["keys"])
        waiting = concat([t for t in (state["left"], with_work_columns(left, sides.slots(keys, left, 0))) if t is not None])
        cache = concat([t for t in (state["right"], with_work_columns(right, sides.slots(keys, right, 1))) if t is not None])
        lefts = frame(waiting, SLOT, SEQ).sort_values(SEQ, kind="stable")
        rights = frame(cache, SLOT, SEQ).sort_values(SEQ, kind="stable")
        if self.spec.update_right_table:  # the latest right row before the left row, else the first after it
            rights_renamed = rights.rename(columns={"pos": "rpos"}).assign(rseq=rights[SEQ])
            before = pd.merge_asof(lefts, rights_renamed, on=SEQ, by=SLOT, direction="backward", allow_exact_matches=False)
            after = pd.merge_asof(lefts, rights_renamed, on=SEQ, by=SLOT, direction="forward", allow_exact_matches=False)
            right_pos = before["rpos"].fillna(after["rpos"]).to_numpy(np.float64)
            right_seq = before["rseq"].fillna(after["rseq"]).to_numpy(np.float64)
            keep_rows = rights.groupby(SLOT, sort=False)["pos"].last().to_numpy(np.int64)
        else:  # the key's first right row, whenever it arrived
            first = rights.groupby(SLOT, sort=False).first()
            right_pos = first["pos"].reindex(lefts[SLOT].to_numpy()).to_numpy(np.float64)
            right_seq = first[SEQ].reindex(lefts[SLOT].to_numpy()).to_numpy(np.float64)
            keep_rows = first["pos"].to_numpy(np.int64)
        matched = ~np.isnan(right_pos)
        trigger = np.maximum(lefts[SEQ].to_numpy()[matched], right_seq[matched].astype(np.int64))
        order = np.lexsort((lefts[SEQ].to_numpy()[matched], trigger))
        left_rows = waiting.take(pa.array(lefts["pos"].to_numpy()[matched][order]))
        right_rows = cache.take(pa.array(right_pos[matched][order].astype(np.int64)))
        out = sides.output(left_rows, right_rows, sides.keys_of(left_rows, None), trigger[order])
        still = waiting.take(pa.array(np.sort(lefts["pos"].to_numpy()[~matched])))
        kept = cache.take(pa.array(np.sort(keep_rows)))
        return {"keys": keys.keys, "left": still if still.num_rows else None,
                "right": kept if kept.num_rows else None}, out
