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


# Which headwater packages each layer must not import (imports point downwards; docs/architecture.md).
FORBIDDEN_IMPORTS = {
    "dataplane": ("headwater.runtime", "headwater.spark", "headwater.api"),
    "spark": ("headwater.runtime", "headwater.api"),
    "storage": ("headwater.runtime", "headwater.spark", "headwater.api", "headwater.dataplane"),
    "engines": ("headwater.runtime", "headwater.spark", "headwater.api", "headwater.dataplane"),
    "plan": ("headwater.runtime", "headwater.spark", "headwater.api", "headwater.dataplane"),
}


def test_layers_import_downwards_only():
    import ast

    offenders = []
    for package, banned in FORBIDDEN_IMPORTS.items():
        for path in (ROOT / "src" / "headwater" / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.startswith(banned)]
    assert offenders == []
