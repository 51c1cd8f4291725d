"""``headwater master``: the master, its in-process worker and the HTTP API as one long-lived process.

The admin's password comes from ``HEADWATER_ADMIN_PASSWORD`` at first start (never from the command line,
where ``ps`` shows it). The API listens on 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
from pathlib import Path

from headwater.tuning import TRIGGER_INTERVAL

log = logging.getLogger(__name__)

# what --spark may name: a local Spark, or a standalone cluster's master (host names and IPv4 addresses)
SPARK_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]{0,3})\])?|spark://[A-Za-z0-9.-]{1,253}:[0-9]{1,5}")


def spark_master(text: str) -> str:
    if not SPARK_MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Spark master: use local[*], local[N] or spark://host:port")
    return text


def serve_master(args: argparse.Namespace) -> int:
    import uvicorn

    from headwater.api.session import embedded_master
    from headwater.service.auth import Authenticator
    from headwater.service.server import create_app

    pool = None
    if args.worker:
        from headwater.service.pool import WorkerPool

        pool = WorkerPool(args.worker, os.environ.get("HEADWATER_WORKER_SECRET", ""),
                          heartbeat=args.heartbeat, deadline=args.heartbeat_deadline)
    master = embedded_master(Path(args.data_dir), spark_master=args.spark, trigger_interval=args.trigger_interval,
                             metadata_url=args.metadata, worker=pool, start_spark=pool is None)
    try:
        if pool is not None:  # placements live in the master's store; then the graphs that were running resume
            pool.attach(master.store, master.worker_down)
            master.recover()
        auth = Authenticator(master.store)
        auth.ensure_admin(os.environ.get("HEADWATER_ADMIN_PASSWORD"))
        app = create_app(master, auth, max_body_bytes=args.max_body_mb * 2**20)
        print(f"headwater master: {args.data_dir} on http://{args.host}:{args.port} (API docs at /docs)", flush=True)
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    finally:
        if pool is not None:  # no failover while the master shuts down
            pool.close()
        master.close()
    return 0


def serve_worker(args: argparse.Namespace) -> int:
    import uvicorn

    from headwater.durations import parse_duration
    from headwater.runtime.worker import Worker
    from headwater.service.worker_http import check_secret, create_worker_app

    secret = check_secret(os.environ.get("HEADWATER_WORKER_SECRET"))
    worker = Worker(Path(args.data_dir), spark_master=args.spark,
                    trigger_interval=parse_duration(args.trigger_interval, where="--trigger-interval"))
    worker.name = f"worker@{args.host}:{args.port}"
    try:
        print(f"headwater worker: {args.data_dir} on http://{args.host}:{args.port}", flush=True)
        uvicorn.run(create_worker_app(worker, secret, group=args.group), host=args.host, port=args.port,
                    log_level=args.log_level, access_log=False)
    finally:
        worker.close()
    return 0


def add_worker_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run a stream worker: a Spark driver that runs the queries its master assigns")
    p.add_argument("--data-dir", required=True, help="the master's data directory (shared storage)")
    p.add_argument("--group", default="default", help="the compute group this worker belongs to")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8766)
    p.add_argument("--spark", default="local[*]", type=spark_master,
                   help="the Spark master of this worker's driver: local[*], local[N] or spark://host:port")
    p.add_argument("--trigger-interval", default=TRIGGER_INTERVAL, help="how often a query looks for new input")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=serve_worker)


def add_master_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("master", help="run the stream master: graphs, tables and SQL behind an HTTP API")
    p.add_argument("--data-dir", required=True, help="where tables, checkpoints and the metadata live")
    p.add_argument("--metadata", default=None,
                   help="the metadata store: postgresql://user@host:port/db (default: SQLite in the data directory)")
    p.add_argument("--worker", action="append", default=[],
                   help="the URL of a `headwater worker` to run graphs on; repeat it for several (default: a worker "
                        "in this process)")
    p.add_argument("--heartbeat", type=float, default=1.0, help="seconds between a worker's health checks")
    p.add_argument("--heartbeat-deadline", type=float, default=5.0,
                   help="seconds without an answer after which a worker is down and its graphs move")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--spark", default="local[*]", type=spark_master,
                   help="the Spark master of the worker's driver: local[*], local[N] or spark://host:port")
    p.add_argument("--trigger-interval", default=TRIGGER_INTERVAL, help="how often a query looks for new input")
    p.add_argument("--max-body-mb", type=int, default=512, help="the largest append or warm-up body accepted")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=serve_master)
