"""headwater.spark.daemon.disable_transparent_huge_pages: the process and what it forks lose huge pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = """
import os
from headwater.spark.daemon import disable_transparent_huge_pages
assert disable_transparent_huge_pages()
pid = os.fork()
if pid == 0:
    status = open("/proc/self/status").read()
    os._exit(0 if "THP_enabled:\\t0" in status else 1)
_, code = os.waitpid(pid, 0)
print("forked child:", os.waitstatus_to_exitcode(code))
print("self:", "THP_enabled:\\t0" in open("/proc/self/status").read())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_huge_pages_are_off_in_the_process_and_its_forked_children():
    with open("/proc/self/status") as f:
        if "THP_enabled:" not in f.read():
            pytest.skip("this kernel does not report THP_enabled (Linux < 5.0)")
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=60).stdout
    assert "forked child: 0" in out and "self: True" in out, out
