"""One exception hierarchy for Headwater.

Input errors also subclass the matching builtin so callers can catch either:
``except ValueError`` works as well as ``except hw.GraphDefinitionError``.
Messages follow one template: what, where, got, expected, how to fix.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

MAX_MESSAGE_CHARS = 2_000


class HeadwaterError(Exception):
    """Base class of every error Headwater raises on purpose.

    Its message is bounded (:data:`MAX_MESSAGE_CHARS`, cut in the middle): an error that echoes a
    huge input stays readable. Sites that echo user input cut it further with :func:`clip`.
    """

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(shorten(message, MAX_MESSAGE_CHARS) if isinstance(message, str) else message, *args)


class ConfigurationError(HeadwaterError, ValueError):
    """A setting or a path given to Headwater cannot be used."""


class GraphDefinitionError(HeadwaterError, ValueError):
    """The stream graph, a node or one of its parameters is invalid."""


class SchemaError(HeadwaterError, TypeError):
    """Data or an expression does not match the schema it must follow."""


class UnknownFunctionError(GraphDefinitionError):
    """A metric calls a function Headwater does not know."""


class CatalogError(HeadwaterError, KeyError):
    """A name is missing from, or already taken in, the catalog."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class NameTakenError(CatalogError):
    """A name is already taken in the catalog, or still in use (HTTP 409)."""


class StreamGraphStateError(HeadwaterError, RuntimeError):
    """The graph is not in a state that allows the requested operation."""


class ExecutionError(HeadwaterError, RuntimeError):
    """A running stream task failed."""


class WorkerUnavailableError(ExecutionError):
    """A worker process did not answer (dead, or cut off): its graphs are moved, not failed."""


class CaughtUpTimeout(HeadwaterError, TimeoutError):
    """The graph did not process all appended data before the deadline."""


class SequenceError(HeadwaterError, ValueError):
    """An idempotent append's sequence number is older than the client's last committed one."""


class DataDirectoryInUseError(HeadwaterError, RuntimeError):
    """Another session (in this or another process) holds the data directory."""


class SqlError(HeadwaterError, ValueError):
    """``session.sql`` refused a statement or could not run it."""


class SqlCancelled(SqlError):
    """A query hit one of its limits (rows, result bytes, time) and was cancelled."""


class RequestError(HeadwaterError, ValueError):
    """A request to the master's HTTP API is malformed (a field missing or of the wrong type)."""


class AuthenticationError(HeadwaterError, PermissionError):
    """The master refused the user, password or token (HTTP 401)."""


class PermissionDenied(HeadwaterError, PermissionError):
    """The caller lacks the privilege an operation needs (HTTP 403); the refusal is in the audit log."""


class RetentionError(HeadwaterError, LookupError):
    """A reader asked for a stream table version that the table's retention has removed."""


class StorageFullError(HeadwaterError, OSError):
    """The data directory's file system has no room for a write: an append was refused, nothing of it stored.

    An ``OSError`` with ``errno`` ENOSPC as well, so code written for the operating system's error still
    catches it (see ``headwater.storage.disk_space``).
    """

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(message, *args)
        self.errno = errno.ENOSPC


class LeadershipLost(HeadwaterError, RuntimeError):
    """This master's lease on the metadata store ran out or was taken over: it may write nothing any more."""


class BusyError(HeadwaterError, RuntimeError):
    """A limit on calls in progress at once is reached: retry once one ends (HTTP 429)."""


# What each error means over HTTP: the first class in an error's MRO found here (HeadwaterError: 500).
HTTP_STATUS: dict[type[HeadwaterError], int] = {
    AuthenticationError: 401, PermissionDenied: 403,
    NameTakenError: 409, CatalogError: 404,
    StreamGraphStateError: 409, SequenceError: 409, DataDirectoryInUseError: 409,
    RequestError: 422, SchemaError: 422, GraphDefinitionError: 422, ConfigurationError: 422, SqlError: 422,
    RetentionError: 422,
    BusyError: 429,
    CaughtUpTimeout: 504,
    StorageFullError: 507,
    WorkerUnavailableError: 503, LeadershipLost: 503,
    ExecutionError: 500,
}


# the modules each optional part of Headwater needs (pyproject.toml's extras)
EXTRAS = {"service": frozenset({"fastapi", "starlette", "uvicorn", "httpx", "psycopg", "psutil", "jinja2"}),
          "demo": frozenset({"tqdm"})}


@contextlib.contextmanager
def extra_needed(extra: str, what: str) -> Iterator[None]:
    """Turn the missing import of an extra's module into an error that says what to install.

    >>> with extra_needed("demo", "the demo"):
    ...     raise ModuleNotFoundError("No module named 'tqdm'", name="tqdm")
    Traceback (most recent call last):
    headwater.errors.ConfigurationError: the demo needs Headwater's demo extra (tqdm is missing): pip install 'headwater[demo]'
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in EXTRAS[extra]:
            raise
        raise ConfigurationError(f"{what} needs Headwater's {extra} extra ({exc.name} is missing): pip install "
                                 f"'headwater[{extra}]'") from None


def http_status(error: HeadwaterError) -> int:
    """The HTTP status that answers ``error``.

    >>> http_status(CatalogError("x")), http_status(NameTakenError("x")), http_status(CaughtUpTimeout("x"))
    (404, 409, 504)
    """
    return next((HTTP_STATUS[c] for c in type(error).__mro__ if c in HTTP_STATUS), 500)


def error_class(name: object) -> type[HeadwaterError] | None:
    """The Headwater exception class called ``name`` (an error sent over the wire by its class name), or None.

    >>> error_class("SqlError").__name__, error_class("os.system")
    ('SqlError', None)
    """
    cls = globals().get(name) if isinstance(name, str) else None
    return cls if isinstance(cls, type) and issubclass(cls, HeadwaterError) else None


def clip(value: object, limit: int = 200) -> str:
    """``repr`` of ``value`` cut to about ``limit`` characters, for echoing user input in a message.

    >>> clip("x" * 1000, 40)
    "'xxxxxxxxx…(1002 chars)…xxxxxxxxx'"
    """
    return shorten(repr(value), limit)


def shorten(text: str, limit: int = 200) -> str:
    """``text`` cut in the middle to about ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    keep = max(limit - 20, 10)
    return f"{text[: keep // 2]}…({len(text)} chars)…{text[-(keep - keep // 2):]}"
