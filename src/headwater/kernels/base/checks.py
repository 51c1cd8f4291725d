"""Checks of state functions' parameters, each raising :class:`~headwater.errors.GraphDefinitionError`
that names the function, the parameter, what was given and what is expected.

Example:
    >>> check_int("mavg", "window", 20, 1, MAX_WINDOW)
    20
    >>> check_window("mavg", 0)
    Traceback (most recent call last):
    headwater.errors.GraphDefinitionError: state function 'mavg': window=0 is invalid; expected an integer in [1, 102400]. e.g. mavg(x, window=20)
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np

from headwater.durations import parse_duration, to_micros
from headwater.errors import GraphDefinitionError

MAX_WINDOW = 102_400
"""Largest moving window DolphinDB allows in streaming engines."""


def bad(func: str, param: str, got: Any, expected: str, fix: str) -> GraphDefinitionError:
    return GraphDefinitionError(
        f"state function {func!r}: {param}={got!r} is invalid; expected {expected}. {fix}"
    )


def check_int(func: str, param: str, value: Any, lo: int, hi: int | None = None, fix: str = "") -> int:
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)
    if not ok or value < lo or (hi is not None and value > hi):
        bound = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"
        raise bad(func, param, value, bound, fix)
    return int(value)


def check_bool(func: str, param: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise bad(func, param, value, "True or False", f"e.g. {func}(x, ..., {param}=True)")
    return bool(value)


def check_float(func: str, param: str, value: Any, ok: Callable[[float], bool], expected: str) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool | np.bool_) or not ok(float(value)):
        raise bad(func, param, value, expected, "")
    return float(value)


def check_window(func: str, window: Any) -> int:
    return check_int(func, "window", window, 1, MAX_WINDOW, f"e.g. {func}(x, window=20)")


def check_name(cls: str, name: str, allowed: tuple[str, ...]) -> None:
    if name not in allowed:
        raise GraphDefinitionError(f"{cls}: name {name!r} is not one of {', '.join(allowed)}")


def check_min_periods(func: str, min_periods: int | None, window: int) -> None:
    if min_periods is not None:
        check_int(
            func, "min_periods", min_periods, 1, window, f"min_periods must not exceed window={window}"
        )


def check_moving(op: Any, names: tuple[str, ...]) -> None:
    """The checks of a count-window operator named one of ``names``: its ``window`` and ``min_periods``."""
    check_name(type(op).__name__, op.name, names)
    check_window(op.name, op.window)
    check_min_periods(op.name, op.min_periods, op.window)


def resolve_min_periods(min_periods: int | None) -> tuple[int, bool]:
    """(min_periods, full_only): without min_periods the first window-1 rows of a key are NULL."""
    return (1, True) if min_periods is None else (min_periods, False)


def check_choice(func: str, param: str, value: Any, choices: dict[str, int]) -> int:
    """The code of ``value``, which must be one of the names in ``choices`` exactly."""
    if not isinstance(value, str) or value not in choices:
        raise bad(func, param, value, f"one of {', '.join(map(repr, choices))}", "")
    return choices[value]


def check_percent(func: str, value: Any) -> float:
    return check_float(func, "percent", value, lambda p: 0 <= p <= 100, "a number in [0, 100]")


def window_units(func: str, window: Any) -> float:
    """A tm-window in the units of the time column: an integer, or a duration in microseconds."""
    if isinstance(window, numbers.Integral) and not isinstance(window, bool | np.bool_):
        if int(window) >= 1:
            return float(window)
    elif isinstance(window, str | timedelta):
        return float(to_micros(parse_duration(window, where=f"state function {func!r}: window")))
    raise bad(
        func, "window", window,
        "a positive integer (in the units of the time column) or a duration such as '5m' or '30s'",
        f"e.g. {func}(time, price, '5m')",
    )  # fmt: skip


def snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def check_func_name(func: str, param: str, value: Any, choices: dict[str, Any] | tuple[str, ...], fix: str) -> str:
    """``value`` as one of the names in ``choices``; DolphinDB's camelCase is accepted (``firstNot``)."""
    name = snake_case(value) if isinstance(value, str) else value
    if not isinstance(name, str) or name not in choices:
        raise bad(func, param, value, f"one of {', '.join(map(repr, choices))}", fix)
    return name
