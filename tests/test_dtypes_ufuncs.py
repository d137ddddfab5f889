"""Ufuncs on the lowp dtypes: against ml_dtypes (bf16/fp8), softposit (posits) and float64 references."""

from __future__ import annotations

import ctypes
import glob
import math
import os
import shutil
import subprocess
import sysconfig

import ml_dtypes
import numpy as np
import pytest

import lowp

FLOATS = ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz"]
FP8 = FLOATS[1:]
POSITS = ["posit8", "posit16", "posit32"]
ALL = FLOATS + POSITS
BITS = {"bfloat16": 16, "posit16": 16, "posit32": 32}


def bits(name):
    return BITS.get(name, 8)


def udt(name):
    return np.dtype(f"u{bits(name) // 8}")


def dt(name):
    return np.dtype(getattr(lowp, name))


def as_codes(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def ref_round(x, name):
    """float64 results rounded once into the format (the correctly rounded result
    wherever the float64 function is itself within half an ulp of float64)."""
    return lowp.encode(np.asarray(x, np.float64), lowp.format(name))


def posit_range(name, r, finite, nonzero):
    """The reference of a posit result whose exact value is finite (``finite``) but beyond
    float64's range: float64's largest of its sign (posits saturate at maxpos, never NaR),
    and for a nonzero exact value (``nonzero``) below it, float64's smallest (minpos,
    never zero)."""
    if not name.startswith("posit"):
        return r
    r = np.where(finite & np.isinf(r), np.copysign(np.finfo(np.float64).max, r), r)
    return np.where(finite & nonzero & (r == 0), np.copysign(5e-324, r), r)


def pairs(name, n=10**6, seed=0):
    """Every pair for 8-bit formats; n random pairs (half of them close in magnitude) otherwise."""
    if bits(name) == 8:
        c = np.arange(256, dtype=np.uint8)
        return np.repeat(c, 256), np.tile(c, 256)
    rng = np.random.default_rng(seed)
    u = udt(name)
    top = 2 ** bits(name)
    a = rng.integers(0, top, n, dtype=np.uint64)
    b = rng.integers(0, top, n, dtype=np.uint64)
    # Close pairs: cancellation and carries in + and -, near-ties in * and /.
    near = a[: n // 2] + rng.integers(-(2 ** (bits(name) // 2)), 2 ** (bits(name) // 2), n // 2)
    b[: n // 2] = near.astype(np.int64).astype(np.uint64) % top
    return a.astype(u), b.astype(u)


def equal_codes(got, want, vals_got, vals_want):
    """Same encodings, where NaN only needs to be NaN on both sides."""
    same = as_codes(got) == as_codes(want)
    both_nan = np.isnan(vals_got) & np.isnan(vals_want)
    return same | both_nan


BINARY_VS_ML = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "fmax", "fmin", "nextafter"]


@pytest.mark.parametrize("name", FLOATS)
@pytest.mark.parametrize("op", BINARY_VS_ML)
def test_binary_matches_ml_dtypes(name, op):
    a, b = pairs(name)
    f = getattr(np, op)
    with np.errstate(all="ignore"):
        got = f(a.view(dt(name)), b.view(dt(name)))
        want = f(a.view(getattr(ml_dtypes, name)), b.view(getattr(ml_dtypes, name)))
        gv = got.astype(np.float64)
        wv = lowp.decode(as_codes(want), name, np.float64)
    assert got.dtype == dt(name)
    ok = equal_codes(got, want, gv, wv)
    assert ok.all(), (op, a[~ok][:5], b[~ok][:5], as_codes(got)[~ok][:5], as_codes(want)[~ok][:5])


BINARY_VS_F64 = ["add", "subtract", "multiply", "divide", "floor_divide", "remainder", "fmod", "power", "copysign",
                 "arctan2", "hypot", "maximum", "minimum", "fmax", "fmin", "heaviside", "logaddexp", "logaddexp2"]


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("op", BINARY_VS_F64)
def test_binary_correctly_rounded(name, op):
    a, b = pairs(name, n=2 * 10**5, seed=1)
    f = getattr(np, op)
    with np.errstate(all="ignore"):
        got = f(a.view(dt(name)), b.view(dt(name)))
        x = lowp.decode(a, name, np.float64)
        y = lowp.decode(b, name, np.float64)
        r = f(x, y)
        if op == "power":
            ok_in = np.isfinite(x) & np.isfinite(y) & (x != 0)
            r = posit_range(name, r, ok_in, ok_in)
        want = ref_round(r, name)
        gv = got.astype(np.float64)
    if op in ("maximum", "minimum", "fmax", "fmin"):
        # Selections return an input's code; compare values (signed zeros aside).
        assert np.array_equal(gv, r, equal_nan=True)
        return
    ok = equal_codes(got, want, gv, lowp.decode(want, name, np.float64))
    if op in ("power", "arctan2", "hypot", "logaddexp", "logaddexp2"):
        # float64 libm results are within an ulp of float64: a rounding into the format can differ only
        # when the exact result is within 2^-52 relative of a midpoint; allow a vanishing fraction.
        assert (~ok).mean() < 1e-4
    else:
        assert ok.all(), (op, x[~ok][:5], y[~ok][:5], gv[~ok][:5], r[~ok][:5])


UNARY = ["negative", "positive", "absolute", "sign", "sqrt", "square", "reciprocal", "exp", "exp2", "expm1", "log",
         "log2", "log10", "log1p", "sin", "cos", "tan", "tanh", "arctan", "floor", "ceil", "rint", "trunc",
         "sinh", "cosh", "arcsin", "arccos", "arcsinh", "arccosh", "arctanh", "cbrt", "deg2rad", "rad2deg"]


def all_or_sample(name):
    if bits(name) <= 16:
        return np.arange(2 ** bits(name), dtype=np.uint64).astype(udt(name))
    rng = np.random.default_rng(2)
    return rng.integers(0, 2**32, 2 * 10**5, dtype=np.uint64).astype(np.uint32)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("op", UNARY)
def test_unary_correctly_rounded(name, op):
    c = all_or_sample(name)
    f = getattr(np, op)
    x = lowp.decode(c, name, np.float64)
    with np.errstate(all="ignore"):
        got = f(c.view(dt(name)))
        r = f(x)
        if op in ("exp", "exp2", "expm1", "sinh", "cosh"):
            r = posit_range(name, r, np.isfinite(x), np.full(x.shape, op in ("exp", "exp2")))
        want = ref_round(r, name)
    assert got.dtype == dt(name)
    ok = (as_codes(got) == want) | (np.isnan(got.astype(np.float64)) & np.isnan(r))
    if op in ("negative", "positive", "absolute", "sign", "sqrt", "square", "reciprocal", "floor", "ceil", "rint",
              "trunc"):
        assert ok.all(), (op, x[~ok][:5])
    else:
        assert (~ok).mean() < 1e-4, (op, x[~ok][:5])
    if name in FLOATS and op in ("negative", "absolute", "sqrt", "floor", "ceil", "rint", "trunc", "square"):
        with np.errstate(all="ignore"):
            m = f(c.view(getattr(ml_dtypes, name)))
            mv = lowp.decode(as_codes(m), name, np.float64)
        okm = equal_codes(got, m, got.astype(np.float64), mv)
        if name.endswith("fnuz") and op == "negative":
            okm |= as_codes(m) == 0x80  # ml_dtypes flips the sign bit of 0 into fnuz's NaN
        assert okm.all(), (op, x[~okm][:5])


PREDICATES = ["isnan", "isinf", "isfinite", "signbit", "logical_not"]
RELATIONS = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
             "logical_xor"]


@pytest.mark.parametrize("name", ALL)
def test_predicates_and_relations(name):
    c = all_or_sample(name)
    x = lowp.decode(c, name, np.float64)
    for op in PREDICATES:
        got = getattr(np, op)(c.view(dt(name)))
        assert got.dtype == np.bool_
        assert np.array_equal(got, getattr(np, op)(x)), op
    a, b = pairs(name, n=2 * 10**5, seed=3)
    x, y = lowp.decode(a, name, np.float64), lowp.decode(b, name, np.float64)
    for op in RELATIONS:
        got = getattr(np, op)(a.view(dt(name)), b.view(dt(name)))
        assert got.dtype == np.bool_
        assert np.array_equal(got, getattr(np, op)(x, y)), op
    # Python operators go through the same loops.
    A, B = a.view(dt(name)), b.view(dt(name))
    assert np.array_equal(A < B, x < y) and np.array_equal(A == B, x == y)


@pytest.mark.parametrize("name", ALL)
def test_nextafter_and_spacing(name):
    c = all_or_sample(name)
    x = lowp.decode(c, name, np.float64)
    fin = np.isfinite(x)
    t = dt(name)
    up = np.nextafter(c.view(t), np.full(c.size, np.inf).astype(t) if name in ("bfloat16", "float8_e5m2", "float8_e4m3")
                      else np.full(c.size, lowp.format(name).max).astype(t))
    u = up.astype(np.float64)
    # The next value up is the smallest value above x: rounding x + tiny upward.
    sel = fin & (x < lowp.format(name).max)
    if name in POSITS:
        sel &= x != -lowp.format(name).min_subnormal  # posits never round a nonzero value to 0
    nxt = lowp.decode(lowp.encode(x[sel] + np.maximum(np.abs(x[sel]) * 2.0**-40, 2.0**-200), name, "up"), name,
                      np.float64)
    assert np.array_equal(u[sel], nxt)
    with np.errstate(all="ignore"):
        sp = np.spacing(c.view(t)).astype(np.float64)
    s2 = sel & ~np.signbit(x)
    # The gap (exact in float64) rounded into the type (posit gaps are not always posits).
    gap = (nxt - x[sel])[~np.signbit(x[sel])]
    assert np.array_equal(sp[s2], lowp.decode(ref_round(gap, name), name, np.float64))
    if name in FLOATS:
        with np.errstate(all="ignore"):
            m = np.spacing(c.view(getattr(ml_dtypes, name)))
        mv = lowp.decode(as_codes(m), name, np.float64)
        assert np.array_equal(sp[fin], mv[fin], equal_nan=True)


@pytest.mark.parametrize("name", ALL)
def test_strided_and_broadcast(name):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((37, 41)) * 3).astype(dt(name))
    y = (rng.standard_normal(41) * 3).astype(dt(name))
    xs = x[::2, ::3]
    got = np.add(xs, y[::3])
    want = (xs.astype(np.float64) + y[::3].astype(np.float64))
    assert np.array_equal(as_codes(got), ref_round(want, name))
    out = np.empty((19, 14), dt(name))
    np.multiply(xs, xs, out=out)
    assert np.array_equal(as_codes(out), ref_round(xs.astype(np.float64) ** 2, name))
    # A reduction's inner loop sums in float64 and rounds once, as numpy's float16 loops
    # do in float32 (these sums are exact in float64).
    s = np.add.reduce(x[0])
    acc = lowp.format(name)
    v = float(lowp.decode(ref_round([math.fsum(x[0].astype(np.float64))], name), acc, np.float64)[0])
    assert float(s) == v or (np.isnan(float(s)) and np.isnan(v))
    assert float(np.max(x)) == x.astype(np.float64).max()
    # Accumulations feed each result into the next step.
    c = np.cumsum(x[1])
    v = 0.0
    want = []
    for e in x[1].astype(np.float64):
        v = float(lowp.decode(ref_round([v + e], name), acc, np.float64)[0])
        want.append(v)
    assert np.array_equal(c.astype(np.float64), want, equal_nan=True)
    with np.errstate(over="ignore"):  # products past the largest value, as numpy's floats report
        m = np.multiply.accumulate(x[2][:10])
    assert np.array_equal(m[1:].astype(np.float64),
                          lowp.decode(ref_round(m[:-1].astype(np.float64) * x[2][1:10].astype(np.float64), name),
                                      acc, np.float64), equal_nan=True)


@pytest.mark.parametrize("name", ALL)
def test_scalar_ops_use_loops(name):
    t = getattr(lowp, name)
    a, b = t(1.75), t(-0.375)
    for op in (np.add, np.subtract, np.multiply, np.divide):
        r = op(a, b)
        assert type(r) is t
        assert float(r) == float(ref_round([op(float(a), float(b))], name).view(dt(name))[0])
    assert type(np.sqrt(a)) is t
    with np.errstate(invalid="ignore"):
        assert np.isnan(float(np.sqrt(b)))


# ------------------------------------------------------------------ posits against softposit

def _softposit():
    so = glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "_softposit*.so"))
    import softposit  # noqa: F401  (the oracle must be installed)

    so = so or glob.glob(os.path.join(os.path.dirname(softposit.__file__), "_softposit*.so"))
    return ctypes.CDLL(so[0])


_HARNESS = r"""
#include <stdint.h>
typedef uint32_t (*binx_t)(uint32_t, uint32_t, int);
typedef uint32_t (*unx_t)(uint32_t, int);
void run_bin(void *f, const uint32_t *a, const uint32_t *b, uint32_t *o, long n, int x) {
    binx_t g = (binx_t)f;
    for (long i = 0; i < n; i++) o[i] = g(a[i], b[i], x);
}
void run_un(void *f, const uint32_t *a, uint32_t *o, long n, int x) {
    unx_t g = (unx_t)f;
    for (long i = 0; i < n; i++) o[i] = g(a[i], x);
}
typedef uint32_t (*bin_t)(uint32_t, uint32_t);
typedef uint32_t (*un_t)(uint32_t);
void run_bin32(void *f, const uint32_t *a, const uint32_t *b, uint32_t *o, long n) {
    bin_t g = (bin_t)f;
    for (long i = 0; i < n; i++) o[i] = g(a[i], b[i]);
}
void run_un32(void *f, const uint32_t *a, uint32_t *o, long n) {
    un_t g = (un_t)f;
    for (long i = 0; i < n; i++) o[i] = g(a[i]);
}
"""


@pytest.fixture(scope="module")
def softposit_ops(tmp_path_factory):
    """softposit's <n,2> operations over whole arrays: a small C loop over the library's
    functions (per-element Python calls would take minutes for 10^6 pairs). posit32 uses
    softposit's native posit32 (<32,2>, p32_*): its generic pX2_* at x=32 misrounds some
    products near minpos (e.g. 0xe4f1 * 0x126bb: exact 2^-112.11, pX2 gives 2^-114)."""
    sp = _softposit()
    cc = shutil.which("cc") or shutil.which("gcc")
    d = tmp_path_factory.mktemp("softposit")
    P = ctypes.POINTER(ctypes.c_uint32)
    if cc is not None:
        (d / "h.c").write_text(_HARNESS)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(d / "h.so"), str(d / "h.c")], check=True)
        h = ctypes.CDLL(str(d / "h.so"))

        def binop(op, a, b, nb):
            a32 = a.astype(np.uint32) << np.uint32(32 - nb)
            b32 = b.astype(np.uint32) << np.uint32(32 - nb)
            o = np.empty_like(a32)
            if nb == 32:
                h.run_bin32(ctypes.cast(getattr(sp, "p32_" + op), ctypes.c_void_p), a32.ctypes.data_as(P),
                            b32.ctypes.data_as(P), o.ctypes.data_as(P), ctypes.c_long(a.size))
                return o
            h.run_bin(ctypes.cast(getattr(sp, "pX2_" + op), ctypes.c_void_p), a32.ctypes.data_as(P),
                      b32.ctypes.data_as(P), o.ctypes.data_as(P), ctypes.c_long(a.size), nb)
            return o >> np.uint32(32 - nb)

        def unop(op, a, nb):
            a32 = a.astype(np.uint32) << np.uint32(32 - nb)
            o = np.empty_like(a32)
            if nb == 32:
                h.run_un32(ctypes.cast(getattr(sp, "p32_" + op), ctypes.c_void_p), a32.ctypes.data_as(P),
                           o.ctypes.data_as(P), ctypes.c_long(a.size))
                return o
            h.run_un(ctypes.cast(getattr(sp, "pX2_" + op), ctypes.c_void_p), a32.ctypes.data_as(P),
                     o.ctypes.data_as(P), ctypes.c_long(a.size), nb)
            return o >> np.uint32(32 - nb)
    else:  # pragma: no cover - slow path without a C compiler
        for n in ("add", "sub", "mul", "div"):
            getattr(sp, "pX2_" + n).argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_int]
            getattr(sp, "pX2_" + n).restype = ctypes.c_uint32
        sp.pX2_sqrt.argtypes = [ctypes.c_uint32, ctypes.c_int]
        sp.pX2_sqrt.restype = ctypes.c_uint32

        def binop(op, a, b, nb):  # posit32 here would need p32_* (see above)
            f = getattr(sp, "pX2_" + op)
            s = 32 - nb
            return np.array([f(int(x) << s, int(y) << s, nb) >> s for x, y in zip(a, b)], np.uint32)

        def unop(op, a, nb):
            s = 32 - nb
            return np.array([sp.pX2_sqrt(int(x) << s, nb) >> s for x in a], np.uint32)
    return binop, unop


@pytest.mark.parametrize("name", POSITS)
@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_posit_arithmetic_matches_softposit(name, op, softposit_ops):
    binop, _ = softposit_ops
    nb = bits(name)
    a, b = pairs(name, n=10**6, seed=5)
    spname = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div"}[op]
    want = binop(spname, a, b, nb)
    with np.errstate(divide="ignore", invalid="ignore"):  # x/0 is NaR, with numpy's float warning
        got = as_codes(getattr(np, op)(a.view(dt(name)), b.view(dt(name)))).astype(np.uint32)
    bad = got != want
    assert not bad.any(), (a[bad][:5], b[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("name", POSITS)
def test_posit_sqrt_matches_softposit(name, softposit_ops):
    _, unop = softposit_ops
    nb = bits(name)
    if nb <= 16:
        c = np.arange(2**nb, dtype=np.uint64).astype(udt(name))
    else:
        c = np.random.default_rng(6).integers(0, 2**32, 10**6, dtype=np.uint64).astype(np.uint32)
    want = unop("sqrt", c, nb)
    with np.errstate(invalid="ignore"):  # sqrt of a negative is NaR, with numpy's float warning
        got = as_codes(np.sqrt(c.view(dt(name)))).astype(np.uint32)
    bad = got != want
    assert not bad.any(), (c[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("name", POSITS)
def test_posit_casts_match_softposit(name):
    import softposit

    nb = bits(name)
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(3000) * 2.0 ** rng.integers(-60, 60, 3000), [0.0, 1e300, -1e-300]])
    got = as_codes(x.astype(dt(name)))
    want = np.array([int(softposit.posit_2(float(v), nb).v.v) >> (32 - nb) for v in x], np.uint64)
    assert np.array_equal(got.astype(np.uint64), want)


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
def test_bf16_contiguous_arithmetic_matches_element_loop(op):
    """Contiguous bf16 + - * / run a vectorized, threaded kernel; strided operands run the
    element loop. Same bits (NaN payloads included) on every path, thread count and
    aliasing, and the values ml_dtypes gives."""
    n = (1 << 18) + 13  # several thread chunks and a ragged tail
    a, b = pairs("bfloat16", n, seed=5)
    a[:8] = [0x7FC1, 0xFFA0, 0x7F80, 0xFF80, 0x0000, 0x8000, 0x7F7F, 0x0001]  # NaNs, infs, zeros, max, tiny
    b[:8] = [0x3F80, 0x3F80, 0xFF80, 0x7F80, 0x8000, 0x0000, 0x7F7F, 0x8001]
    f = getattr(np, op)
    la, lb = a.view(dt("bfloat16")), b.view(dt("bfloat16"))
    # The element loop: the same values seen through strided views.
    sa, sb = np.repeat(la, 2)[::2], np.repeat(lb, 2)[::2]
    with np.errstate(all="ignore"):
        ref = as_codes(f(sa, sb)).copy()
        want = f(a.view(ml_dtypes.bfloat16), b.view(ml_dtypes.bfloat16))
    ok = equal_codes(ref, want, lowp.decode(ref, "bf16", np.float64), lowp.decode(as_codes(want), "bf16", np.float64))
    assert ok.all()
    old = lowp.get_num_threads()
    try:
        for isa in ("scalar", None):
            lowp._lowp.set_isa(isa)
            for threads in (1, 2):
                lowp.set_num_threads(threads)
                with np.errstate(all="ignore"):
                    np.testing.assert_array_equal(as_codes(f(la, lb)), ref)
                    inplace = la.copy()
                    f(inplace, lb, out=inplace)
                    np.testing.assert_array_equal(as_codes(inplace), ref)
                    inplace = lb.copy()
                    f(la, inplace, out=inplace)
                    np.testing.assert_array_equal(as_codes(inplace), ref)
    finally:
        lowp._lowp.set_isa(None)
        lowp.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 2])
def test_bf16_arithmetic_reports_overflow_at_any_thread_count(threads):
    n = 1 << 18
    big = np.full(n, 3e38, np.float32).astype(lowp.bfloat16)
    one = np.ones(n, np.float32).astype(lowp.bfloat16)
    old = lowp.get_num_threads()
    try:
        lowp.set_num_threads(threads)
        with pytest.warns(RuntimeWarning, match="overflow"):
            r = big * big
        assert np.isinf(r.astype(np.float32)).all()
        with np.errstate(all="raise"):
            r = one + one  # exact: nothing to report
        assert (r.astype(np.float32) == 2).all()
        with np.errstate(over="raise"), pytest.raises(FloatingPointError):
            big + big
    finally:
        lowp.set_num_threads(old)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "posit8", "posit16"])
def test_divmod_keeps_the_dtype(name):
    """``divmod`` gives the type's own floor_divide and remainder, as ``//`` and ``%`` do."""
    dt = np.dtype(getattr(lowp, name))
    rng = np.random.default_rng(21)
    x = (rng.standard_normal(300) * 50).astype(dt)
    y = np.concatenate([(rng.standard_normal(297) + 0.1).astype(dt), np.array([0.0, -0.0, 1.0], dt)])
    with np.errstate(all="ignore"):
        q, r = np.divmod(x, y)
        assert q.dtype == dt and r.dtype == dt
        for got, want in ((q, x // y), (r, x % y)):
            assert np.array_equal(got.view(f"u{dt.itemsize}"), want.view(f"u{dt.itemsize}"))
        q1, r1 = divmod(x[0], y[0])
        assert type(q1) is type(x[0]) and float(q1) == float(q[0]) and float(r1) == float(r[0])


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz", "posit8", "posit16",
                                  "posit32"])
def test_floating_point_exceptions_as_numpy_reports_them(name):
    """Under ``np.errstate``, operations report invalid results, division by zero and
    overflow as numpy's own floats do (ml_dtypes too), whether they run through lookup
    tables or are computed; exact and ordinary operations report nothing, including the
    first use of an operation (whose table evaluates every encoding)."""
    dt = np.dtype(getattr(lowp, name))
    posit = name.startswith("posit")
    x = np.array([-1.0, 0.0, 4.0, 1.5], dt)
    with np.errstate(all="raise"):
        np.sqrt(x[2:]), np.log(x[2:]), np.exp(x[1:3]), x + x, x * x[::-1], np.abs(x), -x, x[2:] / x[2:]
        np.floor(x), np.maximum(x, x[::-1])
    with np.errstate(all="ignore", invalid="raise"), pytest.raises(FloatingPointError, match="invalid"):
        np.sqrt(x[:1])
    with np.errstate(all="ignore", divide="raise"), pytest.raises(FloatingPointError, match="divide"):
        np.log(x[1:2])
    with np.errstate(all="ignore", divide="raise"), pytest.raises(FloatingPointError, match="divide"):
        x[2:3] / x[1:2]
    big = np.array([lowp.finfo(dt).max] * 3, dt)
    if posit:
        with np.errstate(all="raise"):  # posits saturate: no overflow
            assert np.all((big * big).astype(np.float64) == float(lowp.finfo(dt).max))
    else:
        with np.errstate(all="ignore", over="raise"), pytest.raises(FloatingPointError, match="overflow"):
            big * big
        with np.errstate(all="ignore", over="raise"), pytest.raises(FloatingPointError, match="overflow"):
            np.square(big)
    if not posit and name not in ("float8_e4m3fn", "float8_e4m3fnuz"):
        inf = np.array([np.inf], dt)
        with np.errstate(all="ignore", invalid="raise"), pytest.raises(FloatingPointError, match="invalid"):
            inf - inf
    with pytest.warns(RuntimeWarning, match="invalid value"):
        np.sqrt(x)


@pytest.mark.parametrize("name", ALL)
def test_modf_and_frexp_keep_the_type(name):
    """``modf`` and ``frexp`` give parts of the type itself (exact: a value's parts are
    values of its format) and int32 exponents, as numpy's float16 does: every encoding
    (posit32: a sample) against float64's parts of the same values."""
    d = dt(name)
    if d.itemsize == 4:
        codes = np.random.default_rng(3).integers(0, 2**32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    else:
        codes = np.arange(2 ** (8 * d.itemsize), dtype=np.uint64).astype(f"u{d.itemsize}")
    x = codes.view(d)
    v = x.astype(np.float64)
    with np.errstate(all="ignore"):
        f, w = np.modf(x)
        m, e = np.frexp(x)
        wf, ww = np.modf(v)
        wm, we = np.frexp(v)
    assert f.dtype == d and w.dtype == d and m.dtype == d and e.dtype == np.int32
    fmt = lowp.format(name)
    for got, want in ((f, wf), (w, ww), (m, wm)):
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got.astype(np.float64)), nan)
        assert np.array_equal(as_codes(got)[~nan], lowp.encode(want[~nan], fmt))
    fin = np.isfinite(v)
    assert np.array_equal(e[fin], we[fin]) and np.all(e[~fin] == 0)


@pytest.mark.parametrize("name", ["posit8", "posit16", "posit32"])
def test_posits_saturate_beyond_float64(name):
    """Exact results beyond float64's range are still posit values: maxpos and minpos of
    their sign, never NaR or zero, with no overflow reported; a division by zero is NaR."""
    d = dt(name)
    mx = float(lowp.finfo(d).max)
    x = np.array([1000.0, -1000.0], d)
    with np.errstate(all="raise"):
        e = np.exp(x).astype(np.float64)
        assert e[0] == mx and 0 < e[1] <= 2 ** -20
        assert np.exp2(np.array([2000.0], d)).astype(np.float64)[0] == mx
        assert np.sinh(x).astype(np.float64).tolist() == [mx, -mx]
        assert np.cosh(x).astype(np.float64).tolist() == [mx, mx]
        y = np.array([1000, 1000, 999], d)
        p = np.power(np.array([1e3, 1e-3, -1e3], d), y).astype(np.float64)
        odd = float(y[2]) % 2 == 1  # (posit8 holds 999 as 1024)
        assert p[0] == mx and 0 < p[1] <= 2 ** -20 and p[2] == (-mx if odd else mx)
    with np.errstate(all="ignore"):
        assert np.isnan(np.power(np.array([0.0], d), np.array([-1.0], d)).astype(np.float64)[0])


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "posit16"])
def test_inverse_hyperbolic_flags(name):
    """arcsinh(0) raises nothing; arccosh below 1 (and of -inf) is an invalid operation."""
    d = dt(name)
    with np.errstate(all="raise"):
        np.arcsinh(np.array([0.0, -0.0, 1.0], d))
    for v in ([0.5], [-np.inf] if name != "posit16" else [-3.0]):
        with np.errstate(all="ignore", invalid="raise"), pytest.raises(FloatingPointError, match="invalid"):
            np.arccosh(np.array(v, d))


def _ref_codes(values, name):
    """Codes of exact values (Fractions; None for NaN) rounded to nearest even by the
    exact-rational reference; NaN where the value is None (returned as a mask)."""
    from fractions import Fraction

    from _reference import FloatSpec, posit_round, round_float

    f = lowp.format(name)
    out = np.zeros(len(values), np.uint64)
    nan = np.zeros(len(values), bool)
    for i, v in enumerate(values):
        if v is None:
            nan[i] = True
        elif name.startswith("posit"):
            out[i] = posit_round(v, f.nbits, f.es)
        else:
            r = round_float(v if isinstance(v, float) else Fraction(v), FloatSpec.of(f), "nearest_even")
            nan[i] = math.isnan(r)
            out[i] = 0 if nan[i] else int(lowp.encode(np.array([r]), f)[0])
    return out, nan


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_ldexp_keeps_the_type_and_rounds_once(name, itype):
    """x * 2**e of every code (a sample for 16 and 32 bits) and exponents up to far past
    the range, against exact rationals: rounded once to nearest even, posits saturating."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    codes = np.arange(256) if bits(name) == 8 else rng.integers(0, 2 ** bits(name), 600)
    x = codes.astype(udt(name)).view(dt(name))
    vals = x.astype(np.float64)
    exps = np.array([-2**31 if itype is np.int32 else -2**62, -300, -140, -20, -3, -1, 0, 1, 2, 9, 40, 140, 300,
                     2**31 - 1], itype)
    with np.errstate(over="ignore"):
        got = np.ldexp(x[:, None], exps[None, :])
    assert got.dtype == dt(name) and got.shape == (len(x), len(exps))
    def exact(v, e):
        # Beyond 2**+-300 every format overflows (or rounds to 0, minpos for posits)
        # alike: the reference gets magnitudes it can hold.
        if v == 0:
            return float(v)  # signed zeros stay themselves
        r = Fraction(v) * Fraction(2) ** int(min(max(e, -450), 450))  # |v| < 2**150
        return r if r == 0 or Fraction(2) ** -300 <= abs(r) <= Fraction(2) ** 300 else np.sign(v) * Fraction(2) ** (300 if e > 0 else -300)

    exact = [None if not np.isfinite(v) else exact(v, e) for v in vals for e in exps]
    inf = [v for v in vals for _ in exps]
    want, nan = _ref_codes(exact, name)
    g = as_codes(got).ravel().astype(np.uint64)
    is_inf = np.isinf(np.array(inf))
    gv = got.astype(np.float64).ravel()
    assert np.all(np.where(is_inf, gv == np.array(inf), True))
    ok = np.where(is_inf, True, np.where(nan, np.isnan(gv), g == want))
    assert ok.all(), [(vals[i // len(exps)], exps[i % len(exps)], g[i], want[i]) for i in np.flatnonzero(~ok)[:5]]
    # A Python int exponent keeps the type too.
    with np.errstate(over="ignore"):
        assert np.ldexp(x, 9).dtype == dt(name)
        np.testing.assert_array_equal(as_codes(np.ldexp(x, 9)), as_codes(got[:, exps.tolist().index(9)]))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz", "posit8", "posit16"])
def test_ldexp_reports_overflow_as_numpy(name):
    x = np.array([1.0, -2.0], dt(name))
    big = 200 if bits(name) == 16 else 40
    if name.startswith("posit"):
        with np.errstate(all="raise"):
            r = np.ldexp(x, big)  # posits saturate at maxpos: nothing to report
        np.testing.assert_array_equal(r.astype(np.float64), [lowp.finfo(name).max, -lowp.finfo(name).max])
        return
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
        np.ldexp(x, big)
    with np.errstate(all="raise"):
        np.ldexp(x, 1)
        np.ldexp(np.array([np.nan], dt(name)), big)  # NaN in, NaN out: no overflow


@pytest.mark.parametrize("name", ALL)
def test_clip_keeps_the_type_and_follows_numpy(name):
    """np.clip of random codes (NaN included) gives one of its operands' codes, with
    numpy's float semantics: NaN in any operand gives NaN; no warnings."""
    rng = np.random.default_rng(3)
    c = rng.integers(0, 2 ** bits(name), (3, 5000)).astype(udt(name))
    x, lo, hi = (c[i].view(dt(name)) for i in range(3))
    got = np.clip(x, lo, hi)
    assert got.dtype == dt(name)
    xv, lv, hv = (a.astype(np.float64) for a in (x, lo, hi))
    # numpy's float16 loop: max(a, b) keeps a when a is NaN or a >= b; min likewise.
    up = np.isnan(xv) | (xv >= lv)
    v = np.where(up, xv, lv)
    keep = np.isnan(v) | (v <= hv)
    want_codes = np.where(keep, np.where(up, as_codes(x), as_codes(lo)), as_codes(hi))
    assert np.array_equal(as_codes(got), want_codes)
    assert np.array_equal(got.astype(np.float64), np.clip(xv, lv, hv), equal_nan=True)
    if name == "float8_e5m2":
        # Its values are float16 values: numpy's own float16 clip, signed zeros included.
        h = np.clip(xv.astype(np.float16), lv.astype(np.float16), hv.astype(np.float16))
        gv = got.astype(np.float16)
        assert np.array_equal(gv, h, equal_nan=True) and np.array_equal(np.signbit(gv), np.signbit(h))
    # Bounds of the type, Python scalars and the method form.
    y = np.array([-3, 0.5, 2, 7], dt(name))
    np.testing.assert_array_equal(y.clip(0, 2).astype(np.float64), [0, 0.5, 2, 2])
    assert np.clip(y, 0, 2).dtype == dt(name)


@pytest.mark.parametrize("name", ALL)
def test_vecdot_matvec_vecmat_keep_the_type(name):
    """np.vecdot, np.matvec and np.vecmat give np.dot's products (float64 sums rounded
    once), on strided, transposed and broadcast operands; small integers make every
    sum exact, so the reference is the exact sum rounded once."""
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (4, 6, 7)).astype(np.float64)
    v = rng.integers(-3, 4, (6,)).astype(np.float64)
    w = rng.integers(-3, 4, (7,)).astype(np.float64)
    la, lv, lw = (z.astype(dt(name)) for z in (a, v, w))

    def check(got, want):
        assert got.dtype == dt(name) and got.shape == want.shape
        np.testing.assert_array_equal(as_codes(got), lowp.encode(want, lowp.format(name)).reshape(want.shape))

    check(np.vecdot(la, lw), np.vecdot(a, w))
    check(np.vecdot(la[:, ::2, ::-1], lw[::-1]), np.vecdot(a[:, ::2, ::-1], w[::-1]))
    check(np.vecdot(la.transpose(0, 2, 1), lv), np.vecdot(a.transpose(0, 2, 1), v))
    check(np.matvec(la, lw), np.matvec(a, w))
    check(np.matvec(la.transpose(0, 2, 1)[:, ::2], lv), np.matvec(a.transpose(0, 2, 1)[:, ::2], v))
    check(np.vecmat(lv, la), np.vecmat(v, a))
    check(np.vecmat(lv[::-1], la[:, ::-1, 1::3]), np.vecmat(v[::-1], a[:, ::-1, 1::3]))
    check(np.vecdot(la[:, :, :0], lw[:0]), np.vecdot(a[:, :, :0], w[:0]))
    out = np.empty((4, 6), dt(name))
    assert np.matvec(la, lw, out=out) is out
    check(out, np.matvec(a, w))
    # The same sums as np.dot of two vectors, on values that need rounding.
    x = rng.standard_normal(300).astype(dt(name))
    y = rng.standard_normal(300).astype(dt(name))
    np.testing.assert_array_equal(as_codes(np.vecdot(x, y)), as_codes(np.asarray(np.dot(x, y))))


@pytest.mark.parametrize("name", POSITS)
def test_posit_product_reductions_leave_float64_and_come_back(name):
    """Products and quotients of a reduction keep their exponent apart from float64's
    range: maxpos**9 * minpos**9 is 1 in either order, a zero makes the product 0
    wherever it comes, past the range saturates, and x / 0 is NaR with divide-by-zero."""
    t = dt(name)
    mp, mn = lowp.finfo(name).max, lowp.finfo(name).smallest_subnormal
    k = {"posit8": 60, "posit16": 25, "posit32": 9}[name]
    big, small = np.full(k, mp, t), np.full(k, mn, t)
    with np.errstate(all="raise"):
        assert float(np.multiply.reduce(np.concatenate([big, small]))) == 1.0
        assert float(np.multiply.reduce(np.concatenate([small, big]))) == 1.0
        assert float(np.multiply.reduce(np.concatenate([big, np.zeros(1, t)]))) == 0.0
        assert float(np.multiply.reduce(np.concatenate([np.zeros(1, t), big]))) == 0.0
        assert float(np.multiply.reduce(big)) == mp and float(np.multiply.reduce(-big[:3])) == -mp
        assert float(np.multiply.reduce(small)) == mn
        assert float(np.divide.reduce(np.concatenate([np.ones(1, t), small]))) == mp
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError, match="divide"):
        np.divide.reduce(np.concatenate([-np.ones(1, t), small, np.zeros(1, t)]))
    with np.errstate(divide="ignore"):
        assert math.isnan(float(np.divide.reduce(np.concatenate([-np.ones(1, t), small, np.zeros(1, t)]))))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "float8_e4m3fn"])
def test_float_product_reductions_report_overflow(name):
    t = dt(name)
    top = lowp.finfo(name).max
    big = np.full(12, top, t)
    with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
        np.multiply.reduce(big)
    with np.errstate(all="raise"):
        # Out of float64's range and back: the exact product, rounded once.
        k = math.floor(math.log2(top))
        r = np.multiply.reduce(np.concatenate([np.full(12, 2.0**k, t), np.full(12, 2.0**-k, t)]))
        assert float(r) == 1.0  # (bfloat16: 2**1524 along the way)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit16"])
def test_vector_products_report_overflow(name):
    t = dt(name)
    x = np.array([lowp.finfo(name).max] * 2, t)
    one = np.ones(2, t)
    if name.startswith("posit"):
        with np.errstate(all="raise"):
            assert float(np.vecdot(x, one)) == lowp.finfo(name).max
        return
    for f in (lambda: np.vecdot(x, one), lambda: np.matvec(x[None], one), lambda: np.vecmat(one, x[:, None])):
        with np.errstate(over="raise"), pytest.raises(FloatingPointError, match="overflow"):
            f()
    with np.errstate(all="raise"):
        np.vecdot(one, one)


@pytest.mark.parametrize("name", ["bfloat16", "posit16", "posit32"])
def test_nonzero_of_other_byte_order(name):
    be = dt(name).newbyteorder(">")
    b = np.array([2.0**-100, -0.0, 0.0, 3.0], np.float64).astype(dt(name)).astype(be)
    assert np.nonzero(b)[0].tolist() == np.nonzero(b.astype(np.float64))[0].tolist()
    assert np.count_nonzero(b) == np.count_nonzero(b.astype(np.float64))


@pytest.mark.parametrize("name", ALL)
def test_np_dot_sums_in_float64_and_rounds_once(name):
    """np.dot (and np.inner, tensordot) of lowp arrays: each output is the float64 sum
    of the exact products rounded once; these sums are exact in float64, so the
    reference is the exact sum rounded once."""
    rng = np.random.default_rng(9)
    if name == "posit32":
        a, b = rng.integers(-8, 9, (7, 33)).astype(np.float64), rng.integers(-8, 9, (33, 5)).astype(np.float64)
    else:
        a, b = rng.standard_normal((7, 33)) * 2, rng.standard_normal((33, 5)) * 2
    la, lb = a.astype(dt(name)), b.astype(dt(name))
    a, b = la.astype(np.float64), lb.astype(np.float64)
    f = lowp.format(name)
    with np.errstate(over="ignore"):
        for got, want in ((np.dot(la, lb), a @ b), (np.dot(la[::2, ::-1], lb[::-1, 1:]), a[::2, ::-1] @ b[::-1, 1:]),
                          (np.dot(lb.T, la.T), b.T @ a.T), (np.inner(la, la), a @ a.T), (np.dot(la[0], lb[:, 0]), a[0] @ b[:, 0])):
            assert got.dtype == dt(name)
            np.testing.assert_array_equal(as_codes(got), lowp.encode(np.asarray(want), f).reshape(np.shape(want)))


def test_posit32_ties_float64_cannot_see():
    """Where float64's result is a tie of posit32 (or of a small posit16/bf16 value) the
    exact value is not: exp near 0 is above 1 + x, arctan2 of a tiny ratio is below the
    ratio, x ** 2 and x ** 0.5 round the exact square and root once, and arctanh is odd."""
    import decimal

    def odd(d: decimal.Decimal) -> float:
        """d rounded to odd in float64 (then rounding into posit32 rounds d once)."""
        f = float(d)
        if decimal.Decimal(f) != d and not np.array(f).view(np.int64) & 1:
            f = float(np.nextafter(f, np.inf if decimal.Decimal(f) < d else -np.inf))
        return f

    P = lowp.posit32
    decimal.getcontext().prec = 80
    for k in (28, 29, 30, 40, 50):
        for v in (2.0**-k, -(2.0**-k), 3 * 2.0**-k):
            got = float(np.exp(np.array(v, P)))
            want = float(lowp.round(np.array([odd(decimal.Decimal(v).exp())]), lowp.PositFormat(32))[0])
            assert got == want, (k, v)
    assert float(np.exp(np.array(2.0**-28, P))) == 1 + 2**-27  # 1 + 2^-28 is the tie; exp lies above it
    rng = np.random.default_rng(2)
    x = np.concatenate([[1.25 + 2**-27], rng.uniform(0.5, 4, 5000)]).astype(P)
    np.testing.assert_array_equal(np.power(x, np.array(2, P)).view(np.uint32), np.square(x).view(np.uint32))
    np.testing.assert_array_equal(np.power(x, np.array(0.5, P)).view(np.uint32), np.sqrt(x).view(np.uint32))
    np.testing.assert_array_equal(np.power(x, np.array(-1, P)).view(np.uint32), np.reciprocal(x).view(np.uint32))
    c = np.array([0xC0000004, 0xC0000001, 0xC8000000], np.uint32).view(P)
    np.testing.assert_array_equal(np.arctanh(c).view(np.uint32), (-np.arctanh(-c)).view(np.uint32))
    assert float(np.arctan2(np.array(1.375, lowp.posit16), np.array(2.0**40, lowp.posit16))) == 1.25 * 2**-40
    assert float(np.arctan2(np.array(1.5 * 2**-125, lowp.bfloat16), np.array(256, lowp.bfloat16))) == 2.0**-133
    # Ratios that are not ties, and the signs, as before.
    assert float(np.arctan2(np.array(-1.375, lowp.posit16), np.array(2.0**40, lowp.posit16))) == -1.25 * 2**-40
    assert float(np.arctan2(np.array(1.25, lowp.posit16), np.array(2.0**40, lowp.posit16))) == 1.25 * 2**-40
