"""A zombie worker cannot overwrite engine state snapshots: a stream task checks its placement's epoch (the
fence the master moves when it places the graph elsewhere) before a new snapshot replaces or prunes any.
The move is made at the ``snapshot.before_fence`` fault point: the task has computed its state, then finds
the graph placed elsewhere."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest

import headwater as hw
from headwater.dataplane.fence import FencedError
from headwater.dataplane.local import LocalRunner
from headwater.faults import on_fault_point


def snapshots(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_worker_fenced_while_it_computes_saves_no_snapshot_and_prunes_none(tmp_path):
    session = hw.connect(tmp_path / "catalog", start_spark=False)
    session.use_catalog("demo")
    g = session.stream_graph("totals")
    (g.source("ticks", schema={"k": "string", "x": "long"}).parallelize("k", 2)
       .reactive_state_engine(key_column="k", metrics=["x", "cumsum(x) as total"]).sync().sink("out"))
    runner = LocalRunner(g.plan(), tmp_path / "run")
    session.close()
    epoch = tmp_path / "epoch"
    epoch.write_text("1")
    runner.tasks = [dataclasses.replace(t, fence=(str(epoch), 1), keep_snapshots=2) for t in runner.tasks]
    state = Path(runner.tasks[0].state_root)
    for i in range(3):  # placement 1 runs: a snapshot per batch, two kept per task
        runner.append("ticks", pd.DataFrame({"k": list("abcd"), "x": [i, i, i, i]}))
        assert runner.step()
    before = snapshots(state)
    assert before and all(name.endswith((".pkl", ".stats.json")) for name in before)

    runner.append("ticks", pd.DataFrame({"k": list("abcd"), "x": [9, 9, 9, 9]}))
    moved = []

    def placed_elsewhere() -> None:  # the master placed the graph on another worker (epoch 2) meanwhile
        epoch.write_text("2")
        moved.append(True)

    with on_fault_point("snapshot.before_fence", placed_elsewhere), pytest.raises(FencedError, match="epoch 2"):
        runner.step()
    assert moved
    assert snapshots(state) == before  # nothing replaced, nothing pruned, no temporary file left

    runner.tasks = [dataclasses.replace(t, fence=(str(epoch), 2)) for t in runner.tasks]  # the current placement
    runner.run_until_idle()
    assert snapshots(state) != before
    assert runner.read("out").sort_values(["k", "total"])["total"].tolist() == [0, 1, 3, 12] * 4
