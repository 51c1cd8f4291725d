"""Files written whole under a temporary name, then moved into place (``os.replace``): a reader sees the old
file or the new one, never half of one; a write that fails leaves neither the new file nor its temporary one.

>>> import tempfile
>>> target = Path(tempfile.mkdtemp()) / "x.json"
>>> with replacing(target) as tmp:
...     _ = tmp.write_text("{}")
>>> target.read_text(), [p.name for p in target.parent.iterdir()]
('{}', ['x.json'])
>>> with replacing(target) as tmp:
...     _ = tmp.write_text("half")
...     raise OSError("disk full")
Traceback (most recent call last):
OSError: disk full
>>> target.read_text(), [p.name for p in target.parent.iterdir()]
('{}', ['x.json'])
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path


def temporary_name(target: str | os.PathLike[str]) -> Path:
    """``.<name>.<pid>.<thread>.tmp`` beside ``target``: two writers of one file each write their own."""
    path = Path(target)
    return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


@contextlib.contextmanager
def removed_on_failure(tmp: str | os.PathLike[str]) -> Iterator[None]:
    """Remove ``tmp`` if the block raises (the block writes it and moves it into place), then re-raise."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def replacing(target: str | os.PathLike[str]) -> Iterator[Path]:
    """The temporary path to write ``target``'s new content to; moved onto ``target`` when the block ends, or
    removed if it raises."""
    tmp = temporary_name(target)
    with removed_on_failure(tmp):
        yield tmp
        os.replace(tmp, target)
