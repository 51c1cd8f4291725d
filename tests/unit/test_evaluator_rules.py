"""The row-wise evaluation rules of Headwater's one expression evaluator (``engines/columns.py``), tested once.

Every map, ``where`` filter and engine metric runs through this evaluator, on Spark and in
``run_local`` alike; the rules follow DolphinDB/Orca where Orca documents them (reference, "Null
handling"): arithmetic with NULL gives NULL, comparisons treat NULL as the smallest value and
``NULL == NULL`` is true, division by zero gives NULL, ``%`` takes the divisor's sign, ``round``
rounds half away from zero, and a ``where`` filter keeps only rows whose condition is true.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from headwater.engines.columns import evaluate_rowwise, filter_mask
from headwater.parse import parse_expr

NAN = float("nan")
COLUMNS = {
    "x": np.array([1.0, NAN, -7.0, 7.0, 2.5, -2.5, 0.0]),
    "y": np.array([2.0, 3.0, 3.0, -3.0, 0.0, NAN, 0.0]),
    "s": np.array(["b", None, "a", "c", "b", None, "a"], dtype=object),
}
RULES = [
    # arithmetic: NULL in, NULL out; division by zero is NULL, not inf
    ("x + y", [3.0, NAN, -4.0, 4.0, 2.5, NAN, 0.0]),
    ("x / y", [0.5, NAN, -7 / 3, -7 / 3, NAN, NAN, NAN]),
    # modulo takes the sign of the divisor (DolphinDB, Python); x % 0 is NULL
    ("x % y", [1.0, NAN, 2.0, -2.0, NAN, NAN, NAN]),
    ("x // y", [0.0, NAN, -3.0, -3.0, NAN, NAN, NAN]),
    # round half away from zero (DolphinDB), not banker's rounding
    ("round(x)", [1.0, NAN, -7.0, 7.0, 3.0, -3.0, 0.0]),
    # comparisons: NULL is the smallest value, NULL == NULL is true
    ("x < 5", [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]),
    ("x > -100", [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ("x == y", [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]),
    ("s < 'b'", [0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]),
    ("s == s", [1.0] * 7),
    ("(x > 0) and (y > 0)", [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),  # so a comparison is never NULL
    # logic on NULL values is three-valued: false wins in and, true wins in or, otherwise NULL
    ("x and y", [1.0, NAN, 1.0, 1.0, 0.0, NAN, 0.0]),
    ("x or y", [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]),
    ("is_null(y)", [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
]


@pytest.mark.parametrize("text, want", RULES, ids=[r[0] for r in RULES])
def test_rule(text, want):
    got = evaluate_rowwise(parse_expr(text), COLUMNS, 7)
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float), equal_nan=True)


def test_a_filter_keeps_only_true_rows():
    cond = evaluate_rowwise(parse_expr("x and y"), COLUMNS, 7)
    assert filter_mask(cond).tolist() == [True, False, True, True, False, False, False]
    assert math.isnan(cond[1]) and math.isnan(cond[5])  # NULL: dropped by the filter like false
