"""Master ↔ Worker: what the master asks a worker to do, as serialisable messages behind one interface.

The master talks to workers only through :class:`WorkerPort` and the messages below. The embedded mode
uses :class:`~headwater.runtime.worker.InProcessWorkerPort` (the worker lives in the same process); the
service mode carries the same messages over the network. Every request crosses :func:`encode` / :func:`decode` (JSON-safe dicts,
bytes as base64) even in process, so nothing that could not cross a network slips into a message.

>>> import json
>>> decode(json.loads(json.dumps(encode(StopGraph("demo.stream_graph.g")))))
StopGraph(fqn='demo.stream_graph.g')
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa


@dataclass(frozen=True)
class StartGraph:
    """Start (or restart) every subgraph of a graph from its checkpoints; reply once all run."""

    fqn: str
    plan: str  # the graph's JSON document (headwater.plan.document); user functions travel pickled in it
    table_paths: dict[str, str]  # table node id (as text) -> table path
    checkpoints: str
    run_id: str
    # the placement's epoch: > 0 fences the graph's commits to this placement (``<checkpoints>/epoch`` names the
    # current one; a worker whose epoch is no longer there stops instead of committing). 0: no fence (in process)
    epoch: int = 0
    group: str = "default"  # the compute group whose workers may run it (service mode)
    keep_snapshots: int = 3  # engine state snapshots kept per task (checkpoint_config's max_retained_checkpoints)


@dataclass(frozen=True)
class StopGraph:
    fqn: str


@dataclass(frozen=True)
class IsRunning:
    """Reply: whether every query of the graph is running on this worker."""

    fqn: str


@dataclass(frozen=True)
class EngineStateEdit:
    """A change to the state of engine ``engine`` of graph ``fqn`` (its subgraph pauses meanwhile)."""

    fqn: str
    engine: str


@dataclass(frozen=True)
class Warmup(EngineStateEdit):
    """Advance an engine's state by rows (Arrow IPC stream) without output; reply: rows used."""

    data: bytes


@dataclass(frozen=True)
class ControlEngine(EngineStateEdit):
    """Apply a user's change (JSON, e.g. a rule update) to an engine's state; reply: tasks changed."""

    op: str


@dataclass(frozen=True)
class TaskStatus:
    """Reply: one dict per stream task (id, node, status, reason)."""

    fqn: str
    plan: str  # the graph's JSON document


@dataclass(frozen=True)
class Progress:
    """Reply: per subgraph, the last committed micro-batch, rows and the per-stage time split."""

    fqn: str


@dataclass(frozen=True)
class Health:
    """Reply: per graph this worker runs, ``{"failed": reason ("" while its queries run), "batches": micro-batches
    committed since it was started here}``."""


@dataclass(frozen=True)
class RunSql:
    """Run a query that passed the SQL policy; reply: the result directory in the SQL spool and its Arrow schema."""

    source: str
    text: str
    views: list[list[str]]  # [view, table FQN, table path]
    cte_names: list[str]
    limits: dict[str, Any] = dataclasses.field(default_factory=dict)  # headwater.sql.limits.SqlLimits.to_dict()


@dataclass(frozen=True)
class Shutdown:
    """Stop every query this worker runs."""


@dataclass(frozen=True)
class AwaitCommit:
    """Reply with how many micro-batches this worker's process has committed, once that differs from ``since``
    (None: at once) or after ``timeout`` seconds: a master learns of a worker process's commits as they land."""

    since: int | None = None
    timeout: float = 30.0


MESSAGES = {cls.__name__: cls for cls in (StartGraph, StopGraph, IsRunning, Warmup, ControlEngine,
                                          TaskStatus, Progress, Health, RunSql, Shutdown, AwaitCommit)}
Message = (StartGraph | StopGraph | IsRunning | Warmup | ControlEngine | TaskStatus | Progress | Health
           | RunSql | Shutdown | AwaitCommit)


def encode(message: Message) -> dict[str, Any]:
    """A JSON-safe dict of ``message`` (bytes as base64)."""
    fields = {f.name: getattr(message, f.name) for f in dataclasses.fields(message)}
    return {"type": type(message).__name__,
            **{k: base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v for k, v in fields.items()}}


def decode(doc: dict[str, Any]) -> Message:
    """The message :func:`encode` made; unknown types and fields are refused."""
    cls = MESSAGES.get(doc.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown worker message type {doc.get('type')!r}; known: {', '.join(MESSAGES)}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {k: v for k, v in doc.items() if k != "type"}
    if set(values) != set(fields):
        raise ValueError(f"worker message {cls.__name__}: fields {sorted(values)}, expected {sorted(fields)}")
    for name, field in fields.items():
        if field.type == "bytes":
            values[name] = base64.b64decode(values[name])
    return cls(**values)


def arrow_bytes(table: pa.Table) -> bytes:
    """Rows on the wire: ``table`` as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def arrow_table(data: bytes) -> pa.Table:
    """The table :func:`arrow_bytes` made."""
    return pa.ipc.open_stream(data).read_all()


class WorkerPort(Protocol):
    """How the master reaches a worker: send a message, get the reply (or the worker's error raised)."""

    name: str
    stops_with_master: bool  # whether the master's close stops the worker's queries (an in-process worker)

    def request(self, message: Message) -> Any: ...

    def describe(self) -> list[dict[str, Any]]:
        """One row per worker behind this port: url, group, alive, spark, cpu, memory, heartbeat_age_s, graphs."""
        ...
