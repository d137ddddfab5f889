"""Bit-exactness with ml_dtypes (and numpy's float16): every encoding decodes to the
same value, and float32 -> format round-to-nearest-even gives the same bits on more
than 10^7 inputs per format, on the SIMD and the scalar path, at 1 and 2 threads.

The inputs contain every midpoint between neighbouring values of the format (the
overflow midpoint above max included), the float32 values one and two steps either
side of each, zeros, infinities, NaNs (with payloads), subnormals of both float32 and
the format, and random bit patterns.
"""

from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

import lowp

ML_NAMES = ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz"]
NAMES = ML_NAMES + ["float16"]
N_INPUTS = 10_000_000


def cast(x, t):
    """The oracle's conversion (ml_dtypes / numpy warn on NaN and overflow; that is expected)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(t)


def oracle_type(name):
    return np.float16 if name == "float16" else getattr(ml_dtypes, name)


def code_dtype(name):
    return np.uint16 if name in ("bfloat16", "float16") else np.uint8


def all_codes(name):
    return np.arange(1 << (8 * np.dtype(code_dtype(name)).itemsize), dtype=code_dtype(name))


@functools.lru_cache(maxsize=None)
def midpoint_inputs(name):
    """Every midpoint of neighbouring finite values, the overflow midpoint, and the
    float32 values next to them, with both signs (float32)."""
    t = oracle_type(name)
    vals = cast(all_codes(name).view(t), np.float64)
    pos = np.unique(vals[np.isfinite(vals) & (vals >= 0)])
    mids = (pos[:-1] + pos[1:]) / 2
    fmax = pos[-1]
    ulp_max = fmax - pos[-2]
    extra = np.array([fmax + ulp_max / 2, fmax + ulp_max, 2 * fmax, fmax * 1.5])
    extra = extra[extra <= np.finfo(np.float32).max]
    m64 = np.concatenate([mids, extra, pos])
    m32 = m64.astype(np.float32)
    assert np.array_equal(m32.astype(np.float64), m64), "midpoints must be exact in float32"
    up1 = np.nextafter(m32, np.float32(np.inf))
    dn1 = np.nextafter(m32, np.float32(0))
    up2 = np.nextafter(up1, np.float32(np.inf))
    dn2 = np.nextafter(dn1, np.float32(0))
    x = np.concatenate([m32, up1, dn1, up2, dn2])
    return np.concatenate([x, -x])


@functools.lru_cache(maxsize=None)
def inputs(name):
    """At least N_INPUTS float32 values (see the module doc)."""
    rng = np.random.default_rng(sum(map(ord, name)))
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, np.float32(1e-45), -np.float32(1e-45),
                        np.finfo(np.float32).max, -np.finfo(np.float32).max, np.finfo(np.float32).tiny], np.float32)
    # NaNs with payloads, quiet and signalling, both signs
    payload = rng.integers(1, 1 << 23, 1000, dtype=np.uint32)
    nans = (np.uint32(0x7F80_0000) | payload | (rng.integers(0, 2, 1000, dtype=np.uint32) << 31)).view(np.float32)
    mids = midpoint_inputs(name)
    # Random values in and around the format's range: random exponent, mantissa and sign.
    fmt = lowp.format(name)
    n_rest = N_INPUTS - mids.size - special.size - nans.size
    n_range = n_rest * 3 // 4
    e_lo = max(fmt.emin - fmt.man_bits - 3, -149)
    e_hi = min(fmt.emax + 2, 127)
    e = rng.integers(e_lo, e_hi + 1, n_range)
    man = rng.integers(0, 1 << 23, n_range, dtype=np.uint32).astype(np.float64) / 2**23 + 1
    ranged = (np.ldexp(man, e) * rng.choice([-1.0, 1.0], n_range)).astype(np.float32)
    # Random bit patterns: every class of float32, subnormals and NaNs included.
    raw = rng.integers(0, 1 << 32, n_rest - n_range, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([special, nans, mids, ranged, raw])
    assert x.size >= N_INPUTS
    return x


@functools.lru_cache(maxsize=None)
def expected_codes(name):
    return cast(inputs(name), oracle_type(name)).view(code_dtype(name))


def nan_codes(name, codes):
    return np.isnan(cast(codes.view(oracle_type(name)), np.float32))


def assert_same_codes(name, got, want, x):
    assert got.dtype == want.dtype and got.shape == want.shape
    sign = np.array(1 << (8 * want.itemsize - 1), want.dtype)
    nan_w, nan_g = nan_codes(name, want), nan_codes(name, got)
    # NaN results: NaN-ness and sign agree (payloads may differ); everything else bit for bit.
    bad = (nan_w != nan_g) | (~nan_w & (got != want)) | (nan_w & ((got & sign) != (want & sign)))
    if bad.any():
        i = np.flatnonzero(bad)[:10]
        detail = ", ".join(f"{x[j]!r} ({x[j:j + 1].view(np.uint32)[0]:#010x}): got {got[j]:#x} want {want[j]:#x}"
                           for j in i)
        pytest.fail(f"{name}: {bad.sum()} of {x.size} differ, e.g. {detail}")


@pytest.mark.parametrize("name", NAMES)
def test_decode_every_encoding(name, any_isa):
    codes = all_codes(name)
    t = oracle_type(name)
    for dt in (np.float32, np.float64):
        want = cast(codes.view(t), dt)
        for got in (lowp.decode(codes, name, dt),  # table / shift path
                    np.concatenate([lowp.decode(c, name, dt) for c in np.array_split(codes, len(codes) // 7)])):
            nan = np.isnan(want)
            assert np.array_equal(np.isnan(got), nan)
            assert np.array_equal(got[~nan], want[~nan])
            assert np.array_equal(np.signbit(got), np.signbit(want))  # -0 and NaN signs
    # wider and signed integer containers give the same values
    wide = lowp.decode(codes.astype(np.uint32), name, np.float64)
    np.testing.assert_array_equal(wide, cast(codes.view(t), np.float64))
    signed = lowp.decode(codes.view(np.int8 if codes.itemsize == 1 else np.int16), name, np.float64)
    np.testing.assert_array_equal(signed, wide)


@pytest.mark.parametrize("name", NAMES)
def test_midpoints_small(name, any_isa):
    """The midpoints alone, in a call small enough to stay on one thread."""
    x = midpoint_inputs(name)
    want = cast(x, oracle_type(name)).view(code_dtype(name))
    assert_same_codes(name, lowp.encode(x, name), want, x)


@pytest.mark.parametrize("name", NAMES)
def test_encode_rne_f32_matches(name, isa, threads):
    x = inputs(name)
    want = expected_codes(name)
    got = lowp.encode(x, name)
    assert_same_codes(name, got, want, x)


@pytest.mark.parametrize("name", NAMES)
def test_round_and_cast_f32_match(name, any_isa):
    x = inputs(name)[: 1 << 21]
    want = cast(cast(x, oracle_type(name)), np.float32)
    got = lowp.round(x, name)
    assert got.dtype == np.float32
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan], want[~nan]) and np.array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
    c = lowp.cast(x, oracle_type(name))
    assert c.dtype == np.dtype(oracle_type(name))
    assert_same_codes(name, c.view(code_dtype(name)), cast(want, oracle_type(name)).view(code_dtype(name)), x)


@pytest.mark.parametrize("name", NAMES)
def test_encode_from_f64_of_f32_values(name, isa):
    """float64 input holding float32 values: same bits as from float32 (no double rounding issue)."""
    x = inputs(name)[: 1 << 20]
    got = lowp.encode(cast(x, np.float64), name)
    assert_same_codes(name, got, expected_codes(name)[: 1 << 20], x)


@pytest.mark.parametrize("name", NAMES)
def test_encode_strided_and_shaped(name):
    x = inputs(name)[: 3 * 4 * 1000].reshape(3, 4, 1000)
    want = expected_codes(name)[: x.size].reshape(x.shape)
    assert_same_codes(name, lowp.encode(x, name).ravel(), want.ravel(), x.ravel())
    xs = x[:, ::2, ::3]
    assert_same_codes(name, lowp.encode(xs, name).ravel(), want[:, ::2, ::3].ravel(), xs.ravel())
    xt = x.T
    assert lowp.encode(xt, name).shape == xt.shape
    assert_same_codes(name, lowp.encode(xt, name).ravel(), want.T.ravel(), xt.ravel())


@pytest.fixture(scope="module", autouse=True)
def _free_inputs():
    yield
    for f in (midpoint_inputs, inputs, expected_codes):
        f.cache_clear()


def test_float16_from_float64_matches_numpy(isa):
    """numpy's float64 -> float16 rounds once (correctly): lowp must agree bit for bit,
    including just above and below every float16 midpoint (where float32 would double-round)."""
    mids = midpoint_inputs("float16").astype(np.float64)
    mids = mids[np.isfinite(mids)]
    x = np.concatenate([mids, mids * (1 + 2.0**-40), mids * (1 - 2.0**-40), np.nextafter(mids, np.inf),
                        np.nextafter(mids, -np.inf)])
    rng = np.random.default_rng(16)
    x = np.concatenate([x, rng.standard_normal(200_000) * np.exp2(rng.integers(-30, 20, 200_000)),
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, 5e-324]])
    want = cast(x, np.float16).view(np.uint16)
    assert_same_codes("float16", lowp.encode(x, "float16"), want, cast(x, np.float32))


@pytest.mark.parametrize("name,x,exact", [
    ("float8_e4m3fn", 1 + 2.0**-4 + 2.0**-40, 1.125),
    ("float8_e5m2", 1 + 2.0**-3 + 2.0**-40, 1.25),
    ("bfloat16", 1 + 2.0**-8 + 2.0**-30, 1.0078125),
])
def test_float64_just_above_a_midpoint_rounds_once(name, x, exact):
    """Through float32 these inputs become the midpoint and round to even (ml_dtypes
    before 0.7 converted float64 that way); rounded once from float64, they round up."""
    t = getattr(ml_dtypes, name)
    assert float(np.array([np.float32(x)]).astype(t).astype(np.float64)[0]) != exact  # the two roundings
    assert lowp.round(np.array([x]), name)[0] == exact
    assert lowp.cast(np.array([x]), t).astype(np.float64)[0] == exact


@pytest.mark.parametrize("src", ML_NAMES)
def test_ml_dtypes_arrays_as_input(src):
    """Arrays of an ml_dtypes type are accepted and decoded exactly before rounding."""
    t = oracle_type(src)
    x = all_codes(src).view(t)
    as32 = cast(x, np.float32)
    for dst in ("float8_e4m3fn", "float8_e5m2", "bfloat16"):
        got = lowp.encode(x, dst)
        want = cast(as32, oracle_type(dst)).view(code_dtype(dst))
        assert_same_codes(dst, got, want, as32)
    r = lowp.round(x, "float8_e4m3")
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r, lowp.round(as32, "float8_e4m3"))


ML_EXTRA = ["float8_e3m4", "float8_e4m3b11fnuz", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]


@pytest.mark.parametrize("name", ML_EXTRA)
def test_ml_dtypes_other_floats_are_named_formats(name):
    """ml_dtypes' floats without a lowp dtype are named formats with its encodings: every
    code decodes to its value; every float32 midpoint, its neighbours and random float32
    round to its codes (to nearest even; the formats without NaN raise on NaN, where
    ml_dtypes stores -0); lowp's functions take arrays of the dtype."""
    t = np.dtype(getattr(ml_dtypes, name))
    f = lowp.format(t)
    assert f is lowp.format(name) and f.name == name and f.dtype == t
    codes = np.arange(1 << f.bits, dtype=np.uint8)
    theirs = cast(codes.view(t), np.float64)
    ours = lowp.decode(codes, f, np.float64)
    np.testing.assert_array_equal(ours, theirs)
    assert np.array_equal(np.signbit(ours), np.signbit(theirs))
    np.testing.assert_array_equal(lowp.cast(codes.view(t), np.float64), theirs)
    fin = np.unique(np.abs(theirs[np.isfinite(theirs)]))
    mids = ((fin[:-1] + fin[1:]) / 2).astype(np.float32)
    rng = np.random.default_rng(len(name))
    x = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0)), fin.astype(np.float32),
                        (rng.standard_normal(1 << 16) * float(f.max)).astype(np.float32),
                        rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        np.float32([np.inf, 3 * float(f.max), 0.0, 1e-30])])
    x = np.concatenate([x, -x])
    if not np.isnan(theirs).any():
        x = x[~np.isnan(x)]
        with pytest.raises(ValueError, match="NaN"):
            lowp.encode(np.float32([np.nan]), f)
    np.testing.assert_array_equal(lowp.encode(x, f), cast(x, t).view(np.uint8))
    np.testing.assert_array_equal(lowp.cast(x, t).view(np.uint8), cast(x, t).view(np.uint8))
    # matmul, sum and emulated products read the dtype as its format.
    a = rng.standard_normal((19, 33)).astype(t)
    b = rng.standard_normal((33, 7)).astype(t)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(lowp.matmul(a, b), ref, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(lowp.matmul(a[:, ::3], b[::3].T.copy().T), a[:, ::3].astype(np.float64) @ b[::3].astype(np.float64),
                               rtol=1e-6, atol=1e-5)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    for acc in (f, "float64"):
        np.testing.assert_array_equal(lowp.matmul(a, b, accumulate=acc), lowp.matmul(a32, b32, accumulate=acc))
    np.testing.assert_allclose(lowp.sum(a, axis=0), a.astype(np.float64).sum(axis=0), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
def test_bytes_that_are_no_code_of_a_sub_byte_float_are_refused(name):
    """A byte above the format's codes (written through a uint8 view) is no value: matmul,
    sum, cast, round, ulp and the sparse constructors raise ValueError naming the operand,
    as decode does."""
    t = getattr(ml_dtypes, name)
    ok = np.ones((3, 3), t)
    bad = ok.copy()
    bad.view(np.uint8)[1, 2] = 0xFF
    for call, arg in ((lambda: lowp.matmul(bad, ok), "a"), (lambda: lowp.matmul(ok, bad, accumulate="bf16"), "b"),
                      (lambda: lowp.sum(bad), "x"), (lambda: lowp.cast(bad, np.float32), "x"),
                      (lambda: lowp.round(bad, "bf16"), "x"), (lambda: lowp.ulp(bad, "bf16"), "x"),
                      (lambda: lowp.sparse.CSR.from_dense(bad), "x"),
                      (lambda: lowp.sparse.CSR((bad[1], [0, 1, 2], [0, 3]), shape=(1, 3)), "data"),
                      (lambda: lowp.sparse.COO((bad[1], ([0, 0, 0], [0, 1, 2])), shape=(1, 3)), "data")):
        with pytest.raises(ValueError, match=f"{arg}: codes of"):
            call()
    assert float(lowp.sum(ok)) == 9.0 and np.array_equal(lowp.matmul(ok, ok), np.full((3, 3), 3.0, np.float32))


ML_INTS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


@pytest.mark.parametrize("name", sorted(ML_INTS))
def test_ml_dtypes_narrow_integers_are_named_formats(name):
    """ml_dtypes' int4/uint4/int2/uint2 are the named integer formats of those widths, with
    its encodings (the two's complement in the low bits of a byte): every value decodes as
    ml_dtypes reads it, integer values encode to its bytes, every rounding mode agrees with
    an exact reference on a grid of fractions, and matmul and sum read the dtype."""
    import fractions

    bits, signed = ML_INTS[name]
    t = np.dtype(getattr(ml_dtypes, name))
    f = lowp.format(t)
    assert f is lowp.format(name) and f == lowp.IntFormat(bits, signed) and f.dtype == t
    lo, hi = int(ml_dtypes.iinfo(t).min), int(ml_dtypes.iinfo(t).max)
    assert (f.min, f.max) == (lo, hi)
    vals = np.arange(lo, hi + 1, dtype=np.float64)
    theirs = vals.astype(t)
    np.testing.assert_array_equal(lowp.encode(vals, f), theirs.view(np.uint8))
    np.testing.assert_array_equal(lowp.cast(vals, t).view(np.uint8), theirs.view(np.uint8))
    codes = np.arange(1 << bits, dtype=np.uint8)
    np.testing.assert_array_equal(lowp.decode(codes, f, np.float64), codes.view(t).astype(np.float64))
    np.testing.assert_array_equal(lowp.cast(codes.view(t), np.float64), codes.view(t).astype(np.float64))
    # Every mode, saturating, against exact rounding of the grid's fractions.
    x = np.arange(4 * (lo - 3), 4 * (hi + 3) + 1) / 4.0
    def ref(v, mode):
        q = fractions.Fraction(v)
        fl, ce = q.numerator // q.denominator, -(-q.numerator // q.denominator)
        half = q - fl == fractions.Fraction(1, 2)
        n = {"toward_zero": fl if q >= 0 else ce, "up": ce, "down": fl,
             "nearest_even": (fl if fl % 2 == 0 else ce) if half else round(q),
             "nearest_away": (ce if q > 0 else fl) if half else round(q),
             "odd": fl if fl == ce or fl % 2 else ce}[mode]
        return min(max(n, lo), hi)
    for mode in ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"):
        got = lowp.cast(x, t, rounding=mode, saturate=True)
        assert got.dtype == t
        np.testing.assert_array_equal(got.astype(np.float64), [ref(v, mode) for v in x], err_msg=mode)
    # matmul and sum read the dtype as its format.
    rng = np.random.default_rng(bits)
    a = rng.integers(lo, hi + 1, (9, 17)).astype(t)
    b = rng.integers(lo, hi + 1, (17, 5)).astype(t)
    ref_ab = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(lowp.matmul(a, b), ref_ab)
    np.testing.assert_array_equal(lowp.matmul(a, b, accumulate="float16"), ref_ab)
    assert float(lowp.sum(a)) == a.astype(np.int64).sum()


def test_ml_dtypes_types_in_finfo_quantize_and_int_outputs():
    """finfo of an ml_dtypes dtype keeps that dtype (its limits its scalars, as
    ml_dtypes.finfo's); QuantizedArray takes ml_dtypes' narrow integer arrays as values;
    int8 products store into ml_dtypes' narrow integers where the sums fit; the types
    without a format, and unsigned formats in quantize, are refused by name."""
    for t in (ml_dtypes.bfloat16, np.dtype(ml_dtypes.float8_e4m3fn), ml_dtypes.float4_e2m1fn):
        fi, theirs = lowp.finfo(t), ml_dtypes.finfo(t)
        assert fi.dtype == np.dtype(t) and type(fi.max) is np.dtype(t).type
        assert float(fi.max) == float(theirs.max) and float(fi.eps) == float(theirs.eps)
    assert type(lowp.finfo("bf16").max) is lowp.bfloat16 and type(lowp.finfo(lowp.bfloat16).eps) is lowp.bfloat16
    with pytest.raises(TypeError, match="ml_dtypes.iinfo"):
        lowp.finfo(ml_dtypes.int4)
    q = lowp.QuantizedArray(np.array([1, -2, 7], ml_dtypes.int4), 0.5, 0, None, "int4")
    np.testing.assert_array_equal(q.dequantize(), [0.5, -1.0, 3.5])
    a = np.array([[1, 2], [3, -4]], np.int8)
    for t in (ml_dtypes.int4, ml_dtypes.int2):
        got = lowp.matmul(a[:, :1] % 2, a[:1, :1] % 2, out_dtype=t)
        assert got.dtype == t and got.astype(np.int64).tolist() == [[1], [1]]
        with pytest.raises(ValueError, match=f"^out_dtype: the result's values .* do not fit {np.dtype(t)}"):
            lowp.matmul(a, a, out_dtype=t)
    out = np.zeros((2, 2), ml_dtypes.int4)
    lowp.matmul(a, np.eye(2, dtype=np.int8), out=out)
    assert out.astype(np.int64).tolist() == a.tolist()
    with pytest.raises(TypeError, match="^out_dtype: integer output dtype uint4 needs an integer result"):
        lowp.matmul(a.astype(np.float32), a.astype(np.float32), out_dtype=ml_dtypes.uint4)
    for t in ("uint4", "uint2", ml_dtypes.uint4):
        with pytest.raises(ValueError, match="^fmt: quantize takes signed integer formats"):
            lowp.quantize(np.ones(3, np.float32), t, symmetric=False)
    for t in ("int1", "uint1", "float8_e8m0fnu", "float8_e5m3fnu"):
        if hasattr(ml_dtypes, t):
            x = np.zeros(2, getattr(ml_dtypes, t))
            for call, arg in ((lambda: lowp.round(x, "bf16"), "x"), (lambda: lowp.matmul(x, x), "a"),
                              (lambda: lowp.sparse.CSR.from_dense(x[None]), "x")):
                with pytest.raises(TypeError, match=f"^{arg}: unsupported dtype.*not ml_dtypes' .*{t}"):
                    call()
