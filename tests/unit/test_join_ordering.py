"""The joins' per-key order passes against brute force: which rows keep their key's time order, and the
right rows around a probe time (the last at or before it, the first after it)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from headwater.engines.joins.ordering import NO_TIME, RightRows, in_order

rows = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 12)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(rows=rows, seen=st.lists(st.one_of(st.just(NO_TIME), st.integers(0, 12)), min_size=5, max_size=5))
def test_in_order_keeps_rows_not_older_than_an_earlier_row_of_their_key(rows, seen):
    slots, times = (np.array([r[i] for r in rows], dtype=np.int64) for i in (0, 1))
    latest = np.array(seen, dtype=np.int64)
    want_latest, want = list(seen), []
    for s, t in rows:
        want.append(t >= want_latest[s])
        want_latest[s] = max(want_latest[s], t)
    assert in_order(slots, times, latest).tolist() == want
    assert latest.tolist() == want_latest


@settings(max_examples=200, deadline=None)
@given(rows=rows, probes=st.lists(st.tuples(st.integers(0, 6), st.integers(-1, 13)), max_size=20),
       sort_per_key=st.booleans())
def test_right_rows_around_a_probe_are_its_keys_neighbours_in_time_then_arrival(rows, probes, sort_per_key):
    if sort_per_key:  # how a join keeps them; otherwise the full sort is taken
        rows = sorted(rows, key=lambda r: r[1])
    slots, times = (np.array([r[i] for r in rows], dtype=np.int64) for i in (0, 1))
    seqs = np.arange(len(rows), dtype=np.int64)
    rights = RightRows(slots, times, seqs)
    order = sorted(range(len(rows)), key=lambda i: (slots[i], times[i], seqs[i]))
    assert rights.pos.tolist() == order
    before, after = rights.around(np.array([p[0] for p in probes], np.int64), np.array([p[1] for p in probes], np.int64))
    for (slot, t), b, a in zip(probes, before, after, strict=True):
        mine = [k for k, i in enumerate(order) if slots[i] == slot]
        at_or_before = [k for k in mine if times[order[k]] <= t]
        later = [k for k in mine if times[order[k]] > t]
        assert b == (at_or_before[-1] if at_or_before else -1)
        assert a == (later[0] if later else -1)
    probe_slots = np.array([p[0] for p in probes], np.int64)
    probe_times = np.array([p[1] for p in probes], np.int64)
    lows, highs = rights.search(probe_slots, probe_times, "left"), rights.search(probe_slots, probe_times, "right")
    for (slot, t), low, high in zip(probes, lows, highs, strict=True):  # the window join's [t, t] range
        assert [order[k] for k in range(low, high)] == [i for i in order if slots[i] == slot and times[i] == t]
