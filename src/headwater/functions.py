"""Functions usable in metrics, filters and maps, and the registry that describes them.

Every function has one :class:`FunctionSpec`: its kind (``scalar`` row-wise,
``aggregate`` for window engines, ``state`` for the reactive state engine), which
arguments are columns and which are constant parameters, and its result type. The
Python constructors below and the SQL-like string parser both bind arguments through
the same spec, so ``mmax("high", 9)`` and ``"mmax(high, 9)"`` give the same tree.

>>> from headwater.functions import ewm_mean, mmax
>>> str(ewm_mean("close", span=20, adjust=False))
'ewm_mean(close, span=20, adjust=false)'
>>> str(mmax("high", 9))
'mmax(high, window=9)'
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headwater.aggregates.rules import CATALOG, METRIC_AGGREGATES
from headwater.errors import GraphDefinitionError, SchemaError, UnknownFunctionError, clip
from headwater.expr import (
    Alias,
    Call,
    Col,
    Expr,
    Item,
    Lit,
    MultiExpr,
    as_expr,
    col,
    lit,
)
from headwater.types import INTEGRAL, NUMERIC, TEMPORAL, Schema, array_of, element_of

__all__ = ["col", "lit", "state"]  # extended below with every generated constructor

REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """A constant parameter of a function (a window length, a span, a flag)."""

    name: str
    default: Any = REQUIRED


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    kind: str  # "scalar" | "aggregate" | "collect" | "state"
    columns: tuple[str, ...]
    params: tuple[Param, ...] = ()
    result: str = "same"  # "same" | "double" | "long" | "bool" | "numeric" | "sum" | "branch" | "array"
    n_outputs: int = 1
    doc: str = ""
    # value arguments that may be left out, and what they are then (a constant); e.g. (("basis", 1),)
    column_defaults: tuple[tuple[str, Any], ...] = ()
    # value arguments of another type than a number: (("settlement", "date"), ("style", "string"))
    arg_types: tuple[tuple[str, str], ...] = ()
    # checks a bound call's constant arguments and parameters, raising GraphDefinitionError
    check: Callable[[Call], None] | None = None

    def signature(self) -> str:
        defaults = dict(self.column_defaults)
        parts = [c if c not in defaults else f"{c}={clip(defaults[c])}" for c in self.columns] + [
            p.name if p.default is REQUIRED else f"{p.name}={clip(p.default)}" for p in self.params
        ]
        return f"{self.name}({', '.join(parts)})"


FUNCTIONS: dict[str, FunctionSpec] = {}


def _register(spec: FunctionSpec) -> FunctionSpec:
    FUNCTIONS[spec.name] = spec
    return spec


def _p(*names: str, **defaults: Any) -> tuple[Param, ...]:
    return tuple(Param(n) for n in names) + tuple(Param(k, v) for k, v in defaults.items())


# -- scalar (row-wise) functions and operators -----------------------------------------------------
for _op in ("add", "sub", "mul", "mod", "floordiv"):
    _register(FunctionSpec(_op, "scalar", ("x", "y"), result="numeric"))
_register(FunctionSpec("div", "scalar", ("x", "y"), result="double"))
_register(FunctionSpec("pow", "scalar", ("x", "y"), result="double"))
for _op in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or"):
    _register(FunctionSpec(_op, "scalar", ("x", "y"), result="bool"))
_register(FunctionSpec("not", "scalar", ("x",), result="bool"))
_register(FunctionSpec("neg", "scalar", ("x",), result="same"))
_register(FunctionSpec("abs", "scalar", ("x",), result="same", doc="absolute value"))
_register(FunctionSpec("round", "scalar", ("x",), _p(digits=0), result="double", doc="round half away from zero"))
for _f in ("sqrt", "log", "exp", "floor", "ceil"):
    _register(FunctionSpec(_f, "scalar", ("x",), result="double"))
_register(FunctionSpec("signum", "scalar", ("x",), result="long"))
_register(FunctionSpec("iif", "scalar", ("cond", "true_value", "false_value"), result="branch"))
_register(FunctionSpec("is_null", "scalar", ("x",), result="bool"))
_register(FunctionSpec("not_null", "scalar", ("x",), result="bool"))

# -- aggregates of window engines (DolphinDB names) -------------------------------------------------
for _f in METRIC_AGGREGATES:
    _register(FunctionSpec(_f, "aggregate", ("x",), result=CATALOG[_f].result))


def _in_double(x: Expr) -> Expr:
    return x * 1.0  # a product of two longs can overflow; DolphinDB computes these in DOUBLE


# -- a window's values as one array vector (window_join_engine only: its own kind keeps it out of other engines)
_register(FunctionSpec("to_array", "collect", ("x",), result="array",
                       doc="the window's values of x, in time order, as an array (Orca's toArray); a whole metric"))

# -- aggregates written with the ones above (DolphinDB's definitions): every engine that has sum, std and count
# has them, with the same NULL rules (a row counts when each of its arguments is present)
AGGREGATE_MACROS: dict[str, Callable[..., Expr]] = {
    "wsum": lambda x, w: Call("sum", (_in_double(x) * w,)),
    "wavg": lambda x, w: Call("div", (Call("sum", (_in_double(x) * w,)), Call("sum", (_in_double(w) + x * 0,)))),
    "sum2": lambda x: Call("sum", (_in_double(x) * x,)),
    "sum3": lambda x: Call("sum", (_in_double(x) * x * x,)),
    "sum4": lambda x: Call("sum", (_in_double(x) * x * x * x,)),
    "sem": lambda x: Call("div", (Call("std", (x,)), Call("sqrt", (Call("count", (x,)),)))),
}
for _f, _cols, _doc in (
    ("wsum", ("x", "w"), "sum of x * w over the rows where both are present"),
    ("wavg", ("x", "w"), "sum(x * w) / sum(w) over the rows where both are present"),
    ("sum2", ("x",), "sum of squares"),
    ("sum3", ("x",), "sum of cubes"),
    ("sum4", ("x",), "sum of fourth powers"),
    ("sem", ("x",), "standard error of the mean: std(x) / sqrt(count(x))"),
):
    _register(FunctionSpec(_f, "aggregate", _cols, result="double", doc=_doc))


def expand_aggregates(expr: Expr) -> Expr:
    """``expr`` with each aggregate of :data:`AGGREGATE_MACROS` written out, e.g. ``wsum(price, qty)`` as
    ``sum(price * 1.0 * qty)``: engines accumulate only the basic aggregates."""
    if not isinstance(expr, Call):
        return expr
    args = tuple(expand_aggregates(a) for a in expr.args)
    if expr.func in AGGREGATE_MACROS:
        return AGGREGATE_MACROS[expr.func](*args)
    same = all(a is b for a, b in zip(args, expr.args, strict=True))
    return expr if same else Call(expr.func, args, expr.params)


# -- functions over a cross-section (the cross-sectional engine's keys) ---------------------------------
_register(FunctionSpec("rank", "cross_section", ("x",), _p(ascending=True, percent=False), result="double",
                       doc="0-based rank of the key's value among the keys of its cross-section (ties share the "
                           "lowest rank; NULL ranks NULL); percent=True: (rank + 1) / keys ranked"))

# -- pricing (DolphinDB's bond and option functions): row-wise, over date and number columns -------------------------
def _pricing_constants(call: Call) -> None:
    """Constant arguments of a pricing call checked where the user wrote them (rows are checked when they come:
    a row out of domain prices as NULL)."""
    from headwater.kernels import pricing

    spec = FUNCTIONS[call.func]
    given = {name: a.value for name, a in zip(spec.columns, call.args, strict=True) if isinstance(a, Lit)}
    where = str(call)
    domains: dict[str, tuple[Any, ...]] = {"basis": pricing.BASES, "bond_type": pricing.BOND_TYPES}
    coupon_bond = "bond_type" not in spec.columns or given.get("bond_type", "column") == 0
    domains["frequency"] = pricing.FREQUENCIES if coupon_bond else (*pricing.FREQUENCIES, 0, None)
    if coupon_bond and "frequency" in given and given["frequency"] is None:
        raise GraphDefinitionError(f"{where}: frequency is required for a coupon bond (bond_type=0); expected one of "
                                   f"{', '.join(map(str, pricing.FREQUENCIES))}")
    for name, allowed in domains.items():
        value = given.get(name)
        if name in given and value is not None and (isinstance(value, bool) or value not in allowed):
            raise GraphDefinitionError(f"{where}: {name}={clip(value)} is not supported; expected one of "
                                       f"{', '.join(str(a) for a in allowed if a is not None)}")
    if isinstance(given.get("style"), str) and given["style"].lower() not in pricing.STYLES:
        raise GraphDefinitionError(f"{where}: style={clip(given['style'])}; expected 'european' or 'american'")
    params = dict(call.params)
    if params.get("calendar") not in (None, ""):
        raise GraphDefinitionError(f"{where}: calendar={clip(params['calendar'])} is not supported: Headwater has "
                                   "no trading calendars; time to expiry counts calendar days in the basis "
                                   "(give calendar=None)")
    if params.get("method", "BS") != "BS" and call.func == "vanilla_option":
        raise GraphDefinitionError(f"{where}: method={clip(params['method'])} is not supported; expected 'BS' "
                                   "(European: Black-Scholes-Merton; American: a binomial tree of `steps` steps)")
    try:  # the kernels check the remaining parameters (output, steps, method, max_iter) the same way
        if call.func == "vanilla_option":
            pricing.vanilla_option(0, 1, 0, 1.0, 1.0, 0.0, 0.0, 0.1, True, output=params.get("output", "npv"),
                                   steps=params.get("steps", 801))
        elif call.func == "bond_yield":
            pricing.bond_yield(0, 365, 0.05, 100.0, 100.0, 1, method=params.get("method", "newton"),
                               max_iter=params.get("max_iter", 100))
        elif call.func == "bond_duration" and not isinstance(params.get("modified", False), bool):
            raise GraphDefinitionError(f"{where}: modified must be True or False, got {clip(params['modified'])}")
    except GraphDefinitionError as exc:
        raise GraphDefinitionError(f"{where}: {str(exc).split(': ', 1)[-1]}") from None


_DATES2 = (("settlement", "date"), ("maturity", "date"))
_BOND_DEFAULTS = (("frequency", None), ("basis", 1), ("bond_type", 0))
for _f, _doc in (("bond_dirty_price", "dirty price per 100 of face value at yield yld (DolphinDB's bondDirtyPrice)"),
                 ("bond_convexity", "convexity at yield yld (DolphinDB's bondConvexity)")):
    _register(FunctionSpec(_f, "scalar", ("settlement", "maturity", "coupon", "yld", "frequency", "basis", "bond_type"),
                           result="double", doc=_doc, column_defaults=_BOND_DEFAULTS, arg_types=_DATES2,
                           check=_pricing_constants))
_register(FunctionSpec("bond_duration", "scalar",
                       ("settlement", "maturity", "coupon", "yld", "frequency", "basis", "bond_type"), _p(modified=False),
                       result="double", doc="Macaulay duration in years (DolphinDB's bondDuration); modified=True: "
                                            "modified duration", column_defaults=_BOND_DEFAULTS, arg_types=_DATES2,
                       check=_pricing_constants))
_register(FunctionSpec("bond_accr_int", "scalar", ("settlement", "maturity", "coupon", "frequency", "par", "basis"),
                       result="double", doc="interest accrued since the previous coupon (DolphinDB's bondAccrInt)",
                       column_defaults=(("par", 100.0), ("basis", 1)), arg_types=_DATES2, check=_pricing_constants))
_register(FunctionSpec("bond_yield", "scalar",
                       ("settlement", "maturity", "coupon", "price", "redemption", "frequency", "basis"),
                       _p(method="newton", max_iter=100), result="double",
                       doc="yield from the clean price (DolphinDB's bondYield)", column_defaults=(("basis", 1),),
                       arg_types=_DATES2, check=_pricing_constants))
_register(FunctionSpec("vanilla_option", "scalar",
                       ("settlement", "maturity", "eval_date", "spot", "strike", "risk_free", "div_yield", "volatility",
                        "is_call", "style", "basis"),
                       _p(calendar=None, method="BS", output="npv", steps=801), result="double",
                       doc="European (Black-Scholes-Merton) or American (binomial tree) option value, or a greek "
                           "with output='delta', 'gamma', 'vega', 'theta' or 'rho' (DolphinDB's vanillaOption)",
                       column_defaults=(("style", "european"), ("basis", 1)),
                       arg_types=(*_DATES2, ("eval_date", "date"), ("style", "string")), check=_pricing_constants))
PRICING_FUNCTIONS = ("bond_dirty_price", "bond_accr_int", "bond_duration", "bond_convexity", "bond_yield",
                     "vanilla_option")


# -- state functions of the reactive state engine: one source of truth, the kernel registry ---------
def _register_state_functions() -> None:
    from headwater.kernels.registry import STATE_OPS

    for op in STATE_OPS.values():
        optional = [p for p in op.params if p not in op.required]
        params = tuple(Param(p) for p in op.required) + tuple(Param(p, None) for p in optional)
        _register(FunctionSpec(op.name, "state", op.columns, params, result=op.result, n_outputs=op.n_outputs,
                               doc=op.signature))


_register_state_functions()


# -- binding ----------------------------------------------------------------------------------------
def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# DolphinDB state functions Headwater knows but does not provide, and why (reported instead of "unknown").
NOT_SUPPORTED: dict[str, str] = {
    "moving_window_data": "it returns an array vector per row; Headwater columns hold scalars",
    "tmoving_window_data": "it returns an array vector per row; Headwater columns hold scalars",
    "by_column": "it applies a function per column of a matrix or array vector; Headwater columns are scalars",
    "generic_t_state_iterate": "not implemented yet; generic_state_iterate covers count windows",
    "sparse_reactive_state_engine": "an engine, not a function; not implemented yet",
}


def lookup(name: str, *, where: str = "metric") -> FunctionSpec:
    """Find a function by its name (snake_case; DolphinDB camelCase is accepted too)."""
    spec = FUNCTIONS.get(name) or FUNCTIONS.get(_camel_to_snake(name)) or FUNCTIONS.get(name.lower())
    reason = NOT_SUPPORTED.get(_camel_to_snake(name))
    if spec is None and reason is not None:
        raise UnknownFunctionError(f"{where}: {name}() is not supported: {reason}")
    if spec is None:
        hint = difflib.get_close_matches(_camel_to_snake(name), list(FUNCTIONS) + list(STATE_FUNCTIONS), n=3)
        suggestion = f"; did you mean {', '.join(hint)}?" if hint else ""
        raise UnknownFunctionError(
            f"{where}: unknown function {clip(name)}{suggestion} "
            f"(see docs/functions.md for the {len(FUNCTIONS)} functions Headwater provides)"
        )
    return spec


def bind(spec: FunctionSpec, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Bind arguments to ``spec``: a call node, or for multi-output functions a MultiExpr of its items."""
    where = f"{spec.signature()}"
    if len(args) > len(spec.columns) + len(spec.params):
        raise GraphDefinitionError(f"{where}: takes at most {len(spec.columns) + len(spec.params)} arguments, got {len(args)}")
    col_values: dict[str, Any] = {}
    param_values: dict[str, Any] = {}
    names = list(spec.columns) + [p.name for p in spec.params]
    for name, value in zip(names, args, strict=False):
        (col_values if name in spec.columns else param_values)[name] = value
    for key, value in kwargs.items():
        if key not in names:
            raise GraphDefinitionError(f"{where}: unexpected argument {key}={clip(value)}; accepted: {', '.join(names)}")
        if key in col_values or key in param_values:
            raise GraphDefinitionError(f"{where}: argument {clip(key)} given twice")
        (col_values if key in spec.columns else param_values)[key] = value
    for c, value in spec.column_defaults:
        col_values.setdefault(c, Lit(value))
    missing = [c for c in spec.columns if c not in col_values]
    missing += [p.name for p in spec.params if p.default is REQUIRED and p.name not in param_values]
    if missing:
        raise GraphDefinitionError(f"{where}: missing argument(s) {', '.join(missing)}")
    params: list[tuple[str, Any]] = []
    for p in spec.params:
        if p.name not in param_values:
            continue
        value = param_values[p.name]
        if isinstance(value, Lit):
            value = value.value
        if isinstance(value, Expr | MultiExpr):
            raise GraphDefinitionError(
                f"{where}: parameter {p.name} must be a constant, got the expression {value}"
            )
        if p.default is not REQUIRED and value == p.default and type(value) is type(p.default):
            continue  # defaults are not spelled out: keeps canonical text (and de-duplication) stable
        params.append((p.name, value))
    call = Call(spec.name, tuple(as_expr(col_values[c]) for c in spec.columns), tuple(params))
    if spec.kind == "state":
        _validate_state_params(call)
    if spec.check is not None:
        spec.check(call)
    if spec.n_outputs > 1:
        return MultiExpr(tuple(Item(call, i) for i in range(spec.n_outputs)), label=str(call))
    return call


def _validate_state_params(call: Call) -> None:
    """Build the kernel once so bad parameters fail on the user's line, not in Spark."""
    from headwater.kernels.registry import make_state_op  # numba import is deferred until needed

    try:
        make_state_op(call.func, dict(call.params))
    except (ValueError, TypeError) as exc:
        raise GraphDefinitionError(f"{call}: {exc}") from None


def _make_constructor(spec: FunctionSpec) -> Callable[..., Any]:
    def construct(*args: Any, **kwargs: Any) -> Any:
        return bind(spec, args, kwargs)

    params = [inspect.Parameter(c, inspect.Parameter.POSITIONAL_OR_KEYWORD) for c in spec.columns]
    params += [
        inspect.Parameter(
            p.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD if p.default is REQUIRED else inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if p.default is REQUIRED else p.default,
        )
        for p in spec.params
    ]
    construct.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    construct.__name__ = construct.__qualname__ = spec.name
    construct.__doc__ = f"{spec.kind} function {spec.signature()}" + (f": {spec.doc}." if spec.doc else ".")
    return construct


if TYPE_CHECKING:  # the constructors below are generated; declare them for type checkers

    def _constructor(*args: Any, **kwargs: Any) -> Call: ...

    first = last = max = min = sum = count = avg = std = var = _constructor
    ewm_mean = ema = wilder = gema = mmax = mmin = msum = mavg = mstd = mvar = mfirst = mlast = _constructor
    mcount = prev = move = deltas = ratios = percent_change = ffill = _constructor
    cumsum = cumavg = cummax = cummin = cumcount = cumprod = _constructor
    abs = round = sqrt = log = exp = floor = ceil = signum = iif = is_null = not_null = _constructor
    bond_dirty_price = bond_accr_int = bond_duration = bond_convexity = bond_yield = vanilla_option = _constructor

_PUBLIC_SKIP = {"add", "sub", "mul", "div", "floordiv", "mod", "pow", "neg", "eq", "ne", "lt", "le", "gt", "ge",
                "and", "or", "not"}
for _spec in list(FUNCTIONS.values()):
    if _spec.name not in _PUBLIC_SKIP:
        globals()[_spec.name] = _make_constructor(_spec)
        __all__.append(_spec.name)


# -- @state user functions --------------------------------------------------------------------------
STATE_FUNCTIONS: dict[str, Callable[..., Any]] = {}


def state(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Declare a user state function, traced over expressions (Orca's ``@state``).

    The body runs once per call site with expression objects in place of columns,
    so it may use arithmetic, ``round``, built-in state functions and other
    ``@state`` functions. Returning a tuple makes a multi-output metric.

    >>> from headwater.functions import ewm_mean, state
    >>> @state
    ... def ewma(s, n):
    ...     return ewm_mean(s, span=n, adjust=False)
    >>> str(ewma("close", 20))
    'ewm_mean(close, span=20, adjust=false)'
    """
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def traced(*args: Any, **kwargs: Any) -> Expr | MultiExpr:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise GraphDefinitionError(f"@state function {fn.__name__}: {exc}") from None
        bound.apply_defaults()
        converted = {k: (Col(v) if isinstance(v, str) else v) for k, v in bound.arguments.items()}
        result = fn(**converted)
        if isinstance(result, MultiExpr):
            return result
        if isinstance(result, tuple | list):
            shown = ", ".join(str(a) for a in bound.args)
            return MultiExpr(tuple(as_expr(r) for r in result), label=f"{fn.__name__}({shown})")
        if not isinstance(result, Expr | int | float):
            raise GraphDefinitionError(
                f"@state function {fn.__name__} returned {clip(result)}; expected an expression or a tuple of them"
            )
        return as_expr(result)

    traced.__headwater_state__ = True  # type: ignore[attr-defined]
    STATE_FUNCTIONS[fn.__name__] = traced
    return traced


# -- type inference ---------------------------------------------------------------------------------
def infer_type(expr: Expr, schema: Schema, *, where: str, kinds: frozenset[str]) -> str:
    """Return the result type of ``expr`` over ``schema``, validating it on the way.

    ``kinds`` lists the function kinds allowed here (e.g. ``{"scalar", "state"}`` in a
    reactive state engine). Errors name ``where`` (the graph node), the offending
    value and what would be accepted.
    """
    if isinstance(expr, Col):
        real = schema.lookup(expr.name)
        if real is None:
            hint = difflib.get_close_matches(expr.name, schema.names, n=1)
            more = f"; did you mean {clip(hint[0])}?" if hint else ""
            raise SchemaError(f"{where}: unknown column {clip(expr.name)}{more} (input columns: {', '.join(schema.names)})")
        return schema[real]
    if isinstance(expr, Lit):
        v = expr.value
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "long"
        if isinstance(v, float):
            return "double"
        if isinstance(v, str):
            return "string"
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            return "date"
        return "double"  # null literal
    if isinstance(expr, Item):
        inner = expr.expr
        if isinstance(inner, Call) and inner.func in FUNCTIONS and FUNCTIONS[inner.func].n_outputs > 1:
            infer_type(inner, schema, where=where, kinds=kinds)
            return "double"
        raise GraphDefinitionError(f"{where}: {expr} selects an output of {inner}, which has only one output")
    if isinstance(expr, Alias):
        raise GraphDefinitionError(f"{where}: 'as' can only name a whole metric, not part of {expr}")
    if not isinstance(expr, Call):
        raise GraphDefinitionError(f"{where}: unsupported expression {clip(expr)}")
    spec = lookup(expr.func, where=where)
    if spec.kind not in kinds:
        allowed = " or ".join(sorted(kinds))
        raise GraphDefinitionError(
            f"{where}: {spec.kind} function {spec.name}() cannot be used here (only {allowed} functions); "
            f"in {expr}"
        )
    inner_kinds = kinds - {"aggregate", "collect"} if spec.kind in ("aggregate", "collect") else kinds
    arg_types = [infer_type(a, schema, where=where, kinds=inner_kinds) for a in expr.args]
    for a, t in zip(expr.args, arg_types, strict=True):
        if element_of(t) is not None:
            raise SchemaError(f"{where}: {a} is an array ({t}); functions compute on single values, in {expr}")
    if spec.kind == "aggregate":
        for a in expr.args:
            for node in a.walk():
                if isinstance(node, Call) and node.func in FUNCTIONS and FUNCTIONS[node.func].kind == "aggregate":
                    raise GraphDefinitionError(f"{where}: nested aggregate {node} inside {expr} is not allowed")
    if spec.arg_types:
        _check_arg_types(spec, expr, arg_types, where)
        return _result_type(spec, arg_types)
    numeric_args = spec.name not in {"eq", "ne", "and", "or", "not", "iif", "is_null", "not_null", "first", "last",
                                     "max", "min", "count", "to_array", "mfirst", "mlast", "prev", "move", "ffill", "lt", "le",
                                     "gt", "ge", "mcount", "cumcount"}
    if numeric_args:
        for a, t in zip(expr.args, arg_types, strict=True):
            if t not in NUMERIC and t != "bool" and not (spec.kind == "state" and t in TEMPORAL):
                raise SchemaError(f"{where}: {spec.name}() needs a numeric argument, got {a} of type {t} in {expr}")
    return _result_type(spec, arg_types)


def _check_arg_types(spec: FunctionSpec, expr: Call, arg_types: list[str], where: str) -> None:
    """Each argument of a function with typed arguments (the pricing functions) has its type: a date, a string,
    or else a number; a NULL constant fits any."""
    wanted = dict(spec.arg_types)
    for name, a, t in zip(spec.columns, expr.args, arg_types, strict=True):
        kind = wanted.get(name, "numeric")
        if isinstance(a, Lit) and a.value is None:
            continue
        ok = t == "date" if kind == "date" else t == "string" if kind == "string" else t in NUMERIC or t == "bool"
        if not ok:
            hint = "; give a date column (a timestamp does not convert)" \
                if kind == "date" and t == "timestamp" else ""
            raise SchemaError(f"{where}: {spec.name}() argument {name} must be a {kind}, got {a} of type {t} "
                              f"in {expr}{hint}")


def _result_type(spec: FunctionSpec, arg_types: list[str]) -> str:
    if spec.result == "same":
        return arg_types[0]
    if spec.result == "numeric":
        return "long" if all(t in INTEGRAL or t == "bool" for t in arg_types) else "double"
    if spec.result == "sum":
        return "long" if arg_types[0] in INTEGRAL or arg_types[0] == "bool" else "double"
    if spec.result == "array":
        return array_of(arg_types[0])
    if spec.result == "branch":
        a, b = arg_types[1], arg_types[2]
        if a == b:
            return a
        return "double" if a in NUMERIC and b in NUMERIC else a
    return spec.result


def default_name(expr: Expr, *, where: str) -> str:
    """Orca's generated output name: bare columns keep theirs, ``sum(price)`` becomes ``sum_price``."""
    if isinstance(expr, Col):
        return expr.name.rsplit(".", 1)[-1]  # a join's right.price is named price
    if isinstance(expr, Call) and expr.args and all(isinstance(a, Col | Lit) for a in expr.args):
        cols = [a.name.rsplit(".", 1)[-1] for a in expr.args if isinstance(a, Col)]
        if cols:
            return "_".join([expr.func, *cols])
    raise GraphDefinitionError(
        f"{where}: metric {expr} needs a name; add one with .alias('name') or 'as name' in a string metric"
    )
