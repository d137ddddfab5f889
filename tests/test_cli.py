"""`lowp info` and `python -m lowp info` print every named format with its limits."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import lowp


def lowp_script():
    cand = Path(sys.executable).parent / "lowp"
    if cand.exists():
        return str(cand)
    found = shutil.which("lowp")
    if found is None:
        pytest.skip("the lowp console script is not installed")
    return found


def run(cmd, **env):
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=60)
    return p


@pytest.mark.parametrize("how", ["script", "module"])
def test_info_lists_every_named_format(how):
    cmd = [lowp_script(), "info"] if how == "script" else [sys.executable, "-m", "lowp", "info"]
    p = run(cmd)
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["format", "bits", "layout"]
    rows = {ln.split()[0]: ln for ln in lines[2:] if ln.strip() and not ln.startswith("threads")}
    for name, f in lowp.named_formats().items():
        assert name in rows, name
        cols = rows[name].split()
        assert cols[1] == str(f.bits)
        for v in (f.max, f.min_normal, f.min_subnormal, f.eps):
            assert f"{v:.6g}" in cols, (name, v, cols)
    assert "1.4.3 bias 7 nan=fn" in rows["float8_e4m3fn"] and "448" in rows["float8_e4m3fn"].split()
    assert "57344" in rows["float8_e5m2"].split() and "65504" in rows["float16"].split()
    assert "posit<16,2>" in rows["posit16"]
    assert all(ln == ln.rstrip() for ln in lines)


def test_info_reports_path_and_threads():
    p = run([sys.executable, "-m", "lowp", "info"], LOWP_ISA="scalar", LOWP_NUM_THREADS="1")
    assert p.returncode == 0, p.stderr
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("threads")][0]
    assert "threads: 1" in last and "path: scalar" in last


def test_usage_errors():
    p = run([sys.executable, "-m", "lowp"])
    assert p.returncode == 2 and "usage" in p.stderr
    p = run([sys.executable, "-m", "lowp", "bogus"])
    assert p.returncode == 2 and "invalid choice" in p.stderr


def test_main_in_process(capsys):
    from lowp.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for name in lowp.named_formats():
        assert name in out
