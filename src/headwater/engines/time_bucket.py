"""The time-bucket engine: per-key windows between given times of day (Orca's timeBucketEngine, C.4).

Consecutive ``time_cut_points`` bound the windows, the same on every calendar day of the time column;
only rows between the first and the last cut point are aggregated. The cut points' precision (a minute
for ``"HH:MM"``, a second for ``"HH:MM:SS"`` or ``datetime.time``) is the unit ``u`` of the closing rule:

* ``closed="left"`` (Orca's default): the window ``[a, b)`` holds the rows with ``a <= t <= b - u``
  and closes on the first row of its key at or past ``b - u``. So rows stamped ``b - u`` exactly are
  the window's last rows and close it at once: a 5-minute bar built from 1-minute bars stamped with
  their start (09:00 ... 09:04) is emitted with the 09:04 bar, a minute before a time-series engine
  could. Rows strictly between ``b - u`` and ``b`` (09:04:00.1 for ``[09:00, 09:05)``) are in no
  window (Orca: "data after 09:04 such as 09:04:00.100 is not computed"); they still close it.
* ``closed="right"``: the window ``(a, b]`` holds ``a < t <= b`` and closes on the first row at or
  past ``b``; a row stamped ``b`` is its last row and closes it at once.

A row whose window has already been emitted for its key is dropped (a row out of order, or a second row
stamped exactly at a closing instant). Rows with a NULL time are dropped. See
:mod:`headwater.engines.calendar_windows` for ``fill`` and the output order.

>>> import pyarrow as pa
>>> from headwater.engines.base import SEQ
>>> from headwater.parse import parse_metric
>>> from headwater.types import Schema
>>> spec = TimeBucketEngine(name="b", input_schema=Schema.parse({"t": "timestamp", "v": "double"}),
...                         time_cut_points=("09:00", "09:05"), metrics=(parse_metric("sum(v) as v"),),
...                         time_column="t")
>>> minute = 60_000_000
>>> rows = pa.table({"t": pa.array([(540 + m) * minute for m in range(5)], pa.timestamp("us")),
...                  "v": [1.0, 2.0, 3.0, 4.0, 5.0], SEQ: [0, 1, 2, 3, 4]})
>>> p = spec.processor()
>>> state, out = p.process(p.new_state(), rows)
>>> out.to_pydict()["v"], out.to_pydict()[SEQ]  # the 09:04 row is the last of [09:00, 09:05) and closes it
([15.0], [4])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from headwater.engines.arguments import arg, columns, metric_list, times_of_day
from headwater.engines.base import EngineKind, OneInputEngine
from headwater.engines.calendar_windows import (
    MINUTE_US,
    SECOND_US,
    CalendarWindowProcessor,
    DayLayout,
    check_key_purge_freq,
    parse_time_of_day,
)
from headwater.engines.window_metrics import WindowEngine, resolve_window_engine
from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Expr

FILL_MODES = ("none", "null", "ffill")


def check_fill(fill: Any, *, where: str) -> None:
    """``fill`` is one of :data:`FILL_MODES` or a number."""
    if isinstance(fill, str):
        if fill not in FILL_MODES:
            raise GraphDefinitionError(f"{where}: fill must be one of {', '.join(FILL_MODES)} or a number, "
                                       f"got {clip(fill)}")
    elif isinstance(fill, bool) or not isinstance(fill, int | float):
        raise GraphDefinitionError(f"{where}: fill must be one of {', '.join(FILL_MODES)} or a number, "
                                   f"got {clip(fill)} of type {type(fill).__name__}")


def check_timestamp(spec: Any, *, where: str) -> None:
    """The engine's time column holds timestamps (times of day need them)."""
    typ = spec.input_schema[spec.time_column]
    if typ != "timestamp":
        raise GraphDefinitionError(f"{where}: time_column {clip(spec.time_column)} has type {typ}; this engine cuts "
                                   "windows at times of day, so it needs a timestamp column")


@dataclass(frozen=True)
class TimeBucketEngine(WindowEngine, OneInputEngine):
    """Parameters of ``time_bucket_engine`` (validated against the input schema on creation)."""

    kind: ClassVar[EngineKind] = EngineKind.TIME_BUCKET
    time_cut_points: tuple[str, ...] = field(metadata=arg(times_of_day))
    metrics: tuple[Expr, ...] = field(metadata=arg(metric_list))
    time_column: str
    key_column: tuple[str, ...] = field(default=(), metadata=arg(columns))
    use_window_start_time: bool = False
    closed: str = "left"
    fill: str | float = "none"
    key_purge_freq_in_second: float | None = None
    late_rows_table: str | None = None  # the FQN of the table the late rows go to
    _outputs: tuple[tuple[str, Expr], ...] = field(default=(), init=False, repr=False, compare=False)
    _cuts: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False)
    _unit: int = field(default=0, init=False, repr=False, compare=False)

    def validate(self) -> None:
        where = self.where
        points = self.time_cut_points
        if not isinstance(points, tuple | list) or len(points) < 2:
            raise GraphDefinitionError(
                f"{where}: time_cut_points must be a list of at least two times of day, got {clip(points)}; "
                "e.g. time_cut_points=['09:30', '10:00', '10:30']")
        parsed = [parse_time_of_day(p, where=f"{where} time_cut_points[{i}]") for i, p in enumerate(points)]
        units = {unit for _, _, unit in parsed}
        if len(units) > 1 or units - {MINUTE_US, SECOND_US}:
            raise GraphDefinitionError(
                f"{where}: time_cut_points must all be minutes ('HH:MM') or all seconds ('HH:MM:SS' or "
                f"datetime.time), got {', '.join(clip(text) for _, text, _ in parsed)}; their precision is the "
                "unit of the closing rule")
        for i in range(1, len(parsed)):
            if parsed[i][0] <= parsed[i - 1][0]:
                raise GraphDefinitionError(
                    f"{where}: time_cut_points must increase strictly, but {clip(parsed[i][1])} (index {i}) "
                    f"follows {clip(parsed[i - 1][1])}")
        if self.closed not in ("left", "right"):
            raise GraphDefinitionError(f"{where}: closed must be 'left' or 'right', got {clip(self.closed)}")
        check_fill(self.fill, where=where)
        check_key_purge_freq(self.key_purge_freq_in_second, self.key_column, self.fill, where=where)
        object.__setattr__(self, "time_cut_points", tuple(text for _, text, _ in parsed))
        object.__setattr__(self, "_cuts", tuple(us for us, _, _ in parsed))
        object.__setattr__(self, "_unit", units.pop())
        resolve_window_engine(self, where=where)
        check_timestamp(self, where=where)

    def properties(self) -> dict[str, Any]:
        return {"timeCutPoints": list(self.time_cut_points), "metrics": [str(m) for m in self.metrics],
                "timeColumn": self.time_column, "keyColumn": list(self.key_column),
                "useWindowStartTime": self.use_window_start_time, "closed": self.closed, "fill": self.fill,
                "keyPurgeFreqInSecond": self.key_purge_freq_in_second,
                **({"lateRowsTable": self.late_rows_table} if self.late_rows_table else {})}

    def layout(self) -> DayLayout:
        """The windows of a day: ``[a, b - unit]`` (left) or ``(a, b]`` (right) between consecutive cut points."""
        a, b, u = list(self._cuts[:-1]), list(self._cuts[1:]), self._unit
        if self.closed == "left":
            return DayLayout.from_panes(lo=a, hi=[x - u + 1 for x in b], close_at=[x - u for x in b], out_end=b)
        return DayLayout.from_panes(lo=[x + 1 for x in a], hi=[x + 1 for x in b], close_at=b, out_end=b, out_start=a)



class TimeBucketProcessor(CalendarWindowProcessor, runs=TimeBucketEngine):
    def __init__(self, spec: TimeBucketEngine) -> None:
        super().__init__(spec, spec.layout(), fill=spec.fill, use_window_start_time=spec.use_window_start_time,
                         purge_every=spec.key_purge_freq_in_second)
