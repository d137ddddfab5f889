"""The ``lowp`` command line."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from typing import Optional, Sequence


def _info(args: argparse.Namespace) -> int:
    from . import _lowp, named_formats
    from ._formats import FloatFormat, IntFormat, PositFormat

    rows = []
    for name, f in named_formats().items():
        if isinstance(f, FloatFormat):
            layout = f"1.{f.exp_bits}.{f.man_bits} bias {f.bias}" + (f" nan={f.nan}" if f.nan != "ieee" else "")
        elif isinstance(f, PositFormat):
            layout = f"posit<{f.nbits},{f.es}>"
        else:
            assert isinstance(f, IntFormat)
            layout = f"int{f.bits}" if f.signed else f"uint{f.bits}"
        rows.append((name, str(f.bits), layout, f"{f.max:.6g}", f"{f.min_normal:.6g}", f"{f.min_subnormal:.6g}",
                     f"{f.eps:.6g}"))
    head = ("format", "bits", "layout", "max", "min normal", "min subnormal", "eps")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = "  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()
    print(line)
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    print()
    print(f"threads: {_lowp.get_num_threads()}   path: {_lowp.get_isa()} (cpu best: {_lowp.detected_isa()})")
    return 0


#: The package of the ``experiment`` extra (pyproject.toml) that provides each module
#: ``lowp experiment`` imports.
_EXPERIMENT_PACKAGES = {"sklearn.datasets": "scikit-learn", "matplotlib": "matplotlib", "tqdm": "tqdm"}


def _experiment(args: argparse.Namespace) -> int:
    """``lowp experiment``, once the optional modules this run needs import: one that is
    missing is a usage error (exit code 2) before anything is trained or written, rather
    than a traceback when the data loads, the first config's plot is written or the
    progress bar starts."""
    from .training import experiment

    needed = []
    if not args.data:
        needed.append(("sklearn.datasets", "for the bundled digits data, or give --data FILE.npz"))
    needed.append(("matplotlib", "for curves.png"))
    # (The bar: only on a terminal, as the command decides.)
    if not args.no_progress and sys.stderr is not None and sys.stderr.isatty():
        needed.append(("tqdm", "for the progress bar, or give --no-progress"))
    missing = []
    for module, purpose in needed:
        try:
            importlib.import_module(module)
        except ImportError as e:
            # Not installed, or installed but failing to import (a dependency of its own
            # missing): then the error says which.
            absent = e.name is not None and (module == e.name or module.startswith(e.name + "."))
            missing.append(f"{_EXPERIMENT_PACKAGES[module]} ({purpose})" + ("" if absent else f": {e}"))
    if missing:
        print(f"lowp experiment: error: missing optional dependencies: {'; '.join(missing)}. Install them with: "
              'pip install "lowp[experiment]"', file=sys.stderr)
        return 2
    return int(experiment.main(args))


def main(argv: Optional[Sequence[str]] = None) -> int:
    from . import __version__

    parser = argparse.ArgumentParser(prog="lowp", description="Low-precision numerics for NumPy.")
    parser.add_argument("-V", "--version", action="version", version=f"lowp {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="print every named format with its layout and limits")
    p_info.set_defaults(func=_info)
    from .training.experiment import add_subparser as _add_experiment

    _add_experiment(sub).set_defaults(func=_experiment)
    args = parser.parse_args(argv)
    try:
        rc = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`lowp info | head -1`): nothing more to say to it. The
        # interpreter's own flush at exit would fail again: stdout now goes nowhere.
        _silence_stdout()
        return 1
    except OSError as e:
        # Standard output cannot be written (a full disk, /dev/full): the commands write
        # their files themselves and report what fails there, naming the file.
        if e.filename is not None or e.errno not in _WRITE_ERRNOS:
            raise
        _silence_stdout()
        print(f"lowp: error: cannot write to standard output: {e.strerror or e}", file=sys.stderr)
        return 1
    return rc


#: What writing to a full or failing standard output raises.
_WRITE_ERRNOS = {getattr(errno, n) for n in ("ENOSPC", "EIO", "EDQUOT", "EFBIG") if hasattr(errno, n)}


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):  # (a stdout without a file descriptor)
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
