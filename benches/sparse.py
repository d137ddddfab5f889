"""lowp.sparse against scipy.sparse and numpy sgemm, measured side by side in one run.

    python benches/sparse.py [--quick]

Prints GFLOP/s (2 * nonzeros * columns / time, or 2 * m * n * columns for dense)
and ratios at 1 and 2 threads. scipy.sparse is single-threaded, so its time is
measured once; numpy's OpenBLAS is set to the same thread count as lowp and the
dense baseline is measured at each thread count.
"""

from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np
import scipy.sparse as sp

import lowp
from _blas import openblas_threads
from _check import check_product, exact_product
from lowp import sparse


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter measurements (the same products)")
    return ap.parse_args()


QUICK = _args().quick if __name__ == "__main__" else False
BUDGET = 0.15 if QUICK else 0.4  # seconds per measurement


SET_BLAS_THREADS = openblas_threads()


def set_threads(t):
    """lowp's and numpy's BLAS thread counts, matched."""
    lowp.set_num_threads(t)
    if SET_BLAS_THREADS is not None:
        SET_BLAS_THREADS(t)


def settle():
    """Let idle OpenBLAS workers stop spinning (they busy-wait for a while after each
    call and would otherwise take the second core from the next measurement)."""
    time.sleep(0.3)


def best(fn, budget=BUDGET):
    """Best time of repeated calls within about ``budget`` seconds (at least 3 calls)."""
    settle()
    fn()
    ts = []
    t_end = time.perf_counter() + budget
    while len(ts) < 3 or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if len(ts) >= 50:
            break
    return min(ts)


def best_interleaved(fns, budget=2 * BUDGET):
    """Best time of each of ``fns``, called in turn (at least 5 rounds), so that every
    function sees the same machine state; for ratios between close competitors."""
    settle()
    for fn in fns:
        fn()
    ts = [[] for _ in fns]
    t_end = time.perf_counter() + budget
    while len(ts[0]) < 5 or time.perf_counter() < t_end:
        for fn, t in zip(fns, ts):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
        if len(ts[0]) >= 100:
            break
    return [min(t) for t in ts]


def gflops(flops, t):
    return flops / t / 1e9


def verdict(r, target):
    return "ok" if r >= target else "below target"


def reference(mat, x):
    """``(exact, k)``: the exact product of ``mat`` (a dense array or a scipy matrix,
    kept sparse) with ``x`` and of their magnitudes, in float64, and the most nonzeros
    a row holds (the length of the longest sum)."""
    if sp.issparse(mat):
        m64, x64 = mat.astype(np.float64), np.asarray(x, np.float64)
        k = int(np.diff(sp.csr_array(mat).indptr).max(initial=0))
        return (m64 @ x64, abs(m64) @ np.abs(x64)), max(1, k)
    return exact_product(mat, x), max(1, int((np.asarray(mat) != 0).sum(axis=1).max()))


def check(got, ref):
    """Fail the run unless ``got`` (a timed product) lies within the float32 accumulation
    bound of ``ref`` (from :func:`reference`)."""
    exact, k = ref
    check_product(got, exact, k, "sparse product")


def random_csr(m, n, density, seed):
    return sp.random_array((m, n), density=density, format="csr", dtype=np.float32, rng=seed)


def bench_csr(name, s):
    m, n = s.shape
    rng = np.random.default_rng(1)
    f32 = sparse.CSR.from_scipy(s)
    b16 = sparse.CSR.from_scipy(s, dtype=ml_dtypes.bfloat16)
    print(f"\n== {name}: {m}x{n}, nnz={s.nnz} ==")
    print(f"{'op':10s} {'thr':>3s} {'scipy':>9s} {'lowp f32':>9s} {'lowp bf16':>9s}   ratio f32  ratio bf16  bf16/f32")
    for k in (None, 64):
        x = rng.standard_normal(n if k is None else (n, k)).astype(np.float32)
        flops = 2 * s.nnz * (1 if k is None else k)
        t_sc = best(lambda: s @ x)
        ref32, ref16 = reference(s, x), reference(b16.to_scipy(), x)
        for th in (1, 2):
            set_threads(th)
            # f32 and bf16 values are close competitors: timed in alternation.
            t32, t16 = best_interleaved([lambda: f32 @ x, lambda: b16 @ x])
            check(f32 @ x, ref32)
            check(b16 @ x, ref16)
            op = "SpMV" if k is None else f"SpMM {k}"
            tgt = 1.3 if k is None else (1.5 if th == 1 else 2.7)
            print(f"{op:10s} {th:3d} {gflops(flops, t_sc):9.2f} {gflops(flops, t32):9.2f} {gflops(flops, t16):9.2f}"
                  f"   {t_sc / t32:8.2f}x  {t_sc / t16:8.2f}x  {t32 / t16:7.2f}x"
                  f"   (target {tgt}x: {verdict(t_sc / t32, tgt)}; bf16 >= f32: {verdict(t32 / t16, 1.0)})")


def bench_bsr():
    nb = 256  # 2048 x 2048 in 8x8 blocks
    rng = np.random.default_rng(2)
    mask = rng.random((nb, nb)) < 0.10
    dense = np.zeros((nb * 8, nb * 8), np.float32)
    blocks = rng.standard_normal((int(mask.sum()), 8, 8)).astype(np.float32)
    bi, bj = np.nonzero(mask)
    d4 = dense.reshape(nb, 8, nb, 8)
    d4[bi, :, bj, :] = blocks
    s = sp.csr_array(dense)
    A = sparse.BSR.from_dense(dense, blocksize=(8, 8))
    A4 = sparse.BSR.from_dense(dense, blocksize=(4, 4))
    print(f"\n== BSR 8x8, 10% block density: 2048x2048, nnz={s.nnz} (vs scipy CSR of the same matrix) ==")
    for k in (None, 64):
        x = rng.standard_normal(2048 if k is None else (2048, k)).astype(np.float32)
        flops = 2 * s.nnz * (1 if k is None else k)
        t_sc = best(lambda: s @ x)
        ref = reference(s, x)
        for th in (1, 2):
            set_threads(th)
            t8 = best(lambda: A @ x)
            t4 = best(lambda: A4 @ x)
            check(A @ x, ref)
            check(A4 @ x, ref)
            op = "SpMV" if k is None else f"SpMM {k}"
            print(f"{op:10s} thr={th}  scipy CSR {gflops(flops, t_sc):7.2f}  BSR8 {gflops(flops, t8):7.2f} "
                  f"({t_sc / t8:5.2f}x, target 3x: {verdict(t_sc / t8, 3.0)})  "
                  f"BSR4 {gflops(flops, t4):7.2f} ({t_sc / t4:5.2f}x)")


def bench_nm():
    m = n = 2048
    rng = np.random.default_rng(3)
    dense = sparse.prune_nm(rng.standard_normal((m, n)).astype(np.float32), 2, 4)
    A = sparse.NM.from_dense(dense)
    A16 = sparse.NM.from_dense(dense, dtype=ml_dtypes.bfloat16)
    print(f"\n== 2:4 structured {m}x{n} vs dense numpy sgemm of the same matrix (time ratio) ==")
    for k in (64, 512):
        x = rng.standard_normal((n, k)).astype(np.float32)
        ref, ref16 = reference(dense, x), reference(A16.to_dense().astype(np.float32), x)
        for th in (1, 2):
            set_threads(th)
            t_d = best(lambda: dense @ x)
            t = best(lambda: A @ x)
            t16 = best(lambda: A16 @ x)
            check(A @ x, ref)
            check(A16 @ x, ref16)
            print(f"k={k:4d} thr={th}  sgemm {gflops(2 * m * n * k, t_d):7.1f} GFLOP/s {t_d * 1e3:7.2f} ms   "
                  f"2:4 f32 {t * 1e3:7.2f} ms ({t_d / t:5.2f}x, target 1x: {verdict(t_d / t, 1.0)})   "
                  f"2:4 bf16 {t16 * 1e3:7.2f} ms ({t_d / t16:5.2f}x)")


def memory():
    rng = np.random.default_rng(4)
    s = random_csr(2048, 2048, 0.10, 4)
    x = s.toarray()
    # Block-sparse (8x8 blocks, 10% of them) and 2:4 (50%) matrices of the same size.
    blk = np.kron(rng.random((256, 256)) < 0.10, np.ones((8, 8), np.float32)) * rng.standard_normal((2048, 2048))
    blk = blk.astype(np.float32)
    nm = sparse.prune_nm(rng.standard_normal((2048, 2048)).astype(np.float32), 2, 4)
    print("\n== memory (bytes: values + indices + pointers; per stored nonzero) ==")
    print(f"{'matrix':14s} {'format':10s} {'dtype':14s} {'bytes':>10s} {'B/nnz':>6s}")
    sc = s.data.nbytes + s.indices.nbytes + s.indptr.nbytes
    print(f"{'random 10%':14s} {'scipy csr':10s} {'float32':14s} {sc:10d} {sc / s.nnz:6.2f}")
    for dt in (np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        name = np.dtype(dt).name
        for cls in (sparse.CSR, sparse.CSC, sparse.COO):
            M = cls.from_dense(x, dtype=dt)
            print(f"{'random 10%':14s} {cls.__name__:10s} {name:14s} {M.nbytes:10d} {M.nbytes / s.nnz:6.2f}")
        nnz = np.count_nonzero(blk)
        for label, M in (("BSR 8x8", sparse.BSR.from_dense(blk, dtype=dt, blocksize=(8, 8))),
                         ("CSR", sparse.CSR.from_dense(blk, dtype=dt))):
            print(f"{'block 8x8 10%':14s} {label:10s} {name:14s} {M.nbytes:10d} {M.nbytes / nnz:6.2f}")
        nnz = np.count_nonzero(nm)
        for label, M in (("NM 2:4", sparse.NM.from_dense(nm, dtype=dt)), ("CSR", sparse.CSR.from_dense(nm, dtype=dt))):
            print(f"{'2:4 (50%)':14s} {label:10s} {name:14s} {M.nbytes:10d} {M.nbytes / nnz:6.2f}")
        print(f"{'2:4 (50%)':14s} {'dense':10s} {name:14s} {nm.size * np.dtype(dt).itemsize:10d}")


def main():
    old = lowp.get_num_threads()
    print(f"lowp sparse benchmark; isa={lowp._lowp.get_isa()}, threads available={old}; "
          f"numpy BLAS threads {'matched' if SET_BLAS_THREADS else 'NOT controlled'}")
    try:
        t0 = time.perf_counter()
        bench_csr("random 1%", random_csr(20000, 20000, 0.01, 0))
        bench_csr("random 10%", random_csr(2048, 2048, 0.10, 1))
        bench_bsr()
        bench_nm()
        memory()
        print(f"\n(total {time.perf_counter() - t0:.0f} s)")
    finally:
        set_threads(old)


if __name__ == "__main__":
    main()
