"""Stateless maps over a batch: the one expression evaluator for expressions, the user's function otherwise."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from headwater.engines.base import SEQ
from headwater.engines.columns import evaluate_rowwise, filter_mask, to_arrow, to_numpy
from headwater.expr import Col, Lit
from headwater.plan.logical import MapNode
from headwater.types import Schema


def apply_map(node: MapNode, rows: pa.Table) -> pa.Table:
    """A stateless map on a batch (NumPy for expressions, the user's function otherwise)."""
    schema = Schema.from_arrow(rows.schema.remove(rows.schema.get_field_index(SEQ)))
    if node.filter is not None:
        cols = {c: to_numpy(rows[c], schema[c]) for c in node.filter.columns()}
        rows = rows.filter(pa.array(filter_mask(evaluate_rowwise(node.filter, cols, rows.num_rows))))
    if node.fn is not None:
        seq = rows[SEQ].to_numpy()
        result = pa.Table.from_pandas(node.fn(rows.drop_columns([SEQ]).to_pandas()), preserve_index=False)
        out_seq = seq if result.num_rows == len(seq) else np.full(result.num_rows, seq[0] if len(seq) else 0)
        result = result.select(list(node.schema.names)).cast(node.schema.to_arrow())
        return result.append_column(SEQ, pa.array(out_seq, pa.int64()))
    needed = {c for _, e in node.exprs for c in e.columns()}
    cols = {c: to_numpy(rows[c], schema[c]) for c in needed}
    arrays = []
    types = node.schema.to_arrow()
    for (name, expr), (_, typ) in zip(node.exprs, node.schema, strict=True):
        if isinstance(expr, Col):  # a column kept or renamed: moved as is, never through float64
            arrays.append(rows[expr.name].cast(types.field(name).type))
        elif isinstance(expr, Lit) and expr.value is None:  # NULL of the column's declared type
            arrays.append(pa.nulls(rows.num_rows, types.field(name).type))
        else:
            arrays.append(to_arrow(evaluate_rowwise(expr, cols, rows.num_rows), typ))
    return pa.table([*arrays, rows[SEQ]], schema=node.schema.to_arrow().append(pa.field(SEQ, pa.int64())))
