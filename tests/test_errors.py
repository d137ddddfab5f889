"""Bad input raises TypeError / ValueError naming the argument (and what is accepted)."""

from __future__ import annotations

import numpy as np
import pytest

import lowp
from lowp import _lowp

X = np.linspace(-2, 2, 16)


@pytest.mark.parametrize("x", [np.array([1 + 1j]), np.array(["a", "b"]), np.array([object(), 1]),
                               np.array([b"x"]), np.zeros(2, "M8[s]"), [[1.0, 2.0], [3.0]]],
                         ids=["complex", "str", "object", "bytes", "datetime", "ragged"])
@pytest.mark.parametrize("fn", ["round", "encode", "cast"])
def test_non_float_arrays(x, fn):
    with pytest.raises(TypeError, match=r"^x: ") as e:
        if fn == "cast":
            lowp.cast(x, np.float16)
        else:
            getattr(lowp, fn)(x, "bf16")
    assert "accepted" in str(e.value) or "numeric" in str(e.value)


@pytest.mark.parametrize("rounding", ["nearest", "NEAREST_EVEN", "rne", "", None, 3, "stochastic "])
@pytest.mark.parametrize("fn", [lowp.round, lowp.encode])
def test_unknown_rounding(rounding, fn):
    with pytest.raises(ValueError, match="rounding") as e:
        fn(X, "bf16", rounding)
    assert "nearest_even" in str(e.value)
    with pytest.raises(ValueError, match="rounding"):
        lowp.quantize(X, rounding=rounding)
    with pytest.raises(ValueError, match="rounding"):
        lowp.cast(X, np.float16, rounding)


@pytest.mark.parametrize("args,kw,exc,arg", [
    ((0, 3), {}, ValueError, "exp_bits"),
    ((12, 3), {}, ValueError, "exp_bits"),
    ((-1, 3), {}, ValueError, "exp_bits"),
    ((4, -1), {}, ValueError, "man_bits"),
    ((4, 53), {}, ValueError, "man_bits"),
    ((1, 3), {}, ValueError, "exp_bits"),  # ieee needs a reserved binade plus a finite one
    ((4.0, 3), {}, TypeError, "exp_bits"),
    ((4, "3"), {}, TypeError, "man_bits"),
    ((True, 3), {}, TypeError, "exp_bits"),
    ((4, 3), {"bias": 2.5}, TypeError, "bias"),
    ((8, 7), {"bias": -5000}, ValueError, "bias"),
    ((8, 7), {"bias": 5000}, ValueError, "bias"),
    ((4, 3), {"nan": "ieee754"}, ValueError, "nan"),
    ((4, 3), {"inf": "yes"}, TypeError, "inf"),
    ((4, 3), {"subnormals": 1}, TypeError, "subnormals"),
])
def test_float_format_validation(args, kw, exc, arg):
    with pytest.raises(exc, match=f"^{arg}"):
        lowp.FloatFormat(*args, **kw)


@pytest.mark.parametrize("args,exc,arg", [
    ((16, 5), ValueError, "es"), ((16, -1), ValueError, "es"), ((33, 2), ValueError, "nbits"),
    ((64, 2), ValueError, "nbits"), ((1, 0), ValueError, "nbits"), ((16.0, 2), TypeError, "nbits"),
    ((16, 2.0), TypeError, "es"),
])
def test_posit_format_validation(args, exc, arg):
    with pytest.raises(exc, match=f"^{arg}"):
        lowp.PositFormat(*args)


def test_int_format_validation():
    with pytest.raises(ValueError, match="^bits"):
        lowp.IntFormat(64)
    with pytest.raises(ValueError, match="^bits"):
        lowp.IntFormat(1)
    with pytest.raises(TypeError, match="^signed"):
        lowp.IntFormat(8, signed="yes")


@pytest.mark.parametrize("rbits", [0, 65, -1, 1000])
def test_rbits_out_of_range(rbits):
    for fn in (lowp.round, lowp.encode):
        with pytest.raises(ValueError, match="^rbits"):
            fn(X, "bf16", "stochastic", seed=1, rbits=rbits)
    with pytest.raises((ValueError, OverflowError), match="rbits"):  # the bindings check too
        _lowp.round_into(X, lowp.format("bf16")._spec, np.empty_like(X), "stochastic", False, 1, rbits)


@pytest.mark.parametrize("rbits", [1.5, "8", True])
def test_rbits_type(rbits):
    with pytest.raises(TypeError, match="^rbits"):
        lowp.round(X, "bf16", "stochastic", seed=1, rbits=rbits)


@pytest.mark.parametrize("seed,exc", [(-1, ValueError), (2**64, ValueError), (1.5, TypeError), ("7", TypeError),
                                      (True, TypeError), (np.random.RandomState(0), TypeError)])
def test_bad_seed(seed, exc):
    with pytest.raises(exc, match="^seed"):
        lowp.round(X, "bf16", "stochastic", seed=seed)


def test_out_argument():
    x = np.linspace(0, 1, 12).reshape(3, 4)
    ok = np.empty_like(x)
    assert lowp.round(x, "bf16", out=ok) is ok
    with pytest.raises(ValueError, match="^out.*shape"):
        lowp.round(x, "bf16", out=np.empty((4, 3)))
    with pytest.raises(ValueError, match="^out.*shape"):
        lowp.round(x, "bf16", out=np.empty(12))
    with pytest.raises(TypeError, match="^out.*dtype"):
        lowp.round(x, "bf16", out=np.empty((3, 4), np.float32))
    with pytest.raises(ValueError, match="^out.*read-only"):
        ro = np.empty_like(x)
        ro.flags.writeable = False
        lowp.round(x, "bf16", out=ro)
    with pytest.raises(TypeError, match="^out"):
        lowp.round(x, "bf16", out=[0.0] * 12)
    codes = np.empty((3, 4), np.uint16)
    assert lowp.encode(x, "bf16", out=codes) is codes
    with pytest.raises(TypeError, match="^out.*dtype"):
        lowp.encode(x, "bf16", out=np.empty((3, 4), np.uint8))
    with pytest.raises(ValueError, match="^out.*shape"):
        lowp.decode(codes, "bf16", out=np.empty((4, 3), np.float32))


def test_nan_into_format_without_nan():
    f = lowp.FloatFormat(3, 2, nan=None)
    for x in (np.array([1.0, np.nan]), np.array([np.nan], np.float32), np.array([-np.nan, 2.0])):
        with pytest.raises(ValueError, match="^x.*NaN"):
            lowp.round(x, f)
        with pytest.raises(ValueError, match="^x.*NaN"):
            lowp.encode(x, f)
    with pytest.raises(ValueError, match="^x.*NaN"):
        lowp.encode(np.array([np.nan]), "int8")
    # ieee policy without mantissa bits: the top binade is only inf, there is no NaN code
    e3m0 = lowp.FloatFormat(3, 0)
    for x in (np.array([np.nan]), np.array([np.nan], np.float32)):
        with pytest.raises(ValueError, match="^x.*NaN"):
            lowp.round(x, e3m0)
    assert lowp.round(np.array([np.inf, 100.0]), e3m0).tolist() == [np.inf, np.inf]
    # formats with NaN accept it
    assert np.isnan(lowp.round(np.array([np.nan]), "e4m3fn")[0])
    assert lowp.encode(np.array([np.nan]), "posit8")[0] == 0x80


def test_decode_arguments():
    with pytest.raises(TypeError, match="^bits"):
        lowp.decode(np.ones(3), "bf16")
    with pytest.raises(TypeError, match="^bits.*narrow"):
        lowp.decode(np.ones(3, np.uint8), "bf16")
    with pytest.raises(TypeError, match="^dtype"):
        lowp.decode(np.ones(3, np.uint16), "bf16", dtype=np.int32)
    with pytest.raises(TypeError, match="^dtype"):
        lowp.decode(np.ones(3, np.uint16), "bf16", dtype="nope")


def test_format_arguments():
    with pytest.raises(ValueError, match="^fmt"):
        lowp.round(X, "bf17")
    with pytest.raises(TypeError, match="^fmt"):
        lowp.round(X, np.complex64)
    with pytest.raises(TypeError, match="^fmt"):
        lowp.round(X, None)
    with pytest.raises(TypeError, match="^fmt"):
        lowp.round(X, 16)
    with pytest.raises(TypeError, match="^saturate"):
        lowp.round(X, "bf16", saturate="yes")
    with pytest.raises(TypeError, match="^subnormals"):
        lowp.round(X, "bf16", subnormals=None)


def test_cast_arguments():
    with pytest.raises(TypeError, match="^dtype"):
        lowp.cast(X, np.complex64)
    with pytest.raises(TypeError, match="^dtype"):
        lowp.cast(X, None)
    with pytest.raises(ValueError, match="^dtype"):
        lowp.cast(X, "bf17")
    with pytest.raises(TypeError, match="^dtype"):
        lowp.cast(X, lowp.PositFormat(12, 1))


def test_threads_and_isa_arguments():
    with pytest.raises(ValueError, match="^n"):
        lowp.set_num_threads(0)
    with pytest.raises(ValueError, match="^n"):
        lowp.set_num_threads(-3)
    with pytest.raises(ValueError, match="^n"):
        lowp.set_num_threads(10**9)
    with pytest.raises(ValueError, match="^n: .*1..=1024"):
        lowp.set_num_threads(2**70)
    with pytest.raises(TypeError):
        lowp.set_num_threads(2.0)
    assert lowp.get_num_threads() >= 1
    if _lowp.detected_isa() != "avx512":
        with pytest.raises(ValueError, match="^isa: \"avx512\" is not supported by this CPU"):
            _lowp.set_isa("avx512")
    with pytest.raises(ValueError, match='^isa: unknown "neon"'):
        _lowp.set_isa("neon")
    assert _lowp.get_isa() in ("scalar", "sse2", "avx2", "avx512")


def test_finfo_arguments():
    with pytest.raises(TypeError):
        lowp.finfo("int8")
    with pytest.raises(ValueError, match="fmt"):
        lowp.finfo("nope")


def test_out_may_alias_the_input():
    for dt in (np.float32, np.float64):
        x = np.linspace(-3, 3, 1001).astype(dt)
        want = lowp.round(x, "e4m3fn")
        assert lowp.round(x, "e4m3fn", out=x) is x
        np.testing.assert_array_equal(x, want)
    # an out that is a view of the input's memory (codes written over the floats)
    x = np.linspace(-3, 3, 100).astype(np.float32)
    want = lowp.encode(x, "posit32")
    np.testing.assert_array_equal(lowp.encode(x, "posit32", out=x.view(np.uint32)), want)
    codes = lowp.encode(np.linspace(-3, 3, 64), "e5m2")
    want = lowp.decode(codes, "e5m2")
    c16 = codes.astype(np.uint16)
    np.testing.assert_array_equal(lowp.decode(c16.view(np.uint16), "e5m2"), want)


def test_out_of_any_layout():
    """``out=`` of round, encode and decode may be strided, reversed, Fortran-ordered,
    unaligned, in the other byte order or lowp.empty's padded rows, as matmul's: the
    results equal those of a plain array; a refused call leaves such an ``out`` (written
    through a temporary) untouched."""
    x = np.random.default_rng(3).standard_normal((3, 4)) * 100

    def layouts(dt):
        dt = np.dtype(dt)
        yield np.empty((3, 8), dt)[:, ::2]
        yield np.empty((3, 4), dt)[::-1, ::-1]
        yield np.empty((3, 4), dt, order="F")
        yield np.frombuffer(bytearray(12 * dt.itemsize + 1), np.uint8)[1:].view(dt).reshape(3, 4)
        yield np.empty((3, 4), dt.newbyteorder(">"))
        yield lowp.empty((3, 4), dt)

    for call, dt in ((lambda o: lowp.round(x, "bf16", out=o), np.float64),
                     (lambda o: lowp.round(x.astype(np.float32), "e4m3fn", out=o), np.float32),
                     (lambda o: lowp.encode(x, "bf16", out=o), np.uint16),
                     (lambda o: lowp.encode(x, "posit32", out=o), np.uint32),
                     (lambda o: lowp.decode(lowp.encode(x, "bf16"), "bf16", np.float64, out=o), np.float64)):
        want = call(None)
        for o in layouts(dt):
            assert call(o) is o
            np.testing.assert_array_equal(o, want)
    o = np.zeros((3, 8))[:, ::2]
    with pytest.raises(ValueError, match="NaN"):
        lowp.round(np.full((3, 4), np.nan), "int8", out=o)
    assert not o.any()
    r = lowp.decode(lowp.encode(x, "bf16"), "bf16", ">f4")
    assert r.dtype == np.dtype(">f4")
    np.testing.assert_array_equal(r, lowp.round(x.astype(np.float32), "bf16"))


def test_byte_swapped_inputs():
    x = np.linspace(-3, 3, 50)
    np.testing.assert_array_equal(lowp.round(x.astype(">f8"), "bf16"), lowp.round(x, "bf16"))
    r = lowp.round(x.astype(">f4"), "bf16")
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r, lowp.round(x.astype(np.float32), "bf16"))
    c = lowp.encode(x, "bf16")
    np.testing.assert_array_equal(lowp.decode(c.astype(">u2"), "bf16"), lowp.decode(c, "bf16"))
    # A byte order asked for by a numpy type string is kept, as by a dtype.
    for t in (">f4", ">f2", ">f8", "<f4", "f4"):
        r = lowp.cast(x, t)
        assert r.dtype == np.dtype(t), t
        np.testing.assert_array_equal(r, lowp.cast(x, np.dtype(t)))
    with pytest.raises(TypeError, match="^dtype"):
        lowp.cast(x, ">bf16")
    for name in ("", ">"):  # (format names: the message lists them)
        with pytest.raises(ValueError, match="^dtype: .*bf16"):
            lowp.cast(x, name)


def test_nan_products_into_accumulators_without_nan():
    """An accumulator format without NaN cannot take a NaN product (a NaN input, or an
    infinity times zero): the call raises naming the argument, as ``round`` does; an
    infinity times a nonzero value saturates as ``round`` saturates."""
    b = np.ones((2, 1), np.float32)
    for f in ("int8", lowp.FloatFormat(4, 3, nan=None)):
        top = lowp.round(np.array([np.inf]), f)[0]
        with pytest.raises(ValueError, match="^accumulate: .*no NaN"):
            lowp.matmul(np.array([[np.nan, 1.0]], np.float32), b, accumulate=f)
        with pytest.raises(ValueError, match="^accumulate: .*no NaN"):
            lowp.matmul(np.array([[np.inf, 1.0]], np.float32), np.array([[0.0], [1.0]], np.float32), accumulate=f)
        with pytest.raises(ValueError, match="^accumulate: .*no NaN"):
            lowp.matmul(np.array([0.0, 1.0], np.float32), np.array([[np.inf, 2.0], [1.0, 1.0]], np.float32), accumulate=f)
        assert lowp.matmul(np.array([0.0, 1.0], np.float32), np.array([[1.0, 2.0], [np.inf, 1.0]], np.float32),
                           accumulate=f)[0] == top
        with pytest.raises(ValueError, match="^accumulate: .*no NaN"):
            lowp.sum(np.array([np.nan, 1.0], np.float32), accumulate=f)
        assert lowp.matmul(np.array([[np.inf, 1.0]], np.float32), b, accumulate=f)[0, 0] == top
        # Stacks: the infinity meets a zero in the second product only.
        a = np.array([[[np.inf, 1.0]], [[np.inf, 1.0]]], np.float32)
        bs = np.array([[[1.0], [1.0]], [[0.0], [1.0]]], np.float32)
        with pytest.raises(ValueError, match="^accumulate"):
            lowp.matmul(a, bs, accumulate=f)
        assert lowp.matmul(a[:1], bs[:1], accumulate=f)[0, 0, 0] == top
    with pytest.raises(ValueError, match="^chunk_accumulate: .*no NaN"):
        lowp.matmul(np.array([[np.nan, 1.0]], np.float32), b, accumulate="bf16", chunk=1,
                    chunk_accumulate=lowp.FloatFormat(4, 3, nan=None))
    # Formats with NaN (or NaR) take it.
    assert np.isnan(lowp.matmul(np.array([[np.nan, 1.0]], np.float32), b, accumulate="e4m3fn")[0, 0])
    assert np.isnan(lowp.sum(np.array([np.nan, 1.0], np.float32), accumulate="posit16"))


def test_integer_out_dtype_must_hold_the_result():
    a, b = np.array([[1, 100]], np.int8), np.array([[-1], [100]], np.int8)
    assert lowp.matmul(a, b, out_dtype=np.int16)[0, 0] == 9999
    assert lowp.matmul(a, b, out_dtype=np.int64)[0, 0] == 9999
    for dt in (np.int8, np.uint8):
        with pytest.raises(ValueError, match="^out_dtype: .*from 9999 to 9999.* do not fit"):
            lowp.matmul(a, b, out_dtype=dt)
    assert lowp.matmul(a, b, out_dtype=np.uint16)[0, 0] == 9999
    with pytest.raises(ValueError, match="^out_dtype: .*from -1 to -1.* do not fit uint16"):
        lowp.matmul(a[:, :1], b[:1], out_dtype=np.uint16)
    with pytest.raises(ValueError, match="^out: .*do not fit int8"):
        lowp.matmul(a, b, out=np.empty((1, 1), np.int8))
    with pytest.raises(TypeError, match="^out_dtype: integer output dtype int32 needs an integer result"):
        lowp.qmatmul(lowp.quantize(np.ones((2, 2))), lowp.quantize(np.ones((2, 2))), out_dtype=np.int32)


def test_decode_rejects_codes_beyond_the_format():
    with pytest.raises(ValueError, match=r"^bits: codes of a 8-bit format lie in 0..255; got values from 1 to 300"):
        lowp.decode(np.array([300, 1], np.uint16), "e4m3fn")
    with pytest.raises(ValueError, match="^bits: codes of a 32-bit format"):
        lowp.decode(np.array([2**40], np.uint64), "posit32")
    with pytest.raises(ValueError, match="^bits: .*sign-extended"):
        lowp.decode(np.array([-129], np.int16), "int8")
    # Sign-extended codes from a signed dtype, and codes in range, decode.
    assert lowp.decode(np.array([-1, -128, 127], np.int16), "int8").tolist() == [-1, -128, 127]
    assert lowp.decode(np.array([0x40, 0xC0], np.uint32), "e4m3fn").tolist() == [2.0, -2.0]
    assert lowp.decode(np.array([-64], np.int16), "e4m3fn").tolist() == [-2.0]  # 0xC0
    assert lowp.decode(np.zeros(0, np.uint64), "bf16").shape == (0,)


def test_format_without_a_dtype_as_output_dtype():
    a = np.ones((2, 2), np.float32)
    for call in (lambda: lowp.matmul(a, a, out_dtype=lowp.FloatFormat(3, 2)),
                 lambda: lowp.padded_ld(8, lowp.FloatFormat(3, 2)),
                 lambda: lowp.empty((2, 2), lowp.FloatFormat(3, 2))):
        with pytest.raises(TypeError, match=r"^(out_dtype|dtype): FloatFormat\(3, 2\) has no numpy dtype"):
            call()


def test_huge_integer_arguments():
    a = np.ones((2, 2), np.float32)
    # A chunk beyond any depth is one run, as the depth itself is.
    assert lowp.matmul(a, a, accumulate="bf16", chunk=2**70).tolist() == lowp.matmul(a, a, accumulate="bf16", chunk=2).tolist()
    assert lowp.sum(np.ones(5, np.float32), accumulate="bf16", chunk=2**64) == 5
    with pytest.raises(ValueError, match="^n: "):
        lowp.padded_ld(2**64, np.float32)
    old = lowp.set_buffer_cache(2**70)
    assert lowp.buffer_cache_info()["limit"] >= 2**62
    lowp.set_buffer_cache(old)


def test_empty_arguments():
    with pytest.raises(TypeError, match="^shape"):
        lowp.empty((2.7, 3.9))
    with pytest.raises(TypeError, match="^shape"):
        lowp.empty((2, True))
    # padded_ld takes the dtypes empty takes: numbers, not objects, strings, raw bytes or records.
    for d in (object, "U4", "S4", "V4", [("a", "f4")]):
        with pytest.raises(TypeError, match="^dtype: expected a numeric dtype"):
            lowp.empty((2, 3), d)
        with pytest.raises(TypeError, match="^dtype: expected a numeric dtype"):
            lowp.padded_ld(3, d)
    assert lowp.empty((np.int64(2), 3), np.float32).shape == (2, 3)
    assert lowp.padded_ld(3, lowp.bfloat16) == lowp.padded_ld(3, np.float16) == 32


def test_unaligned_arrays():
    """Views at an odd byte offset (C-contiguous, not aligned) are read through a copy,
    and an unaligned ``out=`` (matmul's, round's) is written through a temporary."""
    import ml_dtypes

    from lowp import sparse

    buf = np.zeros(4 * 6 + 1, np.uint8)
    x = np.ndarray((6,), np.float32, buf, offset=1)
    x[:] = [1.0, -2.5, 3.0, 1e-3, 7.0, -0.0]
    assert x.flags.c_contiguous and not x.flags.aligned
    ref = x.copy()
    assert lowp.round(x, "bf16").tolist() == lowp.round(ref, "bf16").tolist()
    assert lowp.encode(x, "e4m3fn").tolist() == lowp.encode(ref, "e4m3fn").tolist()
    assert lowp.cast(x, "bf16").astype(np.float32).tolist() == lowp.cast(ref, "bf16").astype(np.float32).tolist()
    assert lowp.quantize(x).values.tolist() == lowp.quantize(ref).values.tolist()
    codes = np.ndarray((6,), np.uint16, buf, offset=1)
    assert np.array_equal(lowp.decode(codes, "bf16"), lowp.decode(codes.copy(), "bf16"))
    m = sparse.CSR.from_dense(np.eye(6, dtype=np.float32))
    assert (m @ x).tolist() == ref.tolist()
    ob = np.zeros(2 * 4 + 1, np.uint8)
    out = np.ndarray((2, 2), ml_dtypes.bfloat16, ob, offset=1)
    r = lowp.matmul(np.ones((2, 2), np.float32), np.full((2, 2), 1.5, np.float32), out=out)
    assert r is out and out.astype(np.float32).tolist() == [[3.0, 3.0], [3.0, 3.0]]
    o = np.ndarray((6,), np.float32, np.zeros(25, np.uint8), offset=1)
    assert lowp.round(ref, "bf16", out=o) is o and o.tolist() == lowp.round(ref, "bf16").tolist()


def test_bsr_from_scipy_checks_its_blocks():
    sp = pytest.importorskip("scipy.sparse")
    from lowp import sparse

    m = sp.bsr_array(np.eye(4, dtype=np.float32), blocksize=(2, 2))
    assert sparse.BSR.from_scipy(m).to_dense().tolist() == np.eye(4).tolist()
    m.data = m.data[:1]
    with pytest.raises(ValueError, match=r"^m\.data: expected shape \(2, 2, 2\) \(2 blocks of 2x2"):
        sparse.BSR.from_scipy(m)


def test_small_edge_cases():
    from lowp import sparse

    assert sparse.prune(np.array(3.0), 0.0) == 3.0
    assert sparse.prune(np.array(3.0), 1.0) == 0.0
    # posit<2, 0> holds 0, 1, -1 and NaR: below 1 lies 0.
    fi = lowp.finfo(lowp.PositFormat(2, 0))
    assert fi.eps == 1.0 and fi.max == 1.0
    assert lowp.nextafter(np.array([0.5]), np.array([-np.inf]), lowp.PositFormat(3, 0))[0] == 0.0
    with pytest.raises(ValueError, match="^indptr: length must be 4 .*columns of CSC"):
        sparse.CSC((np.ones(1, np.float32), np.zeros(1, np.int32), np.array([0, 1, 1, 1, 1])), shape=(2, 3))


def test_thread_count_from_the_environment():
    """A LOWP_NUM_THREADS outside 1..1024 (or not a number) is ignored with a warning;
    one in range is used. (Beyond it, the pool would start every thread at import.)"""
    import os
    import subprocess
    import sys

    code = "import warnings, lowp; print(lowp.get_num_threads())"
    for value, ok in (("99999999999", False), ("5000", False), ("abc", False), ("0", False), (" 1 ", True)):
        env = dict(os.environ, LOWP_NUM_THREADS=value)
        p = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        if ok:
            assert p.stdout.strip() == "1" and "LOWP_NUM_THREADS" not in p.stderr
        else:
            assert "LOWP_NUM_THREADS" in p.stderr and "ignored" in p.stderr
            assert 1 <= int(p.stdout.strip()) <= (os.cpu_count() or 1)


def test_isa_from_the_environment():
    """An unknown LOWP_ISA is ignored with a warning (the best path runs); a known one is used."""
    import os
    import subprocess
    import sys

    code = "import warnings, lowp; from lowp import _lowp; print(_lowp.get_isa(), _lowp.detected_isa())"
    for value, ok in (("bogus", False), ("SCALAR", False), ("", False), (" scalar ", True)):
        env = dict(os.environ, LOWP_ISA=value)
        p = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 0, p.stderr
        used, best = p.stdout.split()
        if ok:
            assert used == "scalar" and "LOWP_ISA" not in p.stderr
        else:
            assert used == best and "LOWP_ISA" in p.stderr and "ignored" in p.stderr


def test_int32_chunk_accumulator_is_refused_alike():
    """``chunk_accumulate="int32"`` is an invalid value for matmul and sum alike."""
    x = np.ones((3, 3), np.float32)
    with pytest.raises(ValueError, match="^chunk_accumulate: expected a float format"):
        lowp.matmul(x, x, accumulate="bf16", chunk=2, chunk_accumulate="int32")
    with pytest.raises(ValueError, match="^chunk_accumulate: expected a float format"):
        lowp.sum(x, accumulate="bf16", chunk=2, chunk_accumulate="int32")


def test_cast_to_a_dtype_name_without_a_format_names_dtype():
    with pytest.raises(TypeError, match="^dtype: "):
        lowp.cast(np.ones(2), "float128")


def test_more_argument_types_are_checked():
    """Wrong types are refused by name (TypeError), not read as something else."""
    from lowp import sparse, training

    x = np.eye(3, dtype=np.float32)
    M = sparse.CSR.from_dense(x)
    cases = [
        (lambda: M.matmul(np.ones(3, np.float32), transpose="no"), "transpose"),
        (lambda: sparse.prune(None, 0), "x"),
        (lambda: sparse.prune(np.zeros(3, complex), 0), "x"),
        (lambda: M.asformat(["csr"]), "format"),
        (lambda: M.astype(np.int8, scale=True), "scale"),
        (lambda: M.astype(np.int8, scale="abc"), "scale"),
        (lambda: lowp.empty({}, np.float32), "shape"),
        (lambda: lowp.empty((2, 3), padded="no"), "padded"),
        (lambda: lowp.empty((2, 3), None), "dtype"),
        (lambda: lowp.padded_ld(3, None), "dtype"),
        (lambda: lowp.decode(np.array([1], np.uint16), "bf16", None), "dtype"),
        (lambda: lowp.set_num_threads(True), "n"),
        (lambda: lowp.set_num_threads(None), "n"),
        (lambda: lowp.QuantizedArray(None, None, None, None, None), "values"),
        (lambda: lowp.QuantizedArray(np.zeros(2, np.int8), 1.0, 0, None, "bf16"), "fmt"),
        (lambda: lowp.QuantizedArray(np.zeros(2, np.int8), "s", 0, None, "int8"), "scale"),
        (lambda: lowp.QuantizedArray(np.zeros(2, np.int8), 1.0, 0.5, None, "int8"), "zero_point"),
        (lambda: training.LossScaler().unscale(None), "grads"),
        (lambda: training.LossScaler().step(None, [np.ones(2, np.float32)]), "optimizer"),
    ]
    for f, arg in cases:
        with pytest.raises(TypeError, match=f"^{arg}: "):
            f()
    model = training.MLP([3, 2], training.QuantConfig())
    for bad in (np.zeros((2, 3), "M8[D]"), np.zeros((2, 3), complex), np.zeros((2, 3), object), "abc"):
        for f in (model.forward, model.predict, lambda v: model.evaluate(v, [0, 1]), lambda v: model.grads(v, [0, 1])):
            with pytest.raises(TypeError, match="^x: expected real numbers"):
                f(bad)
    with pytest.raises(TypeError, match="^optimizer: "):
        model.train_step(np.ones((2, 3), np.float32), [0, 1], None)
    # Lists, ints and low-precision arrays are still inputs.
    assert model.forward([[1, 2, 3]]).shape == (1, 2)
    assert model.forward(np.ones((1, 3), lowp.bfloat16)).shape == (1, 2)


def test_more_argument_values_are_checked():
    """Values out of range are ValueErrors naming the argument."""
    from lowp import sparse, training, testing

    x = np.eye(3, dtype=np.float32)
    cases = [
        (lambda: sparse.CSR((np.ones(1, np.float32), np.array([0]), np.array([0, 1, 1])), shape=(2, 3, 4)), "shape"),
        (lambda: sparse.BSR.from_dense(x, blocksize=(1, 1, 1)), "blocksize"),
        # (Sparse shapes and block sizes of other types are invalid parameters, as in scipy.)
        (lambda: sparse.BSR.from_dense(x, blocksize=1.5), "blocksize"),
        (lambda: sparse.BSR.from_dense(x, blocksize=(1.5, 1)), "blocksize"),
        (lambda: sparse.CSR((np.ones(1, np.float32), np.array([0]), np.array([0, 1, 1])), shape=(2.0, 3)), "shape"),
        (lambda: sparse.CSR((2.0, 3)), "arg"),
        (lambda: lowp.empty(2**70), "shape"),
        (lambda: lowp.empty((2**40, 2**40)), "shape"),
        (lambda: lowp.empty((2**40, 2**40), padded=False), "shape"),
        (lambda: lowp.QuantizedArray(np.zeros((2, 2), np.int8), 1.0, 0, 5, "int8"), "axis"),
        (lambda: lowp.QuantizedArray(np.zeros((2, 2), np.int8), np.ones(3), 0, 1, "int8"), "scale"),
        (lambda: lowp.QuantizedArray(np.zeros(2, np.int8), -1.0, 0, None, "int8"), "scale"),
        (lambda: training.Fp8Scaling(amax_history_len=2**70), "amax_history_len"),
        (lambda: training.QuantConfig(fp8_scaling=True, amax_history_len=2**70), "amax_history_len"),
        (lambda: testing.encoding_class(2**2000, "bf16"), "value"),
        (lambda: training.MLP([4, 2**70]), "sizes"),
        (lambda: sparse.CSR((2**62, 2**62)), "shape"),
        (lambda: sparse.CSC((2**62, 2**62)), "shape"),
        (lambda: sparse.BSR((2**62, 2**62)), "shape"),
        (lambda: sparse.COO((2**64 + 5, 3)), "arg"),
        (lambda: sparse.CSR((1, 2**64 + 5)), "arg"),
        (lambda: sparse.CSC((2**63, 1)), "arg"),
        (lambda: sparse.BSR((1, 2**64 + 5)), "arg"),
    ]
    for f, arg in cases:
        with pytest.raises(ValueError, match=f"^{arg}: "):
            f()
    # Shapes as numpy takes them, those without elements too (no rows to pad).
    assert lowp.empty(np.array([2, 3]), np.float32).shape == (2, 3) and lowp.empty(range(2, 4)).shape == (2, 3)
    for shape in ((2**54, 0), (0, 2**54), (3, 0), (0, 5, 7)):
        assert lowp.empty(shape, np.float64).shape == np.empty(shape, np.float64).shape == shape
    # prune_nm groups along any axis of an array of many dimensions.
    a = np.random.default_rng(0).standard_normal((1,) * 30 + (3, 8)).astype(np.float32)
    assert (sparse.prune_nm(a) != 0).sum() == 12
    b = np.random.default_rng(1).standard_normal((5, 7, 10)).astype(np.float32)
    for axis, kept in ((0, 210), (1, 200), (2, 210)):
        r = sparse.prune_nm(b, axis=axis)
        assert (r != 0).sum() == kept
        np.testing.assert_array_equal(r[r != 0], b[r != 0])


def test_ulp_helpers_take_values_beyond_float64():
    """Distances past float64's range are infinite (and fail any ulps), not OverflowError."""
    from lowp import testing

    assert testing.ulp_distance(2**2000, 1.0, "bf16") == np.inf
    assert testing.ulp_distance(np.longdouble("1e4000"), 1.0, "bf16") == np.inf or np.longdouble("1e4000") == np.inf
    assert testing.ulp_distance(2**2000, 2**2000, "bf16") == 0
    with pytest.raises(AssertionError):
        testing.assert_ulp_close(1.0, 2**2000, "bf16", ulps=1)


def test_thread_and_cache_counts_take_index_objects():
    """Objects with ``__index__`` count as ints (as numpy's own integer arguments), bools,
    floats and strings do not."""

    class Two:
        def __index__(self) -> int:
            return 2

    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(Two())
        assert lowp.get_num_threads() == 2
        lowp.set_num_threads(np.uint8(1))
        assert lowp.get_num_threads() == 1
    finally:
        lowp.set_num_threads(n0)
    old = lowp.set_buffer_cache(Two())
    assert lowp.set_buffer_cache(old) == 2
    for bad in (2.0, "2", np.bool_(True), False):
        with pytest.raises(TypeError, match="^n: expected an int"):
            lowp.set_num_threads(bad)
        with pytest.raises(TypeError, match="^nbytes: expected an int"):
            lowp.set_buffer_cache(bad)


@pytest.mark.parametrize("padded", [True, False])
def test_empty_of_shapes_past_numpys_range_names_the_shape(padded):
    """Shapes numpy refuses (also with a zero dimension beside a huge one) raise ValueError
    naming ``shape``; shapes numpy takes work."""
    for shape in [(0, 2**61), (2**61, 0), (2**40, 2**40), (2**63,)]:
        with pytest.raises(ValueError):
            np.empty(shape, np.float32)
        with pytest.raises(ValueError, match=r"^shape: \(.*\) is too large"):
            lowp.empty(shape, np.float32, padded=padded)
    assert lowp.empty((0, 2**40), np.float32, padded=padded).shape == (0, 2**40)
    assert lowp.empty((0, 3), lowp.bfloat16, padded=padded).shape == (0, 3)


def test_masked_arrays_are_refused_everywhere():
    """A masked array's hidden values would be used (a NaN under the mask came through
    matmul, round, sum and cast; quantize refused it for that NaN): every lowp function
    refuses masked arrays, naming the argument, the sparse constructors included."""
    from lowp import sparse

    ma = np.ma.MaskedArray([[1, np.nan], [3, 4]], mask=[[0, 1], [0, 0]], dtype=np.float32)
    calls = {"a": [lambda: lowp.matmul(ma, np.eye(2, dtype=np.float32))],
             "b": [lambda: lowp.matmul(np.eye(2, dtype=np.float32), ma)],
             "x": [lambda: lowp.round(ma, "bf16"), lambda: lowp.sum(ma), lambda: lowp.cast(ma, lowp.bfloat16),
                   lambda: lowp.encode(ma, "bf16"), lambda: lowp.quantize(ma), lambda: sparse.CSR.from_dense(ma),
                   lambda: lowp.ulp(ma, "bf16"), lambda: sparse.prune(ma, 0.5)]}
    from lowp import training

    eye = sparse.CSR.from_dense(np.eye(2, dtype=np.float32))
    col = np.ma.MaskedArray([[1.0], [1e30]], mask=[[0], [1]], dtype=np.float32)
    i2 = np.array([0, 1])
    mi = np.ma.MaskedArray(i2, mask=[0, 1])
    md = ma[:, 0].copy()
    p = np.zeros(2, np.float32)
    calls["x"] += [lambda: eye @ col, lambda: col.T @ eye, lambda: eye.matmul(col)]
    calls["data"] = [lambda: sparse.COO((md, (i2, i2)), shape=(2, 2)), lambda: sparse.CSR((md, i2, np.array([0, 1, 2]))),
                     lambda: sparse.CSC((md, i2, np.array([0, 1, 2]))), lambda: setattr(eye, "data", md),
                     lambda: sparse.BSR((np.ma.MaskedArray(np.ones((1, 2, 2)), mask=True), [0], [0, 1]), shape=(2, 2)),
                     lambda: sparse.NM((np.ma.MaskedArray(np.ones((2, 2)), mask=True), np.zeros((2, 2), np.int64)),
                                       shape=(2, 4))]
    calls["row"] = [lambda: sparse.COO((np.ones(2), (mi, i2)), shape=(2, 2))]
    calls["indices"] = [lambda: sparse.CSR((np.ones(2), mi, np.array([0, 1, 2])))]
    calls["out"] = [lambda: lowp.round(np.ones(2), "bf16", out=np.ma.zeros(2)),
                    lambda: lowp.encode(np.ones(2), "bf16", out=np.ma.zeros(2, np.uint16)),
                    lambda: lowp.matmul(np.eye(2, dtype=np.float32), np.eye(2, dtype=np.float32), out=np.ma.zeros((2, 2), np.float32))]
    calls[r"params\[0\]"] = [lambda: training.SGD([np.ma.zeros(2, np.float32)], lr=0.1)]
    calls[r"grads\[0\]"] = [lambda: training.SGD([p], lr=0.1).step([np.ma.MaskedArray([1.0, np.nan], mask=[0, 1])]),
                              lambda: training.LossScaler().unscale([np.ma.zeros(2, np.float32)])]
    for arg, fs in calls.items():
        for f in fs:
            with pytest.raises(TypeError, match=f"^{arg}: masked arrays are not supported"):
                f()
    assert not p.any() and np.array_equal(eye.to_dense(), np.eye(2))
    # Other ndarray subclasses are arrays as before.
    class Sub(np.ndarray):
        pass

    m = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32).view(Sub)
    np.testing.assert_array_equal(lowp.matmul(m, np.eye(2, dtype=np.float32)), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(lowp.round(m, "bf16"), [[1, 2], [3, 4]])
