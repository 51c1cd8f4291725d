"""The daily time-series engine's reference for the tests: Orca's C.2 read row by row over an explicit
calendar, written independently of the engine (no panes, no partials: rows kept per window and aggregated
with pandas when a window is emitted)."""

from __future__ import annotations

import numpy as np
import pandas as pd

SCHEMA = {"t": "timestamp", "k": "string", "v": "double"}
METRICS = ["sum(v) as total", "count(v) as n", "max(v) - min(v) as rng", "first(v) as f", "last(v) as l",
           "avg(v) as mean", "std(v) as sd"]
COLUMNS = ["t", "k", "total", "n", "rng", "f", "l", "mean", "sd"]
H, M, ZERO = pd.Timedelta(hours=1), pd.Timedelta(minutes=1), pd.Timedelta(0)

# Two calendars written out by hand: the trading day D (a date) starts at D + start and has these sessions.
CALENDARS = {
    "day": {"begin": ["09:30", "09:45"], "end": ["09:40", "09:55"], "start": pd.Timedelta(0),
            "sessions": [(9 * H + 30 * M, 9 * H + 40 * M), (9 * H + 45 * M, 9 * H + 55 * M)],
            "first_row": 9 * H + 28 * M},
    # 23:50-24:00, then 00:05-00:15 of the next calendar day; the day starts at 23:50 (after the drop region)
    "night": {"begin": ["23:50", "00:05"], "end": ["00:00", "00:15"], "start": 23 * H + 50 * M,
              "sessions": [(23 * H + 50 * M, 24 * H), (24 * H + 5 * M, 24 * H + 15 * M)],
              "first_row": 23 * H + 48 * M},
}


# ---- the reference: C.2 read row by row over an explicit calendar ------------------------------------------

class Reference:
    """``force``: forced session ends (every key, keys seen later too); ``kick``: the time-series engine's
    forced trigger (a row closes the other keys' windows that ended ``kick`` before it); ``purge``: keys
    with nothing left to emit are forgotten at the first row of a new trading day (key_purge_daily);
    ``update`` (tumbling windows): a row in a later update period of its window than its key's previous row
    first emits the window over the rows before it (periods from the window's start; rows before the
    session count as at its begin); ``sub`` (tumbling windows): a (start, end) part of each window, the only
    rows aggregated, and where the window is due (it closes at the first row at or past its end)."""

    def __init__(self, calendar: dict, *, window: pd.Timedelta, step: pd.Timedelta, closed: str = "left",
                 merge: bool = False, delay: pd.Timedelta = ZERO, fill=None, force=None,
                 start_time: bool = False, kick=None, purge: bool = False, update=None, sub=None) -> None:
        self.cal, self.window, self.step, self.closed, self.merge = calendar, window, step, closed, merge
        self.delay, self.fill, self.force, self.start_time = delay, fill, force, start_time
        self.kick, self.purge, self.update, self.sub = kick, purge, update, sub
        self.m = window // step

    def trading_day(self, t: pd.Timestamp) -> pd.Timestamp:
        eps = pd.Timedelta(microseconds=1) if self.closed == "right" else pd.Timedelta(0)
        return (t - self.cal["start"] - eps).normalize()

    def panes(self, day: pd.Timestamp) -> list[tuple]:
        """(day, session, index) of every pane of a trading day, with its end."""
        out = []
        for i, (b, e) in enumerate(self.cal["sessions"]):
            out += [((day, i, k), day + b + (k + 1) * self.step) for k in range((e - b) // self.step)]
        return out

    def pane_of(self, t: pd.Timestamp):
        day = self.trading_day(t)
        sessions = self.cal["sessions"]
        for i, (b, e) in enumerate(sessions):
            begin, end = day + b, day + e
            if (t < begin) if self.closed == "left" else (t <= begin):
                return day, i, 0  # before the session (pre-opening or between sessions): its first window
            if self.closed == "left" and (t < end or (self.merge and t == end)):
                return day, i, min((t - begin) // self.step, (e - b) // self.step - 1)
            if self.closed == "right" and t <= end:
                return day, i, -(-(t - begin) // self.step) - 1
        return None  # after the day's last session

    def last_of_session(self, p) -> tuple:
        day, i, _ = p
        b, e = self.cal["sessions"][i]
        return day, i, (e - b) // self.step - 1

    def due(self, p, end: pd.Timestamp) -> pd.Timestamp:
        """Where window ``p`` (ending at ``end``) is due: its end, or its sub-window's."""
        return end if self.sub is None else self.start_of(p) + self.sub[1]

    def in_sub(self, p, t: pd.Timestamp) -> bool:
        """Whether a row of window ``p`` at ``t`` is in its sub-window (rows before the session: at its begin)."""
        if self.sub is None:
            return True
        lo, hi = self.sub
        offset = t - self.start_of(p)
        if offset < ZERO or (offset == ZERO and self.closed == "right"):
            return lo == ZERO
        return lo <= offset < hi or offset == self.step == hi if self.closed == "left" else lo < offset <= hi

    def closes(self, p, end: pd.Timestamp, t: pd.Timestamp) -> bool:
        """Left: at or past the end; right, or a session's last window holding its end row: past it."""
        holds_end = self.closed == "right" or (self.merge and p == self.last_of_session(p) and self.due(p, end) == end)
        due = self.due(p, end)
        return due + self.delay < t if holds_end else due + self.delay <= t

    def start_of(self, p) -> pd.Timestamp:
        day, i, k = p
        return day + self.cal["sessions"][i][0] + k * self.step

    def period(self, p, t: pd.Timestamp) -> int:
        eps = pd.Timedelta(microseconds=1) if self.closed == "right" else pd.Timedelta(0)
        return max(t - eps - self.start_of(p), pd.Timedelta(0)) // self.update

    def idle(self, st_: dict) -> bool:
        """Nothing of the key is left to emit: each window holding its rows was emitted, and (with fill) its last
        day with an emitted window is over."""
        for p in st_["rows"]:
            last_window = min((p[0], p[1], p[2] + self.m - 1), self.last_of_session(p))
            if st_["closed"] is None or last_window > st_["closed"]:
                return False
        if self.fill is None or st_["last_emit"] is None:
            return True
        last_day = self.panes(st_["last_emit"][0])[-1][0]
        return st_["closed"] >= last_day

    def run(self, rows: pd.DataFrame, *, triggers: bool = False) -> pd.DataFrame:
        """The windows emitted, in order; ``triggers``: with the position of the row that emitted each."""
        out, keys = [], {}
        forced = None
        newest = None  # the latest trading day of any row
        one_day = pd.Timedelta(days=1)

        def close(key, upto, trigger):
            st_ = keys[key]
            if st_["closed"] is not None and upto <= st_["closed"]:
                return
            days = [p[0] for p in st_["rows"]] + ([st_["last_emit"][0]] if st_["last_emit"] else []) + [upto[0]]
            d = min(days)
            while d <= upto[0]:
                for p, end in self.panes(d):
                    if (st_["closed"] is not None and p <= st_["closed"]) or p > upto:
                        continue
                    lo = max(0, p[2] - self.m + 1)
                    # first/last follow arrival, also across panes (as the time-series engine)
                    values = [v for _, v in sorted(x for j in range(lo, p[2] + 1)
                                                   for x in st_["rows"].get((p[0], p[1], j), []))]
                    if values:
                        vals = aggregates(values)
                    elif self.fill is not None and st_["last_emit"] is not None and st_["last_emit"][0] == p[0]:
                        vals = dict(st_["last_vals"]) if self.fill == "ffill" else (
                            dict.fromkeys(aggregates([np.nan]), np.nan) if self.fill == "null"
                            else {**dict.fromkeys(aggregates([np.nan]), float(self.fill)), "rng": 0.0})
                    else:
                        continue
                    out.append({"t": end - self.window if self.start_time else end, "k": key, **vals,
                                "trigger": trigger})
                    st_["last_emit"], st_["last_vals"] = p, vals
                d += one_day
            st_["closed"] = upto

        for pos, row in enumerate(rows.itertuples(index=False)):
            if pd.isna(row.t):
                continue
            day = self.trading_day(row.t)
            if self.purge and newest is not None and day > newest:
                for key in [k for k, st_ in keys.items() if st_["last_day"] < day and self.idle(st_)]:
                    del keys[key]
            newest = day if newest is None else max(newest, day)
            if self.kick is not None:
                ended = [q for d in (day - 2 * one_day, day - one_day, day) for q, end in self.panes(d)
                         if self.due(q, end) + self.kick <= row.t]
                for key in keys:
                    if ended and key != row.k:
                        close(key, ended[-1], pos)
            st_ = keys.setdefault(row.k, {"rows": {}, "closed": None, "last_emit": None, "last_vals": None,
                                          "last_day": day})
            st_["last_day"] = max(st_["last_day"], day)
            if forced is not None and (st_["closed"] is None or st_["closed"] < forced):
                st_["closed"] = forced
            p = self.pane_of(row.t)
            if p is not None and self.in_sub(p, row.t):
                last_window = min((p[0], p[1], p[2] + self.m - 1), self.last_of_session(p))
                if st_["closed"] is None or last_window > st_["closed"]:
                    if self.update is not None:
                        mark = st_.get("mark")
                        if mark is not None and mark[0] == p and self.period(p, row.t) > mark[1]:
                            end = self.start_of(p) + self.step
                            out.append({"t": end - self.window if self.start_time else end, "k": row.k,
                                        **aggregates([v for _, v in st_["rows"][p]]), "trigger": pos})
                        st_["mark"] = (p, self.period(p, row.t))
                    st_["rows"].setdefault(p, []).append((pos, row.v))
            closable = [q for d in (day - 2 * one_day, day - one_day, day) for q, end in self.panes(d)
                        if self.closes(q, end, row.t)]
            if closable:
                close(row.k, closable[-1], pos)
            if self.force is not None:
                ended = [(d + e, self.last_of_session((d, i, 0))) for d in (day - one_day, day)
                         for i, (_, e) in enumerate(self.cal["sessions"]) if d + e + self.force <= row.t]
                if ended and (forced is None or ended[-1][1] > forced):
                    forced = ended[-1][1]
                    for key in keys:
                        close(key, forced, pos)
        frame = pd.DataFrame(out, columns=[*COLUMNS, "trigger"])
        frame = frame.sort_values(["trigger", "t", "k"], kind="stable").reset_index(drop=True)
        return frame if triggers else frame.drop(columns="trigger")


def aggregates(values: list[float]) -> dict[str, float]:
    v = pd.Series(values, dtype=float)
    return {"total": v.sum(min_count=1), "n": float(v.count()), "rng": v.max() - v.min(), "f": v.iloc[0],
            "l": v.iloc[-1], "mean": v.mean(), "sd": v.std(ddof=1)}


# ---- data and harness ------------------------------------------------------------------------------------

def make_rows(seed: int, calendar: str = "day", n: int = 240) -> pd.DataFrame:
    """Rows over three trading days from before the first session to after the last: steps of seconds,
    a fifth on whole minutes (session and window ends), out-of-order rows, NULL times and values."""
    rng = np.random.default_rng(seed)
    first = CALENDARS[calendar]["first_row"]
    days = np.sort(rng.choice(pd.to_datetime(["2026-01-05", "2026-01-06", "2026-01-08"]), n))
    clock: dict = {}
    times = []
    for d in days:
        t = clock.get(d, pd.Timestamp(d) + first) + pd.Timedelta(seconds=int(rng.choice([0, 5, 10, 20, 30, 60, 90])))
        if rng.random() < 0.2:
            t = t.ceil("min")
        clock[d] = t
        times.append(t)
    frame = pd.DataFrame({"t": pd.Series(times), "k": rng.choice(["a", "b", "c"], n),
                          "v": rng.integers(0, 50, n).astype(float)})
    late = rng.random(n) < 0.05
    frame.loc[late, "t"] = frame.loc[late, "t"] - pd.Timedelta(seconds=90)
    frame.loc[rng.random(n) < 0.05, "v"] = np.nan
    frame.loc[rng.random(n) < 0.02, "t"] = pd.NaT
    return frame


