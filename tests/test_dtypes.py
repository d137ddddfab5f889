"""NumPy dtypes: scalars, arrays, casts (bit-exact against ml_dtypes and lowp.encode), bad input, leaks."""

from __future__ import annotations

import io
import math
import pickle
import struct
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import lowp

FLOATS = ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz"]
POSITS = ["posit8", "posit16", "posit32"]
ALL = FLOATS + POSITS
SIZE = {"bfloat16": 2, "posit16": 2, "posit32": 4}

NUMPY_TYPES = [np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
               np.longlong, np.ulonglong, np.float16, np.float32, np.float64, np.complex64, np.complex128]


def dt(name):
    return np.dtype(getattr(lowp, name))


def udt(name):
    return np.dtype(f"u{SIZE.get(name, 1)}")


def all_codes(name):
    """Every encoding (posit32: a spread sample of 2^20 codes plus the specials)."""
    if name == "posit32":
        rng = np.random.default_rng(32)
        c = rng.integers(0, 2**32, 2**20, dtype=np.uint64).astype(np.uint32)
        special = np.array([0, 1, 2, 0x7FFFFFFF, 0x7FFFFFFE, 0x80000000, 0x80000001, 0xFFFFFFFF, 0x40000000, 0xC0000000,
                            0x40000001, 0x3FFFFFFF],
                           np.uint32)
        return np.concatenate([special, c])
    n = 8 * SIZE.get(name, 1)
    return np.arange(2**n, dtype=np.uint64).astype(udt(name))


def values(name):
    """Exact values of all_codes (float64) via the format engine."""
    return lowp.decode(all_codes(name), lowp.format(name), np.float64)


def same_bits(a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    assert a.dtype.itemsize == b.dtype.itemsize
    u = np.dtype(f"u{a.dtype.itemsize}")
    return np.array_equal(a.view(u), b.view(u))


# ------------------------------------------------------------------ dtype basics

@pytest.mark.parametrize("name", ALL)
def test_dtype_basics(name):
    t = getattr(lowp, name)
    d = np.dtype(t)
    assert d.itemsize == SIZE.get(name, 1)
    assert d.name == name
    assert d.type is t
    assert issubclass(t, np.generic)
    assert t.__module__ == "lowp"
    assert lowp.format(d) == lowp.format(name)
    assert lowp.format(name).dtype == d
    assert np.zeros(3, t).dtype == d
    assert np.all(np.zeros(3, t).astype(np.float64) == 0)
    assert np.empty((2, 3), t).shape == (2, 3)


@pytest.mark.parametrize("name", ALL)
def test_array_from_python(name):
    t = getattr(lowp, name)
    a = np.array([1.5, -2, 0.25, True], dtype=t)
    assert a.dtype == np.dtype(t)
    np.testing.assert_array_equal(a.astype(np.float64), [1.5, -2, 0.25, 1])
    # Rounding matches the format engine, from float64, once.
    x = np.random.default_rng(1).standard_normal(200) * 10
    b = np.array(list(x), dtype=t)
    assert same_bits(b, lowp.encode(x, lowp.format(name)))
    c = np.array([str(v) for v in x[:20]], dtype=object).astype(t)
    assert same_bits(c, lowp.encode(np.array([float(str(v)) for v in x[:20]]), lowp.format(name)))


@pytest.mark.parametrize("name", ALL)
def test_scalar(name):
    t = getattr(lowp, name)
    f = lowp.format(name)
    x = t(1.5)
    assert isinstance(x, t) and isinstance(x, np.generic)
    assert float(x) == 1.5 and int(t(-2.5)) == -2
    assert t() == 0 and t("0.25") == 0.25 and t(t(3)) == 3
    assert bool(t(0)) is False and bool(t(0.5)) is True
    assert x == 1.5 and x < 2 and x > 1 and x != 1 and x <= 1.5 and x >= 1.5
    assert x + x == 3 and type(x + x) is t
    assert x * x == t(2.25) and type(x * x) is t
    assert x - t(0.5) == 1 and x / t(2) == 0.75 and -x == -1.5 and abs(-x) == 1.5
    assert hash(x) == hash(1.5) and hash(t(0.1)) == hash(float(t(0.1)))
    assert {t(2): "a"}[2.0] == "a"
    assert format(t(1.5), ".3f") == "1.500" and format(t(0.25), "") == "0.25" and f"{t(2):>5}" == "  2.0"
    y = pickle.loads(pickle.dumps(t(0.1)))
    assert type(y) is t and float(y) == float(t(0.1))
    # Rounded once from float64 (nearest even), as the format engine does.
    v = 1 / 3
    assert float(t(v)) == float(lowp.decode(lowp.encode(np.array([v]), f), f, np.float64)[0])
    # Other lowp scalars and ml_dtypes scalars convert by value.
    assert t(lowp.float8_e4m3fn(2.5)) == 2.5
    assert t(ml_dtypes.float8_e5m2(3)) == 3
    # From an array: converts the array.
    a = t(np.array([1.0, 2.0]))
    assert a.dtype == np.dtype(t)


@pytest.mark.parametrize("name", ALL)
def test_repr_shortest_roundtrip(name):
    t = getattr(lowp, name)
    codes = all_codes(name)
    if codes.size > 70000:
        codes = codes[:: codes.size // 20000]
    from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

    vals = lowp.decode(codes, lowp.format(name), np.float64)
    # Every 7th code, and every power of two (where the spacing changes, so the shortest
    # decimal may lie on the wider side only).
    with np.errstate(invalid="ignore"):
        pick = (np.arange(codes.size) % 7 == 0) | (np.frexp(vals)[0] == 0.5)
    codes, vals = codes[pick], vals[pick]
    for c, v, s in zip(codes, vals, codes.view(t)):
        r = repr(s)
        assert str(s) == r
        if math.isnan(v):
            assert r == "nan"
            continue
        # Round-trips to the same encoding...
        back = np.array([float(r)], dtype=t).view(udt(name))[0]
        assert back == c or (v == 0 and float(r) == 0), (c, r)
        # ...and no shorter decimal does, but for integers below 1e6: printed exactly.
        exact_int = float(r) == v and v.is_integer() and abs(v) < 1e6
        digits = len(r.replace("-", "").split("e")[0].replace(".", "").lstrip("0").rstrip("0")) or 1
        if digits > 1 and math.isfinite(v) and not exact_int:
            # The decimals of one digit fewer just below and just above v: if neither
            # comes back, none does.
            d = Decimal(v)
            unit = Decimal(1).scaleb(d.adjusted() - (digits - 2))
            for rounding in (ROUND_FLOOR, ROUND_CEILING):
                shorter = d.quantize(unit, rounding=rounding)
                if shorter != 0:
                    assert np.array([float(shorter)], dtype=t).view(udt(name))[0] != c, (r, str(shorter))


@pytest.mark.parametrize("name", ALL)
def test_printing(name):
    t = getattr(lowp, name)
    a = np.array([1.5, -0.25, 3], dtype=t)
    s = repr(a)
    # numpy quotes dtype names that np.dtype() would not parse back (all but those in sctypeDict).
    assert s in (f"array([1.5, -0.25, 3.0], dtype={name})", f"array([1.5, -0.25, 3.0], dtype='{name}')")
    assert str(a) == "[1.5 -0.25 3.0]"


@pytest.mark.parametrize("name", ALL)
def test_bytes_save_load_pickle(name, tmp_path):
    t = getattr(lowp, name)
    codes = all_codes(name)[:5000]
    a = codes.view(t)
    b = np.frombuffer(a.tobytes(), dtype=t)
    assert b.dtype == a.dtype and same_bits(a, b)
    p = pickle.loads(pickle.dumps(a))
    assert p.dtype == a.dtype and same_bits(a, p)
    path = tmp_path / "x.npy"
    np.save(path, a)
    # numpy stores legacy user dtypes as raw void bytes ("|V1"); a view restores the type.
    r = np.load(path)
    assert r.dtype.itemsize == a.dtype.itemsize
    assert same_bits(r.view(t), a)
    buf = io.BytesIO()
    np.savez(buf, a=a.reshape(2, -1))
    buf.seek(0)
    assert same_bits(np.load(buf)["a"].view(t).reshape(-1), a)


@pytest.mark.parametrize("name", ALL)
def test_indexing_and_manipulation(name):
    t = getattr(lowp, name)
    x = np.array([3, -1, 2, 0.5, -4, 2], dtype=np.float64)
    a = x.astype(t)
    assert same_bits(a[[0, 2, 4]], x[[0, 2, 4]].astype(t))
    assert same_bits(a[a > 0], x[x > 0].astype(t))
    assert same_bits(np.concatenate([a, a[:2]]), np.concatenate([x, x[:2]]).astype(t))
    assert same_bits(np.where(x > 0, a, np.zeros_like(a)), np.where(x > 0, x, 0).astype(t))
    assert same_bits(np.stack([a, a]).T.copy()[:, 0], a)
    b = a.copy()
    b[1:3] = t(7)
    assert float(b[1]) == 7 and float(b[2]) == 7
    b[0] = 0.5
    assert float(b[0]) == 0.5
    assert a.reshape(2, 3)[1, 2] == 2
    assert list(np.nonzero(np.array([0, 1, 0, 2], dtype=t))[0]) == [1, 3]
    np.testing.assert_array_equal(np.arange(0, 5, dtype=t).astype(np.float64), np.arange(5.0))
    assert float(np.dot(np.array([1, 2], dtype=t), np.array([3, 4], dtype=t))) == float(t(11))


@pytest.mark.parametrize("name", ALL)
def test_sort_and_friends(name):
    t = getattr(lowp, name)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(500) * 4
    a = x.astype(t)
    v = a.astype(np.float64)
    assert np.array_equal(np.sort(a).astype(np.float64), np.sort(v))
    i = np.argsort(a, kind="stable")
    assert np.array_equal(v[i], np.sort(v))
    assert v[np.argmax(a)] == v.max() and v[np.argmin(a)] == v.min()
    u = np.unique(a)
    assert np.array_equal(u.astype(np.float64), np.unique(v))
    # NaN sorts last and argmax finds it first (numpy's conventions).
    b = np.array([1, np.nan, 3, -2], dtype=np.float64).astype(t)
    assert np.isnan(np.sort(b).astype(np.float64)[-1])
    assert np.argmax(b) == 1 and np.argmin(b) == 1


# ------------------------------------------------------------------ casts

@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("target", [np.float16, np.float32, np.float64])
def test_cast_every_encoding_to_float_matches_ml_dtypes(name, target):
    codes = all_codes(name)
    with np.errstate(over="ignore"):
        a = codes.view(dt(name)).astype(target)
    with np.errstate(over="ignore", invalid="ignore"):  # ml_dtypes raises invalid on signaling NaNs
        b = codes.view(getattr(ml_dtypes, name)).astype(target)
    assert same_bits(a, b)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("target", NUMPY_TYPES)
def test_cast_every_encoding_to_numpy(name, target):
    v = values(name)
    a = all_codes(name).view(dt(name))
    with np.errstate(invalid="ignore", over="ignore"):
        got = a.astype(target)
        if np.dtype(target).kind in "iub":
            fin = np.isfinite(v)
            if np.dtype(target).kind != "b":
                info = np.iinfo(target)
                fin &= (v >= float(info.min)) & (v < 2.0 ** info.bits / (2 if info.min < 0 else 1))
            want = v[fin].astype(target)
            assert np.array_equal(got[fin], want)
        else:
            want = v.astype(target)  # one rounding from the exact value
            assert np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("source", NUMPY_TYPES)
def test_cast_from_numpy(name, source):
    rng = np.random.default_rng(11)
    sd = np.dtype(source)
    if sd.kind == "b":
        x = np.array([True, False, True])
    elif sd.kind in "iu":
        info = np.iinfo(sd)
        x = np.concatenate([rng.integers(info.min, info.max, 5000, dtype=sd, endpoint=True),
                            np.array([info.min, info.max, 0, 1], sd)])
    elif sd.kind == "f":
        with np.errstate(over="ignore"):
            x = (rng.standard_normal(5000) * 2.0 ** rng.integers(-40, 40, 5000)).astype(sd)
    else:
        x = (rng.standard_normal(5000) + 1j * rng.standard_normal(5000)).astype(sd)
    if sd.kind == "c":
        # As numpy's complex -> float casts: the imaginary part dropped, with a warning.
        with pytest.warns(np.exceptions.ComplexWarning, match="imaginary"):
            got = x.astype(dt(name))
    else:
        got = x.astype(dt(name))
    ref = x.real.astype(np.float64) if sd.kind == "c" else x.astype(np.float64)
    if sd.kind in "iu" and sd.itemsize == 8:
        # int64 values beyond 2^53 would round twice through float64: compare exactly via Python ints.
        exact = np.abs(x.astype(np.float64)) < 2.0**53
        got, ref = got[exact], ref[exact]
    assert same_bits(got, lowp.encode(ref, lowp.format(name)))


@pytest.mark.parametrize("name", FLOATS)
def test_cast_random_float32_matches_ml_dtypes(name):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**32, 10**6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    y = (rng.standard_normal(10**6) * 2.0 ** rng.integers(-30, 30, 10**6)).astype(np.float32)
    x = np.concatenate([x, y, np.array([np.inf, -np.inf, np.nan, 0, -0.0], np.float32)])
    got = x.astype(dt(name))
    assert same_bits(got, lowp.encode(x, lowp.format(name)))
    with np.errstate(over="ignore", invalid="ignore"):
        assert same_bits(got, x.astype(getattr(ml_dtypes, name)))


@pytest.mark.parametrize("name", ALL)
def test_cast_random_float64_rounds_once(name):
    rng = np.random.default_rng(4)
    y = rng.standard_normal(10**6) * 2.0 ** rng.integers(-40, 40, 10**6)
    # Values near float32 midpoints, where rounding through float32 first goes wrong.
    z = (y.astype(np.float32).astype(np.float64)) * (1 + rng.choice([-1, 1], 10**6) * 2.0**-30)
    x = np.concatenate([y, z, [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e300, -1e-300]])
    got = x.astype(dt(name))
    assert same_bits(got, lowp.encode(x, lowp.format(name)))
    if name in FLOATS:
        with np.errstate(over="ignore"):
            ref = x.astype(getattr(ml_dtypes, name))
        differ = got.view(udt(name)) != ref.view(udt(name))
        # ml_dtypes rounds some float64 values twice; wherever lowp differs it is the exact rounding.
        assert differ.mean() < 1e-3


X87 = np.dtype(np.longdouble).itemsize == 16 and np.finfo(np.longdouble).nmant == 63


@pytest.mark.skipif(not X87, reason="longdouble is not the x87 extended format here")
@pytest.mark.parametrize("name", ALL)
def test_cast_longdouble_every_encoding(name):
    """Every value goes to longdouble and clongdouble exactly and comes back to its code."""
    v = values(name)
    a = all_codes(name).view(dt(name))
    for t in (np.longdouble, np.clongdouble):
        got = a.astype(t)
        assert np.array_equal(got.real, v.astype(np.longdouble), equal_nan=True)
        if t is np.clongdouble:
            with pytest.warns(np.exceptions.ComplexWarning):
                back = got.astype(dt(name))
        else:
            back = got.astype(dt(name))
        keep = ~np.isnan(v)
        assert same_bits(back[keep], a[keep])
        assert np.isnan(back[~keep].astype(np.float64)).all()
        # Every value is a longdouble: a safe cast, so mixed arithmetic runs in longdouble.
        assert np.can_cast(dt(name), t) and not np.can_cast(t, dt(name))
    mixed = np.array([1.5], dt(name)) * np.array([3], np.longdouble)
    assert mixed.dtype == np.longdouble and mixed[0] == 4.5


@pytest.mark.skipif(not X87, reason="longdouble is not the x87 extended format here")
def test_longdouble_into_round_cast_encode_and_scalars():
    """lowp.round, cast and encode, and the scalar constructors, take a longdouble's own
    value (rounded once, in every mode), as astype does."""
    L = np.longdouble
    above_mid = np.array([1], L) + L(2) ** -8 + L(2) ** -60  # above bf16's midpoint 1 + 2^-8
    just_above_one = np.array([1], L) + L(2) ** -60
    assert above_mid.astype(dt("bfloat16")).astype(np.float64)[0] == 1.0078125
    assert lowp.cast(above_mid, dt("bfloat16")).astype(np.float64)[0] == 1.0078125
    assert lowp.round(above_mid, "bf16")[0] == 1.0078125
    assert lowp.decode(lowp.encode(above_mid, "bf16"), "bf16")[0] == 1.0078125
    assert float(lowp.bfloat16(above_mid[0])) == 1.0078125
    assert float(lowp.bfloat16(-above_mid[0])) == -1.0078125
    for fmt, up in (("bf16", 1.0078125), ("e4m3fn", 1.125), ("posit8", 1.125), ("float32", 1 + 2.0**-23)):
        assert lowp.round(just_above_one, fmt, "up")[0] == up, fmt
        assert lowp.round(just_above_one, fmt, "down")[0] == 1.0, fmt
        assert lowp.round(-just_above_one, fmt, "toward_zero")[0] == -1.0, fmt
    # Beyond float64's range and below it: as their own values round.
    x = np.array([L("1e4000"), -L("1e4000"), L("inf"), L("nan"), L("1e-4000"), -L("1e-4000")], L)
    r = lowp.round(x, "posit16")
    big = lowp.format("posit16").max
    assert r[:2].tolist() == [big, -big] and np.isnan(r[2:4]).all()
    assert r[4] == lowp.format("posit16").min_subnormal and r[5] == -r[4]
    assert lowp.round(x, "bf16").tolist()[:3] == [np.inf, -np.inf, np.inf]
    assert float(lowp.posit16(L("1e4000"))) == big and np.isnan(float(lowp.posit16(L("inf"))))
    assert float(lowp.bfloat16(L("inf"))) == np.inf


@pytest.mark.skipif(not X87, reason="longdouble is not the x87 extended format here")
@pytest.mark.parametrize("name", ALL)
def test_cast_from_longdouble_rounds_once(name):
    """longdouble values of 64 significant bits, many just off the format's midpoints
    (where a rounding through float64 first would tie), against the exact rounding:
    a value between the adjacent float64 values lo < x < hi rounds down to the
    format's rounding down of lo and up to its rounding up of hi (the format's
    values are float64 values), then to the nearer, ties to the even code."""
    from fractions import Fraction

    rng = np.random.default_rng(87)
    f = lowp.format(name)
    posit = name in POSITS
    # (posit32's values here keep 20 or more fraction bits: its midpoints are the means.)
    wider = lowp.PositFormat(f.nbits + 1, f.es) if posit and f.nbits < 32 else None
    L = np.longdouble
    y = rng.standard_normal(3000) * 2.0 ** rng.integers(-12, 12, 3000)
    y = y[np.abs(y) < f.max / 4]
    # Midpoints of the format: halfway between a value and its neighbour up.
    base = lowp.round(y, f)
    up = lowp.nextafter(base, np.full_like(base, np.inf), f)
    mid = (base.astype(L) + up.astype(L)) / 2
    eps = L(2) ** -62 * np.abs(mid)
    x = np.concatenate([y.astype(L) * (1 + L(2) ** -60 * rng.integers(-7, 8, y.size)), mid + eps, mid - eps, mid,
                        np.array([0.0, -0.0], L)])
    x = x[np.isfinite(x) & (np.abs(x) < L(f.max) / 2)]
    got = np.array(x.astype(dt(name))).astype(np.float64)
    codes = x.astype(dt(name)).view(udt(name)).astype(np.int64)
    lo = np.nextafter(x.astype(np.float64), -np.inf)
    lo = np.where(lo.astype(L) < x, lo, np.nextafter(lo, -np.inf))
    lo = np.where(np.nextafter(lo, np.inf).astype(L) <= x, np.nextafter(lo, np.inf), lo)
    dn = lowp.round(lo, f, "down")
    hi = np.nextafter(lo, np.inf)
    upv = lowp.round(hi, f, "up")
    for i, q in enumerate(x):
        fq = Fraction(*q.as_integer_ratio())
        a, b = Fraction(dn[i]), Fraction(upv[i])
        if Fraction(lo[i]) == fq:
            a = b = Fraction(lowp.round(np.array([lo[i]]), f)[0])
        if a == b:
            want = a
        else:
            if wider is not None:
                # A posit rounds on its bit string: the point between two neighbours is
                # the value of the code between them one bit longer (for |x|).
                s = -1 if fq < 0 else 1
                lo_mag = min(abs(a), abs(b))
                c = int(lowp.encode(np.array([float(lo_mag)]), f)[0])
                m = s * Fraction(float(lowp.decode(np.array([2 * c + 1], np.uint64), wider)[0]))
            else:
                m = (a + b) / 2
            if fq != m:
                want = a if (fq < m) == (a < b) else b
            else:
                ca = int(lowp.encode(np.array([float(a)]), f)[0])
                want = a if ca % 2 == 0 else b
        assert Fraction(got[i]) == want, (name, repr(q), got[i], float(want), codes[i])


@pytest.mark.parametrize("src", ALL)
@pytest.mark.parametrize("dst", ALL)
def test_cast_between_lowp(src, dst):
    codes = all_codes(src)
    v = values(src)
    keep = ~np.isnan(v)
    got = codes.view(dt(src)).astype(dt(dst))
    assert got.dtype == dt(dst)
    if src == dst:
        assert same_bits(got, codes)
    # Rounded once from the exact value; NaN stays NaN.
    assert same_bits(got[keep], lowp.encode(v[keep], lowp.format(dst)))
    assert np.all(np.isnan(got[~keep].astype(np.float64)))
    if src in FLOATS and dst in FLOATS:
        with np.errstate(over="ignore", invalid="ignore"):
            ref = codes.view(getattr(ml_dtypes, src)).astype(getattr(ml_dtypes, dst))
        assert same_bits(got[keep], ref[keep])


@pytest.mark.parametrize("name", FLOATS)
def test_ml_dtypes_bit_exact_both_ways(name):
    codes = all_codes(name)
    m = codes.view(getattr(ml_dtypes, name))
    a = m.astype(dt(name))
    assert a.dtype == dt(name) and same_bits(a, codes)
    back = a.astype(getattr(ml_dtypes, name))
    assert back.dtype == np.dtype(getattr(ml_dtypes, name)) and same_bits(back, codes)
    assert np.can_cast(dt(name), np.dtype(getattr(ml_dtypes, name)))
    # lowp functions accept ml_dtypes arrays (by value: NaN payloads become the format's NaN).
    keep = ~np.isnan(values(name))
    assert same_bits(lowp.cast(m, dt(name))[keep], codes[keep])
    assert np.array_equal(lowp.decode(codes, name, np.float64)[keep], m[keep].astype(np.float64))


ML_NAMES = [n for n in FLOATS if hasattr(ml_dtypes, n)]


@pytest.mark.parametrize("ml_name", ML_NAMES)
@pytest.mark.parametrize("name", ALL)
def test_casts_with_ml_dtypes_of_other_names(ml_name, name):
    """Between an ml_dtypes type and a lowp type of another name: every code converts as
    lowp.encode rounds its exact value (once, to nearest even), both ways; safe exactly
    where every value converts exactly; assignment of ml_dtypes scalars works too."""
    if name == ml_name:
        pytest.skip("same encodings: bit copies (test_ml_dtypes_bit_exact_both_ways)")
    ml = np.dtype(getattr(ml_dtypes, ml_name))
    src = all_codes(ml_name).view(ml)
    got = src.astype(dt(name))
    v = values(ml_name)
    want = lowp.encode(v, name)
    keep = ~np.isnan(v)
    assert same_bits(got[keep], want[keep]) and np.all(np.isnan(got[~keep].astype(np.float64)))
    lows = all_codes(name).view(dt(name))
    back = lows.astype(ml)
    w = values(name)
    want = lowp.encode(w, ml_name)
    keep = ~np.isnan(w)
    assert same_bits(back[keep], want[keep]) and np.all(np.isnan(back[~keep].astype(np.float64)))
    exact_to = bool(np.all(np.isnan(v) | (got.astype(np.float64) == v)))
    exact_from = bool(np.all(np.isnan(w) | (back.astype(np.float64) == w)))
    assert np.can_cast(ml, dt(name)) == exact_to
    assert np.can_cast(dt(name), ml) == exact_from
    z = np.zeros(2, dt(name))
    z[0] = getattr(ml_dtypes, ml_name)(3.0)
    assert float(z[0]) == 3.0


ML_EXTRAS = ["float8_e3m4", "float8_e4m3b11fnuz", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]


@pytest.mark.parametrize("ml_name", [n for n in ML_EXTRAS if hasattr(ml_dtypes, n)])
@pytest.mark.parametrize("name", ALL)
def test_casts_with_ml_dtypes_without_a_lowp_dtype(ml_name, name):
    """ml_dtypes' floats that are lowp formats but have no lowp dtype cast both ways with
    every lowp type: each code as lowp.encode rounds its exact value (once, to nearest
    even); NaN into a type without NaN is a zero, as in ml_dtypes; safe exactly where
    every value converts exactly; element assignment works."""
    ml = np.dtype(getattr(ml_dtypes, ml_name))
    f = lowp.format(ml_name)
    src = np.arange(1 << f.bits, dtype=np.uint8).view(ml)
    v = src.astype(np.float64)
    got = src.astype(dt(name))
    want = lowp.encode(v, name)
    keep = ~np.isnan(v)
    assert same_bits(got[keep], want[keep]) and np.all(np.isnan(got[~keep].astype(np.float64)))
    lf = lowp.format(name)
    if lf.bits <= 16:
        lows = all_codes(name).view(dt(name))
    else:
        lows = np.random.default_rng(5).integers(0, 2**32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(dt(name))
    w = lows.astype(np.float64)
    back = lows.astype(ml).view(np.uint8)
    keep = ~np.isnan(w)
    assert np.array_equal(back[keep], lowp.encode(w[keep], f))
    nan_codes = back[~keep]
    if np.isnan(float(np.array([np.nan], np.float32).astype(ml)[0])):
        assert np.all(np.isnan(nan_codes.view(ml).astype(np.float64)))
    else:
        # A zero, of the sign ml_dtypes' own casts give that NaN's float32.
        want_codes = lows[~keep].astype(np.float32).astype(ml).view(np.uint8)
        assert np.array_equal(nan_codes, want_codes) and np.all(nan_codes.view(ml).astype(np.float64) == 0)
    exact_to = bool(np.all(np.isnan(v) | (got.astype(np.float64) == v)))
    exact_from = bool(np.all(np.isnan(w) | (back.view(ml).astype(np.float64) == w)))
    assert np.can_cast(ml, dt(name)) == exact_to
    assert np.can_cast(dt(name), ml) == exact_from
    z = np.zeros(2, dt(name))
    z[0] = getattr(ml_dtypes, ml_name)(1.5)
    assert float(z[0]) == 1.5
    assert float(np.array([1.5], dt(name)).astype(ml)[0]) == 1.5


@pytest.mark.parametrize("ml_name", ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
def test_sub_byte_casts_read_every_byte_as_ml_dtypes(ml_name):
    """A byte with bits set above a sub-byte code (made through a uint8 view) casts into
    lowp's types as ml_dtypes reads it, so x.astype(t) is x.astype(float64).astype(t)."""
    ml = np.dtype(getattr(ml_dtypes, ml_name))
    src = np.arange(256, dtype=np.uint8).view(ml)
    v = src.astype(np.float64)
    for name in ("bfloat16", "float8_e4m3", "posit16"):
        got = src.astype(dt(name)).astype(np.float64)
        np.testing.assert_array_equal(got, v.astype(dt(name)).astype(np.float64))
    mixed = (src + np.zeros(256, dt("bfloat16"))).astype(np.float64)
    np.testing.assert_array_equal(mixed, v.astype(dt("bfloat16")).astype(np.float64))


def test_mixed_ml_dtypes_promotion_does_not_depend_on_call_order():
    """A signature fixing an input to another type than the common one finds no loop
    (as numpy's own float32 + float64 with signature float32), before and after plain
    calls, which keep np.result_type's type."""
    ml = np.ones(3, ml_dtypes.bfloat16)
    for lo, ufuncs in ((np.ones(3, dt("bfloat16")), ((np.subtract, np.divmod), (np.multiply, np.fmax))),
                       (np.ones(3, dt("float8_e4m3fn")), ((np.add, np.minimum), (np.power, np.hypot)))):
        want = np.result_type(lo, ml)
        assert want.type is ml_dtypes.bfloat16
        for first_plain, group in zip((True, False), ufuncs):
            for ufunc in group:
                if first_plain:
                    ufunc(lo, ml)
                with pytest.raises(TypeError):
                    ufunc(lo, ml, signature=(type(lo.dtype), None) + (None,) * ufunc.nout)
                got = ufunc(lo, ml)
                assert all(g.dtype.type is want.type for g in (got if isinstance(got, tuple) else (got,)))


def test_failed_string_casts_release_their_errors():
    """A string that is no number raises on every cast, and each error is released (the
    failed parse's exception used to be queued for a later release that never came)."""
    import gc
    import tracemalloc

    bad = [np.array(["x" * 1000]), np.array([b"y" * 1000]), np.array(["1.5", "z" * 500])]

    def fail_all() -> None:
        for a in bad:
            for t in (lowp.bfloat16, lowp.posit32, lowp.float8_e4m3fn):
                with pytest.raises(ValueError):
                    a.astype(t)

    for _ in range(20):
        fail_all()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(300):  # 2700 failed casts: about 8 MB when each kept its error
            fail_all()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 1 << 20, grown


def test_quantized_arrays_pickle_with_every_protocol():
    import pickle

    q = lowp.quantize(np.array([[1.0, -2.0], [3.0, 4.5]], np.float32), "int8", axis=1, symmetric=False)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        r = pickle.loads(pickle.dumps(q, protocol=protocol))
        assert r.axis == q.axis and r.format == q.format
        np.testing.assert_array_equal(r.values, q.values)
        np.testing.assert_array_equal(r.dequantize(), q.dequantize())


@pytest.mark.parametrize("order", ["lowp_first", "ml_dtypes_first", "lowp_then_find_spec"])
def test_import_order(order):
    """Either import order links the two libraries' types, also when ml_dtypes is looked
    up (importlib.util.find_spec, a common "is it installed?" check) before its import."""
    first, second = ("lowp", "ml_dtypes") if order != "ml_dtypes_first" else ("ml_dtypes", "lowp")
    look = 'importlib.util.find_spec("ml_dtypes")' if order == "lowp_then_find_spec" else ""
    code = textwrap.dedent(f"""
        import importlib.util
        import numpy as np
        import {first}
        {look}
        import {second}
        import lowp, ml_dtypes
        assert np.dtype("bfloat16").type is ml_dtypes.bfloat16
        for n in {FLOATS!r}:
            c = np.arange(2 ** (8 * np.dtype(getattr(lowp, n)).itemsize), dtype=np.uint64).astype(
                f"u{{np.dtype(getattr(lowp, n)).itemsize}}")
            a = c.view(getattr(ml_dtypes, n)).astype(getattr(lowp, n))
            assert a.dtype.type is getattr(lowp, n)
            assert np.array_equal(a.view(c.dtype), c)
            b = a.astype(getattr(ml_dtypes, n))
            assert np.array_equal(b.view(c.dtype), c)
        # Mixed with ml_dtypes' types, ufuncs run in np.result_type's type (where that
        # was ml_dtypes' type they ran lowp's same-named one, or float32).
        names = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "posit8", "posit16", "posit32")
        ours = [getattr(lowp, n) for n in names]
        theirs = [getattr(ml_dtypes, n) for n in names[:6] + ("float8_e3m4", "float6_e2m3fn", "float4_e2m1fn")]
        for l in ours:
            for m in theirs:
                for x, y in ((l, m), (m, l)):
                    a, b = np.ones(3, x), np.full(3, 2, y)
                    want = np.result_type(a, b)
                    for got in (a + b, np.maximum(a, b), np.divmod(a, b)[1], a ** b):
                        assert got.dtype == want and got.dtype.type is want.type, (x, y, got.dtype, want)
                    assert np.array_equal((a * b).astype(np.float64), np.full(3, 2.0))
                    assert (a < b).all()
        # ml_dtypes' narrow ints beside an fp8 type: float32, as np.result_type says (numpy's
        # loop search ran float16's loops, and 57344 * 7 overflowed).
        for l in ours[1:6]:
            for m in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2):
                a, b = np.full(2, float(lowp.finfo(l).max), l), np.full(2, 1, m)
                b[0] = 7 if ml_dtypes.iinfo(m).max >= 7 else 1
                want = np.result_type(a, b)
                assert want == np.float32, (l, m, want)
                exact = a.astype(np.float64) * b.astype(np.float64)
                for x, y in ((a, b), (b, a)):
                    got = x * y
                    assert got.dtype == want and np.array_equal(got.astype(np.float64), exact), (l, m, got)
                    assert (x @ y).dtype == want and float(x @ y) == exact.sum()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_safe_casts_and_promotion():
    bf = dt("bfloat16")
    assert np.can_cast(bf, np.float32) and np.can_cast(bf, np.float64)
    assert not np.can_cast(np.float32, bf)
    assert np.can_cast(np.int8, bf) and np.can_cast(np.uint8, bf) and np.can_cast(np.bool_, bf)
    assert np.can_cast(dt("float8_e4m3fn"), np.float16) and np.can_cast(dt("float8_e4m3fn"), bf)
    assert not np.can_cast(bf, np.float16)
    assert np.can_cast(dt("posit16"), np.float64) and not np.can_cast(dt("posit32"), np.float32)
    assert np.result_type(bf, np.float32) == np.float32
    assert (np.ones(2, bf) + np.ones(2, np.float32)).dtype == np.float32


LADDER = [np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128, np.clongdouble]


@pytest.mark.parametrize("name", ALL)
def test_common_types_with_numpy_types(name):
    """``np.result_type`` (and so ``concatenate``, ``stack``, ``where``) of a lowp type
    and a numpy type is the one that holds the other (a safe cast), else the smallest
    numpy float or complex type both cast into safely, as numpy gives float32 for
    float16 with int16: never DTypePromotionError. Either argument order. float16 is
    never the answer (an fp8 type beside it gives float32, as in ml_dtypes)."""
    T = dt(name)
    for O in map(np.dtype, NUMPY_TYPES + [np.longdouble, np.clongdouble]):
        r = np.result_type(T, O)
        assert r == np.result_type(O, T), O
        assert np.can_cast(T, r) and np.can_cast(O, r), O
        if r not in (T, O):
            assert not np.can_cast(O, T) and (not np.can_cast(T, O) or O == np.float16)
            smaller = [c for c in LADDER[:LADDER.index(r.type)] if c is not np.float16]
            assert not any(np.can_cast(T, c) and np.can_cast(O, c) for c in smaller), (O, r)


def test_common_types_match_numpys_float16():
    bf, e4, e5, p16, p32 = (dt(n) for n in ("bfloat16", "float8_e4m3fn", "float8_e5m2", "posit16", "posit32"))
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    # numpy: float16 with int16 and with a float16 of another kind gives float32, int32 float64.
    assert np.result_type(np.float16, np.int16) == f32 and np.result_type(np.float16, np.int32) == f64
    assert np.result_type(bf, np.int16) == np.result_type(bf, np.float16) == f32
    assert np.result_type(bf, np.int32) == np.result_type(bf, np.uint64) == f64
    # float16 is never the answer: an fp8 type beside float16 or another fp8 type gives
    # float32, as in ml_dtypes (float16 overflows on e4m3 x e5m2 products).
    assert np.result_type(e4, np.int16) == f32 and np.result_type(e4, np.float16) == f32
    assert np.result_type(e5, np.float16) == f32 and np.result_type(np.float16, e5) == f32
    assert np.result_type(e4, e5) == f32 and np.result_type(bf, p16) == f32 and np.result_type(p32, np.float32) == f64
    assert np.result_type(bf, e5) == bf and np.result_type(bf, np.int8) == bf
    assert np.result_type(bf, np.complex64) == np.complex64 and np.result_type(p32, np.complex64) == np.complex128
    assert np.result_type(bf, object) == object
    with pytest.raises(TypeError):
        np.result_type(bf, np.dtype("U3"))
    # Python scalars: as the ufuncs resolve them (bfloat16 keeps its type).
    assert np.result_type(np.ones(2, bf), 1.5) == bf and np.result_type(bf, 2) == bf
    # (A float before it: numpy asks for the common type with float16, as for ml_dtypes 0.7.)
    assert np.result_type(1.5, np.ones(2, bf)) == f32
    assert np.result_type(e4, 1.5) == f32 and np.result_type(p16, 1.5) == f32 and np.result_type(p32, 1.5) == f64


def test_concatenate_stack_where_with_other_types():
    """The arrays numpy builds on a common type hold every value exactly."""
    x = np.array([1.5, -2.0, 0.00390625, 448.0], dt("bfloat16"))
    for other in (np.array([300, -7, 1, 32767], np.int16), np.array([0.1, 65504, -1e-5, 3], np.float16),
                  np.array([1.5, -2.0, 0.25, 448.0], dt("float8_e4m3fn")), np.array([2**30 + 1] * 4, np.int32),
                  np.array([1 / 3, 1e6, -1e-6, 7], dt("posit16"))):
        c = np.concatenate([x, other])
        want = np.concatenate([x.astype(np.float64), other.astype(np.float64)])
        assert c.dtype == np.result_type(x, other)
        np.testing.assert_array_equal(c.astype(np.float64), want)
        np.testing.assert_array_equal(np.stack([other, x]).astype(np.float64), np.stack([want[4:], want[:4]]))
        w = np.where([True, False, True, False], x, other)
        np.testing.assert_array_equal(w.astype(np.float64), np.where([True, False, True, False], want[:4], want[4:]))


@pytest.mark.parametrize("first", ["lowp", "ml_dtypes"])
def test_common_types_with_ml_dtypes_in_either_import_order(first):
    """Promotion between lowp and ml_dtypes types works whichever is imported first,
    including ml_dtypes types that lowp has no type for (bfloat16 holds float8_e3m4)."""
    code = textwrap.dedent(f"""
        import {first}
        import lowp, ml_dtypes, numpy as np
        for a, b, want in [(lowp.bfloat16, ml_dtypes.float8_e3m4, lowp.bfloat16), (lowp.posit16, ml_dtypes.float8_e3m4, np.float32),
                           (lowp.posit16, ml_dtypes.bfloat16, np.float32),
                           (lowp.float8_e4m3fn, ml_dtypes.float8_e5m2, np.float32), (lowp.bfloat16, ml_dtypes.float8_e4m3fn, lowp.bfloat16)]:
            for x, y in ((a, b), (b, a)):
                assert np.result_type(x, y) == np.dtype(want), (x, y, np.result_type(x, y))
                c = np.concatenate([np.array([1.5, -2], x), np.array([0.25, 3], y)])
                assert c.dtype == np.dtype(want) and c.astype(float).tolist() == [1.5, -2, 0.25, 3]
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"


def test_safe_casts_among_lowp_dtypes_are_the_exact_ones():
    """A cast between two lowp dtypes is safe exactly when every value of the one is a
    value of the other (NaN to a NaN), whatever their sizes: numpy alone would take any
    two of one size for equivalent types (float8_e4m3fn and float8_e5m2, bfloat16 and
    posit16), and compute a mixed product in the first operand's type."""
    small = [n for n in ALL if n != "posit32"]
    for src in small:
        v = values(src)
        for d in ALL:
            if d == src:
                continue
            back = lowp.decode(lowp.encode(v, lowp.format(d)), lowp.format(d), np.float64)
            exact = bool(np.all((back == v) | (np.isnan(back) & np.isnan(v))))
            assert np.can_cast(dt(src), dt(d), "safe") == exact, (src, d)
    a = np.array([1.0, 1.125], dt("float8_e4m3fn"))
    b = np.array([1024.0, 1.0], dt("float8_e5m2"))
    for x, y in ((a, b), (b, a)):
        s = x + y
        assert s.dtype == np.float32 and s.tolist() == [1025.0, 2.125]  # float32, as in ml_dtypes
        assert (x == y).tolist() == [False, False]
    assert (np.ones((1, 3), dt("float8_e4m3fn")) @ np.full((3, 1), 512.0, dt("float8_e5m2"))).tolist() == [[1536.0]]
    assert not (np.array([1.0], dt("bfloat16")) == np.array([1 + 2**-10], dt("posit16")))[0]
    # Every cast among them is "same_kind" (all are real numbers), so in-place operations
    # and ``out=`` across them round the result into the target as numpy's floats do.
    for src in ALL:
        for d in ALL:
            assert np.can_cast(dt(src), dt(d), "same_kind"), (src, d)
    x = np.array([1.0, 3.0], dt("float8_e5m2"))
    x += np.array([0.25, 40.0], dt("bfloat16"))
    assert x.dtype == dt("float8_e5m2") and x.tolist() == [1.25, 40.0]
    y = np.array([1.0, 2.0], dt("posit16"))
    z = np.zeros(2, dt("float8_e4m3fn"))
    np.multiply(y, y, out=z)
    assert z.tolist() == [1.0, 4.0]
    # Into numpy's floats "same_kind" too, into integers and bool not (as float32's).
    for src in ALL:
        for t in (np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128):
            assert np.can_cast(dt(src), t, "same_kind"), (src, t)
        for t in (np.int8, np.int64, np.uint16, np.bool_):
            assert not np.can_cast(dt(src), t, "same_kind"), (src, t)
    h = np.zeros(2, np.float16)
    np.add(y, y, out=h)
    assert h.tolist() == [2.0, 4.0]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero", "up", "down", "stochastic"])
def test_lowp_cast_returns_dtype(name, rounding):
    x = np.random.default_rng(5).standard_normal(1000)
    r = lowp.cast(x, getattr(lowp, name), rounding, seed=1)
    assert r.dtype == dt(name)
    assert same_bits(r, lowp.encode(x, lowp.format(name), rounding, seed=1))
    assert same_bits(lowp.cast(x, name if False else dt(name), rounding, seed=1), r)


# ------------------------------------------------------------------ overflow policy

@pytest.mark.parametrize("name", ALL)
def test_overflow_policy(name):
    f = lowp.format(name)
    x = np.array([f.max * 4, -f.max * 4, np.inf, -np.inf, np.nan], np.float64)
    got = x.astype(dt(name)).astype(np.float64)
    if name in POSITS:
        # Posit standard: saturate at maxpos; inf and NaN become NaR.
        assert got[0] == f.max and got[1] == -f.max
        assert np.all(np.isnan(got[2:]))
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            ref = x.astype(getattr(ml_dtypes, name)).astype(np.float64)
        assert np.array_equal(got, ref, equal_nan=True)


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("name", ALL)
def test_bad_input_raises(name):
    t = getattr(lowp, name)
    with pytest.raises(TypeError, match=name):
        np.array([object()], dtype=object).astype(t)
    with pytest.raises(TypeError):
        np.array([None, 1.0], dtype=t)
    with pytest.raises(ValueError, match="could not convert"):
        np.array(["1.5", "abc"], dtype=object).astype(t)
    with pytest.raises(ValueError):
        t("not a number")
    with pytest.raises(TypeError):
        t([1, None, 3])
    with pytest.raises(TypeError):
        t({})
    with pytest.raises(TypeError):
        t(1, 2)
    with pytest.raises(TypeError):
        t(1 + 2j)
    with pytest.raises((TypeError, np._core._exceptions._UFuncNoLoopError)):
        np.add(np.ones(2, t), np.array(["a", "b"]))
    with pytest.raises(TypeError):
        np.ones(2, t) + "x"
    with pytest.raises(TypeError):
        np.bitwise_and(np.ones(2, t), np.ones(2, t))
    with pytest.raises((ValueError, OverflowError)):
        int(t(float("nan")) if name not in POSITS else np.array([np.nan]).astype(t)[0])
    # Huge Python ints round as the huge finite numbers they are (no failure): floats
    # overflow as their mode says, posits saturate at maxpos (never NaR).
    big = float(t(10**400))
    if name in POSITS:
        assert big == lowp.finfo(name).max and float(t(-(10**400))) == -big
    else:
        assert big == float(np.array([1e308]).astype(t)[0]) or (np.isnan(big) and np.isnan(float(np.array([1e308]).astype(t)[0])))


# ------------------------------------------------------------------ leaks

def test_no_leaks():
    code = textwrap.dedent("""
        import resource, numpy as np, lowp
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * resource.getpagesize()
        types = [getattr(lowp, n) for n in %r]
        x = np.linspace(-3, 3, 16)
        def work(n):
            for i in range(n):
                t = types[i %% len(types)]
                a = x.astype(t)
                b = (a + a) * a
                c = np.sqrt(np.abs(b)).astype(np.float32)
                s = t(i * 0.5)
                r = repr(s) + str(float(s + s))
                d = a[3:9].astype(types[(i + 1) %% len(types)])
                e = a == a
        work(20000)
        before = rss()
        work(150000)  # ~7 array/scalar operations each: > 10^6 operations
        after = rss()
        print(before, after)
    """ % (ALL,))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    before, after = map(int, r.stdout.split())
    # 10^5 iterations, each creating ~10 arrays and scalars: a leak of even one
    # 16-byte object per iteration would add > 1.6 MB; allow 8 MB of allocator noise.
    assert after - before < 8 * 2**20, (before, after)


# ------------------------------------------------------------------ finfo

@pytest.mark.parametrize("name", ALL)
def test_finfo(name):
    t = getattr(lowp, name)
    fi = lowp.finfo(t)
    assert fi.dtype == dt(name) and fi.bits == 8 * dt(name).itemsize
    v = values(name)
    fin = v[np.isfinite(v)]
    assert fi.max == fin.max() and fi.min == fin.min()
    assert fi.smallest_subnormal == fin[fin > 0].min()
    # eps: the gap above 1; epsneg: the gap below 1.
    assert fi.eps == fin[fin > 1].min() - 1
    assert fi.epsneg == 1 - fin[fin < 1].max()
    assert lowp.finfo(lowp.format(name)).max == fi.max
    if name in FLOATS:
        m = ml_dtypes.finfo(getattr(ml_dtypes, name))
        for attr in ("max", "min", "eps", "epsneg", "tiny", "smallest_normal", "smallest_subnormal", "bits", "nmant",
                     "nexp", "maxexp", "minexp", "machep", "negep"):
            assert float(getattr(fi, attr)) == float(getattr(m, attr)), attr
        # precision/resolution (decimal digits) follow numpy's int(-log10(eps)); ml_dtypes rounds
        # differently for fp8 (1 digit for eps 0.125), so they are not compared.
    # The limits are scalars of the type, as numpy's and ml_dtypes' are.
    for attr in ("max", "min", "eps", "epsneg", "tiny", "smallest_normal", "smallest_subnormal", "resolution"):
        assert type(getattr(fi, attr)) is t, attr
    assert type(lowp.finfo(lowp.FloatFormat(5, 6)).max) is float
    # numpy's own finfo only takes numpy's inexact types.
    with pytest.raises(ValueError):
        np.finfo(t)


@pytest.mark.parametrize("name", POSITS)
def test_posit_cast_midpoints(name):
    """Every posit (a sample for posit32), the midpoints between neighbours (value and
    encoding midpoints alike) and their float64 neighbours, against the format engine."""
    c = np.sort(all_codes(name).astype(np.int64) ^ (1 << (8 * SIZE.get(name, 1) - 1)))  # by value order
    c = (c ^ (1 << (8 * SIZE.get(name, 1) - 1))).astype(udt(name))
    v = lowp.decode(c, lowp.format(name), np.float64)
    v = np.unique(v[np.isfinite(v)])
    mids = (v[:-1] + v[1:]) / 2
    geo = np.sqrt(np.abs(v[:-1] * v[1:])) * np.sign(v[:-1] + v[1:])
    x = np.concatenate([v, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), geo,
                        np.nextafter(geo, np.inf), np.nextafter(geo, -np.inf), v * 4, v / 4])
    for src in (x, x.astype(np.float32)):
        with np.errstate(over="ignore"):
            got = src.astype(dt(name))
        want = lowp.encode(src.astype(np.float64), lowp.format(name))
        assert same_bits(got, want)


@pytest.mark.parametrize("name", ["posit16", "posit32"])
@pytest.mark.parametrize("src", [np.float32, np.float64])
def test_posit_casts_at_midpoints_and_specials(name, src):
    """Casts into posits round once like the format engine, midpoints included, and raise no FP warnings."""
    fmt = lowp.format(name)
    rng = np.random.default_rng(17)
    codes = rng.integers(1, 2**fmt.bits - 1, 20000, dtype=np.uint64).astype(fmt.storage_dtype)
    v = lowp.decode(codes, fmt, np.float64)
    v = v[np.isfinite(v)]
    nxt = lowp.decode((codes[: v.size].astype(np.uint64) + 1).astype(fmt.storage_dtype), fmt, np.float64)
    mids = (v + nxt) / 2
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, 1e300, -1e-45, 2.0**-130])
    x = np.concatenate([v, mids[np.isfinite(mids)], np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), specials])
    with np.errstate(over="ignore"):
        x = x.astype(src)
    snan = np.array([0x7FF0000000000001], np.uint64).view(np.float64) if src == np.float64 else \
        np.array([0x7F800001], np.uint32).view(np.float32)
    x = np.concatenate([x, snan])
    with np.errstate(all="raise"):
        got = x.astype(dt(name))
    np.testing.assert_array_equal(got.view(fmt.storage_dtype), lowp.encode(x, fmt))


def _exact_code(v, name):
    """The correctly rounded (nearest even) code of the exact number v (int or Fraction)."""
    from fractions import Fraction

    from _reference import FloatSpec, posit_round, round_float

    f = lowp.format(name)
    if name.startswith("posit"):
        return posit_round(v, f.nbits, f.es)
    r = round_float(Fraction(v), FloatSpec.of(f), "nearest_even")
    return int(lowp.encode(np.array([r]), f)[0]) if not math.isnan(r) else None


def _double_rounding_ints(rng):
    """Integers beyond 2^53 whose nearest float64 is a tie of the narrow format but which
    are not: rounding through float64 goes the wrong way."""
    out = [2**53 + 1, -(2**53 + 1), 2**63 - 1, -(2**63), 2**64 - 1]
    for top in (54, 60, 62, 63):
        for p in (4, 8, 12, 16, 20, 28):  # a tie at p bits of precision
            tie = 2 ** (top - 1) + 2 ** (top - 1 - p)
            out += [tie + 1, tie - 1, -(tie + 1), tie]
    out += [int(x) for x in rng.integers(-(2**63), 2**63 - 1, 200, dtype=np.int64)]
    return [v for v in out if -(2**63) <= v < 2**64]


@pytest.mark.parametrize("name", ALL)
def test_wide_integers_round_once(name):
    """int64/uint64 arrays, Python ints, numpy integer scalars and long decimal strings
    round once to the nearest value (float64 holds 53 bits: going through it rounds twice)."""
    ints = _double_rounding_ints(np.random.default_rng(9))
    fits = name.startswith("posit") or name == "bfloat16"  # ranges that hold 2^64
    for v in ints:
        want = _exact_code(v, name)
        if not fits and want is None:
            continue
        got = [int(np.array(lowp.__dict__[name](v)).view(udt(name)))]
        if v < 2**63:
            got.append(int(np.array([v], np.int64).astype(dt(name)).view(udt(name))[0]))
            got.append(int(np.array(lowp.__dict__[name](np.int64(v))).view(udt(name))))
        if v >= 0:
            got.append(int(np.array([v], np.uint64).astype(dt(name)).view(udt(name))[0]))
        got.append(int(np.array(lowp.__dict__[name](str(v))).view(udt(name))))
        assert got == [want] * len(got), (v, got, want)
    # An array long enough for the vector paths, against the same reference.
    arr = np.array([v for v in ints if v < 2**63] * 50, np.int64)
    codes = arr.astype(dt(name)).view(udt(name))
    want = np.array([_exact_code(int(v), name) if (fits or _exact_code(int(v), name) is not None) else -1
                     for v in arr[: len(arr) // 50]] * 50)
    keep = want >= 0
    np.testing.assert_array_equal(codes[keep], want[keep].astype(codes.dtype))


@pytest.mark.parametrize("name", ["bfloat16", "posit16"])
def test_long_decimal_strings_round_once(name):
    """Decimal strings with more digits than float64 holds round once, by their exact value
    (reference: the nearest of all finite values, ties to the even code)."""
    from fractions import Fraction

    codes = np.arange(2**16, dtype=np.uint16)
    vals = lowp.decode(codes, name, np.float64)
    fin = np.isfinite(vals)
    order = np.argsort(vals[fin], kind="stable")
    sv, sc = vals[fin][order], codes[fin][order]
    keep = np.concatenate([[True], sv[1:] != sv[:-1]])  # -0 and +0: keep one
    sv, sc = sv[keep], sc[keep]

    def nearest(q):
        j = int(np.searchsorted(sv, float(q)))
        cand = [k for k in (j - 2, j - 1, j, j + 1) if 0 <= k < len(sv)]
        dist = {k: abs(Fraction(sv[k]) - q) for k in cand}
        best = min(dist.values())
        ks = [k for k in cand if dist[k] == best]
        return int(min(ks, key=lambda k: int(sc[k]) & 1)) if len(ks) > 1 else ks[0]

    for s in ["1.00390625000000000001", "1.00390625", "0.99999999999999999999", "-1.0039062499999999999999",
              "1.0039062500000000000000000000000000000001", "123456789.123456789123456789", "-0.000123456789123456789"]:
        got = int(np.array(lowp.__dict__[name](s)).view(np.uint16))
        k = nearest(Fraction(s))
        assert Fraction(float(vals[got])) == Fraction(sv[k]), (s, got, int(sc[k]))
    pos, neg = lowp.__dict__[name]("1e400"), lowp.__dict__[name]("-1e400")
    if name == "bfloat16":
        assert np.isposinf(float(pos)) and np.isneginf(float(neg))
        assert float(lowp.bfloat16("1e-400")) == 0.0
    else:  # posits saturate and never round a nonzero to zero
        assert float(pos) == lowp.finfo(name).max and float(neg) == -lowp.finfo(name).max
        assert float(lowp.__dict__[name]("1e-400")) == lowp.finfo(name).smallest_subnormal


# ------------------------------------------------------------------ byte order, errors, items, Python scalars

@pytest.mark.parametrize("name", ALL)
def test_byteswap_and_swapped_views(name):
    """``byteswap`` reverses each element's bytes (as for ml_dtypes and numpy's own
    types), and a byte-swapped view casts to the values it holds."""
    x = np.array([1.5, -2.0, 0.25, 3.0], dt(name))
    codes = x.view(udt(name))
    want = codes.byteswap()
    assert np.array_equal(x.byteswap().view(udt(name)), want)
    y = x.copy()
    y.byteswap(inplace=True)
    assert np.array_equal(y.view(udt(name)), want)
    swapped = x.byteswap().view(dt(name).newbyteorder())
    assert np.array_equal(swapped.astype(np.float64), x.astype(np.float64))
    assert np.array_equal(swapped[::-2].astype(np.float32), x[::-2].astype(np.float32))
    if name in ("bfloat16", "float8_e5m2", "float8_e4m3fn"):
        m = np.array([1.5, -2.0, 0.25, 3.0], getattr(ml_dtypes, name))
        assert np.array_equal(x.byteswap().view(udt(name)), m.byteswap().view(udt(name)))


def test_failed_conversions_release_their_errors():
    """A conversion that fails raises, and leaves no exception object behind (the
    intermediate errors of string and object parsing included)."""
    import gc

    def live():
        gc.collect()
        return sum(isinstance(o, BaseException) for o in gc.get_objects())

    bad = [lambda: lowp.bfloat16("abc"), lambda: lowp.posit16(None),
           lambda: np.array([None, 1.0], dtype=lowp.posit16), lambda: np.array(["x"], object).astype(lowp.float8_e5m2)]
    for f in bad:
        before = live()
        for _ in range(200):
            with pytest.raises((ValueError, TypeError)):
                f()
        assert live() - before < 5, f


@pytest.mark.parametrize("name", ALL)
def test_item_and_tolist_give_python_floats(name):
    """As numpy's floats and ml_dtypes': ``.item()`` and ``.tolist()`` give Python floats of
    the exact values; indexing keeps the lowp scalar."""
    import json

    x = np.array([1.5, -0.375, 2.0], dt(name))
    exact = x.astype(np.float64).tolist()
    assert all(type(v) is float for v in x.tolist()) and x.tolist() == exact
    assert type(x.item(1)) is float and x.item(1) == exact[1]
    assert type(x[1]) is getattr(lowp, name)
    assert json.loads(json.dumps(x.tolist())) == exact
    assert x.astype(object).tolist() == exact
    assert math.isnan(np.array([np.nan], dt(name)).item())


@pytest.mark.parametrize("name", ALL)
def test_python_scalars_keep_the_type(name):
    """A Python int operand keeps the array's (or scalar's) lowp type, as numpy's weak
    scalars do for float16 (NEP 50) and ml_dtypes for its types; so does a Python float
    beside bfloat16 (the other types: see the next tests)."""
    x = np.array([1.5, -3.0], dt(name))
    for r in (x * 2, 2 * x, x + 1, x - 1, x ** 2, x // 1):
        assert r.dtype == dt(name)
    assert np.array_equal((x * 2).astype(np.float64), np.array([3.0, -6.0]))
    s = getattr(lowp, name)(1.5)
    assert type(s + 1) is type(s) and type(2 * s) is type(s)
    assert np.result_type(dt(name), 2) == dt(name)
    f = x - 1.5
    if name == "bfloat16":
        assert f.dtype == dt(name) and np.array_equal(f.astype(np.float64), [0.0, -4.5])
        assert type(s + 1.0) is type(s) and type(0.5 * s) is type(s)
    else:
        assert f.dtype.kind == "f" and np.can_cast(dt(name), f.dtype) and np.array_equal(f, [0.0, -4.5])


@pytest.mark.parametrize("name", ALL)
def test_python_floats_beside_other_types_promote_as_numpy_does(name):
    """fp8 types and posits keep numpy's promotion of Python floats (float16 for the fp8
    types, which cast safely into it, so the float is rounded once, into float16; the
    smallest numpy float holding the posit otherwise): rounding the float into a type
    without infinities would turn np.inf into NaN, and the fp8 types would get the float
    through float16 (twice rounded). Comparisons and clips against infinities hold."""
    T = dt(name)
    x = np.array([-2.0, 0.5, 3.0], T)
    with np.errstate(all="raise"):
        assert (x < np.inf).all() and (x > -np.inf).all()
        np.testing.assert_array_equal(np.clip(x, 0.0, np.inf).astype(np.float64), [0.0, 0.5, 3.0])
        np.testing.assert_array_equal(np.minimum(x, np.inf).astype(np.float64), [-2.0, 0.5, 3.0])
    if name != "bfloat16":
        r = x * 0.5
        assert r.dtype.kind == "f" and np.can_cast(T, r.dtype)
        np.testing.assert_array_equal(r, x.astype(r.dtype) * r.dtype.type(0.5))


@pytest.mark.parametrize("name", ["bfloat16"])
def test_python_floats_are_rounded_into_the_type_once(name):
    """``x op 0.1`` is ``x op T(0.1)``: the Python float rounded once into x's type, then
    the type's own loop (so ``x == 0.1`` holds where x holds T(0.1), as for float16)."""
    T = dt(name)
    x = np.array([0.1, 1.0, -2.5, 3.0], T)
    c = np.array(0.1, T)
    with np.errstate(all="ignore"):
        for op in (np.add, np.subtract, np.multiply, np.divide, np.maximum, np.fmin, np.arctan2, np.power,
                   np.copysign, np.hypot, np.floor_divide, np.remainder):
            for r, want in ((op(x, 0.1), op(x, c)), (op(0.1, x), op(c, x))):
                assert r.dtype == T, op
                np.testing.assert_array_equal(r.view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(x == 0.1, x == c)
    assert (x == 0.1)[0] and (x < 0.5).tolist() == [True, False, True, False]
    assert np.maximum(x, np.nan).dtype == T and np.isnan(np.maximum(x, np.nan).astype(np.float64)).all()
    q, r = np.divmod(x, 2.0)
    assert q.dtype == r.dtype == T
    for clipped in (x.clip(0.0, 1.0), x.clip(0, 1.0), np.clip(x, 0.5, 2)):
        assert clipped.dtype == T
    y = x.copy()
    y *= 0.5
    np.testing.assert_array_equal(y.view(np.uint8), (x * c.dtype.type(0.5)).view(np.uint8))
    # numpy scalars and arrays are strong: they promote as before.
    assert (x * np.float64(0.5)).dtype == np.float64 and (x * np.ones(4)).dtype == np.float64
    # A signature or out= fixes the loop.
    assert np.add(x, 0.5, dtype=np.float32).dtype == np.float32
    assert np.add(x, 0.5, out=np.empty(4, np.float64)).dtype == np.float64


@pytest.mark.parametrize("name", ALL)
def test_scalar_equality_with_other_objects(name):
    """``==``/``!=`` with what is not a number give False/True (list membership and
    equality work); ordering against a string raises TypeError."""
    s = getattr(lowp, name)(1.5)
    assert (s == "a") is False and (s != "a") is True
    assert "a" not in [s] and [s] != ["a"] and s in [s]
    assert s == 1.5 and s != 2
    with pytest.raises(TypeError):
        s < "a"


@pytest.mark.parametrize("name", ALL)
def test_fabs_and_conjugate_keep_the_type(name):
    x = np.array([-1.5, 2.0, -0.25], dt(name))
    for r in (np.fabs(x), np.conjugate(x), x.conj(), x.conjugate()):
        assert r.dtype == dt(name)
    assert np.array_equal(np.fabs(x).astype(np.float64), np.abs(x.astype(np.float64)))
    assert same_bits(np.conjugate(x), x)


@pytest.mark.parametrize("name", ALL)
def test_printing_never_invents_digits(name):
    """Scalars print as numpy prints its floats: the shortest digits that give the value
    back, positional from 1e-4 to 1e16 unless zeros the value does not have would be
    appended (never 1000.0 for 1024), else scientific; integers below 1e6 that those
    digits would pad print exactly (1024 and 64 in float8_e5m2, not 1e+03 and 6e+01)."""
    from fractions import Fraction

    t = getattr(lowp, name)
    codes = all_codes(name)
    if codes.size > 70000:
        codes = codes[:: codes.size // 20000]
    for c, v in zip(codes, lowp.decode(codes, lowp.format(name), np.float64)):
        if not math.isfinite(v) or v == 0:
            continue
        r = repr(np.array([c]).astype(udt(name)).view(t)[0])
        assert float(np.array([float(r)], t)[0]) == v, (r, v)  # gives the value back
        if "e" not in r:
            # Positional: either exactly the value, or no zeros beyond the shortest digits.
            exact = Fraction(r) == Fraction(v)
            sig = r.replace("-", "").replace(".", "").strip("0")
            int_digits = len(r.replace("-", "").split(".")[0].lstrip("0"))
            assert exact or len(sig) >= int_digits, (r, v)
            assert 1e-4 <= abs(v) < 1e16
        else:
            mant, exp = r.split("e")
            assert exp[0] in "+-" and len(exp) >= 3
            assert not (v.is_integer() and abs(v) < 1e6 and Fraction(mant) * 10 ** int(exp) != v), (r, v)
    if name == "float8_e5m2":
        assert [repr(t(v)) for v in (48, 64, 96, 1024, 57344, -1024)] == ["48.0", "64.0", "96.0", "1024.0", "57344.0",
                                                                         "-1024.0"]
    if name == "bfloat16":
        assert (repr(t(1e10)), repr(t(65536)), repr(t(0.1))) == ("1e+10", "65536.0", "0.1")


def test_complex_into_lowp_is_not_same_kind():
    """As into numpy's floats: dropping an imaginary part is an unsafe cast."""
    for name in ALL:
        for c in (np.complex64, np.complex128, np.clongdouble):
            assert not np.can_cast(c, dt(name), "same_kind"), (name, c)
        assert np.can_cast(np.float64, dt(name), "same_kind") and np.can_cast(np.int64, dt(name), "same_kind")
    x = np.zeros(2, lowp.bfloat16)
    with pytest.raises(TypeError):
        x += np.array([1 + 1j, 2], np.complex64)


def test_subclasses_of_the_scalar_types_free_their_memory():
    """A Python subclass is garbage-collected: its instances are freed by its own
    tp_free (the memory starts before the object); many of them must not crash."""
    code = textwrap.dedent("""
        import lowp, numpy as np
        for name in %r:
            S = type("S", (getattr(lowp, name),), {})
            for _ in range(3):
                xs = [S(1.5) for _ in range(50000)]
                assert type(xs[0]) is S and float(xs[-1] + S(1)) == 2.5
                del xs
        print("ok")
    """) % (ALL,)
    r = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


@pytest.mark.parametrize("name", ["bfloat16", "posit16", "posit32"])
def test_non_native_byte_order_items(name):
    """Arrays of the swapped byte order give and take their values through item(),
    tolist(), object casts, element assignment, fill and construction."""
    be = dt(name).newbyteorder(">")
    vals = [1.5, -2.0, 3.0]
    b = np.array(vals, np.float32).astype(be)
    assert b.tolist() == vals and b.item(0) == 1.5 and list(b.astype(object)) == vals
    assert float(b[1]) == -2.0
    c = b.copy()
    c[0] = 5.0
    assert c.tolist() == [5.0, -2.0, 3.0] and c.astype(np.float32).tolist() == [5.0, -2.0, 3.0]
    c.fill(2.0)
    assert c.tolist() == [2.0, 2.0, 2.0]
    assert np.array([1.5, 2.0], dtype=be).tolist() == [1.5, 2.0]
    assert np.array_equal(b.byteswap().view(be.newbyteorder("=")).view(udt(name)),
                          np.array(vals, np.float32).astype(dt(name)).view(udt(name)))


@pytest.mark.parametrize("name", ALL)
def test_reductions_round_once_per_inner_loop(name):
    """np.sum/np.add.reduce (and so mean, std) sum an inner loop in float64 and round once,
    as numpy's float16 loops do in float32: a long sum does not stall where one add of 1
    no longer changes the running total."""
    t = dt(name)
    top = lowp.finfo(name).max
    n = 1024 if top > 1024 else 64  # representable: the mean is exactly 1
    ones = np.ones(n, t)
    assert float(ones.sum()) == float(np.array([n], np.float64).astype(t)[0])
    assert float(ones.mean()) == 1.0 and float(ones.std()) == 0.0
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(3000) * 4).astype(t)
    exact = math.fsum(x.astype(np.float64))  # exact: few bits over a narrow range
    assert as_bits(np.add.reduce(x)) == as_bits(np.array([exact]).astype(t)[0])
    # prod and divide reductions the same way; posits saturate instead of overflowing.
    y = np.full(40, 3.0, t)
    with np.errstate(over="ignore"):
        p = float(np.multiply.reduce(y))
    want = float(np.array([3.0**40]).astype(t)[0])
    assert p == want or (math.isnan(p) and math.isnan(want))
    if name.startswith("posit"):
        big = np.full(20, top, t)
        with np.errstate(all="raise"):
            assert float(np.multiply.reduce(big)) == top  # float64 overflows: maxpos, nothing reported
            assert float(np.divide.reduce(np.concatenate([np.ones(1, t), big]))) == lowp.finfo(name).smallest_subnormal
    else:
        with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
            np.full(n, top, t).sum()
    z = x.copy()
    z[7] = np.nan
    assert math.isnan(float(z.sum()))


def as_bits(s):
    return np.asarray(s).view(f"u{np.asarray(s).dtype.itemsize}").item()


@pytest.mark.parametrize("name", ALL)
def test_scalar_protocol(name):
    """NaN hashes stay put (sets find them); a 0-d array gives a scalar; float's round,
    as_integer_ratio and is_integer; type codes are none of numpy's; 1-byte types have
    no byte order."""
    t = getattr(lowp, name)
    n = t("nan")
    s = {n}
    h = hash(n)
    junk = [float(i) + 0.5 for i in range(10)]
    del junk[3]
    assert hash(n) == h and n in s
    assert hash(t(1.5)) == hash(1.5)
    z = t(np.array(2.5))
    assert type(z) is t and float(z) == 2.5
    assert isinstance(t(np.array([2.5])), np.ndarray)
    assert round(t(2.5)) == 2 and type(round(t(2.5))) is int
    assert type(round(t(2.75), 1)) is t and float(round(t(2.75), 1)) == float(t(2.8))
    assert t(1.5).as_integer_ratio() == (3, 2) and t(3).is_integer() and not t(1.5).is_integer()
    with pytest.raises(ValueError):
        round(n)
    assert np.dtype(t).char not in np.typecodes["All"]
    assert np.dtype(t).byteorder == ("|" if np.dtype(t).itemsize == 1 else "=")
    x = np.zeros(2, t)
    for seq in (np.array([2.5]), [2.5], (2.5,)):
        with pytest.raises(ValueError, match="sequence"):
            x[0] = seq
    # As np.float16([1, 2]): a list or tuple constructs an array.
    assert t([1, 2.5]).dtype == np.dtype(t) and t((1, 2.5)).tolist() == [1.0, 2.5]
    x[1] = np.array(2.5)
    assert x.tolist() == [0.0, 2.5]


@pytest.mark.parametrize("name", ALL)
def test_pickling_other_byte_order_leaves_the_dtype_alone(name):
    """numpy's own reduction of a legacy dtype sets the pickled byte order on the shared
    dtype instance; lowp's rebuilds a new one: pickles and deep copies of arrays of
    either byte order give their values back and every later array stays native."""
    import copy

    d = dt(name)
    before = d.byteorder
    be = d.newbyteorder(">")
    a = np.array([1.5, -2.0], np.float64).astype(be)
    for back in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a), pickle.loads(pickle.dumps(be))):
        assert dt(name).byteorder == before and np.dtype(getattr(lowp, name)).isnative
        if isinstance(back, np.ndarray):
            assert back.tolist() == [1.5, -2.0]
        else:
            assert back == be
    assert pickle.loads(pickle.dumps(d)) is d
    assert np.array([1.5], np.float64).astype(d).view(udt(name))[0] == lowp.encode(np.array([1.5]), lowp.format(name))[0]


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit16", "float8_e5m2fnuz"])
def test_strings_past_float64s_range_parse_by_their_side_of_zero(name):
    """Strings whose exponents float64 cannot hold: overflow and underflow as the type
    does for values past its range (posits: maxpos/minpos, never 0 from a nonzero),
    decided without expanding the exponent."""
    T = getattr(lowp, name)
    f = lowp.format(name)
    posit = isinstance(f, lowp.PositFormat)
    big, tiny = float(T("1e400")), float(T("1e-400"))
    for s, want in (("1e99999999", big), ("-1e99999999", -big if not math.isnan(big) else big),
                    ("1e-99999999", tiny), ("-1e-99999999", -tiny), ("0e-99999999", 0.0)):
        got = float(T(s))
        assert (math.isnan(got) and math.isnan(want)) or got == want, (s, got, want)
    assert tiny == (float(f.min_subnormal) if posit else 0.0)
    want_big = float(f.max) if posit else float(np.array([1e300]).astype(dt(name)).astype(np.float64)[0])
    assert big == want_big or (math.isnan(big) and math.isnan(want_big))
    if not posit and f.nan != "fnuz":
        assert np.signbit(float(T("-1e-99999999")))
    arr = np.array(["1e99999999", "-1e-99999999"], dtype=dt(name))
    assert arr.dtype == dt(name)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit8", "posit16", "posit32"])
def test_strings_past_decimals_exponent_range_parse_by_their_side_of_zero(name):
    """Exponents that even Decimal refuses (past 10**18): still minpos/maxpos for
    posits (never 0 or NaR from a nonzero number), 0 and overflow for floats; a
    zero's digits give a zero."""
    T = getattr(lowp, name)
    big, tiny = float(T("1e400")), float(T("1e-400"))
    cases = (("1e-9223372036854775807", tiny), ("-1E-99999999999999999999", -tiny),
             ("1e1000000000000000000", big), ("-2.5e99999999999999999999", -big if not math.isnan(big) else big),
             ("0.000e-99999999999999999999", 0.0), ("-0e99999999999999999999", 0.0))
    for s, want in cases:
        got = float(T(s))
        assert (math.isnan(got) and math.isnan(want)) or got == want, (s, got, want)
    arr = np.array([c[0] for c in cases]).astype(dt(name)).astype(np.float64)
    np.testing.assert_array_equal(arr, [c[1] for c in cases])


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "posit8", "posit16", "posit32"])
def test_casts_from_float64_below_float32s_range_raise_no_underflow(name):
    """A float64 below float32's normals casts with no floating-point flag from an
    internal narrowing (the posits' results are nonzero; none of these casts reports
    underflow from a float32 source either), rounded as lowp.round rounds it."""
    x = np.array([1e-30, 1e-40, 1e-300, -5e-324, 3e-39])
    with np.errstate(all="raise"):
        got = x.astype(dt(name)).astype(np.float64)
    np.testing.assert_array_equal(got, lowp.round(x, lowp.format(name)))
    if name.startswith("posit"):
        assert (got != 0).all()


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "posit8"])
def test_fractions_and_decimals_round_once(name):
    """A Decimal or Fraction just past a midpoint: its exact value decides (through a
    float64 it would land on the midpoint and round to even)."""
    from decimal import Decimal
    from fractions import Fraction
    T = getattr(lowp, name)
    f = lowp.format(name)
    one_up = float(lowp.nextafter(1.0, 2.0, f))
    mid = Fraction(1) + (Fraction(one_up) - 1) / 2
    just_above = mid + Fraction(1, 2**70)
    assert float(just_above) == float(mid)  # float64 cannot tell them apart
    assert float(T(just_above)) == one_up
    assert float(T(Decimal(just_above.numerator) / Decimal(just_above.denominator))) in (one_up,)
    assert float(T(mid)) == float(T(float(mid)))
    objs = np.array([just_above, Decimal(repr(float(mid)) + "0" * 40 + "1")], dtype=object)
    np.testing.assert_array_equal(objs.astype(dt(name)).astype(np.float64), [one_up, one_up])
    assert float(T(Decimal("1e-999999"))) == (float(f.min_subnormal) if isinstance(f, lowp.PositFormat) else 0.0)


@pytest.mark.parametrize("op", [np.add, np.subtract, np.multiply, np.divide])
def test_bfloat16_arithmetic_with_a_scalar_matches_the_elementwise_loop(op):
    """A Python float or a 0-d array beside a bfloat16 array (stride 0, in blocks of
    copies through the vectorized loop) gives the bits of the same op on a full array,
    across block edges, in both operand orders; comparisons likewise."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(10_001) * 2.0 ** rng.integers(-20, 20, 10_001)).astype(np.float32).astype(lowp.bfloat16)
    x[::97] = np.nan
    for v in (0.1, -3.0, 1e-30, 0.0):
        full = np.full_like(x, v)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(op(x, v).view(np.uint16), op(x, full).view(np.uint16))
            np.testing.assert_array_equal(op(v, x).view(np.uint16), op(full, x).view(np.uint16))
            np.testing.assert_array_equal(op(x[::-1], np.array(v, lowp.bfloat16)).view(np.uint16),
                                          op(x[::-1], full).view(np.uint16))
    f = x.astype(np.float32)
    with np.errstate(all="raise"):  # quiet comparisons: NaN raises nothing
        for rel in (np.equal, np.less, np.greater_equal, np.not_equal):
            np.testing.assert_array_equal(rel(x, 0.5), rel(f, np.float32(lowp.bfloat16(0.5))))
            np.testing.assert_array_equal(rel(x, x[::-1]), rel(f, f[::-1]))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit16"])
def test_complex_casts_warn(name, monkeypatch):
    """complex -> lowp drops the imaginary part with numpy's ComplexWarning, in astype and
    inside a ufunc's output cast; where warnings are errors the cast still completes and the
    warning goes to sys.unraisablehook (numpy does not check these casts for errors)."""
    import warnings

    T = dt(name)
    x = np.array([1.5 + 2j, -3 - 1j, 0.25j])
    want = np.array([1.5, -3.0, 0.0])
    for c in (x, x.astype(np.complex64), x.astype(np.clongdouble)):
        with pytest.warns(np.exceptions.ComplexWarning, match="imaginary"):
            np.testing.assert_array_equal(c.astype(T).astype(np.float64), want)
    out = np.empty(3, T)
    with pytest.warns(np.exceptions.ComplexWarning):
        np.add(x, x, out=out, casting="unsafe")
    np.testing.assert_array_equal(out.astype(np.float64), 2 * want)
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_type))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = x.astype(T)
        z = np.ones(3).astype(T)  # (no complex: no warning)
    assert seen == [np.exceptions.ComplexWarning]
    np.testing.assert_array_equal(y.astype(np.float64), want)
    assert z.dtype == T


@pytest.mark.parametrize("name", ALL)
def test_numpy_testing_compares_nans_as_for_its_floats(name):
    """The dtypes are numeric to numpy (``type(dtype)._is_numeric``), so its testing
    functions take NaNs in the same places as equal, as for float16."""
    T = dt(name)
    assert type(T)._is_numeric
    a = np.array([1.0, np.nan, -2.0], T)
    np.testing.assert_array_equal(a, a.copy())
    np.testing.assert_equal(a, a.copy())
    np.testing.assert_array_almost_equal(a, a.copy())
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(a, np.array([1.0, 1.0, -2.0], T))


@pytest.mark.parametrize("name", ALL)
def test_fractions_past_float64_range(name):
    """A Fraction past float64's range converts as an int that large does: an infinity,
    NaN (formats without infinities) or the largest posit, with its sign."""
    from fractions import Fraction

    T = getattr(lowp, name)
    for sign in (1, -1):
        big = Fraction(sign * 10**400, 3)
        assert same_bits(np.array([T(big)]), np.array([T(sign * 10**400)]))
        a = np.zeros(1, T)
        a[0] = big
        assert same_bits(a, np.array([T(sign * 10**400)]))
        tiny = T(Fraction(sign, 10**400))
        assert float(tiny) == 0.0 or abs(float(tiny)) == float(lowp.format(name).min_subnormal)


@pytest.mark.parametrize("name", ALL)
def test_string_casts(name):
    """Strings (str_ and bytes_) cast into the types as the scalar type parses them (the
    decimal's exact value rounded once), so loadtxt/genfromtxt/full take them; values cast
    to strings of the shortest digits that give them back. numpy sizes an unsized string
    target of a user dtype at one character: astype(str) raises, naming the size to ask."""
    import io

    T = dt(name)
    s = ["1.5", " -2 ", "0.1", "1e-3", "3.0000001", "1e9999", "-1e9999", "nan", "1e-9999"]
    want = np.array([getattr(lowp, name)(v) for v in s], T)
    for arr in (np.array(s), np.array([v.encode() for v in s])):
        assert same_bits(arr.astype(T), want)
    assert same_bits(np.full(3, "0.1", dtype=T), np.array([getattr(lowp, name)("0.1")] * 3, T))
    got = np.loadtxt(io.StringIO("1.5 0.1\n-2 1e-3"), dtype=T)
    assert same_bits(got, np.array([[1.5, 0.1], [-2, 1e-3]]).astype(T))
    with pytest.raises(ValueError, match="abc"):
        np.array(["1", "abc"]).astype(T)
    codes = all_codes(name)
    x = codes.view(T)
    back = x.astype("U16").astype(T)
    nan = np.isnan(x.astype(np.float64))
    assert same_bits(back[~nan], x[~nan]) and np.isnan(back[nan].astype(np.float64)).all()
    y = x[~nan][:1000]
    assert same_bits(y.astype("S16").astype(T), y)
    assert np.array([1.5], T).astype("U16")[0] == "1.5"
    with pytest.raises(ValueError, match="U16"):
        np.array([1.5], T).astype(str)


def test_scalar_constructors_refuse_what_would_crash_and_prefer_float():
    """An object array holding itself raises RecursionError (it recursed until the stack
    overflowed); a subclass whose first base is not a lowp type raises TypeError when
    instantiated (numpy read its instances as object scalars: a segfault); 0-d arrays
    nested deeply but finitely still convert; integers convert exactly, int-like objects
    with __float__ too."""
    a = np.empty((), dtype=object)
    a[()] = a
    for t in (lowp.bfloat16, lowp.posit32, lowp.float8_e4m3fn):
        with pytest.raises(RecursionError):
            t(a)
    b = np.array(2.5)
    for _ in range(40):
        c = np.empty((), dtype=object)
        c[()] = b
        b = c
    assert float(lowp.bfloat16(b)) == 2.5

    class Mixin:
        pass

    class Bad(Mixin, lowp.bfloat16):
        pass

    with pytest.raises(TypeError, match="first base"):
        Bad(1.5)

    class Good(lowp.bfloat16):
        pass

    class Deeper(Good, Mixin):
        pass

    x = Deeper(3.5)
    assert np.array([x]).dtype == lowp.bfloat16 and float(x + Deeper(1)) == 4.5 and x.item() == 3.5

    class OnlyIndex:
        def __index__(self):
            return 2**60 + 2**52 + 1

    class IntLike(OnlyIndex):  # as gmpy2's mpz or sympy's Integer: both methods
        def __float__(self):
            return float(2**60 + 2**52 + 1)

    # Exact integers: 2**60 + 2**52 + 1 is just above a bfloat16 tie, float64 would round it onto it.
    for v in (OnlyIndex(), IntLike(), np.int64(2**60 + 2**52 + 1), 2**60 + 2**52 + 1):
        assert float(lowp.bfloat16(v)) == 2.0**60 + 2**53


@pytest.mark.parametrize("name", ALL)
def test_comparisons_with_python_ints_by_value(name):
    """Python ints beyond a type's range compare by value, as numpy's own types compare
    them (its floats through infinity). In the types without infinities the int used to
    be stored in the type: NaN in the fn and fnuz fp8 types (``x < 1000`` False), the
    largest posit in posits (``posit16(2**56) == 2**60`` True, with unequal hashes). Those
    types now compare every int by value (in float64); the types with infinities store it
    in the type first, as numpy's float16 does."""
    t = getattr(lowp, name)
    top = float(lowp.finfo(t).max)
    big = 2 * int(top) + 1
    a = np.array([1.0, -2.0, top], t)
    np.testing.assert_array_equal(a < big, [True, True, True])
    np.testing.assert_array_equal(a > -big, [True, True, True])
    np.testing.assert_array_equal(a == big, [False, False, False])
    np.testing.assert_array_equal(big != a, [True, True, True])
    np.testing.assert_array_equal(big >= a, [True, True, True])
    x = a[2]
    assert x < big and x > -big and not x == big and x != big and x == int(top)
    assert sorted([big, x, -big]) == [-big, x, big]
    np.testing.assert_array_equal(a == 1, [True, False, False])
    np.testing.assert_array_equal(-2 < a, [True, False, True])
    # In range: by value where there is no infinity, else rounded into the type first.
    n = np.array([96.0], t)
    if float(n[0]) == 96.0:
        by_value = not getattr(lowp.format(name), "inf", False)
        assert bool((n == 97)[0]) == (not by_value and float(np.array([97.0]).astype(t)[0]) == 96.0)
    if getattr(lowp.format(name), "inf", False):
        np.testing.assert_array_equal(a < 10**400, [True, True, True])  # (the int becomes infinity)
    else:
        with pytest.raises(OverflowError):
            a < 10**400  # (through float64, as numpy's float64)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit16", "posit32"])
def test_scalars_from_numpy_complex_scalars(name):
    """Every numpy complex scalar gives its real part with numpy's ComplexWarning, as
    numpy's float types take them (np.complex128 is also a Python complex, which was
    refused); a clongdouble's real part rounds once. Python's complex stays refused."""
    T = getattr(lowp, name)
    for c in (np.complex64(1.5 - 2j), np.complex128(1.5 + 1j), np.clongdouble(1.5 + 3j)):
        with pytest.warns(np.exceptions.ComplexWarning, match="imaginary"):
            assert float(T(c)) == 1.5
    if X87 and name == "bfloat16":
        r = np.longdouble(1) + np.longdouble(2) ** -8 + np.longdouble(2) ** -60  # just above a tie
        with pytest.warns(np.exceptions.ComplexWarning):
            assert float(T(np.clongdouble(r))) == float(T(r)) == 1 + 2**-7
    with pytest.raises(TypeError, match="complex"):
        T(1.5 + 0j)


@pytest.mark.parametrize("name", ALL)
def test_floor_divide_and_divmod_keep_nan_quiet(name):
    """A NaN operand gives NaN without the "invalid" flag, as for numpy's floats (the
    vectorized ordered comparisons raised it)."""
    T = getattr(lowp, name)
    one, nan = T(1.0), T(float("nan"))
    a = np.array([np.nan] * 37 + [1.0] * 37, T)
    b = np.array([1.0] * 37 + [np.nan] * 37, T)
    with np.errstate(all="raise"):
        for x, y in ((nan, one), (one, nan), (nan, nan)):
            assert all(math.isnan(float(v)) for v in divmod(x, y))
            assert math.isnan(float(x // y)) and math.isnan(float(x % y))
        for r in (*np.divmod(a, b), a // b, a % b, np.floor_divide(b, a)):
            assert np.isnan(r.astype(np.float64)).all()


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit16"])
def test_format_without_a_type_uses_the_shortest_digits(name):
    """Format specs without a presentation type or precision pad the repr's digits, as
    Python's floats do (they printed the float64 value's digits: bfloat16(0.1) as
    0.10009765625); typed specs and precisions format the value."""
    T = getattr(lowp, name)
    y = T(0.1)
    s = repr(y)
    assert f"{y}" == s and f"{y:>12}" == s.rjust(12) and f"{y:*^12}" == s.center(12, "*")
    assert f"{y:+}" == "+" + s and f"{y:.<12}" == s.ljust(12, ".") and f"{-y:,}" == "-" + s
    assert f"{y:.3f}" == format(float(y), ".3f") and f"{y:.12}" == format(float(y), ".12")
    assert f"{y:e}" == format(float(y), "e")
    for v in (0.0, float("nan"), 3.0, 64.0, 448.0, 1024.0, 57344.0, 1e10, -0.1):
        x = T(v)
        assert f"{x:>16}" == repr(x).rjust(16) or "e" in repr(x)  # (Python writes 1e10 out)
        if not math.isnan(float(x)):
            assert float(f"{x:,}".replace(",", "")) == float(f"{x:+}") == float(repr(x))
    assert f"{T(448.0):,}" == "448.0" and f"{T(64.0):+}" == "+64.0"
    assert f"{y:z}" == s and f"{y:z>12}" == s.rjust(12, "z")


def test_fp8_pairs_and_python_floats_compute_in_float32():
    """An fp8 type beside another fp8 type, float16 or a Python float runs float32's
    loops, ``@`` and the vector products included, as ml_dtypes' arrays do: float16's
    overflowed on an e4m3fn x e5m2 product (448 * 192) and rounded the sum of
    ``[1, 1/64] @ [1024, 1]``."""
    a = np.array([[448.0, 1.0]], lowp.float8_e4m3fn)
    b = np.array([[200.0], [1.0]], lowp.float8_e5m2)
    for r in (a @ b, np.matmul(a, b), np.dot(a, b), a @ b.astype(np.float16), b.T @ a.T):
        assert r.dtype == np.float32 and r.tolist() == [[86017.0]]
    assert np.vecdot(a[0], b[:, 0]).dtype == np.float32 and float(np.vecdot(a[0], b[:, 0])) == 86017.0
    c = np.array([[1.0, 0.015625]], lowp.float8_e4m3fn) @ np.array([[1024.0], [1.0]], lowp.float8_e5m2)
    assert c.tolist() == [[1024.015625]]
    p = a * b.T
    assert p.dtype == np.float32 and p.tolist() == [[86016.0, 1.0]]  # (200 is 192 in e5m2)
    for t in (lowp.float8_e4m3fn, lowp.float8_e5m2, lowp.float8_e4m3fnuz):
        x = np.array([1.5, 3.0], t)
        for r in (x * 0.5, 0.5 * x, np.clip(x, 0.0, 2.0), np.maximum(x, 0.25), np.where(x > 2, x, 0.1)):
            assert r.dtype == np.float32
        assert np.result_type(x, 0.5) == np.float32
        assert (x * 2).dtype == t  # (Python ints keep the type)
    # np.clip of such mixes too (its third operand anything).
    e4, e5, h = a[0], b[:, 0], np.array([1.0, 1.0], np.float16)
    for r in (np.clip(e4, h, e5), np.clip(e4, 0.0, e5), np.clip(e4, 0, e5), np.clip(h, e4, 1), np.clip(e4, h, 2)):
        assert r.dtype == np.float32
    assert np.clip(e4, h, e5).tolist() == [192.0, 1.0] and np.clip(e4, 0, 2).dtype == lowp.float8_e4m3fn
    # bfloat16 keeps its type beside Python floats; beside fp8 types it holds them.
    bf = np.array([1.0], lowp.bfloat16)
    assert (bf * 0.5).dtype == lowp.bfloat16 and (bf @ np.ones((1, 1), lowp.float8_e5m2)).dtype == lowp.bfloat16
