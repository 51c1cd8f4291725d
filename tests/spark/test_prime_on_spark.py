"""A worker that waits for graphs runs Headwater's source once as it starts (headwater.spark.fused.prime_source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.spark.fused import prime_source

pytestmark = pytest.mark.spark


def test_priming_runs_one_micro_batch_of_the_source_and_leaves_nothing_behind(spark, tmp_path: Path):
    prime_source(spark, tmp_path)  # raises unless its scratch query ran a micro-batch with data
    assert list(tmp_path.iterdir()) == []
    assert "headwater-prime" not in [q.name for q in spark.streams.active]
