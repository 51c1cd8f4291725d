"""Several worker processes behind the master's one worker port: placement, heartbeats, failover, fencing.

Each graph runs on one worker (all of its subgraphs, so siblings stay together). ``StartGraph`` places it:
on the worker it already has if that one is alive, otherwise by :func:`headwater.service.placement.place`
over the live workers' reported load and the graphs already on them; the
placement and its epoch (one more each time) go to the metadata store, and the epoch into the graph's
checkpoint directory, which every worker sees. A worker checks that file before each commit
(``headwater.dataplane.fence``), so one that was only frozen or cut off, and comes back after its
graphs moved, stops instead of committing. The heartbeat thread asks each worker's ``/v1/health`` every
``heartbeat`` seconds; a worker silent for ``deadline`` seconds, or whose port refused two heartbeats in a row,
is down (Orca's NODE_DOWN), and the master's
``on_down`` callback restarts its graphs elsewhere from their checkpoints.

A thread per worker also asks it, in one long request at a time, for its next commit (:class:`AwaitCommit`), and
fires this process's :data:`~headwater.runtime.wakeup.TABLE_COMMITS` when one lands: a wait for a graph on a
worker process (``wait_until_caught_up``) then looks again at once, as it does for the master's in-process worker,
rather than at its next look (up to 100 ms later).
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from headwater.dataplane.files import replacing
from headwater.errors import ExecutionError, WorkerUnavailableError
from headwater.runtime.protocol import (
    AwaitCommit,
    Health,
    IsRunning,
    Message,
    RunSql,
    Shutdown,
    StartGraph,
    StopGraph,
    TaskStatus,
)
from headwater.runtime.wakeup import TABLE_COMMITS
from headwater.runtime.worker import EPOCH_FILE
from headwater.service.placement import DEFAULT_GROUP, GraphDemand, WorkerLoad, place
from headwater.service.worker_http import HttpWorkerPort
from headwater.storage.metadata import MetadataStore

log = logging.getLogger(__name__)

# Consecutive heartbeats refused (the worker's port is closed): its process is gone, and the graphs it ran with
# it, so waiting out the deadline would only delay their move. A frozen or unreachable worker refuses nothing:
# for it the deadline decides.
REFUSALS_FOR_DOWN = 2
COMMIT_POLL_S = 30.0  # how long one request for a worker's next commit waits (it answers at once when one lands)


class Probe(enum.Enum):
    OK = "ok"
    REFUSED = "refused"  # the connection was refused: no process listens on the worker's port
    SILENT = "silent"  # no answer in time, or not a worker's answer


class WorkerPool:
    """A :class:`~headwater.runtime.protocol.WorkerPort` over worker processes at ``urls``."""

    stops_with_master = False
    name = "worker-pool"

    def __init__(self, urls: Sequence[str], secret: str, *, heartbeat: float = 1.0, deadline: float = 5.0,
                 verify: ssl.SSLContext | None = None) -> None:
        from headwater.service.tls import client_context

        self.secret = secret
        self._verify = verify if verify is not None else client_context()  # https:// workers' certificates
        self.ports = {url.rstrip("/"): HttpWorkerPort(url, secret, verify=self._verify) for url in urls}
        self.heartbeat, self.deadline = heartbeat, deadline
        self.alive = dict.fromkeys(self.ports, True)
        self.loads = {url: WorkerLoad(url) for url in self.ports}  # group and load from the last heartbeat
        self._complexity: dict[str, int] = {}  # graph -> operators, for graphs placed by this master
        self._last_ok = dict.fromkeys(self.ports, time.monotonic())
        self._store: MetadataStore | None = None
        self._on_down: Callable[[str, list[str]], None] = lambda url, graphs: None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def attach(self, store: MetadataStore, on_down: Callable[[str, list[str]], None]) -> None:
        """Keep placements in ``store``; call ``on_down(worker URL, its graphs)`` when a worker dies. Starts the
        heartbeats."""
        self._store, self._on_down = store, on_down
        for url, group in store.joined_workers():  # workers that joined an earlier (or the other) master
            self.add(url, group)
        for url in list(self.ports):  # groups and loads known before the first placement
            self._probe(url)
            self._watch(url)
        self._thread = threading.Thread(target=self._beat, name="headwater-heartbeats", daemon=True)
        self._thread.start()

    def add(self, url: str, group: str = DEFAULT_GROUP) -> bool:
        """A worker that joins by itself (``headwater worker --master``); kept in the store for the next master.
        Returns True if it is new here."""
        url = url.rstrip("/")
        with self._lock:
            if url in self.ports:
                return False
            self.ports[url] = HttpWorkerPort(url, self.secret, verify=self._verify)
            self.loads[url] = WorkerLoad(url, group)
            self._last_ok[url] = time.monotonic()
            self.alive[url] = True
        if self._store is not None:
            self._store.add_worker(url, group)
        if self._thread is not None:  # attach() watches the workers known by then
            self._watch(url)
        log.warning("worker %s (group %s) joined", url, group)
        return True

    def heartbeats(self) -> list[dict[str, Any]]:
        """Each worker's last heartbeat, from memory (for the master's health: no database, no request)."""
        now = time.monotonic()
        return [{"url": url, "alive": self.alive[url], "heartbeat_age_s": round(now - self._last_ok[url], 3)}
                for url in sorted(self.ports)]

    def describe(self) -> list[dict[str, Any]]:
        """One row per worker, from the last heartbeats: url, group, alive, spark, cpu, memory, heartbeat_age_s, graphs."""
        placed = self.placements() if self._store is not None else {}
        now = time.monotonic()
        return [{"url": url, "group": self.loads[url].group, "alive": self.alive[url],
                 "spark": "ready" if self.loads[url].ready else "starting", "cpu": self.loads[url].cpu,
                 "memory": self.loads[url].memory, "heartbeat_age_s": round(now - self._last_ok[url], 3),
                 "graphs": ",".join(sorted(g for g, (w, _) in placed.items() if w == url)),
                 "spark_ui": self.loads[url].spark_ui}
                for url in sorted(self.ports)]

    # -- placement ------------------------------------------------------------------------------------
    def placements(self) -> dict[str, tuple[str, int]]:
        assert self._store is not None, "attach() the pool to the master's store first"
        return self._store.placements()

    def _choose(self, message: StartGraph) -> str:
        """The graph's worker if it is alive; otherwise the best live worker by load (``placement.place``)."""
        placed = self.placements()
        current = placed.get(message.fqn)
        if current is not None and self.alive.get(current[0]) and self.loads[current[0]].group == message.group:
            return current[0]
        already = {url: 0.0 for url in self.ports}
        for graph, (url, _) in placed.items():
            if graph != message.fqn and url in already:
                already[url] += self._complexity.get(graph, 1)
        complexity = _complexity(message.plan)
        self._complexity[message.fqn] = complexity
        loads = [dataclasses.replace(self.loads[url], alive=self.alive[url]) for url in self.ports]
        return place([GraphDemand(message.fqn, complexity, message.group)], loads, already)[message.fqn]

    def request(self, message: Message) -> Any:
        if isinstance(message, StartGraph):
            with self._lock:
                url = self._choose(message)
                assert self._store is not None
                epoch = self._store.place(message.fqn, url)
                _write_epoch(Path(message.checkpoints) / EPOCH_FILE, epoch)
            return self.ports[url].request(dataclasses.replace(message, epoch=epoch))
        if isinstance(message, RunSql):
            live = [url for url in list(self.ports) if self.alive[url]]
            if not live:
                raise WorkerUnavailableError("no live worker to run the query on")
            return self.ports[live[0]].request(message)
        if isinstance(message, Shutdown):
            return None  # worker processes outlive the master
        if isinstance(message, Health):  # each graph as its current worker sees it (a fenced one is not asked)
            where, report = self.placements(), {}
            for url in [u for u in list(self.ports) if self.alive[u]]:
                try:
                    answer = self.ports[url].request(message)
                except ExecutionError:  # unreachable now: the heartbeats decide whether it is down
                    continue
                report.update({g: h for g, h in answer.items() if where.get(g, ("", 0))[0] == url})
            return report
        fqn = getattr(message, "fqn", None)
        placed = self.placements().get(fqn) if fqn is not None else None
        if placed is None or not self.alive.get(placed[0]):
            if isinstance(message, IsRunning):
                return False
            if isinstance(message, StopGraph):
                return None
            if isinstance(message, TaskStatus):
                return []
            raise WorkerUnavailableError(f"stream graph {fqn} is not running on a live worker"
                                 + (f" (its worker {placed[0]} is down)" if placed else ""))
        return self.ports[placed[0]].request(message)

    # -- heartbeats -----------------------------------------------------------------------------------
    def _probe(self, url: str) -> Probe:
        """Ask one worker how it is; record its group and load."""
        try:
            # a worker busy starting Spark answers slowly: only the deadline decides that it is down
            answer = httpx.get(f"{url}/v1/health", timeout=max(self.deadline / 2, 1.0), verify=self._verify)
            if answer.status_code != 200:
                return Probe.SILENT
            doc = answer.json()
            ui = doc.get("spark_ui")
            self.loads[url] = WorkerLoad(url, str(doc.get("group", DEFAULT_GROUP)), float(doc.get("cpu", 0.0)),
                                         float(doc.get("memory", 0.0)), ready=doc.get("spark", "ready") == "ready",
                                         spark_ui=ui if isinstance(ui, str) and ui.startswith("http") else None)
            return Probe.OK
        except httpx.ConnectError as exc:
            return Probe.REFUSED if _refused(exc) else Probe.SILENT
        except (httpx.HTTPError, ValueError, TypeError):
            return Probe.SILENT

    def _beat(self) -> None:
        refusals = dict.fromkeys(self.ports, 0)
        while not self._stop.wait(self.heartbeat):
            for url in list(self.ports):  # workers may join meanwhile
                now = time.monotonic()
                probe = self._probe(url)
                refusals[url] = refusals.get(url, 0) + 1 if probe is Probe.REFUSED else 0
                if probe is Probe.OK:
                    if not self.alive[url]:
                        log.warning("worker %s answers again; the graphs moved away from it stay where they are", url)
                    self._last_ok[url], self.alive[url] = now, True
                    continue
                silent = now - self._last_ok[url] > self.deadline
                if self.alive[url] and (silent or refusals[url] >= REFUSALS_FOR_DOWN):
                    self.alive[url] = False
                    graphs = sorted(g for g, (w, _) in self.placements().items() if w == url)
                    why = (f"missed its heartbeats for {self.deadline:.0f} s" if silent else
                           f"refused {refusals[url]} heartbeats in a row: nothing listens on its port")
                    log.error("worker %s %s (NODE_DOWN); moving %s", url, why, ", ".join(graphs) or "nothing")
                    # moving takes as long as starting the graphs elsewhere: heartbeats go on meanwhile
                    threading.Thread(target=self._move, args=(url, graphs), name=f"headwater-failover-{url}",
                                     daemon=True).start()

    def _watch(self, url: str) -> None:
        threading.Thread(target=self._watch_commits, args=(url,), name=f"headwater-commits-{url}",
                         daemon=True).start()

    def _watch_commits(self, url: str) -> None:
        """Until the pool closes: ask the worker at ``url`` for its next commit, and wake this process's waits
        when one lands. A worker that cannot be reached is asked again at the next heartbeat; one that does not
        know the question (an older version) every :data:`COMMIT_POLL_S`."""
        since: int | None = None
        while not self._stop.is_set():
            try:
                beats = int(self.ports[url].request(AwaitCommit(since, COMMIT_POLL_S)))
            except WorkerUnavailableError:
                since = None  # it may come back as a new process, counting from 0
                self._stop.wait(self.heartbeat)
                continue
            except Exception:  # refused (an older worker), or a port closed as the pool closes: slower waits only
                since = None
                self._stop.wait(COMMIT_POLL_S)
                continue
            if since is not None and beats != since:
                TABLE_COMMITS.fire()
            since = beats

    def _move(self, url: str, graphs: list[str]) -> None:
        try:
            self._on_down(url, graphs)
        except Exception:  # each graph's status and reason say what happened to it
            log.exception("moving the graphs of worker %s failed", url)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for port in self.ports.values():
            port.close()


def _refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` comes from a refused connection (httpx wraps the OS error in its own ones)."""
    while exc is not None:
        if isinstance(exc, ConnectionRefusedError):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _complexity(document: str) -> int:
    """A graph's operators (engines and maps), from its plan document."""
    from headwater.plan.document import from_json

    physical = from_json(document, load_callables=False)[1]
    return max(1, sum(len(sg.chain) for sg in physical.subgraphs)) if physical is not None else 1


def _write_epoch(file: Path, epoch: int) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    with replacing(file) as tmp:
        tmp.write_text(str(epoch))
