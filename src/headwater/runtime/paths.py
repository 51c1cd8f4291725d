"""Paths that cross the master ↔ worker channel, checked against the data directory before they are used.

A worker answers ``RunSql`` with the directory of the result files, which the master streams and then deletes;
a ``RunSql`` names the table directories its views read. Either side uses such a path only if, resolved (``..``
and symbolic links followed), it lies where it must: a result directly in ``<data_dir>/tmp/sql/``, a table
under ``<data_dir>/tables/``. Anything else is refused and left untouched.

>>> from pathlib import Path
>>> sql_result(Path("/data"), "/data/tmp/sql/1f2e")
PosixPath('/data/tmp/sql/1f2e')
>>> try:
...     sql_result(Path("/data"), "/data/tmp/sql/../../graphs")
... except ExecutionError as exc:
...     print(str(exc)[:61])
refused the SQL result directory '/data/tmp/sql/../../graphs'
"""

from __future__ import annotations

from pathlib import Path

from headwater.errors import ExecutionError, clip


def sql_spool(data_dir: Path) -> Path:
    """Where workers write SQL results, one directory per query."""
    return data_dir / "tmp" / "sql"


def sql_result(data_dir: Path, path: str) -> Path:
    """The result directory a worker returned, if it is a directory directly in the SQL spool of ``data_dir``."""
    spool = sql_spool(data_dir).resolve()
    given = Path(path)
    resolved = given.resolve()
    if not given.is_absolute() or resolved.parent != spool or given.is_symlink():
        raise ExecutionError(f"refused the SQL result directory {clip(path, 300)} a worker returned: it is not a "
                             f"directory in {spool} (resolved: {clip(str(resolved), 300)}); nothing was read or "
                             "deleted. The worker does not share this data directory, or does not hold the "
                             "worker secret honestly")
    return resolved


def table_path(data_dir: Path, path: str, *, where: str) -> Path:
    """A table directory named in a request, if it lies under ``<data_dir>/tables``."""
    tables = (data_dir / "tables").resolve()
    resolved = Path(path).resolve()
    if not Path(path).is_absolute() or not resolved.is_relative_to(tables) or resolved == tables:
        raise ExecutionError(f"{where}: refused the table path {clip(path, 300)}: it is not under this worker's "
                             f"table directory {tables} (resolved: {clip(str(resolved), 300)}); master and worker "
                             "must share the same data directory")
    return resolved
