"""The session window engine: per-key windows that end after a gap without rows (Orca's sessionWindowEngine, C.3).

Rows of a key form a session while each follows the previous one by less than ``session_gap``. The
first row of the key at or past ``last row + session_gap`` closes the session, which is emitted then
(that row starts the next session); a key's last session stays open until such a row arrives. A row
older than an earlier row of its key (event time) is dropped. Output time: the session's first row
(``use_session_start_time=True``, Orca's default) or its last row + ``session_gap``.

Metrics are those of the time-series engine (aggregates of row expressions, combined row-wise), with the
same NULL rules. The rows of each key's open session are the engine's state, so a session's memory grows
with its length; results are the same for any split of the input into micro-batches, because a session
is only computed once it is closed.

>>> import pyarrow as pa
>>> from datetime import timedelta
>>> from headwater.engines.base import SEQ
>>> from headwater.parse import parse_metric
>>> from headwater.types import Schema
>>> spec = SessionWindowEngine(name="s", input_schema=Schema.parse({"t": "timestamp", "k": "string", "v": "double"}),
...                            session_gap=timedelta(seconds=5), metrics=(parse_metric("sum(v) as total"),),
...                            time_column="t", key_column=("k",))
>>> p = spec.processor()
>>> rows = pa.table({"t": pa.array([0, 2_000_000, 9_000_000], pa.timestamp("us")), "k": ["a", "a", "a"],
...                  "v": [1.0, 2.0, 4.0], SEQ: [0, 1, 2]})
>>> state, out = p.process(p.new_state(), rows)
>>> out.to_pydict()["total"], out.to_pydict()[SEQ]  # the row at 9 s closed the session [0 s, 2 s]
([3.0], [2])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.durations import format_duration, to_micros
from headwater.engines.base import (
    SEQ,
    EngineKind,
    EngineSpec,
    KeyTable,
    Processor,
)
from headwater.engines.columns import times_us, to_arrow
from headwater.engines.window_metrics import (
    WindowMetrics,
    reduce_groups,
    resolve_window_engine,
    window_output_schema,
)
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.types import Schema

DAY_US = 86_400_000_000


@dataclass(frozen=True)
class SessionWindowEngine(EngineSpec):
    """Parameters of ``session_window_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.SESSION_WINDOW
    name: str
    input_schema: Schema
    session_gap: timedelta
    metrics: tuple[Expr, ...]
    time_column: str
    key_column: tuple[str, ...] = ()
    use_session_start_time: bool = True
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"session_window_engine {clip(self.name)}"
        if self.session_gap <= timedelta(0):
            raise GraphDefinitionError(f"{where}: session_gap must be positive, got {format_duration(self.session_gap)}")
        resolve_window_engine(self, where=where)

    @property
    def key_columns(self) -> tuple[str, ...]:
        return self.key_column

    def output_schema(self, input_schema: Schema | None = None) -> Schema:
        return window_output_schema(self, where=f"session_window_engine {clip(self.name)}")

    def properties(self) -> dict[str, Any]:
        return {"sessionGap": format_duration(self.session_gap), "metrics": [str(m) for m in self.metrics],
                "timeColumn": self.time_column, "keyColumn": list(self.key_column),
                "useSessionStartTime": self.use_session_start_time}

    def processor(self, input_schema: Schema | None = None) -> SessionWindowProcessor:
        return SessionWindowProcessor(self)


class SessionWindowProcessor(Processor):
    def __init__(self, spec: SessionWindowEngine) -> None:
        self.spec = spec
        self.out_schema = spec.output_schema()
        self.metrics = WindowMetrics(spec._outputs, spec.input_schema,
                                     [t for _, t in self.out_schema.columns[1 + len(spec.key_column):]])
        self.gap = to_micros(spec.session_gap)
        self.time_type = spec.input_schema[spec.time_column]

    def new_state(self) -> dict[str, Any]:
        # the rows of every key's open session, in arrival order: slot, time (µs), seq, each aggregate's argument
        return {"keys": [], "open": {"slot": np.empty(0, np.int64), "time": np.empty(0, np.int64),
                                     "seq": np.empty(0, np.int64),
                                     "args": [np.empty(0, np.float64) for _ in self.metrics.aggs]}}

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def process(self, state: dict[str, Any], table: pa.Table, *, batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table]:
        spec = self.spec
        table = table.filter(table[spec.time_column].is_valid())
        if table.num_rows == 0:
            return state, self._arrow_schema().empty_table()
        keys = KeyTable(state["keys"])
        key_columns = [table[k] for k in spec.key_column]
        slots = keys.slots_from_arrow(key_columns) if key_columns else np.zeros(table.num_rows, dtype=np.int64)
        times = times_us(table[spec.time_column], self.time_type)
        old = state["open"]
        rows = pd.DataFrame({"slot": np.concatenate([old["slot"], slots]),
                             "time": np.concatenate([old["time"], times]),
                             "seq": np.concatenate([old["seq"], table[SEQ].to_numpy()])})
        arguments = self.metrics.arguments(table)
        for i in range(len(self.metrics.aggs)):
            rows[f"a{i}"] = np.concatenate([old["args"][i], arguments[i]])
        rows = rows.sort_values(["slot", "seq"], kind="stable", ignore_index=True)  # per key, arrival order
        by_key = rows.groupby("slot", sort=False)["time"]
        earlier = by_key.cummax().groupby(rows["slot"]).shift(1)
        late = (rows["time"] < earlier).to_numpy()  # older than an earlier row of its key: dropped and counted
        rows = rows[~late].reset_index(drop=True)
        previous = rows.groupby("slot", sort=False)["time"].shift(1)
        starts = previous.isna() | (rows["time"] - previous >= self.gap)
        rows["session"] = starts.cumsum()
        last_session = rows.groupby("slot", sort=False)["session"].transform("max")
        is_open = rows["session"] == last_session
        new_open = rows[is_open].sort_values("seq", kind="stable")
        new_state = {"keys": keys.keys, "late_rows": int(state.get("late_rows", 0)) + int(late.sum()), "open": {
            "slot": new_open["slot"].to_numpy(np.int64), "time": new_open["time"].to_numpy(np.int64),
            "seq": new_open["seq"].to_numpy(np.int64),
            "args": [new_open[f"a{i}"].to_numpy(np.float64) for i in range(len(self.metrics.aggs))]}}
        closed = rows[~is_open]
        if closed.empty:
            return new_state, self._arrow_schema().empty_table()
        grouped = closed.groupby("session", sort=True)
        first_time, last_time = grouped["time"].first(), grouped["time"].last()
        slot = grouped["slot"].first()
        # each closed session is closed by the first row of the key's next session
        trigger = rows[starts].set_index("session")["seq"].reindex(first_time.index + 1).to_numpy(np.int64)
        values = [reduce_groups(grouped[f"a{i}"], a.func).to_numpy(np.float64) for i, a in enumerate(self.metrics.aggs)]
        out_times = (first_time if spec.use_session_start_time else last_time + self.gap).to_numpy(np.int64)
        order = np.argsort(trigger, kind="stable")
        m = len(order)
        out_times = out_times[order]
        if self.time_type == "date":
            out_times = out_times // DAY_US
        schema = spec.input_schema.to_arrow()
        arrays: list[pa.Array] = [to_arrow(out_times.astype(np.float64), self.time_type)]
        slot_values = slot.to_numpy(np.int64)[order]
        for i, k in enumerate(spec.key_column):
            arrays.append(pa.array(keys.values(slot_values, i, len(spec.key_column)), type=schema.field(k).type))
        arrays.extend(self.metrics.results([v[order] for v in values], m))
        arrays.append(pa.array(trigger[order], type=pa.int64()))
        return new_state, pa.table(arrays, schema=self._arrow_schema())
