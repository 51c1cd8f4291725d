"""How the command line prints a result: a table a person can read, or JSON (``--json``) a script can.

>>> print(as_text([{"fqn": "demo.stream_graph.g", "status": "running"}]))
fqn                 status
demo.stream_graph.g running
>>> as_json({"rows": 3})
'{"rows": 3}'
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa

MAX_CELL = 60  # characters of a cell in a terminal table; --json prints everything


def as_json(value: Any) -> str:
    return json.dumps(value, default=str)


def as_text(value: Any) -> str:
    """Rows as an aligned table, a mapping as ``key  value`` lines, anything else as itself."""
    if isinstance(value, list) and all(isinstance(r, dict) for r in value):
        if not value:
            return "(none)"
        columns = list(dict.fromkeys(k for row in value for k in row))
        cells = [[_cell(row.get(c)) for c in columns] for row in value]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        lines = [" ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
        lines += [" ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
        return "\n".join(lines)
    if isinstance(value, dict):
        if not value:
            return "(none)"
        width = max(len(str(k)) for k in value)
        return "\n".join(f"{str(k).ljust(width)}  {_cell(v, limit=10 * MAX_CELL)}" for k, v in value.items())
    return "" if value is None else str(value)


def _cell(value: Any, limit: int = MAX_CELL) -> str:
    text = "" if value is None else json.dumps(value, default=str) if isinstance(value, dict | list) else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def sql_rows(result: tuple[Path, pa.Schema]) -> list[dict[str, Any]]:
    """A SQL result's rows (its files are removed once read)."""
    import pyarrow.parquet as pq

    directory, schema = result
    try:
        files = sorted(Path(directory).glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files]) if files else schema.empty_table()
        return table.to_pylist()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
