"""The machine's process table, read from ``/proc``: what the tests that look for leftover or extra processes use."""

from __future__ import annotations

from pathlib import Path


def parents() -> dict[int, int]:
    """Each running process's parent (pid -> ppid); processes that end while it reads are left out."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:
            continue
        found[int(stat.parent.name)] = int(fields[1])
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, at any depth."""
    table = parents()
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = {c for c, pp in table.items() if pp == p} - found
        found |= kids
        todo.extend(kids)
    return found
