"""Conversion throughput of lowp against ml_dtypes, numpy and a plain copy.

Run: python benches/convert.py [--quick] [--threads 1,2] [--mb 64]

Every figure comes from the same run: 64 MB of float32 input (16 Mi elements,
standard normal), at 1 and then 2 threads (lowp.set_num_threads; ml_dtypes and
numpy are single-threaded whatever the setting). Each rate is the best of
several repeats, in GB/s of float32 data: input bytes / time for encoding and
rounding, output bytes / time for decoding (the same 16 Mi float32 either way,
so rows compare directly). Every call allocates its result, as ``astype`` does;
lowp's large results reuse the memory of freed ones (``lowp.set_buffer_cache``),
the "cold" column is lowp with that cache off (every result on fresh pages, which
the kernel must fault in and zero), the "out=" column is lowp writing into a
preallocated array, and the copy rows show ``np.copyto`` into a preallocated
array and ``np.copy`` into a fresh one.

Targets (ratios measured side by side in this run):
  f32->bf16 nearest-even       >= 2.4x ml_dtypes astype
  f32->fp8 (e4m3fn, e5m2)      >= 20x  ml_dtypes astype
  f32->fp16                    >= 12x  numpy astype(float16)
  stochastic to bf16 and fp8   >= 0.5x lowp's own nearest-even rate
  decode fp8->f32              >= 15x  ml_dtypes astype(float32)
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import lowp

try:
    import ml_dtypes
except ImportError:  # pragma: no cover - the bench needs it for its baselines
    raise SystemExit("benches/convert.py needs ml_dtypes for its baselines (pip install ml_dtypes)")


def best_times(fs, repeats: int) -> list:
    """Best time of each function, calling them in turn (so a shared, noisy
    machine disturbs every contender alike)."""
    for f in fs:
        f()  # warm up (page cache, thread pool, lookup tables)
    best = [float("inf")] * len(fs)
    for _ in range(repeats):
        for i, f in enumerate(fs):
            t0 = time.perf_counter()
            f()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and rows")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--mb", type=int, default=64, help="MB of float32 input (default 64)")
    args = ap.parse_args()
    if args.mb < 1:
        ap.error(f"--mb: expected a positive number of MB, got {args.mb}")
    try:
        threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        threads = []
    if not threads or min(threads) < 1:
        ap.error(f"--threads: expected comma-separated positive ints, got {args.threads!r}")
    repeats = 3 if args.quick else 7
    n = args.mb * (1 << 20) // 4
    nbytes = n * 4

    rng = np.random.default_rng(0)
    x = rng.standard_normal(n, dtype=np.float32)
    x64 = x.astype(np.float64) + rng.standard_normal(n) * 2.0**-30
    e4 = x.astype(ml_dtypes.float8_e4m3fn)
    e5 = x.astype(ml_dtypes.float8_e5m2)
    b16 = x.astype(ml_dtypes.bfloat16)
    f16 = x.astype(np.float16)
    e4_bits, e5_bits, b16_bits, f16_bits = e4.view(np.uint8), e5.view(np.uint8), b16.view(np.uint16), f16.view(np.uint16)

    # Bit-exactness of what is timed (a fast wrong kernel is no result).
    assert np.array_equal(lowp.encode(x, "bf16"), b16_bits)
    assert np.array_equal(lowp.encode(x, "e4m3fn"), e4_bits)
    assert np.array_equal(lowp.encode(x, "e5m2"), e5_bits)
    assert np.array_equal(lowp.encode(x, "float16"), f16_bits)
    assert np.array_equal(lowp.decode(e4_bits, "e4m3fn"), e4.astype(np.float32))
    assert np.array_equal(lowp.decode(e5_bits, "e5m2"), e5.astype(np.float32))
    assert np.array_equal(lowp.decode(b16_bits, "bf16"), b16.astype(np.float32))
    assert np.array_equal(lowp.decode(f16_bits, "float16"), f16.astype(np.float32))
    for fmt, dt, mdt in (("bf16", np.uint16, ml_dtypes.bfloat16), ("e4m3fn", np.uint8, ml_dtypes.float8_e4m3fn),
                         ("e5m2", np.uint8, ml_dtypes.float8_e5m2)):
        # Stochastic rounding gives one of the two neighbours of each value.
        s = lowp.decode(lowp.encode(x, fmt, rounding="stochastic", seed=1), fmt)
        assert np.all((s == lowp.round(x, fmt, "down")) | (s == lowp.round(x, fmt, "up")))
        h = x64[: n // 2]
        assert np.array_equal(lowp.encode(h, fmt), h.astype(mdt).view(dt))
        assert np.array_equal(lowp.round(x, fmt), x.astype(mdt).astype(np.float32))

    pre = {np.uint8: np.empty(n, np.uint8), np.uint16: np.empty(n, np.uint16), np.float32: np.empty(n, np.float32)}
    copy_dst = np.empty_like(x)

    def gbs(*fs) -> list:
        return [nbytes / t / 1e9 for t in best_times(fs, repeats)]

    print(f"lowp {lowp.__version__}, ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}; "
          f"isa {lowp._lowp.get_isa()}; {args.mb} MB float32 input, best of {repeats}")
    print("GB/s = float32 bytes (input for encode/round, output for decode) / time; the machine may be shared and noisy\n")

    results = []  # (threads, name, ratio, target)
    for th in threads:
        lowp.set_num_threads(th)
        copy_pre, copy_new = gbs(lambda: np.copyto(copy_dst, x), lambda: np.copy(x))
        print(f"threads={th}    np.copyto (preallocated) {copy_pre:6.2f} GB/s    np.copy (fresh) {copy_new:6.2f} GB/s")
        hdr = (f"{'operation':34} {'lowp':>7} {'base':>7}  {'ratio':>7}  {'target':>7}  {'cold':>7} {'ratio':>7}  "
               f"{'out=':>7}  {'ratio':>7}  baseline")
        print(hdr)
        print("-" * len(hdr))

        rne_f = {"np.copy": lambda: np.copy(x)}  # baselines that are lowp's own calls

        def row(name, f_lowp, f_base, base_name, target=None, out=None, base_out=None):
            fs = [f_lowp, f_base if f_base is not None else rne_f[base_name], cold(f_lowp)]
            fs += [out] if out is not None else []
            fs += [base_out] if base_out is not None else []
            r = gbs(*fs)
            lo, base, lo_cold = r[0], r[1], r[2]
            lo_out = r[3] if out is not None else None
            b_out = r[4] if out is not None and base_out is not None else None
            ratio = lo / base
            mark = ""
            if target is not None:
                mark = "PASS" if ratio >= target else "FAIL"
                results.append((th, name, ratio, target))
            tgt = f">={target:g}x" if target is not None else ""
            o = f"{lo_out:7.2f}" if lo_out is not None else f"{'':7}"
            ro = f"{lo_out / b_out:6.2f}x" if b_out is not None else f"{'':7}"
            print(f"{name:34} {lo:7.2f} {base:7.2f}  {ratio:6.2f}x  {tgt:>7}  {lo_cold:7.2f} {lo_cold / base:6.2f}x "
                  f"{o}  {ro}  {base_name} {mark}")

        def cold(f):
            def run():
                limit = lowp.set_buffer_cache(0)  # empties the cache: the result gets fresh pages
                try:
                    return f()
                finally:
                    lowp.set_buffer_cache(limit)
            return run

        def enc(fmt, dt, **kw):
            return (lambda: lowp.encode(x, fmt, **kw)), (lambda: lowp.encode(x, fmt, out=pre[dt], **kw))

        def cast_into(dst, src):
            # The astype cast loop, into preallocated memory.
            return lambda: np.copyto(dst, src, casting="unsafe")

        for fmt, dt, bdt, name, target in (("bf16", np.uint16, ml_dtypes.bfloat16, "ml_dtypes astype", 2.4),
                                           ("e4m3fn", np.uint8, ml_dtypes.float8_e4m3fn, "ml_dtypes astype", 20),
                                           ("e5m2", np.uint8, ml_dtypes.float8_e5m2, "ml_dtypes astype", 20),
                                           ("float16", np.uint16, np.float16, "numpy astype", 12)):
            f, o = enc(fmt, dt)
            label = "fp16" if fmt == "float16" else fmt
            row(f"encode f32->{label} nearest_even", f, lambda: x.astype(bdt), name, target, o,
                cast_into(pre[dt].view(bdt), x))
        for fmt, dt in (("bf16", np.uint16), ("e4m3fn", np.uint8), ("e5m2", np.uint8)):
            rne_f[f"{fmt} rne"], rne_out = enc(fmt, dt)
            f, o = enc(fmt, dt, rounding="stochastic", seed=1)
            row(f"encode f32->{fmt} stochastic", f, None, f"{fmt} rne", 0.5, o, rne_out)
        f32_base = np.empty(n, np.float32)
        for fmt, bits, arr, name, target in (("e4m3fn", e4_bits, e4, "ml_dtypes astype", 15),
                                             ("e5m2", e5_bits, e5, "ml_dtypes astype", 15),
                                             ("bf16", b16_bits, b16, "ml_dtypes astype", None),
                                             ("float16", f16_bits, f16, "numpy astype", None)):
            label = "fp16" if fmt == "float16" else fmt
            row(f"decode {label}->f32", lambda: lowp.decode(bits, fmt), lambda: arr.astype(np.float32), name, target,
                lambda: lowp.decode(bits, fmt, out=pre[np.float32]), cast_into(f32_base, arr))
        if not args.quick:
            row("round f32 e4m3fn (value->value)", lambda: lowp.round(x, "e4m3fn"),
                lambda: x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32), "ml_dtypes astype x2", None,
                lambda: lowp.round(x, "e4m3fn", out=pre[np.float32]))
            row("round f32 bf16 (value->value)", lambda: lowp.round(x, "bf16"),
                lambda: x.astype(ml_dtypes.bfloat16).astype(np.float32), "ml_dtypes astype x2", None,
                lambda: lowp.round(x, "bf16", out=pre[np.float32]))
            for fmt, dt, mdt in (("bf16", np.uint16, ml_dtypes.bfloat16), ("e4m3fn", np.uint8, ml_dtypes.float8_e4m3fn)):
                # Half the elements, the same 64 MB of input.
                h = x64[: n // 2]
                row(f"encode f64->{fmt} nearest_even", lambda: lowp.encode(h, fmt), lambda: h.astype(mdt),
                    "ml_dtypes astype", None)
            for fmt in ("posit8", "posit16"):
                row(f"encode f32->{fmt} nearest_even", lambda: lowp.encode(x, fmt), None, "np.copy", None)
        print()

    print("lowp, base: every call allocates its result (as astype does); lowp's reuses the memory of the result\n"
          "freed before it. cold: lowp with that cache off, every result on fresh pages (the kernel's faulting and\n"
          "zeroing of fresh pages is then a large part of the time). out=: lowp into preallocated memory; the ratio beside it is\n"
          "against the same baseline cast into preallocated memory (np.copyto(..., casting='unsafe')), or for the\n"
          "stochastic rows against lowp's nearest-even with out=. Targets are judged on the allocating ratios.\n")
    print("targets:")
    ok = 0
    for th, name, ratio, target in results:
        passed = ratio >= target
        ok += passed
        print(f"  {'PASS' if passed else 'FAIL'}  threads={th}  {name:34} {ratio:6.2f}x (target >= {target:g}x)")
    print(f"{ok}/{len(results)} targets met")


if __name__ == "__main__":
    main()
