"""Writing an append to a stream table's Delta log: one commit file, created if absent.

A micro-batch commits its output files to every output table, and a client append commits one file: on the
path of every row. delta-rs (1.6) takes 4-7 ms for ``create_write_transaction`` and leaves its table object at
the version before, so that the next commit first needs ``update_incremental`` (~4 ms) and
``transaction_version``: ~9 ms per commit on this machine, against ~0.3 ms for writing the same commit file
here. An append to an append-only table conflicts with nothing but another commit of the same version, so the
commit is ``_delta_log/<version>.json`` created only if absent (a link of a complete temporary file, as
delta-rs does on a local file system); a writer that loses the race re-reads the log and tries the next
version. The actions are those delta-rs writes for an append (``commitInfo``, ``add`` with ``numRecords``,
``txn``), and every :data:`CHECKPOINT_INTERVAL` versions delta-rs writes a log checkpoint, as its post-commit
hook does.

Only tables whose Delta protocol asks nothing more of a writer are written this way (:func:`check_writable`):
the ones Headwater creates (writer features ``appendOnly``, ``timestampNtz``), or a legacy protocol of writer
version 1 or 2 without column invariants.

>>> import tempfile
>>> from headwater.storage.table_log import read_commit, transactions
>>> d = tempfile.mkdtemp(); os.mkdir(os.path.join(d, "_delta_log"))
>>> write_commit(d, 1, [("a.parquet", 10, 2)], txn=("app", 7), at=None), write_commit(d, 1, [], txn=None, at=None)
(True, False)
>>> [os.path.basename(f.path) for f in read_commit(d, 1).files], transactions(d, 1)
(['a.parquet'], {'app': 7})
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Sequence
from typing import Any

from headwater.errors import ExecutionError, clip
from headwater.storage.table_log import STAMP_KEY, commit_file, log_dir

CHECKPOINT_INTERVAL = 100  # delta-rs's default (delta.checkpointInterval), which its post-commit hook follows
WRITER_FEATURES = frozenset({"appendOnly", "timestampNtz"})  # what an append here honours (it only adds)
CLIENT = "headwater"


def check_writable(protocol: Any, invariants: bool, name: str) -> None:
    """Raise unless an append written here honours everything the table's Delta protocol asks of a writer.

    ``protocol``: deltalake's ``ProtocolVersions``; ``invariants``: whether the schema has column invariants.
    """
    writer = protocol.min_writer_version
    features = set(protocol.writer_features or ())
    legacy_ok = writer <= 2 and not invariants
    if (writer == 7 and features <= WRITER_FEATURES) or legacy_ok:
        return
    asks = sorted(features - WRITER_FEATURES) if writer == 7 else [f"writer version {writer}"]
    raise ExecutionError(
        f"stream table {clip(name)}: its Delta protocol asks a writer for {', '.join(asks)}, which Headwater's "
        f"appends do not implement (they honour {sorted(WRITER_FEATURES)}); write to it with the tool that made it"
    )


def has_invariants(schema_json: str) -> bool:
    """Whether a Delta schema (its JSON) sets column invariants (``delta.invariants`` in a field's metadata)."""
    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            meta = node.get("metadata")
            if isinstance(meta, dict) and "delta.invariants" in meta:
                return True
            return any(walk(v) for v in node.values())
        return isinstance(node, list) and any(walk(v) for v in node)

    return walk(json.loads(schema_json))


def write_commit(path: str, version: int, files: Sequence[tuple[str, int, int]], *,
                 txn: tuple[str, int] | None, at: float | None) -> bool:
    """Commit ``files`` (name in the table directory, bytes, rows) as ``version``; False if that version exists.

    ``txn``: the (application id, version) transaction the commit records; ``at``: the commit's time as
    :func:`~headwater.storage.table_log.commit_time` reports it (default: now).
    """
    now = int(time.time() * 1000)
    info: dict[str, Any] = {"timestamp": now, "operation": "WRITE",
                            "operationParameters": {"mode": "Append", "partitionBy": "[]"}, "clientVersion": CLIENT}
    if at is not None:
        info[STAMP_KEY] = repr(float(at))
    actions: list[dict[str, Any]] = [{"commitInfo": info}]
    actions += [{"add": {"path": name, "partitionValues": {}, "size": size, "modificationTime": now,
                         "dataChange": True, "stats": json.dumps({"numRecords": rows})}}
                for name, size, rows in files]
    if txn is not None:
        actions.append({"txn": {"appId": txn[0], "version": txn[1], "lastUpdated": now}})
    tmp = os.path.join(log_dir(path), f"_commit_{uuid.uuid4().hex}.json.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions))
        os.link(tmp, commit_file(path, version))  # atomic, and fails if another writer took the version
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    return True

