"""The ``lowp`` command line."""

from __future__ import annotations

import argparse
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="lowp", description="Low-precision numerics for NumPy.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="print every named format with its layout and limits")
    p_info.set_defaults(func=_info)
    from .training.experiment import add_subparser as _add_experiment

    _add_experiment(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
