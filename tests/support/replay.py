"""Feed a graph in appends with simulated crashes, the in-process runner's way (``LocalRunner.step``)."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from headwater.dataplane.local import LocalRunner
from headwater.plan.physical import PhysicalGraph


def run_with_crashes(physical: PhysicalGraph, table: str, rows: pd.DataFrame, cuts: Sequence[int],
                     crash_at: Mapping[int, int], output: str) -> pd.DataFrame:
    """Append ``rows`` to ``table`` cut at ``cuts``; after append ``i`` in ``crash_at`` the process 'dies' once the
    first ``crash_at[i]`` tasks of the pending micro-batch ran (state saved, nothing committed), then every batch
    runs (the crashed one replays). Returns ``output``'s rows."""
    bounds = [0, *sorted(cuts), len(rows)]
    with tempfile.TemporaryDirectory() as tmp:
        runner = LocalRunner(physical, Path(tmp))
        for i, (a, b) in enumerate(itertools.pairwise(bounds)):
            runner.append(table, rows.iloc[a:b])
            if i in crash_at:
                runner.step(crash_after_tasks=crash_at[i])
            runner.step()
        runner.run_until_idle()
        return runner.read(output)
