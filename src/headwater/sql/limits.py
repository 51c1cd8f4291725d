"""How much one ``session.sql`` query may take: rows, result bytes, wall-clock time, and sizes it may ask for.

Two kinds of limit, both refusals (a result is never silently truncated):

* :class:`SqlLimits` — what a running query may consume. The worker runs it with a Spark job tag and a
  watchdog: past ``timeout_s`` or once its spooled result passes ``max_result_bytes`` its jobs are
  cancelled; a result of more than ``max_rows`` rows is refused whole.
* :func:`check_bounds` — what a query may ask Spark to build before any job runs. Spark folds constants
  and plans partitions in the driver, where no job can be cancelled: ``repeat('x', 2000000000)``,
  ``sequence(1, 2000000000)`` and ``/*+ REPARTITION(100000000) */`` exhaust its heap while the query is
  being *planned*. Such literal sizes are refused, as are regular expressions with nested quantifiers
  (``(a+)+b``), whose backtracking can keep one row's match running for hours where no cancel reaches.

>>> SqlLimits(max_rows=10).max_rows
10
>>> SqlLimits(timeout_s=0)
Traceback (most recent call last):
...
headwater.errors.ConfigurationError: SqlLimits(timeout_s=0): expected a number > 0 (seconds), e.g. 300
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from headwater.errors import ConfigurationError, SqlError, clip

MAX_ROWS = 1_000_000
MAX_RESULT_BYTES = 256 * 2**20
TIMEOUT_S = 300.0

# Sizes a query may spell out as literals (characters of a built string, elements of a built array,
# partitions of a hint): far above any sensible query, far below what exhausts a driver's heap.
MAX_LITERAL_SIZE = 10_000_000
MAX_HINT_PARTITIONS = 10_000

ENV = {"max_rows": "HEADWATER_SQL_MAX_ROWS", "max_result_bytes": "HEADWATER_SQL_MAX_RESULT_BYTES",
       "timeout_s": "HEADWATER_SQL_TIMEOUT_S"}
FLAGS = {"max_rows": "--sql-max-rows", "max_result_bytes": "--sql-max-result-bytes", "timeout_s": "--sql-timeout-s"}


@dataclass(frozen=True)
class SqlLimits:
    """What one ``session.sql`` query may consume; each limit, when hit, cancels it with a :class:`SqlError`.

    Args:
        max_rows: the most rows a result may have (default 1,000,000); a query with more is refused whole.
        max_result_bytes: the most bytes its result may take in the spool (default 256 MiB, uncompressed
            Parquet in ``<data_dir>/tmp/sql``), counted while Spark writes it.
        timeout_s: wall-clock seconds from the query's arrival at the worker to its result (default 300).

    Set them with ``hw.connect(path, sql_limits=SqlLimits(...))``, ``headwater master --sql-max-rows N
    --sql-max-result-bytes N --sql-timeout-s S``, or the environment (``HEADWATER_SQL_MAX_ROWS``,
    ``HEADWATER_SQL_MAX_RESULT_BYTES``, ``HEADWATER_SQL_TIMEOUT_S``).
    """

    max_rows: int = MAX_ROWS
    max_result_bytes: int = MAX_RESULT_BYTES
    timeout_s: float = TIMEOUT_S

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_result_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"SqlLimits({name}={clip(value)}): expected an integer >= 1, "
                                         f"e.g. {getattr(SqlLimits, name):_}")
        t = self.timeout_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0 or t == float("inf"):
            raise ConfigurationError(f"SqlLimits(timeout_s={clip(t)}): expected a number > 0 (seconds), e.g. 300")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> SqlLimits:
        """The limits :meth:`to_dict` gave (missing ones at their defaults; unknown names refused)."""
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigurationError(f"SqlLimits: unknown setting(s) {sorted(unknown)}; known: {sorted(ENV)}")
        return cls(**values)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SqlLimits:
        """The defaults, overridden by ``HEADWATER_SQL_MAX_ROWS`` / ``_MAX_RESULT_BYTES`` / ``_TIMEOUT_S``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, var in ENV.items():
            text = env.get(var, "").strip()
            if not text:
                continue
            try:
                values[name] = float(text) if name == "timeout_s" else int(text.replace("_", ""))
            except ValueError:
                raise ConfigurationError(f"{var}={clip(text)}: expected a number, e.g. "
                                         f"{var}={getattr(cls, name):_}") from None
        return cls(**values)

    def setting(self, name: str) -> str:
        """How a user changes limit ``name``, for messages."""
        return (f"{name}={getattr(self, name):,} (SqlLimits({name}=...), headwater master {FLAGS[name]}, "
                f"or {ENV[name]})")


# -- what a query may ask for before it runs (on Spark's parsed plan, as JSON) ---------------------------

_LITERAL = "org.apache.spark.sql.catalyst.expressions.Literal"
# function -> positions of its size arguments (characters or elements it builds)
SIZE_ARGUMENTS = {"repeat": (1,), "space": (0,), "lpad": (1,), "rpad": (1,), "array_repeat": (1,)}
REGEX_FUNCTIONS = frozenset({
    "rlike", "regexp", "regexp_like", "regexp_extract", "regexp_extract_all", "regexp_replace", "regexp_count",
    "regexp_instr", "regexp_substr", "split", "str_to_map",
})
PARTITION_HINTS = frozenset({"repartition", "coalesce", "repartition_by_range", "rebalance"})


def check_bounds(source: str, plan_json: Any, *, function_name: Callable[[dict[str, Any]], str]) -> None:
    """Refuse literal sizes and patterns that exhaust the driver or a core before a job can be cancelled.

    ``plan_json`` is Spark's parsed plan (``LogicalPlan.toJSON``); ``function_name`` is the policy's reader
    of a function node's name.
    """
    for node, args in with_children(plan_json):
        short = node["class"].rsplit(".", 1)[-1]
        if short == "UnresolvedHint" and str(node.get("name", "")).lower() in PARTITION_HINTS:
            for value in [_literal(p) for p in node.get("parameters") or []]:
                if isinstance(value, int) and value > MAX_HINT_PARTITIONS:
                    raise _too_big(source, f"the hint {str(node['name']).upper()}({value:,})",
                                   f"at most {MAX_HINT_PARTITIONS:,} partitions")
        if short not in ("UnresolvedFunction", "RLike"):
            continue
        name = "rlike" if short == "RLike" else function_name(node)
        for i in SIZE_ARGUMENTS.get(name, ()):
            value = _literal(args[i]) if i < len(args) else None
            if isinstance(value, int) and value > MAX_LITERAL_SIZE:
                raise _too_big(source, f"{name}(...) of {value:,}", f"at most {MAX_LITERAL_SIZE:,}")
        if name == "sequence" and len(args) >= 2:
            start, stop = _literal(args[0]), _literal(args[1])
            step = _literal(args[2]) if len(args) > 2 else 1
            if all(isinstance(v, int) for v in (start, stop, step)) and step:
                count = abs(stop - start) // abs(step) + 1
                if count > MAX_LITERAL_SIZE:
                    raise _too_big(source, f"sequence({start}, {stop}) of {count:,} elements",
                                   f"at most {MAX_LITERAL_SIZE:,}")
        if name in REGEX_FUNCTIONS:
            for pattern in [_literal(a) for a in args[1:]]:
                if isinstance(pattern, str) and nested_quantifier(pattern):
                    raise SqlError(f"sql: the regular expression {clip(pattern, 200)} in {clip(source)} repeats a "
                                   "group that itself repeats (such as '(a+)+'), whose matching can take hours on "
                                   "one row, where no cancel reaches; write it without the nested repetition, "
                                   "e.g. 'a+b' for '(a+)+b'")


def with_children(plan_json: Any) -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Every node of a ``LogicalPlan.toJSON`` rendering with its children, in order.

    Spark writes each tree (the plan, and each expression in it) as a list of its nodes in pre-order, each
    with its ``num-children``; nested trees sit in the nodes' fields.

    >>> flat = [{"class": "f", "num-children": 2}, {"class": "a", "num-children": 0}, {"class": "b", "num-children": 0}]
    >>> [(n["class"], [c["class"] for c in kids]) for n, kids in with_children(flat)]
    [('f', ['a', 'b']), ('a', []), ('b', [])]
    """
    stack = [plan_json]
    while stack:
        item = stack.pop()
        if isinstance(item, list) and item and all(isinstance(x, dict) and "num-children" in x for x in item):
            parents: list[list[Any]] = []  # [children so far, children still to come]
            nodes: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
            for node in item:
                kids: list[dict[str, Any]] = []
                nodes.append((node, kids))
                if parents:
                    parents[-1][0].append(node)
                    parents[-1][1] -= 1
                count = node.get("num-children")
                if isinstance(count, int) and count > 0:
                    parents.append([kids, count])
                while parents and parents[-1][1] <= 0:
                    parents.pop()
                stack.extend(v for v in node.values() if isinstance(v, list | dict))
            yield from nodes
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def _too_big(source: str, what: str, bound: str) -> SqlError:
    return SqlError(f"sql: {what} in {clip(source)} is too large: Spark would build it in the worker's memory "
                    f"before the query can be cancelled; {bound} is allowed")


def _literal(rendered: Any) -> Any:
    """The value of a literal argument (Spark renders an expression as a list of nodes), else None."""
    nodes = rendered if isinstance(rendered, list) else [rendered]
    if len(nodes) != 1 or not isinstance(nodes[0], dict) or nodes[0].get("class") != _LITERAL:
        return None
    value, kind = nodes[0].get("value"), str(nodes[0].get("dataType", ""))
    if value is None:
        return None
    if kind in ("integer", "long", "short", "byte"):
        try:
            return int(value)
        except (TypeError, ValueError):
            return None
    return str(value) if kind == "string" else None


def nested_quantifier(pattern: str) -> bool:
    r"""Whether ``pattern`` repeats a group that contains a repetition (star height > 1), e.g. ``(a+)+``.

    >>> [nested_quantifier(p) for p in ("(a+)+b", "(x*y)*", "((a)+)+", "(ab)+c", "[a+]+", "(\\d{3}-)+", "a+b*")]
    [True, True, True, False, False, False, False]
    """
    stack: list[bool] = [False]  # per open group: does it contain a quantifier
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a character class: its characters are not operators
            i += 1
            if i < n and pattern[i] == "^":
                i += 1
            if i < n and pattern[i] == "]":
                i += 1
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
            i += 1
            continue
        if c == "(":
            stack.append(False)
        elif c == ")" and len(stack) > 1:
            inner = stack.pop()
            if i + 1 < n and _repeats(pattern, i + 1):
                if inner:
                    return True
                stack[-1] = True
            elif inner:
                stack[-1] = True
        elif _repeats(pattern, i):
            stack[-1] = True
        i += 1
    return False


def _repeats(pattern: str, i: int) -> bool:
    """Whether an unbounded or ranged repetition (``*``, ``+``, ``{n,}``, ``{n,m}``) starts at ``pattern[i]``."""
    return pattern[i] in "*+" or (pattern[i] == "{" and re.match(r"\{\d+,\d*\}", pattern[i:]) is not None)
