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


def forbid_training(monkeypatch):
    """``lowp experiment`` must stop before loading the digits or training."""
    from lowp.training import experiment

    def never(*a, **k):
        raise AssertionError("the run went ahead")

    monkeypatch.setattr(experiment, "load_digits_split", never)
    monkeypatch.setattr(experiment, "train_one", never)


def small_npz(path):
    import numpy as np

    x = np.random.default_rng(0).random((40, 3))
    y = (x[:, 0] > 0.5).astype(np.int64)
    np.savez(path, X_train=x[:30], y_train=y[:30], X_test=x[30:], y_test=y[30:])
    return str(path)


@pytest.mark.parametrize("modules, package, hint", [
    (("sklearn", "sklearn.datasets"), "scikit-learn", "--data FILE.npz"),
    (("matplotlib",), "matplotlib", "curves.png"),
])
def test_experiment_without_its_optional_dependencies(modules, package, hint, monkeypatch, tmp_path, capsys):
    """A module of the experiment extra that cannot be imported: a usage error naming the
    package and the install command, before anything is trained or written."""
    from lowp.cli import main

    forbid_training(monkeypatch)
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)  # (import raises ImportError)
    out = tmp_path / "o"
    assert main(["experiment", "--output", str(out), "--no-progress", "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lowp experiment: error: missing optional dependencies: " + package)
    assert hint in err and 'pip install "lowp[experiment]"' in err and "Traceback" not in err
    assert not out.exists()


def test_experiment_needs_scikit_learn_only_for_the_digits(monkeypatch, tmp_path, capsys):
    from lowp.cli import main

    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    out = tmp_path / "o"
    assert main(["experiment", "--data", small_npz(tmp_path / "d.npz"), "--output", str(out), "--no-progress",
                 "--configs", "fp32", "--epochs", "1", "--hidden", "4"]) == 0
    assert (out / "results.csv").exists()


def test_experiment_needs_tqdm_only_for_a_progress_bar(monkeypatch, tmp_path, capsys):
    from lowp.cli import main

    monkeypatch.setitem(sys.modules, "tqdm", None)
    out = tmp_path / "o"
    with monkeypatch.context() as m:
        forbid_training(m)
        m.setattr(sys.stderr, "isatty", lambda: True)  # (a bar would be shown)
        assert main(["experiment", "--output", str(out), "--epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert "missing optional dependencies: tqdm" in err and "--no-progress" in err and "Traceback" not in err
    assert not out.exists()
    # No bar (--no-progress, or stderr not a terminal): tqdm is not needed.
    data = small_npz(tmp_path / "d.npz")
    args = ["experiment", "--data", data, "--output", str(out), "--configs", "fp32", "--epochs", "1", "--hidden", "4"]
    assert main(args + ["--no-progress"]) == 0
    assert main(args) == 0  # (stderr: pytest's capture, not a terminal)
