"""The hand-written stub of the native module matches the module."""

import subprocess
import sys

import pytest


def test_native_module_stub_matches_runtime():
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "lowp._lowp"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
