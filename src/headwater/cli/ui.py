"""``headwater ui``: where a master's web console is, or the console of a data directory no master holds."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from headwater.errors import ConfigurationError
from headwater.storage.shared_storage import storage_argument


def add_ui_command(sub: argparse._SubParsersAction) -> None:
    from headwater.service.hosts import bind_address
    from headwater.service.run import Help, add_log_flags

    p = sub.add_parser("ui", formatter_class=Help,
                       help="the web console: a master's address (--url), or served here for --data-dir",
                       description="With --url (or $HEADWATER_URL): print the address of that master's console "
                                   "(it serves it itself, at /ui). With --data-dir: serve the console of a data "
                                   "directory no master holds, until interrupted; its users and privileges apply "
                                   "(HEADWATER_ADMIN_PASSWORD sets the admin's password if it has none yet).")
    p.add_argument("--url", default=None, help="the master (default: $HEADWATER_URL)")
    p.add_argument("--data-dir", type=storage_argument, default=None, help="serve the console of this data directory instead")
    p.add_argument("--host", type=bind_address, default="127.0.0.1", help="the address to listen on (with --data-dir)")
    p.add_argument("--port", type=int, default=8770, help="the port to listen on (with --data-dir)")
    p.add_argument("--advertise-address", default=None,
                   help="the address browsers reach the console at (with --data-dir); default: --host, which must "
                        "then not be a wildcard")
    add_log_flags(p, access=True)
    p.set_defaults(func=ui)


def ui(args: argparse.Namespace) -> int:
    if args.data_dir is None:
        from headwater.cli.credentials import URL_ENV, master_url

        url = master_url(args.url)
        if url is None:
            raise ConfigurationError(f"which console? give --url http://host:port (or set {URL_ENV}), or --data-dir DIR")
        print(f"{url.split(',')[0].rstrip('/')}/ui/")
        return 0
    return serve(args)


def console_url(args: argparse.Namespace) -> str:
    """Where a browser finds the console served for ``--data-dir`` (checked before anything starts).

    >>> console_url(argparse.Namespace(host="::1", advertise_address=None, port=8770))
    'http://[::1]:8770/ui/'
    """
    from headwater.service.hosts import advertise_address, url_host

    return f"http://{url_host(advertise_address(args.host, args.advertise_address))}:{args.port}/ui/"


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from headwater.runtime.embedded import embedded_master
    from headwater.service.auth import Authenticator
    from headwater.service.run import configure_logging
    from headwater.service.server import create_app

    configure_logging(args.log_level, args.log_format)
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        raise ConfigurationError(f"no data directory at {data_dir}")
    url = console_url(args)
    master = embedded_master(data_dir, start_spark=False)  # holds the directory: no master runs on it meanwhile
    try:
        auth = Authenticator(master.store)
        auth.ensure_admin(os.environ.get("HEADWATER_ADMIN_PASSWORD"))
        app: Any = create_app(master, auth, access_log=args.access_log)
        print(f"headwater ui: {data_dir} on {url}", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False, lifespan="off")
    finally:
        master.close()
    return 0
