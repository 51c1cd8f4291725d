"""The session window engine: per-key windows that end after a gap without rows (Orca's sessionWindowEngine, C.3).

Rows of a key form a session while each follows the previous one by less than ``session_gap``. The
first row of the key at or past ``last row + session_gap`` closes the session, which is emitted then
(that row starts the next session); a key's last session stays open until such a row arrives. A row
older than an earlier row of its key (event time) is dropped. Output time: the session's first row
(``use_session_start_time=True``, Orca's default) or its last row + ``session_gap``. With
``use_system_time=True`` (no ``time_column``) a row's time is its micro-batch's input commit time (in ms, as
Orca's system time; the same on replay), and the output time column is ``time``.

``force_trigger_time`` closes a quiet key's session without a row of its own: the first row (any key, in
arrival order after the session's last row) whose time is at or past the session's end
(last row + ``session_gap``) + ``force_trigger_time`` closes it, and is its trigger. Orca counts it on the
wall clock after the engine's last row; event time here, so a replay closes the same sessions.

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

from headwater.aggregates.groups import over_groups
from headwater.aggregates.prefix import running
from headwater.durations import format_duration, to_micros
from headwater.engines.arguments import arg, columns, duration, duration_or_zero, metric_list, optional
from headwater.engines.base import SEQ, EngineKind, KeyTable, LateRowsProcessor, OneInputEngine
from headwater.engines.columns import times_us, to_arrow
from headwater.engines.window_metrics import (
    WindowEngine,
    WindowMetrics,
    resolve_window_engine,
)
from headwater.errors import GraphDefinitionError
from headwater.expr import Expr

DAY_US = 86_400_000_000


@dataclass(frozen=True)
class SessionWindowEngine(WindowEngine, OneInputEngine):
    """Parameters of ``session_window_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.SESSION_WINDOW
    session_gap: timedelta = field(metadata=arg(duration))
    metrics: tuple[Expr, ...] = field(metadata=arg(metric_list))
    time_column: str | None  # None with use_system_time
    key_column: tuple[str, ...] = field(default=(), metadata=arg(columns))
    use_session_start_time: bool = True
    force_trigger_time: timedelta | None = field(default=None, metadata=arg(optional(duration_or_zero)))
    late_rows_table: str | None = None  # the FQN of the table the late rows go to
    use_system_time: bool = False
    update_time: timedelta | None = field(default=None, metadata=arg(optional(duration_or_zero)))
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        if self.session_gap <= timedelta(0):
            raise GraphDefinitionError(f"{where}: session_gap must be positive, got {format_duration(self.session_gap)}")
        if self.update_time is not None:
            if self.update_time < timedelta(0):
                raise GraphDefinitionError(f"{where}: update_time must not be negative, got "
                                           f"{format_duration(self.update_time)}")
            if not self.use_session_start_time:
                raise GraphDefinitionError(f"{where}: update_time emits open sessions, whose end is not known yet: "
                                           "it needs use_session_start_time=True (as in Orca)")
        if self.force_trigger_time is not None and self.force_trigger_time < timedelta(0):
            raise GraphDefinitionError(f"{where}: force_trigger_time must not be negative, got "
                                       f"{format_duration(self.force_trigger_time)}")
        resolve_window_engine(self, where=where)

    def properties(self) -> dict[str, Any]:
        return {"sessionGap": format_duration(self.session_gap), "metrics": [str(m) for m in self.metrics],
                "timeColumn": self.time_column, "keyColumn": list(self.key_column),
                "useSessionStartTime": self.use_session_start_time,
                "forceTriggerTime": None if self.force_trigger_time is None else format_duration(self.force_trigger_time),
                "lateRowsTable": self.late_rows_table, **({"useSystemTime": True} if self.use_system_time else {}),
                **({"updateTime": format_duration(self.update_time)} if self.update_time is not None else {})}



class SessionWindowProcessor(LateRowsProcessor, runs=SessionWindowEngine):
    def __init__(self, spec: SessionWindowEngine) -> None:
        self.spec = spec
        self.out_schema = spec.output_schema()
        self.metrics = WindowMetrics(spec._outputs, spec.input_schema,
                                     [t for _, t in self.out_schema.columns[1 + len(spec.key_column):]])
        self.gap = to_micros(spec.session_gap)
        self.force = None if spec.force_trigger_time is None else to_micros(spec.force_trigger_time)
        self.update = None if spec.update_time is None else to_micros(spec.update_time)
        self.time_type = "timestamp" if spec.time_column is None else spec.input_schema[spec.time_column]

    def new_state(self) -> dict[str, Any]:
        # the rows of every key's open session, in arrival order: slot, time (µs), seq, each aggregate's argument
        return {"keys": [], "open": {"slot": np.empty(0, np.int64), "time": np.empty(0, np.int64),
                                     "seq": np.empty(0, np.int64),
                                     "args": [np.empty(0, np.float64) for _ in self.metrics.aggs]}}

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def process_routed(self, state: dict[str, Any], table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table, np.ndarray | None]:
        """The late rows: older than an earlier row of their key. Rows with a NULL time are dropped, not late."""
        spec = self.spec
        n_in = table.num_rows
        input_seq = table[SEQ].to_numpy()
        if spec.time_column is not None:
            table = table.filter(table[spec.time_column].is_valid())
        if table.num_rows == 0:
            return state, self._arrow_schema().empty_table(), None
        keys = KeyTable(state["keys"])
        key_columns = [table[k] for k in spec.key_column]
        slots = keys.slots_from_arrow(key_columns) if key_columns else np.zeros(table.num_rows, dtype=np.int64)
        times = (times_us(table[spec.time_column], self.time_type) if spec.time_column is not None else
                 np.full(table.num_rows, int(batch_time * 1000) * 1000, dtype=np.int64))  # system time, in ms
        old = state["open"]
        rows = pd.DataFrame({"slot": np.concatenate([old["slot"], slots]),
                             "time": np.concatenate([old["time"], times]),
                             "seq": np.concatenate([old["seq"], table[SEQ].to_numpy()])})
        arguments = self.metrics.arguments(table)
        for i in range(len(self.metrics.aggs)):
            rows[f"a{i}"] = np.concatenate([old["args"][i], arguments[i]])
        rows = rows.sort_values(["slot", "seq"], kind="stable", ignore_index=True)  # per key, arrival order
        # per key: its newest time so far, rows of closed sessions included (a forced close leaves none open)
        latest = np.full(len(keys), np.iinfo(np.int64).min, dtype=np.int64)
        latest[:len(state.get("latest", ()))] = state.get("latest", ())
        slot = rows["slot"].to_numpy()
        earlier = rows.groupby("slot", sort=False)["time"].cummax().groupby(rows["slot"]).shift(1)
        earlier = np.maximum(earlier.fillna(np.iinfo(np.int64).min).to_numpy(np.int64), latest[slot])
        kept_before = rows["seq"].to_numpy() < table[SEQ].to_numpy().min()  # open rows of earlier micro-batches
        late = (rows["time"].to_numpy() < earlier) & ~kept_before  # older than an earlier row of its key: dropped
        late_seqs = rows["seq"].to_numpy()[late]
        rows = rows[~late].reset_index(drop=True)
        np.maximum.at(latest, rows["slot"].to_numpy(), rows["time"].to_numpy(np.int64))
        by_key = rows.groupby("slot", sort=False)
        previous = by_key["time"].shift(1)
        starts = (previous.isna() | (rows["time"] - previous >= self.gap)).to_numpy()
        forced = np.full(len(rows), -1, dtype=np.int64)  # per row: the seq of the row forcing its session closed
        if self.force is not None:
            starts, forced = self._force(rows, by_key, starts, table[SEQ].to_numpy())
        rows["session"] = starts.cumsum()
        last_session = rows.groupby("slot", sort=False)["session"].transform("max")
        is_open = ((rows["session"] == last_session) &
                   ~pd.Series(forced >= 0).groupby(rows["session"]).transform("any")).to_numpy()
        new_open = rows[is_open].sort_values("seq", kind="stable")
        new_state = {"keys": keys.keys, "late_rows": int(state.get("late_rows", 0)) + int(late.sum()),
                     "latest": latest, "open": {
            "slot": new_open["slot"].to_numpy(np.int64), "time": new_open["time"].to_numpy(np.int64),
            "seq": new_open["seq"].to_numpy(np.int64),
            "args": [new_open[f"a{i}"].to_numpy(np.float64) for i in range(len(self.metrics.aggs))]}}
        dropped = np.isin(input_seq, late_seqs) if len(late_seqs) else None
        assert dropped is None or len(dropped) == n_in
        emitted = []  # per kind of emission: (slots, output times, trigger seqs, each aggregate's values)
        closed = rows[~is_open]
        if not closed.empty:
            grouped = closed.groupby("session", sort=True)
            first_time, last_time = grouped["time"].first(), grouped["time"].last()
            # each closed session is closed by the first row of the key's next session, or by a forcing row
            trigger = rows[starts].set_index("session")["seq"].reindex(first_time.index + 1).to_numpy(np.float64)
            force_by = pd.Series(forced).groupby(rows["session"].to_numpy()).max().reindex(first_time.index).to_numpy()
            emitted.append((grouped["slot"].first().to_numpy(np.int64),
                            (first_time if spec.use_session_start_time else last_time + self.gap).to_numpy(np.int64),
                            np.where(force_by >= 0, force_by, trigger).astype(np.int64),
                            self._per_session(closed)))
        if self.update is not None:
            in_batch = rows["seq"].to_numpy() >= table[SEQ].to_numpy().min()
            emitted.append(self._updates(rows, starts, is_open, in_batch, int(table[SEQ].to_numpy().max())))
        m = sum(len(e[0]) for e in emitted)
        if m == 0:
            return new_state, self._arrow_schema().empty_table(), dropped
        slot_values, out_times, trigger = (np.concatenate([e[j] for e in emitted]) for j in range(3))
        values = [np.concatenate([e[3][i] for e in emitted]) for i in range(len(self.metrics.aggs))]
        order = np.argsort(trigger, kind="stable")  # by trigger; a final emission before an update of one row
        out_times = out_times[order]
        if self.time_type == "date":
            out_times = out_times // DAY_US
        schema = spec.input_schema.to_arrow()
        arrays: list[pa.Array] = [to_arrow(out_times.astype(np.float64), self.time_type)]
        slot_values = slot_values[order]
        for i, k in enumerate(spec.key_column):
            arrays.append(keys.column(slot_values, i, len(spec.key_column), schema.field(k).type))
        arrays.extend(self.metrics.results([v[order] for v in values], m))
        arrays.append(pa.array(trigger[order], type=pa.int64()))
        return new_state, pa.table(arrays, schema=self._arrow_schema()), dropped

    def _per_session(self, rows: pd.DataFrame) -> list[np.ndarray]:
        """Each aggregate over each session's ``rows`` (in their order), sessions in ascending number."""
        session, numbers = pd.factorize(rows["session"], sort=True)
        return [over_groups(rows[f"a{i}"].to_numpy(np.float64), session, len(numbers), a.func)
                for i, a in enumerate(self.metrics.aggs)]

    def _updates(self, rows: pd.DataFrame, starts: np.ndarray, is_open: np.ndarray, in_batch: np.ndarray,
                 last_seq: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """``update_time``'s emissions of sessions still growing (output time: the session's start).

        ``0``: each session open after this micro-batch that received rows in it, over all its rows, triggered by
        the micro-batch's last row. Otherwise, as the time-series engine: a row of this micro-batch in a later
        period of ``update_time`` (counted from its session's start) than the session's previous row emits
        the session over the rows before it."""
        session = rows["session"].to_numpy()
        start_time = rows["time"].to_numpy()[np.flatnonzero(starts)][session - 1]
        n_aggs = len(self.metrics.aggs)
        if self.update == 0:
            grown = np.unique(session[is_open & in_batch])
            part = rows[np.isin(session, grown)]
            grouped = part.groupby("session", sort=True)
            return (grouped["slot"].first().to_numpy(np.int64), grouped["time"].first().to_numpy(np.int64),
                    np.full(len(grown), last_seq, dtype=np.int64),
                    self._per_session(part))
        period = (rows["time"].to_numpy() - start_time) // self.update
        later = np.zeros(len(rows), dtype=bool)
        later[1:] = ~starts[1:] & (period[1:] > period[:-1])
        at = np.flatnonzero(later & in_batch)  # each such row emits its session's rows before it (at - 1)
        values = [running(rows[f"a{i}"].to_numpy(np.float64), session, a.func)[at - 1]
                  for i, a in enumerate(self.metrics.aggs)]
        assert len(values) == n_aggs
        return (rows["slot"].to_numpy(np.int64)[at], start_time[at], rows["seq"].to_numpy(np.int64)[at], values)

    def _force(self, rows: pd.DataFrame, by_key: Any, starts: np.ndarray,
               batch_seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sessions closed by ``force_trigger_time``: per row (in key, arrival order), whether it starts a session,
        and for a session's last row the seq of the batch row that forces it closed (-1: none). A row of an
        earlier micro-batch never forces: the session it would have forced was closed then."""
        batch = np.isin(rows["seq"].to_numpy(), batch_seq)
        order = np.argsort(rows["seq"].to_numpy()[batch], kind="stable")
        seqs, times = rows["seq"].to_numpy()[batch][order], rows["time"].to_numpy()[batch][order]
        seq, time = rows["seq"].to_numpy(), rows["time"].to_numpy()
        first = first_at_least(times, np.searchsorted(seqs, seq, side="right"), time + self.gap + self.force)
        next_seq = by_key["seq"].shift(-1).to_numpy()
        has_next = ~np.isnan(next_seq)
        next_at = np.searchsorted(seqs, np.where(has_next, next_seq, 0), side="left")  # 0 for a row of an earlier batch
        forcing = np.where(has_next, first < next_at, first < len(seqs))
        starts = starts.copy()
        starts[1:] |= forcing[:-1] & has_next[:-1]  # the key's next row starts a new session
        forced = np.where(forcing, seqs[np.minimum(first, max(len(seqs) - 1, 0))] if len(seqs) else -1, -1)
        return starts, forced.astype(np.int64)


def first_at_least(values: np.ndarray, starts: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """For each query, the first index ``i >= starts[q]`` with ``values[i] >= thresholds[q]`` (``len(values)`` if
    none): a sparse table of range maxima, descended by halving steps (O((n + queries) log n)).

    >>> first_at_least(np.array([5, 1, 9, 3]), np.array([0, 1, 3, 0]), np.array([6, 2, 4, 1]))
    array([2, 2, 4, 0])
    """
    n = len(values)
    levels = [values]  # levels[k][i]: the maximum of values[i : i + 2**k]
    while (2 << (len(levels) - 1)) <= n:
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-half], prev[half:]))
    pos = np.asarray(starts, dtype=np.int64).copy()
    for k in range(len(levels) - 1, -1, -1):
        size, level = 1 << k, levels[k]
        fits = pos + size <= n
        skip = fits & (level[np.where(fits, pos, 0)] < thresholds) if len(level) else fits
        pos = np.where(skip, pos + size, pos)
    return pos
