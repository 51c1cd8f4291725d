"""Addresses of the service's processes: what each listens on, what the others use to reach it, and the
inventory ``headwater cluster up --hosts`` reads.

An address is an IP literal (checked with :mod:`ipaddress`) or a host name that resolves. A process listens on
its ``--host`` and is reached at its advertise address, which is the ``--host`` itself unless that is a
wildcard (``0.0.0.0``, ``::``), which no other process can use.

>>> advertise_address("10.0.0.11", None), advertise_address("0.0.0.0", "10.0.0.11")
('10.0.0.11', '10.0.0.11')
>>> url_host("::1"), url_host("10.0.0.11")
('[::1]', '10.0.0.11')
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import socket
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headwater.errors import ConfigurationError, clip

LOOPBACK = "127.0.0.1"


def check_address(text: str, *, what: str = "address", wildcard: bool = True) -> str:
    """``text`` as an address to listen on or reach: an IP literal (normalised) or a host name that resolves.
    ``wildcard=False`` refuses ``0.0.0.0`` and ``::``, which name no host."""
    ip = _ip(text)
    if ip is None:
        try:
            socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, ValueError) as exc:
            raise ConfigurationError(f"{what} {clip(text)} is neither an IP address nor a host name that resolves "
                                     f"({exc}); e.g. 10.0.0.11 or db.example.internal") from None
        return text
    if ip.is_unspecified and not wildcard:
        raise ConfigurationError(f"{what} {text} is a wildcard that names no host: give the address other "
                                 "processes reach this one at, e.g. 10.0.0.11")
    return str(ip)


def bind_address(text: str) -> str:
    """argparse type of ``--host``."""
    try:
        return check_address(text, what="--host")
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def advertise_address(host: str, advertise: str | None) -> str:
    """The address other processes reach this one at: ``advertise`` if given, else ``host`` unless it is a
    wildcard."""
    if advertise is not None:
        return check_address(advertise, what="--advertise-address", wildcard=False)
    if is_wildcard(host):
        raise ConfigurationError(f"--host {host} listens on every address, so it does not say which one other "
                                 "processes reach this one at: add --advertise-address, e.g. 10.0.0.11")
    return host


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(address)
    except ValueError:
        return None  # a host name


def is_wildcard(address: str) -> bool:
    ip = _ip(address)
    return ip is not None and ip.is_unspecified


def is_loopback(address: str) -> bool:
    ip = _ip(address)
    return ip is not None and ip.is_loopback


def url_host(address: str) -> str:
    """``address`` as the host part of a URL (an IPv6 literal in brackets)."""
    ip = _ip(address)
    return f"[{address}]" if ip is not None and ip.version == 6 else address


def add_address_flags(p: argparse.ArgumentParser, *, role: str, port: int) -> None:
    """``--host``, ``--advertise-address`` and ``--port`` of a listening ``role``."""
    p.add_argument("--host", type=bind_address, default=LOOPBACK,
                   help=f"the address the {role}'s API and its Spark driver listen on (0.0.0.0 or :: for every one)")
    p.add_argument("--advertise-address", default=None,
                   help="the address other processes reach this one at (its API, its Spark driver); default: "
                        "--host, which must then not be a wildcard")
    p.add_argument("--port", type=int, default=port, help=f"the port the {role}'s API listens on")


NETNS_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclass(frozen=True)
class Host:
    """A machine of the inventory: its address and, for hosts that are network namespaces of this machine,
    the namespace its processes start in (``ip netns exec``)."""

    name: str
    address: str
    netns: str | None = None

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run on this host: as is, or inside its network namespace (``ip netns exec`` execs it, so the
        process keeps the pid it is started with)."""
        return ["ip", "netns", "exec", self.netns, *argv] if self.netns else argv

    def free_port(self) -> int:
        """A TCP port of this host's address that nothing listens on now."""
        if self.netns is None:
            return free_port(self.address)
        probe = f"from headwater.service.hosts import free_port; print(free_port({self.address!r}))"
        done = subprocess.run(self.command([sys.executable, "-c", probe]), capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode != 0:
            raise ConfigurationError(f"host {self.name}: cannot listen on {self.address} in network namespace "
                                     f"{self.netns}: {clip(done.stderr.strip(), 500)}")
        return int(done.stdout)


def free_port(address: str = LOOPBACK) -> int:
    """A TCP port of ``address`` (of this network namespace) that nothing listens on now."""
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


ROLES = {"master": False, "standby": False, "postgres": False, "spark-master": False, "workers": True,
         "spark-workers": True}  # role -> whether it takes a list of hosts


@dataclass(frozen=True)
class Inventory:
    """Where ``cluster up`` starts each process: one host per single process, a list of hosts for workers
    (spread over them in turn) and Spark workers (one on each). Every role but ``standby`` defaults to the
    master's host; without ``standby`` no standby master is started (one needs PostgreSQL: ``--postgres``)."""

    master: Host
    postgres: Host
    spark_master: Host
    workers: tuple[Host, ...]
    spark_workers: tuple[Host, ...]
    standby: Host | None = None

    @classmethod
    def local(cls, address: str = LOOPBACK) -> Inventory:
        """Every process on ``address`` of this machine (what ``cluster up`` does without ``--hosts``)."""
        here = Host("local", address)
        return cls(here, here, here, (here,), (here,))

    def worker_host(self, i: int) -> Host:
        return self.workers[i % len(self.workers)]

    @classmethod
    def load(cls, path: Path) -> Inventory:
        """Read an inventory file (TOML)::

            [hosts]
            db = "10.77.0.1"
            h2 = { address = "10.77.0.2", netns = "hw-demo-2" }   # a network namespace of this machine

            [roles]
            master = "h2"
            standby = "db"                                       # optional: a standby master
            postgres = "db"
            spark-master = "h2"
            workers = ["h2", "db"]
            spark-workers = ["h2", "db"]
        """
        try:
            doc = tomllib.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(f"--hosts {clip(str(path))}: cannot read the inventory: {exc}") from None
        return cls.parse(doc, where=f"--hosts {clip(str(path))}")

    @classmethod
    def parse(cls, doc: dict[str, Any], *, where: str = "the inventory") -> Inventory:
        extra = set(doc) - {"hosts", "roles"}
        if extra or not isinstance(doc.get("hosts"), dict) or not isinstance(doc.get("roles"), dict):
            raise ConfigurationError(f"{where}: expected the tables [hosts] (name = address) and [roles] (role = "
                                     f"host name){f', not {sorted(extra)}' if extra else ''}")
        hosts = {name: _host(name, value, where) for name, value in doc["hosts"].items()}
        roles = doc["roles"]
        unknown = set(roles) - set(ROLES)
        if unknown:
            raise ConfigurationError(f"{where}: unknown role(s) {sorted(unknown)}; the roles are {sorted(ROLES)}")
        if "master" not in roles:
            raise ConfigurationError(f"{where}: [roles] needs master = \"<host name>\" (the other roles default "
                                     "to its host)")

        def pick(role: str) -> tuple[Host, ...]:
            value = roles.get(role, roles["master"])
            names = value if ROLES[role] and isinstance(value, list) else [value]
            if not names or not all(isinstance(n, str) for n in names):
                raise ConfigurationError(f"{where}: role {role} = {clip(value)}: expected "
                                         f"{'a list of host names' if ROLES[role] else 'one host name'}")
            missing = [n for n in names if n not in hosts]
            if missing:
                raise ConfigurationError(f"{where}: role {role} names {missing}, which [hosts] does not list; "
                                         f"the hosts are {sorted(hosts)}")
            return tuple(hosts[n] for n in names)

        return cls(pick("master")[0], pick("postgres")[0], pick("spark-master")[0], pick("workers"),
                   pick("spark-workers"), pick("standby")[0] if "standby" in roles else None)


def _host(name: str, value: Any, where: str) -> Host:
    if isinstance(value, str):
        value = {"address": value}
    if not isinstance(value, dict) or not isinstance(value.get("address"), str) or set(value) - {"address", "netns"}:
        raise ConfigurationError(f"{where}: host {clip(name)} = {clip(value)}: expected an address, or "
                                 "{ address = \"10.77.0.2\", netns = \"<network namespace>\" }")
    netns = value.get("netns")
    if netns is not None and not (isinstance(netns, str) and NETNS_NAME.fullmatch(netns)):
        raise ConfigurationError(f"{where}: host {clip(name)}: netns {clip(netns)} is not a network namespace "
                                 "name (letters, digits, _ . -)")
    if netns is not None and not Path("/run/netns", netns).exists():
        raise ConfigurationError(f"{where}: host {clip(name)}: no network namespace {netns} (`ip netns list`)")
    address = check_address(value["address"], what=f"{where}: host {name}'s address", wildcard=False)
    return Host(name, address, netns)
