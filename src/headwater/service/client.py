"""The client side of the master's HTTP API: the master a remote :class:`~headwater.api.session.Session` uses.

:class:`RemoteMaster` has the methods of :class:`~headwater.runtime.master.Master` that a session calls,
with the same arguments and results; each is one HTTP request (``headwater.service.server``). An error the
master raised comes back as the same Headwater exception class, with its message.
"""

from __future__ import annotations

import dataclasses
import io
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from headwater.catalog import FQN
from headwater.errors import ConfigurationError, ExecutionError, HeadwaterError, clip, error_class
from headwater.plan.document import dumps, to_json
from headwater.plan.logical import LogicalGraph
from headwater.plan.physical import PhysicalGraph
from headwater.runtime.checkpoint_config import CheckpointConfig
from headwater.runtime.protocol import arrow_bytes
from headwater.service.tls import client_context
from headwater.storage.metadata import TableRecord
from headwater.storage.retention import Retention
from headwater.types import Schema

ARROW_STREAM = "application/vnd.apache.arrow.stream"
STANDBY_ERROR = "StandbyMaster"  # the error a standby master answers every API call with (HTTP 503)


def _is_standby(response: httpx.Response) -> bool:
    try:
        return bool(response.json().get("error") == STANDBY_ERROR)
    except (ValueError, AttributeError):
        return False


class AuthenticationError(HeadwaterError, PermissionError):
    """The master refused the user, password or token."""


class _ByteStream(io.RawIOBase):
    """A readable file over an iterator of byte chunks (an HTTP response body, read as it arrives)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.pending = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            chunk = next(self.chunks, None)
            if chunk is None:
                return 0
            self.pending = chunk
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


class RemoteMaster:
    """A master reached over HTTP at ``url``, logged in as ``user``.

    ``url`` may list several masters (an active one and standbys, ``--standby``): calls go to the one that
    answers as active. When it stops answering, a call moves on to the next within ``failover_timeout``
    seconds: any call whose request never reached the old master, and, if it was cut off after that, the
    calls that are safe to repeat (reads, submits, appends with a sequence number).
    """

    def __init__(self, url: str | Sequence[str], *, user: str, password: str, timeout: float = 60.0,
                 http: httpx.Client | None = None, failover_timeout: float = 60.0, tls_ca: str | None = None) -> None:
        # http: a ready client for this URL (tests pass FastAPI's TestClient, which calls the app in process)
        # tls_ca: the CA bundle an https:// master's certificate is checked against (default HEADWATER_TLS_CA, else
        # the system's trust store)
        urls = [url] if isinstance(url, str) else list(url)
        for u in urls:
            if not isinstance(u, str) or not u.startswith(("http://", "https://")):
                raise ConfigurationError(f"master URL {clip(u)} must start with http:// or https://")
        if not urls:
            raise ConfigurationError("connect(): no master URL given")
        self.urls = [u.rstrip("/") for u in urls]
        self._current = 0
        self._timeout = timeout
        self._failover_timeout = failover_timeout
        self._http = http if http is not None else httpx.Client(base_url=self.url, timeout=timeout,
                                                                verify=client_context(tls_ca))
        try:
            token = self._call("/v1/login", {"user": user, "password": password}, idempotent=True)["token"]
        except httpx.TransportError as exc:
            self._http.close()
            raise ConfigurationError(f"cannot reach the Headwater master at {self.url}: {exc}") from None
        except BaseException:
            self._http.close()
            raise
        self._http.headers["Authorization"] = f"Bearer {token}"

    @property
    def url(self) -> str:
        return self.urls[self._current]

    # -- transport ------------------------------------------------------------------------------------
    def _call(self, path: str, body: Any = None, *, content: bytes | None = None, params: dict[str, Any] | None = None,
              timeout: float | None = None, idempotent: bool = False) -> Any:
        deadline = time.monotonic() + self._failover_timeout
        tried = 0
        while True:
            try:
                if content is not None:
                    response = self._http.post(path, content=content, params=params,
                                               headers={"Content-Type": ARROW_STREAM}, timeout=timeout or self._timeout)
                else:
                    response = self._http.post(path, json=body, params=params, timeout=timeout or self._timeout)
            except httpx.TransportError as exc:
                # ConnectError: the request never left; anything later may have reached the master
                if len(self.urls) == 1 or not (idempotent or isinstance(exc, httpx.ConnectError)):
                    raise
                tried = self._next_master(tried, deadline, exc)
                continue
            if response.status_code == 503 and len(self.urls) > 1 and _is_standby(response):
                tried = self._next_master(tried, deadline, None)
                continue
            if response.is_success:
                return response.json()
            raise self._error(response)

    def _next_master(self, tried: int, deadline: float, exc: Exception | None) -> int:
        """Move on to the next master URL; after each full round, pause briefly (a standby takes over in seconds)."""
        if time.monotonic() > deadline:
            raise ExecutionError(f"no active Headwater master among {', '.join(self.urls)} within "
                                 f"{self._failover_timeout:.0f}s" + (f": {exc}" if exc else "")) from exc
        tried += 1
        self._current = (self._current + 1) % len(self.urls)
        self._http.base_url = httpx.URL(self.url)
        if tried % len(self.urls) == 0:
            time.sleep(0.25)  # every master refused: wait for the standby's takeover (bounded by the deadline)
        return tried

    def _error(self, response: httpx.Response) -> Exception:
        try:
            doc = response.json()
        except ValueError:
            doc = {}
        message = doc.get("message") if isinstance(doc, dict) else None
        if response.status_code == 401:
            return AuthenticationError(f"the Headwater master at {self.url} refused the call: {message or 'unauthorised'}")
        kind = error_class(doc.get("error")) if isinstance(doc, dict) else None
        if kind is not None and message is not None:
            return kind(message)
        return ExecutionError(f"the Headwater master at {self.url} answered {response.status_code}: "
                              f"{clip(message or response.text, 500)}")

    # -- tables ---------------------------------------------------------------------------------------
    def table_info(self, fqn: FQN) -> TableRecord:
        doc = self._call("/v1/tables/info", {"fqn": str(fqn)}, idempotent=True)
        return TableRecord(doc["fqn"], "", doc["kind"], Schema(tuple(tuple(c) for c in doc["schema"])),
                           tuple(doc["key_columns"]), doc["time_column"], None)

    def create_public_table(self, fqn: FQN, schema: Schema, kind: str, keys: tuple[str, ...], time_column: str | None,
                            retention: Retention | None = None) -> None:
        self._call("/v1/tables/create", {
            "fqn": str(fqn), "schema": [list(c) for c in schema.columns], "kind": kind, "key_columns": list(keys),
            "time_column": time_column, "retention": None if retention is None else
            {"minutes": retention.minutes, "rows": retention.rows}})

    def set_retention(self, fqn: FQN, retention: Retention | None) -> None:
        self._call("/v1/tables/retention", {"fqn": str(fqn), "retention": None if retention is None else
                                            {"minutes": retention.minutes, "rows": retention.rows}})

    def drop_public_table(self, fqn: FQN) -> None:
        self._call("/v1/tables/drop", {"fqn": str(fqn)})

    def append(self, fqn: FQN, data: pa.Table) -> int:
        return int(self._call("/v1/tables/append", content=arrow_bytes(data), params={"table": str(fqn)})["version"])

    def append_once(self, fqn: FQN, data: pa.Table, *, client_id: str, sequence: int) -> int:
        params = {"table": str(fqn), "client_id": client_id, "sequence": sequence}
        return int(self._call("/v1/tables/append", content=arrow_bytes(data), params=params, idempotent=True)["version"])

    def committed_sequence(self, fqn: FQN, client_id: str) -> int | None:
        return self._call("/v1/tables/committed_sequence", {"fqn": str(fqn), "client_id": client_id})["sequence"]

    def table_meta(self, fqn: FQN | None) -> list[dict[str, Any]]:
        return list(self._call("/v1/tables/meta", {"fqn": None if fqn is None else str(fqn)}, idempotent=True))

    # -- graphs ---------------------------------------------------------------------------------------
    def submit(self, logical: LogicalGraph, physical: PhysicalGraph, *, compute_group: str | None = None,
               checkpoint_config: CheckpointConfig | None = None) -> None:
        self._call("/v1/graphs/submit", {"document": dumps(to_json(logical, physical)), "compute_group": compute_group,
                                         "checkpoint_config": None if checkpoint_config is None else
                                         dataclasses.asdict(checkpoint_config)},
                   timeout=600.0, idempotent=True)  # the same definition again finishes what was cut off

    def stop_graph(self, fqn: FQN) -> None:
        self._call("/v1/graphs/stop", {"fqn": str(fqn)}, timeout=600.0)

    def start_graph(self, fqn: FQN) -> None:
        self._call("/v1/graphs/start", {"fqn": str(fqn)}, timeout=600.0)

    def resubmit_graph(self, fqn: FQN) -> None:
        self._call("/v1/graphs/resubmit", {"fqn": str(fqn)}, timeout=600.0)

    def purge_records(self, fqn: FQN) -> int:
        return int(self._call("/v1/graphs/purge", {"fqn": str(fqn)})["result"])

    def drop_graph(self, fqn: FQN, include_tables: bool) -> None:
        self._call("/v1/graphs/drop", {"fqn": str(fqn), "include_tables": include_tables}, timeout=600.0)

    def wait_until_caught_up(self, fqn: FQN, timeout: float) -> None:
        self._call("/v1/graphs/wait", {"fqn": str(fqn), "timeout": timeout}, timeout=timeout + 30.0, idempotent=True)

    def graph_meta(self, fqn: FQN | None) -> list[dict[str, Any]]:
        import pandas as pd

        rows = self._call("/v1/graphs/meta", {"fqn": None if fqn is None else str(fqn)}, idempotent=True)
        return [{**r, "create_time": pd.Timestamp(r["create_time"])} for r in rows]

    def graph_info(self, fqn: FQN) -> dict[str, Any]:
        return dict(self._call("/v1/graphs/info", {"fqn": str(fqn)}, idempotent=True))

    def engine_meta(self, fqn: FQN) -> list[dict[str, Any]]:
        return list(self._call("/v1/graphs/engines", {"fqn": str(fqn)}, idempotent=True))

    def state_machine_events(self, limit: int = 1000) -> list[dict[str, Any]]:
        return list(self._call("/v1/events", {"limit": limit}, idempotent=True))

    def checkpoint_config(self, fqn: FQN) -> dict[str, Any]:
        return dict(self._call("/v1/graphs/checkpoint_config", {"fqn": str(fqn)}, idempotent=True))

    def set_checkpoint_config(self, fqn: FQN, config: CheckpointConfig) -> None:
        self._call("/v1/graphs/set_checkpoint_config", {"fqn": str(fqn), "config": dataclasses.asdict(config)}, idempotent=True)

    def checkpoint_jobs(self, fqn: FQN | None) -> list[dict[str, Any]]:
        return list(self._call("/v1/checkpoints/jobs", {"fqn": None if fqn is None else str(fqn)}, idempotent=True))

    def checkpoint_subjobs(self, fqn: FQN | None) -> list[dict[str, Any]]:
        return list(self._call("/v1/checkpoints/subjobs", {"fqn": None if fqn is None else str(fqn)}, idempotent=True))

    def progress(self, fqn: FQN) -> dict[str, Any]:
        return dict(self._call("/v1/graphs/progress", {"fqn": str(fqn)}, idempotent=True))

    def warmup(self, engine: FQN, data: pa.Table) -> int:
        return int(self._call("/v1/engines/warmup", content=arrow_bytes(data), params={"engine": str(engine)},
                              timeout=600.0)["rows"])

    def control_engine(self, engine: FQN, op: dict[str, Any]) -> int:
        return int(self._call("/v1/engines/control", {"engine": str(engine), "op": op})["tasks"])

    # -- SQL ------------------------------------------------------------------------------------------
    def sql(self, query: object, *, current_catalog: str | None) -> tuple[Path, pa.Schema]:
        """Stream the result into a local Parquet file, a batch at a time; return its directory and schema."""
        directory = Path(tempfile.mkdtemp(prefix="headwater-sql-"))
        body = {"query": query, "current_catalog": current_catalog}
        deadline, tried = time.monotonic() + self._failover_timeout, 0
        while True:  # a read: safe to repeat on another master, from the start
            try:
                with self._http.stream("POST", "/v1/sql", json=body, timeout=None) as response:
                    if not response.is_success:
                        response.read()
                        if response.status_code == 503 and len(self.urls) > 1 and _is_standby(response):
                            tried = self._next_master(tried, deadline, None)
                            continue
                        raise self._error(response)
                    reader = pa.ipc.open_stream(pa.PythonFile(_ByteStream(response.iter_bytes()), mode="r"))
                    with pq.ParquetWriter(directory / "part-00000.parquet", reader.schema) as writer:
                        for batch in reader:
                            writer.write_batch(batch)
                return directory, reader.schema
            except httpx.TransportError as exc:
                if len(self.urls) == 1:
                    raise
                tried = self._next_master(tried, deadline, exc)

    # -- session --------------------------------------------------------------------------------------
    def recover(self) -> list[str]:
        """Nothing to do here: the master resumes its graphs itself."""
        return []

    def close(self) -> None:
        """Close the connection; the master and its graphs keep running."""
        self._http.close()
