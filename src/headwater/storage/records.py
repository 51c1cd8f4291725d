"""What the metadata store returns about a stream table and a stream graph: plain records, importable without
SQLAlchemy (the operations' declarations name them, and every command-line call loads those)."""

from __future__ import annotations

from dataclasses import dataclass

from headwater.types import Schema


@dataclass(frozen=True)
class TableRecord:
    fqn: str
    path: str
    kind: str
    schema: Schema
    key_columns: tuple[str, ...]
    time_column: str | None
    owner_graph: str | None

    @property
    def private(self) -> bool:
        return self.owner_graph is not None


@dataclass(frozen=True)
class GraphRecord:
    id: int
    fqn: str
    status: str
    semantics: str
    create_time: float
    reason: str
    graph_json: str
