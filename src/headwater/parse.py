"""Parse SQL-like metric strings into expression trees.

The grammar is Python's expression grammar (parsed with :mod:`ast`, so precedence
and literals behave as users expect) plus a trailing ``as name[, name...]``.
DolphinDB spellings are accepted too: ``<>`` for ``!=``, ``&&``/``||``, and
backtick names (``as `dif`dea``).

>>> from headwater.parse import parse_metric
>>> str(parse_metric("first(price) as open"))
'first(price) as open'
>>> str(parse_metric("(high - low) / close * 100 as range_pct"))
'(high - low) / close * 100 as range_pct'
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import re
from collections.abc import Iterator, Sequence
from typing import Any

from headwater.errors import GraphDefinitionError, clip
from headwater.expr import Alias, Call, Col, Expr, Item, Lit, MultiExpr
from headwater.functions import STATE_FUNCTIONS, bind, lookup

_AS = re.compile(r"^(?P<expr>.+?)\s+as\s+(?P<names>`?[A-Za-z_][\w`, ]*)\s*$", re.IGNORECASE | re.DOTALL)

_BINOPS: dict[type, str] = {
    ast.Add: "add",
    ast.Sub: "sub",
    ast.Mult: "mul",
    ast.Div: "div",
    ast.FloorDiv: "floordiv",
    ast.Mod: "mod",
    ast.Pow: "pow",
    ast.BitAnd: "and",
    ast.BitOr: "or",
}
_CMPOPS: dict[type, str] = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_CONSTANTS = {"true": True, "false": False, "null": None, "NULL": None}


def parse_metric(text: str, *, where: str = "metric") -> Expr:
    """Parse ``"expr [as name, ...]"`` into an expression (an :class:`Alias` when named)."""
    if not isinstance(text, str) or not text.strip():
        raise GraphDefinitionError(f"{where}: empty metric {clip(text)}; e.g. 'sum(volume) as volume'")
    body, names = text.strip(), None
    match = _AS.match(body)
    if match:
        body = match.group("expr")
        names = [n for n in re.split(r"[`,\s]+", match.group("names")) if n]
    value = parse_expr(body, where=where)
    if names is None:
        if isinstance(value, MultiExpr):
            raise GraphDefinitionError(
                f"{where}: {clip(text)} has {len(value)} outputs; name them, e.g. '{clip(body)[1:-1]} as "
                + ", ".join(f"out{i}" for i in range(len(value)))
                + "'"
            )
        return value
    return value.alias(*names)


MAX_EXPRESSION_CHARS = 10_000


def parse_expr(text: str, *, where: str = "expression") -> Any:
    """Parse an expression string (no ``as``) into an :class:`Expr` (or a :class:`MultiExpr`)."""
    if not isinstance(text, str):
        raise GraphDefinitionError(f"{where}: expected an expression as text, e.g. 'price > 10', got {clip(text)}")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise GraphDefinitionError(f"{where}: the expression {clip(text)} has {len(text):,} characters, more than "
                                   f"the {MAX_EXPRESSION_CHARS:,} allowed; split it, or compute parts in a map")
    source = text.replace("<>", "!=").replace("&&", " and ").replace("||", " or ").strip()
    try:
        tree = ast.parse(source, mode="eval")
        return _convert(tree.body, text, where)
    except SyntaxError as exc:
        # show at most 60 characters each side of the error, with a caret under it
        at = max((exc.offset or 1) - 1, 0)
        lo = max(at - 60, 0)
        window = ("…" if lo else "") + source[lo:at + 60] + ("…" if at + 60 < len(source) else "")
        pointer = " " * (at - lo + (1 if lo else 0)) + "^"
        raise GraphDefinitionError(f"{where}: cannot parse {clip(text)}: {exc.msg}\n    {window}\n    {pointer}") from None
    except (RecursionError, MemoryError):
        raise GraphDefinitionError(f"{where}: the expression {clip(text)} is nested too deeply to parse; "
                                   "simplify it or compute parts in a map") from None


def _convert(node: ast.AST, text: str, where: str) -> Any:
    def conv(n: ast.AST) -> Any:
        return _convert(n, text, where)

    def operand(n: ast.AST) -> Expr:
        """An operator's operand: one value (a function with several outputs must pick one)."""
        value = conv(n)
        if isinstance(value, MultiExpr):
            segment = ast.get_source_segment(text, n) or str(value)
            raise GraphDefinitionError(f"{where}: {clip(segment)} has {len(value)} outputs; an operator takes one, "
                                       f"e.g. {segment}[0], in {clip(text)}")
        return value

    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return Lit(_CONSTANTS[node.id])
        return Col(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return Col(f"{node.value.id}.{node.attr}")  # a qualified column, e.g. right.price in a join's metrics
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, bool | int | float | str)):
        return Lit(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return Call(_BINOPS[type(node.op)], (operand(node.left), operand(node.right)))
    if isinstance(node, ast.UnaryOp):
        inner = operand(node.operand)
        if isinstance(node.op, ast.USub):
            if isinstance(inner, Lit) and isinstance(inner.value, int | float):
                return Lit(-inner.value)
            return Call("neg", (inner,))
        if isinstance(node.op, ast.UAdd):
            return inner
        if isinstance(node.op, ast.Not | ast.Invert):
            return Call("not", (inner,))
    if isinstance(node, ast.BoolOp):
        op = "and" if isinstance(node.op, ast.And) else "or"
        values = [operand(v) for v in node.values]
        out = values[0]
        for v in values[1:]:
            out = Call(op, (out, v))
        return out
    if isinstance(node, ast.Compare):
        left = operand(node.left)
        chained: Expr | None = None
        for cmp, right_node in zip(node.ops, node.comparators, strict=True):
            if type(cmp) not in _CMPOPS:
                break
            right = operand(right_node)
            term = Call(_CMPOPS[type(cmp)], (left, right))
            chained = term if chained is None else Call("and", (chained, term))
            left = right
        else:
            return chained
    if isinstance(node, ast.Tuple | ast.List) and all(isinstance(e, ast.Constant) or
                                                       (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))
                                                       for e in node.elts):
        return Lit(ast.literal_eval(node))  # a constant tuple parameter, e.g. combine_coeff=(0.5, 0.5)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return Item(conv(node.value), int(node.slice.value))  # type: ignore[arg-type]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        args = [_const_or_expr(conv(a)) for a in node.args]
        kwargs = {k.arg: _const_or_expr(conv(k.value)) for k in node.keywords if k.arg}
        if name in STATE_FUNCTIONS and _USER_FUNCTIONS.get():
            return STATE_FUNCTIONS[name](*[a.name if isinstance(a, Col) else a for a in args], **kwargs)
        spec = lookup(name, where=f"{where} {clip(text)}")
        return bind(spec, args, kwargs)
    segment = ast.get_source_segment(text, node) or ast.dump(node)
    raise GraphDefinitionError(f"{where}: unsupported syntax {clip(segment)} in {clip(text)}")


def _const_or_expr(value: Any) -> Any:
    """Literals become Python constants so they can bind to constant parameters."""
    if isinstance(value, Lit) and not isinstance(value.value, str):
        return tuple(value.value) if isinstance(value.value, list) else value.value
    return value


def to_metric(value: Any, *, where: str) -> Expr:
    """Accept an expression object, a column name or a metric string; return an expression."""
    if isinstance(value, MultiExpr):
        raise GraphDefinitionError(
            f"{where}: metric {value} has {len(value)} outputs; name them with .alias(...), "
            f"e.g. {value}.alias({', '.join(repr(f'out{i}') for i in range(len(value)))})"
        )
    if isinstance(value, Expr):
        return value
    if isinstance(value, str):
        return parse_metric(value, where=where)
    raise GraphDefinitionError(
        f"{where}: metric {value!r} (a {type(value).__name__}) is not an expression; "
        "pass a string such as 'sum(volume) as volume' or an expression object"
    )


def metric_items(value: Any, *, where: str) -> list[Any]:
    """One metric, or a list of them, as a list (each still to be read by :func:`to_metric`)."""
    if isinstance(value, str | Expr):
        return [value]
    if not isinstance(value, Sequence):
        raise GraphDefinitionError(f"{where}: metrics must be a list of strings or expressions, got {clip(value)}")
    return list(value)


def to_metrics(value: Any, *, where: str) -> tuple[Expr, ...]:
    """One metric, or a list of them, as expressions.

    >>> to_metrics(["price", "sum(v) as total"], where="engine")
    (<expr price>, <expr sum(v) as total>)
    """
    return tuple(to_metric(m, where=where) for m in metric_items(value, where=where))


_USER_FUNCTIONS = contextvars.ContextVar("headwater_user_state_functions", default=True)


@contextlib.contextmanager
def builtins_only() -> Iterator[None]:
    """Parse with Headwater's own functions only: a user's ``@state`` function is then an unknown name.

    The plan codec stores an expression as its text only when the text reads back the same this way, so a
    stored plan never depends on ``@state`` functions being defined in the process that loads it.
    """
    token = _USER_FUNCTIONS.set(False)
    try:
        yield
    finally:
        _USER_FUNCTIONS.reset(token)


__all__ = ["Alias", "builtins_only", "parse_expr", "parse_metric", "to_metric"]
