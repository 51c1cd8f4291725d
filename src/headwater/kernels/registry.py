"""Every state function by name (:data:`STATE_OPS`), collected from the families, and :func:`make_state_op`.

Names are the snake_case of DolphinDB's state functions (``ewmMean`` ->
``ewm_mean``, ``percentChange`` -> ``percent_change``), and so are parameter
names (``minPeriods`` -> ``min_periods``, ``halfLife`` -> ``half_life``);
semantics follow DolphinDB's (reference part D).

The registry is explicit: it imports each family and reads its ``SPECS``. No
family imports it; the higher-order functions that apply another state function
are handed the registry instead (:func:`headwater.kernels.higher_order.specs`).

Example:
    >>> import numpy as np
    >>> op = make_state_op("msum", {"window": 3})
    >>> state, (out,) = op.run(op.init_state(), np.zeros(4, dtype=np.int64), 1,
    ...                        [np.array([2.0, 1.0, 3.0, 7.0])])
    >>> out.tolist()
    [nan, nan, 6.0, 11.0]
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from headwater.errors import UnknownFunctionError
from headwater.kernels import (
    cumulative,
    ewm,
    finance,
    higher_order,
    moving,
    pairwise,
    shift,
    ta,
    time_windows,
    topn,
)
from headwater.kernels.base.checks import snake_case
from headwater.kernels.base.operators import StateOp, StateOpSpec, build_op

__all__ = ["STATE_OPS", "make_state_op"]

_FAMILIES = (moving, cumulative, pairwise, ewm, ta, shift, time_windows, topn, finance)
"""The families whose functions stand alone; :mod:`.higher_order` is added last, with the registry."""


def _collect() -> dict[str, StateOpSpec]:
    registry: dict[str, StateOpSpec] = {}
    specs = [spec for family in _FAMILIES for spec in family.SPECS]
    for spec in (*specs, *higher_order.specs(registry)):
        if spec.name in registry:
            raise RuntimeError(
                f"state function {spec.name!r} is defined twice, by {registry[spec.name].build.__module__} "
                f"and {spec.build.__module__}"
            )
        registry[spec.name] = spec
    return registry


STATE_OPS: dict[str, StateOpSpec] = _collect()
"""Every supported state function by name."""


def make_state_op(name: str, params: Mapping[str, Any]) -> StateOp:
    """Build the operator ``name`` from keyword parameters; ``None`` values count as not given.

    Raises:
        UnknownFunctionError: ``name`` is not a supported state function.
        GraphDefinitionError: a parameter is unknown, missing or out of range.

    Example:
        >>> make_state_op("ewm_mean", {"span": 3, "adjust": False})
        EwmMean(com=1.0, adjust=False, ignore_na=False, min_periods=0)
        >>> make_state_op("msum", {"window": 3, "min_periods": 1})
        MovingSum(name='msum', window=3, min_periods=1)
    """
    spec = STATE_OPS.get(name)
    if spec is None:
        close = difflib.get_close_matches(snake_case(name), list(STATE_OPS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownFunctionError(
            f"unknown state function {name!r}{hint} Supported: {', '.join(sorted(STATE_OPS))}"
        )
    return build_op(spec, params)
