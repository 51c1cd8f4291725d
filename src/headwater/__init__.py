"""Headwater: declarative real-time stream graphs compiled to Spark Structured Streaming.

>>> import headwater as hw
>>> hw.col("price") * 2
<expr price * 2>
"""

from __future__ import annotations

from headwater.api.graph import DStream, StreamGraph
from headwater.api.session import Session, SqlResult, connect
from headwater.errors import (
    CatalogError,
    CaughtUpTimeout,
    ExecutionError,
    GraphDefinitionError,
    HeadwaterError,
    SchemaError,
    StreamGraphStateError,
    UnknownFunctionError,
)
from headwater.expr import col, lit
from headwater.functions import state
from headwater.types import Schema

__version__ = "0.1.0"

__all__ = [
    "CatalogError",
    "CaughtUpTimeout",
    "DStream",
    "ExecutionError",
    "GraphDefinitionError",
    "HeadwaterError",
    "Schema",
    "SchemaError",
    "Session",
    "SqlResult",
    "StreamGraph",
    "StreamGraphStateError",
    "UnknownFunctionError",
    "col",
    "connect",
    "lit",
    "state",
]
