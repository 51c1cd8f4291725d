"""The daily time-series engine: time-series windows within the trading sessions of each day (Orca's
dailyTimeSeriesEngine, C.2).

Sessions are given as times of day (``session_begin[i]``, ``session_end[i]``; an end of 00:00 is 24:00).
As in Orca, a session whose end is not after its begin ends on the next day, and so do all the sessions
after it; a session beginning before the previous one's end begins on the next day. A first session
beginning at 00:00 and a last one ending at 00:00 are one session across midnight (Orca ≥ 2.00.14.4):
``begin=["00:00", "09:00", "21:00"], end=["01:00", "11:30", "00:00"]`` is the trading day 21:00–01:00,
09:00–11:30. A trading day starts with its first session's pre-opening (at midnight, or where the previous
trading day's drop region ends) and runs to the next one:

* windows of ``window`` (a multiple of ``step``) end every ``step`` from each session's begin to its end,
  which must be ``step`` multiples apart; a window holds only rows of its own session;
* rows before a session's begin (before the first session, or between two sessions) count as rows at its
  begin: they are in its first window (every window holding its begin);
* rows after the last session until the end of that calendar day (or the next trading day's first
  session) are in no window: they close windows, nothing else;
* ``merge_session_end=True`` (``closed="left"``): a row stamped exactly at a session's end is in the
  session's last window, which a later row closes (as in Orca's example, where such a window waits for the
  forced trigger); otherwise that row closes the last window and belongs to the next session's first
  window (or to no window after the last session).

Windows close per key as in the time-series engine (the first row at or past the end + ``accepted_delay``;
``closed="right"``: past it). ``force_trigger_session_end_time``: Orca counts it on the wall clock; here
it is event time: the first row of any key at or past ``session end + value`` closes every key's windows up
to that session's end (so a replay closes them exactly where the first run did; keys are only those of
the same stream task). ``sub_window`` (tumbling windows, as in the time-series engine): only the rows in that
part of a window are aggregated, and the window closes at the first row at or past the sub-window's end
(``force_trigger_time`` counts from there too); rows before a session count as at its begin. ``update_time``
(tumbling windows), as in the time-series engine: a row in a later
update period of its window than its key's previous row (periods of ``update_time`` from the window's start;
rows before a session count as at its begin) first emits the window over the rows before it, so a window
may be emitted several times before its final emission. ``round_time`` is accepted and has no effect: it
picks the time-series engine's alignment of its first window from the first row's time, but here every
window starts at its session's begin + a multiple of ``step`` (sessions last multiples of ``step``), the
same for any first row. ``use_system_time``: a row's time is its micro-batch's input commit time (ms, the
same on replay; sessions are times of day of that UTC clock), and a micro-batch closes every key's windows
that ended before it (as in the time-series engine). ``force_trigger_time``, as in the time-series engine:
a row of another key at or past a window's end + the value closes that window (only keys seen so far are
forced). ``key_purge_daily``: see :mod:`headwater.engines.calendar_windows` — keys are forgotten at the
first row of a new trading day once nothing of theirs is left to emit, so no window is ever lost (Orca drops
the unfinished windows of the previous day).

>>> import pyarrow as pa
>>> from datetime import timedelta
>>> from headwater.engines.base import SEQ
>>> from headwater.parse import parse_metric
>>> from headwater.types import Schema
>>> spec = DailyTimeSeriesEngine(name="d", input_schema=Schema.parse({"t": "timestamp", "v": "double"}),
...     window=timedelta(minutes=1), step=timedelta(minutes=1), metrics=(parse_metric("sum(v) as v"),),
...     time_column="t", session_begin=("09:30", "13:00"), session_end=("11:30", "15:00"))
>>> import pandas as pd
>>> at = lambda hms: pd.Timedelta(hms).value // 1000  # µs after the epoch's midnight
>>> rows = pa.table({"t": pa.array([at("09:25:31"), at("09:30:02"), at("09:31:10")], pa.timestamp("us")),
...                  "v": [8.0, 26.0, 1.0], SEQ: [0, 1, 2]})
>>> p = spec.processor()
>>> state, out = p.process(p.new_state(), rows)
>>> out.to_pydict()["v"]  # the pre-opening row is in the first window, [09:30, 09:31)
[34.0]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from headwater.durations import format_duration, to_micros
from headwater.engines.arguments import (
    arg,
    columns,
    duration_or_zero,
    duration_pair,
    optional,
    times_of_day_or,
    windows_and_metrics,
)
from headwater.engines.base import SEQ, EngineKind, LateRowsProcessor
from headwater.engines.calendar_windows import (
    DAY_US,
    CalendarWindowProcessor,
    DayLayout,
    check_key_purge_freq,
    parse_time_of_day,
)
from headwater.engines.time_bucket import check_fill, check_timestamp
from headwater.engines.time_series import StepWindows
from headwater.engines.window_metrics import resolve_window_engine
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr
from headwater.kernels.windows import MAX_PANES


def _hhmm(us: int) -> str:
    """An offset from a trading day's midnight as text (``+1`` marks the next day)."""
    days, rest = divmod(us, DAY_US)
    seconds, micros = divmod(rest, 1_000_000)
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}" + (f":{seconds % 60:02d}" if seconds % 60 or micros else "")
    return text + (f".{micros:06d}" if micros else "") + (f"(+{days})" if days else "")


def session_offsets(begins: list[int], ends: list[int], *, where: str) -> list[tuple[int, int]]:
    """Sessions as (begin, end) offsets from the trading day's midnight, with Orca's next-day rules.

    >>> h = 3_600_000_000
    >>> [(b // h, e // h) for b, e in session_offsets([21 * h, 9 * h, 13 * h], [1 * h, 11 * h, 15 * h], where="w")]
    [(21, 25), (33, 35), (37, 39)]
    """
    if len(begins) > 1 and begins[0] == 0 and ends[-1] == 0:
        # a first session from midnight and a last one to midnight are one session across midnight
        begins, ends = [begins[-1], *begins[1:-1]], [ends[0], *ends[1:-1]]
    sessions: list[tuple[int, int]] = []
    shift = 0
    for b, e in zip(begins, ends, strict=True):
        begin = b + shift
        if sessions and begin < sessions[-1][1]:
            shift += DAY_US
            begin += DAY_US
        end = (e or DAY_US) + shift
        if end == begin:
            raise GraphDefinitionError(f"{where}: session {_hhmm(begin)}-{_hhmm(end)} is empty")
        if end < begin:
            shift += DAY_US
            end += DAY_US
        sessions.append((begin, end))
    span = sessions[-1][1] - sessions[0][0]
    if span > DAY_US:
        raise GraphDefinitionError(
            f"{where}: the sessions {', '.join(f'{_hhmm(b)}-{_hhmm(e)}' for b, e in sessions)} span more than a "
            "day (a session beginning before the previous one ends starts on the next day); check the order of "
            "session_begin and session_end")
    return sessions


MAX_DAY_PANES = 1_000_000  # steps in a day's sessions (a 24 h session: steps of 86.4 ms or more)


@dataclass(frozen=True)
class DailyTimeSeriesEngine(StepWindows):
    """Parameters of ``daily_time_series_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.DAILY_TIME_SERIES
    time_column: str | None  # None: use_system_time
    key_column: tuple[str, ...] = field(default=(), metadata=arg(columns))
    session_begin: tuple[str, ...] = field(default=("00:00",), metadata=arg(times_of_day_or(("00:00",))))
    session_end: tuple[str, ...] = field(default=(), metadata=arg(times_of_day_or(())))
    merge_session_end: bool = False
    accepted_delay: timedelta = field(default=timedelta(0), metadata=arg(duration_or_zero))
    closed: str = "left"
    use_window_start_time: bool = False
    fill: str | float = "none"
    key_purge_daily: bool = True
    force_trigger_session_end_time: timedelta | None = field(default=None, metadata=arg(optional(duration_or_zero)))
    late_rows_table: str | None = None  # the FQN of the table the late rows go to
    key_purge_freq_in_second: float | None = None
    force_trigger_time: timedelta | None = field(default=None, metadata=arg(optional(duration_or_zero)))
    use_system_time: bool = False
    update_time: timedelta | None = field(default=None, metadata=arg(optional(duration_or_zero)))
    # with several windows: the window of each metric, by position
    metric_windows: tuple[int, ...] = field(default=(), metadata=arg(windows_and_metrics, name="window"))
    round_time: bool = True  # accepted for Orca's signature; no effect (windows start at session begins)
    # (start, end) from each window's start
    sub_window: tuple[timedelta, timedelta] | None = field(default=None, metadata=arg(optional(duration_pair)))
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)
    _sessions: tuple[tuple[int, int], ...] = field(default=(), init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        step = to_micros(self.step)
        for w in self.windows:
            if to_micros(w) <= 0 or step <= 0:
                raise GraphDefinitionError(f"{where}: window and step must be positive, got window="
                                           f"{format_duration(w)}, step={format_duration(self.step)}")
            if to_micros(w) % step:
                raise GraphDefinitionError(f"{where}: window {format_duration(w)} must be a multiple of step "
                                           f"{format_duration(self.step)}; e.g. window='60s', step='30s'")
        begins, ends = self.session_begin, self.session_end
        if not isinstance(begins, tuple | list) or not begins:
            raise GraphDefinitionError(f"{where}: session_begin must be a list of times of day, got {clip(begins)}; "
                                       "e.g. session_begin=['09:30', '13:00']")
        if not isinstance(ends, tuple | list) or (ends and len(ends) != len(begins)):
            raise GraphDefinitionError(
                f"{where}: session_end must give one end per session_begin: got {len(begins)} begin(s) "
                f"{clip(list(begins))} and end(s) {clip(list(ends) if isinstance(ends, tuple | list) else ends)}")
        b = [parse_time_of_day(x, where=f"{where} session_begin[{i}]") for i, x in enumerate(begins)]
        e = [parse_time_of_day(x, where=f"{where} session_end[{i}]") for i, x in enumerate(ends)]
        begin_us = [us for us, _, _ in b]
        end_us = [us for us, _, _ in e] if e else [*begin_us[1:], 0]
        sessions = session_offsets(begin_us, end_us, where=where)
        for s_begin, s_end in sessions:
            if (s_end - s_begin) % step:
                raise GraphDefinitionError(
                    f"{where}: session {_hhmm(s_begin)}-{_hhmm(s_end)} lasts {format_duration(timedelta(microseconds=s_end - s_begin))}"
                    f", not a multiple of step {format_duration(self.step)}; windows are aligned to each session's "
                    "begin and must end at its end (Orca aligns such session bounds by a rule its documentation does "
                    "not give, and merge_last_window is not supported): pick a step that divides every session")
        day_steps = sum((s_end - s_begin) // step for s_begin, s_end in sessions)
        if day_steps > MAX_DAY_PANES:  # the day's layout keeps a pane per step
            raise GraphDefinitionError(f"{where}: the sessions of a day span {day_steps:,} steps of "
                                       f"{format_duration(self.step)}, over the limit of {MAX_DAY_PANES:,}: use a "
                                       "longer step")
        delay_steps = -(-to_micros(self.accepted_delay) // step)
        window_steps = max(to_micros(w) // step for w in self.windows) + delay_steps
        if window_steps > MAX_PANES:  # each key's open windows keep every aggregate's partial result per step
            raise GraphDefinitionError(f"{where}: a window and its accepted delay span {window_steps:,} steps of "
                                       f"{format_duration(self.step)}, over the limit of {MAX_PANES:,}: use a "
                                       "longer step")
        if self.closed not in ("left", "right"):
            raise GraphDefinitionError(f"{where}: closed must be 'left' or 'right', got {clip(self.closed)}")
        check_fill(self.fill, where=where)
        check_key_purge_freq(self.key_purge_freq_in_second, self.key_column, self.fill, where=where)
        if self.accepted_delay < timedelta(0):
            raise GraphDefinitionError(f"{where}: accepted_delay must not be negative, got {self.accepted_delay}")
        force = self.force_trigger_session_end_time
        if force is not None and force < timedelta(0):
            raise GraphDefinitionError(f"{where}: force_trigger_session_end_time must not be negative, got {force}")
        self._check_triggers(where)
        self._check_sub_window(where)
        object.__setattr__(self, "session_begin", tuple(text for _, text, _ in b))
        object.__setattr__(self, "session_end", tuple(text for _, text, _ in e))
        object.__setattr__(self, "_sessions", tuple(sessions))
        resolve_window_engine(self, where=where)
        self._check_windows(where)
        if self.time_column is not None:
            check_timestamp(self, where=where)

    def _check_triggers(self, where: str) -> None:
        """The time-series engine's rules for combining its triggers (Orca's)."""
        kick = self.force_trigger_time
        update = self.update_time
        if self.use_system_time and (kick is not None or update is not None or self.accepted_delay):
            raise GraphDefinitionError(
                f"{where}: use_system_time excludes force_trigger_time, update_time and accepted_delay (Orca's rule; "
                "a micro-batch closes every window that ended before it)")
        if update is not None:
            if update <= timedelta(0):
                raise GraphDefinitionError(
                    f"{where}: update_time must be a positive duration, got {format_duration(update) if update else '0s'}; Orca's "
                    "dailyTimeSeriesEngine has no update_time=0 (time_series_engine's emit after every micro-batch)")
            if self.windows != (self.step,):
                raise GraphDefinitionError(
                    f"{where}: update_time needs tumbling windows (window == step), got window="
                    f"{'/'.join(map(format_duration, self.windows))}, step={format_duration(self.step)}")
            if to_micros(self.step) % to_micros(update):
                raise GraphDefinitionError(f"{where}: update_time {format_duration(update)} must divide step "
                                           f"{format_duration(self.step)}; e.g. step='60s', update_time='10s'")
            if kick is not None or self.accepted_delay:
                raise GraphDefinitionError(
                    f"{where}: update_time excludes force_trigger_time and accepted_delay (Orca's rule), got "
                    f"update_time={format_duration(update)}"
                    + (f", force_trigger_time={format_duration(kick)}" if kick is not None else "")
                    + (f", accepted_delay={format_duration(self.accepted_delay)}" if self.accepted_delay else ""))
        if kick is not None:
            if kick < timedelta(0):
                raise GraphDefinitionError(f"{where}: force_trigger_time must not be negative, got "
                                           f"{clip(kick)}; e.g. force_trigger_time='5s'")
            if self.accepted_delay:
                raise GraphDefinitionError(
                    f"{where}: force_trigger_time excludes accepted_delay (Orca's rule), got force_trigger_time="
                    f"{format_duration(kick)}, accepted_delay={format_duration(self.accepted_delay)}")

    def _check_sub_window(self, where: str) -> None:
        """Orca's rules: tumbling windows, no update_time, no system time."""
        if self.sub_window is None:
            return
        if not (isinstance(self.sub_window, tuple) and len(self.sub_window) == 2
                and all(isinstance(x, timedelta) for x in self.sub_window)):
            raise GraphDefinitionError(f"{where}: sub_window must be a pair of durations, got {clip(self.sub_window)}; "
                                       "e.g. sub_window=('0s', '10s')")
        lo, hi = self.sub_window
        if self.windows != (self.step,) or self.update_time is not None or self.use_system_time:
            raise GraphDefinitionError(
                f"{where}: sub_window needs tumbling windows (window == step), no update_time and no "
                f"use_system_time (Orca's rule), got window={'/'.join(map(format_duration, self.windows))}, "
                f"step={format_duration(self.step)}" + (", update_time" if self.update_time is not None else "")
                + (", use_system_time" if self.use_system_time else ""))
        if not timedelta(0) <= lo < hi <= self.step:
            raise GraphDefinitionError(
                f"{where}: sub_window {format_duration(lo) if lo else '0s'}:{format_duration(hi) if hi else '0s'} must "
                f"lie inside the window {format_duration(self.step)} with start < end; e.g. sub_window=('0s', '10s')")

    def _check_windows(self, where: str) -> None:
        if self.check_several_windows(where) and (self.use_window_start_time or self.update_time is not None or
                                                  self.key_purge_freq_in_second is not None):
            raise GraphDefinitionError(f"{where}: several windows exclude use_window_start_time (Orca's rule), "
                                       "update_time and key_purge_freq_in_second (as in time_series_engine)")

    def properties(self) -> dict[str, Any]:
        return {
            "windowSize": (format_duration(self.window) if not isinstance(self.window, tuple)
                           else [format_duration(w) for w in self.window]),
            "step": format_duration(self.step),
            "metrics": [str(m) for m in self.metrics], "timeColumn": self.time_column,
            "keyColumn": list(self.key_column), "sessionBegin": list(self.session_begin),
            "sessionEnd": list(self.session_end),
            "sessions": [f"{_hhmm(b)}-{_hhmm(e)}" for b, e in self._sessions],
            "mergeSessionEnd": self.merge_session_end,
            "acceptedDelay": format_duration(self.accepted_delay) if self.accepted_delay else "0s",
            "closed": self.closed, "useWindowStartTime": self.use_window_start_time, "fill": self.fill,
            "keyPurgeDaily": self.key_purge_daily,
            "forceTriggerSessionEndTime": (None if self.force_trigger_session_end_time is None else "0s"
                                           if not self.force_trigger_session_end_time
                                           else format_duration(self.force_trigger_session_end_time)),
            **({"lateRowsTable": self.late_rows_table} if self.late_rows_table else {}),
            **({"keyPurgeFreqInSecond": self.key_purge_freq_in_second} if self.key_purge_freq_in_second else {}),
            # options added later appear only when set, so graphs stored before them still resume
            **({"forceTriggerTime": format_duration(self.force_trigger_time) if self.force_trigger_time else "0s"}
               if self.force_trigger_time is not None else {}),
            **({"useSystemTime": True} if self.use_system_time else {}),
            **({"updateTime": format_duration(self.update_time)} if self.update_time is not None else {}),
            **({"metricWindows": list(self.metric_windows)} if self.metric_windows else {}),
            **({"roundTime": False} if not self.round_time else {}),
            **({"subWindow": ":".join(format_duration(x) if x else "0s" for x in self.sub_window)}
               if self.sub_window is not None else {}),
        }

    def layout(self, window_size: timedelta | None = None) -> DayLayout:
        """Panes of ``step`` per session; the first pane of a session also holds the time before it. The
        windows are ``window_size`` long (default: the first window). With ``sub_window`` (tumbling windows) a
        pane is only that part of its window, which closes at the sub-window's end; the time before a session
        counts as its begin, so it is in the first pane only if the sub-window starts there."""
        step, window = to_micros(self.step), to_micros(self.windows[0] if window_size is None else window_size)
        sub_lo, sub_hi = (0, step) if self.sub_window is None else map(to_micros, self.sub_window)
        merge = self.merge_session_end and self.closed == "left"
        sessions = self._sessions
        last_end = sessions[-1][1]
        drop_end = min(-(-last_end // DAY_US) * DAY_US, DAY_US + sessions[0][0])
        day_start = drop_end - DAY_US  # a trading day runs from here for 24 h
        parts: list[dict[str, np.ndarray]] = []  # one per session, built with numpy: a day may hold 10^6 panes
        session_last: list[int] = []
        previous_end, k0 = day_start, 0
        for s_begin, s_end in sessions:
            n = (s_end - s_begin) // step
            start = s_begin + np.arange(n, dtype=np.int64) * step
            lo = start + sub_lo
            if sub_lo == 0 and n:
                lo[0] = previous_end
            end = start + sub_hi
            hi = end.copy()
            if merge and sub_hi == step and n:  # merged, a row at the session's end is its last window's last row
                hi[-1] += 1
            parts.append({"lo": lo, "hi": hi, "out_end": start + step, "due": end,
                          "first": np.full(n, k0, dtype=np.int64), "last": np.full(n, k0 + n - 1, dtype=np.int64)})
            session_last.append(k0 + n - 1)
            previous_end = s_end + 1 if merge else s_end
            k0 += n
        day = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
        return DayLayout(lo=day["lo"], hi=day["hi"], close_at=day["hi"], out_end=day["out_end"],
                         out_start=day["out_end"] - window, first=day["first"], last=day["last"], start=day_start,
                         shift=1 if self.closed == "right" else 0, session_end=[e for _, e in sessions],
                         session_last=session_last, due=day["due"])

    def processor(self) -> CalendarWindowProcessor | SeveralWindowsProcessor:
        groups = [(positions, self._window_processor(w, positions)) for w, positions in self.metric_groups()]
        return groups[0][1] if not isinstance(self.window, tuple) else SeveralWindowsProcessor(self, groups)

    def _window_processor(self, window: timedelta, positions: list[int]) -> CalendarWindowProcessor:
        step = to_micros(self.step)
        delay = to_micros(self.accepted_delay)
        force, kick = self.force_trigger_session_end_time, self.force_trigger_time
        return CalendarWindowProcessor(
            self, self.layout(window), panes_per_window=to_micros(window) // step, delay=delay, fill=self.fill,
            force_after=None if force is None else to_micros(force),
            # on system time every row of a micro-batch has its commit time: a batch closes every key's windows
            kick_after=0 if self.use_system_time else None if kick is None else to_micros(kick),
            update=None if self.update_time is None else to_micros(self.update_time), purge_daily=self.key_purge_daily,
            purge_every=self.key_purge_freq_in_second, use_window_start_time=self.use_window_start_time,
            max_open_panes=to_micros(window) // step + -(-delay // step) + 2, metrics=positions)


class SeveralWindowsProcessor(LateRowsProcessor):
    """Orca's vector windowSize: one calendar-window processor per window size (each with its metrics) over
    the same rows. An output row is one (closing row, key, window end); a size that emitted no window there
    gives NULLs (as in the time-series engine). A row is late when every size dropped it."""

    def __init__(self, spec: DailyTimeSeriesEngine, groups: list[tuple[list[int], CalendarWindowProcessor]]) -> None:
        self.spec = spec
        self.groups = groups
        self.out_schema = spec.output_schema()
        self.lead = [self.out_schema.names[0], *spec.key_column, SEQ]  # what identifies an output row

    def new_state(self) -> dict[str, Any]:
        return {"groups": [p.new_state() for _, p in self.groups], "late_rows": 0}

    def stats(self, state: dict[str, Any]) -> dict[str, int]:
        return {"keys": len(state["groups"][0]["keys"]), "late_rows": state["late_rows"]}

    def process_routed(self, state: dict[str, Any], table: pa.Table, *,
                       batch_time: float = 0.0) -> tuple[dict[str, Any], pa.Table, np.ndarray | None]:
        runs = [p.process_routed(old, table, batch_time=batch_time)
                for (_, p), old in zip(self.groups, state["groups"], strict=True)]
        masks = [dropped for _, _, dropped in runs if dropped is not None]
        dropped = np.logical_and.reduce(masks) if len(masks) == len(runs) else None
        late = 0 if dropped is None else int(np.count_nonzero(dropped))
        new_state = {"groups": [s for s, _, _ in runs], "late_rows": state["late_rows"] + late}
        return new_state, self._merged([out for _, out, _ in runs]), dropped if late else None

    def _merged(self, outs: list[pa.Table]) -> pa.Table:
        schema = self.out_schema.to_arrow().append(pa.field(SEQ, pa.int64()))
        base = pa.concat_tables([out.select(self.lead) for out in outs])
        if base.num_rows == 0:
            return schema.empty_table()
        codes = np.column_stack([pd.factorize(base[c].to_pandas(), use_na_sentinel=False)[0] for c in self.lead])
        unique, first, inverse = np.unique(codes, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        rows = base.take(pa.array(first))
        columns: dict[int, pa.Array] = {}
        start = 0
        for (positions, _), out in zip(self.groups, outs, strict=True):
            at = np.full(len(unique), -1, dtype=np.int64)
            at[inverse[start:start + out.num_rows]] = np.arange(out.num_rows)
            start += out.num_rows
            index = pa.array(at, mask=at < 0)
            for p in positions:
                columns[p] = out[self.out_schema.names[1 + len(self.spec.key_column) + p]].take(index)
        arrays = [rows[c] for c in self.lead[:-1]] + [columns[p] for p in sorted(columns)] + [rows[SEQ]]
        merged = pa.table(arrays, schema=schema)
        order = pc.sort_indices(merged, sort_keys=[(c, "ascending") for c in (SEQ, *self.lead[:-1])])
        return merged.take(order)
