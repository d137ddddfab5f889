"""Accuracy of low-precision accumulation: relative error of dot products of
float8_e4m3fn values (of uniform numbers in [0, 1), rounding taking the top ones to 1;
products exact) accumulated in fp16,
unchunked and with chunk-based accumulation (chunk 16/64/256, fp16 chunk totals),
against float32 accumulation. The exact reference is math.fsum of the exact products.

Usage: python benches/accumulation.py [--quick] [--trials N]
"""

import argparse
import math

import ml_dtypes
import numpy as np

import lowp


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="lengths up to 2^14 only")
    ap.add_argument("--trials", type=int, default=8, help="dot products per length (errors are averaged)")
    args = ap.parse_args()
    if args.trials < 1:
        ap.error(f"--trials: expected a positive number of dot products, got {args.trials}")
    top = 14 if args.quick else 16
    g = np.random.default_rng(0)
    configs = [("fp16", dict(accumulate="float16")),
               ("fp16 c16", dict(accumulate="float16", chunk=16)),
               ("fp16 c64", dict(accumulate="float16", chunk=64)),
               ("fp16 c256", dict(accumulate="float16", chunk=256)),
               ("f32", dict(accumulate="float32"))]
    print("relative error |dot - exact| / |exact| (mean of %d dot products), e4m3fn inputs of uniform [0, 1)" % args.trials)
    print(f"{'length':>8} " + " ".join(f"{name:>11}" for name, _ in configs) + f" {'fp16/c64':>9}")
    for e in range(10, top + 1):
        n = 2 ** e
        a = g.random((args.trials, n)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
        b = g.random((n, 1)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
        af, bf = a.astype(np.float64), b.astype(np.float64)[:, 0]
        exact = np.array([math.fsum(af[t] * bf) for t in range(args.trials)])  # products exact in f64
        errs = []
        for _, kw in configs:
            if kw["accumulate"] == "float32":
                # Sequential float32 accumulation, every add rounded (not a blocked BLAS sum).
                r = lowp.matmul(a, b, chunk=n, **kw)[:, 0].astype(np.float64)
            else:
                r = lowp.matmul(a, b, **kw)[:, 0].astype(np.float64)
            errs.append(float(np.mean(np.abs(r - exact) / np.abs(exact))))
        ratio = errs[0] / errs[2] if errs[2] > 0 else math.inf
        print(f"{'2^%d' % e:>8} " + " ".join(f"{x:11.2e}" for x in errs) + f" {ratio:9.0f}x")


if __name__ == "__main__":
    main()
