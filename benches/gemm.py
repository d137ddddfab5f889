"""GEMM throughput, measured side by side in one run at 1 and 2 threads.

Prints, for n x n x n products:
  * lowp.matmul GFLOP/s for every input format (float32 accumulation), and ratios
    against numpy float32 matmul (OpenBLAS sgemm), numpy's upcast-then-sgemm on
    ml_dtypes arrays (a.astype(f32) @ b.astype(f32)), and ml_dtypes' own np.dot
    (timed on the first rows and scaled: it is single-threaded, row by row);
  * int8 x int8 -> int32 GOP/s against numpy sgemm, and int8 vector and few-row
    products against numpy's float32;
  * stacks of small products (B x n x n, numpy matmul shapes) against numpy's float32
    matmul and np.matmul on ml_dtypes arrays (numpy's upcast to float32);
  * vector-matrix and matrix-vector products against numpy's float32 and np.matmul on
    ml_dtypes arrays, and float64 ones against numpy's float64;
  * products of few rows (m x 4096 x 4096, B row-major and as w.T) against numpy's float32;
  * emulated accumulation (every add rounded: fp16 accumulators, and e5m2 products into
    FloatFormat(6, 9) as in Wang et al. 2018) against lowp's f32 path, and a table of
    accumulator formats x rounding modes;
  * peak memory of a 2048^3 bfloat16 matmul (inputs + output + extra);
  * the leading-dimension experiment: an unpacked kernel and lowp.matmul at ld 1024 vs 1040.

Usage: python benches/gemm.py [--quick] [--sizes 256,512,...] [--sections f32,f64,int8,stacks,vectors,skinny,emulated,formats,memory,ld]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from fractions import Fraction

import ml_dtypes
import numpy as np

import lowp
from _blas import openblas_threads
from _check import check_product, exact_product
from lowp import _lowp
from lowp._convert import _round_exact


SET_BLAS_THREADS = openblas_threads()


def set_threads(t: int) -> None:
    lowp.set_num_threads(t)
    if SET_BLAS_THREADS is not None:
        SET_BLAS_THREADS(t)


def settle() -> None:
    """Let idle BLAS threads stop spinning: OpenBLAS workers busy-wait for a while
    after each call and would otherwise steal a core from the next contender
    measured (at 1 thread too: a spinning worker shares the machine)."""
    time.sleep(0.3)


#: Seconds of untimed calls before each timed block.
WARM = 0.03


def warm(f) -> None:
    """Call ``f`` (at least once) for WARM seconds: after settle()'s sleep the cores
    run slower for the first tens of milliseconds, and a block timed from its first
    call would measure that, not the library."""
    t0 = time.perf_counter()
    f()
    while time.perf_counter() - t0 < WARM:
        f()


def check(got, a, b, exact=None) -> None:
    """Fail the run unless ``got`` (a timed product of ``a`` and ``b``; ``exact``: their
    :func:`exact_product` where already computed) lies within the float32 accumulation
    bound of the exact product (int8 inputs: equal to it)."""
    exact = exact_product(a, b) if exact is None else exact
    a, b, got = np.asarray(a), np.asarray(b), np.asarray(got)
    if a.dtype == np.int8 and b.dtype == np.int8:
        if not np.array_equal(got.astype(np.float64), exact[0]):
            raise AssertionError(f"int8 product of shape {got.shape} is not exact")
        return
    rounded = got.dtype not in (np.float32, np.float64, np.int32, np.int64)  # (into a narrow type: its own rounding)
    # float64 sums (float64 and posit32 inputs): within twice float64's bound, as the
    # reference is a float64 sum itself.
    unit = 2.0**-52 if got.dtype == np.float64 else 2.0**-24
    check_product(got, exact, a.shape[-1], f"product of {a.dtype} x {b.dtype}", 2.0**-7 * rounded, unit)


def check_emulated(got, a, b, acc, chunk=None, rounding="nearest_even") -> None:
    """Fail the run unless an emulated product is right: to a deterministic rounding, its
    first 2 x 2 elements equal a reference adding the exact products one at a time in
    Fractions, rounding every sum once (``acc = round(acc + a*b)``, chunk totals added
    into the same format); stochastically, every element lies within the bound of sums
    each rounded by less than one unit of the accumulator (where that bound says
    anything)."""
    f = lowp.format(acc)
    got = np.asarray(got)
    k = a.shape[-1]
    if rounding == "stochastic":
        unit = 2.0 * float(f.eps)  # (an add's error is below one unit: twice the unit roundoff)
        if k * unit < 0.5:
            check_product(got, exact_product(a, b), k, f"emulated product into {f!r}", 0.0, unit)
        return
    av = np.asarray(a[:2]).astype(np.float64)
    bv = np.asarray(b[:, :2]).astype(np.float64)

    def rnd(v):
        # (An exact zero sum is +0 in every mode; a sum that overflowed stays a float
        # infinity, or NaN, from then on.)
        if isinstance(v, float) or v == 0:
            return v
        r = _round_exact(v, f, rounding)
        return Fraction(r) if math.isfinite(r) else r

    def add(x, y):
        return float(x) + float(y) if isinstance(x, float) or isinstance(y, float) else x + y

    for i in range(av.shape[0]):
        for j in range(bv.shape[1]):
            s, total = Fraction(0), Fraction(0)
            for p in range(k):
                s = rnd(add(s, Fraction(av[i, p]) * Fraction(bv[p, j])))
                if chunk is not None and ((p + 1) % chunk == 0 or p == k - 1):
                    total, s = rnd(add(total, s)), Fraction(0)
            want = float(total if chunk is not None else s)
            if not (float(got[i, j]) == want or math.isnan(want) and math.isnan(float(got[i, j]))) or \
                    (want == 0 and math.copysign(1, want) != math.copysign(1, float(got[i, j]))):
                raise AssertionError(f"emulated product into {f!r} ({rounding}, chunk {chunk}): element "
                                     f"({i}, {j}) is {float(got[i, j])!r}, the per-add reference {want!r}")


def best(f, reps: int) -> float:
    settle()
    warm(f)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def best_pair(f, g, reps: int, rounds: int = 4) -> tuple[float, float]:
    """Best times of ``f`` and ``g`` measured in alternating blocks (``rounds`` blocks
    each, the ``reps`` calls split among them), so that both are timed over the same
    stretch of time on this shared machine; each block starts settled and warm."""
    per = max(1, -(-reps // rounds))
    tf, tg = [], []
    for _ in range(rounds):
        for fn, ts in ((f, tf), (g, tg)):
            settle()
            warm(fn)
            for _ in range(per):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
    return min(tf), min(tg)


FORMATS = [
    ("float32", np.float32),
    ("float16", np.float16),
    ("bfloat16", ml_dtypes.bfloat16),
    ("e4m3fn", ml_dtypes.float8_e4m3fn),
    ("e5m2", ml_dtypes.float8_e5m2),
    ("e4m3fnuz", ml_dtypes.float8_e4m3fnuz),
]
# Posits have no ml_dtypes type; lowp's own dtypes (when present) stand in.
FORMATS += [(name, getattr(lowp, name)) for name in ("posit8", "posit16") if hasattr(lowp, name)]


def ml_dot_time(x, y, budget: float = 1.0) -> float:
    """Seconds of ml_dtypes' ``np.dot(x, y)``: the dtype's own dot function, in the type
    (``x @ y`` on ml_dtypes arrays is numpy's upcast, the column before). It computes
    row by row on one thread, so it is timed on the first rows of ``x`` (as many as
    take about ``budget`` seconds, at least one) and scaled to all of them: a full
    2048^3 fp8 product would take minutes."""
    t0 = time.perf_counter()
    np.dot(x[:1], y)
    one = time.perf_counter() - t0
    r = int(min(x.shape[0], max(1, budget / max(one, 1e-9))))
    t0 = time.perf_counter()
    np.dot(x[:r], y)
    return (time.perf_counter() - t0) * x.shape[0] / r


def throughput(sizes, quick: bool) -> None:
    g = np.random.default_rng(0)
    print("== float32 accumulation: GFLOP/s and ratios (lowp / other; > 1 means lowp is faster)")
    print(f"{'n':>5} {'thr':>3} {'format':>9} {'lowp':>7} {'sgemm':>7} {'vs sgemm':>8} {'vs upcast':>9} {'vs ml np.dot':>12}")
    for n in sizes:
        flop = 2.0 * n**3
        # Small products take a few milliseconds: more of them, in more alternating
        # blocks, so that a stretch of machine noise does not decide a cell.
        reps, rounds = (24, 6) if n <= 512 else (5, 4) if n <= 1024 else (3, 4)
        x32 = g.standard_normal((n, n)).astype(np.float32)
        y32 = g.standard_normal((n, n)).astype(np.float32)
        exact: dict = {}  # (each format's exact product, computed once for both thread counts)
        dot_time: dict = {}  # (ml_dtypes' np.dot is single-threaded: timed once)
        for t in (1, 2):
            set_threads(t)
            for name, dt in FORMATS:
                x = x32.astype(dt)
                y = y32.astype(dt)
                # sgemm and lowp are timed in alternating blocks, so that each ratio
                # compares measurements taken over the same stretch of time.
                t_sgemm, t_lowp = best_pair(lambda: x32 @ y32, lambda: lowp.matmul(x, y), reps, rounds)
                if name not in exact:
                    exact[name] = exact_product(x, y)
                check(lowp.matmul(x, y), x, y, exact[name])
                if dt is np.float32:
                    up = "-"
                else:
                    t_up = best(lambda: x.astype(np.float32) @ y.astype(np.float32), reps)
                    up = f"{t_up / t_lowp:9.2f}"
                mld = "-"
                if dt is not np.float32 and not name.startswith("posit"):
                    if name not in dot_time:
                        dot_time[name] = ml_dot_time(x, y)
                    mld = f"{dot_time[name] / t_lowp:12.0f}"
                print(f"{n:5d} {t:3d} {name:>9} {flop / t_lowp / 1e9:7.1f} {flop / t_sgemm / 1e9:7.1f} "
                      f"{t_sgemm / t_lowp:8.2f} {up:>9} {mld:>12}", flush=True)


def int8(sizes) -> None:
    g = np.random.default_rng(1)
    print("\n== int8 x int8 -> int32 (exact): GOP/s against numpy float32 sgemm GFLOP/s")
    print(f"{'n':>5} {'thr':>3} {'int8 GOP/s':>10} {'sgemm':>7} {'ratio':>6}")
    for n in sizes:
        reps = 5 if n <= 512 else 3 if n <= 1024 else 2
        a = g.integers(-128, 128, (n, n)).astype(np.int8)
        b = g.integers(-128, 128, (n, n)).astype(np.int8)
        x = g.standard_normal((n, n)).astype(np.float32)
        for t in (1, 2):
            set_threads(t)
            ts, ti = best_pair(lambda: x @ x, lambda: lowp.matmul(a, b), reps)
            check(lowp.matmul(a, b), a, b)
            op = 2.0 * n**3
            print(f"{n:5d} {t:3d} {op / ti / 1e9:10.1f} {op / ts / 1e9:7.1f} {ts / ti:6.2f}", flush=True)


def int8_vectors() -> None:
    """int8 products of few rows and matrix-vector products (B read in place, once),
    against numpy's float32 on the same layout: B row-major or as w.T (the transposed
    view of a row-major weight matrix)."""
    g = np.random.default_rng(5)
    print("\n== int8 x int8 -> int32 vector and few-row products: milliseconds; ratio numpy f32 / lowp int8")
    print(f"{'m x k x n':>18} {'B':>5} {'thr':>3} {'lowp int8':>9} {'np f32':>7} {'ratio':>6}")
    for m, k, n in ((1, 4096, 4096), (4, 4096, 4096), (8, 4096, 4096), (4096, 4096, 1), (1, 4096, 11008), (1, 1024, 1024),
                    (1024, 1024, 1)):
        a = g.integers(-128, 128, (m, k)).astype(np.int8)
        w = g.integers(-128, 128, (n, k)).astype(np.int8)
        a32, w32 = a.astype(np.float32), w.astype(np.float32)
        for layout in (("rows", "w.T") if n > 1 else ("col",)):
            b, b32 = (np.ascontiguousarray(w.T), np.ascontiguousarray(w32.T)) if layout != "w.T" else (w.T, w32.T)
            for t in (1, 2):
                set_threads(t)
                ts, ti = best_pair(lambda: a32 @ b32, lambda: lowp.matmul(a, b), 10, rounds=3)
                check(lowp.matmul(a, b), a, b)
                print(f"{f'{m} x {k} x {n}':>18} {layout:>5} {t:3d} {ti * 1e3:9.3f} {ts * 1e3:7.3f} {ts / ti:6.2f}", flush=True)


def stacks() -> None:
    """Stacks of small products (numpy matmul shapes (B, n, n) @ (B, n, n)): lowp on
    bfloat16 against numpy's float32 matmul of the same stack and np.matmul on
    ml_dtypes' bfloat16 arrays (numpy's upcast to float32: its matmul has no bfloat16
    loop); and every add rounded into float16."""
    g = np.random.default_rng(3)
    print("\n== stacks of small products: milliseconds a stack; ratios other / lowp (> 1: lowp is faster)")
    print(f"{'B x n^3':>10} {'thr':>3} {'lowp bf16':>9} {'np f32':>7} {'vs f32':>6} {'up bf16':>7} {'vs up':>6} {'emu fp16':>8}")
    for bsz, n in ((1000, 8), (200, 32), (20, 128)):
        x32 = g.standard_normal((bsz, n, n)).astype(np.float32)
        y32 = g.standard_normal((bsz, n, n)).astype(np.float32)
        x, y = x32.astype(ml_dtypes.bfloat16), y32.astype(ml_dtypes.bfloat16)
        for t in (1, 2):
            set_threads(t)
            t32, tl = best_pair(lambda: np.matmul(x32, y32), lambda: lowp.matmul(x, y), 12, rounds=4)
            check(lowp.matmul(x, y), x, y)
            tml = best(lambda: np.matmul(x, y), 3)
            te = best(lambda: lowp.matmul(x, y, accumulate="float16"), 5)
            if t == 1:
                check_emulated(lowp.matmul(x[-1], y[-1], accumulate="float16"), x[-1], y[-1], "float16")
            print(f"{f'{bsz} x {n}^3':>10} {t:3d} {tl * 1e3:9.3f} {t32 * 1e3:7.3f} {t32 / tl:6.2f} {tml * 1e3:7.3f} "
                  f"{tml / tl:6.2f} {te * 1e3:8.3f}", flush=True)


def vectors() -> None:
    """Vector-matrix and matrix-vector products (a row of A, or a column of B): lowp on
    bfloat16, float32 and the fp8 formats (both operands in the format) against
    numpy's float32 (sgemv) and np.matmul on ml_dtypes' bfloat16 and float8_e4m3fn
    arrays (numpy's upcast to float32). Memory-bound: B (or A) is read once."""
    g = np.random.default_rng(4)
    print("\n== vector products: milliseconds; ratios other / lowp (> 1: lowp is faster)")
    print(f"{'m x k x n':>18} {'thr':>3} {'lowp bf16':>9} {'lowp f32':>8} {'np f32':>7} {'vs f32':>6} {'up bf16':>7} {'vs up':>6} "
          f"{'lowp e4m3':>9} {'lowp e5m2':>9} {'up e4m3':>7} {'vs up':>6}")
    for m, k, n in ((1, 4096, 4096), (4096, 4096, 1), (1, 4096, 11008), (11008, 4096, 1), (1, 1024, 1024), (1024, 1024, 1)):
        x32 = g.standard_normal((m, k)).astype(np.float32)
        y32 = g.standard_normal((k, n)).astype(np.float32)
        x, y = x32.astype(ml_dtypes.bfloat16), y32.astype(ml_dtypes.bfloat16)
        x4, y4 = x32.astype(ml_dtypes.float8_e4m3fn), y32.astype(ml_dtypes.float8_e4m3fn)
        x5, y5 = x32.astype(ml_dtypes.float8_e5m2), y32.astype(ml_dtypes.float8_e5m2)
        for t in (1, 2):
            set_threads(t)
            t32, tl = best_pair(lambda: np.matmul(x32, y32), lambda: lowp.matmul(x, y), 12, rounds=4)
            tl32 = best(lambda: lowp.matmul(x32, y32), 6)
            tml = best(lambda: np.matmul(x, y), 2)
            tl4 = best(lambda: lowp.matmul(x4, y4), 6)
            tl5 = best(lambda: lowp.matmul(x5, y5), 6)
            tml4 = best(lambda: np.matmul(x4, y4), 2)
            for u, v in ((x, y), (x32, y32), (x4, y4), (x5, y5)):
                check(lowp.matmul(u, v), u, v)
            print(f"{f'{m} x {k} x {n}':>18} {t:3d} {tl * 1e3:9.3f} {tl32 * 1e3:8.3f} {t32 * 1e3:7.3f} {t32 / tl:6.2f} "
                  f"{tml * 1e3:7.3f} {tml / tl:6.2f} {tl4 * 1e3:9.3f} {tl5 * 1e3:9.3f} {tml4 * 1e3:7.3f} {tml4 / tl4:6.2f}", flush=True)


def vectors_fp8() -> None:
    """Vector and few-row products with B in the other fp8 formats (the AMD-style
    float8_e4m3fnuz and float8_e5m2fnuz, the IEEE-style float8_e4m3): float32 rows of A
    times fp8 weights, B row-major and as w.T, and the matrix-vector product, against
    numpy's float32 on the same layout and np.matmul on ml_dtypes arrays (both operands
    in the format; numpy's upcast to float32)."""
    g = np.random.default_rng(8)
    fmts = (("e4m3fnuz", ml_dtypes.float8_e4m3fnuz), ("e5m2fnuz", ml_dtypes.float8_e5m2fnuz), ("e4m3", ml_dtypes.float8_e4m3))
    print("\n== fp8 weights of the other formats: milliseconds; ratios other / lowp (> 1: lowp is faster)")
    print(f"{'m x k x n':>16} {'B':>5} {'thr':>3} {'np f32':>7} " + " ".join(f"{name:>9} {'vs f32':>6} {'vs up':>6}" for name, _ in fmts))
    k = n = 4096
    w32 = g.standard_normal((n, k)).astype(np.float32)
    ws = [w32.astype(dt) for _, dt in fmts]
    for m, layout in ((1, "rows"), (1, "w.T"), (4, "rows"), (4, "w.T"), (4096, "-")):
        x32 = g.standard_normal((m, k) if layout != "-" else (k, 1)).astype(np.float32)
        pick = {"rows": lambda w: np.ascontiguousarray(w.T), "w.T": lambda w: w.T, "-": lambda w: w}[layout]
        # (A row-major matrix times a vector: the weights on the left.)
        args = (lambda w: (pick(w), x32)) if layout == "-" else (lambda w: (x32, pick(w)))
        a32, b32 = args(w32)
        ops = [args(w) for w in ws]
        for t in (1, 2):
            set_threads(t)
            t32 = best(lambda: np.matmul(a32, b32), 8)
            cells = []
            for (_, dt), (a, b) in zip(fmts, ops):
                tl = best(lambda: lowp.matmul(a, b), 8)
                check(lowp.matmul(a, b), a, b)
                # (ml_dtypes: the float32 operand in the format too.)
                a8, b8 = (a, b.astype(dt)) if layout == "-" else (a.astype(dt), b)
                tml = best(lambda: np.matmul(a8, b8), 1)
                cells.append(f"{tl * 1e3:9.3f} {t32 / tl:6.2f} {tml / tl:6.1f}")
            shape = f"{m} x {k} x {n}" if layout != "-" else f"{k} x {n} x 1"
            print(f"{shape:>16} {layout:>5} {t:3d} {t32 * 1e3:7.3f} " + " ".join(cells), flush=True)


def vectors64() -> None:
    """float64 vector and few-row products (float64 inputs accumulate in float64) against
    numpy's float64 (dgemv/dgemm): B row-major and as w.T (x @ w.T), and a matrix times a
    vector. Memory-bound: B (or A) is read once, 8 bytes a value."""
    g = np.random.default_rng(5)
    print("\n== float64 vector products: milliseconds; ratio numpy / lowp (> 1: lowp is faster)")
    print(f"{'m x k x n':>18} {'B':>5} {'thr':>3} {'lowp':>8} {'numpy':>8} {'ratio':>6}")
    for m, k, n, layout in ((1, 4096, 4096, "rows"), (1, 4096, 4096, "w.T"), (4096, 4096, 1, "-"), (4, 4096, 4096, "rows"),
                            (4, 4096, 4096, "w.T"), (8, 4096, 4096, "w.T"), (1, 1024, 1024, "rows"), (1024, 1024, 1, "-")):
        x = g.standard_normal((m, k))
        y = g.standard_normal((n, k)).T if layout == "w.T" else g.standard_normal((k, n))
        for t in (1, 2):
            set_threads(t)
            tn, tl = best_pair(lambda: x @ y, lambda: lowp.matmul(x, y), 8, rounds=4)
            check(lowp.matmul(x, y), x, y)
            print(f"{f'{m} x {k} x {n}':>18} {layout:>5} {t:3d} {tl * 1e3:8.3f} {tn * 1e3:8.3f} {tn / tl:6.2f}", flush=True)


def squares64(sizes) -> None:
    """float64 products (float64 accumulation) against numpy's float64 matmul (dgemm),
    n x n x n, 1 and 2 threads."""
    g = np.random.default_rng(11)
    print("\n== float64: GFLOP/s; ratio lowp / numpy (> 1: lowp is faster)")
    print(f"{'n':>6} {'thr':>3} {'lowp':>8} {'numpy':>8} {'ratio':>6}")
    for n in sizes:
        a, b = g.standard_normal((n, n)), g.standard_normal((n, n))
        for t in (1, 2):
            set_threads(t)
            tn, tl = best_pair(lambda: a @ b, lambda: lowp.matmul(a, b), 3 if n >= 2048 else 6, rounds=2)
            check(lowp.matmul(a, b), a, b)
            gf = 2 * n**3 / 1e9
            print(f"{n:6d} {t:3d} {gf / tl:8.1f} {gf / tn:8.1f} {tn / tl:6.2f}", flush=True)


def skinny() -> None:
    """Products of few rows (a batch of tokens times a weight matrix, m x 4096 x 4096): B
    row-major, and as the transposed view of a row-major weight matrix w (x @ w.T, whose
    columns are contiguous), lowp on bfloat16 and float32 against numpy's float32 matmul
    on the same layout, and lowp with bfloat16 rows times an e4m3fn B (weights stored in
    fp8). B is read from memory once or twice: packing order decides."""
    g = np.random.default_rng(7)
    print("\n== few rows: milliseconds; ratios numpy f32 / lowp (> 1: lowp is faster)")
    print(f"{'m x k x n':>16} {'B':>8} {'thr':>3} {'lowp bf16':>9} {'lowp f32':>8} {'np f32':>7} {'vs bf16':>7} {'vs f32':>6} "
          f"{'bf16 x e4m3fn':>13} {'vs np':>6}")
    k = n = 4096
    w32 = g.standard_normal((n, k)).astype(np.float32)
    w = w32.astype(ml_dtypes.bfloat16)
    w8 = w32.astype(ml_dtypes.float8_e4m3fn)
    for m in (1, 2, 4, 8, 32, 128):
        x32 = g.standard_normal((m, k)).astype(np.float32)
        x = x32.astype(ml_dtypes.bfloat16)
        for layout in ("rows", "w.T"):
            b32, b = (np.ascontiguousarray(w32.T), np.ascontiguousarray(w.T)) if layout == "rows" else (w32.T, w.T)
            b8 = np.ascontiguousarray(w8.T) if layout == "rows" else w8.T
            for t in (1, 2):
                set_threads(t)
                t32, tl = best_pair(lambda: x32 @ b32, lambda: lowp.matmul(x, b), 8, rounds=4)
                tl32 = best(lambda: lowp.matmul(x32, b32), 6)
                t8 = best(lambda: lowp.matmul(x, b8), 6)
                for u, v in ((x, b), (x32, b32), (x, b8)):
                    check(lowp.matmul(u, v), u, v)
                print(f"{f'{m} x {k} x {n}':>16} {layout:>8} {t:3d} {tl * 1e3:9.3f} {tl32 * 1e3:8.3f} {t32 * 1e3:7.3f} "
                      f"{t32 / tl:7.2f} {t32 / tl32:6.2f} {t8 * 1e3:13.3f} {t32 / t8:6.2f}", flush=True)


def few_columns() -> None:
    """A matrix times a few columns (a block of vectors, 4096 x 4096 x n), A row-major:
    lowp on bfloat16, float32, float16, float8_e4m3fn, int8 and float64 against numpy's
    matmul in float32 and float64. lowp runs up to 8 columns transposed through its vector
    paths (A's rows as columns); from 16 on, the loop nest reads float32, float64, bf16
    (up to 64 columns) and fp16 (up to 16) A's rows in place, and packs the others."""
    g = np.random.default_rng(9)
    print("\n== few columns: milliseconds; ratios numpy / lowp (> 1: lowp is faster)")
    print(f"{'m x k x n':>16} {'thr':>3} {'lowp bf16':>9} {'lowp f32':>8} {'np f32':>7} {'vs bf16':>7} {'vs f32':>6} "
          f"{'lowp f16':>8} {'vs f32':>6} {'lowp e4m3':>9} {'vs f32':>6} "
          f"{'lowp int8':>9} {'vs f32':>6} {'lowp f64':>8} {'np f64':>7} {'vs f64':>6}")
    m = k = 4096
    w64 = g.standard_normal((m, k))
    w32 = w64.astype(np.float32)
    w = w32.astype(ml_dtypes.bfloat16)
    w8 = g.integers(-128, 128, (m, k)).astype(np.int8)
    w16, we4 = w32.astype(np.float16), w32.astype(ml_dtypes.float8_e4m3fn)
    for n in (2, 4, 8, 16, 64, 256):
        x64 = g.standard_normal((k, n))
        x32 = x64.astype(np.float32)
        x = x32.astype(ml_dtypes.bfloat16)
        x16, xe4 = x32.astype(np.float16), x32.astype(ml_dtypes.float8_e4m3fn)
        x8 = g.integers(-128, 128, (k, n)).astype(np.int8)
        for t in (1, 2):
            set_threads(t)
            t32, tl = best_pair(lambda: w32 @ x32, lambda: lowp.matmul(w, x), 8, rounds=4)
            tl32 = best(lambda: lowp.matmul(w32, x32), 6)
            t16 = best(lambda: lowp.matmul(w16, x16), 6)
            te4 = best(lambda: lowp.matmul(we4, xe4), 6)
            t8 = best(lambda: lowp.matmul(w8, x8), 6)
            t64, tl64 = best_pair(lambda: w64 @ x64, lambda: lowp.matmul(w64, x64), 6, rounds=2)
            for u, v in ((w, x), (w32, x32), (w16, x16), (we4, xe4), (w8, x8), (w64, x64)):
                check(lowp.matmul(u, v), u, v)
            print(f"{f'{m} x {k} x {n}':>16} {t:3d} {tl * 1e3:9.3f} {tl32 * 1e3:8.3f} {t32 * 1e3:7.3f} {t32 / tl:7.2f} "
                  f"{t32 / tl32:6.2f} {t16 * 1e3:8.3f} {t32 / t16:6.2f} {te4 * 1e3:9.3f} {t32 / te4:6.2f} "
                  f"{t8 * 1e3:9.3f} {t32 / t8:6.2f} {tl64 * 1e3:8.3f} {t64 * 1e3:7.3f} {t64 / tl64:6.2f}", flush=True)


def emulated(sizes) -> None:
    g = np.random.default_rng(2)
    print("\n== emulated accumulation (every add rounded) vs lowp's own f32 path, same inputs")
    print("   fp16 accumulators; and e5m2 products into FloatFormat(6, 9) accumulators (acc f6m9),")
    print("   the configuration of Wang et al. 2018 (chunks of 64)")
    print(f"{'n':>5} {'thr':>3} {'inputs':>8} {'acc':>5} {'mode/rbits':>13} {'chunk':>5} {'GFLOP/s':>8} {'f32 path':>8} {'ratio':>6}")
    f6m9 = lowp.FloatFormat(6, 9)
    # Stochastic with the default 32 random bits, and with 13 (the bits a float32 sum
    # keeps below float16's unit), unchunked and in chunks of 64.
    fp16_runs = (("float16", "nearest_even", None, None), ("float16", "nearest_even", 64, None),
                 ("float16", "stochastic", None, None), ("float16", "stochastic", 64, None),
                 ("float16", "stochastic", None, 13), ("float16", "stochastic", 64, 13))
    wang_runs = ((f6m9, "nearest_even", None, None), (f6m9, "nearest_even", 64, None))
    for n in sizes:
        for name, dt, runs in (("bfloat16", ml_dtypes.bfloat16, fp16_runs), ("e4m3fn", ml_dtypes.float8_e4m3fn, fp16_runs),
                               ("e5m2", ml_dtypes.float8_e5m2, wang_runs)):
            a = g.standard_normal((n, n)).astype(np.float32).astype(dt)
            b = g.standard_normal((n, n)).astype(np.float32).astype(dt)
            for t in (1, 2):
                set_threads(t)
                for acc, mode, chunk, rbits in runs:
                    tf, te = best_pair(lambda: lowp.matmul(a, b),
                                       lambda: lowp.matmul(a, b, accumulate=acc, chunk=chunk, rounding=mode,
                                                           seed=1, rbits=rbits),
                                       4, rounds=2)
                    if t == 1:
                        check_emulated(lowp.matmul(a, b, accumulate=acc, chunk=chunk, rounding=mode, seed=1, rbits=rbits),
                                       a, b, acc, chunk, mode)
                    op = 2.0 * n**3
                    label = mode if rbits is None else f"{mode[:10]}/{rbits}"
                    acc_name = "fp16" if acc == "float16" else "f6m9"
                    print(f"{n:5d} {t:3d} {name:>8} {acc_name:>5} {label:>13} {str(chunk):>5} {op / te / 1e9:8.2f} "
                          f"{op / tf / 1e9:8.1f} {tf / te:6.3f}", flush=True)


def emulated_vectors() -> None:
    """Emulated products of one or few rows, and of one column (run transposed), on bf16,
    fp16, e4m3fn and e5m2 operands, against lowp's own f32 path on the same shape."""
    g = np.random.default_rng(6)
    runs = (("float16", "nearest_even"), ("bfloat16", "nearest_even"), ("float16", "toward_zero"), ("float16", "stochastic"))
    labels = ("fp16 nearest", "bf16 nearest", "fp16 to zero", "fp16 stochastic")
    print("\n== emulated products of few rows: ms (ratio to lowp's own f32 path); accumulator and mode")
    print(f"{'inputs':>6} {'m x k x n':>17} {'thr':>3} {'f32 path':>9} " + " ".join(f"{x:>17}" for x in labels))
    shapes16 = ((1, 4096, 4096, 1), (1, 4096, 4096, 2), (4, 4096, 4096, 1), (8, 4096, 4096, 1), (4096, 4096, 1, 1),
                (1, 1024, 1024, 1), (1024, 1024, 1, 1))
    shapes8 = ((1, 4096, 4096, 1), (4, 4096, 4096, 1), (8, 4096, 4096, 1), (1, 1024, 1024, 1))
    for name, dt, shapes in (("bf16", ml_dtypes.bfloat16, shapes16), ("fp16", np.float16, shapes16),
                             ("e4m3fn", ml_dtypes.float8_e4m3fn, shapes8), ("e5m2", ml_dtypes.float8_e5m2, shapes8)):
        for m, k, n, t in shapes:
            set_threads(t)
            a = g.standard_normal((m, k)).astype(np.float32).astype(dt)
            b = g.standard_normal((k, n)).astype(np.float32).astype(dt)
            tf = best(lambda: lowp.matmul(a, b), 6)
            cells = []
            for acc, mode in runs:
                te = best(lambda: lowp.matmul(a, b, accumulate=acc, rounding=mode, seed=1), 3)
                check_emulated(lowp.matmul(a, b, accumulate=acc, rounding=mode, seed=1), a, b, acc, None, mode)
                cells.append(f"{te * 1e3:9.3f} ({tf / te:5.3f})")
            print(f"{name:>6} {f'{m} x {k} x {n}':>17} {t:3d} {tf * 1e3:9.3f} " + " ".join(f"{c:>17}" for c in cells), flush=True)


def emulated_formats(n: int) -> None:
    """Every add rounded into several accumulator formats and modes (1 thread)."""
    g = np.random.default_rng(4)
    accs = ("float16", "bfloat16", "float8_e5m2", lowp.FloatFormat(6, 9), "float32")
    # (rounding, rbits): stochastic with the default 32 random bits, and with 13.
    modes = (("nearest_even", None), ("toward_zero", None), ("up", None), ("stochastic", None), ("stochastic", 13))
    print(f"\n== emulated accumulation, n = {n}, 1 thread: ratio to lowp's own f32 path (its GFLOP/s in brackets)")
    print(f"{'inputs':>8} {'accumulator':>18} " + " ".join(f"{m if r is None else f'{m[:10]}/{r}':>13}" for m, r in modes))
    set_threads(1)
    for name, dt in (("bfloat16", ml_dtypes.bfloat16), ("e4m3fn", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2),
                     ("float16", np.float16)):
        a = g.standard_normal((n, n)).astype(np.float32).astype(dt)
        b = g.standard_normal((n, n)).astype(np.float32).astype(dt)
        for acc in accs:
            cells = []
            for mode, rbits in modes:
                if rbits is not None and acc == "float32":
                    cells.append("-")
                    continue
                tf, te = best_pair(lambda: lowp.matmul(a, b),
                                   lambda: lowp.matmul(a, b, accumulate=acc, rounding=mode, seed=1, rbits=rbits), 4, rounds=2)
                check_emulated(lowp.matmul(a, b, accumulate=acc, rounding=mode, seed=1, rbits=rbits), a, b, acc, None, mode)
                cells.append(f"{tf / te:6.3f} ({2.0 * n**3 / te / 1e9:4.1f})")
            print(f"{name:>8} {str(acc):>18} " + " ".join(f"{c:>13}" for c in cells), flush=True)


PEAK_SCRIPT = r"""
import resource, sys
import numpy as np, ml_dtypes, lowp
n = int(sys.argv[1])
g = np.random.default_rng(0)
# bf16 codes of values in +-[1, 2), drawn in small row blocks (no large temporaries).
def codes():
    x = np.empty((n, n), np.uint16)
    for i in range(0, n, 64):
        blk = g.integers(0x3f80, 0x4000, (min(64, n - i), n), dtype=np.uint16)
        x[i:i + 64] = blk | (g.integers(0, 2, blk.shape, dtype=np.uint16) << 15)
    return x.view(ml_dtypes.bfloat16)
a = codes()
b = codes()
out = np.ones((n, n), np.float32)  # touched, so its pages count in the baseline
lowp.matmul(a[:8, :8], b[:8, :8])  # load everything once
def status(key):  # kB
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))
try:
    # Reset the peak resident size to the current one, so that the peak below is
    # this product's alone (not an earlier transient's).
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    base = status("VmRSS")
    lowp.matmul(a, b, out=out)
    peak = status("VmHWM")
except OSError:
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    lowp.matmul(a, b, out=out)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(base, peak, a.nbytes + b.nbytes + out.nbytes, lowp.get_num_threads())
"""


def peak_memory(n: int = 2048) -> None:
    print(f"\n== peak memory of a {n}^3 bfloat16 matmul (float32 out, fresh process)")
    r = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, str(n)], capture_output=True, text=True, check=True)
    base, peak, data, threads = (int(v) for v in r.stdout.split())
    extra = (peak - base) / 1024
    print(f"inputs + output: {data / 2**20:.1f} MiB; extra during the matmul ({threads} threads): {extra:.1f} MiB "
          f"(limit 64 MB, {64e6 / 2**20:.1f} MiB): {'ok' if extra * 2**20 <= 64e6 else 'OVER'}")
    print("  (for comparison, an f32 copy of both inputs alone is "
          f"{2 * n * n * 4 / 2**20:.0f} MiB)")


def leading_dimension(quick: bool) -> None:
    print("\n== leading dimension: rows of 1024 float32 (4096 B, every row in one L1 set) vs padded 1040")
    n = 1024
    m_unp = 128 if quick else 256
    g = np.random.default_rng(3)
    print(f"{'ld':>5} {'unpacked kernel GFLOP/s':>24} {'lowp.matmul GFLOP/s':>20}")
    set_threads(1)
    ops = {}
    for ld in (1024, lowp.padded_ld(1024, np.float32)):
        def mk(rows, cols, ld=ld):
            base = np.empty((rows, ld), np.float32)
            base[:, :cols] = g.standard_normal((rows, cols))
            return base[:, :cols]
        ops[ld] = (mk(n, n), mk(n, n), mk(n, n))
    # The two leading dimensions timed in alternating rounds (the machine's speed
    # drifts over minutes); the best time of each.
    tu = {ld: np.inf for ld in ops}
    tm = {ld: np.inf for ld in ops}
    for _ in range(2 if quick else 4):
        for ld, (a, b, c) in ops.items():
            au, cu = a[:m_unp], c[:m_unp]
            tu[ld] = min(tu[ld], best(lambda: _lowp.matmul_unpacked_f32(au, b, cu), 1))
            check(cu, au, b)
            tm[ld] = min(tm[ld], best(lambda: lowp.matmul(a, b, out=c), 2))
            check(c, a, b)
    res = {ld: (2.0 * m_unp * n * n / tu[ld] / 1e9, 2.0 * n**3 / tm[ld] / 1e9) for ld in ops}
    for ld, (u, m) in res.items():
        print(f"{ld:5d} {u:24.2f} {m:20.1f}", flush=True)
    (u0, m0), (u1, m1) = res.values()
    print(f"speedup of ld 1040 over 1024: unpacked {u1 / u0:.2f}x, lowp.matmul {m1 / m0:.2f}x "
          f"(packing copies the operands into alias-free strips)")


SECTIONS = ("f32", "f64", "int8", "stacks", "vectors", "skinny", "emulated", "formats", "memory", "ld")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="n = 256, 512, 1024; the f32, emulated, formats and ld sections shortened "
                    "(the others run in full)")
    ap.add_argument("--sizes", type=str, default=None, help="comma-separated sizes")
    ap.add_argument("--sections", type=str, default=",".join(SECTIONS),
                    help=f"comma-separated sections to run (default: all of {','.join(SECTIONS)})")
    args = ap.parse_args()
    run = args.sections.split(",")
    if not set(run) <= set(SECTIONS):
        ap.error(f"--sections: unknown {sorted(set(run) - set(SECTIONS))}; accepted: {','.join(SECTIONS)}")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([256, 512, 1024] if args.quick else [256, 512, 1024, 2048])
    print(f"lowp {lowp.__version__}, isa {_lowp.get_isa()}, numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}; "
          f"numpy BLAS threads {'controlled' if SET_BLAS_THREADS else 'NOT controlled'}")
    n0 = lowp.get_num_threads()
    try:
        if "f32" in run:
            throughput(sizes, args.quick)
        if "f64" in run:
            squares64(sizes)
        if "int8" in run:
            int8(sizes)
            int8_vectors()
        if "stacks" in run:
            stacks()
        if "vectors" in run:
            vectors()
            vectors_fp8()
            vectors64()
        if "skinny" in run:
            skinny()
            few_columns()
        if "emulated" in run:
            emulated([256] if args.quick else [256, 512])
            emulated_vectors()
        if "formats" in run:
            emulated_formats(256 if args.quick else 512)
        if "memory" in run:
            peak_memory(2048)
        if "ld" in run:
            leading_dimension(args.quick)
    finally:
        set_threads(n0)


if __name__ == "__main__":
    main()
