"""The master's operations as commands, derived from their declarations (:mod:`headwater.runtime.operations`).

:data:`COMMANDS` only says under which words each operation is found (``headwater graph stop NAME`` is
``stop_graph``); the arguments, their types and defaults, the help and the result come from the declaration,
and the call goes through the same :class:`~headwater.runtime.operations.MasterApi` as a Python session: the
remote client for ``--url``, the gateway of an embedded master for ``--data-dir``. An operation missing from
:data:`COMMANDS` is still a command, under its own name.

>>> COMMANDS[("graph", "stop")], sorted(set(OPERATIONS) - set(COMMANDS.values()))
('stop_graph', ['submit'])
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pyarrow as pa

from headwater.catalog import FQN, resolve
from headwater.errors import ConfigurationError, RequestError, clip
from headwater.runtime.operations import OPERATIONS, Operation
from headwater.service.run import Help
from headwater.service.wire import from_wire
from headwater.types import Schema

# command words -> operation
COMMANDS: dict[tuple[str, ...], str] = {
    ("graphs",): "graph_meta",
    ("graph", "show"): "graph_info",
    ("graph", "stop"): "stop_graph",
    ("graph", "start"): "start_graph",
    ("graph", "resubmit"): "resubmit_graph",
    ("graph", "drop"): "drop_graph",
    ("graph", "purge"): "purge_records",
    ("graph", "wait"): "wait_until_caught_up",
    ("graph", "lag"): "task_subscription_meta",
    ("graph", "engines"): "engine_meta",
    ("graph", "progress"): "progress",
    ("graph", "checkpoint-config"): "checkpoint_config",
    ("graph", "set-checkpoint-config"): "set_checkpoint_config",
    ("tables",): "table_meta",
    ("table", "show"): "table_info",
    ("table", "create"): "create_public_table",
    ("table", "drop"): "drop_public_table",
    ("table", "retention"): "set_retention",
    ("table", "sequence"): "committed_sequence",
    ("table", "changes"): "table_changes",
    ("table", "lineage"): "data_lineage",
    ("append",): "append",
    ("append-once",): "append_once",
    ("sql",): "sql",
    ("events",): "state_machine_events",
    ("checkpoints",): "checkpoint_jobs",
    ("subjobs",): "checkpoint_subjobs",
    ("engine", "warmup"): "warmup",
    ("engine", "control"): "control_engine",
    ("workers",): "workers",
    ("users",): "users",
    ("user", "create"): "create_user",
    ("user", "drop"): "drop_user",
    ("user", "password"): "set_password",
    ("user", "privileges"): "user_privileges",
    ("group", "create"): "create_group",
    ("group", "drop"): "drop_group",
    ("group", "add"): "add_group_member",
    ("group", "remove"): "remove_group_member",
    ("grant",): "grant",
    ("deny",): "deny",
    ("revoke",): "revoke",
    ("audit",): "audit_log",
}
GROUPS = {"graph": "one stream graph", "table": "one stream table", "engine": "a running engine",
          "user": "users (admins)", "group": "groups of users (admins)"}
# graph documents are made by Python code (StreamGraph.submit), not typed on a command line
NOT_COMMANDS = frozenset({"submit"})
# what only a running master can do: an embedded master lives as long as the command
SERVICE_ONLY = frozenset({"start_graph", "resubmit_graph", "wait_until_caught_up", "warmup", "control_engine",
                          "progress", "workers"})

# arguments with a default that still read best without a flag: `headwater grant bob table_read demo`
OPTIONAL_POSITIONAL = frozenset({"obj"})

# The help of each argument, by name (the declarations' signatures name the same things the same way).
ARGUMENT_HELP = {
    "fqn": "its name: catalog.kind.name, or a bare name in --catalog",
    "engine": "the engine's name (set_engine_name): catalog.stream_engine.name, or a bare name in --catalog",
    "schema": 'columns as JSON: {"time": "timestamp", "px": "double"}',
    "kind": "plain, keyed, latest_keyed or changelog (its schema has a string changelog_type column)",
    "keys": 'key columns as JSON: ["sym"]',
    "time_column": "the table's time column",
    "retention": 'how far back it can be replayed, as JSON: {"minutes": 60} or {"rows": 1000000}',
    "data": "a Parquet (.parquet) or CSV (.csv) file of rows",
    "client_id": "the writer's id (1 to 64 letters, digits, _ . -)",
    "sequence": "the append's sequence number for this writer",
    "include_tables": "also drop the public tables only this graph uses",
    "timeout": "seconds to wait at most",
    "after_version": "the rows of the versions after this one (-1: from the start)",
    "limit": "the newest rows to show at most",
    "config": 'the checkpoint configuration as JSON: {"consecutiveFailures": 3}',
    "op": 'the change as JSON: {"op": "update_rule", "key": 1, "rules": ["px > 10"]}',
    "query": "one read-only SQL query",
    "current_catalog": "the catalog that completes bare table names (the command's --catalog)",
    "name": "the user's (or group's) name",
    "password": "the new password (better: leave it out and type it when asked)",
    "is_admin": "make the user an admin",
    "group": "the group's name",
    "user": "the user's name",
    "principal": "user:NAME, group:NAME, or a bare user name",
    "privilege": "graph_create, graph_drop, graph_control, table_create, table_drop, table_read, table_write, "
                 "engine_manage, manage or udf",
    "obj": "where: * (everywhere), a catalog, or a graph, table or engine's full name",
    "compute_group": "the compute group of workers to run on",
    "checkpoint_config": "the checkpoint configuration as JSON",
}


def command_of(op: str) -> tuple[str, ...]:
    """The words of operation ``op``'s command."""
    return next((words for words, name in COMMANDS.items() if name == op), (op.replace("_", "-"),))


def add_operation_commands(sub: argparse._SubParsersAction,
                           common: argparse.ArgumentParser) -> dict[str, argparse._SubParsersAction]:
    """One command per operation (but ``submit``), nested by their words, each with ``common``'s options; returns
    the groups (``graph``, ``table``, ...) for commands of their own."""
    groups: dict[str, argparse._SubParsersAction] = {}
    for name, op in OPERATIONS.items():
        if name in NOT_COMMANDS:
            continue
        words = command_of(name)
        parent = sub
        if len(words) == 2:
            if words[0] not in groups:
                group = sub.add_parser(words[0], help=GROUPS.get(words[0], words[0]))
                groups[words[0]] = group.add_subparsers(dest="action", required=True, metavar="ACTION")
            parent = groups[words[0]]
        doc = inspect.getdoc(op.function) or name
        p = parent.add_parser(words[-1], help=op.summary, description=doc, parents=[common], formatter_class=Help)
        _add_arguments(p, op)
        p.set_defaults(operation=name)
    return groups


def _add_arguments(p: argparse.ArgumentParser, op: Operation) -> None:
    hints = op.hints
    for param in list(op.signature.parameters.values())[1:]:
        kind = hints[param.name]
        inner, _ = _unwrap(kind)
        helptext = ARGUMENT_HELP.get(param.name)
        if helptext is None:
            raise AssertionError(f"operation {op.name}: argument {param.name} has no help in ARGUMENT_HELP")
        required = param.default is inspect.Parameter.empty
        if param.name == "current_catalog":  # the command's --catalog
            continue
        if param.name == "password":  # asked for when left out: a password on the command line lands in its history
            p.add_argument("--password", default=None, help=helptext)
        elif inner is bool:
            p.add_argument(f"--{_flag(param.name)}", dest=param.name, action="store_true", help=helptext)
        elif required or (_is_name(inner) and param.name == op.target) or param.name in OPTIONAL_POSITIONAL:
            metavar = "FILE" if inner is pa.Table else \
                typing.get_args(inner)[1].removeprefix("stream_").upper() if _is_name(inner) else param.name.upper()
            p.add_argument(param.name, metavar=metavar, nargs=None if required else "?", help=helptext,
                           default=None if required else param.default)
        else:
            p.add_argument(f"--{_flag(param.name)}", dest=param.name, default=param.default, help=helptext)


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _unwrap(kind: Any) -> tuple[Any, bool]:
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return kind, False


def _is_name(kind: Any) -> bool:
    return typing.get_origin(kind) is typing.Annotated and typing.get_args(kind)[0] is FQN


def arguments(op: Operation, args: argparse.Namespace) -> dict[str, Any]:
    """The typed arguments of ``op`` from the command line's text (names completed with ``--catalog``)."""
    values: dict[str, Any] = {}
    for param in list(op.signature.parameters.values())[1:]:
        if param.name == "current_catalog":
            values[param.name] = args.catalog
            continue
        text = getattr(args, param.name)
        kind, _ = _unwrap(op.hints[param.name])
        where = f"{' '.join(command_of(op.name))} {param.name}"
        if param.name == "password" and text is None:
            values[param.name] = ask_password(f"password for {getattr(args, 'name', 'the user')}")
        elif text is None or isinstance(text, bool) or text is param.default:
            values[param.name] = text
        elif _is_name(kind):
            values[param.name] = resolve(text, typing.get_args(kind)[1], current_catalog=args.catalog)
        elif kind is pa.Table:
            values[param.name] = read_rows(Path(text))
        elif kind in (str, int, float):
            try:
                values[param.name] = kind(text)
            except ValueError:
                raise RequestError(f"{where}: {clip(text)} is not a {kind.__name__}") from None
        else:
            try:
                doc = json.loads(text)
            except ValueError:
                raise RequestError(f"{where}: {clip(text)} is not JSON") from None
            if kind is Schema and isinstance(doc, dict):
                doc = [[k, v] for k, v in doc.items()]
            values[param.name] = from_wire(doc, op.hints[param.name], where)
    return values


def ask_password(prompt: str) -> str:
    """A password typed at the terminal (twice), or the first line of standard input when it is not one."""
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    import getpass

    first = getpass.getpass(f"{prompt}: ")
    if getpass.getpass("again: ") != first:
        raise ConfigurationError("the passwords differ")
    return first


def read_rows(path: Path) -> pa.Table:
    """The rows of a Parquet or CSV file."""
    if not path.is_file():
        raise ConfigurationError(f"{clip(str(path), 300)} is not a file: name a .parquet or .csv file of rows")
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if path.suffix == ".csv":
        import pyarrow.csv as pcsv

        return pcsv.read_csv(path)
    raise ConfigurationError(f"{clip(path.name)}: rows come from a .parquet or .csv file")
