"""`a @ b` and np.matmul on lowp dtypes run lowp's GEMM and round once into the dtype."""

import numpy as np
import pytest

import lowp

DTYPES = ["bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
          "posit8", "posit16", "posit32"]


def bits(a):
    return a.view(np.dtype(f"u{a.itemsize}"))


@pytest.fixture(params=["default", "scalar"])
def isa(request):
    if request.param == "scalar":
        lowp._lowp.set_isa("scalar")
    yield request.param
    lowp._lowp.set_isa(None)


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("shape", [(0, 3, 2), (1, 1, 1), (7, 5, 17), (13, 64, 9), (6, 65, 16)])
def test_operator_equals_matmul_rounded_once(name, shape, isa):
    t = getattr(lowp, name)
    m, k, n = shape
    rng = np.random.default_rng(m * 100 + k + n)
    a = (rng.standard_normal((m, k)) * 2).astype(t)
    b = (rng.standard_normal((k, n)) * 2).astype(t)
    c = a @ b
    assert c.dtype == np.dtype(t) and c.shape == (m, n)
    # The exact products summed in float64 (f32 accumulation is within its bound); one rounding.
    exact = a.astype(np.float64) @ b.astype(np.float64)
    acc = "float64" if name == "posit32" else "float32"
    ref = lowp.matmul(a, b, out_dtype=np.float64 if acc == "float64" else np.float32)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) * k * 2.0**-23
    assert np.all(np.abs(ref.astype(np.float64) - exact) <= bound + 1e-300)
    np.testing.assert_array_equal(bits(c), bits(lowp.cast(ref, t)))
    np.testing.assert_array_equal(bits(np.matmul(a, b)), bits(c))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit16"])
def test_operator_strided_and_batched(name):
    t = getattr(lowp, name)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 10, 12)).astype(t)
    b = rng.standard_normal((12, 8)).astype(t)
    c = a[:, ::2, ::-1] @ b[::-1, 1::2]
    want = np.stack([lowp.cast(lowp.matmul(a[i, ::2, ::-1], b[::-1, 1::2]), t) for i in range(3)])
    np.testing.assert_array_equal(bits(c), bits(want))
    # A view whose byte strides are not whole elements of the dtype (a field of a structured array).
    s = np.zeros((4, 4), dtype=[("x", np.uint8), ("v", np.dtype(t))])
    s["v"] = rng.standard_normal((4, 4)).astype(t)
    np.testing.assert_array_equal(bits(s["v"] @ s["v"]), bits(np.ascontiguousarray(s["v"]) @ np.ascontiguousarray(s["v"])))


def test_operator_shape_mismatch_raises():
    a = np.ones((3, 4), lowp.bfloat16)
    with pytest.raises(ValueError):
        a @ a


@pytest.mark.parametrize("name", ["bfloat16", "float8_e5m2", "posit32"])
@pytest.mark.parametrize("shape", [(300, 4, 5, 3), (40, 16, 33, 16), (3, 130, 140, 120)])
def test_operator_stacks_equal_their_matrices(threads, name, shape):
    """Stacks (small products one per thread at a time, large ones each over every
    thread) give each matrix exactly what it gives alone, at any thread count, with
    broadcast and strided operands and a strided out=."""
    t = getattr(lowp, name)
    count, m, k, n = shape
    rng = np.random.default_rng(count + m)
    a = rng.standard_normal((count, m, k)).astype(t)
    b = rng.standard_normal((count, n, k)).astype(t).transpose(0, 2, 1)
    b2 = rng.standard_normal((k, n)).astype(t)
    c = a @ b
    c2 = a[::-1] @ b2
    out = np.zeros((count, n, m), t).transpose(0, 2, 1)
    np.matmul(a, b, out=out)
    acc = np.float64 if name == "posit32" else np.float32
    for i in range(count):
        want = bits(lowp.cast(lowp.matmul(a[i], b[i], out_dtype=acc), t))
        np.testing.assert_array_equal(bits(c[i]), want)
        np.testing.assert_array_equal(bits(out[i]), want)
        np.testing.assert_array_equal(bits(c2[i]), bits(lowp.cast(lowp.matmul(a[count - 1 - i], b2, out_dtype=acc), t)))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "posit32"])
def test_operator_outputs_past_a_block_equal_matmul(name):
    """Outputs of more than 2^22 elements are computed in blocks of rows (of columns for
    one long row): the same bits as lowp.matmul, on plain and reversed views."""
    dt = np.dtype(getattr(lowp, name))
    g = np.random.default_rng(5)
    for m, k, p in ((2100, 7, 2100), (1, 5, 2**22 + 9), (4100, 3, 1030)):
        a = g.standard_normal((m, k)).astype(dt)
        b = g.standard_normal((k, p)).astype(dt)
        want = lowp.matmul(a, b, out_dtype=dt)
        got = a @ b
        assert got.dtype == dt
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        rev = np.ascontiguousarray(a[::-1] @ b[:, ::-1])
        np.testing.assert_array_equal(rev.view(np.uint8), np.ascontiguousarray(want[::-1, ::-1]).view(np.uint8))
