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
    with pytest.raises(ValueError, match="^out.*contiguous"):
        lowp.round(x, "bf16", out=np.empty((3, 8))[:, ::2])
    with pytest.raises(ValueError, match="^out"):
        ro = np.empty_like(x)
        ro.flags.writeable = False
        lowp.round(x, "bf16", out=ro)
    with pytest.raises(TypeError, match="^out"):
        lowp.round(x, "bf16", out=[0.0] * 12)
    codes = np.empty((3, 4), np.uint16)
    assert lowp.encode(x, "bf16", out=codes) is codes
    with pytest.raises(TypeError, match="^out.*dtype"):
        lowp.encode(x, "bf16", out=np.empty((3, 4), np.uint8))
    with pytest.raises(ValueError, match="^out.*contiguous"):
        lowp.encode(x, "bf16", out=np.empty((3, 8), np.uint16)[:, ::2])
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
    with pytest.raises(ValueError, match="^isa"):
        _lowp.set_isa("avx512")
    with pytest.raises(ValueError, match="^isa"):
        _lowp.set_isa("neon")
    assert _lowp.get_isa() in ("scalar", "sse2", "avx2")


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


def test_byte_swapped_inputs():
    x = np.linspace(-3, 3, 50)
    np.testing.assert_array_equal(lowp.round(x.astype(">f8"), "bf16"), lowp.round(x, "bf16"))
    r = lowp.round(x.astype(">f4"), "bf16")
    assert r.dtype == np.float32
    np.testing.assert_array_equal(r, lowp.round(x.astype(np.float32), "bf16"))
    c = lowp.encode(x, "bf16")
    np.testing.assert_array_equal(lowp.decode(c.astype(">u2"), "bf16"), lowp.decode(c, "bf16"))
