"""``lowp experiment``: train the MLP under several QuantConfigs and compare them.

By default the data is scikit-learn's bundled digits set (1797 8x8 images, read
offline) with a fixed stratified 80/20 train/test split; ``--data FILE.npz`` reads
``X_train, y_train, X_test, y_test`` instead. Every config starts from the same
initial weights and sees the same batches; stochastic rounding is seeded, so a run is
reproducible (apart from the times).

Written to ``--output`` (default ``./lowp-results``) after every config, all four
files together (each written beside its target, then all renamed over them), so an
interrupted run leaves the files of the configs it finished, agreeing with each other:

- ``results.md`` and ``results.csv``: final test accuracy, test loss, train loss,
  skipped steps and time per config;
- ``history.csv``: test accuracy, test loss and train loss per epoch;
- ``curves.png``: test accuracy and test loss per epoch for every config.

The default settings (SGD, momentum 0.9, lr 0.002, batch 32, 60 epochs) are chosen so
that weight updates are often smaller than half an ulp of bf16 weights: without
float32 master weights, round-to-nearest loses them and training stalls, while
stochastic rounding keeps their expected value.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import time
import zipfile
import zlib
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .config import PRESETS, QuantConfig, preset
from .mlp import MLP

__all__ = ["default_configs", "load_digits_split", "load_npz", "run", "Result", "add_subparser", "main"]


def default_configs() -> dict[str, QuantConfig]:
    """The configs ``lowp experiment`` runs by default: every preset, bf16 weights
    without float32 masters updated with round-to-nearest vs stochastic rounding, and
    fp16 accumulation without and with chunks of 64."""
    cfgs = {name: preset(name) for name in PRESETS}
    cfgs["bf16_nomaster_rne"] = preset("bf16", master_weights=False, weight_rounding="nearest_even",
                                       name="bf16_nomaster_rne")
    cfgs["bf16_nomaster_sr"] = preset("bf16", master_weights=False, weight_rounding="stochastic",
                                      name="bf16_nomaster_sr")
    cfgs["fp16_acc"] = preset("fp16_mixed", accumulate="float16", name="fp16_acc")
    cfgs["fp16_acc_chunk64"] = preset("fp16_mixed", accumulate="float16", chunk=64, name="fp16_acc_chunk64")
    return cfgs


@dataclasses.dataclass
class Data:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    name: str

    @property
    def n_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1


def load_digits_split(test_fraction: float = 0.2, seed: int = 0) -> Data:
    """scikit-learn's digits, pixels scaled to [0, 1], split per class with a fixed seed."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), bool)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        test[idx[: int(round(test_fraction * len(idx)))]] = True
    return Data(x[~test], y[~test], x[test], y[test], "digits")


# What reading a file that is not a valid .npz archive can raise: missing or unreadable
# files, empty or truncated ones, corrupt zip archives or members, bad .npy headers.
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def load_npz(path: str) -> Data:
    """``X_train, y_train, X_test, y_test`` from an .npz file (X: 2-D, y: integer labels).

    Any file that cannot be read as such an archive (missing, empty, corrupt, an .npy
    file, pickled data) raises ValueError starting with ``data:``."""
    def unreadable(e: BaseException) -> ValueError:
        return ValueError(f"data: cannot read {path!r}: {e or type(e).__name__}")

    try:
        fh = open(path, "rb")
    except OSError as e:
        raise unreadable(e) from None
    with fh:  # (np.load leaves a file it opened open when the archive is corrupt)
        if fh.read(6) == b"\x93NUMPY":  # not loaded: its header may ask for any size
            raise ValueError(f"data: {path!r} is an .npy file holding one array; expected an .npz archive with "
                             "X_train, y_train, X_test, y_test (numpy.savez)")
        try:
            fh.seek(0)
            z = np.load(fh, allow_pickle=False)  # an NpzFile, or ValueError
        except _READ_ERRORS as e:
            raise unreadable(e) from None
        with z:
            missing = [k for k in ("X_train", "y_train", "X_test", "y_test") if k not in z.files]
            if missing:
                raise ValueError(f"data: {path!r} lacks {', '.join(missing)} (has {', '.join(z.files) or 'nothing'})")
            try:
                xtr, ytr, xte, yte = (np.asarray(z[k]) for k in ("X_train", "y_train", "X_test", "y_test"))
            except (*_READ_ERRORS, MemoryError) as e:  # (MemoryError: a member's header asks for too much)
                raise unreadable(e) from None
    for name, xx, yy in (("train", xtr, ytr), ("test", xte, yte)):
        if xx.ndim != 2 or yy.ndim != 1 or len(xx) != len(yy) or len(xx) == 0 or xx.shape[1] == 0:
            raise ValueError(f"data: X_{name} must be 2-D with at least one feature and y_{name} 1-D of the same "
                             f"nonzero length, got shapes {xx.shape} and {yy.shape}")
        if xx.dtype.kind not in "biuf":
            raise ValueError(f"data: X_{name} must hold real numbers, got dtype {xx.dtype}")
        # (One output unit per class: labels stay below 65536.)
        if yy.dtype.kind not in "iu" or yy.min() < 0 or yy.max() > 65535:
            raise ValueError(f"data: y_{name} must hold integer labels from 0 to 65535, got dtype {yy.dtype}"
                             + (f" and values from {yy.min()} to {yy.max()}" if yy.dtype.kind in "iu" else ""))
    if xtr.shape[1] != xte.shape[1]:
        raise ValueError(f"data: X_train has {xtr.shape[1]} features but X_test has {xte.shape[1]}")
    xs = []
    for name, xx in (("train", xtr), ("test", xte)):
        with np.errstate(over="ignore"):  # (values past float32's range: refused below)
            x32 = xx.astype(np.float32)
        if not np.isfinite(x32).all():
            raise ValueError(f"data: X_{name} holds values that are not finite in float32 (NaN, infinities, or "
                             f"magnitudes past {float(np.finfo(np.float32).max):.4g})")
        xs.append(x32)
    return Data(xs[0], ytr.astype(np.int64), xs[1], yte.astype(np.int64), os.path.basename(path))


@dataclasses.dataclass
class Result:
    name: str
    description: str
    test_acc: list[float] = dataclasses.field(default_factory=list)
    test_loss: list[float] = dataclasses.field(default_factory=list)
    train_loss: list[float] = dataclasses.field(default_factory=list)
    skipped_steps: int = 0
    seconds: float = 0.0


def train_one(cfg: QuantConfig, data: Data, *, epochs: int, lr: float, momentum: float, batch_size: int, hidden: int,
              seed: int, backend: str = "auto", optimizer: str = "sgd",
              on_epoch: Optional[Callable[[Result], None]] = None) -> Result:
    """Train a fresh MLP under ``cfg``; metrics after every epoch. ``momentum`` is SGD's
    momentum or Adam's first beta."""
    model = MLP([data.x_train.shape[1], hidden, data.n_classes], cfg, seed=seed, backend=backend)
    if optimizer == "adam":
        opt = model.optimizer("adam", lr, betas=(momentum, 0.999), seed=seed + 1)
    else:
        opt = model.optimizer("sgd", lr, momentum=momentum, seed=seed + 1)
    scaler = model.loss_scaler()
    order = np.random.default_rng(seed + 2)
    res = Result(cfg.name, cfg.describe())
    t0 = time.perf_counter()
    n = len(data.y_train)
    for _ in range(epochs):
        perm = order.permutation(n)
        losses, sizes = [], []
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            loss, taken = model.train_step(data.x_train[idx], data.y_train[idx], opt, scaler)
            losses.append(loss)
            sizes.append(len(idx))
            res.skipped_steps += not taken
        acc, tl = model.evaluate(data.x_test, data.y_test)
        res.test_acc.append(acc)
        res.test_loss.append(tl)
        # The mean over samples: a short last batch weighs by its size.
        res.train_loss.append(float(np.average(losses, weights=sizes)))
        res.seconds = time.perf_counter() - t0
        if on_epoch is not None:
            on_epoch(res)
    return res


def _fmt_row(r: Result) -> list[str]:
    return [r.name, f"{100 * r.test_acc[-1]:.2f}", f"{r.test_loss[-1]:.4f}", f"{r.train_loss[-1]:.4f}",
            str(r.skipped_steps), f"{r.seconds:.1f}", r.description]


HEADER = ["config", "test accuracy (%)", "test loss", "train loss", "skipped steps", "time (s)", "formats"]


def findings(results: Sequence[Result]) -> list[str]:
    """Comparisons the experiment is about, computed from the results that exist."""
    by = {r.name: 100 * r.test_acc[-1] for r in results if r.test_acc}
    out = []
    trio = [k for k in ("fp32", "bf16", "fp16_mixed") if k in by]
    if len(trio) > 1:
        spread = max(by[k] for k in trio) - min(by[k] for k in trio)
        out.append(f"{', '.join(trio)}: test accuracy spread {spread:.2f} points")
    if "bf16_nomaster_rne" in by and "bf16_nomaster_sr" in by:
        out.append(f"bf16 weights without fp32 master: round-to-nearest {by['bf16_nomaster_rne']:.2f}% vs "
                   f"stochastic rounding {by['bf16_nomaster_sr']:.2f}% "
                   f"({by['bf16_nomaster_sr'] - by['bf16_nomaster_rne']:+.2f} points for SR)")
    if "hfp8" in by and "fp32" in by:
        out.append(f"hfp8 vs fp32: {by['hfp8'] - by['fp32']:+.2f} points")
    if "fp16_acc" in by and "fp16_acc_chunk64" in by:
        out.append(f"fp16 accumulation: unchunked {by['fp16_acc']:.2f}% vs chunks of 64 {by['fp16_acc_chunk64']:.2f}%")
    return out


class _InterruptedAfterWriting(KeyboardInterrupt):
    """A KeyboardInterrupt that came while the files were renamed, raised once all were:
    they are written."""


def _replace_files(files: Sequence[tuple[str, Callable[[str], None]]]) -> None:
    """For every ``(path, write)``: ``write(tmp)`` a file beside ``path``; once all are
    written, rename each over its ``path``. An interrupted or failed write replaces none
    of the files, and never leaves a partial one; an interrupt while they are renamed
    (quick) takes effect once all are (``_InterruptedAfterWriting``). An OSError names
    the file it is about (``path``, not the temporary one)."""
    tmps = [os.path.join(d, f".{base}.{os.getpid()}.tmp") for d, base in (os.path.split(p) for p, _ in files)]
    renamed = 0
    try:
        for tmp, (path, write) in zip(tmps, files):
            try:
                write(tmp)
            except OSError as e:
                raise _about(e, tmp, path) from None
        interrupt: Optional[KeyboardInterrupt] = None
        for tmp, (path, _) in zip(tmps, files):
            while True:
                try:
                    os.replace(tmp, path)
                    break
                except KeyboardInterrupt as e:  # (renamed or not: then tried again)
                    interrupt = e
                    if not os.path.lexists(tmp):
                        break
                except OSError as e:  # (a folder in the file's place, ...)
                    raise _about(e, tmp, path) from None
            renamed += 1
        if interrupt is not None:
            raise _InterruptedAfterWriting(*interrupt.args)
    except BaseException:
        for tmp in tmps[renamed:]:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise


def _about(e: OSError, tmp: str, path: str) -> OSError:
    """``e``, naming ``path`` where it names the temporary file ``tmp``."""
    if e.filename != tmp:
        return e
    return OSError(e.errno, e.strerror, path) if e.errno is not None else OSError(f"{e} ({path})")


def write_results(results: Sequence[Result], outdir: str, settings: dict[str, Any]) -> list[str]:
    """Write results.md, results.csv, history.csv and curves.png (replaced together, see
    ``_replace_files``: interrupted, none is); returns the paths."""
    os.makedirs(outdir, exist_ok=True)
    done = [r for r in results if r.test_acc]

    def results_csv(t: str) -> None:
        with open(t, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(HEADER)
            for r in done:
                w.writerow(_fmt_row(r))

    def history_csv(t: str) -> None:
        with open(t, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["config", "epoch", "test accuracy", "test loss", "train loss"])
            for r in done:
                for e, (a, tl, trl) in enumerate(zip(r.test_acc, r.test_loss, r.train_loss), 1):
                    w.writerow([r.name, e, f"{a:.6f}", f"{tl:.6f}", f"{trl:.6f}"])

    def results_md(t: str) -> None:
        with open(t, "w") as fh:
            fh.write(markdown_table(done, settings))

    files = [(os.path.join(outdir, name), write)
             for name, write in (("results.csv", results_csv), ("history.csv", history_csv),
                                 ("results.md", results_md), ("curves.png", lambda t: plot(done, t, settings)))]
    _replace_files(files)
    return [p for p, _ in files]


def settings_of(data: Data, *, optimizer: str, epochs: int, lr: float, momentum: float, batch_size: int, hidden: int,
                seed: int) -> dict[str, Any]:
    """A run's settings, as results.md, curves.png and the printed results show them."""
    return dict(data=data.name, train=len(data.y_train), test=len(data.y_test), optimizer=optimizer, epochs=epochs,
                lr=lr, momentum=momentum, batch=batch_size, hidden=hidden, seed=seed)


def markdown_table(results: Sequence[Result], settings: dict[str, Any]) -> str:
    lines = ["# lowp experiment", "",
             ", ".join(f"{k} {v}" for k, v in settings.items()), "",
             "| " + " | ".join(HEADER) + " |",
             "|" + "|".join("---:" if i and i < len(HEADER) - 1 else "---" for i in range(len(HEADER))) + "|"]
    for r in results:
        lines.append("| " + " | ".join(_fmt_row(r)) + " |")
    f = findings(results)
    if f:
        lines += ["", *[f"- {x}" for x in f]]
    return "\n".join(lines) + "\n"


def plot(results: Sequence[Result], path: str, settings: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    # (A shared epoch axis: the loss panel keeps it when every loss is NaN.)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), sharex=True)
    for r in results:
        ep = np.arange(1, len(r.test_acc) + 1)
        style = "--" if "nomaster" in r.name or "acc" in r.name else "-"
        # Markers: a single epoch is a point, which a line alone does not draw; on long runs
        # a marker every few epochs keeps the curves readable.
        mk = dict(marker="o", markersize=4 if len(ep) > 1 else 6, markevery=max(1, len(ep) // 15))
        ax1.plot(ep, 100 * np.asarray(r.test_acc), style, label=r.name, **mk)
        loss = np.asarray(r.test_loss, np.float64)
        ax2.plot(ep, np.where(np.isfinite(loss), loss, np.nan), style, label=r.name, **mk)  # (a diverged run: gaps)
    one_epoch = max((len(r.test_acc) for r in results), default=0) == 1
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs: whole numbers
        if one_epoch:
            ax.set_xlim(0.5, 1.5)
            ax.set_xticks([1])
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("test accuracy (%)")
    ax1.grid(alpha=0.3)
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("test loss")
    if any(np.isfinite(v) and v > 0 for r in results for v in r.test_loss):
        ax2.set_yscale("log")  # (needs a positive value to scale by)
    elif results and not any(np.isfinite(v) for r in results for v in r.test_loss):
        ax2.text(0.5, 0.5, "no finite test loss (diverged)", transform=ax2.transAxes, ha="center", va="center")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"MLP on {settings.get('data', '?')}: " + ", ".join(
        f"{k} {v}" for k, v in settings.items() if k in ("optimizer", "epochs", "lr", "momentum", "batch", "hidden")),
        fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)


def run(configs: dict[str, QuantConfig], data: Data, outdir: str, *, epochs: int, lr: float, momentum: float,
        batch_size: int, hidden: int, seed: int, backend: str = "auto", optimizer: str = "sgd",
        progress: bool = True, results: Optional[list[Result]] = None,
        trained: Optional[list[Result]] = None) -> list[Result]:
    """Train under every config in turn, writing the results after each one, and return
    them. A config is finished once its files are written: then it is appended to
    ``results`` when given (and to ``trained``, when given, as soon as it is trained).
    On KeyboardInterrupt the files hold the finished configs (see ``write_results``) and
    the exception propagates. ``progress``: a bar on stderr (None: only when stderr is a
    terminal)."""
    settings = settings_of(data, optimizer=optimizer, epochs=epochs, lr=lr, momentum=momentum, batch_size=batch_size,
                           hidden=hidden, seed=seed)
    results = [] if results is None else results
    bar = None
    if progress is None:
        progress = sys.stderr is not None and sys.stderr.isatty()
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(configs) * epochs, unit="epoch", file=sys.stderr, dynamic_ncols=True)
    try:
        for name, cfg in configs.items():
            if bar is not None:
                # (The previous config's accuracy and loss: not shown under this one's name.)
                bar.set_postfix_str("", refresh=False)
                bar.set_description(name)

            def tick(r: Result) -> None:
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(acc=f"{100 * r.test_acc[-1]:.1f}%", loss=f"{r.test_loss[-1]:.3f}")

            # (A diverging config overflows: its loss reads NaN and its steps are skipped,
            # which the results report; numpy's warnings about it would only repeat that.)
            with np.errstate(over="ignore", invalid="ignore"):
                r = train_one(cfg, data, epochs=epochs, lr=lr, momentum=momentum, batch_size=batch_size,
                              hidden=hidden, seed=seed, backend=backend, optimizer=optimizer, on_epoch=tick)
            if trained is not None:
                trained.append(r)
            try:
                write_results([*results, r], outdir, settings)
            except _InterruptedAfterWriting:
                results.append(r)  # (its files were written all the same)
                raise
            results.append(r)
    finally:
        if bar is not None:
            bar.close()
    return results


# -- command line -------------------------------------------------------------------------

def add_subparser(sub: Any) -> argparse.ArgumentParser:
    """Register ``experiment`` on the ``lowp`` command's subparsers."""
    p = sub.add_parser("experiment", help="train a small MLP under several low-precision configs and compare",
                       description="Train the MLP on the digits set (or --data) under every preset and four "
                                   "variants; write results.md, results.csv, history.csv and curves.png.")
    names = list(default_configs())
    p.add_argument("--output", default="lowp-results", metavar="DIR", help="output folder (default: ./lowp-results)")
    p.add_argument("--quick", action="store_true", help="a short run (fewer epochs), under a minute")
    p.add_argument("--configs", nargs="+", metavar="NAME", choices=names, default=None,
                   help=f"configs to run (default: all): {', '.join(names)}")
    p.add_argument("--data", metavar="FILE.npz", default=None,
                   help="read X_train, y_train, X_test, y_test from an .npz file instead of the digits set")
    p.add_argument("--epochs", type=int, default=None, help="epochs per config (default 60, --quick 4)")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd", help="optimizer (default sgd)")
    p.add_argument("--lr", type=float, default=0.002, help="learning rate (default 0.002)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum or Adam's beta1 (default 0.9)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size (default 32)")
    p.add_argument("--hidden", type=int, default=128, help="hidden layer width, 1 to 1048576 (default 128)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, batches and stochastic rounding")
    p.add_argument("--backend", choices=("auto", "lowp", "numpy"), default="auto",
                   help="GEMM backend: lowp.matmul when available (auto), or the NumPy emulation")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none either when stderr is not a terminal)")
    p.set_defaults(func=main, parser=p)
    return p


#: Most weights (and as many biases) the command trains: 256 Mi float32 values, 1 GiB,
#: and the optimizer keeps two or three copies. (64 inputs and 10 classes at the
#: largest --hidden are 77 Mi.)
_MAX_WEIGHTS = 1 << 28


def main(args: argparse.Namespace) -> int:
    parser = getattr(args, "parser", None)

    def usage_error(msg: str, usage: bool = False) -> int:
        # Exit code 2, as argparse's; an option's value, as argparse reports one: after
        # the usage line (not for what the data or the output folder turn out to be).
        if usage and parser is not None:
            parser.print_usage(sys.stderr)
        print(f"lowp experiment: error: {msg}", file=sys.stderr)
        return 2

    epochs = args.epochs if args.epochs is not None else (4 if args.quick else 60)
    for name, val, ok in (("--epochs", epochs, epochs >= 1), ("--batch-size", args.batch_size, args.batch_size >= 1),
                          # (64 inputs and 10 classes: a million units is 700 MB of weights.)
                          ("--hidden", args.hidden, 1 <= args.hidden <= 1 << 20),
                          # (A float32 step: a learning rate beyond float32's range is none.)
                          ("--lr", args.lr, 0 < args.lr <= float(np.finfo(np.float32).max)),
                          ("--momentum", args.momentum, 0 <= args.momentum < 1), ("--seed", args.seed, args.seed >= 0)):
        if not ok:
            return usage_error(f"argument {name}: invalid value {val}", usage=True)
    done: list[Result] = []  # (finished: their files written)
    trained: list[Result] = []
    configs: dict[str, QuantConfig] = {}
    try:
        # (The data first: a run that fails on it creates no output folder.)
        try:
            data = load_npz(args.data) if args.data else load_digits_split()
        except ValueError as e:
            return usage_error(str(e))
        n_weights = (data.x_train.shape[1] + data.n_classes) * args.hidden
        if n_weights > _MAX_WEIGHTS:
            return usage_error(f"argument --hidden: {args.hidden} hidden units with the data's "
                               f"{data.x_train.shape[1]} features and {data.n_classes} classes make {n_weights} "
                               f"weights; at most {_MAX_WEIGHTS} are trained")
        # The output folder is checked before any training: created, and writable.
        try:
            if not args.output:
                raise OSError("an empty path")
            os.makedirs(args.output, exist_ok=True)
            if not os.access(args.output, os.W_OK):
                raise OSError("not writable")
        except OSError as e:
            return usage_error(_cannot_write(args.output, e))
        allc = default_configs()
        configs = {k: allc[k] for k in (args.configs or allc)}
        try:
            run(configs, data, args.output, epochs=epochs, lr=args.lr, momentum=args.momentum,
                batch_size=args.batch_size, hidden=args.hidden, seed=args.seed, backend=args.backend,
                optimizer=args.optimizer, progress=False if args.no_progress else None, results=done,
                trained=trained)
        except OSError as e:
            # Writing the results failed (the folder removed, a full disk, a folder in a
            # file's place): what was trained is printed, as the files would have had it.
            if trained:
                print(markdown_table(trained, _settings(args, data, epochs)))
            print(f"lowp experiment: error: {_cannot_write(args.output, e)}"
                  + (f" ({e.filename})" if e.filename else ""), file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        # The files are replaced together: they hold the finished configs, or (none
        # finished) what an earlier run left.
        finished = [r.name for r in done]
        stopped = list(configs)[len(done)] if len(configs) > len(done) else None
        during = ("" if stopped is None else
                  f" while writing the results of {stopped} (not written)" if len(trained) > len(done) else
                  f" while training {stopped}")
        if finished:
            print(f"\ninterrupted{during}: results.md, results.csv, history.csv and curves.png in {args.output} hold "
                  f"the finished configs ({', '.join(finished)})", file=sys.stderr)
        else:
            earlier = args.output and os.path.exists(os.path.join(args.output, "results.csv"))
            print("\ninterrupted before any config finished: no results written"
                  + (f" (the files in {args.output} are from an earlier run)" if earlier else ""), file=sys.stderr)
        return 130
    print(markdown_table(done, _settings(args, data, epochs)))
    print(f"written to {args.output}: results.md, results.csv, history.csv, curves.png")
    return 0


def _cannot_write(outdir: str, e: OSError) -> str:
    return f"--output: cannot write results to {outdir!r}: {e.strerror or e}"


def _settings(args: argparse.Namespace, data: Data, epochs: int) -> dict[str, Any]:
    return settings_of(data, optimizer=args.optimizer, epochs=epochs, lr=args.lr, momentum=args.momentum,
                       batch_size=args.batch_size, hidden=args.hidden, seed=args.seed)
