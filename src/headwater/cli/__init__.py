"""The ``headwater`` command (also ``python -m headwater``).

- ``demo``, ``master``, ``worker``, ``cluster up|status|down``: run Headwater; ``ui``: the web console;
- ``login`` / ``logout``: keep a token for a master;
- one command per master operation (``graphs``, ``graph stop NAME``, ``tables``, ``sql "..."``, ``append``,
  ``events``, ``grant``, ...; :mod:`headwater.cli.operations`), against a master (``--url`` or
  ``HEADWATER_URL``) or a data directory no master holds (``--data-dir``); ``--json`` prints JSON.

Exit codes (:data:`EXIT_CODES`): 0 done; 1 failed; 2 bad usage or input; 3 not logged in or refused login;
4 permission denied; 5 no such graph, table or user; 6 a conflict (the name is taken, the graph is in
another state, the data directory is held); 7 busy (retry later); 8 a wait ran out of time.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from headwater import __version__
from headwater.errors import ConfigurationError, HeadwaterError, extra_needed, http_status
from headwater.storage.shared_storage import storage_argument

EXIT_CODES = {422: 2, 401: 3, 403: 4, 404: 5, 409: 6, 429: 7, 504: 8}  # by HTTP status; anything else: 1


def exit_code(error: HeadwaterError) -> int:
    from headwater.cli.credentials import NotLoggedIn

    if isinstance(error, NotLoggedIn):
        return 3
    return EXIT_CODES.get(http_status(error), 1)


def build_parser() -> argparse.ArgumentParser:
    from headwater.cli.demo import add_demo_command
    from headwater.cli.operations import add_operation_commands
    from headwater.cli.ui import add_ui_command
    from headwater.service.run import Help, add_cluster_command, add_master_command, add_worker_command

    parser = argparse.ArgumentParser(prog="headwater", description="Headwater: stream graphs on Spark.",
                                     epilog="Exit codes: 0 done, 1 failed, 2 bad usage or input, 3 not logged in, "
                                            "4 permission denied, 5 not found, 6 conflict, 7 busy, 8 timed out.")
    parser.add_argument("--version", action="version", version=f"headwater {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_demo_command(sub)
    add_master_command(sub)
    add_worker_command(sub)
    add_cluster_command(sub)
    add_ui_command(sub)

    reach = argparse.ArgumentParser(add_help=False)
    reach.add_argument("--url", default=None,
                       help="the master (default: $HEADWATER_URL; several, comma-separated, for its standbys)")
    common = argparse.ArgumentParser(add_help=False, parents=[reach])
    common.add_argument("--data-dir", type=storage_argument, default=None,
                        help="a data directory no master holds, instead of --url (listings, SQL, appends, stop)")
    common.add_argument("--catalog", default=None, help="the catalog that completes bare names")
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")

    p = sub.add_parser("login", parents=[reach], help="log in to a master and keep the token for later commands",
                       formatter_class=Help)
    p.add_argument("--user", default=None, help="the user (default: $HEADWATER_USER)")
    p.set_defaults(func=login)
    p = sub.add_parser("logout", parents=[reach], help="revoke the kept token of a master and forget it",
                       formatter_class=Help)
    p.set_defaults(func=logout)
    groups = add_operation_commands(sub, common)
    p = groups["table"].add_parser("tail", parents=[common], formatter_class=Help,
                                   help="print a table's rows as they are committed, until interrupted")
    p.add_argument("table", metavar="TABLE", help="the table: catalog.stream_table.name, or a bare name in --catalog")
    p.add_argument("--from-version", type=int, default=None,
                   help="the first version to print (default: only versions committed from now on)")
    p.add_argument("--max-versions", type=int, default=None, help="stop after this many versions (default: never)")
    p.set_defaults(func=tail)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "operation", None):
        args.func = run_operation
    try:
        with extra_needed("service", f"headwater {args.command}"), extra_needed("demo", f"headwater {args.command}"):
            return int(args.func(args))
    except HeadwaterError as exc:  # a bad setting or input, a refusal: one line, not a stack trace
        from headwater.cli.operations import command_of

        words = " ".join(command_of(args.operation)) if getattr(args, "operation", None) else args.command
        print(f"headwater {words}: {exc}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        return 130


# -- login ------------------------------------------------------------------------------------------------
def _url(args: argparse.Namespace) -> str:
    from headwater.cli.credentials import URL_ENV, master_url

    url = master_url(args.url)
    if url is None:
        raise ConfigurationError(f"which master? give --url http://host:port (or set {URL_ENV})")
    return url


def login(args: argparse.Namespace) -> int:
    import os

    from headwater.cli.credentials import PASSWORD_ENV, USER_ENV, save_token
    from headwater.service.client import RemoteMaster

    url = _url(args)
    user = args.user or os.environ.get(USER_ENV)
    if not user:
        raise ConfigurationError(f"who? give --user NAME (or set {USER_ENV})")
    password = os.environ.get(PASSWORD_ENV) or _ask_once(f"password of {user} at {url}")
    remote = RemoteMaster([u.strip() for u in url.split(",")], user=user, password=password)
    try:
        save_token(url, remote.token)
    finally:
        remote.close()
    print(f"logged in to {url} as {user}")
    return 0


def _ask_once(prompt: str) -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    import getpass

    return getpass.getpass(f"{prompt}: ")


def logout(args: argparse.Namespace) -> int:
    from headwater.cli.credentials import save_token, saved_token
    from headwater.service.client import RemoteMaster

    url = _url(args)
    token = saved_token(url)
    if token is not None:
        remote = RemoteMaster([u.strip() for u in url.split(",")], token=token)
        try:
            with contextlib.suppress(HeadwaterError):  # revoked or expired already: forgetting it is enough
                remote.logout()
        finally:
            remote.close()
        save_token(url, None)
    print(f"logged out of {url}")
    return 0


# -- operations ---------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _master(args: argparse.Namespace, operation: str) -> Iterator[Any]:
    """The MasterApi the command talks to: the master at --url, or one embedded on --data-dir for this command."""
    from headwater.cli.credentials import credentials, master_url
    from headwater.cli.operations import SERVICE_ONLY, command_of

    url = None if args.data_dir else master_url(args.url)
    if url is not None:
        from headwater.service.client import RemoteMaster

        given = credentials(url)
        remote = RemoteMaster([u.strip() for u in url.split(",")], user=given.get("user"),
                              password=given.get("password"), token=given.get("token"))
        try:
            yield remote
        finally:
            remote.close()
        return
    if not args.data_dir:
        raise ConfigurationError("which master? give --url http://host:port (or set HEADWATER_URL), or --data-dir DIR")
    if operation in SERVICE_ONLY:
        raise ConfigurationError(f"`headwater {' '.join(command_of(operation))}` needs a running master: give --url "
                                 "(on --data-dir, the graph would live only as long as this command)")
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise ConfigurationError(f"no data directory at {data_dir}")
    from headwater.api.session import LOCAL_USER
    from headwater.runtime.access import AccessControl
    from headwater.runtime.embedded import embedded_master
    from headwater.runtime.gateway import Gateway

    master = embedded_master(data_dir, start_spark=False)  # resumes nothing: it lives as long as this command
    try:
        yield Gateway(master, AccessControl(master.store), LOCAL_USER, trusted=True)
    finally:
        master.close()


def run_operation(args: argparse.Namespace) -> int:
    from headwater.cli.operations import arguments, command_of
    from headwater.cli.render import as_json, as_text, sql_rows
    from headwater.runtime.operations import OPERATIONS, SqlResultFiles
    from headwater.service.wire import to_wire

    op = OPERATIONS[args.operation]
    values = arguments(op, args)
    with _master(args, op.name) as api:
        result = _with_progress(lambda: getattr(api, op.name)(**values), " ".join(command_of(op.name)))
    kind = op.hints["return"]
    shown = sql_rows(result) if kind == SqlResultFiles else to_wire(result, kind)
    if args.json:
        print(as_json(shown))
    elif shown is None:
        print(f"{' '.join(command_of(op.name))}: done", file=sys.stderr)
    else:
        print(as_text(shown))
    return 0


def tail(args: argparse.Namespace) -> int:
    """``headwater table tail``: ``session.subscribe`` printed, a line per row (JSON lines with ``--json``)."""
    import itertools

    from headwater.api.session import Session
    from headwater.cli.render import as_json, as_text

    with _master(args, "table_changes") as api:
        session = Session(api)
        if args.catalog:
            session.use_catalog(args.catalog)
        header = True
        for changes in itertools.islice(session.subscribe(args.table, args.from_version), args.max_versions):
            rows = changes.to_pylist()
            if args.json:
                for row in rows:
                    print(as_json(row), flush=True)
            elif rows:
                text = as_text(rows).splitlines()
                print("\n".join(text if header else text[1:]), flush=True)
                header = False
    return 0


def _with_progress(call: Any, what: str, after: float = 1.0) -> Any:
    """``call()``; on a terminal, a line on stderr with the time taken while it runs longer than ``after`` s."""
    if not sys.stderr.isatty():
        return call()
    done = threading.Event()
    began = time.monotonic()

    def show() -> None:
        if done.wait(after):
            return
        while not done.wait(0.5):
            print(f"\r{what}: {time.monotonic() - began:.0f} s", end="", file=sys.stderr, flush=True)
        print("\r\033[K", end="", file=sys.stderr, flush=True)

    shower = threading.Thread(target=show, daemon=True)
    shower.start()
    try:
        return call()
    finally:
        done.set()
        shower.join()
