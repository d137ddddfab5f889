"""``lowp experiment``: writes its files, reads .npz data, survives interruption."""

from __future__ import annotations

import csv
import subprocess
import sys

import numpy as np
import pytest

from lowp import cli
from lowp.training import experiment


def read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.reader(fh))


def test_quick_run_writes_its_files(tmp_path, capsys):
    out = tmp_path / "res"
    rc = cli.main(["experiment", "--quick", "--output", str(out), "--no-progress",
                   "--configs", "fp32", "bf16_nomaster_rne", "bf16_nomaster_sr", "--epochs", "2"])
    assert rc == 0
    for f in ("results.md", "results.csv", "history.csv", "curves.png"):
        assert (out / f).stat().st_size > 0
    rows = read_csv(out / "results.csv")
    assert rows[0] == experiment.HEADER
    assert [r[0] for r in rows[1:]] == ["fp32", "bf16_nomaster_rne", "bf16_nomaster_sr"]
    for r in rows[1:]:
        assert 0 <= float(r[1]) <= 100 and float(r[2]) > 0
    hist = read_csv(out / "history.csv")
    assert len(hist) == 1 + 3 * 2
    md = (out / "results.md").read_text()
    assert "| fp32 |" in md and "round-to-nearest" in md
    with open(out / "curves.png", "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "| bf16_nomaster_sr |" in printed


def test_runs_are_reproducible(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        assert cli.main(["experiment", "--output", str(d), "--no-progress", "--configs", "hfp8", "bf16_nomaster_sr",
                         "--epochs", "1", "--hidden", "16"]) == 0
    ha, hb = read_csv(a / "history.csv"), read_csv(b / "history.csv")
    assert ha == hb


def test_npz_data(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.random((120, 6)).astype(np.float32)
    y = (x[:, 0] > 0.5).astype(np.int64)
    path = tmp_path / "d.npz"
    np.savez(path, X_train=x[:100], y_train=y[:100], X_test=x[100:], y_test=y[100:])
    out = tmp_path / "o"
    assert cli.main(["experiment", "--data", str(path), "--output", str(out), "--no-progress",
                     "--configs", "fp32", "--epochs", "2", "--lr", "0.1"]) == 0
    assert read_csv(out / "results.csv")[1][0] == "fp32"
    assert "d.npz" in (out / "results.md").read_text()


def test_bad_npz_and_arguments(tmp_path, capsys):
    path = tmp_path / "bad.npz"
    np.savez(path, X_train=np.zeros((3, 2)))
    assert cli.main(["experiment", "--data", str(path), "--output", str(tmp_path / "o")]) == 2
    assert "y_train" in capsys.readouterr().err
    assert cli.main(["experiment", "--data", str(tmp_path / "missing.npz"), "--output", str(tmp_path / "o")]) == 2
    assert cli.main(["experiment", "--lr", "0", "--output", str(tmp_path / "o")]) == 2
    assert "--lr" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["experiment", "--configs", "fp9"])


def test_unusable_output_and_data_fail_before_training(tmp_path, capsys):
    """Usage errors, each naming its option, with exit code 2 and before any training."""
    afile = tmp_path / "a_file"
    afile.write_text("x")
    for out in (str(afile), "", str(afile / "below")):
        assert cli.main(["experiment", "--configs", "fp32", "--epochs", "1", "--no-progress", "--output", out]) == 2
        err = capsys.readouterr().err
        assert "error: --output: cannot write results to" in err and "Traceback" not in err
    for lr in ("inf", "1e308", "nan"):
        assert cli.main(["experiment", "--lr", lr, "--output", str(tmp_path / "o")]) == 2
        assert "--lr: invalid value" in capsys.readouterr().err
    cases = [(dict(X_train=np.zeros((4, 0)), y_train=np.zeros(4, int), X_test=np.zeros((2, 0)), y_test=np.zeros(2, int)),
              "at least one feature"),
             (dict(X_train=np.zeros((4, 3)), y_train=np.array([0, 1, 2, 2**63], np.uint64), X_test=np.zeros((2, 3)),
                   y_test=np.zeros(2, int)), "labels from 0 to 65535")]
    for i, (arrays, msg) in enumerate(cases):
        path = tmp_path / f"d{i}.npz"
        np.savez(path, **arrays)
        assert cli.main(["experiment", "--data", str(path), "--output", str(tmp_path / "o")]) == 2
        assert msg in capsys.readouterr().err


def _unreadable_files(tmp_path):
    """Files that are no usable .npz archive, each with a reason of its own."""
    rng = np.random.default_rng(0)
    arrays = dict(X_train=rng.random((8, 3)), y_train=np.arange(8) % 2, X_test=rng.random((4, 3)),
                  y_test=np.arange(4) % 2)
    good = tmp_path / "good.npz"
    np.savez(good, **arrays)
    raw = good.read_bytes()
    np.savez_compressed(tmp_path / "goodc.npz", **arrays)
    rawc = (tmp_path / "goodc.npz").read_bytes()
    files = {}
    files["empty.npz"] = b""
    files["garbage.npz"] = b"not an archive at all"
    files["truncated.npz"] = raw[: len(raw) // 2]
    i = raw.index(b"NUMPY") + 150  # inside the first member's data: its CRC fails
    files["crc.npz"] = raw[:i] + bytes([raw[i] ^ 0xFF]) + raw[i + 1:]
    j = len(rawc) // 3  # inside a deflate stream
    files["deflate.npz"] = rawc[:j] + bytes(b ^ 0x5A for b in rawc[j:j + 40]) + rawc[j + 40:]
    paths = []
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        paths.append(tmp_path / name)
    np.save(tmp_path / "array.npy", arrays["X_train"])
    paths.append(tmp_path / "array.npy")
    np.savez(tmp_path / "objects.npz", **{**arrays, "X_train": np.array([None, 1], object)})
    paths.append(tmp_path / "objects.npz")
    return paths


def test_unreadable_data_files_are_usage_errors(tmp_path, capsys):
    """Every file that cannot be read gives ``error: data: ...`` and exit code 2, no traceback."""
    for path in _unreadable_files(tmp_path):
        with pytest.raises(ValueError, match="^data: "):
            experiment.load_npz(str(path))
        rc = cli.main(["experiment", "--data", str(path), "--output", str(tmp_path / "o"), "--configs", "fp32",
                       "--epochs", "1", "--no-progress"])
        err = capsys.readouterr().err
        assert rc == 2, path.name
        assert err.startswith("lowp experiment: error: data: ") and "Traceback" not in err, (path.name, err)
    r = subprocess.run([sys.executable, "-m", "lowp", "experiment", "--data", str(tmp_path / "empty.npz"),
                        "--output", str(tmp_path / "o"), "--configs", "fp32", "--epochs", "1", "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "error: data: " in r.stderr


def _colored_pixels(fig, ax) -> int:
    """Saturated (curve-coloured, not black/grey/white) pixels inside ``ax``, legends hidden."""
    for a in fig.axes:
        if a.get_legend() is not None:
            a.get_legend().set_visible(False)
    fig.canvas.draw()
    img = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    x0, y0, x1, y1 = (int(round(v)) for v in ax.bbox.extents)
    h = img.shape[0]
    crop = img[h - y1:h - y0, x0:x1]
    return int(((crop.max(axis=-1) - crop.min(axis=-1)) > 60).sum())


@pytest.mark.parametrize("epochs", [1, 2, 30])
def test_curves_show_every_run(epochs, monkeypatch, tmp_path):
    """curves.png shows the results of every run, a single epoch (one point per config) included."""
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    rng = np.random.default_rng(1)
    results = [experiment.Result(name, "", test_acc=list(rng.random(epochs)), test_loss=list(rng.random(epochs) + 0.1))
               for name in ("fp32", "bf16_nomaster_sr")]
    experiment.plot(results, str(tmp_path / "curves.png"), {"data": "t", "epochs": epochs})
    (fig,) = figs
    for ax in fig.axes:
        assert _colored_pixels(fig, ax) > 20 * len(results)
        for line in ax.get_lines():
            if epochs > 1:
                assert line.get_linestyle() in ("-", "--")
    plt.close(fig)


def test_interrupt_keeps_finished_configs(tmp_path, monkeypatch, capsys):
    real = experiment.train_one
    calls = []

    def flaky(cfg, data, **kw):
        calls.append(cfg.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(cfg, data, **kw)

    monkeypatch.setattr(experiment, "train_one", flaky)
    out = tmp_path / "o"
    rc = cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "bf16", "posit16",
                   "--epochs", "1", "--hidden", "8"])
    assert rc == 130
    assert [r[0] for r in read_csv(out / "results.csv")[1:]] == ["fp32"]
    assert (out / "curves.png").exists()
    assert "interrupted" in capsys.readouterr().err


def test_python_dash_m_help():
    r = subprocess.run([sys.executable, "-m", "lowp", "experiment", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "--quick" in r.stdout and "--output" in r.stdout


def test_default_configs():
    cfgs = experiment.default_configs()
    assert {"fp32", "bf16", "fp16_mixed", "hfp8", "posit16"} <= set(cfgs)
    rne, sr = cfgs["bf16_nomaster_rne"], cfgs["bf16_nomaster_sr"]
    assert not rne.master_weights and rne.weight_rounding == "nearest_even"
    assert not sr.master_weights and sr.weight_rounding == "stochastic"
    assert cfgs["fp16_acc"].chunk is None and cfgs["fp16_acc_chunk64"].chunk == 64
    assert cfgs["fp16_acc"].accumulate == cfgs["fp16_acc_chunk64"].accumulate


def test_a_diverged_single_epoch_still_plots(tmp_path):
    """A run whose only test loss is NaN writes every file (the loss axis is then linear)."""
    out = tmp_path / "o"
    assert cli.main(["experiment", "--configs", "fp32", "--epochs", "1", "--lr", "1e8", "--no-progress",
                     "--output", str(out)]) == 0
    assert (out / "curves.png").stat().st_size > 0 and (out / "results.md").exists()


def test_hidden_width_is_bounded(tmp_path, capsys):
    assert cli.main(["experiment", "--hidden", "1000000000", "--output", str(tmp_path / "o")]) == 2
    assert "--hidden" in capsys.readouterr().err


def test_version(capsys):
    import lowp

    for flag in ("--version", "-V"):
        with pytest.raises(SystemExit) as e:
            cli.main([flag])
        assert e.value.code == 0
        assert capsys.readouterr().out.strip() == f"lowp {lowp.__version__}"


def test_train_loss_is_the_mean_over_samples(monkeypatch):
    """A short last batch counts by its size: with a step whose 'loss' is its batch's
    size, the epoch's train loss is sum(size**2) / n."""
    from lowp.training.mlp import MLP

    monkeypatch.setattr(MLP, "train_step", lambda self, x, y, opt, scaler: (float(len(x)), True))
    data = experiment.load_digits_split()
    n, bs = len(data.y_train), 1000
    r = experiment.train_one(experiment.default_configs()["fp32"], data, epochs=1, lr=0.01, momentum=0.0,
                             batch_size=bs, hidden=4, seed=0)
    sizes = [min(bs, n - i) for i in range(0, n, bs)]
    assert len(set(sizes)) == 2
    assert r.train_loss == [pytest.approx(sum(s * s for s in sizes) / n, rel=1e-12)]


def test_data_that_is_not_finite_in_float32_is_refused(tmp_path, capsys):
    x = np.zeros((4, 3))
    y = np.arange(4) % 2
    for bad in (np.nan, np.inf, 1e300):
        xb = x.copy()
        xb[1, 2] = bad
        path = tmp_path / "d.npz"
        np.savez(path, X_train=x, y_train=y, X_test=xb, y_test=y)
        with pytest.raises(ValueError, match="^data: X_test holds values that are not finite in float32"):
            experiment.load_npz(str(path))
        out = tmp_path / "never"
        assert cli.main(["experiment", "--data", str(path), "--output", str(out), "--no-progress"]) == 2
        assert "not finite" in capsys.readouterr().err
        assert not out.exists()  # (the data is read before the output folder is made)


def test_too_many_weights_for_the_data_are_a_usage_error(tmp_path, capsys):
    path = tmp_path / "many.npz"
    y = np.array([0, 65535])
    np.savez(path, X_train=np.zeros((2, 3)), y_train=y, X_test=np.zeros((2, 3)), y_test=y)
    out = tmp_path / "o"
    assert cli.main(["experiment", "--data", str(path), "--hidden", "1048576", "--output", str(out),
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--hidden" in err and "65536 classes" in err and "Traceback" not in err
    assert not out.exists()


def test_interrupts_before_any_config_finishes(tmp_path, monkeypatch, capsys):
    """An interrupt while the data loads, or before the first config finishes: exit code
    130 and a message saying nothing was written (and whose the folder's files are)."""
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    out = tmp_path / "o"
    with monkeypatch.context() as m:
        m.setattr(experiment, "load_digits_split", interrupted)
        assert cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32"]) == 130
    err = capsys.readouterr().err
    assert "interrupted before any config finished: no results written" in err and "earlier run" not in err
    assert cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "--epochs", "1",
                     "--hidden", "4"]) == 0
    capsys.readouterr()
    with monkeypatch.context() as m:
        m.setattr(experiment, "train_one", interrupted)
        assert cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "bf16"]) == 130
    err = capsys.readouterr().err
    assert "no results written" in err and f"the files in {out} are from an earlier run" in err


def test_results_are_replaced_whole(tmp_path, monkeypatch):
    """A write that fails (here: interrupted while plotting) leaves the previous files,
    all of them, and no temporary ones."""
    out = tmp_path / "o"
    assert cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "--epochs", "1",
                     "--hidden", "4"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken_plot(results, path, settings):
        with open(path, "wb") as fh:
            fh.write(b"\x89PNG partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "plot", broken_plot)
    assert cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "bf16", "--epochs", "1",
                     "--hidden", "4"]) == 130
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(after) == set(before)
    assert after == before  # (results.csv and the others too: written before the plot, not renamed)


def test_results_that_cannot_be_written_are_a_clean_error(tmp_path, capsys):
    out = tmp_path / "o"
    (out / "results.csv").mkdir(parents=True)
    rc = cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "--epochs", "1",
                   "--hidden", "4"])
    cap = capsys.readouterr()
    assert rc == 1
    assert "error: --output: cannot write results to" in cap.err and "Traceback" not in cap.err
    assert "| fp32 |" in cap.out  # (what finished is printed all the same)


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, capsys):
    assert cli.main(["experiment", "--output", str(tmp_path / "o"), "--configs", "fp32", "--epochs", "2",
                     "--hidden", "4"]) == 0
    assert capsys.readouterr().err == ""


def test_closed_or_full_stdout_exits_quietly(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "lowp", "info"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # (the reader gone before anything is written)
    with p.stderr:
        err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1 and err == ""
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "lowp", "info"], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=120)
    assert r.returncode == 1 and "cannot write to standard output" in r.stderr and "Traceback" not in r.stderr


def test_a_diverged_run_keeps_the_epoch_axis(monkeypatch, tmp_path):
    """Every test loss NaN: the loss panel still spans the epochs (shared with the
    accuracy panel) and says why it is empty."""
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    results = [experiment.Result("fp32", "", test_acc=[0.1, 0.1, 0.1], test_loss=[float("nan")] * 3)]
    experiment.plot(results, str(tmp_path / "curves.png"), {"data": "t", "epochs": 3})
    (fig,) = figs
    ax1, ax2 = fig.axes
    lo, hi = ax2.get_xlim()
    assert lo <= 1 and hi >= 3 and ax2.get_xlim() == ax1.get_xlim()
    assert any("diverged" in t.get_text() for t in ax2.texts)
    plt.close(fig)


def test_an_interrupt_while_writing_leaves_the_finished_configs(tmp_path, monkeypatch, capsys):
    """Ctrl-C while a config's files are written (the plot is slow): none of them is
    replaced, the config does not count as finished, and the message says so."""
    real_plot = experiment.plot
    plots = []

    def slow_plot(results, path, settings):
        plots.append([r.name for r in results])
        if len(plots) == 2:
            raise KeyboardInterrupt
        real_plot(results, path, settings)

    monkeypatch.setattr(experiment, "plot", slow_plot)
    out = tmp_path / "o"
    rc = cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "bf16", "posit16",
                   "--epochs", "1", "--hidden", "4"])
    assert rc == 130 and plots == [["fp32"], ["fp32", "bf16"]]
    assert sorted(p.name for p in out.iterdir()) == ["curves.png", "history.csv", "results.csv", "results.md"]
    assert [r[0] for r in read_csv(out / "results.csv")[1:]] == ["fp32"]
    assert {r[0] for r in read_csv(out / "history.csv")[1:]} == {"fp32"}
    assert "| fp32 |" in (out / "results.md").read_text() and "| bf16 |" not in (out / "results.md").read_text()
    err = capsys.readouterr().err
    assert "interrupted while writing the results of bf16 (not written)" in err
    assert "hold the finished configs (fp32)" in err


@pytest.mark.parametrize("renamed", [False, True])
def test_an_interrupt_while_renaming_completes_the_files(renamed, tmp_path, monkeypatch, capsys):
    """Ctrl-C while the written files are renamed (quick): every file is renamed, then
    the run stops with that config finished."""
    import os

    real_replace = os.replace
    calls = []

    def replace(src, dst):
        calls.append(dst)
        if len(calls) == 5:  # (bf16's results.csv, renamed or not when the interrupt comes)
            if renamed:
                real_replace(src, dst)
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    out = tmp_path / "o"
    rc = cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "bf16", "posit16",
                   "--epochs", "1", "--hidden", "4"])
    assert rc == 130
    assert sorted(p.name for p in out.iterdir()) == ["curves.png", "history.csv", "results.csv", "results.md"]
    assert [r[0] for r in read_csv(out / "results.csv")[1:]] == ["fp32", "bf16"]
    assert {r[0] for r in read_csv(out / "history.csv")[1:]} == {"fp32", "bf16"}
    assert "| bf16 |" in (out / "results.md").read_text()
    assert "hold the finished configs (fp32, bf16)" in capsys.readouterr().err


def test_a_file_that_cannot_be_replaced_is_named(tmp_path, monkeypatch, capsys):
    """The error names the file in the way (or that failed), not the temporary file
    written beside it."""
    import errno

    out = tmp_path / "o"
    (out / "results.csv").mkdir(parents=True)
    args = ["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "--epochs", "1", "--hidden", "4"]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.rstrip().endswith(f"({out / 'results.csv'})") and ".tmp" not in err
    assert sorted(p.name for p in out.iterdir()) == ["results.csv"]  # (no temporary files left)
    (out / "results.csv").rmdir()

    def unwritable(results, path, settings):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(experiment, "plot", unwritable)
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.rstrip().endswith(f"Permission denied ({out / 'curves.png'})") and ".tmp" not in err
    assert list(out.iterdir()) == []


class FakeBar:
    """tqdm's interface as ``run`` uses it. ``events``: ("shown", description, postfix) at
    every refresh, ("postfix", description) at every postfix set from figures."""

    def __init__(self, **kw):
        self.desc, self.postfix, self.events = "", "", []

    def _show(self, refresh):
        if refresh:
            self.events.append(("shown", self.desc, self.postfix))

    def set_description(self, desc=None, refresh=True):
        self.desc = desc or ""
        self._show(refresh)

    def set_postfix(self, ordered_dict=None, refresh=True, **kw):
        self.postfix = ", ".join(f"{k}={v}" for k, v in {**(ordered_dict or {}), **kw}.items())
        if self.postfix:
            self.events.append(("postfix", self.desc))
        self._show(refresh)

    def set_postfix_str(self, s="", refresh=True):
        self.postfix = str(s)
        if self.postfix:
            self.events.append(("postfix", self.desc))
        self._show(refresh)

    def update(self, n=1):
        self._show(True)

    def close(self):
        pass


def test_progress_bar_shows_no_figures_of_the_previous_config(tmp_path, monkeypatch):
    """Under a config's name the bar shows that config's accuracy and loss, or none yet."""
    import types

    bars = []
    fake = types.ModuleType("tqdm")
    fake.tqdm = lambda **kw: bars.append(FakeBar(**kw)) or bars[-1]
    monkeypatch.setitem(sys.modules, "tqdm", fake)
    cfgs = experiment.default_configs()
    experiment.run({k: cfgs[k] for k in ("fp32", "bf16")}, experiment.load_digits_split(), str(tmp_path / "o"),
                   epochs=2, lr=0.002, momentum=0.9, batch_size=32, hidden=4, seed=0, progress=True)
    (bar,) = bars
    own = set()  # (the configs whose figures the postfix has held)
    shown = set()
    for ev in bar.events:
        if ev[0] == "postfix":
            own.add(ev[1])
        else:
            _, desc, postfix = ev
            shown.add(desc)
            assert postfix == "" or desc in own, bar.events
    assert own == shown - {""} == {"fp32", "bf16"}


def test_printed_settings_are_those_of_results_md(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli.main(["experiment", "--output", str(out), "--no-progress", "--configs", "fp32", "--epochs", "1",
                     "--hidden", "4"]) == 0
    printed = capsys.readouterr().out
    md = (out / "results.md").read_text()
    line = md.splitlines()[2]
    assert line.startswith("data digits, train 1438, test 359, optimizer sgd, epochs 1,")
    assert printed.startswith(md)  # (the same table, then where it was written)
