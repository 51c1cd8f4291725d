"""Change-log tables (Orca 3.00.5 ``changelogSource`` / ``changelogSink``): keyed tables of change rows.

A change-log table stores every row appended to it, in stream order, like a plain table; each row carries
its operation in the string column ``changelog_type`` (:data:`OP_COLUMN`, DolphinDB's name for it in
``getStreamTableChangelog``):

- ``'N'``: insert (DolphinDB's NEW), ``'U'``: update — both mean "this row is the key's state now";
- ``'D'``: delete — the key leaves the state (a delete of an absent key changes nothing);
- NULL: an upsert whose writer did not say whether the key was new (an engine writing a
  ``changelog_sink``); stored as NULL, read like ``'N'``/``'U'``.

Any other value and a NULL in a key column are refused (:func:`check_changes`); nothing is rewritten.
Stream readers (engines downstream) receive the change rows as stored; snapshot readers (SQL) see the net
state (:func:`net_state`): the last row of each key, unless it is a delete, without ``changelog_type``.

>>> import pyarrow as pa
>>> rows = pa.table({"changelog_type": ["N", "N", "U", "D"], "id": [1, 2, 1, 2], "px": [1.0, 2.0, 3.0, None]})
>>> net_state(rows, ("id",)).to_pydict()
{'id': [1], 'px': [3.0]}
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headwater.errors import SchemaError, clip

OP_COLUMN = "changelog_type"
INSERT, UPDATE, DELETE = "N", "U", "D"
OPS = (INSERT, UPDATE, DELETE)


def check_changes(rows: pa.Table, key_columns: Sequence[str], name: str) -> None:
    """Raise SchemaError if ``rows`` (conformed to a change-log table) hold an unknown op or a NULL key."""
    where = f"stream table {clip(name)}"
    ops = rows.column(OP_COLUMN)
    bad = pc.and_(pc.is_valid(ops), pc.invert(pc.is_in(ops, value_set=pa.array(OPS))))
    if pc.any(bad).as_py():
        first = pc.filter(ops, bad)[0].as_py()
        raise SchemaError(
            f"{where}: {OP_COLUMN} {clip(first)} at row {int(np.flatnonzero(bad.to_numpy(zero_copy_only=False))[0])} "
            f"is not an operation; expected one of {', '.join(map(repr, OPS))} (insert, update, delete) or NULL "
            "(an upsert)"
        )
    for key in key_columns:
        nulls = rows.column(key).null_count
        if nulls:
            raise SchemaError(
                f"{where}: key column {clip(key)} is NULL in {nulls} row(s); a change names the key it changes, "
                "so a change-log table refuses NULL keys: drop or fill those rows before appending"
            )


def net_state(rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    """The net keyed state of change ``rows`` given in stream order: each key's last row, deletes removed.

    Returns the rows (in the order of each key's last change) without :data:`OP_COLUMN`.
    """
    if rows.num_rows == 0:
        return rows.drop_columns([OP_COLUMN])
    import pandas as pd

    keys = pd.DataFrame({f"k{i}": rows.column(k).to_pandas() for i, k in enumerate(key_columns)})
    last = np.flatnonzero(~keys.duplicated(keep="last").to_numpy())
    kept = rows.take(pa.array(last, pa.int64()))
    live = pc.fill_null(pc.not_equal(kept.column(OP_COLUMN), DELETE), True)
    return kept.filter(live).drop_columns([OP_COLUMN])
