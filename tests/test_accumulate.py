"""Emulated low-precision accumulation (matmul accumulate=/chunk=, lowp.sum) against
an exact-rational reference: every add is the exact sum rounded once."""

import ctypes
import math
import mmap
import sys
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import lowp

DETERMINISTIC = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"]
ACC_FORMATS = {
    "fp16": lowp.format("float16"),
    "bf16": lowp.format("bfloat16"),
    "e5m2": lowp.format("float8_e5m2"),
    "f6m9": lowp.FloatFormat(6, 9),
}


def round_exact(x: Fraction, f, mode: str) -> float:
    """The exact rational ``x`` rounded once into float format ``f`` (as a Python float)."""
    if x == 0:
        return 0.0
    neg = x < 0
    ax = -x if neg else x
    e = ax.numerator.bit_length() - ax.denominator.bit_length()
    if ax < Fraction(2) ** e:
        e -= 1
    q = max(e, f.emin) - f.man_bits  # unit of the result
    scaled = ax / Fraction(2) ** q
    k = math.floor(scaled)
    rem = scaled - k
    half = Fraction(1, 2)
    if mode == "nearest_even":
        up = rem > half or (rem == half and k % 2 == 1)
    elif mode == "nearest_away":
        up = rem >= half
    elif mode == "toward_zero":
        up = False
    elif mode == "up":
        up = not neg and rem != 0
    elif mode == "down":
        up = neg and rem != 0
    elif mode == "odd":
        up = k % 2 == 0 and rem != 0
    else:
        raise AssertionError(mode)
    mag = Fraction(k + up) * Fraction(2) ** q
    if mag > Fraction(f.max):
        to_inf = {"nearest_even": True, "nearest_away": True, "toward_zero": False, "odd": False,
                  "up": not neg, "down": neg}[mode]
        if to_inf:
            v = math.inf if f.inf else math.nan
        else:
            v = f.max
    else:
        v = float(mag)
    return -v if neg else v


def ref_matmul(a, b, fmt, mode, chunk=None, chunk_fmt=None):
    """Sequential accumulation in k order with every add rounded once (Fraction arithmetic)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    m, k = a64.shape
    n = b64.shape[1]
    out = np.zeros((m, n))
    cf = chunk_fmt if chunk_fmt is not None else fmt
    for i in range(m):
        for j in range(n):
            acc = Fraction(0)
            tot = Fraction(0)
            nan = False
            for p in range(k):
                prod = Fraction(a64[i, p]) * Fraction(b64[p, j])
                r = round_exact(acc + prod, fmt, mode)
                if not math.isfinite(r):
                    nan = True
                    out[i, j] = r
                    break
                acc = Fraction(r)
                if chunk is not None and ((p + 1) % chunk == 0 or p + 1 == k):
                    r = round_exact(tot + acc, cf, mode)
                    if not math.isfinite(r):
                        nan = True
                        out[i, j] = r
                        break
                    tot, acc = Fraction(r), Fraction(0)
            if not nan:
                out[i, j] = float(tot if chunk is not None else acc)
    return out


def same(x, y):
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    return np.array_equal(x, y, equal_nan=True)


def same_bits(x, y):
    """Equal bit for bit as float64 (zeros' signs too), NaNs of any payload equal."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    return x.shape == y.shape and bool(np.all((x.view(np.uint64) == y.view(np.uint64)) | (np.isnan(x) & np.isnan(y))))


def matmul_as_scalar(a, b, **kw):
    """``lowp.matmul(a, b, **kw)``, checked bit for bit against the scalar path."""
    got = lowp.matmul(a, b, **kw)
    lowp._lowp.set_isa("scalar")
    try:
        assert same_bits(got, lowp.matmul(a, b, **kw))
    finally:
        lowp._lowp.set_isa(None)
    return got


def data(m, k, n, dtype, seed, scale=1.0):
    g = np.random.default_rng(seed)
    a = (g.standard_normal((m, k)) * scale).astype(np.float32).astype(dtype)
    b = (g.standard_normal((k, n)) * scale).astype(np.float32).astype(dtype)
    return a, b


@pytest.mark.parametrize("mode", DETERMINISTIC)
@pytest.mark.parametrize("acc", list(ACC_FORMATS), ids=str)
@pytest.mark.parametrize("chunk", [None, 1, 5, 16])
def test_bit_exact_vs_fractions(acc, mode, chunk):
    f = ACC_FORMATS[acc]
    a, b = data(3, 37, 11, ml_dtypes.bfloat16, zlib.crc32(f"{acc}{mode}{chunk}".encode()) % 1000)
    got = lowp.matmul(a, b, accumulate=f, chunk=chunk, rounding=mode)
    assert got.dtype == np.float32
    assert same(got, ref_matmul(a, b, f, mode, chunk))


@pytest.mark.parametrize("mode", DETERMINISTIC)
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, np.float32], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("chunk", [None, 5])
def test_float32_accumulator_vs_fractions(mode, dtype, chunk):
    # float32 accumulators (the directed modes run on the FMA rounded in the mode),
    # with chunk totals into float16 and float32; values spread over many binades so
    # that sums lose bits and cancel.
    f = lowp.format("float32")
    g = np.random.default_rng(zlib.crc32(f"{mode}{np.dtype(dtype).name}{chunk}".encode()))
    a = (g.standard_normal((5, 40)) * 2.0 ** g.integers(-6, 7, (5, 40))).astype(np.float32).astype(dtype)
    b = (g.standard_normal((40, 18)) * 2.0 ** g.integers(-6, 7, (40, 18))).astype(np.float32).astype(dtype)
    a[0, :8] = 0
    for cf in ([None] if chunk is None else [lowp.format("float16"), f]):
        got = lowp.matmul(a, b, accumulate=f, chunk=chunk, chunk_accumulate=cf, rounding=mode)
        assert same(got, ref_matmul(a, b, f, mode, chunk, cf))


@pytest.mark.parametrize("mode", DETERMINISTIC)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_float64_accumulator_vs_fractions(mode, dtype):
    """float64 accumulators in every deterministic mode (nearest-away included), on sums
    that lose bits: values over 120 binades, and ties of float64 built in (1 + 2^-53)."""
    f = lowp.format("float64")
    g = np.random.default_rng(zlib.crc32(f"f64{mode}{np.dtype(dtype).name}".encode()))
    a = (g.standard_normal((4, 30)) * 2.0 ** g.integers(-60, 61, (4, 30))).astype(np.float32).astype(dtype)
    b = (g.standard_normal((30, 9)) * 2.0 ** g.integers(-60, 61, (30, 9))).astype(np.float32).astype(dtype)
    a[0, :2], b[:2, 0] = 1.0, [1.0, 2.0 ** -53]  # 1 + 2^-53: a tie
    a[1, :2], b[:2, 1] = 1.0, [-1.0, -(2.0 ** -54)]  # -1 - 2^-54: a tie below 1's binade
    for chunk in (None, 4):
        got = matmul_as_scalar(a, b, accumulate="float64", chunk=chunk, rounding=mode)
        assert got.dtype == np.float64
        assert same(got, ref_matmul(a, b, f, mode, chunk))
        assert same(lowp.sum(a.T, axis=0, accumulate="float64", chunk=chunk, rounding=mode),
                    ref_matmul(a, np.ones((30, 1), dtype), f, mode, chunk)[:, 0])


def test_float64_accumulator_stochastic():
    """Stochastic float64 accumulators: up with the exact remainder's share of the gap
    (1 + 2^-54 rounds up to 1 + 2^-52 a quarter of the time; 2^-53 below 2 down to
    2 - 2^-52 half of the time), reproducible at any thread count and path."""
    n = 20000
    a = np.ones((n, 2), np.float32)
    b = np.array([[1.0, 2.0], [2.0 ** -54, -(2.0 ** -53)]], np.float32)
    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(1)
        r1 = matmul_as_scalar(a, b, accumulate="float64", rounding="stochastic", seed=3)
        lowp.set_num_threads(2)
        r2 = lowp.matmul(a, b, accumulate="float64", rounding="stochastic", seed=3)
    finally:
        lowp.set_num_threads(n0)
    assert np.array_equal(r1, r2)
    up = r1[:, 0] == 1.0 + 2.0 ** -52
    assert np.all(up | (r1[:, 0] == 1.0))
    assert abs(up.mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / n)
    down = r1[:, 1] == 2.0 - 2.0 ** -52
    assert np.all(down | (r1[:, 1] == 2.0))
    assert abs(down.mean() - 0.5) < 5 * math.sqrt(0.25 / n)
    # rbits=1: the remainder's top bit decides (a quarter has a zero top bit: never up).
    r3 = lowp.matmul(a, b, accumulate="float64", rounding="stochastic", seed=3, rbits=1)
    assert np.all(r3[:, 0] == 1.0)


@pytest.mark.parametrize("mode", DETERMINISTIC + ["stochastic"])
@pytest.mark.parametrize("acc", ["fp16", "bf16", "e5m2", "float32"])
@pytest.mark.parametrize("chunk", [None, 7])
def test_simd_and_scalar_paths_agree(acc, mode, chunk, threads):
    # Register tiles (f32 for fp16/bf16, f64 for the rest), their tails and the step
    # path against the scalar reference, with chunk totals, at 1 and 2 threads.
    # 69 x 130 outputs: several row and column tasks of the f64 tiles, row pairs and a single row.
    a, b = data(69, 120, 130, ml_dtypes.bfloat16, 21, scale=30.0)
    kw = dict(accumulate=acc, rounding=mode, seed=77, chunk=chunk)
    simd = lowp.matmul(a, b, **kw)
    lowp._lowp.set_isa("scalar")
    try:
        scalar = lowp.matmul(a, b, **kw)
    finally:
        lowp._lowp.set_isa(None)
    assert same_bits(simd, scalar)


@pytest.mark.parametrize("acc", ["fp16", "e5m2", "f6m9", "bf16"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("chunk", [None, 8])
def test_narrow_inputs_many_columns(acc, dtype, chunk):
    # fp16 / fp8 inputs: the f32 tile kernels (fp16, bf16) or the f64 register tiles
    # (2 rows x 8 columns: a row pair, a single row, two tiles and a tail), every mode.
    f = ACC_FORMATS[acc]
    a, b = data(3, 45, 21, dtype, zlib.crc32(f"{acc}{np.dtype(dtype).name}".encode()) % 1000, scale=4.0)
    for mode in DETERMINISTIC:
        got = lowp.matmul(a, b, accumulate=f, chunk=chunk, rounding=mode)
        assert same(got, ref_matmul(a, b, f, mode, chunk)), mode
        lowp._lowp.set_isa("scalar")
        try:
            assert same_bits(lowp.matmul(a, b, accumulate=f, chunk=chunk, rounding=mode), got)
        finally:
            lowp._lowp.set_isa(None)
    # Overflow into inf on the fast lanes (e5m2 inputs, large products).
    big = (np.full((2, 30), 240.0, np.float32)).astype(dtype)
    bigb = np.full((30, 9), 200.0, np.float32).astype(dtype)
    assert same(lowp.matmul(big, bigb, accumulate=f), ref_matmul(big, bigb, f, "nearest_even"))


@pytest.mark.parametrize("acc", ["fp16", "bf16", "e5m2", "f6m9"])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2],
                         ids=lambda d: np.dtype(d).name)
def test_float32_inputs_holding_narrower_values(acc, dtype, threads):
    # float32 arrays whose values all belong to a narrower format are read as that
    # format's codes (the kernels then know the products' bits): the results are
    # those of the same values in the narrower dtype, bit for bit, in every mode,
    # with chunks and few random bits, from strided views and mixed with a
    # float32 operand that no narrower format holds.
    f = ACC_FORMATS[acc]
    a, b = data(9, 70, 33, dtype, zlib.crc32(f"{acc}{np.dtype(dtype).name}".encode()) % 1000, scale=3.0)
    a[0, 0] = 0
    a[1, :3] = -0.0
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    wide = b32.copy()
    wide[5, 7] = np.float32(1 + 2.0 ** -20)
    for mode, chunk, rbits in [("nearest_even", None, None), ("nearest_even", 16, None), ("odd", None, None),
                               ("stochastic", None, None), ("stochastic", 16, 13), ("up", None, None)]:
        kw = dict(accumulate=f, chunk=chunk, rounding=mode, seed=5, rbits=rbits)
        want = lowp.matmul(a, b, **kw)
        assert same_bits(lowp.matmul(a32, b32, **kw), want), (mode, chunk)
        assert same_bits(lowp.matmul(np.asfortranarray(a32), b32[::-1][::-1], **kw), want), (mode, chunk)
        assert same_bits(lowp.matmul(b32.T, a32.T, **kw), lowp.matmul(b.T, a.T, **kw)), (mode, chunk)
        # One operand narrowed, the other not (a value of 21 bits).
        if chunk is None and mode != "stochastic":
            assert same(lowp.matmul(a32[:3], wide, **kw), ref_matmul(a32[:3], wide, f, mode)), mode
    # A sum of float32 values that fit the format too.
    got = lowp.sum(a32, axis=0, accumulate=f)
    assert same_bits(got, lowp.sum(a, axis=0, accumulate=f))


@pytest.mark.parametrize("acc", ["fp16", "bf16", "e5m2", "f6m9"])
@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away"])
@pytest.mark.parametrize("chunk", [None, 6])
def test_float32_values_to_nearest_from_truncated_sums(acc, mode, chunk, threads):
    # float32 inputs of 24 bits (no narrower format holds them), so sums that f64
    # does not hold exactly: the f64 tiles round them to nearest from the sum
    # truncated toward zero. Against the exact reference, with exact ties (row 0:
    # 1, then half units), sums in the format's subnormal range (row 2) and near
    # its largest value (row 4, in the next tile of 4 rows: that tile's bound
    # fails); and against the scalar path on a larger product.
    f = ACC_FORMATS[acc]
    g = np.random.default_rng(zlib.crc32(f"{acc}{mode}{chunk}".encode()))
    m, k, n = 6, 40, 17
    a = (g.standard_normal((m, k)) * 2.0 ** g.integers(-3, 3, (m, k))).astype(np.float32)
    b = (g.standard_normal((k, n)) * 2.0 ** g.integers(-3, 3, (k, n))).astype(np.float32)
    half = 2.0 ** -(f.man_bits + 1)
    b[:, :8] = 1.0
    a[0] = half * g.choice([1, 3, -1, 5], k)
    a[0, 0] = 1.0
    a[1, ::3] = half
    a[2] = (g.standard_normal(k) * 2.0 ** (f.emin - 2)).astype(np.float32)
    a[4] = (g.standard_normal(k) * f.max / 64).astype(np.float32)
    got = lowp.matmul(a, b, accumulate=f, rounding=mode, chunk=chunk)
    assert same(got, ref_matmul(a, b, f, mode, chunk))
    big_a, big_b = data(20, 300, 40, np.float32, 5, scale=3.0)
    big_a[:3, :40] = half
    big_b[:40] = 1.0
    matmul_as_scalar(big_a, big_b, accumulate=f, rounding=mode, chunk=chunk)


@pytest.mark.parametrize("dtype, big", [(ml_dtypes.float8_e5m2, False), (ml_dtypes.float8_e4m3fn, False), (ml_dtypes.float8_e5m2, True)],
                         ids=["e5m2", "e4m3fn", "e5m2-near-overflow"])
@pytest.mark.parametrize("chunk", [None, 64, 7])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "down"])
def test_f6m9_tile_kernels(dtype, big, chunk, mode, threads):
    # Wang et al.'s configuration: fp8 products, FloatFormat(6, 9) accumulators,
    # chunks of 64 (the float32 tile kernels: Veltkamp's split at 10 bits to
    # nearest, the directed FMA and an integer rounding at the format's unit, and
    # their vectorized chunk totals) against the scalar path; near-overflow values
    # send depth blocks and chunk totals to their f64 fallback, and some sums to inf
    # (or to the largest value).
    f = ACC_FORMATS["f6m9"]
    a, b = data(69, 200, 130, dtype, 5, scale=2.0**13 if big else 1.0)
    if big:
        # Positive values up to 2^13: sums pass 2^32 in most columns, not in all.
        a = np.minimum(np.abs(a.astype(np.float32)), 8192).astype(dtype)
        b = np.minimum(np.abs(b.astype(np.float32)), 8192).astype(dtype)
        b[:, :40] /= 64
    got = matmul_as_scalar(a, b, accumulate=f, chunk=chunk, rounding=mode)
    if big:
        top = np.abs(got).max()
        assert (np.isinf(top) or top == f.max) and np.isfinite(got).any() and (np.abs(got) < f.max).any()
    rows, cols = [0, 33, 68], [0, 64, 129]
    assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, mode, chunk))


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("scale", [1.0, 2.0**-9, 40.0], ids=["unit", "subnormal-sums", "large"])
@pytest.mark.parametrize("chunk", [None, 64, 7])
def test_e5m2_nearest_tile_kernel(dtype, scale, chunk, threads):
    # fp8 products into float8_e5m2 to nearest: on values scaled so that e5m2's
    # subnormals are float32's, the FMA's sum rounded to nearest-even at the unit
    # bit of the pattern, in depth blocks whose products stay below 128 and whose
    # sums stay below the largest value; the others (scale 40: products past 128,
    # sums past 57344) take the f64 rounding. Against the scalar path and the
    # exact reference.
    f = ACC_FORMATS["e5m2"]
    a, b = data(37, 300, 45, dtype, 11, scale=scale)
    got = lowp.matmul(a, b, accumulate=f, chunk=chunk)
    lowp._lowp.set_isa("scalar")
    try:
        assert same_bits(got, lowp.matmul(a, b, accumulate=f, chunk=chunk))
    finally:
        lowp._lowp.set_isa(None)
    if scale < 1:
        # Sums in e5m2's subnormal range.
        assert (np.abs(got) < 2.0**-14).mean() > 0.2
    rows, cols = [0, 20, 36], [0, 17, 44]
    assert same_bits(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, "nearest_even", chunk))


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e5m2], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("acc", ["fp16", "e5m2", "f6m9"])
@pytest.mark.parametrize("mode", ["toward_zero", "up", "down", "stochastic"])
def test_scaled_unit_kernels_subnormal_sums(dtype, acc, mode):
    # The directed kernels at the accumulator's unit and the stochastic one run on
    # values scaled so that its subnormals are float32's: products of any bits
    # (bf16, e5m2 inputs) and sums in its subnormal range (inputs scaled down)
    # round at its fixed unit there. Against the scalar path at 1 and 2 threads,
    # and the exact reference for the deterministic modes.
    f = ACC_FORMATS[acc]
    # Products of 2^(emin - 3) or so (e5m2, whose few bits make sums stall: 2^(emin - 1)):
    # sums of 290 of them around the smallest normal. e5m2 inputs cannot reach
    # FloatFormat(6, 9)'s (2^-30): there, sums above it.
    want = 2.0 ** ((f.emin - (1 if acc == "e5m2" else 3)) / 2)
    scale = max(want, 2.0**-12 if dtype == ml_dtypes.float8_e5m2 else 0.0)
    # Up, down and stochastically, e5m2's sums (3 bits) grow past it anyway.
    reach = scale == want and (acc != "e5m2" or mode == "toward_zero")
    a, b = data(23, 290, 37, dtype, zlib.crc32(f"{acc}{mode}".encode()) % 1000, scale=scale)
    unit_bits = 23 - f.man_bits
    kw = dict(accumulate=f, rounding=mode, seed=5, rbits=unit_bits if mode == "stochastic" else None)
    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(2)
        got = lowp.matmul(a, b, **kw)
        lowp.set_num_threads(1)
        assert same_bits(got, lowp.matmul(a, b, **kw))
        lowp._lowp.set_isa("scalar")
        assert same_bits(got, lowp.matmul(a, b, **kw))
    finally:
        lowp._lowp.set_isa(None)
        lowp.set_num_threads(n0)
    # Many sums end in the subnormal range, many above it.
    tiny = np.abs(np.asarray(got, np.float64)) < 2.0**f.emin
    assert 0.2 < tiny.mean() < 0.9 or not reach
    if mode != "stochastic":
        rows, cols = [0, 11, 22], [0, 18, 36]
        # (The rational reference does not keep the sign of a zero sum.)
        assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, mode))


@pytest.mark.parametrize("acc, rbits", [("e5m2", 21), ("e5m2", 2), ("fp16", 13), ("e5m2", 32), ("fp16", 32)])
def test_stochastic_watched_sums_past_the_largest_value(acc, rbits):
    # Stochastic rounding into formats whose depth blocks cannot be bounded (e5m2:
    # an add may grow a sum by a quarter) runs a kernel that watches every rounded
    # sum (float32 tiles up to 23 - man random bits, float64 tiles beyond); a tile
    # where one passes the largest value is redone exactly. Rows whose
    # sums pass it and come back (an infinity must stay), rows that stay below it,
    # and the largest value itself reached.
    f = ACC_FORMATS[acc]
    big = float(f.max) / 2
    g = np.random.default_rng(rbits)
    k, n = 300, 40
    a = g.standard_normal((24, k)).astype(np.float32)
    b = g.standard_normal((k, n)).astype(np.float32)
    # Rows 0-3: three large products up (past the largest value whatever the
    # roundings), then three large ones down (to about the start).
    a[:, 10:16] = 0.0
    a[:4, 10:16] = [[1.0, 1.0, 1.0, -1.0, -1.0, -1.0]] * 4
    b[10:16, :] = big * 1.25
    # Row 5: one product of exactly the largest value.
    a[5, :] = 0.0
    a[:, 20] = 0.0
    a[5, 20] = 1.0
    b[20, :] = float(f.max)
    if acc == "fp16":
        a, b = a.astype(ml_dtypes.bfloat16), b.astype(np.float16)
        a = a.astype(np.float16)
    else:
        a, b = a.astype(ml_dtypes.float8_e5m2), b.astype(ml_dtypes.float8_e5m2)
    kw = dict(accumulate=f, rounding="stochastic", seed=8, rbits=rbits)
    got = matmul_as_scalar(a, b, **kw).astype(np.float64)
    # Positive sums past the largest value round to +inf, which the later products keep.
    assert np.all(np.isinf(got[:4]) & (got[:4] > 0))
    assert np.all(got[5] == float(f.max))
    assert np.all(np.isfinite(got[6:]))
    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(2)
        assert same_bits(lowp.matmul(a, b, **kw), got.astype(np.float32))
    finally:
        lowp.set_num_threads(n0)


@pytest.mark.parametrize("rbits", [None, 20])
@pytest.mark.parametrize("chunk", [None, 64])
def test_stochastic_f64_tiles_start_near_the_largest_value(rbits, chunk, threads):
    # float16 inputs (22-bit products: the f64 tiles) whose second depth block
    # starts from sums just below float16's largest value and adds small products:
    # the products alone cannot reach it, the sums they start from can, so the
    # tiles must watch (and redo) from the accumulators' own magnitude. Rows that
    # climb to +inf, rows that walk down, columns that start far below it.
    m, n, k = 8, 16, 512
    a = np.zeros((m, k), np.float32)
    a[:, 0] = 1.0
    a[0::2, 256:] = 1.0
    a[1::2, 256:] = -1.0
    b = np.zeros((k, n), np.float32)
    b[0, :8] = 64992.0
    b[0, 8:] = 1000.0
    b[256:, :] = 4.0
    a, b = a.astype(np.float16), b.astype(np.float16)
    kw = dict(accumulate="float16", rounding="stochastic", seed=2, rbits=rbits)
    if chunk:
        # Chunks of 64: the chunk totals climb instead.
        kw.update(chunk=chunk, chunk_accumulate="float16")
    got = matmul_as_scalar(a, b, **kw).astype(np.float64)
    assert np.all(np.isinf(got[0::2, :8]) & (got[0::2, :8] > 0))
    assert np.all(np.isfinite(got[1::2])) and np.all(np.isfinite(got[:, 8:]))


@pytest.mark.parametrize("rbits", [13, 8, 32])
def test_stochastic_checked_runs_hand_over_to_the_watch(rbits, threads):
    # float8_e5m2 accumulators: a depth block whose bound leaves room only for runs of
    # 4 steps from sums below about 9150 runs them, checked at their starts, until
    # the drifting rows pass that; the kernel that watches every sum takes over
    # there (float32 tiles up to 21 random bits, float64 tiles for 32). Rows
    # drifting up (all a = 1, b = +-56: sums to 14336) and rows in a random walk;
    # results as the scalar path's.
    f = ACC_FORMATS["e5m2"]
    g = np.random.default_rng(rbits)
    k, n = 256, 40
    a = np.where(g.random((24, k)) < 0.5, 1.0, -1.0).astype(np.float32)
    a[::2] = 1.0
    b = (56.0 * np.where(g.random(n) < 0.5, 1.0, -1.0) * np.ones((k, 1))).astype(np.float32)
    a, b = a.astype(ml_dtypes.float8_e5m2), b.astype(ml_dtypes.float8_e5m2)
    got = matmul_as_scalar(a, b, accumulate=f, rounding="stochastic", seed=4, rbits=rbits).astype(np.float64)
    # In every tile of 4 rows x 16 columns some sum passed the bound of the runs.
    tiles = np.abs(got).reshape(6, 4, -1)
    assert all((tiles[:, :, c:c + 16].max(axis=(1, 2)) > 9200).all() for c in (0, 16, 32)) and np.all(np.isfinite(got))


@pytest.mark.parametrize("acc", ["e5m2", "f6m9"])
@pytest.mark.parametrize("mode", ["up", "down"])
@pytest.mark.parametrize("k", [40, 300])
def test_directed_checked_runs_hand_over(acc, mode, k, threads):
    # Up or down into float8_e5m2 (or FloatFormat(6, 9) past its bound), where each
    # add may grow a sum by a quarter: the kernel at the format's unit runs in runs
    # of 16, 8, 4, 2 and 1 steps, checked at their starts, then hands over to the
    # conversions' kernel (float8_e5m2) or the f64 rounding. Rows that drift to the
    # infinities, rows in a random walk, zeros and exact sums; as the scalar path.
    f = ACC_FORMATS[acc]
    g = np.random.default_rng(k)
    a = g.standard_normal((25, k)).astype(np.float32)
    a[::3] = np.abs(a[::3]) * (4.0 if acc == "e5m2" else 64.0)
    a[1::5, : k // 2] = 0.0
    b = g.standard_normal((k, 37)).astype(np.float32)
    b[:, ::4] = np.abs(b[:, ::4]) * 8.0
    a, b = a.astype(ml_dtypes.float8_e4m3fn), b.astype(ml_dtypes.float8_e4m3fn)
    got = matmul_as_scalar(a, b, accumulate=f, rounding=mode).astype(np.float64)
    if k == 300 and acc == "e5m2":
        # Some sums passed the largest value: the handover ran.
        assert np.isinf(got).any() and np.isfinite(got).any()
    rows, cols = [0, 1, 7, 24], [0, 3, 36]
    assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, mode))


@pytest.mark.parametrize("acc", ["e5m2", "f6m9", "fp16"])
@pytest.mark.parametrize("mode", ["up", "down"])
@pytest.mark.parametrize("chunk", [None, 100])
def test_directed_sums_past_the_largest_value(acc, mode, chunk, threads):
    # Up (down) into float8_e5m2, FloatFormat(6, 9) or fp16: sums drift toward +inf (-inf)
    # and overflow there, where they stay; with products below the unit of the top
    # binade, the kernel at the format's unit runs with no bound on its sums. Rows
    # drifting to the infinity, rows of the other sign (which such products never
    # take past the largest value); in the second depth block a product too large
    # for that, which takes sums to the largest value of the other sign; chunk
    # totals fed by sums that overflowed. As the scalar path and exact rationals.
    f = ACC_FORMATS[acc]
    sign = 1.0 if mode == "up" else -1.0
    g = np.random.default_rng(zlib.crc32(f"{acc}{mode}{chunk}".encode()))
    k = 2600 if acc == "fp16" else 1200
    a = g.standard_normal((14, k)).astype(np.float32)
    a[::4] = np.abs(a[::4]) * sign * 2.0
    a[1::4] = -np.abs(a[1::4]) * sign * 2.0
    a[2::7, : k // 3] = 0.0
    b = np.abs(g.standard_normal((k, 35))).astype(np.float32)
    b[:, 1::3] = g.standard_normal((k, 12))
    if acc == "e5m2":
        a[5, 300:310] = -448.0 * sign
        b[300:310, 2::5] = 40.0
        dt = ml_dtypes.float8_e4m3fn
    elif acc == "fp16":
        # Products below 2^5 (A's values below 2^2, B's below 8), many near it.
        a, b = np.clip(a, -3.9, 3.9), np.clip(b, -7.9, 7.9)
        a[::4] = g.uniform(3.5, 3.98, (4, k)) * sign
        b[:, ::3] = g.uniform(7.0, 7.96, (k, 12))
        a[5, 300:310] = -60000.0 * sign
        dt = ml_dtypes.bfloat16
    else:
        # Products below 2^22 (A's values below 2^11, B's below 2048), many near it.
        a, b = np.clip(a * 1000.0, -2000.0, 2000.0), np.clip(b * 1000.0, -2000.0, 2000.0)
        a[::4] = g.uniform(1800.0, 2040.0, (4, k)) * sign
        b[:, ::3] = g.uniform(1800.0, 2040.0, (k, 12))
        a[5, 300:310] = -2.0**24 * sign
        dt = ml_dtypes.bfloat16
    a, b = a.astype(dt), b.astype(dt)
    got = matmul_as_scalar(a, b, accumulate=f, rounding=mode, chunk=chunk).astype(np.float64)
    assert np.isinf(got[::4, ::3]).mean() > 0.5 and np.all(got[np.isinf(got)] * sign > 0)
    if chunk is None:
        assert np.any(got[5] == -sign * f.max)
    rows, cols = [0, 1, 5, 13], [0, 1, 2, 33]
    assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, mode, chunk))
    # One row at a time.
    assert same_bits(matmul_as_scalar(a[:1], b, accumulate=f, rounding=mode, chunk=chunk), got[:1])


@pytest.mark.parametrize("mode", ["up", "down"])
def test_directed_overflowed_sums_meet_infinite_products(mode):
    # A sum past the largest value is the infinity of its sign: an infinite product
    # of the other sign after it makes a NaN, one of its own sign keeps it; before
    # it, the infinity stays. As the scalar path.
    sign = 1.0 if mode == "up" else -1.0
    g = np.random.default_rng(5)
    a = (np.abs(g.standard_normal((8, 760))) * 3.0 * sign).astype(np.float32)
    b = np.abs(g.standard_normal((760, 16))).astype(np.float32)
    # Rows 0 and 1 pass the largest value in the third depth block, before their
    # infinite products there.
    a[:2, :520] = 0.0
    a[0, 700] = -np.inf * sign
    a[1, 710] = np.inf * sign
    a[2, 5] = -np.inf * sign
    b[705, 5] = -np.inf
    a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    f = lowp.format("float8_e5m2")
    got = matmul_as_scalar(a, b, accumulate=f, rounding=mode).astype(np.float64)
    assert np.isnan(got[0]).all() and np.all(np.delete(got[1:], 5, axis=1) == np.array([[1], [-1], [1], [1], [1], [1], [1]]) * np.inf * sign)
    assert np.isnan(np.delete(got[1:, 5], 1)).all()


@pytest.mark.parametrize("acc, mode", [("e5m2", "up"), ("e5m2", "down"), ("e5m2", "stochastic"), ("f6m9", "up"), ("fp16", "up")])
def test_tiny_products_grow_by_a_subnormal_unit(acc, mode):
    # Products far below the format's smallest subnormal (bf16 values near 1e-38):
    # rounding up (or away, stochastically) lifts each sum by a whole subnormal unit,
    # however small the product, so sums reach the largest value and overflow where
    # the growth of the normal range (a factor per add) alone would bound them.
    f = ACC_FORMATS[acc]
    g = np.random.default_rng(7)
    a = (g.standard_normal((6, 256)) * 1e-38).astype(np.float32).astype(ml_dtypes.bfloat16)
    a[::2] = np.abs(a[::2])
    b = np.abs(g.standard_normal((256, 23))).astype(np.float16)
    b[:, 1::2] *= -1
    got = matmul_as_scalar(a, b, accumulate=f, rounding=mode, seed=3).astype(np.float64)
    if mode == "up" and acc == "e5m2":
        # Positive products only (even rows, even columns): 2^-16 grows past 57344.
        assert np.isinf(got[::2, ::2]).all()
    if mode != "stochastic":
        rows, cols = [0, 1, 4], [0, 1, 22]
        assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, mode))


@pytest.mark.parametrize("acc", ["float8_e4m3fnuz", "float8_e5m2fnuz"])
@pytest.mark.parametrize("mode, rbits", [("nearest_even", None), ("toward_zero", None), ("up", None), ("down", None), ("stochastic", 21), ("stochastic", None)])
@pytest.mark.parametrize("chunk, chunk_acc", [(None, None), (16, None), (16, "float32"), (16, "bfloat16")])
def test_formats_without_negative_zero(acc, mode, rbits, chunk, chunk_acc):
    # fnuz accumulators have no -0 (its encoding is their NaN): a negative sum that
    # rounds to zero, or an exact zero, is +0 on every path, in the output and in the
    # chunk totals it feeds.
    g = np.random.default_rng(zlib.crc32(f"{acc}{mode}{chunk}{chunk_acc}".encode()))
    a = (g.standard_normal((17, 70)) * 0.01).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    b = (g.standard_normal((70, 19)) * 0.01).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    a[::4] = -np.abs(a[::4]).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    b[:, ::3] = np.abs(b[:, ::3]).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    # Rows of zeros: exact zero sums of +0 and -0 products (-0 to round down).
    a[5] = np.float32(-0.0)
    a[6] = 0.0
    kw = dict(accumulate=acc, rounding=mode, seed=4, rbits=rbits, chunk=chunk, chunk_accumulate=chunk_acc)
    got = np.asarray(matmul_as_scalar(a, b, **kw), np.float64)
    final_fnuz = chunk_acc is None
    if final_fnuz:
        assert not np.signbit(got[got == 0]).any()
    # Zero sums occur: the check above is not vacuous.
    assert (got[5:7] == 0).all()


@pytest.mark.parametrize("acc, mode, rbits", [("fp16", "stochastic", 13), ("fp16", "up", None), ("f6m9", "toward_zero", None),
                                             ("f6m9", "nearest_even", None), ("e5m2", "down", None), ("e5m2", "nearest_even", None)])
def test_scaled_kernels_tiny_operands(acc, mode, rbits):
    # The scale of those kernels is split between B's depth block (what its values
    # take exactly) and A's: tiny values in A (1e-12), in B (1e-30) or in both keep
    # the blocks on the kernels, or on the conversions' kernels for blocks that
    # cannot be bounded (A scaled up there). Against the scalar path and the exact
    # reference.
    f = ACC_FORMATS[acc]
    g = np.random.default_rng(zlib.crc32(f"{acc}{mode}".encode()))
    x = g.standard_normal((19, 300)).astype(np.float32)
    y = g.standard_normal((300, 21)).astype(np.float32)
    x[g.random(x.shape) < 0.01] *= 1e-12
    y[g.random(y.shape) < 0.01] *= 1e-30
    a, b = x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16)
    for aa, bb in ((a, b), (a, np.abs(b)), (np.abs(a), b)):
        got = matmul_as_scalar(aa, bb, accumulate=f, rounding=mode, seed=2, rbits=rbits)
        if mode != "stochastic":
            rows, cols = [0, 9, 18], [0, 10, 20]
            assert same(got[rows][:, cols], ref_matmul(aa[rows], bb[:, cols], f, mode))


@pytest.mark.parametrize("acc", ["f6m9", "e5m2", "fp16", "bf16"])
@pytest.mark.parametrize("chunk", [None, 64])
def test_float16_subnormal_inputs(acc, chunk, threads):
    # float16 values down to its smallest subnormal, 2^-24, whose last bits lie on
    # float16's grid (at or above 2^-24, whatever their exponents say): the
    # products of two stay f32 values once scaled into FloatFormat(6, 9)'s unit,
    # so its depth blocks run the tile kernels. Values of every binade of
    # float16's subnormals, rows and columns of them alone; every deterministic
    # mode, against the scalar path and the exact reference.
    f = ACC_FORMATS[acc]
    g = np.random.default_rng(zlib.crc32(f"sub16{acc}{chunk}".encode()))
    x = g.standard_normal((20, 300)).astype(np.float32)
    y = g.standard_normal((300, 21)).astype(np.float32)
    for v in (x, y):
        tiny = g.random(v.shape) < 0.2
        v[tiny] *= 2.0 ** -g.integers(14, 26, np.count_nonzero(tiny)).astype(np.float32)
    x[1] *= 2.0 ** -16
    y[:, 2] *= 2.0 ** -14
    a, b = x.astype(np.float16), y.astype(np.float16)
    assert np.count_nonzero((a != 0) & (np.abs(a) < 2.0 ** -14)) > 100
    for mode in DETERMINISTIC:
        got = matmul_as_scalar(a, b, accumulate=f, rounding=mode, chunk=chunk)
        rows, cols = [0, 1, 19], [0, 2, 20]
        assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, mode, chunk)), mode


@pytest.mark.parametrize("chunk", [None, 32])
def test_e5m2_nearest_products_below_the_scaled_grid(chunk):
    # bfloat16 products into float8_e5m2 to nearest: products whose last bits fall
    # below f32's smallest subnormal once scaled (below 2^-37) lose their sticky
    # bit in the residual FMA, harmless since each lies far below half the
    # format's smallest unit. Rows of only tiny products (sums that stay at zero,
    # either sign), rows that mix them with normal ones; the exact reference.
    f = ACC_FORMATS["e5m2"]
    g = np.random.default_rng(5)
    x = g.standard_normal((14, 200)).astype(np.float32)
    y = g.standard_normal((200, 19)).astype(np.float32)
    x[g.random(x.shape) < 0.3] *= 2.0 ** -30
    y[g.random(y.shape) < 0.3] *= 2.0 ** -25
    x[:3] *= 2.0 ** -24
    a, b = x.astype(ml_dtypes.bfloat16), y.astype(ml_dtypes.bfloat16)
    got = matmul_as_scalar(a, b, accumulate=f, rounding="nearest_even", chunk=chunk)
    rows, cols = [0, 1, 2, 5, 13], [0, 7, 18]
    # (The rational reference does not keep the sign of a zero sum.)
    assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, "nearest_even", chunk))
    assert np.all(got[:3] == 0) and np.count_nonzero(got[3:]) > 0.9 * got[3:].size


@pytest.mark.parametrize("chunk", [None, 32])
def test_e5m2_nearest_float16_products_below_the_scaled_grid(chunk, threads):
    # float16 products into float8_e5m2 to nearest: products with bits below
    # 2^-37 (below f32's smallest subnormal once scaled) run the tile kernel too,
    # as no such product can put a sum within the lost sticky bit of a midpoint
    # (2^22 - 1 = 2047 * 2049 would need a 12-bit factor). Tiny values in both
    # operands; the exact reference and the scalar path.
    f = ACC_FORMATS["e5m2"]
    g = np.random.default_rng(11)
    x = g.standard_normal((14, 200)).astype(np.float32)
    y = g.standard_normal((200, 19)).astype(np.float32)
    for v in (x, y):
        tiny = g.random(v.shape) < 0.3
        v[tiny] *= 2.0 ** -g.integers(8, 24, np.count_nonzero(tiny)).astype(np.float32)
    x[:2] *= 2.0 ** -10
    a, b = x.astype(np.float16), y.astype(np.float16)
    got = matmul_as_scalar(a, b, accumulate=f, rounding="nearest_even", chunk=chunk)
    rows, cols = [0, 1, 5, 13], [0, 7, 18]
    assert same(got[rows][:, cols], ref_matmul(a[rows], b[:, cols], f, "nearest_even", chunk))


@pytest.mark.parametrize("seed", range(4))
def test_wide_range_float16_products_match_the_scalar_path(seed):
    # Random shapes, float16 A over the whole float16 range (subnormals, zeros) against
    # a float16, bfloat16 or posit16 B, row- or column-major; accumulators float8_e5m2,
    # FloatFormat(6, 9), float16, bfloat16; mostly to nearest, some chunked: every
    # kernel's choice of its depth blocks (the bounds, the search for harmful
    # products) against the scalar float64 path, bit for bit.
    g = np.random.default_rng(100 + seed)
    accs = [ACC_FORMATS["e5m2"], ACC_FORMATS["f6m9"], ACC_FORMATS["fp16"], ACC_FORMATS["bf16"]]
    for case in range(12):
        m, k, n = int(g.integers(1, 30)), int(g.integers(1, 600)), int(g.integers(1, 40))

        def values(shape):
            x = g.standard_normal(shape) * 2.0 ** g.integers(-26, 8, shape)
            x[g.random(shape) < 0.05] = 0.0
            return x

        a = values((m, k)).astype(np.float16)
        b = values((k, n)).astype(np.float16).astype(np.float64).astype([np.float16, ml_dtypes.bfloat16, lowp.posit16][case % 3])
        if case % 2:
            b = np.asfortranarray(b)
        mode = DETERMINISTIC[int(g.integers(0, 6))] if case % 4 == 3 else "nearest_even"
        chunk = int(g.integers(1, 100)) if case % 3 == 2 else None
        matmul_as_scalar(a, b, accumulate=accs[case % 4], rounding=mode, chunk=chunk)


@pytest.mark.parametrize("m", [1, 8])
def test_e5m2_nearest_sticky_bit_below_the_scaled_grid(m):
    # float16 x posit16 products (12-bit significands) into float8_e5m2: 1.25 * 2^-13,
    # then -(2047 * 2^-24) * (2049 * 2^-14) = -(2^-16 - 2^-38), whose sum lies 2^-38
    # above the midpoint 1.125 * 2^-13 and rounds back to 1.25 * 2^-13. Scaled for the
    # kernel, 2^-38 falls below f32's smallest subnormal: its truncated sum would be
    # the tie, rounded to even (2^-13). Such products keep the block off the kernel.
    a = np.array([[1.25 * 2.0**-13, -2047 * 2.0**-24]] * m).astype(np.float16)
    b = np.array([[1.0] * 20, [2049 * 2.0**-14] * 20]).astype(lowp.posit16)
    for s in (1, -1):
        got = np.asarray(lowp.matmul(s * a, b, accumulate="float8_e5m2"), np.float64)
        assert np.all(got == s * 1.25 * 2.0**-13)
        assert same(got, ref_matmul(s * a, b, ACC_FORMATS["e5m2"], "nearest_even"))


def test_e5m2_nearest_product_past_its_bound():
    # 2^-16 then 18 * 16 = 288, a midpoint of e5m2 (256, 320): the exact sum is
    # above it and rounds to 320, but its float32 sum is the tie 288 (2^-16 is
    # half a float32 unit there), which would round to 256. Products of 128 or
    # more send the block to the f64 rounding.
    t = np.float32
    a = np.array([[2.0**-8, 18.0]] * 8, t).astype(ml_dtypes.float8_e4m3fn)
    b = np.array([[2.0**-8] * 24, [16.0] * 24], t).astype(ml_dtypes.float8_e4m3fn)
    got = lowp.matmul(a, b, accumulate="float8_e5m2")
    assert np.all(np.asarray(got, np.float64) == 320.0)
    # Below the bound (9 * 8 = 72, a midpoint of (64, 80)), the tile kernel: 80.
    a[:, 1], b[1] = 9.0, 8.0
    assert np.all(np.asarray(lowp.matmul(a, b, accumulate="float8_e5m2"), np.float64) == 80.0)
    # 2^-16 - 1.5 * 2^-16 rounds to -0 there (the sign of the exact sum).
    a[:, 1], b[1] = -1.5 * 2.0**-8, 2.0**-8
    got = np.asarray(lowp.matmul(a, b, accumulate="float8_e5m2"), np.float64)
    assert np.all(got == 0) and np.all(np.signbit(got))


@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_fp8_inputs_and_mixed_chunk_format(mode):
    a, b = data(4, 50, 3, ml_dtypes.float8_e4m3fn, 7)
    f1, f2 = ACC_FORMATS["e5m2"], ACC_FORMATS["fp16"]
    got = lowp.matmul(a, b, accumulate=f1, chunk=8, chunk_accumulate=f2, rounding=mode)
    assert same(got, ref_matmul(a, b, f1, mode, 8, f2))
    # fp16 inputs, f32 chunk totals.
    a, b = data(2, 40, 3, np.float16, 8)
    got = lowp.matmul(a, b, accumulate="fp16", chunk=4, chunk_accumulate="float32", rounding=mode)
    assert same(got, ref_matmul(a, b, ACC_FORMATS["fp16"], mode, 4, lowp.format("float32")))


@pytest.mark.parametrize("acc", list(ACC_FORMATS), ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (1, 16), (8, 16), (4, 32)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_negative_sum_rounded_to_zero_keeps_its_sign(acc, shape, dtype):
    # p then -1.25 p with p the format's smallest subnormal: the exact sum -p/4
    # rounds to -0 to nearest, toward zero and up (IEEE: a result rounded to zero
    # keeps the sign of the exact value), on every path.
    f = ACC_FORMATS[acc]
    e = f.emin - f.man_bits
    qa, qb = 2.0 ** (e // 2), 2.0 ** (e - e // 2)
    m, n = shape
    a = np.array([[qa, -1.25 * qa]] * m, np.float32).astype(dtype)
    b = np.full((2, n), qb, np.float32).astype(dtype)
    assert np.all(a.astype(np.float64) @ b.astype(np.float64) == -0.25 * 2.0**e)
    for mode in ["nearest_even", "nearest_away", "toward_zero", "up"]:
        got = lowp.matmul(a, b, accumulate=f, rounding=mode)
        assert np.all(got == 0) and np.all(np.signbit(got)), (mode, got)
        lowp._lowp.set_isa("scalar")
        try:
            assert same_bits(lowp.matmul(a, b, accumulate=f, rounding=mode), got)
        finally:
            lowp._lowp.set_isa(None)


@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_overflow_and_subnormals(mode):
    # Large values overflow an e5m2 accumulator; tiny ones land in fp16 subnormals.
    a, b = data(2, 20, 3, ml_dtypes.bfloat16, 9, scale=200.0)
    f = ACC_FORMATS["e5m2"]
    assert same(lowp.matmul(a, b, accumulate=f, rounding=mode), ref_matmul(a, b, f, mode))
    a, b = data(2, 20, 3, ml_dtypes.bfloat16, 10, scale=2.0**-7)
    f = ACC_FORMATS["fp16"]
    assert same(lowp.matmul(a, b, accumulate=f, rounding=mode), ref_matmul(a, b, f, mode))


def test_generic_formats():
    # Accumulators outside the fast routine (posits, no subnormals) go through Format.encode.
    a, b = data(2, 30, 3, ml_dtypes.float8_e4m3fn, 11)
    nosub = lowp.FloatFormat(5, 4, subnormals=False)
    got = lowp.matmul(a, b, accumulate=nosub)
    # Reference: same as round_exact except values below min normal round to 0 / min normal.
    assert got.shape == (2, 3) and np.all(np.isfinite(got))
    p16 = lowp.format("posit16")
    got = lowp.matmul(a, b, accumulate=p16)
    ref = np.zeros((2, 3))
    for i in range(2):
        for j in range(3):
            acc = 0.0
            for p in range(30):
                exact = Fraction(acc) + Fraction(float(a[i, p])) * Fraction(float(b[p, j]))
                # Exact in float64 here (few bits), so lowp.round of it rounds the exact sum once.
                assert Fraction(float(exact)) == exact
                acc = float(lowp.round(np.array([float(exact)]), p16)[0])
            ref[i, j] = acc
    assert same(got, ref)


def test_float32_accumulate_matches_sequential():
    a, b = data(3, 200, 4, np.float32, 12)
    got = lowp.matmul(a, b, accumulate="float32", chunk=10)
    assert same(got, ref_matmul(a, b, lowp.format("float32"), "nearest_even", 10))
    got = lowp.matmul(a, b, accumulate="float32", rounding="toward_zero")
    assert same(got, ref_matmul(a, b, lowp.format("float32"), "toward_zero"))
    # Past one depth block of the BLAS-style path, a chunk of the whole depth makes
    # the adds in order (the documented way to ask for them to nearest-even).
    a, b = data(3, 700, 4, np.float32, 13)
    got = lowp.matmul(a, b, accumulate="float32", chunk=700)
    assert same(got, ref_matmul(a, b, lowp.format("float32"), "nearest_even"))


def test_stochastic_reproducible_and_unbiased():
    # 1000 rows of the same dot product: each output element draws its own bits.
    k, m = 1024, 1000
    b = np.full((k, 1), 0.01, dtype=ml_dtypes.bfloat16)
    a = np.ones((m, k), dtype=ml_dtypes.bfloat16)
    exact = k * float(b[0, 0])
    rne = lowp.matmul(a[:1], b, accumulate="bf16")
    assert float(rne[0, 0]) == 4.0  # nearest-even stalls where ulp/2 exceeds the addend
    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(1)
        s1 = lowp.matmul(a, b, accumulate="bf16", rounding="stochastic", seed=123)
        lowp.set_num_threads(2)
        s2 = lowp.matmul(a, b, accumulate="bf16", rounding="stochastic", seed=123)
    finally:
        lowp.set_num_threads(n0)
    assert np.array_equal(s1, s2)
    s3 = lowp.matmul(a, b, accumulate="bf16", rounding="stochastic", seed=124)
    assert not np.array_equal(s1, s3)
    assert len(np.unique(s1)) > 5
    # Each step's error is zero-mean with |err| <= ulp(16) = 1/16: std of the mean of
    # m sums <= sqrt(k) / 16 / sqrt(m) ~ 0.063 / ... ; 0.25 is > 10 sigma.
    assert abs(float(np.mean(s1.astype(np.float64))) - exact) < 0.25
    # Chunked stochastic is reproducible too.
    c1 = lowp.matmul(a[:50], b, accumulate="bf16", chunk=32, rounding="stochastic", seed=5)
    c2 = lowp.matmul(a[:50], b, accumulate="bf16", chunk=32, rounding="stochastic", seed=5)
    assert np.array_equal(c1, c2)


@pytest.mark.parametrize("chunk", [None, 16])
def test_stochastic_stacks_draw_independent_bits(chunk):
    """The matrices of a stack round with bits of their own (rounding errors of the heads
    of an attention layer are not copies of each other), reproducibly at any thread
    count and however the stack is split into calls; the first matrix draws as the
    same product alone does."""
    rng = np.random.default_rng(7)
    a1 = rng.standard_normal((5, 200)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((200, 6)).astype(ml_dtypes.bfloat16)
    kw = dict(accumulate="bf16", rounding="stochastic", seed=11, chunk=chunk)
    a = np.broadcast_to(a1, (2, 3, 5, 200))  # six copies of one product
    n0 = lowp.get_num_threads()
    try:
        outs = []
        for t in (1, 2):
            lowp.set_num_threads(t)
            outs.append(lowp.matmul(a, b, **kw))
    finally:
        lowp.set_num_threads(n0)
    r = outs[0]
    assert np.array_equal(outs[0], outs[1])
    flat = r.reshape(6, 5, 6)
    assert all(not np.array_equal(flat[0], flat[j]) for j in range(1, 6))
    assert np.array_equal(flat[0], lowp.matmul(a1, b, **kw))
    # The same matrices, stacked along one batch axis or broadcast from b's side.
    assert np.array_equal(lowp.matmul(np.ascontiguousarray(a).reshape(6, 5, 200), b, **kw), flat)
    bt = np.broadcast_to(b, (2, 3, 200, 6))
    assert np.array_equal(lowp.matmul(a1, bt, **kw), r)
    # Each matrix is still unbiased: the mean error over the stack against the exact sum.
    exact = a1.astype(np.float64) @ b.astype(np.float64)
    err = flat.astype(np.float64) - exact
    assert abs(err.mean()) < 4 * err.std() / np.sqrt(err.size) + 1e-12


@pytest.mark.parametrize("dtype, rbits", [(np.float16, 1), (np.float16, 13), (ml_dtypes.bfloat16, 32), (np.float32, 64)])
def test_stochastic_bits_of_rows_and_columns(dtype, rbits):
    # Element (i, j) = SR(1 + 2^-11) into fp16 at its second step: it rounds up exactly
    # when the step's top random bit is 0, so the product shows each element's bit:
    # the top bit of row i's word xor column j's (documented in lowp.matmul).
    m, n = 96, 80
    a = np.ones((m, 2), dtype=dtype)
    b = np.empty((2, n), dtype=dtype)
    b[0], b[1] = 1.0, 2.0**-11
    kw = dict(accumulate="float16", rounding="stochastic", seed=11, rbits=rbits)
    c = matmul_as_scalar(a, b, **kw).astype(np.float64)
    assert set(np.unique(c)) <= {1.0, 1.0 + 2.0**-10}
    bit = (c == 1.0).astype(np.int64)
    # Rows and columns: xor-separable, so every 2x2 rectangle xors to zero ...
    assert np.array_equal(bit ^ bit[:1] ^ bit[:, :1] ^ bit[:1, :1], np.zeros_like(bit))
    # ... but each element's bit is fair, and over seeds two elements' bits are
    # independent (a row's and a column's neighbour).
    assert abs(bit.mean() - 0.5) < 0.1
    bits = np.array([lowp.matmul(a[:2], b[:, :2], **{**kw, "seed": s})[:, :].ravel() == 1.0 for s in range(400)])
    assert np.all(np.abs(bits.mean(axis=0) - 0.5) < 0.1)
    for x, y in [(0, 1), (0, 2), (1, 2)]:
        assert 0.4 < np.mean(bits[:, x] == bits[:, y]) < 0.6
    # Rows do not depend on the rows after them, nor (without chunks) columns on the
    # columns after them; another seed draws other bits.
    assert same_bits(lowp.matmul(a[:7], b, **kw), c[:7].astype(np.float32))
    assert same_bits(lowp.matmul(a, b[:, :9], **kw), c[:, :9].astype(np.float32))
    # (One row, and five: tiles of a single row, computed alone.)
    assert same_bits(lowp.matmul(a[:1], b, **kw), c[:1].astype(np.float32))
    assert same_bits(lowp.matmul(a[:5], b, **kw), c[:5].astype(np.float32))
    assert not np.array_equal(lowp.matmul(a, b, **{**kw, "seed": 12}), c)


@pytest.mark.parametrize("mode", DETERMINISTIC)
@pytest.mark.parametrize("acc", list(ACC_FORMATS))
@pytest.mark.parametrize("dt", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn])
@pytest.mark.parametrize("cols", [3, 5, 17])
def test_sum_vs_fractions(acc, mode, dt, cols):
    # Few columns take the f64 path, 4 and more the tile kernels where the
    # accumulator and inputs allow.
    f = ACC_FORMATS[acc]
    g = np.random.default_rng(13)
    x = (g.standard_normal((40, cols)) * 8).astype(dt)
    got = lowp.sum(x, axis=0, accumulate=f, rounding=mode)
    ones = np.ones((1, 40), dt)
    assert same(got, ref_matmul(ones, x, f, mode)[0])
    got = lowp.sum(x, axis=1, accumulate=f, rounding=mode, chunk=2)
    assert same(got, ref_matmul(ones[:, :cols], x.T, f, mode, 2)[0])
    got = lowp.sum(x, accumulate=f, rounding=mode)
    assert np.ndim(got) == 0
    assert same(got, ref_matmul(np.ones((1, 40 * cols), dt), x.reshape(40 * cols, 1), f, mode)[0, 0])
    # One column, chunked, and a matrix-vector product (one-column chains).
    got = lowp.sum(x.reshape(-1), accumulate=f, rounding=mode, chunk=7)
    assert same(got, ref_matmul(np.ones((1, 40 * cols), dt), x.reshape(40 * cols, 1), f, mode, 7)[0, 0])
    got = lowp.matmul(x.T, x[:, :1], accumulate=f, rounding=mode)
    assert same(got[:, 0], ref_matmul(x.T, x[:, :1], f, mode)[:, 0])


def test_sum_stalls_and_chunking():
    x = np.ones(4096, ml_dtypes.bfloat16)
    assert float(lowp.sum(x, accumulate="bf16")) == 256.0
    assert float(lowp.sum(x, accumulate="bf16", chunk=64)) == 4096.0
    assert float(lowp.sum(x)) == 4096.0
    assert lowp.sum(x).dtype == np.float32
    assert lowp.sum(x, accumulate="float64").dtype == np.float64
    y = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert np.array_equal(lowp.sum(y, axis=(0, 2)), y.sum(axis=(0, 2)))
    assert np.array_equal(lowp.sum(y, axis=-1), y.sum(axis=-1))
    with pytest.raises(ValueError, match="axis"):
        lowp.sum(y, axis=3)
    with pytest.raises(ValueError, match="chunk"):
        lowp.sum(y, chunk=0)
    with pytest.raises(TypeError, match="x"):
        lowp.sum(np.ones(3, np.complex64))


def _fp16_tile_inputs(dtype, m, k, n, seed):
    """Inputs for the fp16 nearest-even tile kernels: ordinary values plus extremes
    of the input format (largest values, subnormals, zeros of both signs)."""
    g = np.random.default_rng(seed)
    fi = ml_dtypes.finfo(dtype)
    extremes = np.array([float(fi.max), -float(fi.max), float(fi.smallest_subnormal), -float(fi.smallest_subnormal),
                         0.0, -0.0, float(fi.smallest_normal), 1.0], np.float32)

    def one(shape):
        x = (g.standard_normal(shape) * 8).astype(np.float32)
        pick = g.random(shape) < 0.1
        x[pick] = g.choice(extremes, size=int(pick.sum()))
        return x.astype(dtype)

    return one((m, k)), one((k, n))


@pytest.mark.parametrize("dtypes", [(ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
                                    (ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz),
                                    (ml_dtypes.bfloat16, ml_dtypes.bfloat16),
                                    (ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16)],
                         ids=lambda d: np.dtype(d[0]).name + "x" + np.dtype(d[1]).name)
@pytest.mark.parametrize("chunk", [None, 16])
def test_fp16_nearest_even_tile_kernels(dtypes, chunk):
    # fp16 nearest-even accumulation runs on f32 register tiles (an FMA per add for fp8
    # products, TwoSum and round-to-odd otherwise); bit-exact with the rational reference.
    a, _ = _fp16_tile_inputs(dtypes[0], 9, 37, 1, 1)
    _, b = _fp16_tile_inputs(dtypes[1], 1, 37, 21, 2)
    f = ACC_FORMATS["fp16"]
    got = lowp.matmul(a, b, accumulate="float16", chunk=chunk)
    ref = ref_matmul(a, b, f, "nearest_even", chunk)
    # The reference stops at the first overflow; lowp goes on (a later chunk total
    # overflowing the other way gives NaN): non-finite results must agree as non-finite.
    fin = np.isfinite(ref)
    assert same(got[fin], ref[fin]) and not np.isfinite(got[~fin]).any()
    if chunk is None:
        assert same(got, ref)
    assert np.isinf(got).any() or dtypes[0] == ml_dtypes.float8_e4m3fn  # the extremes overflow fp16
    lowp._lowp.set_isa("scalar")
    try:
        assert same(lowp.matmul(a, b, accumulate="float16", chunk=chunk), got)
    finally:
        lowp._lowp.set_isa(None)


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16],
                         ids=lambda d: np.dtype(d).name)
def test_fp16_tile_kernels_specials_and_fallback(dtype):
    # NaN / inf inputs, and bfloat16 values whose products leave float32 (the tile
    # kernel then runs that depth block in float64): SIMD equals the scalar path,
    # across many row and column blocks and two threads.
    g = np.random.default_rng(5)
    a = g.standard_normal((70, 150)).astype(np.float32)
    b = g.standard_normal((150, 90)).astype(np.float32)
    if dtype == ml_dtypes.bfloat16:
        a[3, 10], b[140, 7] = 1e30, 1e20        # products beyond float32
        a[60, 100], b[100, 50] = 1e-30, 1e-20   # products below float32 subnormals
        a[5, 5], b[6, 6] = np.inf, -np.inf
    b[20, 3] = np.nan
    a[1, 2] = -0.0
    a, b = a.astype(dtype), b.astype(dtype)
    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(2)
        res = [lowp.matmul(a, b, accumulate="float16", chunk=c) for c in (None, 64)]
        lowp.set_num_threads(1)
        assert all(same(x, lowp.matmul(a, b, accumulate="float16", chunk=c)) for x, c in zip(res, (None, 64)))
        lowp._lowp.set_isa("scalar")
        try:
            assert all(same(x, lowp.matmul(a, b, accumulate="float16", chunk=c)) for x, c in zip(res, (None, 64)))
        finally:
            lowp._lowp.set_isa(None)
    finally:
        lowp.set_num_threads(n0)
    assert np.isnan(res[0][:, 3]).all()
    # Rows without specials against the rational reference.
    rows, cols = [0, 2, 40], [4, 5, 8, 9, 10, 11, 12]
    assert same(res[0][rows][:, cols], ref_matmul(a[rows], b[:, cols], ACC_FORMATS["fp16"], "nearest_even"))


@pytest.mark.parametrize("rbits", [None, 5, 13, 16, 32, 40])
@pytest.mark.parametrize("chunk", [None, 16])
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_stochastic_vector_step_threads_and_scalar(rbits, chunk, dtype):
    # Stochastic fp16 / bf16 / e5m2 / FloatFormat(6, 9) accumulation with the random
    # bits drawn in vector lanes (float64 register tiles of 8 columns, the step path
    # for the tail and for tiles whose sums leave the normal range; with at most
    # 23 - man bits and products on the format's grid, the float32 tiles of 16 columns
    # whose FMA truncates; past that, float64 tiles whose FMA truncates): identical
    # at 1 and 2 threads and on the scalar path, for many columns and rbits up to
    # and past 32.
    a, b = data(21, 70, 83, dtype, 31, scale=3.0)
    n0 = lowp.get_num_threads()
    for acc in ("float16", "bfloat16", ACC_FORMATS["e5m2"], ACC_FORMATS["f6m9"]):
        kw = dict(accumulate=acc, rounding="stochastic", seed=9, rbits=rbits, chunk=chunk)
        try:
            lowp.set_num_threads(2)
            two = lowp.matmul(a, b, **kw)
            lowp.set_num_threads(1)
            one = lowp.matmul(a, b, **kw)
            lowp._lowp.set_isa("scalar")
            scalar = lowp.matmul(a, b, **kw)
        finally:
            lowp._lowp.set_isa(None)
            lowp.set_num_threads(n0)
        assert same(one, two) and same(one, scalar)
        # Every result lies between the round-down and round-up accumulations.
        lo = lowp.matmul(a, b, accumulate=acc, chunk=chunk, rounding="down")
        hi = lowp.matmul(a, b, accumulate=acc, chunk=chunk, rounding="up")
        fin = np.isfinite(lo) & np.isfinite(hi)
        assert np.all((one[fin] >= lo[fin]) & (one[fin] <= hi[fin]))


@pytest.mark.parametrize("acc, rbits, tol", [("float16", 13, 0.7), ("float16", 4, 0.7), ("bfloat16", 16, 2.5)])
def test_stochastic_few_bits_unbiased(acc, rbits, tol):
    # The float32 stochastic tiles (fp8 products, few random bits): 16 columns of
    # 256 rows of the same 4096-term dot product, whose addend 5 * 2^-9 lies far
    # below half a unit of the final sum (2^-5 in float16, 2^-2 in bfloat16), where
    # nearest-even stalls. Each step's error is zero-mean (the addend is a whole
    # number of 2^-rbits units) with |err| < ulp: the std of the mean of the 4096
    # sums is at most 64 * ulp / 64, and `tol` is 10 times that.
    k = 4096
    a = np.ones((256, k), dtype=ml_dtypes.float8_e4m3fn)
    b = np.full((k, 16), 5 * 2.0**-9, dtype=ml_dtypes.float8_e4m3fn)
    exact = k * 5 * 2.0**-9
    rne = lowp.matmul(a[:1], b, accumulate=acc)
    assert abs(float(rne[0, 0]) - exact) > 5
    s1 = lowp.matmul(a, b, accumulate=acc, rounding="stochastic", seed=3, rbits=rbits)
    assert len(np.unique(s1)) > 5
    assert abs(float(np.mean(s1.astype(np.float64))) - exact) < tol
    assert np.array_equal(s1, lowp.matmul(a, b, accumulate=acc, rounding="stochastic", seed=3, rbits=rbits))


@pytest.mark.parametrize("acc, rbits", [("float16", 13), ("float16", 5), ("bfloat16", 16), ("bfloat16", 7), ("f6m9", 14)])
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_stochastic_few_bits_sums_match_scalar(acc, rbits, dtype):
    # lowp.sum over many columns runs on the float32 tiles too (a product with a row
    # of ones): the same bits as the scalar path, whole and chunked, over each axis.
    g = np.random.default_rng(rbits)
    for shape, axis in (((300, 37), 0), ((37, 300), 1), ((1000,), None), ((5, 700, 20), 1)):
        x = (g.standard_normal(shape) * 3).astype(np.float32).astype(dtype)
        for chunk in (None, 16):
            kw = dict(axis=axis, accumulate=ACC_FORMATS.get(acc, acc), rounding="stochastic", seed=3, rbits=rbits, chunk=chunk)
            simd = lowp.sum(x, **kw)
            lowp._lowp.set_isa("scalar")
            try:
                scalar = lowp.sum(x, **kw)
            finally:
                lowp._lowp.set_isa(None)
            assert same_bits(simd, scalar), (shape, axis, chunk)


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e5m2, ml_dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_fp16_tile_kernels_strided_views(dtype):
    # Transposed and strided operands pack through the same kernels.
    a, b = data(60, 33, 50, dtype, 41, scale=2.0)
    at = np.ascontiguousarray(a.T).T          # column-major a
    bs = np.repeat(b, 2, axis=1)[:, ::2]      # every other column of a wider array
    got = lowp.matmul(at, bs, accumulate="float16", chunk=8)
    assert same(got, lowp.matmul(a, b, accumulate="float16", chunk=8))
    assert same(got[:4, :6], ref_matmul(a[:4], b[:, :6], ACC_FORMATS["fp16"], "nearest_even", 8))


def e4m3_spread(g, shape, lo, hi):
    """float8_e4m3fn values of random sign, magnitudes 2^lo to 2^hi mixed."""
    mag = np.float32(2.0) ** g.integers(lo, hi, shape)
    return (g.choice([-1, 1], shape) * mag * g.uniform(1, 2, shape)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)


@pytest.mark.parametrize("acc", ["fp16", "bf16", "e5m2", "f6m9"])
@pytest.mark.parametrize("rbits", [None, 32, 22])
@pytest.mark.parametrize("chunk", [None, 64, 5])
def test_stochastic_wide_bits_on_float32_tiles(acc, rbits, chunk, threads):
    # float8_e4m3fn products with more random bits than a float32 sum keeps below
    # the unit: the float32 tiles decide with the top bits and redo on f64 lanes
    # every tile whose sums were not all exact; the chunk totals redo their lanes
    # whose top bits tie. Magnitudes from 2^-9 to 2^8 mixed, so that sums are often
    # inexact in float32: the same bits as the scalar path, a matrix and one row.
    g = np.random.default_rng(17)
    a, b = e4m3_spread(g, (37, 300), -9, 8), e4m3_spread(g, (300, 45), -9, 4)
    kw = dict(accumulate=ACC_FORMATS.get(acc, acc), rounding="stochastic", seed=9, rbits=rbits, chunk=chunk)
    matmul_as_scalar(a, b, **kw)
    matmul_as_scalar(a[:1], b, **kw)


@pytest.mark.parametrize("acc", ["fp16", "e5m2"])
@pytest.mark.parametrize("chunk_acc", ["float32", "bf16", lowp.FloatFormat(5, 7), "float8_e4m3fnuz"], ids=str)
def test_stochastic_wide_bits_other_chunk_totals(acc, chunk_acc, threads):
    # Wide bits with chunk totals of another format (float32, one whose subnormals
    # lie above the sums', one without -0): gathered rows of totals on f64 lanes or
    # the scalar add, the same bits as the scalar path.
    g = np.random.default_rng(19)
    a, b = e4m3_spread(g, (29, 200), -9, 5), e4m3_spread(g, (200, 50), -9, 3)
    kw = dict(accumulate=ACC_FORMATS.get(acc, acc), rounding="stochastic", seed=2, chunk=16,
              chunk_accumulate=ACC_FORMATS.get(chunk_acc, chunk_acc))
    matmul_as_scalar(a, b, **kw)


def test_stochastic_wide_bits_tiles_redone(threads):
    # Two rows of large values with tiny ones among them: their tiles' float32 sums
    # are often inexact and redone on f64 lanes (a sixth of the tiles, too few to
    # move the product to the f64 tiles), where the bits below the top ones decide
    # some sums; the other rows' sums are exact.
    g = np.random.default_rng(3)
    a = g.standard_normal((48, 2048)) * 0.25
    for r in (5, 6):
        a[r] *= 256
        a[r, g.random(2048) < 0.5] = 2.0 ** -9
    a = a.astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    b = g.standard_normal((2048, 128)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    kw = dict(accumulate=ACC_FORMATS["fp16"], rounding="stochastic", seed=1)
    got = matmul_as_scalar(a, b, **kw)
    assert not same_bits(got, lowp.matmul(a, b, **kw, rbits=13))


@pytest.mark.parametrize("acc, unit", [("fp16", 13), ("f6m9", 14)])
def test_stochastic_wide_bits_matter(acc, unit):
    # Where a float32 sum is inexact and the top bits of the random word equal its
    # remainder's, the bits below decide: enough such adds here that the default
    # 32 bits and the top `unit` alone give different results, and the tiles'
    # redo on f64 lanes gives the scalar path's (only where some add met such a tie:
    # a second pass of the float32 tile finds them).
    g = np.random.default_rng(23)
    a, b = e4m3_spread(g, (64, 1000), -9, 8), e4m3_spread(g, (1000, 64), -9, 4)
    kw = dict(accumulate=ACC_FORMATS[acc], rounding="stochastic", seed=4)
    got = matmul_as_scalar(a, b, **kw)
    few = lowp.matmul(a, b, **kw, rbits=unit)
    assert not same_bits(got, few)
    # A row alone (tiles of one row; its words are row 0's) where that happens.
    rows = (matmul_as_scalar(a[i:i + 1], b, **kw) for i in range(64))
    assert any(not same_bits(r, lowp.matmul(a[i:i + 1], b, **kw, rbits=unit)) for i, r in enumerate(rows))


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("rbits", [None, 30, 40])
@pytest.mark.parametrize("spread", [False, True], ids=["normal", "spread"])
@pytest.mark.parametrize("chunk", [None, 9])
def test_stochastic_float32_accumulator_on_f64_tiles(dtype, rbits, spread, chunk, threads):
    # Into float32 with more random bits than float64 keeps below its unit (23 + 32 >
    # 51), the f64 tiles decide with the top 29 where every sum of a tile was exact,
    # and the other tiles go the exact way. Magnitudes spread over 2^-40 to 2^40 make
    # many f64 sums inexact: the same bits as the scalar path either way.
    g = np.random.default_rng(31)
    shape_a, shape_b = (21, 200), (200, 27)
    if spread:
        mk = lambda s: (g.choice([-1, 1], s) * 2.0 ** g.integers(-40, 40, s) * g.uniform(1, 2, s)).astype(np.float32)
    else:
        mk = lambda s: g.standard_normal(s).astype(np.float32)
    a, b = mk(shape_a), mk(shape_b)
    if dtype != ml_dtypes.bfloat16:
        a, b = np.clip(a, -240, 240), np.clip(b, -240, 240)
    a, b = a.astype(dtype), b.astype(dtype)
    kw = dict(accumulate="float32", rounding="stochastic", seed=5, rbits=rbits, chunk=chunk)
    matmul_as_scalar(a, b, **kw)


NAN_PAYLOADS = {
    "bfloat16": (ml_dtypes.bfloat16, np.uint16, [0x7FFF, 0xFFFF, 0xFFF6, 0x7F81]),
    "float16": (np.float16, np.uint16, [0x7FFF, 0xFFFF, 0x7C01, 0xFE01]),
    "float32": (np.float32, np.uint32, [0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFFC00001, 0xFFFF8000]),
    "float8_e5m2": (ml_dtypes.float8_e5m2, np.uint8, [0x7F, 0xFF, 0x7D]),
}


@pytest.mark.parametrize("dtype", list(NAN_PAYLOADS))
@pytest.mark.parametrize("shape", [(8, 40, 20), (1, 40, 20), (20, 40, 1), (70, 300, 33)], ids=str)
def test_nan_payloads_stay_nan(dtype, shape):
    """NaNs of any payload among the inputs (all ones, signalling, negative) make NaN
    sums in every kernel: the kernels' integer roundings must not carry a payload into
    the sign or clear it to an infinity. Checked against the scalar path, whose
    element-wise f64 adds keep every NaN."""
    dt, ut, nans = NAN_PAYLOADS[dtype]
    m, k, n = shape
    g = np.random.default_rng(5)
    a = g.standard_normal((m, k)).astype(np.float32).astype(dt)
    b = g.standard_normal((k, n)).astype(np.float32).astype(dt)
    av, bv = a.view(ut), b.view(ut)
    for q in range(max(1, m * k // 50)):
        av[g.integers(m), g.integers(k)] = nans[q % len(nans)]
    bv[g.integers(k), g.integers(n)] = nans[-1]
    accs = ["float16", "bfloat16", "float8_e5m2", lowp.FloatFormat(6, 9), "float32"]
    for acc in accs:
        for mode in ["nearest_even", "toward_zero", "up", "down", "stochastic"]:
            for chunk in (None, 16):
                if acc == "float32" and mode == "nearest_even" and chunk is None:
                    continue  # the float32 path, which sums in its own order
                got = matmul_as_scalar(a, b, accumulate=acc, rounding=mode, seed=3, chunk=chunk)
                assert np.isnan(got).sum() >= m * n // 4 or m * n < 4 and np.isnan(got).any()


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.float32, ml_dtypes.float8_e5m2,
                                   ml_dtypes.float8_e4m3fn], ids=lambda d: np.dtype(d).name)
def test_one_row_products_four_strips_at_a_time(dtype, threads):
    """One-row products (and one-column ones, which run as one row) take the f32 tile
    kernels four 16-column strips at a time, each strip a row of a four-row tile with
    its own part of B: 341 columns are 22 strips, so each task has runs of four and
    single strips left over. Depth 300 crosses a depth block; B holds an inf, a -inf
    and a NaN in some strips, and wide-ranging values in others. Against the scalar
    path bit for bit, every accumulator and deterministic mode, with and without chunks."""
    g = np.random.default_rng(zlib.crc32(np.dtype(dtype).name.encode()))
    k, n = 300, 341
    a = (g.standard_normal((1, k)) * 3.0).astype(np.float32).astype(dtype)
    bf = g.standard_normal((k, n)) * np.exp2(g.integers(-8, 8, (1, n)))
    b = bf.astype(np.float32).astype(dtype)
    b[7, 40], b[100, 130], b[299, 300] = np.inf, -np.inf, np.nan
    accs = ["float16", "bfloat16", "float8_e5m2", lowp.FloatFormat(6, 9), "float32"]
    for acc in accs:
        for mode in ["nearest_even", "toward_zero", "up", "down"]:
            for chunk in (None, 24):
                if acc == "float32" and mode == "nearest_even" and chunk is None:
                    continue  # the float32 path, which sums in its own order
                got = matmul_as_scalar(a, b, accumulate=acc, rounding=mode, chunk=chunk)
                assert np.isnan(got[0, 40]) or np.isinf(got[0, 40])
                assert np.isfinite(got[0, :16]).all() or acc == "float8_e5m2"
                matmul_as_scalar(np.ascontiguousarray(b.T), np.ascontiguousarray(a.T), accumulate=acc,
                                 rounding=mode, chunk=chunk)


@pytest.mark.parametrize("acc, mode", [("fp16", "stochastic"), ("float32", "stochastic"), ("e5m2", "nearest_even"),
                                       ("e5m2", "up"), ("f6m9", "stochastic")], ids=str)
@pytest.mark.parametrize("chunk", [None, 7])
def test_f64_tiles_widths_not_a_multiple_of_eight(acc, mode, chunk, threads):
    # The f64 register tiles span 8 columns; a last tile of fewer columns runs on
    # accumulator rows padded to whole tiles (the padding never stored): widths 1
    # to 17 and 100, against the scalar path, with chunk totals, and with an
    # infinity in A (NaN padding lanes, which would spill into the next row's
    # first columns if the rows were not padded) and a NaN.
    f = lowp.format("float32") if acc == "float32" else ACC_FORMATS[acc]
    g = np.random.default_rng(zlib.crc32(f"{acc}{mode}{chunk}".encode()))
    a = (g.standard_normal((13, 70)) * 8).astype(np.float32).astype(ml_dtypes.bfloat16)
    a[5, 5] = np.inf
    a[12, 9] = np.nan
    for n in list(range(1, 18)) + [100]:
        b = (g.standard_normal((70, n)) * 8).astype(np.float32).astype(ml_dtypes.bfloat16)
        got = matmul_as_scalar(a, b, accumulate=f, chunk=chunk, rounding=mode, seed=5)
        assert np.isnan(got[12]).all()


def check_in_place(a, b, layout, kw, finite=True):
    """``a @ b`` (with ``kw``) on B laid out as ``layout`` (rows forward, reversed, or every
    other row of a wider array), bit for bit against the scalar path and the same B packed
    (Fortran-ordered); B's element (50, 7) a NaN, then set to 1.0. With ``finite``, half
    the first row's sums must stay finite (values that test the kernels' finite paths)."""
    k, n = b.shape
    if layout == "reversed":
        b = np.ascontiguousarray(b[::-1])[::-1]
    elif layout == "strided":
        wide = np.zeros((2 * k, n + 20), b.dtype)
        wide[::2, :n] = b
        b = wide[::2, :n]
    assert b.strides[1] == b.itemsize
    got = matmul_as_scalar(a, b, **kw)
    assert same_bits(got, lowp.matmul(a, np.asfortranarray(b), **kw))
    assert np.isnan(got[:, 7]).all() and (not finite or np.isfinite(got[0]).sum() >= n // 2)
    # Without the NaN: the first block in place as well.
    b2 = np.array(b)
    b2[50, 7] = 1.0
    got = matmul_as_scalar(a, b2, **kw)
    assert same_bits(got, lowp.matmul(a, np.asfortranarray(b2), **kw))
    assert not finite or np.isfinite(got[0]).sum() >= n // 2


@pytest.mark.parametrize("m", [1, 7])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("acc", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "down"])
@pytest.mark.parametrize("layout", ["rows", "reversed", "strided"])
@pytest.mark.parametrize("chunk", [None, 40])
def test_few_rows_read_b_in_place(m, dtype, acc, mode, layout, chunk, threads):
    """A product of few rows with a row-major bfloat16 or float16 B reads B's codes in
    place, decoded in registers: to nearest (from bf16, the sum rounded to odd, into
    float16 for one row only; from fp16, the FMA and a midpoint check) and in the
    directed modes (into float16 at its unit bit on scaled values, whose whole scale A
    then takes, or through the conversions). One row takes four 16-column strips at a
    time; 7 rows are row groups of 6 or 4, the last one partial, each decoding B again.
    The depth blocks (k = 700: three of them) test each path: plain values; one block
    holding a NaN (with a payload the in-place decode would keep), another whose
    products underflow float32 (bf16: B's values near 2^-140; fp16: subnormals), both
    packed instead (fp16: the NaN's alone); and sums that grow toward float16's largest
    value. 300 columns leave a last strip of 12, packed too. B with its rows reversed
    and B a view of every other row of a wider array (row strides -300 and 2*320) take
    the same path. Bit for bit against the scalar path and the same B packed
    (Fortran-ordered)."""
    g = np.random.default_rng(31)
    k, n = 700, 300
    a = g.standard_normal((m, k)).astype(np.float32).astype(dtype)
    base = (g.standard_normal((k, n)) * 8.0).astype(np.float32)
    base[300:512] *= np.float32(2.0**-140 if dtype == ml_dtypes.bfloat16 else 2.0**-20)
    base[600:] *= np.float32(2.0**7)  # the third: sums near the largest float16
    b = base.astype(dtype)
    # A NaN with a payload in the first block.
    b.view(np.uint16)[50, 7] = 0x7FC1 if dtype == ml_dtypes.bfloat16 else 0x7E01
    check_in_place(a, b, layout, dict(accumulate=acc, rounding=mode, chunk=chunk))


@pytest.mark.parametrize("m", [1, 7, 10])
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("acc", ["float16", "bfloat16", "f6m9", "e5m2"])
@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "down"])
@pytest.mark.parametrize("layout", ["rows", "reversed", "strided"])
@pytest.mark.parametrize("chunk", [None, 40])
def test_few_rows_read_fp8_b_in_place(m, dtype, acc, mode, layout, chunk, threads):
    """A product of few rows with a row-major float8_e5m2 or float8_e4m3fn B, to nearest
    into float16, bfloat16 or FloatFormat(6, 9) (FMA and Veltkamp's split; in blocks whose
    sums could pass the bound the FMA and the conversion, or for FloatFormat(6, 9) the f64
    rounding on B packed) or float8_e5m2 (the FMA on scaled values and the integer
    rounding at its unit; blocks past its bound packed for the f64 rounding), and in the
    directed modes (the FMA in the mode; into float16, FloatFormat(6, 9) and float8_e5m2
    at the unit bit on scaled values), A taking the whole scale where values are scaled,
    reads B's codes in place, decoded in registers through float16 (e4m3fn: its value
    times 2^-8, scaled back; the directed kernels' decode is assembly). Depth 700
    (three blocks): plain values; one block holding a NaN code (packed instead; e5m2
    also an infinity, read in place); values large enough in the third that its sums
    may pass the split's bound (e5m2 into FloatFormat(6, 9): its largest value, 2^32).
    300 columns leave a last strip of 12, packed. Rows
    forward, reversed and every other row of a wider array. Bit for bit against the
    scalar path and the same B packed (Fortran-ordered). To nearest, 7 rows run as tiles
    of 4 rows, 10 as tiles of 6; directed, both as tiles of 6; each group decodes B again."""
    g = np.random.default_rng(37)
    k, n = 700, 300
    big = acc == "f6m9" and dtype == ml_dtypes.float8_e5m2
    a = g.standard_normal((m, k)).astype(np.float32)
    a[:, 600:] *= np.float32(2.0**8 if big else 1.0)
    a = a.astype(dtype)
    # (Into float8_e5m2, smaller values: sums rounded up or down by up to an eighth an add
    # would pass its largest value.)
    base = (g.standard_normal((k, n)) * (0.25 if acc == "e5m2" else 4.0)).astype(np.float32)
    base[600:] *= np.float32(2.0**10 if big else 16.0)
    b = base.astype(dtype)
    # (Rounded up or down every add, float8_e5m2's sums grow past its largest value.)
    finite = not (acc == "e5m2" and mode in ("up", "down"))
    acc = ACC_FORMATS[acc] if acc in ("f6m9", "e5m2") else acc
    # A NaN code in the first block; e5m2: an infinity in the second.
    b.view(np.uint8)[50, 7] = 0x7F if dtype == ml_dtypes.float8_e4m3fn else 0x7D
    if dtype == ml_dtypes.float8_e5m2:
        b.view(np.uint8)[400, 9] = 0x7C
    check_in_place(a, b, layout, dict(accumulate=acc, rounding=mode, chunk=chunk), finite)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mprotect through libc")
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(1, 700, 300), (1, 257, 16), (1, 100, 17), (5, 300, 40)], ids=str)
def test_few_rows_in_place_reads_stay_inside_b(dtype, shape, threads):
    """B's codes read in place end right before a page that may not be read: a kernel
    or scan reading past B's last row (or past its last column, as a last strip of
    fewer than 16 columns would) faults. Rows forward and reversed, every mode that
    reads in place, against the same B packed."""
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    m, k, n = shape
    page = mmap.PAGESIZE
    nbytes = k * n * np.dtype(dtype).itemsize
    total = (nbytes // page + 2) * page
    buf = mmap.mmap(-1, total)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    guard = base + total - page
    assert libc.mprotect(guard, page, 0) == 0  # PROT_NONE
    try:
        g = np.random.default_rng(3)
        b = np.frombuffer(buf, np.uint8, nbytes, guard - nbytes - base).view(dtype).reshape(k, n)
        b[...] = g.standard_normal((k, n)).astype(dtype)
        a = g.standard_normal((m, k)).astype(dtype)
        for bb in (b, b[::-1]):
            for acc in ("float16", "bfloat16"):
                for mode in ("nearest_even", "toward_zero", "up", "down"):
                    got = lowp.matmul(a, bb, accumulate=acc, rounding=mode)
                    assert same_bits(got, lowp.matmul(a, np.asfortranarray(bb), accumulate=acc, rounding=mode))
        del b, bb
    finally:
        assert libc.mprotect(guard, page, 3) == 0  # PROT_READ | PROT_WRITE


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn,
                                   np.float32], ids=str)
@pytest.mark.parametrize("acc", ["float16", "bfloat16", "e5m2", "f6m9", "float32"])
@pytest.mark.parametrize("rbits, chunk", [(None, None), (13, None), (1, None), (None, 50)])
def test_stochastic_few_rows_kernel(dtype, acc, rbits, chunk, threads):
    """Products of 1 to 6 rows, stochastic on f64 lanes, take a kernel of their own: B
    read once (bfloat16, float16, e5m2 and e4m3fn codes in place when its rows are
    contiguous, packed otherwise), the columns' random words drawn inside the kernel,
    two rows at a time.
    The same bits as the scalar path and as those rows inside a product of more rows
    (the four-row tiles), for widths that are no multiple of 16, a depth past three
    depth blocks (each prefetching the next one's rows), B as given and as a transposed
    view, and one-column products (which run transposed); in chunks of 50 (the kernel
    runs up to each chunk's end, across depth blocks). (With 1 or 13 random bits,
    products of narrow inputs into the narrow formats take the float32 tiles instead:
    those cases check that path's few rows.) Magnitudes over 2^-4..2^4 keep the sums
    below float16's largest value and the float32 accumulator's sums exact in f64,
    so that the blocks run the kernel; its fallbacks have a test of their own."""
    accf = ACC_FORMATS.get(acc, acc)
    g = np.random.default_rng(zlib.crc32(f"{np.dtype(dtype).name}{acc}{rbits}{chunk}".encode()))
    k, n = 700, 37
    spread = lambda s: g.standard_normal(s) * np.exp2(g.integers(-4, 4, s))
    a = spread((9, k)).astype(np.float32).astype(dtype)
    b = spread((k, n)).astype(np.float32).astype(dtype)
    bt = np.ascontiguousarray(b.T).T  # columns contiguous
    kw = dict(accumulate=accf, rounding="stochastic", seed=3, rbits=rbits, chunk=chunk)
    tall = lowp.matmul(a, b, **kw)
    for m in (1, 2, 3, 6):
        got = matmul_as_scalar(a[:m], b, **kw)
        assert same_bits(got, tall[:m]), m
        assert same_bits(lowp.matmul(a[:m], bt, **kw), got), m
        if chunk is None:  # (chunk totals draw by row * n + column)
            assert same_bits(lowp.matmul(a[:m], b[:, :16], **kw), got[:, :16]), m
    col = matmul_as_scalar(np.ascontiguousarray(b.T), a[:1].T, **kw)
    if chunk is None:
        assert same_bits(col, lowp.matmul(np.ascontiguousarray(b.T), a.T, **kw)[:, :1])


@pytest.mark.parametrize("acc", ["float16", "e5m2", "float32"])
def test_stochastic_few_rows_kernel_fallbacks(acc, threads):
    """The few-row kernel's blocks that cannot run it go the exact way: a B holding
    inf and NaN (bfloat16, row-major and column-major, and e4m3fn's NaN codes), sums past the largest value (into
    float16 and e5m2), A values too small to scale exactly, against the scalar path bit
    for bit."""
    accf = ACC_FORMATS.get(acc, acc)
    g = np.random.default_rng(5)
    k, n = 600, 48
    a = g.standard_normal((2, k)).astype(np.float32).astype(ml_dtypes.bfloat16)
    b = g.standard_normal((k, n)).astype(np.float32).astype(ml_dtypes.bfloat16)
    kw = dict(accumulate=accf, rounding="stochastic", seed=8)
    bad = b.copy()
    bad[3, 5], bad[599, 40] = np.inf, -np.inf
    # (A NaN whose payload is all ones.)
    bad.view(np.uint16)[300, 20] = 0x7FFF
    got = matmul_as_scalar(a, bad, **kw)
    assert np.isinf(got[:, 5]).all() and np.isnan(got[:, 20]).all()
    # (B's columns contiguous: its codes scanned along them.)
    assert same_bits(matmul_as_scalar(a, np.asfortranarray(bad), **kw), got)
    b8 = b.astype(ml_dtypes.float8_e4m3fn)
    b8.view(np.uint8)[[7, 450], [3, 33]] = [0x7F, 0xFF]
    got = matmul_as_scalar(a, b8, **kw)
    assert np.isnan(got[:, [3, 33]]).all() and np.isfinite(got[:, :3]).all()
    # Sums past float16's largest value in the second column block only.
    big = b.copy()
    big[:, 16:32] = np.abs(big[:, 16:32]) * 400
    got = matmul_as_scalar(np.abs(a), big, **kw)
    if acc != "float32":
        assert np.isinf(got[:, 16:32]).any() and np.isfinite(got[:, :16]).all()
    tiny = a.copy()
    tiny[1, 250] = ml_dtypes.bfloat16(2.0**-130)
    matmul_as_scalar(tiny, b, **kw)


@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero", "up", "stochastic"])
@pytest.mark.parametrize("acc,chunk", [("float16", None), ("bfloat16", 16), (lowp.FloatFormat(6, 9), None), ("float64", None)])
def test_broadcast_operands_equal_their_copies(rounding, acc, chunk):
    """B whose columns are one broadcast column, and A whose rows are one broadcast row
    (numpy's stride-0 views), give exactly what contiguous copies give."""
    rng = np.random.default_rng(11)
    a = rng.standard_normal((5, 300)).astype(lowp.bfloat16)
    col = rng.standard_normal(300).astype(lowp.bfloat16)
    kw = dict(accumulate=acc, rounding=rounding, chunk=chunk, seed=3)
    if chunk:
        kw["chunk_accumulate"] = "float32"
    b = np.broadcast_to(col[:, None], (300, 7))
    np.testing.assert_array_equal(lowp.matmul(a, b, **kw), lowp.matmul(a, np.ascontiguousarray(b), **kw))
    rows = np.broadcast_to(a[1], (6, 300))
    np.testing.assert_array_equal(lowp.matmul(rows, b, **kw),
                                  lowp.matmul(np.ascontiguousarray(rows), np.ascontiguousarray(b), **kw))
    out = np.full((6, 7), np.nan, np.float64)
    lowp.matmul(rows, b.astype(np.float32), out=out, **kw)
    np.testing.assert_array_equal(out, lowp.matmul(np.ascontiguousarray(rows), np.ascontiguousarray(b), **kw))


def test_nan_chunk_totals_into_a_format_without_nan_raise():
    """A chunk total that is NaN in the accumulator (an overflow of a format without
    infinities, inf - inf) has no value in a chunk_accumulate without NaN: ValueError,
    not a number made up."""
    f = lowp.FloatFormat(5, 2, nan=None)
    a = np.array([[300, 300, 1, 1]], np.float32)
    b = np.ones((4, 1), np.float32)
    assert np.isnan(lowp.matmul(a, b, accumulate="float8_e4m3fn", chunk=2, chunk_accumulate="float16")[0, 0])
    with pytest.raises(ValueError, match="chunk_accumulate"):
        lowp.matmul(a, b, accumulate="float8_e4m3fn", chunk=2, chunk_accumulate=f)
    with pytest.raises(ValueError, match="chunk_accumulate"):
        lowp.sum(a[0], accumulate="float8_e4m3fn", chunk=2, chunk_accumulate=f)
    with pytest.raises(ValueError, match="chunk_accumulate"):
        lowp.matmul(np.array([[np.inf, -np.inf]], np.float32), np.ones((2, 1), np.float32), accumulate="float16",
                    chunk=2, chunk_accumulate=f)
    with pytest.raises(ValueError, match="chunk_accumulate"):
        lowp.matmul(np.stack([a, a * 0]), b, accumulate="float8_e4m3fn", chunk=2, chunk_accumulate=f)
    # Finite totals are added as before.
    ok = np.array([[1, 2, 3, 4]], np.float32)
    assert lowp.matmul(ok, b, accumulate="float8_e4m3fn", chunk=2, chunk_accumulate=f)[0, 0] == 10.0
    assert lowp.sum(ok[0], accumulate="float8_e4m3fn", chunk=2, chunk_accumulate=f) == 10.0


def test_sum_adds_in_index_order_whatever_the_order_of_axes():
    x = np.array([[1, 1], [2**24, 0]], np.float32)
    rng = np.random.default_rng(2)
    y = (rng.standard_normal((3, 4, 5)) * 2.0 ** rng.integers(-8, 8, (3, 4, 5))).astype(np.float32)
    for acc in ("float32", "bfloat16", "float16"):
        want = lowp.sum(x, accumulate=acc)
        for axes in ((0, 1), (1, 0), (-1, 0), (-1, -2)):
            assert lowp.sum(x, axis=axes, accumulate=acc) == want
        for axes in ((0, 2), (2, 0), (-1, 0)):
            np.testing.assert_array_equal(lowp.sum(y, axis=axes, accumulate=acc), lowp.sum(y, axis=(0, 2), accumulate=acc))


def test_seed_is_checked_on_every_path_and_deterministic_rounding_draws_nothing():
    m = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="seed"):
        lowp.matmul(m, m, seed="abc")
    with pytest.raises(ValueError, match="seed"):
        lowp.matmul(m, m, seed=-5)
    with pytest.raises(TypeError, match="seed"):
        lowp.matmul(m.astype(np.int8), m.astype(np.int8), seed=1.5)
    g = np.random.default_rng(0)
    state = g.bit_generator.state
    lowp.matmul(m, m, accumulate="bfloat16", seed=g)
    lowp.sum(m, accumulate="bfloat16", seed=g)
    lowp.round(m, "bfloat16", seed=g)
    assert g.bit_generator.state == state
    lowp.matmul(m, m, accumulate="bfloat16", rounding="stochastic", seed=g)
    assert g.bit_generator.state != state


NEG_BIAS_AND_NO_MANTISSA = [lowp.FloatFormat(5, 4, bias=-1), lowp.FloatFormat(4, 3, bias=-2), lowp.FloatFormat(6, 9, bias=-1),
                            lowp.FloatFormat(4, 3, bias=-2, nan="fn"), lowp.FloatFormat(5, 2, bias=-1, nan="fnuz"),
                            lowp.FloatFormat(4, 3, bias=0), lowp.FloatFormat(3, 0), lowp.FloatFormat(4, 0, nan="fn"),
                            lowp.FloatFormat(5, 0)]


@pytest.mark.parametrize("fmt", NEG_BIAS_AND_NO_MANTISSA, ids=repr)
@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"])
def test_accumulators_with_a_negative_bias_or_no_mantissa_bits(fmt, mode):
    """Accumulators whose smallest normal is above 1 (a negative bias: the SIMD kernels'
    scale by it would leave f32/f64's normal range) and accumulators without mantissa
    bits (a code's parity is its exponent's): every add rounded as round() rounds it, on
    the SIMD and the scalar path, chunked or not; stochastic rounding runs (it used to
    abort on an assertion)."""
    g = np.random.default_rng(len(repr(fmt)) + len(mode))
    if fmt.max < 100:  # sums stay below the largest value (no inf - inf)
        a = (g.integers(-2, 3, (5, 23)) * 0.25).astype(np.float32)
        b = (g.integers(-2, 3, (23, 7)) * 0.25).astype(np.float32)
    else:
        scale = 8.0 if fmt.max > 1e4 else 1.0
        a = (g.integers(-8, 9, (5, 23)) * 0.25 * scale).astype(np.float32)
        b = (g.integers(-8, 9, (23, 7)) * 0.5).astype(np.float32)
    A, B = a.astype(np.float64), b.astype(np.float64)

    def rnd(v):
        return float(lowp.round(np.array([v]), fmt, mode)[0])

    for chunk in (None, 4):
        want = np.zeros((5, 7))
        for i in range(5):
            for j in range(7):
                tot = acc = 0.0
                for k in range(23):
                    acc = rnd(acc + A[i, k] * B[k, j])  # products and sums exact in float64
                    if chunk and (k + 1) % chunk == 0:
                        tot, acc = rnd(tot + acc), 0.0
                want[i, j] = rnd(tot + acc) if chunk else acc
        got = matmul_as_scalar(a, b, accumulate=fmt, rounding=mode, chunk=chunk)
        assert same_bits(got, want), (chunk, np.argwhere(got != want)[:3])
        assert same_bits(lowp.sum(a[0] * b[:, 0], accumulate=fmt, rounding=mode, chunk=chunk), want[0, 0])
    big = g.standard_normal((16, 40)).astype(np.float32)
    r = lowp.matmul(big, big.T, accumulate=fmt, rounding="stochastic", seed=1)
    assert r.shape == (16, 16)


def test_chunk_totals_of_both_infinities_in_a_format_without_nan_raise():
    """FloatFormat(5, 0) has infinities and no NaN: chunk totals +inf and -inf (overflows
    inside the chunks) have no sum in it, whether it is the accumulator of the totals
    by default or as chunk_accumulate."""
    f = lowp.FloatFormat(5, 0)
    x = np.array([6e4, -6e4], np.float32)
    a, b = x[None, :], np.ones((2, 1), np.float32)
    with pytest.raises(ValueError, match="^accumulate: FloatFormat"):
        lowp.sum(x, accumulate=f, chunk=1)
    with pytest.raises(ValueError, match="^accumulate: FloatFormat"):
        lowp.matmul(a, b, accumulate=f, chunk=1)
    with pytest.raises(ValueError, match="^chunk_accumulate: FloatFormat"):
        lowp.matmul(a, b, accumulate=f, chunk=1, chunk_accumulate=lowp.FloatFormat(5, 0))
    # Totals of one sign, or one run, have a value.
    assert lowp.sum(np.array([6e4, 6e4], np.float32), accumulate=f, chunk=1) == np.inf
    assert lowp.sum(x, accumulate=f, chunk=2) == np.inf
    assert lowp.matmul(a, b, accumulate="bf16", chunk=1, chunk_accumulate=f)[0, 0] == np.inf


def test_int32_accumulation_refuses_a_chunk_accumulator():
    a, b = np.full((1, 4), 100, np.int8), np.full((4, 1), 3, np.int8)
    with pytest.raises(ValueError, match="^chunk_accumulate: "):
        lowp.matmul(a, b, accumulate="int32", chunk=2, chunk_accumulate="int8")
    assert lowp.matmul(a, b, accumulate="int32", chunk=2)[0, 0] == 1200
    assert lowp.matmul(a, b, accumulate=lowp.IntFormat(32), chunk=2, chunk_accumulate="int8")[0, 0] == 127


def test_sum_of_64_bit_integers_is_exact_or_refused():
    with pytest.raises(ValueError, match="^x: int64 values beyond 2\\*\\*53"):
        lowp.sum(np.array([2**53 + 1, -2**53], np.int64), accumulate="float64")
    with pytest.raises(ValueError, match="^x: uint64 values beyond 2\\*\\*53"):
        lowp.sum(np.array([2**63], np.uint64))
    assert lowp.sum(np.array([2**53, -2**53, 3], np.int64)) == 3
    assert lowp.sum(np.array([2**53, 5], np.uint64), accumulate="float64") == 2**53 + 4  # one rounding (a tie, to even)


_FTZ_CASES = '''
import numpy as np, lowp
from lowp import sparse
def bits32(e, shape=()):  # 2**e in float32, from its bits (under flush-to-zero, casts flush subnormals)
    return np.full(shape, (e + 127) << 23 if e >= -126 else 1 << (e + 149), np.uint32).view(np.float32)
def cases():
    a = np.full((3, 16), 2.0**-20, lowp.bfloat16)
    b = np.full((16, 5), 0.25, lowp.bfloat16)
    out = {}
    for isa in ("scalar", "avx2", "avx512", None):
        try:
            lowp._lowp.set_isa(isa)
        except ValueError:
            continue
        for m in ("toward_zero", "up", "down", "nearest_even", "odd", "stochastic"):
            out[f"mm {isa} {m}"] = lowp.matmul(a, b, accumulate="float16", rounding=m, seed=1)
            out[f"mm64 {isa} {m}"] = lowp.matmul(a, b, accumulate="float16", chunk=4, rounding=m, seed=1)
            out[f"sum {isa} {m}"] = lowp.sum(a, axis=1, accumulate="float16", rounding=m, seed=1)
        out[f"f32 {isa}"] = lowp.matmul(bits32(-70, (7, 9)), bits32(-70, (9, 20)))
        out[f"sum32 {isa}"] = lowp.sum(bits32(-140, (100,)))
        out[f"round {isa}"] = lowp.round(np.concatenate([bits32(-140, (1,)), np.uint32([3]).view(np.float32)]),
                                         "float32", "up")
        out[f"enc {isa}"] = lowp.encode(bits32(-130, (2,)), "bf16", "toward_zero")
        out[f"dec {isa}"] = lowp.decode(np.uint16([1, 0x8003]), "bf16")
        out[f"sp {isa}"] = sparse.CSR((bits32(-140, (4,)), np.arange(4), np.arange(5)), shape=(4, 4)) @ np.ones(4, np.float32)
        out[f"op {isa}"] = np.full((2, 3), 2.0**-100, lowp.bfloat16) @ np.full((3, 2), 2.0**-30, lowp.bfloat16)
        for n in (8, 1 << 17):  # (long arrays run on the pool's threads)
            x, y = np.full(n, 2.0**-60, lowp.bfloat16), np.full(n, 2.0**-70, lowp.bfloat16)
            out[f"ufunc {isa} {n}"] = np.unique((x * y).view(np.uint16))
            out[f"cast {isa} {n}"] = np.unique(np.full(n, 5, np.uint32).view(np.float32).astype(lowp.posit16).view(np.uint16))
    lowp._lowp.set_isa(None)
    # (Bytes, not values: a float cast would flush them.)
    return {k: np.ascontiguousarray(v).tobytes().hex() for k, v in out.items()}
'''


@pytest.mark.skipif(not (sys.platform.startswith("linux") and __import__("platform").machine() == "x86_64"),
                    reason="sets MXCSR through glibc's fenv_t")
def test_results_do_not_depend_on_the_callers_flush_to_zero():
    """A process whose thread has flush-to-zero and denormals-are-zero set (as
    -ffast-math libraries and torch.set_flush_denormal do) before lowp starts its
    threads gets the same bits from the kernels on every path as one without: lowp's
    functions, `@`, and the dtypes' ufunc loops and casts at every length."""
    import json
    import subprocess

    code = _FTZ_CASES + '''
import ctypes, ctypes.util, json, struct
libm = ctypes.CDLL(ctypes.util.find_library("m"))
env = ctypes.create_string_buffer(64)
assert libm.fegetenv(env) == 0
mxcsr = struct.unpack_from("<I", env.raw, 28)[0]  # (glibc's x86_64 fenv_t)
ctypes.memmove(ctypes.addressof(env) + 28, struct.pack("<I", mxcsr | 0x8040), 4)
assert libm.fesetenv(env) == 0
assert np.float32(2.0**-140) * np.float32(1.0) == 0  # flushed
lowp.set_num_threads(2)
print(json.dumps(cases()))
'''
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    flushed = json.loads(r.stdout)
    ns: dict = {}
    exec(_FTZ_CASES, ns)
    want = ns["cases"]()
    assert flushed.keys() == want.keys()
    for k in want:
        assert flushed[k] == want[k], k
    up = np.frombuffer(bytes.fromhex(want["mm None up"]), np.float32)
    assert up[0] == 16 * 2.0**-22 and np.frombuffer(bytes.fromhex(want["sum32 None"]), np.float32)[0] == 100 * 2.0**-140


def test_int8_beside_floats():
    """int8 beside a float operand multiplies by its values (numpy's int8 @ float32 is
    float32; it used to be refused): the float32 path within its bound, and emulated
    accumulation bit-exact against the Fraction reference, in either operand order."""
    import ml_dtypes

    rng = np.random.default_rng(61)
    a = rng.integers(-128, 128, (4, 21)).astype(np.int8)
    a[0] = -128
    for t in (np.float32, np.float16, lowp.bfloat16, lowp.float8_e4m3fn, lowp.posit16, ml_dtypes.float8_e5m2):
        b = (rng.standard_normal((21, 5)) * 4).astype(t)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        r = lowp.matmul(a, b)
        assert r.dtype == np.float32
        bound = 21 * 2.0**-23 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
        assert np.all(np.abs(r - exact) <= bound)
        np.testing.assert_array_equal(lowp.matmul(b.T, a.T), r.T)
        for fmt, mode, chunk in ((lowp.format("bf16"), "nearest_even", None), (lowp.format("fp16"), "toward_zero", 8),
                                 (lowp.FloatFormat(6, 9), "up", None)):
            got = lowp.matmul(a, b, accumulate=fmt, rounding=mode, chunk=chunk)
            assert same(got, ref_matmul(a, b, fmt, mode, chunk)), (t, fmt, mode)
            assert same(lowp.matmul(b.T, a.T, accumulate=fmt, rounding=mode, chunk=chunk), ref_matmul(b.T, a.T, fmt, mode, chunk))
    # float64 inputs too (their products exact here).
    ones = np.ones((21, 2))
    assert same(lowp.matmul(a, ones, accumulate="bf16"), ref_matmul(a, ones, lowp.format("bf16"), "nearest_even"))
    assert lowp.matmul(a, ones).dtype == np.float64


def test_sum_axis_out_of_range_is_numpys_axis_error():
    x = np.zeros((3, 4, 5), np.float32)
    for ax in (3, -4, (0, 3)):
        with pytest.raises(np.exceptions.AxisError, match="^axis: axis -?\\d is out of bounds for array of dimension 3"):
            lowp.sum(x, ax)
    with pytest.raises(IndexError):  # (AxisError is an IndexError too, as numpy's)
        lowp.sum(np.float32(1), 0)


def round_chain(col, f, mode):
    """Column ``col`` added in index order from +0, each add rounded once into ``f`` in
    ``mode`` (Fraction arithmetic); the first non-finite sum ends it."""
    acc = Fraction(0)
    for v in np.asarray(col, np.float64):
        r = round_exact(acc + Fraction(float(v)), f, mode)
        if not math.isfinite(r):
            return r
        acc = Fraction(r)
    return float(acc)


@pytest.mark.parametrize("acc", ["float32", "float64"])
@pytest.mark.parametrize("dt", [np.float32, np.float64, "f32_in_f64", np.float16, ml_dtypes.bfloat16,
                                ml_dtypes.float8_e4m3fn, lowp.posit16, np.int16, np.int8])
def test_sums_of_few_columns_into_float32_and_float64_vs_fractions(acc, dt):
    # One to three columns into float32 or float64 to nearest-even add with the
    # hardware's adds; the tiles take four and more. Both are the exact chains.
    f = lowp.format(acc)
    g = np.random.default_rng(21)
    x = g.standard_normal((300, 4)) * 2.0 ** g.integers(-40, 40, (300, 4))
    x[::7] = -x[1::7][: len(x[::7])]  # cancellations to exact zeros and back
    if dt == "f32_in_f64":
        x = x.astype(np.float32).astype(np.float64)  # float64 values each exact in float32
    elif np.dtype(dt).kind in "iu":
        x = np.clip(np.round(x * 2.0 ** -30), -100, 100).astype(dt) if dt == np.int8 else (g.integers(-2**15, 2**15, x.shape)).astype(dt)
    else:
        top = float(lowp.finfo(dt).max) if dt is not np.float64 else 1e300
        x = np.clip(x, -top / 4, top / 4).astype(dt)
    ref = np.array([round_chain(x[:, j], f, "nearest_even") for j in range(4)])
    for cols in (1, 2, 3, 4):
        got = lowp.sum(x[:, :cols], axis=0, accumulate=acc)
        assert same_bits(got, ref[:cols]), (cols, got, ref[:cols])
    # Strided and reversed columns, and the whole array as one chain.
    assert same_bits(lowp.sum(x[::-1, 1:3], axis=0, accumulate=acc),
                     [round_chain(x[::-1, j], f, "nearest_even") for j in (1, 2)])
    assert same_bits(lowp.sum(x[::3, 2], accumulate=acc), round_chain(x[::3, 2], f, "nearest_even"))
    assert same_bits(lowp.sum(x, accumulate=acc), round_chain(x.reshape(-1), f, "nearest_even"))


def test_sums_of_few_columns_meet_infinities_and_nans_as_the_tiles_do():
    x = np.array([[1, 2, np.inf, np.nan], [np.inf, -np.inf, 5, 1], [3, 4, -1, 2]], np.float32).T.copy()
    for acc in ("float32", "float64"):
        wide = lowp.sum(np.repeat(x, 2, axis=1), axis=0, accumulate=acc)[::2]  # eight columns: the tiles
        for cols in (1, 2, 3):
            assert same_bits(lowp.sum(x[:, :cols], axis=0, accumulate=acc), wide[:cols])
    # (And float64 values inexact in float32 into float32: each add still rounds once.)
    y = np.array([1.0, 2.0**-25, 2.0**-25, 2.0**-25, 2.0**-25])
    assert lowp.sum(y) == round_chain(y, lowp.format("float32"), "nearest_even") == 1.0  # (not float32(y.sum()))
    y = np.array([1.0, 2.0**-24 + 2.0**-60])  # float64's sum ties in float32, the exact one does not
    assert lowp.sum(y) == round_chain(y, lowp.format("float32"), "nearest_even") == 1.0 + 2.0**-23


@pytest.mark.parametrize("mode", DETERMINISTIC)
@pytest.mark.parametrize("acc", ["float64", lowp.FloatFormat(11, 40)])
def test_sums_past_float64s_range_round_as_the_exact_sums(acc, mode):
    """A finite sum past float64's largest value overflowed float64's add before it was
    rounded: every mode gave infinity where toward zero, odd, and one direction of up and
    down keep the largest value."""
    f = lowp.format(acc)
    big = float(f.max)
    cols = np.array([[big, 2.0**970, -big, big, 2.0**969],
                     [-big, -(2.0**971), 1.0, big, -big],
                     [big, big, -big, -big, 2.0**960],
                     [big, 2.0**960, 2.0**-1074, -(2.0**1000), big]]).T.copy()
    ref = [round_chain(cols[:, j], f, mode) for j in range(cols.shape[1])]
    assert same_bits(lowp.sum(cols, axis=0, accumulate=acc, rounding=mode), ref)
    for j in range(cols.shape[1]):
        assert same_bits(lowp.sum(cols[:, j], accumulate=acc, rounding=mode), ref[j])


def test_stochastic_sums_past_float64s_range_overflow_by_their_share():
    big = np.finfo(np.float64).max
    x = np.array([[big, 1.2 * 2.0**970]] * 20000)  # 0.6 of the last gap past the largest value
    r = lowp.sum(x, axis=1, accumulate="float64", rounding="stochastic", seed=3)
    assert set(np.unique(r).tolist()) == {big, np.inf}
    assert abs(np.isinf(r).mean() - 0.6) < 0.02


WIDE_ACCS = {**ACC_FORMATS, "float32": lowp.format("float32"), "float64": lowp.format("float64")}


def wide_data(shape, seed, spread=20):
    """float64 values of 53 significant bits over a range of binades (their products are
    not float64 values)."""
    g = np.random.default_rng(seed)
    return g.standard_normal(shape) * 2.0 ** g.integers(-spread, spread, shape)


@pytest.mark.parametrize("mode", DETERMINISTIC)
@pytest.mark.parametrize("acc", list(WIDE_ACCS))
def test_float64_operands_vs_fractions(acc, mode):
    """float64 operands, whose products float64 does not hold, with every add the exact
    ``acc + a*b`` rounded once: unchunked and chunked, against the Fraction reference."""
    f = WIDE_ACCS[acc]
    spread = 3 if f.max < 1e6 else 10 if f.max < 1e12 else 20  # (sums that stay in the format's range)
    a, b = wide_data((5, 13), 71, spread), wide_data((13, 4), 72, spread)
    assert not np.array_equal(a @ b, a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64))
    if not (acc == "float32" and mode == "nearest_even"):  # (float64 operands then add in float64)
        assert same(lowp.matmul(a, b, accumulate=f, rounding=mode), ref_matmul(a, b, f, mode))
    f2 = lowp.format("float32") if f.bits < 32 else lowp.format("float64")
    assert same(lowp.matmul(a, b, accumulate=f, rounding=mode, chunk=4, chunk_accumulate=f2),
                ref_matmul(a, b, f, mode, 4, f2))
    # One operand float64, the other narrower; a matrix-vector product.
    b16 = np.clip(b, -6e4, 6e4).astype(np.float16)
    if not (acc == "float32" and mode == "nearest_even"):
        assert same(lowp.matmul(a, b16, accumulate=f, rounding=mode), ref_matmul(a, b16, f, mode))
        assert same(lowp.matmul(a, b[:, :1], accumulate=f, rounding=mode), ref_matmul(a, b[:, :1], f, mode))


@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_float64_operands_at_the_ends_of_float64s_range(mode):
    """Products below float64's smallest subnormal or past its largest value, and sums of
    them with accumulators near those ends, rounded as the exact sums."""
    f64 = lowp.format("float64")
    a = np.array([[2.0**-540 * 1.5, 2.0**-600, 3.0 * 2.0**-1074],
                  [2.0**600, -(2.0**-540), 2.0**500],
                  [-(2.0**512), 2.0**511 * 1.75, 1.0]])
    b = np.array([[2.0**-540 * 1.25, 2.0**530, 1.0],
                  [2.0**-490, 2.0**-535, 0.75],
                  [2.0**-540, 2.0**423, 2.0**-1074]])
    # A tiny product cancelling the accumulator exactly: +0.
    z = lowp.matmul(np.array([[2.0**-500, -(2.0**-500)]]), np.array([[2.0**-500], [2.0**-500]]), accumulate=f64, rounding=mode)
    assert same_bits(z, [[0.0]])
    for acc in (f64, lowp.format("bf16"), lowp.FloatFormat(11, 40)):
        if not lowp.format(acc).inf and mode in ("nearest_even", "nearest_away"):
            continue
        assert same(lowp.matmul(a, b, accumulate=acc, rounding=mode), ref_matmul(a, b, acc, mode)), acc
        assert same(lowp.matmul(b.T, a.T, accumulate=acc, rounding=mode), ref_matmul(b.T, a.T, acc, mode)), acc


@pytest.mark.parametrize("mode", DETERMINISTIC + ["stochastic"])
def test_float64_operands_of_narrower_values_give_the_narrower_operands_bits(mode):
    """float64 (and posit32) arrays whose values are float32 (posit16) values: the same bits
    as the narrower operands, the random bits of stochastic rounding and chunk totals
    included, at 1 and 2 threads."""
    a32, b32 = data(9, 70, 11, np.float32, 3)
    for kw in ({}, {"chunk": 16, "chunk_accumulate": "float32"}, {"chunk": 7}):
        want = lowp.matmul(a32, b32, accumulate="bf16", rounding=mode, seed=4, **kw)
        for threads in (1, 2):
            old = lowp.get_num_threads()
            lowp.set_num_threads(threads)
            try:
                got = lowp.matmul(a32.astype(np.float64), b32.astype(np.float64), accumulate="bf16", rounding=mode,
                                  seed=4, **kw)
            finally:
                lowp.set_num_threads(old)
            assert same_bits(got, want), (kw, threads)
    p16 = lowp.cast(a32 * 4, lowp.posit16)
    assert same_bits(lowp.matmul(p16.astype(lowp.posit32), b32, accumulate="fp16", rounding=mode, seed=2),
                     lowp.matmul(p16, b32, accumulate="fp16", rounding=mode, seed=2))


def test_float64_operands_stochastic_rounding_is_unbiased_and_reproducible():
    # 1 + 0.3 * 2^-7 times 1 + 2^-40: 93 significant bits, 0.3 of a bf16 step past 1.
    x = 1 + 0.3 * 2.0**-7
    a = np.full((20000, 1), x)
    b = np.array([[1 + 2.0**-40]])
    r = lowp.matmul(a, b, accumulate="bf16", rounding="stochastic", seed=9)
    assert set(np.unique(r).tolist()) == {1.0, 1 + 2.0**-7}
    share = (x * (1 + 2.0**-40) - 1) / 2.0**-7
    assert abs(np.mean(r == 1 + 2.0**-7) - share) < 4 * math.sqrt(share * (1 - share) / len(a))
    np.testing.assert_array_equal(r, lowp.matmul(a, b, accumulate="bf16", rounding="stochastic", seed=9))
    assert not np.array_equal(r, lowp.matmul(a, b, accumulate="bf16", rounding="stochastic", seed=10))
    # Into float64: (1 + 2^-30)^2 = 1 + 2^-29 + 2^-60, 2^-8 of a float64 step past 1 + 2^-29.
    a = np.full((20000, 1), 1 + 2.0**-30)
    r = lowp.matmul(a, a[:1].T, accumulate="float64", rounding="stochastic", seed=1)
    assert set(np.unique(r).tolist()) == {1 + 2.0**-29, 1 + 2.0**-29 + 2.0**-52}
    p = 2.0**-8
    assert abs(np.mean(r > 1 + 2.0**-29) - p) < 4 * math.sqrt(p * (1 - p) / len(a))
    for mode, want in (("up", 1 + 2.0**-29 + 2.0**-52), ("down", 1 + 2.0**-29), ("nearest_even", 1 + 2.0**-29)):
        assert lowp.matmul(a[:1], a[:1].T, accumulate="float64", rounding=mode)[0, 0] == want


@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_float64_operands_over_float64s_whole_range_vs_fractions(mode):
    # Products from 2^-1120 (far below the smallest subnormal) to 2^1040 (past the largest value).
    g = np.random.default_rng(73)
    for seed in range(4):
        a = g.choice([-1, 1], (3, 7)) * (1 + g.random((3, 7))) * 2.0 ** g.integers(-560, 521, (3, 7))
        b = g.choice([-1, 1], (7, 3)) * (1 + g.random((7, 3))) * 2.0 ** g.integers(-560, 521, (7, 3))
        for acc in ("float64", "bf16", "fp16"):
            f = lowp.format(acc)
            assert same(lowp.matmul(a, b, accumulate=f, rounding=mode), ref_matmul(a, b, f, mode)), (seed, acc)


@pytest.mark.parametrize("mode", DETERMINISTIC)
def test_float64_sums_near_the_largest_value_whose_error_term_overflows(mode):
    """acc + x of opposite signs near float64's largest value: the error term of the
    two-term sum overflowed (NaN) and every mode rounded as nearest-even."""
    f64 = lowp.format("float64")
    big = np.finfo(np.float64).max
    for x in ([4.3171253790809657e307, -big], [-7.230244585190291e307, big], [big, -big * 0.75]):
        x = np.array(x)
        want = round_chain(x, f64, mode)
        assert same_bits(lowp.sum(x, accumulate="float64", rounding=mode), want)
        assert same_bits(lowp.matmul(x[None], np.ones((2, 1)), accumulate="float64", rounding=mode)[0, 0], want)
        assert same_bits(lowp.sum(np.repeat(x[:, None], 6, axis=1), axis=0, accumulate="float64", rounding=mode),
                         [want] * 6)
        assert same_bits(lowp.sum(x, accumulate=lowp.FloatFormat(11, 40), rounding=mode),
                         round_chain(x, lowp.FloatFormat(11, 40), mode))


def test_stochastic_sums_of_2_to_the_1024_overflow_every_format():
    f = lowp.FloatFormat(11, 40)
    r = lowp.matmul(np.full((200, 1), 2.0**600), np.full((1, 200), 2.0**600), accumulate=f, rounding="stochastic", seed=1)
    assert np.isinf(r).all()
    r = lowp.sum(np.full((2, 40000), 2.0**1023), axis=0, accumulate=f, rounding="stochastic", seed=3)
    assert np.isinf(r).all()
    # (Into float64, a tie of the exact sum goes either way.)
    big = np.finfo(np.float64).max
    r = lowp.sum(np.array([[4.3171253790809657e307, -big]] * 20000), axis=1, accumulate="float64",
                 rounding="stochastic", seed=1)
    assert len(np.unique(r)) == 2 and 0.45 < np.mean(r == r.max()) < 0.55


def test_float64_operands_into_formats_finer_than_2_to_the_minus_1072_are_refused():
    f = lowp.FloatFormat(8, 50, bias=1024)  # smallest subnormal 2^-1073
    with pytest.raises(ValueError, match="^accumulate: the format's smallest value is 2\\^-1073"):
        lowp.matmul(np.array([[2.0**-537]]), np.array([[2.0**-537]]), accumulate=f)
    # (Sums of float64 values are exact there.)
    assert lowp.sum(np.array([2.0**-1000, 2.0**-1001]), accumulate=f) == 1.5 * 2.0**-1000
