"""TLS for the service's HTTP endpoints: the server's certificate and key, and the clients' trust.

``headwater master`` and ``headwater worker`` serve HTTPS when given ``--tls-cert`` and ``--tls-key``
(``HEADWATER_TLS_CERT`` / ``HEADWATER_TLS_KEY``). Every client of the service (a remote session, the master
reaching its workers, a worker joining its master) checks the server's certificate against the CA bundle of
``--tls-ca`` / ``HEADWATER_TLS_CA``, or the system's trust store when none is given.

>>> server_options(None, None)
{}
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.errors import ConfigurationError, clip

if TYPE_CHECKING:
    import httpx

CERT_ENV, KEY_ENV, CA_ENV = "HEADWATER_TLS_CERT", "HEADWATER_TLS_KEY", "HEADWATER_TLS_CA"


def server_options(cert: str | None, key: str | None) -> dict[str, Any]:
    """uvicorn's TLS arguments for ``cert`` and ``key`` (both or neither), checked to load."""
    if not cert and not key:
        return {}
    if not cert or not key:
        raise ConfigurationError(f"TLS needs both a certificate and its key: got --tls-cert {clip(cert)} and "
                                 f"--tls-key {clip(key)} ({CERT_ENV}, {KEY_ENV})")
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"cannot load the TLS certificate {clip(cert)} with the key {clip(key)}: {exc}; "
                                 "give a PEM certificate (chain) and its unencrypted PEM private key") from None
    return {"ssl_certfile": cert, "ssl_keyfile": key}


def client_context(ca: str | None = None) -> ssl.SSLContext:
    """A context that checks servers against ``ca`` (a PEM bundle), else ``HEADWATER_TLS_CA``, else the system's
    trust store."""
    ca = ca or os.environ.get(CA_ENV) or None
    if ca is not None and not Path(ca).is_file():
        raise ConfigurationError(f"the TLS CA bundle {clip(ca)} ({CA_ENV} or --tls-ca) is not a file: give the PEM "
                                 "file of the certificate authority (or the self-signed certificate) to trust")
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"cannot load the TLS CA bundle {clip(ca)}: {exc}") from None


# A connection cut off mid-call (a partition: packets vanish, nothing is reset) is noticed by TCP keepalive probes
# after ~11 s of silence (5 s idle, then 3 unanswered probes 2 s apart), instead of at the call's own timeout:
# a long poll (wait_until_caught_up) waits up to its timeout + 30 s. A live peer's kernel answers the probes.
KEEPALIVE = ((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1), (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 5),
             (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 2), (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3))


def client_transport(verify: ssl.SSLContext) -> httpx.HTTPTransport:
    """The transport of Headwater's HTTP clients (client → master, master → worker): ``verify``, keepalive probes."""
    import httpx  # the service extra's: `headwater master` says so when it is missing, before this runs

    return httpx.HTTPTransport(verify=verify, socket_options=list(KEEPALIVE))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--tls-cert``, ``--tls-key`` and ``--tls-ca``, each defaulting to its environment variable."""
    parser.add_argument("--tls-cert", default=os.environ.get(CERT_ENV),
                        help=f"serve HTTPS with this PEM certificate (with --tls-key; env {CERT_ENV})")
    parser.add_argument("--tls-key", default=os.environ.get(KEY_ENV),
                        help=f"the PEM private key of --tls-cert (env {KEY_ENV})")
    parser.add_argument("--tls-ca", default=os.environ.get(CA_ENV),
                        help=f"the CA bundle that https:// masters and workers are checked against (env {CA_ENV}; "
                             "default: the system's trust store)")


def scheme(options: dict[str, Any]) -> str:
    return "https" if options else "http"
