"""The time-series engine: per-key tumbling or sliding event-time windows (Orca's timeSeriesEngine).

A window of key k is emitted when the first row of k at or past its end (plus
``accepted_delay``) arrives — per key, not by a global watermark, which is why this
engine runs on Headwater's own incremental window kernel rather than Spark's window
aggregation (a global watermark would close a quiet key's window because another key
moved on, and drop rows of a lagging key). Metrics are aggregates (``first``,
``max``, ``sum``...) of row expressions, optionally combined by row-wise expressions
(``max(price) - min(price) as range``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from headwater.durations import format_duration, to_micros
from headwater.engines.arguments import (
    arg,
    columns,
    duration,
    duration_or_zero,
    duration_pair,
    fill_modes,
    optional,
    windows_and_metrics,
)
from headwater.engines.base import SEQ, EngineKind, KeyTable, LateRowsProcessor, OneInputEngine
from headwater.engines.columns import times_us, to_arrow
from headwater.engines.window_metrics import (
    SeveralWindows,
    WindowEngine,
    WindowMetrics,
    resolve_window_engine,
)
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.kernels.windows import WindowSpec

FILL_MODES = ("none", "null", "ffill")

# Orca's alignment of the first window for millisecond-precision time columns (C.1).
_ALIGN_MS = [(2, 2), (5, 5), (10, 10), (20, 20), (25, 25), (50, 50), (100, 100), (200, 200), (250, 250),
             (500, 500), (1000, 1000), (2000, 2000), (3000, 3000), (5000, 5000), (10000, 10000),
             (15000, 15000), (20000, 20000), (30000, 30000)]
_ALIGN_MS_ROUND = [(60000, 60000), (120000, 120000), (300000, 300000), (600000, 600000), (900000, 900000),
                   (1200000, 1200000), (1800000, 1800000)]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def alignment_micros(step_us: int, *, round_time: bool) -> int:
    """Orca's alignment size for a step, in microseconds (millisecond-precision table)."""
    if step_us % 1000:
        return step_us
    step_ms = step_us // 1000
    for upper, size in _ALIGN_MS:
        if step_ms <= upper:
            return size * 1000
    if not round_time:
        return 60_000_000
    for upper, size in _ALIGN_MS_ROUND:
        if step_ms <= upper:
            return size * 1000
    return 3_600_000_000


@dataclass(frozen=True)
class StepWindows(SeveralWindows, WindowEngine, OneInputEngine):
    """The fields the time-series and the daily time-series engine share: windows every ``step``, each with its
    metrics; several window sizes (Orca's vector windowSize) share the step."""

    window: timedelta | tuple[timedelta, ...] = field(metadata=arg(windows_and_metrics))
    step: timedelta = field(metadata=arg(duration))
    metrics: tuple[Expr, ...] = field(metadata=arg(windows_and_metrics))


@dataclass(frozen=True)
class TimeSeriesEngine(StepWindows):
    """Parameters of ``time_series_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.TIME_SERIES
    time_column: str | None = None
    key_column: tuple[str, ...] = field(default=(), metadata=arg(columns))
    accepted_delay: timedelta = field(default=timedelta(0), metadata=arg(duration_or_zero))
    closed: str = "left"
    use_window_start_time: bool = False
    fill: str | float | tuple[str | float, ...] = field(default="none", metadata=arg(fill_modes))
    round_time: bool = True
    update_time: timedelta | None = field(default=None, metadata=arg(optional(duration_or_zero)))
    force_trigger_time: timedelta | None = field(default=None, metadata=arg(optional(duration_or_zero)))
    sub_window: tuple[timedelta, timedelta] | None = field(default=None, metadata=arg(optional(duration_pair)))
    key_purge_freq: timedelta | None = field(default=None, metadata=arg(optional(duration)))
    use_system_time: bool = False
    late_rows_table: str | None = None  # the FQN of the table the late rows go to
    # with several windows: the window of each metric, by position
    metric_windows: tuple[int, ...] = field(default=(), metadata=arg(windows_and_metrics, name="window"))
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        for window in self.windows:
            if to_micros(window) % to_micros(self.step):
                raise GraphDefinitionError(
                    f"{where}: window {format_duration(window)} must be a multiple of step "
                    f"{format_duration(self.step)}; e.g. window='60s', step='30s'"
                )
        if self.closed not in ("left", "right"):
            raise GraphDefinitionError(f"{where}: closed must be 'left' or 'right', got {clip(self.closed)}")
        if self.use_system_time and (self.force_trigger_time is not None or self.update_time is not None
                                     or self.sub_window is not None):
            raise GraphDefinitionError(f"{where}: use_system_time excludes force_trigger_time, update_time and "
                                       "sub_window (Orca's rule; a micro-batch closes every window that ended)")
        resolve_window_engine(self, where=where)
        self._check_windows(where)
        self._check_fill(where)
        self._check_durations(where)
        self._check_purge(where)
        try:  # the kernel's rules for combining triggers, in the user's words
            self.window_spec()
        except GraphDefinitionError as e:
            raise GraphDefinitionError(f"{where}: {self._trigger_error(str(e))}") from None

    def _check_fill(self, where: str) -> None:
        fills = self.fill if isinstance(self.fill, tuple) else (self.fill,)
        ok = all((isinstance(f, str) and f in FILL_MODES) or _is_number(f) for f in fills)
        if isinstance(self.fill, tuple):
            ok = ok and "none" not in fills
            if len(fills) != len(self._outputs):
                raise GraphDefinitionError(
                    f"{where}: fill has {len(fills)} values for {len(self._outputs)} metrics; give one per metric"
                )
        if not ok:
            raise GraphDefinitionError(
                f"{where}: fill must be one of {', '.join(FILL_MODES)} or a number, or a list of 'null', 'ffill' "
                f"or numbers (one per metric), got {clip(self.fill)}"
            )

    def _check_windows(self, where: str) -> None:
        if self.check_several_windows(where) and (self.use_window_start_time or self.update_time is not None or
                                                  self.sub_window is not None or self.key_purge_freq is not None):
            raise GraphDefinitionError(f"{where}: several windows exclude use_window_start_time (Orca's rule), "
                                       "update_time, sub_window and key_purge_freq")

    def _check_purge(self, where: str) -> None:
        if self.key_purge_freq is None:
            return
        if self.force_trigger_time is None or self.fill != "none" or not self.key_column:
            raise GraphDefinitionError(
                f"{where}: key_purge_freq needs key_column and force_trigger_time, and fill='none' (Orca's rule: "
                "only keys whose windows a forced trigger emitted can be dropped)"
            )

    def _check_durations(self, where: str) -> None:
        if self.update_time is not None and self.update_time and to_micros(self.step) % to_micros(self.update_time):
            raise GraphDefinitionError(f"{where}: update_time {format_duration(self.update_time)} must divide step "
                                       f"{format_duration(self.step)}; e.g. step='60s', update_time='10s'")
        if self.sub_window is not None:
            lo, hi = self.sub_window
            if not timedelta(0) <= lo < hi <= self.windows[0]:
                raise GraphDefinitionError(
                    f"{where}: sub_window {format_duration(lo)}:{format_duration(hi)} must lie inside the window "
                    f"{format_duration(self.windows[0])} with start < end; e.g. sub_window=('0s', '10s')"
                )

    @staticmethod
    def _trigger_error(message: str) -> str:
        names = {"force_trigger": "force_trigger_time", "update": "update_time", "accepted_delay": "accepted_delay",
                 "sub_window": "sub_window", "window spec: ": ""}
        for old, new in names.items():
            message = message.replace(old, new)
        return message

    def window_spec(self, window: timedelta | None = None) -> WindowSpec:
        """The kernel's window specification (microseconds) of ``window`` (default: the first): filled windows
        carry the previous values (``ffill``); :class:`WindowMetrics` applies each metric's fill rule."""
        step = to_micros(self.step)
        return WindowSpec(
            window=to_micros(self.windows[0] if window is None else window),
            step=step,
            closed=self.closed,
            accepted_delay=to_micros(self.accepted_delay),
            use_window_start_time=self.use_window_start_time,
            fill="none" if self.fill == "none" else "ffill",
            align=alignment_micros(step, round_time=self.round_time),
            # on system time every row of a micro-batch has its commit time: a batch closes every key's windows
            force_trigger=0 if self.use_system_time else (
                None if self.force_trigger_time is None else to_micros(self.force_trigger_time)),
            update=None if self.update_time is None else to_micros(self.update_time),
            sub_window=None if self.sub_window is None else (to_micros(self.sub_window[0]),
                                                              to_micros(self.sub_window[1])),
        )

    def properties(self) -> dict[str, Any]:
        return {
            "windowSize": (format_duration(self.window) if not isinstance(self.window, tuple)
                           else [format_duration(w) for w in self.window]),
            "step": format_duration(self.step),
            "metrics": [str(m) for m in self.metrics],
            "timeColumn": self.time_column,
            "keyColumn": list(self.key_column),
            "acceptedDelay": format_duration(self.accepted_delay) if self.accepted_delay else "0s",
            "closed": self.closed,
            "useWindowStartTime": self.use_window_start_time,
            "fill": list(self.fill) if isinstance(self.fill, tuple) else self.fill,
            # options added later appear only when set, so graphs stored before them still resume
            **({"roundTime": False} if not self.round_time else {}),
            **({"updateTime": format_duration(self.update_time)} if self.update_time is not None else {}),
            **({"forceTriggerTime": format_duration(self.force_trigger_time)}
               if self.force_trigger_time is not None else {}),
            **({"subWindow": ":".join(map(format_duration, self.sub_window))} if self.sub_window else {}),
            **({"keyPurgeFreq": format_duration(self.key_purge_freq)} if self.key_purge_freq is not None else {}),
            **({"useSystemTime": True} if self.use_system_time else {}),
            **({"metricWindows": list(self.metric_windows)} if self.metric_windows else {}),
            **({"lateRowsTable": self.late_rows_table} if self.late_rows_table else {}),
        }



class TimeSeriesProcessor(LateRowsProcessor, runs=TimeSeriesEngine):
    def __init__(self, spec: TimeSeriesEngine) -> None:
        from headwater.kernels.windows import WindowAggregator

        self.spec = spec
        self.out_schema = spec.output_schema()
        fills = spec.fill if isinstance(spec.fill, tuple) else (spec.fill,) * len(spec._outputs)
        types = [t for _, t in self.out_schema.columns[1 + len(spec.key_column):]]
        # one aggregator per window size, each with its metrics (Orca's vector windowSize)
        self.groups = []
        for window, positions in spec.metric_groups():
            metrics = WindowMetrics([spec._outputs[p] for p in positions], spec.input_schema,
                                    [types[p] for p in positions], fills=[fills[p] for p in positions])
            self.groups.append((positions, metrics, WindowAggregator(spec.window_spec(window),
                                                                     [a.func for a in metrics.aggs])))
        self.metrics, self.aggregator = self.groups[0][1], self.groups[0][2]
        self.several = isinstance(spec.window, tuple)

    def new_state(self) -> dict[str, Any]:
        windows = [agg.init_state() for _, _, agg in self.groups]
        return {"keys": [], "windows": windows if self.several else windows[0]}

    def stats(self, state: dict[str, Any]) -> dict[str, int]:
        first = state["windows"][0] if self.several else state["windows"]
        late = int(first.get("late", np.zeros(0)).sum()) + state.get("late_purged", 0)
        return {"keys": len(state["keys"]), "late_rows": late}

    def _purge(self, state: dict[str, Any], batch_time: float) -> dict[str, Any]:
        """Orca's key purge: at most once per ``key_purge_freq`` of input commit time (not the wall clock, so a
        replay purges alike), drop the keys whose open window holds no row."""
        assert self.spec.key_purge_freq is not None
        last = state.get("last_purge")
        if last is None:  # the clock starts with the first micro-batch
            return {**state, "last_purge": batch_time}
        if batch_time - last < self.spec.key_purge_freq.total_seconds():
            return state
        windows = state["windows"]
        keep = windows["pane_rows"].sum(axis=1) > 0
        purged_late = int(windows["late"][~keep].sum())
        return {"keys": [k for k, kept in zip(state["keys"], keep, strict=True) if kept],
                "windows": self.aggregator.keep_keys(windows, keep), "last_purge": batch_time,
                "late_purged": state.get("late_purged", 0) + purged_late}

    def _arrow_schema(self) -> pa.Schema:
        return self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))

    def empty_output(self) -> pa.Table:
        return self._arrow_schema().empty_table()

    def process_routed(self, state: dict[str, Any], table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table, np.ndarray | None]:
        """The late rows: those every window (of every size) had emitted; rows with a NULL time are not late."""
        spec = self.spec
        valid = None
        if spec.time_column is not None:
            valid = table[spec.time_column].is_valid().to_numpy(zero_copy_only=False)
            table = table.filter(pa.array(valid))
        n = table.num_rows
        if n == 0:
            return state, self.empty_output(), None
        schema = spec.input_schema
        keys = KeyTable(state["keys"])
        key_columns = [table[k] for k in spec.key_column]
        slots = keys.slots_from_arrow(key_columns) if key_columns else np.zeros(n, dtype=np.int64)
        time_type = self.out_schema.columns[0][1]
        if spec.time_column is None:  # system time: the input's commit time, in milliseconds as Orca's
            times = np.full(n, int(batch_time * 1000) * 1000, dtype=np.int64)
        else:
            times = times_us(table[spec.time_column], time_type)
        olds = state["windows"] if self.several else [state["windows"]]
        runs = [agg.run(old, slots, max(len(keys), 1), times, metrics.arguments(table))
                for (_, metrics, agg), old in zip(self.groups, olds, strict=True)]
        dropped = np.logical_and.reduce([r[1].dropped for r in runs])
        if valid is not None and dropped.any():
            full = np.zeros(len(valid), dtype=np.bool_)
            full[valid] = dropped
            dropped = full
        windows_state = [r[0] for r in runs]
        new_state = {**state, "keys": keys.keys, "windows": windows_state if self.several else windows_state[0]}
        if spec.key_purge_freq is not None:  # after the output is made: the purged keys' names are still known
            new_state = self._purge(new_state, batch_time)
        slots_out, times_out, trigger, columns = self._metric_columns([r[1] for r in runs])
        routed = dropped if dropped.any() else None
        m = len(slots_out)
        if m == 0:
            return new_state, self.empty_output(), routed
        if time_type == "date":
            times_out = times_out // 86_400_000_000
        arrays: list[pa.Array] = [to_arrow(times_out.astype(np.float64), time_type)]
        for i, k in enumerate(spec.key_column):
            arrays.append(keys.column(slots_out, i, len(spec.key_column), schema.to_arrow().field(k).type))
        arrays.extend(columns)
        seq = table[SEQ].to_numpy()
        arrays.append(pa.array(seq[trigger], type=pa.int64()))
        return new_state, pa.table(arrays, schema=self._arrow_schema()), routed

    def _metric_columns(self, outs: list[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[pa.Array]]:
        """The emitted windows' slots, times, trigger rows and metric columns. With several window sizes a
        row is one (trigger row, key, window end); a window size that emitted nothing there gives NULLs."""
        if not self.several:
            out = outs[0]
            return (out.slots, np.asarray(out.times, dtype=np.int64), np.asarray(out.trigger_rows, dtype=np.int64),
                    self.metrics.results(out.values, len(out.slots), empty=out.empty))
        frames = [pd.DataFrame({"trigger": o.trigger_rows, "slot": o.slots, "time": o.times, "group": g,
                                "row": np.arange(len(o.slots))}) for g, o in enumerate(outs)]
        rows = pd.concat(frames, ignore_index=True)
        merged = rows.drop_duplicates(["trigger", "slot", "time"]).sort_values(["trigger", "time", "slot"],
                                                                                 kind="stable", ignore_index=True)
        merged["at"] = np.arange(len(merged))
        located = rows.merge(merged[["trigger", "slot", "time", "at"]], on=["trigger", "slot", "time"])
        columns: list[pa.Array | None] = [None] * len(self.spec._outputs)
        for g, ((positions, metrics, _), out) in enumerate(zip(self.groups, outs, strict=True)):
            mine = located[located["group"] == g]
            take = np.full(len(merged), -1, dtype=np.int64)
            take[mine["at"].to_numpy()] = mine["row"].to_numpy()
            indices = pa.array(take, mask=take < 0)
            for p, column in zip(positions, metrics.results(out.values, len(out.slots), empty=out.empty), strict=True):
                columns[p] = column.take(indices)
        return (merged["slot"].to_numpy(np.int64), merged["time"].to_numpy(np.int64),
                merged["trigger"].to_numpy(np.int64), [c for c in columns if c is not None])
