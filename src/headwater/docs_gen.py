"""Generate ``docs/functions.md`` from the function registry (kept true by a test).

``python -m headwater.docs_gen > docs/functions.md``
"""

from __future__ import annotations

from headwater.functions import FUNCTIONS

KIND_TITLES = {
    "scalar": "Row-wise functions and operators (maps, filters, any engine)",
    "aggregate": "Aggregates (time_series_engine)",
    "state": "State functions (reactive_state_engine)",
}
OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "pow": "**",
             "neg": "unary -", "eq": "==", "ne": "!= (or <>)", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
             "and": "and / &", "or": "or / |", "not": "not / ~"}


def render() -> str:
    lines = ["# Functions", "",
             "Generated from `headwater.functions.FUNCTIONS` by `python -m headwater.docs_gen`; do not edit.",
             "Every function is usable as a Python constructor (`from headwater.functions import ema`) and by",
             "name in metric strings (`\"ema(close, 20) as ema20\"`; DolphinDB camelCase is accepted too).", ""]
    for kind, title in KIND_TITLES.items():
        lines += [f"## {title}", "", "| function | result | notes |", "|---|---|---|"]
        for spec in sorted((s for s in FUNCTIONS.values() if s.kind == kind), key=lambda s: s.name):
            name = f"`{spec.signature()}`"
            if spec.name in OPERATORS:
                name += f" — operator `{OPERATORS[spec.name]}`"
            lines.append(f"| {name} | {spec.result} | {spec.doc} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
