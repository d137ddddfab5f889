"""lowp.ulp and lowp.nextafter against independent oracles.

Oracles: for 8- and 16-bit formats the sorted list of every decoded encoding (the
neighbour of a value is the next entry); numpy's nextafter/spacing for float16/32/64;
ml_dtypes' nextafter for its dtypes; softposit's bit patterns for posit32.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import softposit
from hypothesis import given, settings
from hypothesis import strategies as st

import lowp
from lowp.testing import strategies as lst

SMALL = ["bfloat16", "float16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
         "posit8", "posit16", "int8"]
CUSTOM = [lowp.FloatFormat(3, 2), lowp.FloatFormat(4, 3, subnormals=False), lowp.FloatFormat(5, 2, inf=False),
          lowp.FloatFormat(3, 1, nan=None), lowp.PositFormat(6, 1), lowp.PositFormat(10, 0), lowp.IntFormat(4, signed=False),
          lowp.IntFormat(12)]


def sorted_values(f: lowp.Format) -> np.ndarray:
    """Every finite value of ``f`` (8/16-bit), ascending, +-0 merged."""
    codes = np.arange(1 << f.bits, dtype=np.uint64).astype(f.storage_dtype)
    v = lowp.decode(codes, f, np.float64)
    v = v[np.isfinite(v)]
    if isinstance(f, lowp.FloatFormat) and not f.subnormals:
        v = v[(v == 0) | (np.abs(v) >= f.min_normal)]
    return np.unique(v)


def has_inf(f: lowp.Format) -> bool:
    return isinstance(f, lowp.FloatFormat) and f.inf


@pytest.mark.parametrize("fmt", SMALL + CUSTOM, ids=str)
def test_nextafter_and_ulp_every_value(fmt):
    f = lowp.format(fmt)
    v = sorted_values(f)
    over = np.inf if has_inf(f) else np.nan
    np.testing.assert_array_equal(lowp.nextafter(v, np.inf, f), np.append(v[1:], over))
    np.testing.assert_array_equal(lowp.nextafter(v, -np.inf, f), np.insert(v[:-1], 0, -over))
    np.testing.assert_array_equal(lowp.nextafter(v, v, f), v)
    # ulp: gap to the next larger magnitude; at the top, the gap below.
    pos = v[v >= 0]
    gaps = np.diff(pos)
    np.testing.assert_array_equal(lowp.ulp(pos, f), np.append(gaps, gaps[-1]))
    np.testing.assert_array_equal(lowp.ulp(-pos, f), lowp.ulp(pos, f))
    # Between two neighbours (not representable): the value beyond, and their gap.
    mid = (pos[:-1] + pos[1:]) / 2
    np.testing.assert_array_equal(lowp.nextafter(mid, np.inf, f), pos[1:])
    np.testing.assert_array_equal(lowp.nextafter(mid, -np.inf, f), pos[:-1])
    np.testing.assert_array_equal(lowp.ulp(mid, f), gaps)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz",
                                  "float8_e5m2fnuz"])
def test_nextafter_matches_ml_dtypes(name):
    dt = np.dtype(getattr(ml_dtypes, name))
    f = lowp.format(name)
    bits = np.arange(1 << f.bits, dtype=np.uint64).astype(f.storage_dtype)
    xs = lowp.decode(bits, f, np.float64)
    fin = np.isfinite(xs)
    x, xs = bits[fin].view(dt), xs[fin]
    for target in (f.max, -f.max, 0.0):
        # Toward the largest finite values (stepping past them differs by format: see
        # test_nextafter_and_ulp_every_value); compare inside the range.
        expect = np.nextafter(x, np.full(x.shape, target).astype(dt)).astype(np.float64)
        got = lowp.nextafter(xs, target, f)
        inside = np.abs(xs) < f.max
        np.testing.assert_array_equal(got[inside], expect[inside])


@settings(max_examples=300, deadline=None)
@given(lst.values("float32", allow_nan=False), st.sampled_from([np.inf, -np.inf, 0.0, 1.0]))
def test_float32_against_numpy(x, y):
    x32 = np.float32(x)
    with np.errstate(over="ignore"):
        expect = np.nextafter(x32, np.float32(y))
    assert lowp.nextafter(x, y, "float32") == expect
    if math.isfinite(x) and abs(x) < lowp.format("float32").max:
        assert lowp.ulp(x, "float32") == np.spacing(np.abs(x32))


@settings(max_examples=300, deadline=None)
@given(lst.values("float64", allow_nan=False, allow_infinity=False))
def test_float64_against_numpy(x):
    if abs(x) < np.finfo(np.float64).max:
        assert lowp.ulp(x, "float64") == np.spacing(abs(x))
    with np.errstate(over="ignore"):
        assert lowp.nextafter(x, -np.inf, "float64") == np.nextafter(x, -np.inf)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, (1 << 32) - 1))
def test_posit32_against_softposit(code):
    p = softposit.posit32()
    p.fromBits(code)
    if p.isNaR():
        return
    x = float(p)
    nxt = softposit.posit32()
    nxt.fromBits((code + 1) % (1 << 32))
    expect = math.nan if nxt.isNaR() else float(nxt)
    got = float(lowp.nextafter(x, math.inf, "posit32"))
    assert got == expect or (math.isnan(got) and math.isnan(expect))
    if x >= 0 and not nxt.isNaR():
        assert lowp.ulp(x, "posit32") == expect - x


def test_scalars_arrays_and_dtypes():
    assert isinstance(lowp.ulp(1.0, "bf16"), np.floating)
    assert lowp.ulp(1.0, "bf16") == 2.0**-7
    assert lowp.ulp(0.0, "bf16") == lowp.format("bf16").min_subnormal
    assert lowp.nextafter(1.0, 2.0, "e4m3fn") == 1.125
    assert lowp.nextafter(448.0, np.inf, "e4m3fn") != lowp.nextafter(448.0, np.inf, "e4m3fn")  # NaN: no inf
    assert lowp.nextafter(np.inf, 0.0, "e4m3fn") == 448.0
    assert lowp.nextafter(57344.0, np.inf, "e5m2") == np.inf
    assert lowp.nextafter(-np.inf, 0.0, "e5m2") == -57344.0
    assert np.isnan(lowp.nextafter(np.nan, 0.0, "bf16"))
    assert np.isnan(lowp.ulp(np.inf, "bf16"))
    assert lowp.ulp(100, "int8") == 1.0
    assert lowp.nextafter(127, 200, "int8") != lowp.nextafter(127, 200, "int8")
    assert lowp.nextafter(-128, 0, "int8") == -127
    # Low-precision input arrays are read exactly.
    x = np.array([1.0, 3.0], dtype=ml_dtypes.bfloat16)
    np.testing.assert_array_equal(lowp.nextafter(x, 0.0, "bf16"), [1 - 2.0**-8, 3 - 2.0**-6])
    np.testing.assert_array_equal(lowp.ulp(np.array([[1.0], [2.0]], np.float32), "fp16").shape, (2, 1))


def test_infinities_and_wide_integers():
    """From an infinity the first step is the largest finite value (float64 too); integers
    beyond 2**53 are bracketed by the format's values around them, not around their
    float64 rounding."""
    f64max = np.finfo(np.float64).max
    assert lowp.nextafter(np.inf, 0.0, "float64") == f64max == np.nextafter(np.inf, 0.0)
    assert lowp.nextafter(-np.inf, 0.0, "float64") == -f64max
    assert lowp.nextafter(np.inf, 0.0, "bf16") == lowp.format("bf16").max
    assert lowp.nextafter(-np.inf, 0.0, "e4m3fn") == -448.0
    assert lowp.nextafter(np.inf, 0.0, "int8") == 127 and lowp.nextafter(-np.inf, 0.0, "int8") == -128
    # Formats without infinities too (inf is not a posit, nor an e4m3fn value): beyond the largest.
    assert lowp.nextafter(np.inf, 0.0, "posit8") == lowp.format("posit8").max
    assert lowp.nextafter(-np.inf, 1.0, "posit16") == -lowp.format("posit16").max
    with pytest.raises(ValueError, match="y: shape"):
        lowp.nextafter(np.ones(3), np.ones(4), "bf16")
    x = np.int64(2**63 - 1)  # between the bf16 values 2^63 - 2^55 and 2^63
    assert lowp.nextafter(x, np.inf, "bf16") == 2.0**63
    assert lowp.nextafter(x, -np.inf, "bf16") == 2.0**63 - 2.0**55
    assert lowp.ulp(x, "bf16") == 2.0**55
    assert lowp.ulp(np.int64(2**62 + 1), "bf16") == 2.0**55


def _f64_neighbours(v: int) -> tuple[int, int]:
    """The float64 values just below and just above the integer ``v`` (not a float64),
    by integer arithmetic: float64 has 53 significant bits."""
    a = abs(v)
    step = 1 << max(a.bit_length() - 53, 0)
    lo, hi = a // step * step, (a // step + 1) * step
    return (lo, hi) if v > 0 else (-hi, -lo)


WIDE_INTS = [2**53 + 1, 2**53 + 3, 2**54 - 1, 2**54 + 1, 2**60 + 1, 2**60 + 2**7 + 1, 2**62 + 2**9 - 1,
             2**63 - 1, -(2**53 + 3), -(2**60 + 1), -(2**63 - 1)]


@pytest.mark.parametrize("v", WIDE_INTS)
def test_float64_integers_beyond_2_53(v):
    """An integer float64 cannot hold steps to its float64 neighbour toward y, not to the
    neighbour of its rounding; its ulp is the gap of the float64 values around it."""
    lo, hi = _f64_neighbours(v)
    assert lo < v < hi and float(lo) == lo and float(hi) == hi
    for x in (v, np.int64(v), np.array([v, v])):
        up = lowp.nextafter(x, np.inf, "float64")
        down = lowp.nextafter(x, -np.inf, "float64")
        assert np.all(up == hi) and np.all(down == lo), (int(np.ravel(up)[0]) - v, int(np.ravel(down)[0]) - v)
    # Toward a target beyond x but closer than float64 can say (still exact comparisons).
    assert lowp.nextafter(v, v + 1, "float64") == hi and lowp.nextafter(v, v - 1, "float64") == lo
    assert lowp.nextafter(lo, v, "float64") == hi and lowp.nextafter(hi, v, "float64") == lo
    assert lowp.ulp(v, "float64") == (hi - lo) == lowp.ulp(float(lo) if v > 0 else float(hi), "float64")


def test_uint64_beyond_int64():
    x = np.array([2**64 - 1, 2**63 + 1, 2**63 + 2**11 + 2**10], np.uint64)  # none a float64
    want_up = [_f64_neighbours(int(v))[1] for v in x]
    want_down = [_f64_neighbours(int(v))[0] for v in x]
    got_up, got_down = lowp.nextafter(x, np.inf, "float64"), lowp.nextafter(x, -np.inf, "float64")
    assert [int(v) for v in got_up] == want_up and [int(v) for v in got_down] == want_down
    np.testing.assert_array_equal(lowp.ulp(x, "float64"), [float(h - lo) for lo, h in zip(want_down, want_up)])


@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e5m2", "posit16", "float32"])
def test_narrow_formats_and_wide_integers(fmt):
    """Every format gives, for an integer beyond 2**53, the format's values around it; and
    integer targets are compared exactly (x and y in the same float64 gap)."""
    f = lowp.format(fmt)
    vals = sorted_values(f) if f.bits <= 16 else None
    for v in (2**53 + 1, 2**54 - 1, 2**60 + 3, -(2**58 + 5)):
        if vals is not None:
            # (Python compares a float with an int exactly; numpy would round v to float64.)
            above = vals[np.array([a > v for a in vals.tolist()])]
            below = vals[np.array([a < v for a in vals.tolist()])]
            want_up = above[0] if above.size else (np.inf if has_inf(f) else np.nan)
            want_down = below[-1] if below.size else (-np.inf if has_inf(f) else np.nan)
        else:  # float32: 24 significant bits, by integer arithmetic
            step = 1 << (abs(v).bit_length() - 24)
            want_up, want_down = float((v // step + 1) * step), float(v // step * step)
        np.testing.assert_array_equal(lowp.nextafter(v, np.inf, f), want_up)
        np.testing.assert_array_equal(lowp.nextafter(v, -np.inf, f), want_down)
        np.testing.assert_array_equal(lowp.nextafter(v, v + 2, f), want_up)
        np.testing.assert_array_equal(lowp.nextafter(v, v - 2, f), want_down)


def test_longdouble_values_float64_cannot_hold():
    ld = np.longdouble
    if np.finfo(ld).nmant <= 52:
        pytest.skip("longdouble is float64 here")
    eps = 2.0**-52
    x = ld(1) + ld(2) ** -60  # between 1 and 1 + eps
    assert lowp.nextafter(x, 2, "float64") == 1 + eps and lowp.nextafter(x, 0, "float64") == 1.0
    assert lowp.ulp(x, "float64") == eps and lowp.ulp(-x, "float64") == eps
    y = ld(1) - ld(2) ** -60  # between 1 - eps/2 and 1
    assert lowp.nextafter(y, 2, "float64") == 1.0 and lowp.nextafter(y, 0, "float64") == 1 - eps / 2
    assert lowp.nextafter(x, y, "float64") == 1.0 and lowp.nextafter(y, x, "float64") == 1.0
    if np.finfo(ld).maxexp > 1024:
        big = ld(2) ** 1100
        fmax = np.finfo(np.float64).max
        with np.errstate(over="ignore"):
            assert lowp.nextafter(big, 0, "float64") == fmax and lowp.nextafter(big, np.inf, "float64") == np.inf
        assert lowp.ulp(big, "float64") == fmax - np.nextafter(fmax, 0)  # beyond the top: the gap below it


def test_bad_input():
    with pytest.raises(ValueError, match="fmt"):
        lowp.ulp(1.0, "nosuchformat")
    with pytest.raises(TypeError, match="x"):
        lowp.ulp(np.array(["a"]), "bf16")
    with pytest.raises(ValueError):
        lowp.nextafter(np.zeros(3), np.zeros(4), "bf16")


# ---------------------------------------------------------------- Python ints of any size, Fractions

def _grid(f: lowp.Format):
    """(above, below) of exact values for format ``f``: the smallest value of ``f`` strictly
    above ``v`` and the largest strictly below (None past the ends), by exact comparisons
    with every value (8/16-bit formats) or by stepping numpy's float32/float64."""
    from fractions import Fraction

    if f.bits <= 16:
        vals = [Fraction(float(g)) for g in sorted_values(f)]
        return (lambda v: next((g for g in vals if g > v), None),
                lambda v: next((g for g in reversed(vals) if g < v), None))
    dt = np.float64 if f.bits == 64 else np.float32
    top = Fraction(float(np.finfo(dt).max))

    def start(v):
        return dt(float(max(min(v, top), -top)))  # a value of dt near v

    def above(v):
        if v >= top:
            return None
        if v < -top:
            return -top
        g = start(v)
        while Fraction(float(g)) > v and Fraction(float(np.nextafter(g, dt(-np.inf)))) > v:
            g = np.nextafter(g, dt(-np.inf))
        while Fraction(float(g)) <= v:
            g = np.nextafter(g, dt(np.inf))
        return Fraction(float(g))

    def below(v):
        a = above(-v)
        return None if a is None else -a

    return above, below


BIG = [2**64, 2**64 + 1, -(2**64 + 1), 2**70 + 3, -(2**100 + 7), 3 * 2**1023 + 1, 2**1024, -(2**2000)]


@pytest.mark.parametrize("fmt", ["float64", "float32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2",
                                 "posit8", "posit16", "int8", lowp.FloatFormat(3, 2), lowp.PositFormat(10, 0),
                                 lowp.IntFormat(12)], ids=str)
def test_python_ints_of_any_size_and_fractions(fmt):
    """Python ints beyond 64 bits and Fractions, as x or y, are taken exactly (numpy cannot
    hold them: they would be object arrays)."""
    from fractions import Fraction

    f = lowp.format(fmt)
    above, below = _grid(f)
    inf = has_inf(f)

    def want(g, sign):
        return float(g) if g is not None else (sign * np.inf if inf else np.nan)

    xs = BIG + [Fraction(1, 3), Fraction(-7, 10**30), Fraction(10**400 + 1, 3), Fraction(5, 2)]
    for x in xs:
        up, down = want(above(x), 1), want(below(x), -1)
        for y in (np.inf, x + 1, 2**3000, float(2**1000) if x < 2**1000 else np.inf):
            np.testing.assert_array_equal(lowp.nextafter(x, y, f), up, err_msg=f"{x} toward {y}")
        for y in (-np.inf, x - 1, -(2**3000)):
            np.testing.assert_array_equal(lowp.nextafter(x, y, f), down, err_msg=f"{x} toward {y}")
        # ulp: the gap around |x| (just below the largest value beyond it); integers: 1.
        a = abs(x)
        if isinstance(f, lowp.IntFormat):
            wu = 1.0
        else:
            hi = above(a)
            if hi is None:  # at or beyond the largest value: the gap below it
                hi = below(Fraction(2) ** 5000)
            wu = float(hi - below(hi))
        assert lowp.ulp(x, f) == wu, x
    # As y against float x, exactly: 2**1024 is beyond float64 yet above all its values.
    for x in (1.0, -3.5, float(np.finfo(np.float32).max)):
        np.testing.assert_array_equal(lowp.nextafter(x, 2**1024 + 1, f), want(above(Fraction(x)), 1))
        np.testing.assert_array_equal(lowp.nextafter(np.array([x, x]), -(2**70), f),
                                      [want(below(Fraction(x)), -1)] * 2)


def test_object_arrays_of_big_ints_are_refused():
    for bad in ([2**70, 1], np.array([2**70], object), (1, 2**80)):
        with pytest.raises(TypeError, match="^x: .*Python objects"):
            lowp.ulp(bad, "float64")
        with pytest.raises(TypeError, match="^y: .*Python objects"):
            lowp.nextafter(1.0, bad, "bf16")


@pytest.mark.parametrize("x,y,fmt,want", [
    (2.0**-24, 0.0, "float16", 0.0), (-2.0**-24, 0.0, "float16", -0.0), (2.0**-24, -1.0, "float16", 0.0),
    (-2.0**-24, 1.0, "float16", -0.0), (2.0**-133, 0.0, "bf16", 0.0), (-2.0**-133, 0.0, "bf16", -0.0),
    (2.0**-10, 0.0, "e4m3fnuz", 0.0), (-2.0**-10, 0.0, "e4m3fnuz", 0.0), (-2.0**-10, 1.0, "e4m3fnuz", 0.0),
    (-1.0, 0.0, "int8", 0.0), (0.0, -0.0, "float16", -0.0), (-0.0, 0.0, "float16", 0.0),
    (0.0, -0.0, "e4m3fnuz", 0.0), (-0.0, -0.0, "e5m2fnuz", 0.0), (-0.0, -0.0, "posit8", 0.0),
    (0.0, -0.0, "int8", 0.0)])
def test_nextafter_onto_zero_keeps_xs_side(x, y, fmt, want):
    """As numpy's nextafter: a step onto zero lands on x's zero (formats without -0: +0)."""
    got = lowp.nextafter(x, y, fmt)
    assert got == 0 and np.signbit(got) == np.signbit(want)
    if fmt == "float16" and x != y:  # (equal: C's nextafter returns y, numpy's float16 x)
        ref = np.nextafter(np.float16(x), np.float16(y))
        assert np.signbit(ref) == np.signbit(got)
    posit = lowp.nextafter(-lowp.format("posit8").min_subnormal, 0.0, "posit8")
    assert posit == 0 and not np.signbit(posit)


def test_ragged_input_names_the_argument():
    from lowp.testing import ulp_distance

    with pytest.raises(TypeError, match="x: cannot be read"):
        lowp.ulp([[1.0], [1.0, 2.0]], "bf16")
    with pytest.raises(TypeError, match="y: cannot be read"):
        lowp.nextafter(1.0, [[1.0], [1.0, 2.0]], "bf16")
    with pytest.raises(TypeError, match="desired: cannot be read"):
        ulp_distance(1.0, [[1.0], [1.0, 2.0]], "bf16")
