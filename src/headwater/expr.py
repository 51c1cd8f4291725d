"""The expression tree shared by every layer: metrics, filters and maps.

Expressions are immutable. Python operators build new nodes, so user code such as
``(close - mmin(low, 9)) / (mmax(high, 9) - mmin(low, 9)) * 100`` or
``round(dif, 3)`` produces a tree that the planner validates and the engines
evaluate. Strings such as ``"first(price) as open"`` parse into the same tree
(see :mod:`headwater.parse`), and ``str(expr)`` renders a string that parses back.

Two expressions are equal when their canonical text is equal; the reactive state
engine relies on that to compute a shared sub-expression once per row.

>>> from headwater.expr import col
>>> e = (col("a") + 1) * 2
>>> str(e)
'(a + 1) * 2'
>>> str(e.alias("b"))
'(a + 1) * 2 as b'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from headwater.errors import GraphDefinitionError

# operator -> (rendered symbol, precedence); higher binds tighter.
BINARY_OPERATORS: dict[str, tuple[str, int]] = {
    "or": ("or", 1),
    "and": ("and", 2),
    "eq": ("==", 4),
    "ne": ("!=", 4),
    "lt": ("<", 4),
    "le": ("<=", 4),
    "gt": (">", 4),
    "ge": (">=", 4),
    "add": ("+", 5),
    "sub": ("-", 5),
    "mul": ("*", 6),
    "div": ("/", 6),
    "floordiv": ("//", 6),
    "mod": ("%", 6),
    "pow": ("**", 8),
}
UNARY_OPERATORS: dict[str, tuple[str, int]] = {"neg": ("-", 7), "not": ("not ", 3)}


def as_expr(value: Any) -> Expr:
    """Turn a column name, a Python constant or an expression into an expression."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, MultiExpr):
        raise GraphDefinitionError(
            f"expression {value}: a multi-output value cannot be used as one column; "
            "unpack it first, e.g. `a, b = linear_time_trend(x, 10)`"
        )
    if isinstance(value, str):
        return Col(value)
    if value is None or isinstance(value, bool | int | float):
        return Lit(value)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return Lit(value)  # a date constant (the pricing functions' dates)
    raise GraphDefinitionError(
        f"cannot use {value!r} (a {type(value).__name__}) in an expression; "
        "expected a column name, a number, a bool, a date or an expression"
    )


def lit_expr(value: Any) -> Expr:
    """Like :func:`as_expr` but a string is a literal, not a column name."""
    return Lit(value) if isinstance(value, str) else as_expr(value)


def _binary(op: str, *, reverse: bool = False) -> Callable[[Expr, Any], Call]:
    """The method of a binary operator: ``self <op> other`` (``other <op> self`` when ``reverse``)."""

    def method(self: Expr, other: Any) -> Call:
        other_expr = lit_expr(other)
        return Call(op, (other_expr, self) if reverse else (self, other_expr))

    return method


def _binary_pair(op: str) -> tuple[Callable[[Expr, Any], Call], Callable[[Expr, Any], Call]]:
    """A binary operator's method and its reflected twin (``__add__``, ``__radd__``), as :mod:`fractions` does."""
    return _binary(op), _binary(op, reverse=True)


class Expr:
    """Base class of expression nodes; operators build new expressions."""

    __slots__ = ()

    # -- structure --------------------------------------------------------------------------------
    def children(self) -> tuple[Expr, ...]:
        return ()

    def walk(self) -> Iterator[Expr]:
        """Yield this node and all nodes below it, depth first, children before parents."""
        for child in self.children():
            yield from child.walk()
        yield self

    def columns(self) -> list[str]:
        """Column names referenced by this expression, in first-use order."""
        seen: dict[str, None] = {}
        for node in self.walk():
            if isinstance(node, Col):
                seen.setdefault(node.name, None)
        return list(seen)

    def render(self) -> tuple[str, int]:
        """Return (text, precedence) of this node."""
        raise NotImplementedError

    def __str__(self) -> str:
        return self.render()[0]

    def __repr__(self) -> str:
        return f"<expr {self}>"

    def key(self) -> str:
        """Canonical text: equal keys mean the same computation."""
        return str(self)

    def __hash__(self) -> int:
        return hash(self.key())

    def equals(self, other: object) -> bool:
        return isinstance(other, Expr) and self.key() == other.key()

    def __bool__(self) -> bool:
        raise GraphDefinitionError(
            f"expression {self} has no truth value while a graph is being defined; "
            "use iif(cond, a, b) instead of `if`, and `&`, `|`, `~` instead of and/or/not"
        )

    # -- naming -----------------------------------------------------------------------------------
    def alias(self, *names: str) -> Alias:
        """Name the output column(s) of this metric: ``ema(close, 20).alias("ema20")``."""
        return Alias(self, _check_names(names, self))

    # -- operators --------------------------------------------------------------------------------
    __add__, __radd__ = _binary_pair("add")
    __sub__, __rsub__ = _binary_pair("sub")
    __mul__, __rmul__ = _binary_pair("mul")
    __truediv__, __rtruediv__ = _binary_pair("div")
    __floordiv__, __rfloordiv__ = _binary_pair("floordiv")
    __mod__, __rmod__ = _binary_pair("mod")
    __pow__, __rpow__ = _binary_pair("pow")
    __and__, __rand__ = _binary_pair("and")
    __or__, __ror__ = _binary_pair("or")
    __lt__ = _binary("lt")
    __le__ = _binary("le")
    __gt__ = _binary("gt")
    __ge__ = _binary("ge")
    __eq__ = _binary("eq")  # type: ignore[assignment]
    __ne__ = _binary("ne")  # type: ignore[assignment]

    def __neg__(self) -> Call:
        return Call("neg", (self,))

    def __pos__(self) -> Expr:
        return self

    def __abs__(self) -> Call:
        return Call("abs", (self,))

    def __round__(self, ndigits: int | None = None) -> Call:
        digits = int(ndigits or 0)
        return Call("round", (self,), (("digits", digits),) if digits else ())

    def __invert__(self) -> Call:
        return Call("not", (self,))


def _check_names(names: Sequence[str], owner: object) -> tuple[str, ...]:
    flat: list[str] = []
    for n in names:
        if isinstance(n, list | tuple):
            flat.extend(n)
        else:
            flat.append(n)
    for n in flat:
        if not isinstance(n, str) or not n.isidentifier():
            raise GraphDefinitionError(f"metric {owner}: output name {n!r} must be an identifier such as 'ema20'")
    if len(set(flat)) != len(flat):
        raise GraphDefinitionError(f"metric {owner}: output names {flat} repeat a name")
    return tuple(flat)


@dataclass(frozen=True, eq=False, repr=False)
class Col(Expr):
    """A reference to an input column."""

    name: str

    def render(self) -> tuple[str, int]:
        return self.name, 10


@dataclass(frozen=True, eq=False, repr=False)
class Lit(Expr):
    """A constant."""

    value: Any

    def render(self) -> tuple[str, int]:
        if self.value is None:
            return "null", 10
        if isinstance(self.value, bool):
            return ("true" if self.value else "false"), 10
        if isinstance(self.value, str):
            return repr(self.value), 10
        if isinstance(self.value, dt.date):
            return f"date({self.value.isoformat()!r})", 10
        if (isinstance(self.value, float) and self.value < 0) or (isinstance(self.value, int) and self.value < 0):
            return repr(self.value), 7
        return repr(self.value), 10


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A function or operator applied to expression arguments and constant parameters."""

    func: str
    args: tuple[Expr, ...]
    params: tuple[tuple[str, Any], ...] = field(default=())

    def children(self) -> tuple[Expr, ...]:
        return self.args

    def param(self, name: str, default: Any = None) -> Any:
        for k, v in self.params:
            if k == name:
                return v
        return default

    def render(self) -> tuple[str, int]:
        if self.func in BINARY_OPERATORS:
            symbol, prec = BINARY_OPERATORS[self.func]
            left, lp = self.args[0].render()
            right, rp = self.args[1].render()
            # left-associative: parenthesise a right operand of equal precedence
            if lp < prec or (self.func == "pow" and lp == prec):
                left = f"({left})"
            if rp < prec or (rp == prec and self.func != "pow"):
                right = f"({right})"
            return f"{left} {symbol} {right}", prec
        if self.func in UNARY_OPERATORS:
            symbol, prec = UNARY_OPERATORS[self.func]
            inner, ip = self.args[0].render()
            if ip < prec:
                inner = f"({inner})"
            return f"{symbol}{inner}", prec
        parts = [str(a) for a in self.args]
        parts += [f"{k}={Lit(v).render()[0]}" for k, v in self.params]
        return f"{self.func}({', '.join(parts)})", 10


@dataclass(frozen=True, eq=False, repr=False)
class Item(Expr):
    """Output ``index`` of a multi-output call."""

    expr: Expr
    index: int

    def children(self) -> tuple[Expr, ...]:
        return (self.expr,)

    def render(self) -> tuple[str, int]:
        return f"{self.expr}[{self.index}]", 10


@dataclass(frozen=True, eq=False, repr=False)
class Alias(Expr):
    """A metric with explicit output column name(s)."""

    expr: Expr | MultiExpr
    names: tuple[str, ...]

    def children(self) -> tuple[Expr, ...]:
        return self.expr.exprs if isinstance(self.expr, MultiExpr) else (self.expr,)

    def render(self) -> tuple[str, int]:
        return f"{self.expr} as {', '.join(self.names)}", 0

    def outputs(self) -> tuple[Expr, ...]:
        """The expressions of the output columns, one per name."""
        return self.children()


@dataclass(frozen=True, eq=False, repr=False)
class MultiExpr:
    """Several expressions returned together, e.g. by a multi-return ``@state`` function.

    Bind names with :meth:`alias` (``macd("close").alias("dif", "dea", "macd")``) or unpack
    it like a tuple inside another ``@state`` function.
    """

    exprs: tuple[Expr, ...]
    label: str = ""

    def alias(self, *names: str) -> Alias:
        flat = _check_names(names, self)
        if len(flat) != len(self.exprs):
            raise GraphDefinitionError(
                f"metric {self}: {len(self.exprs)} outputs need {len(self.exprs)} names, got {len(flat)} {list(flat)}"
            )
        return Alias(self, flat)

    def __iter__(self) -> Iterator[Expr]:
        return iter(self.exprs)

    def __len__(self) -> int:
        return len(self.exprs)

    def __getitem__(self, index: int) -> Expr:
        return self.exprs[index]

    def __str__(self) -> str:
        return self.label or "(" + ", ".join(str(e) for e in self.exprs) + ")"

    def __repr__(self) -> str:
        return f"<multi-expr {self}>"


def col(name: str) -> Col:
    """Reference an input column: ``col("price") * 2``."""
    if not isinstance(name, str) or not name:
        raise GraphDefinitionError(f"col(): column name must be a non-empty string, got {name!r}")
    return Col(name)


def lit(value: Any) -> Lit:
    """A constant, including a string constant: ``lit("AAPL")``."""
    return Lit(value)
