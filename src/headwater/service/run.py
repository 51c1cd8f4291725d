"""``headwater master``: the master, its in-process worker and the HTTP API as one long-lived process.

The admin's password comes from ``HEADWATER_ADMIN_PASSWORD`` at first start (never from the command line,
where ``ps`` shows it). The API and the Spark driver listen on 127.0.0.1 unless ``--host`` says otherwise, and
are reached at ``--advertise-address`` (default: ``--host``; see :mod:`headwater.service.hosts`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from headwater.errors import ConfigurationError
from headwater.service import tls
from headwater.service.hosts import add_address_flags, advertise_address, check_address, url_host
from headwater.service.leader import LEASE_SECONDS, MIN_LEASE_SECONDS
from headwater.storage.shared_storage import check_storage, storage_argument
from headwater.tuning import DRIVER_BATCH_ROWS, TRIGGER_INTERVAL

log = logging.getLogger(__name__)

# what --spark may name: a local Spark, or a standalone cluster's master (host names and IPv4 addresses)
N = TypeVar("N", int, float)
LOCAL_SPARK = re.compile(r"local(\[(\*|[1-9][0-9]{0,3})\])?")


def spark_master(text: str) -> str:
    """argparse type of ``--spark``: ``local``, ``local[*]``, ``local[N]``, or ``spark://host:port`` whose host is
    an address (IPv6 in brackets) or a name that resolves, and nothing else in the URL."""
    if LOCAL_SPARK.fullmatch(text):
        return text
    if text.startswith("spark://"):
        url = urlsplit(text)
        try:
            port = url.port
        except ValueError:
            port = None
        extra = url.path or url.query or url.fragment or url.username or url.password
        if url.hostname and port and not extra:
            try:
                check_address(url.hostname, what=f"--spark {text!r}: its host", wildcard=False)
            except ConfigurationError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
            return text
    raise argparse.ArgumentTypeError(f"{text!r} is not a Spark master: use local[*], local[N] or spark://host:port")


def positive(text: str) -> int:
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def non_negative(text: str) -> int:
    return _number(text, int, lambda v: v >= 0, "a whole number >= 0")


def lease_seconds(text: str) -> float:
    return _number(text, float, lambda v: MIN_LEASE_SECONDS <= v <= 3600,
                   f"a lease length in seconds from {MIN_LEASE_SECONDS:g} to 3600")


def _number(text: str, kind: Callable[[str], N], accept: Callable[[N], bool], expected: str) -> N:
    """``text`` read as a ``kind`` that passes ``accept``, else argparse's error saying what was ``expected``."""
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not accept(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {expected}")
    return value


def cluster(args: argparse.Namespace) -> int:
    from headwater.service import cluster as local_cluster

    data_dir = Path(args.data_dir).resolve()
    if args.action == "up":
        from headwater.service.hosts import Inventory

        hosts = Inventory.load(args.hosts) if args.hosts else None
        state = local_cluster.up(data_dir, workers=args.workers, port=args.port, postgres=args.postgres,
                                 cores_per_worker=args.cores_per_worker, driver_batch_rows=args.driver_batch_rows,
                                 hosts=hosts)
        print(f"headwater cluster on {data_dir}:\n  master   {state['master']}  (user admin, password in "
              f"{data_dir / 'cluster' / 'admin-password'} unless HEADWATER_ADMIN_PASSWORD is set)\n"
              + "".join(f"  standby  {url}\n" for url in state.get("masters", [])[1:]) +
              f"  workers  {' '.join(state['workers'])}\n  spark    {state['spark_master']}\n"
              f"  metadata {state['metadata'] or 'SQLite in the data directory'}\n  logs     {data_dir / 'cluster' / 'logs'}")
        return 0
    if args.action == "status":
        rows = local_cluster.status(data_dir)
        width = max((len(r["host"]) for r in rows), default=0)
        for r in rows:
            answer = "" if r["answering"] is None else ("answering" if r["answering"] else "NOT answering")
            print(f"{r['name']:<14} {r['host']:<{width}}  pid {r['pid']:<8} "
                  f"{'running' if r['running'] else 'NOT running':<12} {answer}")
        return 0 if all(r["running"] and r["answering"] is not False for r in rows) else 1
    stopped = local_cluster.down(data_dir)
    print(f"headwater cluster on {data_dir}: stopped {stopped} process(es)")
    return 0


class Help(argparse.ArgumentDefaultsHelpFormatter):
    """Each option's default after its help, where it has one worth saying."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False, (), [], argparse.SUPPRESS) or "default" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def add_cluster_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="start, check or stop the whole service on this machine (Spark standalone, "
                                       "workers, master, optionally PostgreSQL)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start the cluster's processes in the background", formatter_class=Help)
    up.add_argument("--data-dir", type=storage_argument, required=True, help="where tables, checkpoints, metadata and the cluster's logs live")
    up.add_argument("--workers", type=positive, default=2, help="Headwater workers to start")
    up.add_argument("--port", type=positive, default=8765, help="the master's port")
    up.add_argument("--postgres", action="store_true", help="keep the metadata in a PostgreSQL server started here")
    up.add_argument("--cores-per-worker", type=positive, default=1, help="Spark executor cores per worker")
    up.add_argument("--driver-batch-rows", type=non_negative, default=None,
                    help="passed to each worker; 0 makes every micro-batch run on Spark's executors")
    up.add_argument("--hosts", default=None, metavar="FILE",
                    help="an inventory (TOML): the address, and optionally the network namespace, each process "
                         "listens on (docs/deployment.md); default: all on 127.0.0.1")
    for name, text in (("status", "each process of the cluster: running, answering (exit code 1 if one is not)"),
                       ("down", "stop every process of the cluster")):
        a = actions.add_parser(name, help=text, formatter_class=Help)
        a.add_argument("--data-dir", type=storage_argument, required=True, help="the data directory the cluster was started on")
    p.set_defaults(func=cluster)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the fields a line carries (an access log's)."""

    FIELDS = ("method", "path", "status", "user", "client", "seconds")

    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": self.formatTime(record), "level": record.levelname, "logger": record.name,
               "message": record.getMessage(), **{k: getattr(record, k) for k in self.FIELDS if hasattr(record, k)}}
        if record.exc_info:
            doc["error"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def configure_logging(level: str, log_format: str = "text") -> None:
    """Headwater's own log lines on stderr, each with its time: an operator lines up a failover with them.
    ``log_format="json"``: one JSON object per line, for a log collector."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("headwater")
    root.addHandler(handler)
    root.setLevel(level.upper())


def add_log_flags(p: argparse.ArgumentParser, *, access: bool) -> None:
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                   help="the least severe log line written (stderr)")
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="log lines as text, or one JSON object per line")
    if access:
        p.add_argument("--access-log", action="store_true",
                       help="log each request: method, path, status, user, client address, seconds")


def serve_master(args: argparse.Namespace) -> int:
    """Serve the API; with PostgreSQL metadata, only while this master holds the leadership (``--standby``: wait
    for it, serving 503 meanwhile)."""
    import uvicorn

    configure_logging(args.log_level, args.log_format)
    os.environ["HEADWATER_SPARK_UI"] = args.spark_ui  # before the in-process worker's driver starts
    served = tls.server_options(args.tls_cert, args.tls_key)  # checked before anything starts
    advertise = advertise_address(args.host, args.advertise_address)
    from headwater.service.server import Switchboard, create_standby_app

    leadership = None
    if args.metadata is not None and args.metadata.startswith(("postgresql", "postgres://")):
        from headwater.service.leader import Leadership

        leadership = Leadership(args.metadata, lease_seconds=args.lease_seconds)
        # a standby never takes the lease as it starts: one started beside the active master would win it as often
        if not args.standby and not leadership.try_acquire():
            leadership.close()
            raise ConfigurationError("another master is active on this metadata store; start this one with "
                                     "--standby to take over when it stops")
    elif args.standby:
        raise ConfigurationError("--standby needs the metadata in PostgreSQL (--metadata postgresql://...), which "
                                 "the masters share")
    serving = ActiveMaster(args, leadership)
    app = Switchboard(create_standby_app(lambda: "it takes over when the active master stops"))
    stop = threading.Event()
    if leadership is None or leadership.held:
        app.inner = serving.start()
        role = "active"
    else:
        threading.Thread(target=_await_leadership, args=(leadership, serving, app, stop, args.lease_seconds),
                         daemon=True, name="headwater-standby").start()
        role = "standby"
    if leadership is not None:
        threading.Thread(target=_watch_leadership, args=(leadership, stop), daemon=True,
                         name="headwater-leadership").start()
    print(f"headwater master ({role}): {args.data_dir} on {tls.scheme(served)}://{url_host(advertise)}:"
          f"{args.port} (API docs at /docs)", flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False, lifespan="off",
                    **served)
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

    def __init__(self, args: argparse.Namespace, leadership: Any = None) -> None:
        self.args = args
        self.leadership = leadership  # with PostgreSQL metadata: every write of the store checks its lease
        self.pool: Any = None
        self.master: Any = None

    def start(self) -> Any:
        from headwater.runtime.embedded import embedded_master
        from headwater.service.auth import Authenticator, LoginLimits
        from headwater.service.doors import HttpLimits
        from headwater.service.server import create_app

        args = self.args
        if args.worker or args.remote_workers:
            from headwater.service.pool import WorkerPool

            self.pool = WorkerPool(args.worker, os.environ.get("HEADWATER_WORKER_SECRET", ""),
                                   heartbeat=args.heartbeat, deadline=args.heartbeat_deadline,
                                   verify=tls.client_context(args.tls_ca))
        self.master = embedded_master(Path(args.data_dir), spark_master=args.spark,
                                      trigger_interval=args.trigger_interval, metadata_url=args.metadata,
                                      worker=self.pool, start_spark=self.pool is None,
                                      directory_lock=self.leadership is None, sql_limits=sql_limits(args),
                                      driver_host=advertise_address(args.host, args.advertise_address),
                                      bind_address=args.host)
        if self.leadership is not None:
            self.leadership.fence(self.master.store)
        if self.pool is not None:  # placements live in the master's store; then the graphs that were running resume
            self.pool.attach(self.master.store, self.master.worker_down)
            self.master.recover()
        auth = Authenticator(self.master.store, LoginLimits(args.login_attempts, args.login_window))
        auth.ensure_admin(os.environ.get("HEADWATER_ADMIN_PASSWORD"), rotate=args.rotate_admin_password)
        secret = os.environ.get("HEADWATER_WORKER_SECRET") if self.pool is not None else None
        app: Any = create_app(self.master, auth, max_body_bytes=args.max_body_mb * 2**20, worker_secret=secret,
                              limits=HttpLimits.from_args(args), leadership=self.leadership,
                              access_log=args.access_log)
        if self.leadership is not None:
            from headwater.service.leader import LeaseGuard

            app = LeaseGuard(app, self.leadership)
        return app

    def close(self) -> None:
        if self.pool is not None:  # no failover while the master shuts down
            self.pool.close()
        if self.master is not None:
            self.master.close()


JOIN_EVERY_S = 2.0


def join_master(http: Any, master: str, me: str, group: str) -> Any:
    """Ask ``master`` once to add this worker (``me``) to its pool; ``http`` signs the request
    (:class:`headwater.service.signing.Signer`). Returns the response."""
    return http.post(f"{master.rstrip('/')}/v1/workers/join", json={"url": me, "group": group}, timeout=5.0)


def _join_masters(masters: list[str], me: str, group: str, secret: str, ca: str | None = None) -> None:
    """Tell the masters, again and again, that this worker is here: whichever is active (or becomes active after
    a failover) adds it to its pool; a standby answers 503 and an unreachable one is skipped."""
    import httpx

    from headwater.service.signing import Signer

    with httpx.Client(auth=Signer(secret), verify=tls.client_context(ca)) as http:
        while True:
            for master in masters:
                with contextlib.suppress(httpx.HTTPError):  # down, or not up yet: the next round tries again
                    join_master(http, master, me, group)
            time.sleep(JOIN_EVERY_S)  # the pace of re-joining (a master that restarted learns of us within it)


def _await_leadership(leadership: Any, serving: ActiveMaster, app: Any, stop: threading.Event,
                      first_wait: float) -> None:
    """A standby: take over once the active master's lock is released, looking first after ``first_wait`` (a
    lease): an active master started at the same moment, slower to start, has taken the lease by then."""
    wait = first_wait
    while not stop.wait(wait):
        wait = LEADERSHIP_POLL_S
        try:
            if leadership.try_acquire():
                log.warning("the active master is gone: this standby takes over")
                app.inner = serving.start()
                print("headwater master: now active", flush=True)
                return
        except Exception:  # the database is unreachable now: keep trying, as standby
            log.exception("standby: could not check the leadership")


def _watch_leadership(leadership: Any, stop: threading.Event) -> None:
    """The active master renews its lease; once it could not (it lapsed while this process was frozen or cut
    off, or another master took it), it stops at once: a standby may be active by now."""
    while not stop.wait(leadership.renew_every):
        if leadership.held and not leadership.renew():
            log.critical("lost the master's lease (fencing token %s): stopping this master", leadership.token)
            os._exit(3)


def serve_worker(args: argparse.Namespace) -> int:
    from headwater.spark import zygote

    zygote.start(args.spark)  # Spark's Python daemon loads the kernels while this process imports and its JVM starts
    from headwater.durations import parse_duration
    from headwater.runtime.worker import Worker
    from headwater.service.doors import HttpLimits
    from headwater.service.worker_http import check_secret, create_worker_app, serve

    configure_logging(args.log_level, args.log_format)
    os.environ["HEADWATER_SPARK_UI"] = args.spark_ui  # before its driver starts
    secret = check_secret(os.environ.get("HEADWATER_WORKER_SECRET"))
    served = tls.server_options(args.tls_cert, args.tls_key)
    tls.client_context(args.tls_ca)  # a bad CA bundle stops the worker now, not in its joining thread
    check_storage(args.data_dir)  # the master's directory, as this host mounts it: refused here, not mid-batch
    advertise = advertise_address(args.host, args.advertise_address)
    worker = Worker(Path(args.data_dir), spark_master=args.spark,
                    trigger_interval=parse_duration(args.trigger_interval, where="--trigger-interval"),
                    driver_batch_rows=args.driver_batch_rows, spark_cores=args.spark_cores,
                    driver_host=advertise, bind_address=args.host, prime_source=True)
    worker.name = f"worker@{url_host(advertise)}:{args.port}"
    # a worker is a Spark driver: start it now, so that a graph placed here (or moved here) starts in seconds
    threading.Thread(target=lambda: worker.spark, name="headwater-spark-start", daemon=True).start()
    me = f"{tls.scheme(served)}://{url_host(advertise)}:{args.port}"  # what the masters call it at
    if args.master:
        threading.Thread(target=_join_masters, args=(args.master, me, args.group, secret, args.tls_ca), daemon=True,
                         name="headwater-join").start()
    try:
        print(f"headwater worker: {args.data_dir} on {me}", flush=True)
        serve(worker, create_worker_app(worker, secret, group=args.group, limits=HttpLimits.from_args(args)),
              host=args.host, port=args.port, log_level=args.log_level, access_log=False, **served)
    finally:
        worker.close()
    return 0


def add_driver_flags(p: argparse.ArgumentParser, *, role: str, port: int) -> None:
    """Where the ``role``'s API listens, and how the Spark driver that runs the queries runs."""
    add_address_flags(p, role=role, port=port)
    p.add_argument("--spark", default="local[*]", type=spark_master,
                   help="the Spark master of the driver that runs the queries: local[*], local[N] or spark://host:port")
    p.add_argument("--trigger-interval", default=TRIGGER_INTERVAL, help="how often Spark runs an idle query (a new commit is seen within ~5 ms)")
    p.add_argument("--spark-ui", choices=["on", "off"], default="on",
                   help="Spark's web UI for this process's driver, on a free port of its advertise address (its "
                        "URL: `headwater workers`)")


def add_worker_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run a stream worker: a Spark driver that runs the queries its master assigns",
                       formatter_class=Help)
    p.add_argument("--data-dir", type=storage_argument, required=True, help="the master's data directory (shared storage)")
    p.add_argument("--group", default="default", help="the compute group this worker belongs to")
    p.add_argument("--master", action="append", default=[],
                   help="a master to join (repeat it for a standby): the worker registers with the active one")
    p.add_argument("--spark-cores", type=positive, default=None,
                   help="on a standalone cluster: the executor cores this worker's Spark driver takes (default: all)")
    p.add_argument("--driver-batch-rows", type=non_negative, default=DRIVER_BATCH_ROWS,
                   help="micro-batches up to this many input rows run in the driver; 0: always as Spark tasks")
    add_driver_flags(p, role="worker", port=8766)
    add_log_flags(p, access=False)
    from headwater.service.doors import add_limit_flags

    add_limit_flags(p, role="worker")
    tls.add_arguments(p)
    p.set_defaults(func=serve_worker)


def add_master_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("master", help="run the stream master: graphs, tables and SQL behind an HTTP API",
                       formatter_class=Help)
    p.add_argument("--data-dir", type=storage_argument, required=True, help="where tables, checkpoints and the metadata live")
    p.add_argument("--metadata", default=None,
                   help="the metadata store: postgresql://user@host:port/db (default: SQLite in the data directory)")
    p.add_argument("--worker", action="append", default=[],
                   help="the URL of a `headwater worker` to run graphs on; repeat it for several (default: a worker "
                        "in this process)")
    p.add_argument("--heartbeat", type=float, default=1.0, help="seconds between a worker's health checks")
    p.add_argument("--heartbeat-deadline", type=float, default=5.0,
                   help="seconds without an answer after which a worker is down and its graphs move")
    add_driver_flags(p, role="master", port=8765)
    p.add_argument("--max-body-mb", type=int, default=512, help="the largest append or warm-up body accepted")
    add_sql_limit_flags(p)
    p.add_argument("--remote-workers", action="store_true",
                   help="run no worker in this process: graphs run on workers that join (headwater worker --master) "
                        "or are named by --worker")
    p.add_argument("--rotate-admin-password", action="store_true",
                   help="set the admin's password to HEADWATER_ADMIN_PASSWORD at this start (its tokens are revoked)")
    p.add_argument("--login-attempts", type=positive, default=10,
                   help="failed logins allowed per user name, and per client address, within --login-window")
    p.add_argument("--login-window", type=float, default=300.0,
                   help="seconds over which failed logins are counted; once over the limit, logins wait that long")
    p.add_argument("--lease-seconds", type=lease_seconds, default=LEASE_SECONDS,
                   help="with PostgreSQL metadata: how long the active master stays leader without renewing its "
                        "lease (renewed every third of it); a frozen or cut-off master loses leadership after it "
                        "and a standby takes over")
    p.add_argument("--standby", action="store_true",
                   help="wait as a standby and take over when the active master on the same --metadata stops "
                        "(it first looks one --lease-seconds after it starts: alone, it is active then)")
    add_log_flags(p, access=True)
    from headwater.service.doors import add_limit_flags

    add_limit_flags(p, role="master")
    tls.add_arguments(p)
    p.set_defaults(func=serve_master)
