"""lowp dtypes against ml_dtypes, measured side by side in one run.

Prints, for each dtype, at 1 and 2 threads: astype float32 -> dtype, dtype ->
float32, elementwise add / multiply / exp and np.sum, as time(ml_dtypes) / time(lowp)
(above 1: lowp is faster). Posits have no ml_dtypes counterpart: they are
compared with the ml_dtypes type of the same width (posit8: float8_e4m3fn,
posit16: bfloat16) and posit32 with numpy's float32 (marked "vs").

Usage: python benches/dtypes.py [--n 4194304] [--reps 5]
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

import lowp

NAMES = ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
         "posit8", "posit16", "posit32"]
STAND_IN = {"posit8": ("float8_e4m3fn", ml_dtypes.float8_e4m3fn), "posit16": ("bfloat16", ml_dtypes.bfloat16),
            "posit32": ("numpy float32", np.float32)}


def best(f, reps):
    f()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        t.append(time.perf_counter() - t0)
    return min(t)


def check(op: str, got, la, x) -> None:
    """Fail the run unless a timed lowp result is the exact one rounded once: casts and
    add/multiply (whose float64 results round into these types as the exact ones do)
    against float64 arithmetic rounded by a cast, so that a broken loop cannot look fast.
    The cast is ml_dtypes' where it has the type (independent of lowp), else lowp's."""
    v = la.astype(np.float64)
    to = getattr(ml_dtypes, la.dtype.name, la.dtype)
    ref = {"f32->dtype": lambda: x.astype(np.float64).astype(to), "dtype->f32": lambda: v.astype(np.float32),
           "add": lambda: (v + v).astype(to), "multiply": lambda: (v * v).astype(to)}.get(op)
    if ref is None:
        return
    want = np.asarray(ref()).astype(np.float64)
    got = np.asarray(got).astype(np.float64)
    if not np.array_equal(got, want, equal_nan=True):
        raise AssertionError(f"{la.dtype} {op}: {int((got != want).sum())} values differ from the exact ones rounded once")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    n, reps = args.n, args.reps
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    ops = ["f32->dtype", "dtype->f32", "add", "multiply", "exp", "sum"]
    print(f"n = {n}; ratio = time(ml_dtypes) / time(lowp); lowp time in ns/element")
    for threads in (1, 2):
        lowp.set_num_threads(threads)
        print(f"\nthreads = {threads}")
        print(f"{'dtype':18s}" + "".join(f"{o:>22s}" for o in ops))
        for name in NAMES:
            lt = getattr(lowp, name)
            label, mt = STAND_IN.get(name, (None, getattr(ml_dtypes, name, None)))
            la = x.astype(lt)
            ma = x.astype(mt)
            cells = []
            for op in ops:
                if op == "f32->dtype":
                    fl, fm = (lambda: x.astype(lt)), (lambda: x.astype(mt))
                elif op == "dtype->f32":
                    fl, fm = (lambda: la.astype(np.float32)), (lambda: ma.astype(np.float32))
                elif op == "sum":
                    fl, fm = (lambda: la.sum()), (lambda: ma.sum())
                else:
                    u = getattr(np, op)
                    if op == "exp":
                        fl, fm = (lambda u=u: u(la)), (lambda u=u: u(ma))
                    else:
                        fl, fm = (lambda u=u: u(la, la)), (lambda u=u: u(ma, ma))
                with np.errstate(all="ignore"):
                    tl = best(fl, reps)
                    tm = best(fm, reps)
                    check(op, fl(), la, x)
                cells.append(f"{tm / tl:8.2f}x ({tl / n * 1e9:5.2f} ns)")
            vs = f"  (vs {label})" if label else ""
            print(f"{name:18s}" + "".join(f"{c:>22s}" for c in cells) + vs)


if __name__ == "__main__":
    main()
