"""Headwater: declarative real-time stream graphs compiled to Spark Structured Streaming.

>>> import headwater as hw
>>> hw.col("price") * 2
<expr price * 2>
"""

import importlib as _importlib
import typing as _typing

# Public names, and __version__, are loaded on first use (PEP 562): Spark starts many short-lived Python
# processes that import one Headwater module, and they should not pay for pandas, Numba and SQLAlchemy (nor
# importlib.metadata's 50 ms: each query's streaming-source runner is one of them, on the query's first trigger).
_EXPORTS = {
    "DStream": "headwater.api.graph",
    "StreamGraph": "headwater.api.graph",
    "Session": "headwater.api.session",
    "SqlResult": "headwater.api.session",
    "SqlLimits": "headwater.sql.limits",
    "connect": "headwater.api.connect",
    "AuthenticationError": "headwater.errors",
    "CatalogError": "headwater.errors",
    "NameTakenError": "headwater.errors",
    "BusyError": "headwater.errors",
    "ConfigurationError": "headwater.errors",
    "CaughtUpTimeout": "headwater.errors",
    "ExecutionError": "headwater.errors",
    "GraphDefinitionError": "headwater.errors",
    "HeadwaterError": "headwater.errors",
    "SchemaError": "headwater.errors",
    "SqlError": "headwater.errors",
    "RetentionError": "headwater.errors",
    "RequestError": "headwater.errors",
    "PermissionDenied": "headwater.errors",
    "SequenceError": "headwater.errors",
    "StorageFullError": "headwater.errors",
    "DataDirectoryInUseError": "headwater.errors",
    "StreamGraphStateError": "headwater.errors",
    "UnknownFunctionError": "headwater.errors",
    "col": "headwater.expr",
    "lit": "headwater.expr",
    "state": "headwater.functions",
    "Schema": "headwater.types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    if name == "__version__":
        import importlib.metadata

        try:
            version = importlib.metadata.version("headwater")
        except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
            version = "0+unknown"
        globals()[name] = version
        return version
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'headwater' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*_EXPORTS, "__version__"])


if _typing.TYPE_CHECKING:
    from headwater.api.connect import connect
    from headwater.api.graph import DStream, StreamGraph
    from headwater.api.session import Session, SqlResult
    from headwater.errors import (
        AuthenticationError,
        BusyError,
        CatalogError,
        CaughtUpTimeout,
        ConfigurationError,
        DataDirectoryInUseError,
        ExecutionError,
        GraphDefinitionError,
        HeadwaterError,
        NameTakenError,
        RequestError,
        RetentionError,
        SchemaError,
        SequenceError,
        SqlError,
        StorageFullError,
        StreamGraphStateError,
        UnknownFunctionError,
    )
    from headwater.expr import col, lit
    from headwater.functions import state
    from headwater.sql.limits import SqlLimits
    from headwater.types import Schema
