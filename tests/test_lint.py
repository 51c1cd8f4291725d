"""The code style and type checks CONTRIBUTING.md asks for, run by the suite so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_check_is_clean():
    result = run("ruff", "check", "src", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_pyspark_is_only_imported_in_the_spark_layer():
    offenders = [
        str(p.relative_to(ROOT)) for p in (ROOT / "src" / "headwater").rglob("*.py")
        if "spark" not in p.relative_to(ROOT / "src" / "headwater").parts[:1]
        and any(line.lstrip().startswith(("import pyspark", "from pyspark")) for line in p.read_text().splitlines())
    ]
    assert offenders == []


# Headwater's layers, top down (docs/architecture.md, "Packages and layers"): a module may import what is in
# its own layer or below, never above. Every package and top-level module is in exactly one layer.
LAYERS = (
    ("__main__", "cli"),
    ("__init__", "demo"),
    ("api",),
    ("service", "docs_gen"),
    ("runtime",),
    ("spark",),
    ("dataplane",),
    ("plan",),
    ("engines",),
    ("parse",),
    ("functions",),
    ("kernels", "storage"),
    ("aggregates", "catalog", "sql", "durations", "expr", "types"),
    ("errors", "faults", "tuning", "kernel_inputs"),
)
SOURCE = ROOT / "src" / "headwater"


def _part(module: str) -> str | None:
    """The layer member a module name belongs to (``headwater.x.y`` -> ``x``), None for a module not ours."""
    if module == "headwater":
        return "__init__"
    if not module.startswith("headwater."):
        return None
    return module.split(".")[1]


def test_every_package_is_in_a_layer():
    layered = {name for layer in LAYERS for name in layer}
    ours = {p.stem if p.suffix == ".py" else p.name for p in SOURCE.iterdir()
            if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert ours == layered


def test_layers_import_downwards_only():
    import ast

    rank = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    offenders = []
    for path in SOURCE.rglob("*.py"):
        relative = path.relative_to(SOURCE)
        me = relative.stem if len(relative.parts) == 1 else relative.parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                other = _part(name)
                if other is not None and other in rank and rank[other] < rank[me]:
                    offenders.append(f"{relative}: imports {name} (a layer above {me})")
    assert offenders == []
