"""int8 quantization: ranges, per-tensor and per-axis scales, calibration, every rounding
mode against numpy's own integer rounding, dequantization error, exact zero."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

import lowp


def data(shape=(64, 48), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * rng.uniform(0.1, 10, shape[-1])).astype(np.float32)


def ref_round(y, mode):
    """Integer rounding of float64 y by numpy (ties of nearest_away away from zero)."""
    if mode == "nearest_even":
        return np.rint(y)
    if mode == "nearest_away":
        fl = np.floor(y)
        frac = y - fl  # exact for |y| < 2^52
        return np.where(frac > 0.5, fl + 1, np.where(frac < 0.5, fl, np.where(y > 0, fl + 1, fl)))
    if mode == "toward_zero":
        return np.trunc(y)
    if mode == "up":
        return np.ceil(y)
    if mode == "down":
        return np.floor(y)
    if mode == "odd":
        fl = np.floor(y)
        return np.where(fl == y, y, np.where(fl % 2 == 1, fl, fl + 1))
    raise ValueError(mode)


DET_MODES = ["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd"]


@pytest.mark.parametrize("mode", DET_MODES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_per_tensor_every_mode(mode, symmetric):
    x = data()
    q = lowp.quantize(x, "int8", symmetric=symmetric, rounding=mode)
    assert q.values.dtype == np.int8 and q.values.shape == x.shape and q.axis is None
    scale = np.float64(q.scale)
    zp = np.float64(q.zero_point)
    lo, hi = (-127, 127) if symmetric else (-128, 127)
    # The mode rounds x / scale; the zero point is added after (as ONNX and PyTorch).
    want = np.clip(ref_round(x.astype(np.float64) / scale, mode) + zp, lo, hi)
    np.testing.assert_array_equal(q.values.astype(np.float64), want)
    assert q.values.min() >= lo and q.values.max() <= hi
    if symmetric:
        assert zp == 0
        assert scale == np.float32(np.abs(x).max() / 127)
    deq = q.dequantize()
    assert deq.dtype == np.float32 and deq.shape == x.shape
    err = np.abs(deq.astype(np.float64) - x)
    bound = (0.5 if mode.startswith("nearest") else 1.0) * scale + np.abs(x) * 2.0**-22
    assert np.all(err <= bound), err.max() / scale


def test_ranges_are_reached():
    x = np.linspace(-3, 5, 1001).astype(np.float32)
    s = lowp.quantize(x, symmetric=True)
    assert s.values.min() == -75 or s.values.min() >= -127  # -3/5 * 127
    assert s.values.max() == 127 and s.values[np.argmax(np.abs(x))] == 127
    a = lowp.quantize(x, symmetric=False)
    assert a.values.min() == -128 and a.values.max() == 127
    y = -x
    s = lowp.quantize(y, symmetric=True)
    assert s.values.min() == -127


@pytest.mark.parametrize("shift", [0.0, 3.0, -7.5, 100.0])
def test_asymmetric_zero_maps_exactly(shift):
    x = (data((50, 20), seed=2) + shift).astype(np.float32)
    x[3, 4] = 0.0
    q = lowp.quantize(x, symmetric=False)
    assert q.values[3, 4] == q.zero_point
    assert q.dequantize()[3, 4] == 0.0
    assert -128 <= int(q.zero_point) <= 127
    z = lowp.quantize(np.zeros(5, np.float32), symmetric=False)
    np.testing.assert_array_equal(z.dequantize(), 0)


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("symmetric", [True, False])
def test_per_axis(axis, symmetric):
    x = data((16, 24), seed=3)
    q = lowp.quantize(x, axis=axis, symmetric=symmetric)
    ax = axis % 2
    assert q.scale.shape == (x.shape[ax],) and q.zero_point.shape == (x.shape[ax],)
    for i in range(x.shape[ax]):
        sl = np.take(x, i, axis=ax)
        qi = lowp.quantize(sl, symmetric=symmetric)
        np.testing.assert_array_equal(np.take(q.values, i, axis=ax), qi.values)
        assert q.scale[i] == qi.scale and q.zero_point[i] == qi.zero_point
    deq = q.dequantize()
    sc = np.expand_dims(q.scale.astype(np.float64), 1 - ax)
    assert np.all(np.abs(deq - x) <= sc / 2 + np.abs(x) * 2.0**-22)
    if symmetric:
        assert np.all(np.abs(q.values).max(axis=1 - ax) == 127)


def test_per_axis_3d():
    x = data((4, 5, 6), seed=4)
    q = lowp.quantize(x, axis=1)
    assert q.scale.shape == (5,)
    np.testing.assert_array_equal(q.scale, np.abs(x).max(axis=(0, 2)) / np.float32(127))


@pytest.mark.parametrize("p", [50, 90, 99.9, 100])
def test_percentile_calibration(p):
    x = data((200, 10), seed=5)
    q = lowp.quantize(x, calibration=("percentile", p))
    assert np.float32(q.scale) == np.float32(np.percentile(np.abs(x.astype(np.float64)), p) / 127)
    clipped = np.abs(x) > np.percentile(np.abs(x), p) * (1 + 1e-6)
    assert np.all(np.abs(q.values[clipped]) == 127)
    qa = lowp.quantize(x, calibration=("percentile", p), symmetric=False)
    assert qa.values.min() >= -128 and qa.values.max() <= 127
    if p == 100:
        m = lowp.quantize(x)
        np.testing.assert_array_equal(q.values, m.values)


def test_stochastic_quantize():
    x = data((100, 100), seed=6)
    a = lowp.quantize(x, rounding="stochastic", seed=3)
    b = lowp.quantize(x, rounding="stochastic", seed=3)
    c = lowp.quantize(x, rounding="stochastic", seed=4)
    np.testing.assert_array_equal(a.values, b.values)
    assert not np.array_equal(a.values, c.values)
    y = x.astype(np.float64) / np.float64(a.scale)
    v = a.values.astype(np.float64)
    assert np.all((v == np.floor(y)) | (v == np.ceil(y)) | (np.abs(v) == 127))
    # unbiased: the mean error over many elements is small
    err = (a.dequantize() - x).astype(np.float64)
    assert abs(err.mean()) < 4 * a.scale / np.sqrt(12 * x.size) * 2


def test_quantize_inputs_and_repr():
    q = lowp.quantize([0.5, -1.0, 0.25], "int8")
    assert q.values.tolist() == [64, -127, 32]  # 63.5 ties to even
    assert q.shape == (3,) and q.dtype == np.int8
    assert "QuantizedArray" in repr(q) and "int8" in repr(q)
    q64 = lowp.quantize(np.array([1.0, 2.0]), lowp.IntFormat(8))
    assert q64.values.tolist() == [64, 127] or q64.values.tolist() == [63, 127]
    e = lowp.quantize(np.zeros((0, 3), np.float32))
    assert e.values.shape == (0, 3)


@pytest.mark.parametrize("bad,exc,match", [
    (dict(rounding="nearest"), ValueError, "rounding"),
    (dict(calibration="minmax"), ValueError, "calibration"),
    (dict(calibration=("percentile", 0)), ValueError, "calibration"),
    (dict(calibration=("percentile", 101)), ValueError, "calibration"),
    (dict(axis=2), ValueError, "axis"),
    (dict(axis=1.5), TypeError, "axis"),
])
def test_quantize_bad_arguments(bad, exc, match):
    with pytest.raises(exc, match=match):
        lowp.quantize(data((4, 4)), **bad)


def test_quantize_bad_values():
    with pytest.raises(ValueError, match="x"):
        lowp.quantize(np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="x"):
        lowp.quantize(np.array([1.0, np.inf]))
    with pytest.raises(ValueError, match="fmt"):
        lowp.quantize(np.ones(3), "bf16")
    # Scales are float32: values whose scale would pass its range are refused, not clipped.
    for sym in (True, False):
        with pytest.raises(ValueError, match="^x: values up to 2e\\+300 need a scale beyond float32"):
            lowp.quantize(np.array([1e300, -2e300]), symmetric=sym)
    assert lowp.quantize(np.array([1e38, -2e38]), symmetric=True).dequantize()[1] == pytest.approx(-2e38, rel=1e-2)
    with pytest.raises(TypeError, match="x"):
        lowp.quantize(np.array(["a", "b"]))


TINIEST = float(np.finfo(np.float32).smallest_subnormal)  # 2**-149


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("axis", [None, 1])
def test_quantize_tiny_values(symmetric, axis):
    """Ranges whose exact scale is below float32's normal range get the smallest float32
    scale at or above it: the calibrated range fits, values are within half a step, and
    float32 subnormals that are multiples of the scale come back exactly."""
    steps = np.array([[7, -7, 157, -3, 100, 1], [0, 1, -1, 127, -127, 64], [3, 2, 1, 0, -1, -2]], np.float64)
    cases = [np.array([[1e-44, -1e-44]], np.float32), (steps * TINIEST).astype(np.float32).T,
             np.array([[1e-40, 3e-41, -2e-39], [5e-45, 0, 1e-38]], np.float32)]
    for x in cases:
        q = lowp.quantize(x, symmetric=symmetric, axis=axis)
        scale = np.asarray(q.scale, np.float64)
        zp = np.asarray(q.zero_point, np.float64)
        if axis is not None:
            scale, zp = scale[None, :], zp[None, :]
        x64 = x.astype(np.float64)
        hi = np.abs(x64).max(axis=None if axis is None else 0)
        lo, top = x64.min(axis=None if axis is None else 0), x64.max(axis=None if axis is None else 0)
        exact = hi / 127 if symmetric else (np.maximum(top, 0) - np.minimum(lo, 0)) / 255
        s = np.ravel(scale)
        exact = np.broadcast_to(np.atleast_1d(exact), s.shape)
        assert np.all(s > 0) and np.all((s >= exact) | (exact == 0))
        assert np.all(q.values >= (-127 if symmetric else -128)) and np.all(q.values <= 127)
        # Within half a step of x (nothing clipped), by the float64 reference.
        err = np.abs((q.values.astype(np.float64) - zp) * scale - x64)
        assert np.all(err <= scale / 2), (err / scale).max()
        # Every scale that is a float32 subnormal is the smallest float32 not below the exact one.
        sub = s < np.finfo(np.float32).tiny
        assert np.all(np.nextafter(s[sub].astype(np.float32), np.float32(0)) < exact[sub])
    q = lowp.quantize(cases[0], symmetric=symmetric)
    np.testing.assert_array_equal(q.dequantize(), cases[0])  # 1e-44 is 7 * 2**-149: exact
    assert q.scale == np.float32(TINIEST)


@pytest.mark.parametrize("symmetric", [True, False])
def test_quantize_values_below_any_float32_scale(symmetric):
    """float64 values below one step of the smallest float32 scale cannot be quantized
    with a float32 scale: refused, as scales past float32's largest value are."""
    for x, axis in ((np.array([1e-50, -3e-50]), None), (np.array([[1e-50, 1.0], [0.0, -2.0]]), 1),
                    (np.array([TINIEST * 0.4, 0.0]), None)):
        with pytest.raises(ValueError, match="^x: .*smallest float32 scale"):
            lowp.quantize(x, symmetric=symmetric, axis=axis)
    for x in (np.array([TINIEST, 0.0]), np.zeros(3)):  # one step, and no range at all
        q = lowp.quantize(x, symmetric=symmetric)
        np.testing.assert_array_equal(q.dequantize(), x.astype(np.float32))


def test_asymmetric_percentile_below_50_is_refused():
    """An asymmetric range keeps the values between percentiles 100 - p and p: below 50
    they cross, which used to collapse the range to nothing."""
    x = data()
    with pytest.raises(ValueError, match="calibration"):
        lowp.quantize(x, symmetric=False, calibration=("percentile", 10))
    q = lowp.quantize(x, symmetric=False, calibration=("percentile", 50))
    assert q.values.min() >= -128 and q.values.max() <= 127
    # Symmetric calibration reads |x|: every p in (0, 100] is meaningful.
    q = lowp.quantize(x, calibration=("percentile", 10))
    assert np.isclose(float(q.scale), np.percentile(np.abs(x.astype(np.float64)), 10) / 127, rtol=1e-6)


@pytest.mark.parametrize("bad", [None, "no", 1, 0.0])
def test_symmetric_must_be_a_bool(bad):
    with pytest.raises(TypeError, match="symmetric"):
        lowp.quantize(data(), symmetric=bad)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("calibration", ["max", ("percentile", 99.0)])
@pytest.mark.parametrize("shape,axis", [((3, 0), 0), ((0, 3), 1), ((2, 0, 4), 2), ((0, 5), 0)])
def test_empty_arrays_keep_one_scale_per_index_along_axis(symmetric, calibration, shape, axis):
    q = lowp.quantize(np.zeros(shape, np.float32), axis=axis, symmetric=symmetric, calibration=calibration)
    assert np.shape(q.scale) == (shape[axis],) and np.shape(q.zero_point) == (shape[axis],)
    assert q.dequantize().shape == shape


F32_MAX = float(np.finfo(np.float32).max)


@pytest.mark.parametrize("x,symmetric", [
    ([F32_MAX], True), ([-F32_MAX, 1.0], True), ([F32_MAX, -F32_MAX], False), ([3.4e38, -3.4e38], False),
    ([-F32_MAX, 0.0], False), ([F32_MAX, 0.0], False), ([3.3e38, -1e38], False)])
def test_ranges_at_float32s_top_dequantize_finite(x, symmetric):
    """A scale that rounds up (or a zero point rounded by half a step) must not send the
    extreme codes past float32's largest value: every accepted range dequantizes finite,
    within one step of the input."""
    a = np.array(x, np.float32)
    with np.errstate(over="raise"):
        q = lowp.quantize(a, symmetric=symmetric)
        d = q.dequantize()
    assert np.isfinite(d).all()
    assert np.all(np.abs(d.astype(np.float64) - a) <= float(q.scale) * 1.0001)
    if symmetric:  # rounded down there: the largest value is a fraction of a step off
        assert abs(float(d[0]) - float(a[0])) <= 0.5 * float(q.scale)


@pytest.mark.parametrize("out_dtype,want", [(None, np.float32), (np.float64, np.float64)])
def test_qmatmul_out_dtype_none_is_the_default(out_dtype, want):
    qa = lowp.quantize(data((4, 8)))
    qb = lowp.quantize(data((8, 3), seed=1))
    r = lowp.qmatmul(qa, qb, out_dtype=out_dtype)
    assert r.dtype == want
    np.testing.assert_allclose(r, lowp.qmatmul(qa, qb), rtol=1e-6)


def _exact_round(q, mode):
    """An exact rational q rounded to an integer in ``mode``."""
    import math
    from fractions import Fraction

    fl = math.floor(q)
    fr = q - fl
    if fr == 0:
        return fl
    half = Fraction(1, 2)
    return fl + {"nearest_even": fr > half or (fr == half and fl % 2 == 1),
                 "nearest_away": fr > half or (fr == half and q > 0),
                 "toward_zero": q < 0, "up": True, "down": False, "odd": fl % 2 == 0}[mode]


@pytest.mark.parametrize("mode", DET_MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_asymmetric_rounds_the_exact_quotient_then_adds_the_zero_point(mode, dtype):
    """values = clip(round(x / scale) + zero_point): the mode acts on the exact quotient
    (as ONNX and PyTorch), and float64 input is rounded once, not through x / scale."""
    from fractions import Fraction

    rng = np.random.default_rng(7)
    for bits in (4, 8, 12):
        x = (rng.standard_normal(1500) + 0.7).astype(dtype)
        q = lowp.quantize(x, lowp.IntFormat(bits), symmetric=False, rounding=mode)
        s, zp = Fraction(float(q.scale)), int(q.zero_point)
        qmax = 2 ** (bits - 1) - 1
        # Ties of x / scale: the quotient's halves, and (float64) just below them.
        t = np.array([0.5, -0.5, 2.5, -3.5], np.float64) * float(q.scale)
        xs = np.concatenate([x.astype(np.float64), t, np.nextafter(t, 0)]) if dtype == np.float64 else x
        q = lowp.quantize(xs, lowp.IntFormat(bits), symmetric=False, rounding=mode)
        s, zp = Fraction(float(q.scale)), int(q.zero_point)
        want = [min(max(_exact_round(Fraction(float(v)) / s, mode) + zp, -qmax - 1), qmax) for v in xs]
        np.testing.assert_array_equal(q.values.astype(np.int64), want)
        d = q.dequantize()
        np.testing.assert_array_equal(d, np.array([float((int(v) - zp) * s) for v in q.values], np.float32))


def test_quantize_edge_cases():
    from fractions import Fraction

    q = lowp.quantize(np.float32(2.5))  # a 0-d input
    assert isinstance(q.values, np.ndarray) and q.values.shape == () and q.dequantize() == np.float32(2.5)
    # Wider than float32's 24 bits, dequantize still rounds the exact value once.
    x = np.array([1e-6, -3.0, 2.5, 1.2345678])
    q = lowp.quantize(x, lowp.IntFormat(32), symmetric=False)
    s, zp = Fraction(float(q.scale)), int(q.zero_point)
    want = np.array([float((int(v) - zp) * s) for v in q.values], np.float32)
    np.testing.assert_array_equal(q.dequantize(), want)
    # The constructor stores float32 scales and refuses what float32 cannot hold.
    assert lowp.QuantizedArray(np.array([1, 2], np.int8), 0.1, 0, None, "int8").scale.dtype == np.float32
    for bad in (1e-300, 1e300):
        with pytest.raises(ValueError, match="^scale: "):
            lowp.QuantizedArray(np.zeros(2, np.int8), bad, 0, None, "int8")
    with pytest.raises(ValueError, match="^values: "):
        lowp.QuantizedArray(np.array([200], np.int16), 1.0, 0, None, "int8")


def test_qmatmul_rounds_once():
    """The exact result, (sum of integer products) * sa * sb, rounded once into out_dtype."""
    from fractions import Fraction

    rng = np.random.default_rng(3)
    for trial in range(40):
        k = int(rng.integers(1, 1500))
        qa = lowp.QuantizedArray(rng.integers(-128, 128, (3, k)).astype(np.int8), np.float32(rng.uniform(0.1, 3)),
                                 int(rng.integers(-20, 20)), None, "int8")
        qb = lowp.QuantizedArray(rng.integers(-128, 128, (k, 2)).astype(np.int8), np.float32(rng.uniform(0.1, 3)),
                                 int(rng.integers(-20, 20)), None, "int8")
        r = lowp.qmatmul(qa, qb)
        ia = qa.values.astype(np.int64) - int(qa.zero_point)
        ib = qb.values.astype(np.int64) - int(qb.zero_point)
        exact = ia @ ib
        sab = Fraction(float(qa.scale)) * Fraction(float(qb.scale))
        for (i, j), v in np.ndenumerate(exact):
            e = int(v) * sab
            got = Fraction(float(r[i, j]))
            # Correct rounding to float32: no float32 lies strictly closer to e.
            lo, hi = sorted((got, Fraction(float(np.nextafter(r[i, j], np.float32(np.inf if e > got else -np.inf))))))
            assert abs(got - e) <= abs(Fraction(float(np.nextafter(r[i, j], np.float32(np.inf)))) - e)
            assert abs(got - e) <= abs(Fraction(float(np.nextafter(r[i, j], np.float32(-np.inf)))) - e)


def test_sparse_int8_scale_rounds_the_exact_quotient():
    from lowp import sparse

    M = sparse.CSR.from_dense(np.array([[3.0, -3.0, 1.8]], np.float32)).astype(np.int8, scale=1.2)
    # 3 / 1.2 is just above 2.5 exactly (the float64 quotient is the tie); float32's 1.8
    # over 1.2 is just below 1.5.
    np.testing.assert_array_equal(M.to_dense(), [[3, -3, 1]])


def test_quantized_array_takes_low_precision_scalars_as_scales():
    q = lowp.QuantizedArray(np.array([1, 2], np.int8), lowp.bfloat16(0.5), 0, None, "int8")
    np.testing.assert_array_equal(q.dequantize(), [0.5, 1.0])
    q = lowp.QuantizedArray(np.array([1, 2], np.int8), lowp.finfo("bf16").eps, 0, None, "int8")
    assert q.scale == np.float32(2.0**-7)


def test_quantized_array_keeps_zero_points_of_its_own():
    """A list (or array) of zero points is copied into integers, as scales are: editing the
    caller's list afterwards cannot put a zero point outside the format's range."""
    zp = [0, 1]
    q = lowp.QuantizedArray(np.zeros((2, 2), np.int8), [1.0, 2.0], zp, 0, "int4")
    zp[0] = 1000
    assert q.zero_point.dtype == np.int32 and q.zero_point.tolist() == [0, 1]
    np.testing.assert_array_equal(q.dequantize(), [[0, 0], [-2, -2]])
    za = np.array([3, -2], np.int64)
    q = lowp.QuantizedArray(np.zeros((2, 2), np.int8), 1.0, za, 1, "int8")
    za[:] = 500
    assert q.zero_point.tolist() == [3, -2]
    assert lowp.QuantizedArray(np.zeros(2, np.int8), 1.0, 5, None, "int8").zero_point == 5
    # (An unsigned 32-bit format's zero points take int64.)
    q = lowp.QuantizedArray(np.zeros(2, np.uint32), 1.0, 2**32 - 1, None, lowp.IntFormat(32, signed=False))
    assert q.zero_point == 2**32 - 1


def _f32_nearest(q: Fraction) -> np.float32:
    c = np.float32(float(q))
    near = [np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))]
    return min(near, key=lambda v: (abs(Fraction(float(v)) - q), int(np.array(v).view(np.int32)) & 1))


def test_asymmetric_scale_is_the_exact_range_over_steps_rounded_once():
    """hi - lo is not rounded in float64 before the division: ranges built so that the exact
    (hi - lo) / 255 lies just past a float32 midpoint."""
    rng = np.random.default_rng(5)
    lo = -(2.0**-60)
    for _ in range(200):
        m = (2 * int(rng.integers(2**23, 2**24)) + 1) * 2.0**-24  # a float32 midpoint in [1, 2)
        hi = m * 255 - lo
        q = lowp.quantize(np.array([lo, hi]), "int8", symmetric=False)
        assert q.scale == _f32_nearest((Fraction(hi) - Fraction(lo)) / 255)
        for h in (np.nextafter(m * 127, np.inf), np.nextafter(m * 127, -np.inf)):
            assert lowp.quantize(np.array([-h, h]), "int8").scale == _f32_nearest(Fraction(h) / 127)


def test_fields_assigned_later_are_checked():
    """A field of a QuantizedArray assigned after construction is checked as the
    constructor checks it (q.dequantize() and qmatmul would otherwise use a negative scale, a
    float zero point or extra scales silently); a valid one is stored as the constructor
    stores it (scales as float32)."""
    q = lowp.quantize(np.array([[1.0, -2.0], [3.0, 0.5]]), "int8", axis=0)
    before = q.dequantize()
    for key, value, err, msg in (("scale", -1.0, ValueError, "^scale: every scale must be a positive"),
                                 ("zero_point", 0.5, TypeError, "^zero_point: expected integers"),
                                 ("scale", np.array([1.0, 2.0, 3.0]), ValueError, "^scale: expected a scalar or 2"),
                                 ("axis", 5, ValueError, "^axis: 5 is out of range"),
                                 ("values", np.array([[300, 0], [0, 0]]), ValueError, "^values: must lie in"),
                                 ("format", "bf16", TypeError, "^fmt: expected an integer format")):
        with pytest.raises(err, match=msg):
            setattr(q, key, value)
        np.testing.assert_array_equal(q.dequantize(), before)  # (left as it was)
    q.scale = 0.5
    assert q.scale == 0.5 and q.scale.dtype == np.float32
    np.testing.assert_array_equal(q.dequantize(), q.values.astype(np.float32) * 0.5)
    with pytest.raises(AttributeError):
        q.other = 1


@pytest.mark.parametrize("mode", ["nearest_even", "nearest_away", "toward_zero", "odd", "up", "down"])
def test_asymmetric_32_bit_rounds_the_quotient_then_adds_the_zero_point(mode):
    """In 32 bits too the mode acts on the exact quotient and the zero point is added
    after (it used to be added first, in float64: ties and tiny fractions went wrong)."""
    f = lowp.IntFormat(32)
    lo, hi = -1000000001.0, 4294967295.0 - 1000000001.0  # scale 1, an odd zero point
    for inner in ([2.5, -3.5, 0.5], [2.0 + 2.0**-40, -2.0 - 2.0**-40]):
        x = np.array([lo, hi] + inner)
        q = lowp.quantize(x, f, symmetric=False, rounding=mode)
        assert float(q.scale) == 1.0
        zp = int(q.zero_point)
        want = [lowp.round(np.array([v]), lowp.IntFormat(8), mode)[0] for v in inner]
        assert (q.values[2:].astype(np.int64) - zp).tolist() == want


def test_no_warning_from_the_scale_at_the_top_of_float32():
    q = lowp.quantize(np.float32([np.finfo(np.float32).max]), "int2")
    assert q.values.tolist() == [1]


def test_directed_modes_see_quotients_below_float64s_range():
    """x / scale below float64's smallest subnormal is still nonzero: up gives 1 and down
    -1 (the quotient used to flush to 0)."""
    x = np.array([1e-300, 3e38, -1e-300])
    assert lowp.quantize(x, "int8", rounding="up").values.tolist()[0] == 1
    assert lowp.quantize(x, "int8", rounding="down").values.tolist()[2] == -1
    assert lowp.quantize(x, "int8").values.tolist()[::2] == [0, 0]


@pytest.mark.parametrize("bits", [29, 30, 31, 32])
def test_wide_asymmetric_scale_is_the_exact_one_rounded_once(bits):
    """range / steps exactly a float32 tie whose range is no float64: the scale rounds
    to even, once (rounding the range first, then the quotient, went the other way from
    30 bits on)."""
    import math
    from fractions import Fraction

    s = 2**bits - 1
    for j in range(1, 200):
        tie = 1 + Fraction(2 * j + 1, 2**24)
        r = tie * s
        hi = float(r)
        if Fraction(hi) > r:
            hi = math.nextafter(hi, 0)
        lo = float(Fraction(hi) - r)
        if Fraction(hi) - Fraction(lo) != r or Fraction(hi) == r:
            continue
        q = lowp.quantize(np.array([lo, hi]), lowp.IntFormat(bits), symmetric=False)
        assert q.scale == np.float32(float(tie))  # (the tie is a float64: numpy's cast rounds it to even)


def test_qmatmul_along_the_inner_dimension_sums_in_float64():
    """Scales along the inner dimension do not factor out of the sum: the exact reals are
    multiplied with float64 accumulation (float32's lost the 1 beside 127e6 - 127e6), and
    on random inputs the result is the exact one rounded once to float32."""
    from fractions import Fraction

    qa = lowp.QuantizedArray(np.array([[127, 1, -127]], np.int8), np.array([1e6, 1.0, 1e6], np.float32),
                             np.zeros(3, np.int32), 1, "int8")
    qb = lowp.QuantizedArray(np.ones((3, 1), np.int8), np.float32(1.0), np.int32(0), None, "int8")
    assert lowp.qmatmul(qa, qb).tolist() == [[1.0]]
    assert lowp.qmatmul(lowp.quantize(np.array([[127e6, 1.0, -127e6]]), "int8", axis=1), qb).tolist() == [[1.0]]
    rng = np.random.default_rng(4)
    for ax_a, ax_b in ((1, None), (None, 0), (1, 0), (1, 1), (0, 0)):
        x = rng.standard_normal((4, 50)) * 2.0 ** rng.integers(-6, 6, (1, 50))
        w = rng.standard_normal((50, 3))
        qa = lowp.quantize(x, "int8", axis=ax_a, symmetric=False)
        qb = lowp.quantize(w, "int8", axis=ax_b)
        r = lowp.qmatmul(qa, qb)
        fa = [[Fraction(float(v)) for v in row] for row in qa._dequantize64()]
        fb = [[Fraction(float(v)) for v in row] for row in qb._dequantize64()]
        for i in range(4):
            for j in range(3):
                e = sum(fa[i][t] * fb[t][j] for t in range(50))
                assert r[i, j] == lowp.round(np.array([float(e)]), "float32")[0] or \
                    abs(Fraction(float(r[i, j])) - e) <= abs(Fraction(float(np.float32(float(e)))) - e)


def test_stochastic_quantize_draws_as_one_encode_of_the_quotients():
    """quantize runs in pieces of 65536 values; its stochastic draws are those of one
    encode over the whole array (each element's bits by its flat index): with a scale
    of exactly 2**-3 the quotients are x * 8, and the integers are encode's."""
    rng = np.random.default_rng(3)
    x = (rng.uniform(-15.875, 15.875, 150_001)).astype(np.float32)
    x[0] = 15.875  # 127 steps of 2**-3
    q = lowp.quantize(x, "int8", rounding="stochastic", seed=5)
    assert float(q.scale) == 0.125
    want = lowp.encode(x.astype(np.float64) * 8, lowp.IntFormat(8), "stochastic", seed=5).view(np.int8)
    np.testing.assert_array_equal(q.values, want)
    assert len(np.unique(q.values[70_000:70_100])) > 1


@pytest.mark.parametrize("calibration", [("percentile", 99.9), ("percentile", 100), "max"])
def test_a_range_past_float64_refused_naming_x_without_warnings(calibration):
    """Values spanning more than float64's range: percentile interpolation overflows.
    Refused as max calibration refuses them (no scale, no NaN zero point, no warning)."""
    x = np.array([-1.7e308, 1.7e308])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="^x: values .*need a scale beyond float32's range"):
            lowp.quantize(x, symmetric=False, calibration=calibration)


@pytest.mark.parametrize("symmetric", [True, False])
def test_values_past_float32_refused(symmetric):
    """float64 values past float32's largest value cannot come back from dequantize():
    refused naming x (they were clipped to a code far below qmax)."""
    for big in (1e39, 4e40):
        with pytest.raises(ValueError, match="^x: values up to .* lie beyond float32's range"):
            lowp.quantize(np.array([big, 1.0]), symmetric=symmetric)
        with pytest.raises(ValueError, match="^x: values up to .* lie beyond float32's range"):
            lowp.quantize(np.array([1.0, -big]), lowp.IntFormat(16), symmetric=symmetric)
    f32max = float(np.finfo(np.float32).max)
    q = lowp.quantize(np.array([f32max, 1.0]), symmetric=symmetric)
    assert q.values.max() >= 126 and np.isfinite(q.dequantize()).all()


@pytest.mark.parametrize("rounding", ["nearest_even", "up", "down", "toward_zero"])
def test_wide_integer_and_longdouble_inputs_round_once(rounding):
    """int64 past 2**53 (and longdouble) quotients are the exact ones rounded once: not
    rounded to float64 first. With scale 2**56, 2**55 + 1 is just above a half."""
    x = np.array([127 * 2**56, 2**55 + 1, 2**56 + 1, -(2**55) - 1], dtype=np.int64)
    q = lowp.quantize(x, rounding=rounding)
    assert float(q.scale) == 2.0**56
    want = [_round_frac(Fraction(int(v), 2**56), rounding) for v in x]
    assert q.values.tolist() == want
    if np.finfo(np.longdouble).nmant >= 63:
        assert lowp.quantize(x.astype(np.longdouble), rounding=rounding).values.tolist() == want


def _round_frac(v, rounding):
    fl = math.floor(v)
    if rounding == "up":
        return math.ceil(v)
    if rounding == "down":
        return fl
    if rounding == "toward_zero":
        return int(v)
    return round(v)  # Fraction's round: half to even


def test_matrix_subclass_per_axis():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
        q = lowp.quantize(m, axis=1)
    want = lowp.quantize(np.asarray(m), axis=1)
    assert type(q.values) is np.ndarray
    np.testing.assert_array_equal(q.values, want.values)
    np.testing.assert_array_equal(q.scale, want.scale)
