"""Driving a state operator the way the engine does, for the kernel tests."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from headwater.kernels.base.operators import StateOp


def run_batches(
    op: StateOp, keys: Sequence[int], cols: Sequence[Sequence[float] | np.ndarray], splits: Sequence[int] = ()
) -> list[np.ndarray]:
    """Feed the columns in batches cut at ``splits``, giving each key a slot on first sight like the engine.

    Returns one array per output; every batch must give ``op.n_outputs`` float64 arrays of its length.
    """
    slot_of: dict[int, int] = {}
    slots = np.array([slot_of.setdefault(int(k), len(slot_of)) for k in keys], dtype=np.int64)
    arrays = [np.asarray(c, dtype=np.float64) for c in cols]
    bounds = [0, *sorted(splits), len(slots)]
    state = op.init_state()
    outs: list[list[np.ndarray]] = []
    for a, b in itertools.pairwise(bounds):
        n_keys = int(slots[:b].max()) + 1 if b else 0
        state, res = op.run(state, slots[a:b], n_keys, [c[a:b] for c in arrays])
        assert len(res) == op.n_outputs
        assert all(r.dtype == np.float64 and r.shape == (b - a,) for r in res)
        outs.append(res)
    return [np.concatenate([o[j] for o in outs]) if outs else np.empty(0) for j in range(op.n_outputs)]
