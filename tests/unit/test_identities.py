"""Engine names and state keys derive from the graph's structure and user names, not node numbering: adding an
unrelated branch leaves every existing engine's name and every subgraph's state key unchanged."""

from __future__ import annotations

import headwater as hw

SCHEMA = {"time": "timestamp", "sym": "string", "px": "double"}


def identities(g: hw.StreamGraph) -> tuple[set[str], set[str]]:
    physical = g.plan()
    engines = {n.name for n in physical.nodes.values() if n.type.endswith("ENGINE")}
    return engines, {sg.key(physical) for sg in physical.subgraphs}


def declare(session: hw.Session, *, extra_branch_first: bool) -> hw.StreamGraph:
    g = session.stream_graph("g")
    if extra_branch_first:  # an unrelated branch declared before the others: shifts every node number
        g.source("other", schema=SCHEMA).parallelize("sym", 2) \
            .reactive_state_engine(key_column="sym", metrics=["time", "cumsum(px) as c"]).sync().sink("other_out")
    bars = (g.source("trade", schema=SCHEMA).parallelize("sym", 2)
              .time_series_engine(window="60s", step="60s", time_column="time", key_column="sym",
                                  metrics=["last(px) as px"]).sync().buffer("bars"))
    bars.parallelize("sym", 3).reactive_state_engine(key_column="sym", metrics=["time", "ema(px, 5) as e"]) \
        .sync().sink("signals")
    bars.parallelize("sym", 3).reactive_state_engine(key_column="sym", metrics=["time", "mavg(px, 3) as m"]) \
        .sync().sink("averages")
    return g


def test_names_and_state_keys_do_not_depend_on_node_numbering(session):
    engines, keys = identities(declare(session, extra_branch_first=False))
    engines2, keys2 = identities(declare(session, extra_branch_first=True))
    assert engines == {"time_series_trade", "reactive_state_bars", "reactive_state_bars_2"}
    assert engines <= engines2 and keys <= keys2
    assert "trade__time_series_trade" in keys
