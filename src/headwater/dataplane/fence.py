"""The placement fence: a graph's checkpoint directory names the epoch of its current placement.

The master writes ``<checkpoints>/epoch`` each time it places a graph (``headwater.service.pool``). A
worker started for an older epoch — one that was frozen or cut off while its graph moved — checks the file
before each commit and before each engine state snapshot it saves, and stops instead of writing.
"""

from __future__ import annotations

from pathlib import Path


class FencedError(RuntimeError):
    """This worker's placement of the graph is no longer the current one."""


def check_fence(file: Path | str, epoch: int) -> None:
    """Raise :class:`FencedError` unless ``file`` holds ``epoch``.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "epoch"
    >>> _ = f.write_text("2")
    >>> check_fence(f, 2)
    >>> check_fence(f, 1)
    Traceback (most recent call last):
    ...
    headwater.dataplane.fence.FencedError: the graph was placed elsewhere (epoch 2, this worker has 1): not committing
    """
    try:
        current = int(Path(file).read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        current = -1
    if current != epoch:
        raise FencedError(f"the graph was placed elsewhere (epoch {current}, this worker has {epoch}): not committing")
