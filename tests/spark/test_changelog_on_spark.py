"""Change-log tables on Spark: a graph from a changelog_source to a changelog_sink runs as submitted, and SQL over
either table returns the net state, equal to a pandas upsert/delete of the same operations."""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.test_changelog import KEYS, SCHEMA, changes, reference, tidy

import headwater as hw

pytestmark = pytest.mark.spark


def test_sql_over_a_changelog_source_and_sink_returns_the_net_state(spark, tmp_path):
    rng = np.random.default_rng(3)
    ops = [(str(rng.choice(["N", "U", "D"])) if rng.random() > 0.1 else None, int(rng.integers(0, 6)),
            str(rng.choice(["x", "y"])), float(rng.integers(0, 100))) for _ in range(120)]
    assert len(reference(ops)) > 0 and any(o[0] == "D" for o in ops)
    session = hw.connect(tmp_path / "data")
    session.use_catalog("demo")
    g = session.stream_graph("accounts")
    (g.changelog_source("moves", KEYS, SCHEMA).parallelize("id", 2)
       .map(["changelog_type", "id", "venue", "bal"], where="id >= 0").sync().changelog_sink("book", KEYS))
    g.submit()
    frame = changes(ops)
    for part in (slice(0, 50), slice(50, 51), slice(51, 120)):
        session.append("moves", frame.iloc[part])
    session.wait_until_caught_up("accounts")
    for table in ("moves", "book"):
        got = tidy(session.sql(f"select * from {table}").to_pandas())
        assert list(session.sql(f"select * from {table} limit 0").to_pandas().columns) == ["id", "venue", "bal"]
        assert got.equals(reference(ops)), table
    assert session.sql("select count(*) as n from book where bal >= 0").to_pandas()["n"].tolist() == \
        [len(reference(ops))]
    session.close()
