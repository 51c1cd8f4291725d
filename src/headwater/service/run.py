"""``headwater master``: the master, its in-process worker and the HTTP API as one long-lived process.

The admin's password comes from ``HEADWATER_ADMIN_PASSWORD`` at first start (never from the command line,
where ``ps`` shows it). The API listens on 127.0.0.1 unless ``--host`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from headwater.tuning import DRIVER_BATCH_ROWS, TRIGGER_INTERVAL

log = logging.getLogger(__name__)

# what --spark may name: a local Spark, or a standalone cluster's master (host names and IPv4 addresses)
SPARK_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]{0,3})\])?|spark://[A-Za-z0-9.-]{1,253}:[0-9]{1,5}")


def spark_master(text: str) -> str:
    if not SPARK_MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Spark master: use local[*], local[N] or spark://host:port")
    return text


def positive(text: str) -> int:
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 0")
    return value


def cluster(args: argparse.Namespace) -> int:
    from headwater.service import cluster as local_cluster

    data_dir = Path(args.data_dir).resolve()
    if args.action == "up":
        state = local_cluster.up(data_dir, workers=args.workers, port=args.port, postgres=args.postgres,
                                 cores_per_worker=args.cores_per_worker, driver_batch_rows=args.driver_batch_rows)
        print(f"headwater cluster on {data_dir}:\n  master   {state['master']}  (user admin, password in "
              f"{data_dir / 'cluster' / 'admin-password'} unless HEADWATER_ADMIN_PASSWORD is set)\n"
              f"  workers  {' '.join(state['workers'])}\n  spark    {state['spark_master']}\n"
              f"  metadata {state['metadata'] or 'SQLite in the data directory'}\n  logs     {data_dir / 'cluster' / 'logs'}")
        return 0
    if args.action == "status":
        rows = local_cluster.status(data_dir)
        for r in rows:
            answer = "" if r["answering"] is None else ("answering" if r["answering"] else "NOT answering")
            print(f"{r['name']:<14} pid {r['pid']:<8} {'running' if r['running'] else 'NOT running':<12} {answer}")
        return 0 if all(r["running"] and r["answering"] is not False for r in rows) else 1
    stopped = local_cluster.down(data_dir)
    print(f"headwater cluster on {data_dir}: stopped {stopped} process(es)")
    return 0


def add_cluster_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="start, check or stop the whole service on this machine (Spark standalone, "
                                       "workers, master, optionally PostgreSQL)")
    p.add_argument("action", choices=["up", "status", "down"])
    p.add_argument("--data-dir", required=True, help="where tables, checkpoints, metadata and the cluster's logs live")
    p.add_argument("--workers", type=positive, default=2, help="Headwater workers to start (up)")
    p.add_argument("--port", type=positive, default=8765, help="the master's port (up)")
    p.add_argument("--postgres", action="store_true", help="keep the metadata in a PostgreSQL server started here (up)")
    p.add_argument("--cores-per-worker", type=positive, default=1, help="Spark executor cores per worker (up)")
    p.add_argument("--driver-batch-rows", type=non_negative, default=None,
                   help="passed to each worker (up); 0 makes every micro-batch run on Spark's executors")
    p.set_defaults(func=cluster)


def configure_logging(level: str) -> None:
    """Headwater's own log lines on stderr, each with its time: an operator lines up a failover with them."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("headwater")
    root.addHandler(handler)
    root.setLevel(level.upper())


def serve_master(args: argparse.Namespace) -> int:
    """Serve the API; with PostgreSQL metadata, only while this master holds the leadership (``--standby``: wait
    for it, serving 503 meanwhile)."""
    import uvicorn

    from headwater.errors import ConfigurationError

    configure_logging(args.log_level)
    from headwater.service.server import Switchboard, create_standby_app

    leadership = None
    if args.metadata is not None and args.metadata.startswith(("postgresql", "postgres://")):
        from headwater.service.leader import Leadership

        leadership = Leadership(args.metadata)
        if not leadership.try_acquire() and not args.standby:
            leadership.close()
            raise ConfigurationError("another master is active on this metadata store; start this one with "
                                     "--standby to take over when it stops")
    elif args.standby:
        raise ConfigurationError("--standby needs the metadata in PostgreSQL (--metadata postgresql://...), which "
                                 "the masters share")
    serving = ActiveMaster(args)
    app = Switchboard(create_standby_app(lambda: "it takes over when the active master stops"))
    stop = threading.Event()
    if leadership is None or leadership.held:
        app.inner = serving.start()
        role = "active"
    else:
        threading.Thread(target=_await_leadership, args=(leadership, serving, app, stop), daemon=True,
                         name="headwater-standby").start()
        role = "standby"
    if leadership is not None:
        threading.Thread(target=_watch_leadership, args=(leadership, stop), daemon=True,
                         name="headwater-leadership").start()
    print(f"headwater master ({role}): {args.data_dir} on http://{args.host}:{args.port} (API docs at /docs)",
          flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False, lifespan="off")
    finally:
        stop.set()
        serving.close()
        if leadership is not None:
            leadership.close()
    return 0


LEADERSHIP_POLL_S = 1.0


def add_sql_limit_flags(p: argparse.ArgumentParser) -> None:
    """``--sql-max-rows``, ``--sql-max-result-bytes``, ``--sql-timeout-s`` (headwater.sql.limits.SqlLimits)."""
    from headwater.sql.limits import ENV, FLAGS, SqlLimits

    helps = {"max_rows": "the most rows one session.sql result may have",
             "max_result_bytes": "the most bytes one session.sql result may take in the spool (<data-dir>/tmp/sql)",
             "timeout_s": "wall-clock seconds after which a session.sql query is cancelled"}
    for name, flag in FLAGS.items():
        p.add_argument(flag, type=float if name == "timeout_s" else positive, default=None,
                       help=f"{helps[name]} (default {getattr(SqlLimits, name):,}, or ${ENV[name]})")


def sql_limits(args: argparse.Namespace) -> Any:
    """The SqlLimits of ``--sql-*`` flags, the rest from the environment or the defaults."""
    import dataclasses

    from headwater.sql.limits import SqlLimits

    given = {name: getattr(args, "sql_" + name, None) for name in ("max_rows", "max_result_bytes", "timeout_s")}
    return dataclasses.replace(SqlLimits.from_env(), **{k: v for k, v in given.items() if v is not None})


class ActiveMaster:
    """The master's parts once it is active: its worker pool, the master, the API app."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pool: Any = None
        self.master: Any = None

    def start(self) -> Any:
        from headwater.api.session import embedded_master
        from headwater.service.auth import Authenticator
        from headwater.service.server import create_app

        args = self.args
        if args.worker or args.remote_workers:
            from headwater.service.pool import WorkerPool

            self.pool = WorkerPool(args.worker, os.environ.get("HEADWATER_WORKER_SECRET", ""),
                                   heartbeat=args.heartbeat, deadline=args.heartbeat_deadline)
        self.master = embedded_master(Path(args.data_dir), spark_master=args.spark,
                                      trigger_interval=args.trigger_interval, metadata_url=args.metadata,
                                      sql_limits=sql_limits(args),
                                      worker=self.pool, start_spark=self.pool is None)
        if self.pool is not None:  # placements live in the master's store; then the graphs that were running resume
            self.pool.attach(self.master.store, self.master.worker_down)
            self.master.recover()
        auth = Authenticator(self.master.store)
        auth.ensure_admin(os.environ.get("HEADWATER_ADMIN_PASSWORD"))
        secret = os.environ.get("HEADWATER_WORKER_SECRET") if self.pool is not None else None
        return create_app(self.master, auth, max_body_bytes=args.max_body_mb * 2**20, worker_secret=secret)

    def close(self) -> None:
        if self.pool is not None:  # no failover while the master shuts down
            self.pool.close()
        if self.master is not None:
            self.master.close()


JOIN_EVERY_S = 2.0


def _join_masters(masters: list[str], me: str, group: str, secret: str) -> None:
    """Tell the masters, again and again, that this worker is here: whichever is active (or becomes active after
    a failover) adds it to its pool; a standby answers 503 and an unreachable one is skipped."""
    import httpx

    while True:
        for master in masters:
            with contextlib.suppress(httpx.HTTPError):  # down, or not up yet: the next round tries again
                httpx.post(f"{master.rstrip('/')}/v1/workers/join", json={"url": me, "group": group},
                           headers={"Authorization": f"Bearer {secret}"}, timeout=5.0)
        time.sleep(JOIN_EVERY_S)  # the pace of re-joining (a master that restarted learns of us within it)


def _await_leadership(leadership: Any, serving: ActiveMaster, app: Any, stop: threading.Event) -> None:
    """A standby: take over once the active master's lock is released."""
    while not stop.wait(LEADERSHIP_POLL_S):
        try:
            if leadership.try_acquire():
                log.warning("the active master is gone: this standby takes over")
                app.inner = serving.start()
                print("headwater master: now active", flush=True)
                return
        except Exception:  # the database is unreachable now: keep trying, as standby
            log.exception("standby: could not check the leadership")


def _watch_leadership(leadership: Any, stop: threading.Event) -> None:
    """An active master that lost its lock's connection stops at once: a standby may be active by now."""
    while not stop.wait(LEADERSHIP_POLL_S):
        if leadership.held and not leadership.holds():
            log.critical("lost the connection that holds the master's leadership: stopping this master")
            os._exit(3)


def serve_worker(args: argparse.Namespace) -> int:
    import uvicorn

    from headwater.durations import parse_duration
    from headwater.runtime.worker import Worker
    from headwater.service.worker_http import check_secret, create_worker_app

    configure_logging(args.log_level)
    secret = check_secret(os.environ.get("HEADWATER_WORKER_SECRET"))
    worker = Worker(Path(args.data_dir), spark_master=args.spark,
                    trigger_interval=parse_duration(args.trigger_interval, where="--trigger-interval"),
                    driver_batch_rows=args.driver_batch_rows, spark_cores=args.spark_cores)
    worker.name = f"worker@{args.host}:{args.port}"
    # a worker is a Spark driver: start it now, so that a graph placed here (or moved here) starts in seconds
    threading.Thread(target=lambda: worker.spark, name="headwater-spark-start", daemon=True).start()
    if args.master:
        me = f"http://{args.host}:{args.port}"
        threading.Thread(target=_join_masters, args=(args.master, me, args.group, secret), daemon=True,
                         name="headwater-join").start()
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
    p.add_argument("--master", action="append", default=[],
                   help="a master to join (repeat it for a standby): the worker registers with the active one")
    p.add_argument("--spark-cores", type=positive, default=None,
                   help="on a standalone cluster: the executor cores this worker's Spark driver takes (default: all)")
    p.add_argument("--driver-batch-rows", type=non_negative, default=DRIVER_BATCH_ROWS,
                   help="micro-batches up to this many input rows run in the driver; 0: always as Spark tasks")
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
    add_sql_limit_flags(p)
    p.add_argument("--remote-workers", action="store_true",
                   help="run no worker in this process: graphs run on workers that join (headwater worker --master) "
                        "or are named by --worker")
    p.add_argument("--standby", action="store_true",
                   help="wait as a standby and take over when the active master on the same --metadata stops")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=serve_master)
