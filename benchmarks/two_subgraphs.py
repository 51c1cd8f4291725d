"""The two-subgraph graph several benchmarks run: source -> parallelize(k, 2) -> reactive -> buffer ->
parallelize(k, 2) -> reactive -> sink, on rows of a string key ``k`` and a double ``v``."""

from __future__ import annotations

from typing import Any


def two_subgraphs(session: Any, name: str, source: str, mid: str, out: str) -> Any:
    """Declare the graph ``name`` on ``session`` (not submitted)."""
    g = session.stream_graph(name)
    (g.source(source, schema={"k": "string", "v": "double"}).parallelize("k", 2)
       .reactive_state_engine(key_column="k", metrics=["cumsum(v) as c"]).sync().buffer(mid)
       .parallelize("k", 2).reactive_state_engine(key_column="k", metrics=["c", "ema(c, 3) as e"]).sync()
       .sink(out))
    return g
