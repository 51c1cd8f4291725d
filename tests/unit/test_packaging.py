"""What ``import headwater`` offers and needs: the public names only, the version from the package metadata,
and the embedded session and the command line without the service and demo extras (whose absence is said
clearly where they are needed)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

import headwater as hw
from headwater.errors import EXTRAS

ROOT = Path(__file__).resolve().parents[2]

# the extras' modules fail to import, as in an environment installed without them
WITHOUT_EXTRAS = textwrap.dedent(f"""
    import importlib.abc, sys
    BLOCKED = {sorted(EXTRAS["service"] | EXTRAS["demo"])!r}

    class WithoutExtras(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

    sys.meta_path.insert(0, WithoutExtras())
""")


def test_the_package_exports_its_public_names_only_and_its_installed_version():
    assert hw.__version__ == version("headwater")
    loaded = {n for n, v in vars(hw).items() if not n.startswith("_") and not isinstance(v, ModuleType)}
    assert loaded <= set(hw.__all__)  # nothing but what __getattr__ loads (and the submodules imported meanwhile)
    assert set(dir(hw)) == {*hw.__all__, "__version__"}
    assert {"connect", "Session", "col", "HeadwaterError"} <= set(hw.__all__)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(dir(hw))


def test_importing_what_spark_s_python_processes_load_skips_the_package_metadata():
    """Each query's streaming-source runner imports headwater.spark.fused as it starts; __version__ is read on use."""
    out = subprocess.run([sys.executable, "-c", "import sys, headwater.spark.fused; "
                          "print('importlib.metadata' in sys.modules)"], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def run_without_extras(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS + textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_an_embedded_session_needs_no_extra(tmp_path):
    done = run_without_extras("""
        import sys, pandas as pd, headwater as hw
        s = hw.connect(sys.argv[1], start_spark=False)
        s.create_stream_table("demo.stream_table.t", {"x": "long"})
        s.append("demo.stream_table.t", pd.DataFrame({"x": [1, 2, 3]}))
        print(int(s.stream_table_meta("demo.stream_table.t")["rows"].iloc[0]))
        s.close()
    """, str(tmp_path))
    assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr[-2000:]


def test_what_needs_an_extra_says_which_to_install():
    done = run_without_extras("""
        import headwater as hw
        try:
            hw.connect("http://127.0.0.1:9")
        except hw.ConfigurationError as exc:
            print(exc)
        from headwater.cli import main
        sys.exit(main(["master", "--data-dir", "/nonexistent/headwater"]))
    """)
    assert "connecting to a master needs Headwater's service extra" in done.stdout
    assert "pip install 'headwater[service]'" in done.stdout
    assert done.returncode == 2 and "headwater master needs Headwater's service extra" in done.stderr, done.stderr
