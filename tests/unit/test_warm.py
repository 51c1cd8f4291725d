"""The warm-up reaches every Numba kernel, and no data compiles a kernel after it (``headwater.engines.warm``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from numba.core.registry import CPUDispatcher

from headwater.engines.base import EngineKind
from headwater.engines.warm import (
    ENGINES,
    PACKAGES,
    inlined,
    kernel_dispatchers,
    run_engine,
    sample_rows,
    warm_up,
)
from headwater.types import Schema

SOURCE = Path(__file__).resolve().parents[2] / "src" / "headwater"


def name(kernel: Any) -> str:
    return f"{kernel.py_func.__module__}.{kernel.__name__}"


@pytest.fixture(scope="module")
def kernels() -> list[Any]:
    warm_up()  # seconds with the caches of scripts/setup.sh; minutes on a fresh clone
    return list(kernel_dispatchers())


def callees(kernel: Any) -> list[Any]:
    """The kernels ``kernel`` calls (by global name)."""
    found = (kernel.py_func.__globals__.get(n) for n in kernel.py_func.__code__.co_names)
    return [k for k in found if isinstance(k, CPUDispatcher)]


def test_the_warm_up_runs_every_engine_kind() -> None:
    assert set(ENGINES) == set(EngineKind)


def test_every_kernel_is_compiled_or_loaded(kernels: list[Any]) -> None:
    # a kernel loaded from the cache holds the kernels it calls (compiled into it): they count as reached with it
    reached = {k for k in kernels if k.signatures}
    stack = list(reached)
    while stack:
        for callee in callees(stack.pop()):
            if callee not in reached:
                reached.add(callee)
                stack.append(callee)
    assert len(kernels) > 60
    assert sorted(name(k) for k in kernels if k not in reached) == []
    called = {c for k in kernels for c in callees(k)}
    assert sorted(name(k) for k in kernels if inlined(k) and k not in called) == []  # no dead inlined kernel


def test_no_kernel_lives_outside_the_walked_packages() -> None:
    walked = [SOURCE / p.__name__.split(".")[-1] for p in PACKAGES]
    outside = [str(f.relative_to(SOURCE)) for f in SOURCE.rglob("*.py")
               if "njit" in f.read_text() and not any(f.is_relative_to(w) for w in walked)]
    assert outside == []


def with_nulls_in_chunks(schema: Schema, batch: int) -> pa.Table:
    """The warm-up's rows with every third ``x`` NULL (a join's: ``l1``, ``r1``), in two chunks."""
    table = sample_rows(schema, batch)
    mask = pa.array(np.arange(table.num_rows) % 3 == 0)
    for i, field in enumerate(table.schema):
        if field.name in ("x", "l1", "r1"):
            table = table.set_column(i, field, pc.if_else(mask, pa.scalar(None, field.type), table[i]))
    return pa.concat_tables([table.slice(0, 5), table.slice(5)])


def test_nulls_and_chunks_compile_nothing_new(kernels: list[Any]) -> None:
    # Arrow hands over a column without NULLs in one chunk read-only, any other as a writable copy: the kernels'
    # inputs are made read-only either way (headwater.kernel_inputs), so they meet no new type
    before = {name(k): len(k.signatures) for k in kernels}
    for kind in ENGINES:
        run_engine(kind, with_nulls_in_chunks)
    assert {name(k): len(k.signatures) for k in kernels} == before
