"""Rounding from float64 (and float32) equals exact-rational rounding (fractions.Fraction)
in every deterministic mode, with and without saturation, for the named float formats
and custom ones; and equals gfloat for the modes it has.

Inputs: adversarial sets built from each format's own values (every value of 8-bit
formats, samples of wider ones; the midpoints between neighbours and the float64
values right next to them and a sliver away; subnormal boundaries; max, the overflow
midpoint and beyond; zeros, infinities, NaN) and hypothesis-drawn floats.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from fractions import Fraction

import gfloat
import numpy as np
import pytest
from gfloat import RoundMode
from gfloat.formats import format_info_bfloat16, format_info_binary16, format_info_ocp_e4m3, format_info_ocp_e5m2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lowp
from _reference import MODES, FloatSpec, neighbours, round_float, round_float_modes

NAMED = ["bfloat16", "float16", "float32", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz",
         "float8_e5m2fnuz"]
CUSTOM = [
    lowp.FloatFormat(6, 9),
    lowp.FloatFormat(3, 2, nan=None),
    lowp.FloatFormat(4, 3, bias=11),
    lowp.FloatFormat(5, 2, subnormals=False),
    lowp.FloatFormat(8, 7, subnormals=False),
    lowp.FloatFormat(4, 3, nan="fn", subnormals=False),
    lowp.FloatFormat(3, 2, nan=None, subnormals=False),
    lowp.FloatFormat(5, 4, inf=False),
    lowp.FloatFormat(4, 3, nan="fnuz", subnormals=False),
    lowp.FloatFormat(2, 1),
    lowp.FloatFormat(4, 0, nan="fn"),
    lowp.FloatFormat(3, 0),
    lowp.FloatFormat(5, 0, inf=False),
    lowp.FloatFormat(11, 20),
    lowp.FloatFormat(10, 40, bias=600),
]
FORMATS = [lowp.format(n) for n in NAMED] + CUSTOM


def format_values(fmt, rng, limit=150):
    """Positive finite values of fmt: all of them for <= 12 bits, else a sample that
    keeps the boundaries (smallest subnormals, normals around min_normal and 1, max)."""
    codes_all = np.arange(1 << min(fmt.bits - 1, 62), dtype=np.uint64) if fmt.bits <= 12 else None
    if codes_all is None:
        top = np.uint64((1 << (fmt.bits - 1)) - 1)
        one = np.uint64(fmt.bias << fmt.man_bits)
        mn = np.uint64(1 << fmt.man_bits)
        around = lambda c, w=12: np.arange(max(int(c) - w, 0), min(int(c) + w, int(top)), dtype=np.uint64)  # noqa: E731
        maxc = int(lowp.encode(np.array([fmt.max]), fmt).astype(np.uint64)[0])
        codes_all = np.unique(np.concatenate([
            around(0), around(mn), around(one), around(maxc), around(maxc // 2),
            rng.integers(0, maxc, limit, dtype=np.uint64, endpoint=True)]))
    v = lowp.decode(codes_all.astype(fmt.storage_dtype), fmt, np.float64)
    v = np.unique(v[np.isfinite(v) & (v >= 0)])
    return v[v <= fmt.max]


def adversarial_inputs(fmt, rng):
    v = format_values(fmt, rng)
    # the midpoint between each value and the next one up (max's is the overflow midpoint)
    e = np.maximum(np.frexp(v)[1] - 1, fmt.emin)
    ulp = np.ldexp(1.0, e - fmt.man_bits)
    ulp[v == 0] = fmt.min_subnormal
    mids = v + ulp / 2
    with np.errstate(over="ignore"):
        base = np.concatenate([v, mids, [fmt.max * 2, fmt.max * 1.0001, 1e300, 5e-324, fmt.min_subnormal / 2,
                                      fmt.min_subnormal / 4, fmt.min_normal / 2, fmt.min_normal * 0.75,
                                      1 + 2.0**-8 + 2.0**-30, 1 + 2.0**-8, 1.0 + 2.0**-52]])
    base = base[np.isfinite(base)]
    with np.errstate(over="ignore"):
        xs = [base, np.nextafter(base, np.inf), np.nextafter(base, 0),
              base * (1 + 2.0**-40), base * (1 - 2.0**-40), mids * (1 + 2.0**-30)]
    x = np.concatenate(xs)
    x = x[np.isfinite(x)]
    x = np.concatenate([x, -x, [0.0, -0.0, np.inf, -np.inf]])
    if FloatSpec.of(fmt).has_nan:
        x = np.append(x, [np.nan, -np.nan])
    return x


_REF_CACHE: dict = {}


def reference(fmt, x, modes=MODES, saturates=(False, True)):
    """{(mode, saturate): exact results} (cached: the f32 tests run the same inputs on two paths)."""
    key = (fmt, x.tobytes(), modes, saturates)
    if key not in _REF_CACHE:
        _REF_CACHE[key] = _reference(fmt, x, modes, saturates)
    return _REF_CACHE[key]


def _reference(fmt, x, modes, saturates):
    s = FloatSpec.of(fmt)
    out = {(m, sat): np.empty(x.size) for m in modes for sat in saturates}
    for i, xi in enumerate(x.tolist()):
        for key, r in round_float_modes(xi, s, modes, saturates).items():
            out[key][i] = r
    return out


def assert_same_values(got, want, x, what):
    nan = np.isnan(want)
    bad = (np.isnan(got) != nan) | (~nan & ((got != want) | (np.signbit(got) != np.signbit(want))))
    if bad.any():
        i = np.flatnonzero(bad)[:8]
        detail = "; ".join(f"x={x[j]!r} ({float(x[j]).hex()}): got {got[j]!r} want {want[j]!r}" for j in i)
        pytest.fail(f"{what}: {bad.sum()} of {x.size} differ: {detail}")


def check_against_reference(fmt, x):
    ref = reference(fmt, x)
    for (mode, sat), want in ref.items():
        got = lowp.round(x, fmt, mode, saturate=sat)
        assert_same_values(got, want, x, f"{fmt!r} {mode} saturate={sat}")
        codes = lowp.encode(x, fmt, mode, saturate=sat)
        assert_same_values(lowp.decode(codes, fmt, np.float64), want, x, f"encode/decode {fmt!r} {mode} sat={sat}")


@pytest.mark.parametrize("fmt", FORMATS, ids=repr)
def test_adversarial_f64(fmt, any_isa):
    rng = np.random.default_rng(fmt.bits * 1000 + fmt.man_bits)
    check_against_reference(fmt, adversarial_inputs(fmt, rng))


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f._fits_f32()], ids=repr)
def test_adversarial_f32_every_path(fmt, any_isa):
    """The float32 entry (the SIMD path for small formats) in every mode against the reference."""
    rng = np.random.default_rng(fmt.bits * 1000 + fmt.man_bits + 1)
    x64 = adversarial_inputs(fmt, rng)
    with np.errstate(over="ignore"):
        x32 = x64.astype(np.float32)
    x32 = x32[np.isfinite(x32) | ~np.isfinite(x64)]
    with np.errstate(over="ignore"):
        x32 = np.concatenate([x32, np.nextafter(x32, np.float32(np.inf)), np.nextafter(x32, np.float32(-np.inf))])
    x64 = x32.astype(np.float64)
    for (mode, sat), want in reference(fmt, x64).items():
        got = lowp.round(x32, fmt, mode, saturate=sat)
        assert got.dtype == np.float32
        assert_same_values(got.astype(np.float64), want, x64, f"f32 {fmt!r} {mode} sat={sat}")
        codes = lowp.encode(x32, fmt, mode, saturate=sat)
        assert np.array_equal(codes, lowp.encode(x64, fmt, mode, saturate=sat))


WIDE = [lowp.FloatFormat(8, 7, bias=100), lowp.FloatFormat(8, 5, nan=None), lowp.FloatFormat(8, 10, nan="fn")]


@pytest.mark.parametrize("fmt", WIDE, ids=repr)
def test_f32_into_formats_beyond_f32(fmt, any_isa):
    """float32 input into formats whose largest values exceed float32's: ``round``
    returns the reference's values in float32 (beyond its range: infinities) and
    ``encode`` the reference's codes, infinities included, on every path."""
    assert fmt.max > float(np.finfo(np.float32).max)
    rng = np.random.default_rng(fmt.bits + fmt.man_bits)
    x64 = adversarial_inputs(fmt, rng)
    with np.errstate(over="ignore"):
        x32 = x64.astype(np.float32)
    x32 = np.concatenate([x32, np.array([np.inf, -np.inf, np.finfo(np.float32).max, -3.0, 0.5], np.float32)])
    x64 = x32.astype(np.float64)
    for (mode, sat), want in reference(fmt, x64).items():
        with np.errstate(over="ignore"):
            want32 = want.astype(np.float32).astype(np.float64)
        got = lowp.round(x32, fmt, mode, saturate=sat)
        assert got.dtype == np.float32
        assert_same_values(got.astype(np.float64), want32, x64, f"f32 {fmt!r} {mode} sat={sat}")
        assert np.array_equal(lowp.encode(x32, fmt, mode, saturate=sat), lowp.encode(x64, fmt, mode, saturate=sat))


def test_double_rounding_examples():
    x = np.array([1 + 2.0**-8 + 2.0**-30])
    assert lowp.round(x, "bf16")[0] == 1.0078125
    assert lowp.round(-x, "bf16")[0] == -1.0078125
    assert lowp.encode(x, "bf16")[0] == 0x3F81
    # through float32 the tie would go to even (1.0): the f32 entry sees the rounded input
    assert lowp.round(x.astype(np.float32), "bf16")[0] == 1.0
    # fp8: 1 + 2^-4 + 2^-40 is above the tie between 1 and 1.125
    assert lowp.round(np.array([1 + 2.0**-4 + 2.0**-40]), "e4m3fn")[0] == 1.125
    assert lowp.round(np.array([1 + 2.0**-4]), "e4m3fn")[0] == 1.0


def test_overflow_semantics():
    x = np.array([1e9, -1e9, np.inf, -np.inf])
    e5 = "e5m2"
    m = 57344.0
    np.testing.assert_array_equal(lowp.round(x, e5), [np.inf, -np.inf, np.inf, -np.inf])
    np.testing.assert_array_equal(lowp.round(x, e5, "toward_zero"), [m, -m, np.inf, -np.inf])
    np.testing.assert_array_equal(lowp.round(x, e5, "odd"), [m, -m, np.inf, -np.inf])
    np.testing.assert_array_equal(lowp.round(x, e5, "up"), [np.inf, -m, np.inf, -np.inf])
    np.testing.assert_array_equal(lowp.round(x, e5, "down"), [m, -np.inf, np.inf, -np.inf])
    for mode in MODES:
        np.testing.assert_array_equal(lowp.round(x, e5, mode, saturate=True), [m, -m, m, -m])
    r = lowp.round(x, "e4m3fn")
    assert np.isnan(r).all()
    np.testing.assert_array_equal(lowp.round(x, "e4m3fn", saturate=True), [448, -448, 448, -448])
    # e4m3fn: 464 is the tie between 448 and the NaN slot (480): even -> 448
    np.testing.assert_array_equal(lowp.round(np.array([464.0, 464.001]), "e4m3fn")[:1], [448.0])
    assert np.isnan(lowp.round(np.array([464.001]), "e4m3fn")[0])
    # no NaN, no inf: overflow goes to max
    f = lowp.FloatFormat(3, 2, nan=None)
    np.testing.assert_array_equal(lowp.round(x, f), [28, -28, 28, -28])


def test_subnormals_flag_equals_format_variant():
    rng = np.random.default_rng(5)
    for name in ("e4m3", "bf16", "e5m2fnuz", "float16"):
        f = lowp.format(name)
        x = adversarial_inputs(f, rng)
        g = f.replace(subnormals=False)
        for mode in MODES:
            a = lowp.round(x, f, mode, subnormals=False)
            b = lowp.round(x, g, mode)
            assert_same_values(a, b, x, f"{name} {mode}")
        # nothing nonzero below the smallest normal is produced
        r = lowp.round(x, f, subnormals=False)
        r = np.abs(r[np.isfinite(r)])
        assert not ((r > 0) & (r < f.min_normal)).any()


def finite_floats_near(fmt):
    m = min(fmt.max * 4, 1e308)
    return st.one_of(
        st.floats(min_value=-m, max_value=m, allow_nan=False, allow_infinity=False),
        st.floats(min_value=-fmt.min_normal * 4, max_value=fmt.min_normal * 4),
        st.floats(allow_nan=False),
    )


@pytest.mark.parametrize("fmt", FORMATS, ids=repr)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hypothesis_f64(fmt, data):
    xs = data.draw(st.lists(finite_floats_near(fmt), min_size=1, max_size=40))
    check_against_reference(fmt, np.array(xs, np.float64))


# ----------------------------------------------------------------------------- gfloat

GF_MODES = {
    "nearest_even": RoundMode.TiesToEven,
    "nearest_away": RoundMode.TiesToAway,
    "toward_zero": RoundMode.TowardZero,
    "up": RoundMode.TowardPositive,
    "down": RoundMode.TowardNegative,
}


def gfloat_info(fmt):
    """A gfloat FormatInfo describing a lowp FloatFormat (formats with subnormals and NaN)."""
    if fmt.nan == "ieee":
        domain = gfloat.Domain.Extended if fmt.inf else gfloat.Domain.Finite
        nans = 2**fmt.man_bits - (1 if fmt.inf else 0)
    elif fmt.nan == "fn":
        domain, nans = gfloat.Domain.Finite, 1
    else:
        domain, nans = gfloat.Domain.Finite, 0
    return gfloat.FormatInfo(repr(fmt), k=fmt.bits, precision=fmt.man_bits + 1, bias=fmt.bias, is_signed=True,
                             domain=domain, has_nz=fmt.nan != "fnuz", num_high_nans=nans, has_subnormals=True,
                             is_twos_complement=False)


GF_FORMATS = [f for f in FORMATS if f.subnormals and FloatSpec.of(f).has_nan]


def test_gfloat_named_infos_agree():
    for fi, name in [(format_info_bfloat16, "bf16"), (format_info_binary16, "float16"),
                     (format_info_ocp_e5m2, "e5m2"), (format_info_ocp_e4m3, "e4m3fn")]:
        f = lowp.format(name)
        assert fi.max == f.max and fi.smallest_subnormal == f.min_subnormal
        assert gfloat_info(f).max == f.max


@pytest.mark.parametrize("fmt", GF_FORMATS, ids=repr)
def test_gfloat_many(fmt):
    fi = gfloat_info(fmt)
    assert fi.max == fmt.max and fi.smallest_subnormal == fmt.min_subnormal
    rng = np.random.default_rng(fmt.bits + 77)
    n = 100_000
    e = rng.integers(fmt.emin - fmt.man_bits - 3, fmt.emax + 3, n)
    mant = rng.integers(1 << 52, 1 << 53, n).astype(np.float64)
    with np.errstate(over="ignore"):
        x = np.ldexp(mant, e - 52) * rng.choice([-1.0, 1.0], n)
    # the format's own values and the midpoints between them, nudged either way
    adv = adversarial_inputs(fmt, rng)
    x = np.concatenate([x[np.isfinite(x)], adv])
    for mode, rm in GF_MODES.items():
        for sat in (False, True):
            with np.errstate(all="ignore"):
                want = gfloat.round_ndarray(fi, x.copy(), rm, sat)
            got = lowp.round(x, fmt, mode, saturate=sat)
            assert_same_values(got, np.asarray(want, np.float64), x, f"gfloat {fmt!r} {mode} sat={sat}")


@pytest.mark.parametrize("fmt", GF_FORMATS, ids=repr)
def test_gfloat_round_float_scalar(fmt):
    """gfloat's scalar round_float on a few thousand inputs per mode."""
    fi = gfloat_info(fmt)
    rng = np.random.default_rng(fmt.bits + 99)
    x = rng.choice(adversarial_inputs(fmt, rng), 600)
    x = np.concatenate([x, GFLOAT_TIES_TO_AWAY_WRONG[fmt.name]]) if fmt.name in GFLOAT_TIES_TO_AWAY_WRONG else x
    s = FloatSpec.of(fmt)
    for mode, rm in GF_MODES.items():
        for sat in (False, True):
            want = np.array([gfloat.round_float(fi, float(v), rm, sat) for v in x])
            got = lowp.round(x, fmt, mode, saturate=sat)
            differ = (np.isnan(got) != np.isnan(want)) | ((got != want) & ~np.isnan(want))
            for i in np.flatnonzero(differ):
                # gfloat's scalar TiesToAway tests `delta + 0.5 >= 1.0` in float64: a remainder
                # just below 1/2 sums to 1.0 and rounds away. The exact reference decides.
                assert mode == "nearest_away" and gfloat_delta_sums_to_one(float(x[i]), s), (fmt, mode, x[i])
                assert got[i] == round_float(float(x[i]), s, mode, sat)
                want[i] = got[i]
            assert_same_values(got, want, x, f"gfloat.round_float {fmt!r} {mode} sat={sat}")


def gfloat_delta_sums_to_one(x, s):
    """Is x's remainder (in units of the result's last place) below 1/2 but 1.0 when 0.5 is added in float64?"""
    k, r, q, odd = neighbours(x, s)
    return r < Fraction(1, 2) and float(r) + 0.5 >= 1.0


# Inputs where gfloat.round_float(TiesToAway) is wrong (the remainder is 1/2 - 2^-54 of a unit,
# and gfloat's float64 test `delta + 0.5 >= 1.0` rounds to true): the exact answer rounds toward zero.
GFLOAT_TIES_TO_AWAY_WRONG = {
    "float8_e4m3fn": np.array([-float.fromhex("0x1.fffffffffffffp-11"), float.fromhex("0x1.fffffffffffffp-11")]),
    "float8_e4m3fnuz": np.array([-float.fromhex("0x1.fffffffffffffp-12")]),
    "float8_e5m2fnuz": np.array([-float.fromhex("0x1.fffffffffffffp-19")]),
    "bfloat16": np.array([float.fromhex("0x1.fffffffffffffp-135")]),
}


@pytest.mark.parametrize("name", GFLOAT_TIES_TO_AWAY_WRONG)
def test_gfloat_ties_to_away_known_wrong(name):
    """Where gfloat's scalar TiesToAway is demonstrably wrong, lowp follows exact rounding."""
    fmt = lowp.format(name)
    s = FloatSpec.of(fmt)
    fi = gfloat_info(fmt)
    for x in GFLOAT_TIES_TO_AWAY_WRONG[name]:
        exact = round_float(float(x), s, "nearest_away")
        theirs = gfloat.round_float(fi, float(x), RoundMode.TiesToAway)
        assert theirs != exact  # gfloat rounds away although the remainder is below 1/2
        assert gfloat_delta_sums_to_one(float(x), s)
        assert abs(exact) < abs(theirs)
        assert lowp.round(np.array([x]), fmt, "nearest_away")[0] == exact


def test_reference_self_check():
    """The reference agrees with plain facts (so it cannot silently accept anything)."""
    s = FloatSpec(8, 7)
    assert round_float(1 + 2.0**-8 + 2.0**-30, s, "nearest_even") == 1.0078125
    assert round_float(1 + 2.0**-8, s, "nearest_even") == 1.0
    assert round_float(1 + 3 * 2.0**-8, s, "nearest_even") == 1 + 2.0**-6
    assert round_float(1 + 2.0**-8, s, "nearest_away") == 1 + 2.0**-7
    assert round_float(1 + 2.0**-9, s, "odd") == 1 + 2.0**-7
    assert round_float(-(1 + 2.0**-9), s, "down") == -(1 + 2.0**-7)
    assert round_float(-(1 + 2.0**-9), s, "up") == -1.0
    e4 = FloatSpec(4, 3, nan="fn")
    assert float(e4.max) == 448 and math.isnan(round_float(500.0, e4, "nearest_even"))
    assert round_float(500.0, e4, "toward_zero") == 448
    assert round_float(2.0**-10, FloatSpec(4, 3), "nearest_even") == 0.0  # tie with min subnormal 2^-9: even
    assert round_float(2.0**-10 * 1.5, FloatSpec(4, 3), "nearest_even") == 2.0**-9
    assert round_float(0.75 * 2.0**-6, FloatSpec(4, 3, subnormals=False), "nearest_even") == 2.0**-6
    assert round_float(-0.25 * 2.0**-6, FloatSpec(4, 3, subnormals=False), "nearest_even") == 0.0
    assert math.copysign(1, round_float(-1e-30, FloatSpec(4, 3), "nearest_even")) == -1
    assert math.copysign(1, round_float(-1e-30, FloatSpec(4, 3, nan="fnuz"), "nearest_even")) == 1


@pytest.mark.parametrize("fmt", ["bf16", "e4m3fn", "e5m2", lowp.FloatFormat(6, 9), lowp.FloatFormat(8, 40),
                                 lowp.FloatFormat(11, 50), lowp.FloatFormat(11, 51), "float64"], ids=repr)
@pytest.mark.parametrize("dtype", [np.int64, np.uint64, np.dtype(">i8"), np.dtype(">u8")], ids=str)
def test_64bit_integers_round_once(fmt, dtype):
    """int64/uint64 beyond 2^53 are rounded once, from the exact integer (not via float64)."""
    f = lowp.format(fmt)
    rng = np.random.default_rng(64)
    swapped, dtype = np.dtype(dtype), np.dtype(dtype).newbyteorder("=").type
    info = np.iinfo(dtype)
    shifts = rng.integers(0, 63, 3000).astype(np.uint64)
    raw = rng.integers(0, 2**63, 3000, dtype=np.uint64) >> shifts
    x = raw.astype(dtype)
    if dtype == np.int64:
        x = np.where(rng.random(x.size) < 0.5, -x, x)
    # ties and near-ties of the format with low bits that float64 cannot hold
    k = np.arange(54, 63, dtype=np.uint64)
    tie = (np.uint64(1) << k) + (np.uint64(1) << (k - np.uint64(f.man_bits + 1)))
    top = np.array([info.max, info.max - 1], np.uint64)
    edge = np.concatenate([tie, tie + np.uint64(1), tie - np.uint64(1), top]).astype(dtype)
    parts = [x, edge]
    if dtype == np.int64:
        parts += [-edge[:-2], np.array([info.min], np.int64)]
    x = np.concatenate(parts).astype(dtype)
    x = x.astype(swapped)  # (big-endian input: the same values)
    s = FloatSpec.of(f)
    for mode in MODES:
        got = lowp.round(x, f, mode)
        want = np.array([round_float(int(v), s, mode) for v in x])
        assert_same_values(got, want, x.astype(np.float64), f"{dtype.__name__} -> {f!r} {mode}")
        np.testing.assert_array_equal(lowp.decode(lowp.encode(x, f, mode), f, np.float64), want)


def test_posit_from_int64_round_once():
    from _reference import posit_round

    x = np.array([2**62 + 2**34 + 1, 2**40 + 2**12 + 1, -(2**60 + 2**32 + 7), 2**63 - 1], np.int64)
    for n in (16, 32):
        got = lowp.encode(x, lowp.PositFormat(n, 2)).astype(np.int64)
        want = [posit_round(int(v), n, 2) for v in x]
        np.testing.assert_array_equal(got, want)


def test_shapes_preserved():
    for x in (np.float64(1.3), np.array(1.3), np.array(1.3, np.float32), np.zeros((0, 3)), np.ones((2, 0, 3)),
              np.ones((3, 4), order="F"), np.ones((4, 6))[::2, ::3]):
        r = lowp.round(x, "bf16")
        assert r.shape == np.shape(x) and r.dtype == x.dtype
        assert lowp.encode(x, "bf16").shape == np.shape(x)
        assert lowp.decode(lowp.encode(x, "bf16"), "bf16").shape == np.shape(x)
    assert lowp.decode(np.uint16(0x3F80), "bf16").shape == ()
    big = np.array(1.3, ">f8")  # byte-swapped input
    assert lowp.round(big, "bf16") == lowp.round(np.array(1.3), "bf16")


def test_float64_format_is_identity():
    rng = np.random.default_rng(64)
    x = rng.integers(0, 2**64, 100_000, dtype=np.uint64).view(np.float64)
    x = x[~np.isnan(x)]
    for mode in MODES:
        np.testing.assert_array_equal(lowp.round(x, "float64", mode), x)
        np.testing.assert_array_equal(lowp.encode(x, "float64", mode), x.view(np.uint64))
    # float32 input: float32 values are float64 values, so it comes back as it is.
    with np.errstate(over="ignore"):
        x32 = x[np.abs(x) < 1e38].astype(np.float32)
    for mode in MODES:
        got = lowp.round(x32, "float64", mode)
        assert got.dtype == np.float32 and np.array_equal(got, x32)


@pytest.mark.parametrize("fmt", [lowp.FloatFormat(8, 7, bias=100), lowp.FloatFormat(8, 20, bias=120),
                                 lowp.FloatFormat(7, 5, bias=20)], ids=repr)
def test_f32_into_formats_wider_than_f32(fmt, any_isa):
    """float32 input into formats whose range exceeds float32's (codes checked: their values
    need not be float32 numbers)."""
    rng = np.random.default_rng(fmt.bias)
    n = 4000
    e = rng.integers(-149, 128, n)
    x = np.ldexp(rng.random(n) + 1, e - 1) * rng.choice([-1.0, 1.0], n)
    with np.errstate(over="ignore"):
        x32 = x.astype(np.float32)
    x32 = np.concatenate([x32[np.isfinite(x32)], np.array([np.finfo(np.float32).max, np.finfo(np.float32).tiny,
                                                           1e-45, np.inf, np.nan, 0.0, -0.0], np.float32)])
    x64 = x32.astype(np.float64)
    for (mode, sat), want in reference(fmt, x64).items():
        got = lowp.decode(lowp.encode(x32, fmt, mode, saturate=sat), fmt, np.float64)
        assert_same_values(got, want, x64, f"f32 {fmt!r} {mode} sat={sat}")


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f._fits_f32() and f.man_bits > 0], ids=repr)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hypothesis_f32_both_paths(fmt, data):
    xs = data.draw(st.lists(st.floats(width=32, allow_nan=FloatSpec.of(fmt).has_nan), min_size=1, max_size=40))
    x32 = np.array(xs, np.float32)
    x64 = x32.astype(np.float64)
    ref = reference(fmt, x64)
    try:
        for isa in ("scalar", None):
            _lowp_set_isa(isa)
            for (mode, sat), want in ref.items():
                got = lowp.round(x32, fmt, mode, saturate=sat).astype(np.float64)
                assert_same_values(got, want, x64, f"f32 {isa} {fmt!r} {mode} sat={sat}")
    finally:
        _lowp_set_isa(None)


def _lowp_set_isa(name):
    lowp._lowp.set_isa(name)


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="longdouble is float64 here")
@pytest.mark.parametrize("fmt", [lowp.FloatFormat(11, 50), lowp.FloatFormat(11, 51), "float64", "bf16"], ids=repr)
def test_longdouble_rounds_once_into_wide_formats(fmt):
    """longdouble values with bits below float64's are rounded once, from their exact
    value, in every mode, also into formats of 51 to 53 significant bits."""
    f = lowp.format(fmt)
    rng = np.random.default_rng(5)
    base = rng.standard_normal(300) * 2.0 ** rng.integers(-30, 30, 300)
    tiny = np.ldexp(rng.integers(1, 2**11, 300).astype(np.longdouble), -63)
    x = base.astype(np.longdouble) * (1 + tiny)
    x = np.concatenate([x, [np.longdouble(1) + np.longdouble(2) ** -60, -(np.longdouble(1) + np.longdouble(2) ** -53)]])
    s = FloatSpec.of(f)
    for mode in MODES:
        got = lowp.round(x, f, mode)
        want = np.array([round_float(Fraction(*v.as_integer_ratio()), s, mode) for v in x])
        assert_same_values(got, want, x.astype(np.float64), f"longdouble -> {f!r} {mode}")


def test_big_endian_codes_and_integers():
    for t, v in (("bf16", 0x3F80), ("e4m3fn", 0x38), ("posit32", 0x40000000)):
        for dt in (">i2", ">u2", ">i4", ">u4", ">i8"):
            if np.dtype(dt).itemsize >= lowp.format(t).storage_dtype.itemsize:
                assert lowp.decode(np.array([v], dt), t)[0] == 1.0, (t, dt)
    for dt in (">i8", ">u8", ">i4", ">i2"):
        x = np.array([1, 2, 3], dt)
        np.testing.assert_array_equal(lowp.round(x, "bf16"), [1, 2, 3])
        np.testing.assert_array_equal(lowp.encode(x, "e4m3fn"), lowp.encode(np.array([1, 2, 3]), "e4m3fn"))
        assert lowp.nextafter(x[:1], np.inf, "bf16")[0] == 1.0078125
        assert lowp.ulp(x[:1], "e4m3fn")[0] == 0.125


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="longdouble is float64 here")
@pytest.mark.parametrize("fmt", [lowp.FloatFormat(11, 10, bias=1064), lowp.FloatFormat(11, 10, bias=1065),
                                 lowp.FloatFormat(11, 9, bias=1064), lowp.FloatFormat(11, 8, bias=1066)], ids=repr)
def test_longdouble_rounds_once_on_float64s_subnormal_grid(fmt):
    """Formats whose finest step is 2^-1073 or 2^-1074: float64's own subnormal grid keeps
    no bits below theirs, so rounding to odd there would round twice."""
    L = np.longdouble
    unit = L(2) ** (fmt.emin - fmt.man_bits)
    k = np.arange(1, 40, dtype=np.longdouble)
    x = np.concatenate([unit * (k + L(0.25)), unit * (k + L(0.5) + L(2) ** -20), unit * (k + L(0.5)),
                        -unit * (k + L(0.75)), [L(2) ** -1074 * L(2.25), L(2) ** -1073 + L(2) ** -1075]])
    s = FloatSpec.of(fmt)
    for mode in MODES:
        got = lowp.round(x, fmt, mode)
        want = np.array([round_float(Fraction(*v.as_integer_ratio()), s, mode) for v in x])
        assert_same_values(got, want, x.astype(np.float64), f"longdouble -> {fmt!r} {mode}")


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="longdouble is float64 here")
@pytest.mark.parametrize("fmt", [lowp.FloatFormat(11, 52, subnormals=False), lowp.FloatFormat(11, 51, subnormals=False),
                                 lowp.FloatFormat(11, 0, bias=1074), lowp.FloatFormat(11, 0, bias=1070)], ids=repr)
def test_longdouble_below_the_normal_range_and_without_mantissa_bits(fmt):
    """longdouble values below the smallest normal of a format without subnormals (the
    grid {0, 2^emin}: directed modes reach 2^emin, to nearest by the half), and into
    formats without mantissa bits (a code's parity is its exponent's, for odd and ties)."""
    L = np.longdouble
    m = L(2) ** fmt.emin
    x = [m * L(2) ** -3000, m / 2, m / 2 * (1 + L(2) ** -60), m / 2 * (1 - L(2) ** -60), m * (1 - L(2) ** -62)]
    e = np.arange(-1000, -800, 7)
    x += list(L(1.5) * L(2) ** e.astype(np.longdouble) * (1 + L(2) ** -62)) + list(L(1.5) * L(2) ** e.astype(np.longdouble))
    x = np.array(x + [-v for v in x], np.longdouble)
    s = FloatSpec.of(fmt)
    for mode in MODES:
        got = lowp.round(x, fmt, mode)
        want = np.array([round_float(Fraction(*v.as_integer_ratio()), s, mode) for v in x])
        assert_same_values(got, want, x.astype(np.float64), f"longdouble -> {fmt!r} {mode}")
        assert np.array_equal(lowp.encode(x, fmt, mode), lowp.encode(want, fmt, mode)), mode


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 60, reason="longdouble is float64 here")
def test_tiny_negative_longdouble_rounds_to_minus_zero():
    f = lowp.FloatFormat(3, 51, bias=-60, nan=None)
    r = lowp.round(np.array([-np.longdouble(1) / 3]), f)
    assert r[0] == 0 and np.signbit(r[0])
    np.testing.assert_array_equal(lowp.encode(np.array([-np.longdouble(1) / 3]), f), lowp.encode(np.array([-1 / 3]), f))


@pytest.mark.parametrize("isa", ["avx2", "sse2", "scalar"])
@pytest.mark.parametrize("fmt", [lowp.FloatFormat(5, 22, bias=-129), lowp.FloatFormat(5, 10, bias=-129),
                                 lowp.FloatFormat(5, 10, bias=-127), lowp.FloatFormat(5, 10, bias=-140),
                                 lowp.FloatFormat(8, 7, bias=-127)], ids=repr)
@pytest.mark.parametrize("mode", ["nearest_even", "stochastic", "toward_zero", "up"])
def test_encode_from_float32_into_ranges_above_float32s(isa, fmt, mode):
    """Formats whose smallest normal lies at or past float32's largest exponent: every
    float32 is below or near their range. Arrays long enough for the vector kernels give
    the codes float64 input gives."""
    levels = ["scalar", "sse2", "avx2", "avx512"]
    if levels.index(isa) > levels.index(lowp._lowp.detected_isa()):
        pytest.skip(f"{isa} not available")
    x = np.array([1.0, -1.0, 0.0, -0.0, -1.5 * 2.0**52, 3e38, -3e38, np.inf, -np.inf, 2.0**-149, 1.7e38,
                  np.finfo(np.float32).max, 2.0**127, -2.0**127 * 1.5, 5.0, 7e37], np.float32)
    old = lowp._lowp.get_isa()
    try:
        lowp._lowp.set_isa(isa)
        got = lowp.encode(x, fmt, mode, seed=1)
    finally:
        lowp._lowp.set_isa(old)
    want = np.array([int(lowp.encode(x[i:i + 1].astype(np.float64), fmt, mode, seed=1)[0]) if mode != "stochastic"
                     else int(lowp.encode(x[i:i + 1], fmt, mode, seed=1)[0]) for i in range(x.size)])
    if mode == "stochastic":  # (each element's bits depend on its index: compare values' neighbours)
        vals = lowp.decode(got, fmt, np.float64)
        lo = lowp.decode(lowp.encode(x, fmt, "down"), fmt, np.float64)
        hi = lowp.decode(lowp.encode(x, fmt, "up"), fmt, np.float64)
        assert np.all((vals == lo) | (vals == hi) | (np.isnan(lo) & np.isnan(vals)))
        assert got.max() < 1 << fmt.bits
    else:
        np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize("name", ["bfloat16", "posit16", "posit32", "float8_e4m3fn"])
def test_big_endian_low_precision_arrays_round_by_value(name):
    """Arrays of a low-precision dtype in the other byte order (lowp's or ml_dtypes')
    are read by value in round, encode and cast, as native ones (their codes used to be
    read unswapped)."""
    import ml_dtypes
    x = np.array([1.5, -2.0, 0.3, 1e-3, np.nan], np.float64)
    for mod in (lowp, ml_dtypes):
        t = getattr(mod, name, None)
        if t is None:
            continue
        native = x.astype(t)
        big = native.view(np.dtype(f"u{native.itemsize}")).byteswap().view(np.dtype(t).newbyteorder(">"))
        if native.itemsize == 1:
            big = native
        for fmt in ("e4m3fn", "bf16", "posit16"):
            np.testing.assert_array_equal(lowp.round(big, fmt), lowp.round(native, fmt))
            np.testing.assert_array_equal(lowp.encode(big, fmt), lowp.encode(native, fmt))
        np.testing.assert_array_equal(lowp.cast(big, lowp.float8_e5m2).view(np.uint8),
                                      lowp.cast(native, lowp.float8_e5m2).view(np.uint8))
        # 0-d arrays stay 0-d (the byte swap made them 1-d).
        for f in (lambda a: lowp.round(a, "e4m3fn"), lambda a: lowp.encode(a, "bf16"),
                  lambda a: lowp.cast(a, lowp.float8_e5m2).view(np.uint8), lambda a: lowp.quantize(a).values):
            np.testing.assert_array_equal(f(big[0]), f(native[0]), strict=True)
            np.testing.assert_array_equal(f(big[:1].reshape(())), f(native[0]), strict=True)
        with pytest.raises(ValueError, match="^axis"):
            lowp.sum(big[:1].reshape(()), axis=0)


def test_decode_without_subnormals_reads_the_zero_exponent_as_zero():
    """Codes of the zero exponent in a format without subnormals are zeros of their sign
    (round and encode never make the others, whose values would lie below min_normal)."""
    f = lowp.FloatFormat(4, 3, subnormals=False)
    v = lowp.decode(np.arange(256, dtype=np.uint8), f, np.float64)
    assert np.all(v[1:8] == 0) and np.all(v[0x81:0x88] == 0) and np.all(np.signbit(v[0x80:0x88]))
    assert v[8] == f.min_normal == f.min_subnormal
    codes = np.arange(256, dtype=np.uint8)
    keep = ~np.isnan(v) & ((codes & 0x78) != 0)
    np.testing.assert_array_equal(lowp.encode(v[keep], f), codes[keep])


@pytest.mark.parametrize("e,m", [(4, 3), (5, 2), (5, 10), (8, 20)])
def test_decode_of_fnuz_without_subnormals_gives_no_negative_zero(e, m):
    """fnuz formats have no -0: their flushed zero-exponent codes of either sign read +0
    (other formats keep the sign)."""
    f = lowp.FloatFormat(e, m, nan="fnuz", subnormals=False)
    sign = 1 << (f.bits - 1)
    codes = np.array([0, 1, (1 << m) - 1, sign + 1, sign + (1 << m) - 1], dtype=f.storage_dtype)
    for dt in (np.float32, np.float64):
        v = lowp.decode(codes, f, dt)
        assert np.all(v == 0) and not np.signbit(v).any(), (dt, v)
    g = lowp.FloatFormat(e, m, nan="ieee", subnormals=False)
    assert np.signbit(lowp.decode(codes, g, np.float64))[3:].all()


def test_a_failed_round_into_out_leaves_out_untouched():
    """A NaN that the format cannot hold raises, and a caller's out (written directly
    otherwise) keeps what it held."""
    x = np.array([1.0, np.nan, 2.0], np.float32)
    for fmt in ("e2m1fn", lowp.IntFormat(8), lowp.FloatFormat(3, 2, nan=None)):
        o = np.full(3, 7.0, np.float32)
        with pytest.raises(ValueError, match="^x: contains NaN"):
            lowp.round(x, fmt, out=o)
        np.testing.assert_array_equal(o, [7, 7, 7])
        f = lowp.format(fmt)
        c = np.full(3, 7, f.storage_dtype)
        with pytest.raises(ValueError, match="^x: contains NaN"):
            lowp.encode(x, f, out=c)
        np.testing.assert_array_equal(c, [7, 7, 7])


def test_a_cast_into_an_ml_dtypes_format_says_to_import_it():
    code = textwrap.dedent("""
        import sys, numpy as np, lowp
        assert "ml_dtypes" not in sys.modules
        try:
            lowp.cast(np.array([1.0]), "e2m1fn")
        except TypeError as e:
            assert "import ml_dtypes" in str(e), e
        else:
            raise AssertionError("no error")
        import ml_dtypes
        assert lowp.cast(np.array([1.0]), "e2m1fn").dtype == np.dtype(ml_dtypes.float4_e2m1fn)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_a_failed_round_in_place_leaves_its_input():
    x = np.array([1.3, np.nan, 2.7, 1e6])
    for fn in (lambda: lowp.round(x, lowp.IntFormat(8), out=x),
               lambda: lowp.round(x, "float4_e2m1fn", out=x)):
        with pytest.raises(ValueError, match="^x: contains NaN"):
            fn()
        np.testing.assert_array_equal(x, [1.3, np.nan, 2.7, 1e6])
    y = x.astype(np.float32)
    with pytest.raises(ValueError, match="^x: contains NaN"):
        lowp.encode(y, lowp.IntFormat(32), out=y.view(np.uint32))
    np.testing.assert_array_equal(y, np.array([1.3, np.nan, 2.7, 1e6], np.float32))


def test_out_with_zero_strides_is_refused():
    """An out whose elements overlap (a broadcast or as_strided view) is refused, as
    matmul refuses one; every element would be written to the same place."""
    o = np.zeros(1, np.float32)
    z = np.lib.stride_tricks.as_strided(o, (4,), (0,))
    x = np.arange(4, dtype=np.float32) + 0.1
    with pytest.raises(ValueError, match="^out: must not have zero strides"):
        lowp.round(x, "bf16", out=z)
    with pytest.raises(ValueError, match="^out: must not have zero strides"):
        lowp.encode(x, "bf16", out=np.lib.stride_tricks.as_strided(np.zeros(1, np.uint16), (4,), (0,)))
    np.testing.assert_array_equal(o, [0])
    one = np.zeros(1, np.float32)
    assert lowp.round(x[:1], "bf16", out=np.lib.stride_tricks.as_strided(one, (1,), (0,)))[0] == np.float32(0.10009765625)
