"""The metadata store: graphs, tables and their references (SQLAlchemy; SQLite by default).

Everything the master needs to resume after a restart lives here: each graph's
declaration (its versioned JSON document, :mod:`headwater.plan.document`), its status and
the reason of its last transition, and every stream table's location and definition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from headwater.errors import CatalogError, ConfigurationError, LeadershipLost, clip
from headwater.storage.records import GraphRecord, TableRecord
from headwater.types import Schema

_meta = sa.MetaData()

graphs = sa.Table(
    "stream_graphs",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("fqn", sa.String, nullable=False, index=True),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("semantics", sa.String, nullable=False),
    sa.Column("create_time", sa.Float, nullable=False),
    sa.Column("reason", sa.String, nullable=False, default=""),
    sa.Column("graph_json", sa.Text, nullable=False),
)

tables = sa.Table(
    "stream_tables",
    _meta,
    sa.Column("fqn", sa.String, primary_key=True),
    sa.Column("path", sa.String, nullable=False),
    sa.Column("kind", sa.String, nullable=False),
    sa.Column("schema", sa.Text, nullable=False),
    sa.Column("key_columns", sa.Text, nullable=False),
    sa.Column("time_column", sa.String, nullable=True),
    sa.Column("owner_graph", sa.String, nullable=True),  # set for private tables
)

table_refs = sa.Table(
    "graph_table_refs",
    _meta,
    sa.Column("graph_fqn", sa.String, primary_key=True),
    sa.Column("table_fqn", sa.String, primary_key=True),
)

users = sa.Table(
    "users",
    _meta,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("password_hash", sa.String, nullable=False),  # headwater.service.auth's scrypt string
    sa.Column("is_admin", sa.Boolean, nullable=False, default=False),
)

tokens = sa.Table(
    "tokens",
    _meta,
    sa.Column("token_hash", sa.String, primary_key=True),  # SHA-256 of the bearer token; the token is never stored
    sa.Column("user", sa.String, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),
)


def _per_graph(name: str, *columns: sa.Column[Any]) -> sa.Table:
    """A table of one row per graph, keyed by the graph's FQN."""
    return sa.Table(name, _meta, sa.Column("graph_fqn", sa.String, primary_key=True), *columns)


placements = _per_graph(
    "placements",
    sa.Column("worker", sa.String, nullable=False),  # the worker's URL
    sa.Column("epoch", sa.Integer, nullable=False),  # grows with every placement of the graph
)
graph_groups = _per_graph("graph_groups", sa.Column("compute_group", sa.String, nullable=False))

workers = sa.Table(
    "workers",
    _meta,
    sa.Column("url", sa.String, primary_key=True),  # a worker that joined by itself (headwater worker --master)
    sa.Column("compute_group", sa.String, nullable=False),
)

checkpoint_configs = _per_graph(
    "checkpoint_configs",
    sa.Column("config", sa.Text, nullable=False),  # JSON of headwater.runtime.checkpoint_config.CheckpointConfig
)

events = sa.Table(
    "events",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("type", sa.String, nullable=False),
    sa.Column("state", sa.String, nullable=False),  # running, finished, failed
    sa.Column("retries", sa.Integer, nullable=False, default=0),
    sa.Column("scheduled_time", sa.Float, nullable=False),
    sa.Column("start_time", sa.Float, nullable=False),
    sa.Column("end_time", sa.Float, nullable=True),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("error_message", sa.Text, nullable=False, default=""),
)

# The active master's lease (headwater.service.leader): one row, named MASTER_LEASE. Unused with SQLite.
leases = sa.Table(
    "leases",
    _meta,
    sa.Column("name", sa.String, primary_key=True),
    sa.Column("holder", sa.String, nullable=False),  # the master that holds it (host, pid, a random part)
    sa.Column("token", sa.BigInteger, nullable=False),  # the fencing token: one more at every change of holder
    sa.Column("expires", sa.DateTime(timezone=True), nullable=False),  # by the database's clock
    sa.Column("locked", sa.Boolean, nullable=False, default=False),  # its holder holds the advisory lock too
)
MASTER_LEASE = "master"
_WRITES = ("INSERT", "UPDATE", "DELETE")
# in the writing transaction: the lease row still carries this master's token and has not expired; FOR SHARE
# keeps a takeover (an UPDATE of that row) waiting until the write has committed, and a session frozen in the
# middle of a transaction is ended by the server after the lease's length instead of holding the row forever
_FENCE_SQL = ("SELECT set_config('idle_in_transaction_session_timeout', %s, true) FROM leases "
              "WHERE name = %s AND token = %s AND expires > now() FOR SHARE")


def metadata_url(url: str) -> str:
    """The SQLAlchemy URL of a metadata store named by a user: ``postgresql://…`` (psycopg 3) or ``sqlite:///…``.

    >>> metadata_url("postgresql://hw@db:5432/hw")
    'postgresql+psycopg://hw@db:5432/hw'
    >>> metadata_url("mysql://x")
    Traceback (most recent call last):
    ...
    headwater.errors.ConfigurationError: metadata store 'mysql://x': expected postgresql://user@host:port/database or sqlite:///path
    """
    if not isinstance(url, str):
        raise ConfigurationError(f"metadata store {clip(url)}: expected a URL")
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    if url.startswith("sqlite:///"):
        return url
    raise ConfigurationError(f"metadata store {clip(url)}: expected postgresql://user@host:port/database or sqlite:///path")


class MetadataStore:
    """Catalog persistence. ``url`` defaults to a SQLite file; PostgreSQL URLs work too."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(metadata_url(url), pool_pre_ping=True)
        _meta.create_all(self.engine)
        self._fence: tuple[int, float, Callable[[], bool]] | None = None
        sa.event.listen(self.engine, "before_cursor_execute", self._check_fence)

    def set_fencing_token(self, token: int | None, *, lease_seconds: float = 10.0,
                          valid: Callable[[], bool] = lambda: True) -> None:
        """Fence every write from now on with the master's lease (``headwater.service.leader``).

        Each INSERT, UPDATE or DELETE then first checks, in its own transaction, that the lease row still
        carries ``token`` and has not expired, and raises :class:`LeadershipLost` (writing nothing) otherwise;
        ``valid`` is the master's own view of its lease, asked first (no round trip once it has lapsed).
        PostgreSQL only: an embedded SQLite store has one writer and no lease. ``None`` removes the fence.
        """
        if token is not None and self.engine.dialect.name != "postgresql":
            raise ConfigurationError(f"metadata store {self.engine.url.render_as_string()}: a fencing token needs "
                                     "the metadata in PostgreSQL, where the masters' lease lives")
        self._fence = None if token is None else (token, lease_seconds, valid)

    def _check_fence(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                     executemany: bool) -> None:
        """The one check every write of this store passes (an engine event: a write added later passes it too)."""
        fence = self._fence
        if fence is None or statement.lstrip()[:6].upper() not in _WRITES:
            return
        token, lease_seconds, valid = fence
        if valid():
            cursor.execute(_FENCE_SQL, (str(max(int(lease_seconds * 1000), 1)), MASTER_LEASE, token))
            if cursor.fetchone() is not None:
                return
        raise LeadershipLost(f"metadata store: this master's lease (fencing token {token}) has expired or was "
                             "taken over by another master; it writes nothing more and stops (the active master "
                             "serves from now on)")

    def refuse_pickled_graphs(self) -> None:
        """Refuse a store written before plans were data (graphs kept as a pickle in a ``definition`` column).

        Reading one would unpickle on the master, which never loads user code (docs/security.md); that format
        lived only between unreleased commits (before d328146), so nothing converts it.
        """
        columns = {c["name"] for c in sa.inspect(self.engine).get_columns("stream_graphs")}
        if "definition" in columns:
            raise ConfigurationError(
                f"metadata store {clip(self.engine.url.render_as_string(hide_password=True), 200)}: its graphs are stored pickled (a "
                "'definition' column, written by a Headwater before 0.1.0 stored plans as JSON); the master never "
                "unpickles, so it cannot open this store. Start from a new data directory (or metadata database) "
                "and submit the graphs again")

    @classmethod
    def in_directory(cls, data_dir: Path) -> MetadataStore:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # the owner's only
        return cls(f"sqlite:///{data_dir / 'headwater.db'}")

    # -- tables ---------------------------------------------------------------------------------------
    def put_table(self, rec: TableRecord) -> None:
        write_row(self.engine, tables, **_table_row(rec))

    def get_table(self, fqn: str) -> TableRecord | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(tables).where(tables.c.fqn == fqn)).first()
        return None if row is None else _table(row)

    def list_tables(self) -> list[TableRecord]:
        with self.engine.connect() as c:
            return [_table(r) for r in c.execute(sa.select(tables).order_by(tables.c.fqn))]

    def delete_table(self, fqn: str) -> None:
        with self.engine.begin() as c:
            c.execute(sa.delete(tables).where(tables.c.fqn == fqn))
            c.execute(sa.delete(table_refs).where(table_refs.c.table_fqn == fqn))

    def refs_of_table(self, table_fqn: str) -> list[str]:
        return read_values(self.engine, table_refs.c.graph_fqn, table_refs.c.table_fqn == table_fqn)

    def refs_of_graph(self, graph_fqn: str) -> list[str]:
        return read_values(self.engine, table_refs.c.table_fqn, table_refs.c.graph_fqn == graph_fqn)

    def drop_refs(self, graph_fqn: str) -> None:
        with self.engine.begin() as c:
            c.execute(sa.delete(table_refs).where(table_refs.c.graph_fqn == graph_fqn))

    # -- graphs ---------------------------------------------------------------------------------------
    def create_graph(self, fqn: str, graph_json: str, semantics: str, *,
                     new_tables: Sequence[TableRecord] = (), refs: Sequence[str] = ()) -> int:
        """Store a graph together with the tables it creates and its references to public tables.

        One transaction: after a crash either all of it is in the catalog or none of it is, so a graph
        never exists without its tables and a table it uses can never be dropped under it. A table that
        another writer put in the catalog meanwhile raises :class:`CatalogError`.
        """
        try:
            with self.engine.begin() as c:
                res = c.execute(sa.insert(graphs).values(
                    fqn=fqn, status="building", semantics=semantics, create_time=time.time(), reason="",
                    graph_json=graph_json))
                for rec in new_tables:
                    c.execute(sa.insert(tables).values(**_table_row(rec)))
                c.execute(sa.delete(table_refs).where(table_refs.c.graph_fqn == fqn))
                for t in sorted(set(refs)):
                    c.execute(sa.insert(table_refs).values(graph_fqn=fqn, table_fqn=t))
                return int(res.inserted_primary_key[0])  # type: ignore[index]
        except sa.exc.IntegrityError:
            raise CatalogError(
                f"stream graph {fqn}: one of its tables ({', '.join(r.fqn for r in new_tables)}) was created by "
                "someone else meanwhile; submit again"
            ) from None

    def set_status(self, graph_id: int, status: str, reason: str = "") -> None:
        with self.engine.begin() as c:
            c.execute(sa.update(graphs).where(graphs.c.id == graph_id).values(status=status, reason=reason))

    def get_graph(self, graph_id: int) -> GraphRecord | None:
        with self.engine.connect() as c:
            row = c.execute(sa.select(graphs).where(graphs.c.id == graph_id)).first()
        return None if row is None else GraphRecord(**row._mapping)

    def delete_graphs(self, graph_ids: Sequence[int]) -> None:
        with self.engine.begin() as c:
            c.execute(sa.delete(graphs).where(graphs.c.id.in_(list(graph_ids))))

    def active_graph(self, fqn: str) -> GraphRecord | None:
        """The graph with this name that is not destroyed, if any."""
        with self.engine.connect() as c:
            row = c.execute(sa.select(graphs).where(graphs.c.fqn == fqn, graphs.c.status != "destroyed")
                            .order_by(graphs.c.id.desc())).first()
        return None if row is None else GraphRecord(**row._mapping)

    def list_graphs(self, fqn: str | None = None) -> list[GraphRecord]:
        q = sa.select(graphs).order_by(graphs.c.id)
        if fqn is not None:
            q = q.where(graphs.c.fqn == fqn)
        with self.engine.connect() as c:
            return [GraphRecord(**r._mapping) for r in c.execute(q)]

    # -- users and tokens (service mode) ---------------------------------------------------------------
    def put_user(self, name: str, password_hash: str, *, is_admin: bool = False) -> None:
        write_row(self.engine, users, name=name, password_hash=password_hash, is_admin=is_admin)

    def user_password_hash(self, name: str) -> str | None:
        value = read_value(self.engine, users.c.password_hash, users.c.name == name)
        return None if value is None else str(value)

    def user_is_admin(self, name: str) -> bool:
        return bool(read_value(self.engine, users.c.is_admin, users.c.name == name))

    def list_users(self) -> list[tuple[str, bool]]:
        """Every user's name and whether it is an admin, by name."""
        with self.engine.connect() as c:
            return [(str(r[0]), bool(r[1])) for r in c.execute(sa.select(users.c.name, users.c.is_admin).order_by(users.c.name))]

    def delete_user(self, name: str) -> None:
        with self.engine.begin() as c:
            c.execute(sa.delete(users).where(users.c.name == name))
            c.execute(sa.delete(tokens).where(tokens.c.user == name))

    def delete_tokens(self, user: str, token_hash: str | None = None) -> int:
        """Revoke every token of ``user`` (or the one whose hash is ``token_hash``); returns how many."""
        with self.engine.begin() as c:
            where = [tokens.c.user == user] + ([tokens.c.token_hash == token_hash] if token_hash else [])
            return int(c.execute(sa.delete(tokens).where(*where)).rowcount)

    def put_token(self, token_hash: str, user: str, expires: float) -> None:
        with self.engine.begin() as c:
            c.execute(sa.delete(tokens).where(tokens.c.expires < time.time()))
            c.execute(sa.insert(tokens).values(token_hash=token_hash, user=user, expires=expires))

    def token_user(self, token_hash: str) -> str | None:
        """The user a live token belongs to, or None (unknown or expired)."""
        user = read_value(self.engine, tokens.c.user, tokens.c.token_hash == token_hash,
                          tokens.c.expires >= time.time())
        return None if user is None else str(user)

    # -- compute groups (service mode) ----------------------------------------------------------------
    def set_compute_group(self, graph_fqn: str, group: str) -> None:
        write_row(self.engine, graph_groups, graph_fqn=graph_fqn, compute_group=group)

    def compute_group(self, graph_fqn: str) -> str:
        group = read_value(self.engine, graph_groups.c.compute_group, graph_groups.c.graph_fqn == graph_fqn)
        return "default" if group is None else str(group)

    # -- workers that joined (headwater worker --master) -----------------------------------------------
    def add_worker(self, url: str, group: str) -> None:
        write_row(self.engine, workers, url=url, compute_group=group)

    def joined_workers(self) -> list[tuple[str, str]]:
        with self.engine.connect() as c:
            return [(str(r[0]), str(r[1])) for r in c.execute(sa.select(workers.c.url, workers.c.compute_group))]

    # -- checkpoint configuration (headwater.runtime.checkpoint_config) ------------------------------
    def set_checkpoint_config(self, graph_fqn: str, config_json: str) -> None:
        write_row(self.engine, checkpoint_configs, graph_fqn=graph_fqn, config=config_json)

    def checkpoint_config(self, graph_fqn: str) -> str | None:
        config = read_value(self.engine, checkpoint_configs.c.config, checkpoint_configs.c.graph_fqn == graph_fqn)
        return None if config is None else str(config)

    # -- events (headwater.runtime.events) ------------------------------------------------------------
    def add_event(self, kind: str, detail: str, now: float, retries: int = 0) -> int:
        with self.engine.begin() as c:
            res = c.execute(sa.insert(events).values(type=kind, state="running", retries=retries, scheduled_time=now,
                                                     start_time=now, end_time=None, detail=detail, error_message=""))
            return int(res.inserted_primary_key[0])  # type: ignore[index]

    def end_event(self, event_id: int, state: str, now: float, error: str) -> None:
        with self.engine.begin() as c:
            c.execute(sa.update(events).where(events.c.id == event_id).values(state=state, end_time=now,
                                                                                error_message=error))

    def list_events(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The newest ``limit`` events, oldest first."""
        return newest_rows(self.engine, events, limit)

    # -- placements (service mode) ---------------------------------------------------------------------
    def place(self, graph_fqn: str, worker: str) -> int:
        """Record ``graph_fqn`` as placed on ``worker``; return the placement's epoch (one more than the last)."""
        with self.engine.begin() as c:
            last = c.scalar(sa.select(placements.c.epoch).where(placements.c.graph_fqn == graph_fqn))
            epoch = 1 if last is None else int(last) + 1
            replace_row(c, placements, graph_fqn=graph_fqn, worker=worker, epoch=epoch)
        return epoch

    def placements(self) -> dict[str, tuple[str, int]]:
        """graph FQN -> (worker URL, epoch)."""
        with self.engine.connect() as c:
            return {r.graph_fqn: (r.worker, int(r.epoch)) for r in c.execute(sa.select(placements))}

    def ping(self) -> None:
        """One round trip to the database (raises if it does not answer)."""
        with self.engine.connect() as c:
            c.execute(sa.text("select 1"))

    def dispose(self) -> None:
        self.engine.dispose()


def replace_row(c: sa.Connection, table: sa.Table, **values: Any) -> None:
    """Write a row in place of the one with its primary key, if any (delete + insert: any database does it)."""
    c.execute(sa.delete(table).where(*(col == values[col.name] for col in table.primary_key.columns)))
    c.execute(sa.insert(table).values(**values))


def write_row(engine: sa.Engine, table: sa.Table, **values: Any) -> None:
    """:func:`replace_row` in a transaction of its own."""
    with engine.begin() as c:
        replace_row(c, table, **values)


def read_value(engine: sa.Engine, column: sa.Column[Any], *where: sa.ColumnElement[bool]) -> Any:
    """``column`` of the row that meets ``where`` (None: no such row)."""
    with engine.connect() as c:
        return c.scalar(sa.select(column).where(*where))


def read_values(engine: sa.Engine, column: sa.Column[Any], *where: sa.ColumnElement[bool]) -> list[Any]:
    """``column`` of every row that meets ``where``."""
    with engine.connect() as c:
        return list(c.scalars(sa.select(column).where(*where)))


def newest_rows(engine: sa.Engine, table: sa.Table, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` rows of ``table`` (by its ``id``), oldest first."""
    with engine.connect() as c:
        rows = c.execute(sa.select(table).order_by(table.c.id.desc()).limit(limit)).all()
    return [dict(r._mapping) for r in reversed(rows)]


def _table_row(rec: TableRecord) -> dict[str, Any]:
    return {"fqn": rec.fqn, "path": rec.path, "kind": rec.kind, "schema": json.dumps(rec.schema.columns),
            "key_columns": json.dumps(rec.key_columns), "time_column": rec.time_column,
            "owner_graph": rec.owner_graph}


def _table(row: Any) -> TableRecord:
    m = row._mapping
    return TableRecord(m["fqn"], m["path"], m["kind"], Schema(tuple(tuple(c) for c in json.loads(m["schema"]))),
                       tuple(json.loads(m["key_columns"])), m["time_column"], m["owner_graph"])

