"""A plan's Python functions as bytes the master keeps but never loads.

A ``map(fn)`` (or ``generic_state_iterate(func=fn)``) travels in the plan document as a cloudpickle under a
name. Unpickling runs code, so only the process that runs the graph does it (a worker, its Spark Python
workers, the in-process runner); the master, which every logged-in caller reaches, holds each function as an
:class:`OpaqueCallable`: its name and bytes, written back unchanged when the plan is stored or sent, never
called.

>>> fn = OpaqueCallable("add_one", b"\\x80\\x05...")
>>> fn
<function add_one (not loaded; sha256 15fe347a2f4b...)>
>>> try:
...     fn(1)
... except ExecutionError as exc:
...     print(str(exc).split(":")[0])
function 'add_one' of the plan was not loaded in this process
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from headwater.errors import ExecutionError, clip


@dataclass(frozen=True)
class OpaqueCallable:
    """A plan's user function as stored: its name in the document and its pickled bytes (never unpickled here)."""

    name: str
    data: bytes = field(repr=False)

    @property
    def digest(self) -> str:
        """SHA-256 of the pickled bytes, hex (what logs and errors show instead of the bytes)."""
        return hashlib.sha256(self.data).hexdigest()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ExecutionError(
            f"function {clip(self.name)} of the plan was not loaded in this process: a plan's Python functions "
            "run only where the graph runs (a worker), never on the master; load the document there with "
            "from_json(document, load_callables=True)")

    def __repr__(self) -> str:
        return f"<function {self.name} (not loaded; sha256 {self.digest[:12]}...)>"
