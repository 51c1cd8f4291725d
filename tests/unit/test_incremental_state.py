"""Incremental engine state: a micro-batch saves only the keys it touched (a changelog record over the state it
started from), snapshots compact the changelog, and a recovery rebuilds the state from a snapshot and its
records. Every property holds against the same run made with whole snapshots only."""

from __future__ import annotations

import pickle
from datetime import timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import headwater as hw
from headwater.dataplane import snapshots
from headwater.dataplane.local import LocalRunner
from headwater.dataplane.snapshots import SnapshotStore
from headwater.engines.base import KeyedState, KeyTable
from headwater.engines.reactive_state import ReactiveStateEngine, _nested
from headwater.errors import ExecutionError
from headwater.faults import on_fault_point
from headwater.parse import parse_expr, parse_metric
from headwater.types import Schema

PROPERTY = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
METRICS = ["x", "cumsum(x) as total", "prev(x) as before", "mavg(x, 3) as avg3"]


def plan(tmp: Path, *, purge: bool = False):
    session = hw.connect(tmp / "catalog", start_spark=False)
    session.use_catalog("demo")
    g = session.stream_graph("totals")
    options = {"key_purge_filter": "total > 40", "key_purge_freq": timedelta(seconds=1)} if purge else {}
    (g.source("ticks", schema={"k": "string", "x": "long"}).parallelize("k", 2)
       .reactive_state_engine(key_column="k", metrics=METRICS, **options).sync().sink("out"))
    physical = g.plan()
    session.close()
    return physical


def ticks(n: int, keys: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": [f"k{i}" for i in rng.integers(0, keys, n)], "x": rng.integers(-5, 10, n)})


def run(physical, root: Path, frames: list[pd.DataFrame], crashes: set[int], compact: int,
        monkeypatch: pytest.MonkeyPatch) -> tuple[pd.DataFrame, list[Path]]:
    """Each frame one append (at its own second), then a micro-batch; before the batches in ``crashes``, the same
    batch first crashes after its first task (state saved, nothing committed). Returns the sink's rows."""
    monkeypatch.setattr(snapshots, "COMPACT_RECORDS", compact)
    snapshots._LIVE.clear()
    runner = LocalRunner(physical, root)
    for i, frame in enumerate(frames):
        runner.append("ticks", frame, at=1_000.0 + i)
        if i in crashes:
            runner.step(crash_after_tasks=1, at=1_000.0 + i)
            snapshots._LIVE.clear()  # a killed process keeps nothing in memory
        runner.step(at=1_000.0 + i)
    return runner.read("out"), [Path(t.state_root) for t in runner.tasks]


def rebuilt(state_root: Path) -> list[KeyedState]:
    """Every task's newest state, rebuilt from the files alone."""
    snapshots._LIVE.clear()
    store = SnapshotStore(str(next(state_root.iterdir())))
    return [store.load(task, 1 << 62) for task in range(2)]


def same_state(a: KeyedState | None, b: KeyedState | None) -> bool:
    if a is None or b is None:
        return a is b  # a task no row reached
    return (a.keys.keys == b.keys.keys and a.rest == b.rest and a.columns.keys() == b.columns.keys()
            and all(np.array_equal(a.columns[c], b.columns[c], equal_nan=True) for c in a.columns))


def reference(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The engine's output computed independently with pandas, key by key."""
    rows = pd.concat(frames, ignore_index=True)
    by = rows.groupby("k")["x"]
    return pd.DataFrame({"k": rows["k"], "x": rows["x"], "total": by.cumsum(), "before": by.shift(1),
                         "avg3": by.transform(lambda s: s.rolling(3).mean())})


def by_key(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("k", kind="stable").reset_index(drop=True)


@PROPERTY
@given(sizes=st.lists(st.integers(1, 40), min_size=2, max_size=12), seed=st.integers(0, 2**16),
       crash_at=st.sets(st.integers(0, 12), max_size=3), compact=st.sampled_from([2, 3, 1000]),
       purge=st.booleans())
def test_incremental_state_gives_the_outputs_and_states_of_whole_snapshots(tmp_path_factory, monkeypatch, sizes,
                                                                          seed, crash_at, compact, purge):
    frames, start = [ticks(600, 300, seed)], 0  # state of many keys, then small batches touching a few
    data = ticks(sum(sizes), 300, seed + 1)
    for n in sizes:
        frames.append(data.iloc[start:start + n].reset_index(drop=True))
        start += n
    physical = plan(tmp_path_factory.mktemp("plan"), purge=purge)
    whole, whole_roots = run(physical, tmp_path_factory.mktemp("whole"), frames, crash_at, 1, monkeypatch)
    inc, inc_roots = run(physical, tmp_path_factory.mktemp("inc"), frames, crash_at, compact, monkeypatch)
    pd.testing.assert_frame_equal(inc, whole, check_exact=True)
    assert any(inc_roots[0].rglob("*.delta")) and not any(whole_roots[0].rglob("*.delta"))
    assert all(same_state(a, b) for a, b in zip(rebuilt(inc_roots[0]), rebuilt(whole_roots[0]), strict=True))
    if not purge:
        pd.testing.assert_frame_equal(by_key(inc).astype({"before": float}), by_key(reference(frames)),
                                      check_exact=False, check_dtype=False)


def test_a_batch_saves_a_changelog_record_of_the_keys_it_touched(tmp_path, monkeypatch):
    physical = plan(tmp_path)
    many = ticks(20_000, 5_000, 1)
    few = [ticks(50, 5_000, s) for s in range(2, 6)]
    _, roots = run(physical, tmp_path / "run", [many, *few], set(), 1000, monkeypatch)
    task = next(roots[0].iterdir()) / "task=0"
    names = sorted(p.name for p in task.iterdir())
    snapshot = [p for p in task.iterdir() if p.name.endswith(".pkl")]
    records = [p for p in task.iterdir() if p.name.endswith(".delta")]
    assert len(snapshot) == 1 and len(records) == 4, names  # one snapshot, and every record since
    assert all(r.stat().st_size * 20 < snapshot[0].stat().st_size for r in records)
    record = pickle.loads(records[-1].read_bytes())
    assert len(record["slots"]) <= 50 and record["new_keys"] == [] and record["format"] == 1


def test_compaction_writes_a_snapshot_after_the_record_limit_and_prunes_the_old_chain(tmp_path, monkeypatch):
    physical = plan(tmp_path)
    frames = [ticks(2_000, 500, 0)] + [ticks(5, 500, s) for s in range(1, 7)]
    _, roots = run(physical, tmp_path / "run", frames, set(), 3, monkeypatch)
    task = next(roots[0].iterdir()) / "task=0"
    # versions 1..7: snapshots at 1, 4 and 7 (records 2.1, 3.2, 5.4, 6.5); the newest three need 4, 5.4, 6.5, 7
    assert sorted(p.name for p in task.iterdir() if not p.name.endswith(".json")) == \
        ["4.pkl", "5.4.delta", "6.5.delta", "7.pkl"]


def test_a_crash_between_a_record_and_its_pruning_loses_nothing(tmp_path, monkeypatch):
    physical = plan(tmp_path)
    frames = [ticks(30, 8, s) for s in range(6)]
    expected, _ = run(physical, tmp_path / "whole", frames, set(), 1, monkeypatch)

    def killed() -> None:
        raise SystemExit("killed")

    monkeypatch.setattr(snapshots, "COMPACT_RECORDS", 1000)
    snapshots._LIVE.clear()
    runner = LocalRunner(physical, tmp_path / "inc")
    for i, frame in enumerate(frames):
        runner.append("ticks", frame, at=1_000.0 + i)
        if i == 3:
            with on_fault_point("snapshot.before_prune", killed), pytest.raises(SystemExit):
                runner.step(at=1_000.0 + i)
            snapshots._LIVE.clear()
        runner.step(at=1_000.0 + i)
    pd.testing.assert_frame_equal(runner.read("out"), expected, check_exact=True)


def test_a_state_changed_on_disk_is_read_again_not_taken_from_memory(tmp_path):
    store = SnapshotStore(str(tmp_path))
    store.save(0, 1, KeyedState(KeyTable(["a"]), {"v": np.array([1.0])}, {}))
    other = KeyedState(KeyTable(["a", "b"]), {"v": np.array([5.0, 6.0])}, {})
    SnapshotStore(str(tmp_path)).save(0, 1, other)  # as another process would, replacing the file
    snapshots._LIVE.clear()
    assert SnapshotStore(str(tmp_path)).load(0, 2).keys.keys == ["a", "b"]
    replaced = tmp_path / "task=0" / "1.pkl"
    replaced.write_bytes(pickle.dumps(KeyedState(KeyTable(["z"]), {"v": np.array([9.0])}, {})))
    assert store.load(0, 2).keys.keys == ["z"]  # this process's live state named another file: not used


def test_a_newer_state_format_is_refused_with_a_clear_message(tmp_path):
    store = SnapshotStore(str(tmp_path))
    state = KeyedState(KeyTable(list(range(1000))), {"v": np.zeros(1000)}, {})
    store.save(0, 1, state)
    loaded = store.load(0, 2)
    loaded.columns["v"][0] = 2.0
    loaded.touch(np.array([0]))
    store.save(0, 2, loaded)
    record = tmp_path / "task=0" / "2.1.delta"
    doc = pickle.loads(record.read_bytes())
    record.write_bytes(pickle.dumps({**doc, "format": 99}))
    snapshots._LIVE.clear()
    with pytest.raises(ValueError, match=r"format 99.*reads format 1"):
        SnapshotStore(str(tmp_path)).load(0, 3)
    (tmp_path / "task=0" / "1.pkl").unlink()
    with pytest.raises(ExecutionError, match="needs the state at version 1"):
        SnapshotStore(str(tmp_path)).load(0, 3)


def test_a_reactive_state_saved_by_0_1_0_continues(tmp_path):
    schema = Schema.parse({"k": "string", "x": "double"})
    engine = ReactiveStateEngine(name="r", input_schema=schema, key_column=("k",),
                                 metrics=tuple(parse_metric(m) for m in ["cumsum(x) as total", "prev(x) as before"]),
                                 key_purge_filter=parse_expr("total > 1e9"), key_purge_freq=timedelta(seconds=1))
    proc = engine.processor()
    first = pd.DataFrame({"k": ["a", "b", "a"], "x": [1.0, 2.0, 3.0], "_hw_seq": [0, 1, 2]})
    second = pd.DataFrame({"k": ["b", "a", "c"], "x": [4.0, 5.0, 6.0], "_hw_seq": [3, 4, 5]})
    import pyarrow as pa
    state, _ = proc.process(proc.new_state(), pa.Table.from_pandas(first), batch_time=10.0)
    nested = _nested(state.columns)  # the 0.1.0 layout: {"keys", "ops": {node: {array}}, "last", ...}
    old = {"keys": list(state.keys.keys), **nested, "last_purge": state.rest["last_purge"]}
    _, expected = proc.process(pickle.loads(pickle.dumps(state)), pa.Table.from_pandas(second), batch_time=11.0)
    _, got = proc.process(old, pa.Table.from_pandas(second), batch_time=11.0)
    assert got.equals(expected)
    assert got.column("total").to_pylist() == [6.0, 9.0, 6.0]
