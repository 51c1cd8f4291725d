"""The SQL console's results, a page at a time.

A query runs once (``session.sql``'s limits apply: rows, bytes, time); its result files stay in the SQL spool
while the console pages through them, under a random id only the user who ran it can use. At most
:attr:`ResultPages.keep` results are kept, each for :attr:`ResultPages.ttl_s` seconds; the oldest go first.

>>> ResultPages.page_bounds(250, page=3, size=100)
(200, 250, 3)
"""

from __future__ import annotations

import math
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from headwater.errors import CatalogError, RequestError
from headwater.runtime.gateway import Gateway

PAGE_ROWS = 100
MAX_QUERY_CHARS = 100_000


@dataclass
class _Result:
    user: str
    directory: Path
    schema: pa.Schema
    rows: int
    made: float


def cell(value: Any) -> Any:
    """A value as JSON shows it: numbers, text, booleans and null as they are; times and the rest as text."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)


class ResultPages:
    keep = 16
    ttl_s = 900.0

    def __init__(self) -> None:
        self._results: OrderedDict[str, _Result] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def page_bounds(rows: int, *, page: int, size: int) -> tuple[int, int, int]:
        """The rows [start, end) of page ``page`` (from 1), and how many pages there are (at least 1)."""
        pages = max(1, -(-rows // size))
        start = (min(max(page, 1), pages) - 1) * size
        return start, min(start + size, rows), pages

    def answer(self, gw: Gateway, doc: dict[str, Any]) -> dict[str, Any]:
        """``{"query", "catalog"?}`` runs a query; ``{"result", "page"}`` pages through one run before."""
        page = doc.get("page", 1)
        if not isinstance(page, int) or isinstance(page, bool):
            raise RequestError("page: expected a whole number")
        if isinstance(doc.get("result"), str):
            result_id = doc["result"]
            result = self._get(result_id, gw.user)
        else:
            query, catalog = doc.get("query"), doc.get("catalog") or None
            if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
                raise RequestError(f"query: expected the text of one query (at most {MAX_QUERY_CHARS:,} characters)")
            if catalog is not None and not isinstance(catalog, str):
                raise RequestError("catalog: expected a catalog's name")
            directory, schema = gw.sql(query, current_catalog=catalog)
            files = sorted(directory.glob("part-*.parquet"))
            rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
            result_id, result = self._keep(_Result(gw.user, directory, schema, rows, time.monotonic()))
        start, end, pages = self.page_bounds(result.rows, page=page, size=PAGE_ROWS)
        table = self._slice(result, start, end)
        return {"result": result_id, "columns": [f.name for f in result.schema],
                "types": [str(f.type) for f in result.schema], "rows": [[cell(v) for v in row.values()] for row in table.to_pylist()],
                "page": start // PAGE_ROWS + 1, "pages": pages, "total_rows": result.rows, "first_row": start + 1}

    def _keep(self, result: _Result) -> tuple[str, _Result]:
        result_id = secrets.token_urlsafe(16)
        with self._lock:
            self._results[result_id] = result
            self._expire()
        return result_id, result

    def _get(self, result_id: str, user: str) -> _Result:
        with self._lock:
            self._expire()
            result = self._results.get(result_id)
        if result is None or result.user != user:  # another user's id is as unknown as a made-up one
            raise CatalogError("that query's result is gone (results are kept 15 minutes): run it again")
        return result

    def _expire(self) -> None:
        now = time.monotonic()
        while self._results:
            oldest_id, oldest = next(iter(self._results.items()))
            if len(self._results) <= self.keep and now - oldest.made <= self.ttl_s:
                break
            del self._results[oldest_id]
            shutil.rmtree(oldest.directory, ignore_errors=True)

    @staticmethod
    def _slice(result: _Result, start: int, end: int) -> pa.Table:
        """Rows [start, end) of the result, reading only the files that hold them."""
        parts, seen = [], 0
        for file in sorted(result.directory.glob("part-*.parquet")):
            f = pq.ParquetFile(file)
            n = f.metadata.num_rows
            if seen + n > start and seen < end:
                t = f.read()
                parts.append(t.slice(max(start - seen, 0), end - max(start, seen)))
            seen += n
            if seen >= end:
                break
        if not parts:
            return result.schema.empty_table()
        return pa.concat_tables([pa.Table.from_batches(p.to_batches(), schema=result.schema) for p in parts])
