"""The layout of ``headwater.kernels``: families import only ``base``, and the registry is explicit.

A family is a module or package directly under ``headwater/kernels`` other than ``base`` and
``registry``. It may import ``headwater.kernels.base`` and, inside a family package, its own
submodules; never another family, the registry or the kernels package itself. So the registry is
built by importing the families, not by import side effects, and no import cycle is possible.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.kernels.registry import STATE_OPS

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
KERNELS = SRC / "headwater" / "kernels"
PACKAGE = "headwater.kernels"

N_STATE_FUNCTIONS = 158
"""How many state functions there were when the kernels were split into families; docs/functions.md lists them."""


def _name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


def _is_module(name: str) -> bool:
    path = SRC.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _kernel_imports(path: Path) -> list[str]:
    """The ``headwater.kernels`` modules ``path`` imports, at any depth (imports inside functions count)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, (
                f"{path.relative_to(ROOT)}: write imports absolute, so this test sees them"
            )
            module = node.module or ""
            # `from package import submodule` imports the submodule
            found += [
                f"{module}.{a.name}" if _is_module(f"{module}.{a.name}") else module for a in node.names
            ]
    return [n for n in found if n == PACKAGE or n.startswith(f"{PACKAGE}.")]


def _family(name: str) -> str:
    return name.split(".")[2]


FAMILY_MODULES = sorted(
    _name(p)
    for p in KERNELS.rglob("*.py")
    if _name(p) != PACKAGE and _family(_name(p)) not in ("base", "registry")
)


def test_there_are_families() -> None:
    families = {_family(m) for m in FAMILY_MODULES}
    assert {
        "moving",
        "cumulative",
        "ewm",
        "ta",
        "time_windows",
        "topn",
        "higher_order",
        "windows",
    } <= families


@pytest.mark.parametrize("module", FAMILY_MODULES)
def test_a_family_imports_only_base_and_its_own_modules(module: str) -> None:
    family = f"{PACKAGE}.{_family(module)}"
    path = SRC.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    allowed = (f"{PACKAGE}.base.", f"{family}.")  # a family package's own submodules, not the package
    offenders = [n for n in _kernel_imports(path) if not n.startswith(allowed) or n == module]
    assert offenders == [], f"{module} may import only {PACKAGE}.base (and its own submodules)"


def test_base_imports_only_base_and_the_package_imports_nothing() -> None:
    for path in (KERNELS / "base").rglob("*.py"):
        assert all(n.startswith(f"{PACKAGE}.base.") for n in _kernel_imports(path)), path
    assert _kernel_imports(KERNELS / "__init__.py") == []


def _fresh(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _documented_state_functions() -> set[str]:
    text = (ROOT / "docs" / "functions.md").read_text()
    section = text.split("## State functions", 1)[1].split("\n## ", 1)[0]
    return {line.split("`")[1].split("(")[0] for line in section.splitlines() if line.startswith("| `")}


def test_the_registry_alone_builds_every_state_function() -> None:
    # a fresh interpreter: nothing imported before the registry can have registered anything
    names = json.loads(
        _fresh(
            "import json; from headwater.kernels.registry import STATE_OPS; print(json.dumps(list(STATE_OPS)))"
        )
    )
    assert len(names) == len(set(names)) == N_STATE_FUNCTIONS
    assert set(names) == _documented_state_functions() == set(STATE_OPS)


def test_importing_a_family_loads_only_base_and_that_family() -> None:
    families = sorted({m.split(".")[2] for m in FAMILY_MODULES})
    code = f"""
import importlib, json, sys
loaded = {{}}
for family in {families!r}:
    before = set(sys.modules)
    importlib.import_module("{PACKAGE}." + family)
    loaded[family] = sorted(m for m in set(sys.modules) - before if m.startswith("{PACKAGE}."))
print(json.dumps(loaded))
"""
    for family, modules in json.loads(_fresh(code)).items():
        assert modules, family
        own = f"{PACKAGE}.{family}"
        assert [m for m in modules if not (m == own or m.startswith((f"{own}.", f"{PACKAGE}.base")))] == []


def test_every_state_function_is_covered_by_one_kernel_test_module() -> None:
    from tests.unit import (
        test_state_functions,
        test_state_functions_higher_order,
        test_state_functions_pairwise,
        test_state_functions_time_windows,
    )

    groups = [test_state_functions.CORE_OPS, test_state_functions_pairwise.FAMILY,
              test_state_functions_higher_order.HIGHER_NAMES, test_state_functions_time_windows.TIME_NAMES]  # fmt: skip
    assert [len(g) for g in groups] == [42, 35, 9, 71]
    assert sum(map(len, groups)) == len(set().union(*groups))
    # tmoving runs the tm-function it names; test_graph_api.py covers it end to end
    assert set().union(*groups) | {"tmoving"} == set(STATE_OPS)
