"""lowp.sparse: round trips, conversions, products against scipy in float64, validation, pruning."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import lowp
from lowp import _lowp, sparse

FORMATS = ["csr", "csc", "coo", "bsr", "nm"]
# Value types: numpy/ml_dtypes dtypes and lowp Formats without a dtype yet (posits).
VALUE_TYPES = [np.float32, np.float16, np.int8, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
               lowp.format("posit8"), lowp.format("posit16"), lowp.format("posit32")]
VT_IDS = ["f32", "f16", "i8", "bf16", "e4m3fn", "e5m2", "posit8", "posit16", "posit32"]


def _decoded(M) -> np.ndarray:
    """The matrix's values in float64 (scale applied)."""
    d = M.to_dense()
    return lowp._convert._as_float_array(d).astype(np.float64) * M.scale


def _random(rng, shape, density, dtype=np.float32, ints=False):
    m, n = shape
    x = rng.integers(-8, 9, size=shape).astype(np.float64) if ints else rng.standard_normal(shape)
    x[rng.random(shape) >= density] = 0
    return x.astype(dtype)


def _build(fmt, x, dtype=None, blocksize=None, n=2, m=4):
    if fmt == "csr":
        return sparse.CSR.from_dense(x, dtype)
    if fmt == "csc":
        return sparse.CSC.from_dense(x, dtype)
    if fmt == "coo":
        return sparse.COO.from_dense(x, dtype)
    if fmt == "bsr":
        return sparse.BSR.from_dense(x, dtype, blocksize=blocksize)
    return sparse.NM.from_dense(sparse.prune_nm(x, n, m), dtype, n=n, m=m)


@pytest.fixture(params=[1, 2], ids=["t1", "t2"])
def threads(request):
    old = lowp.get_num_threads()
    lowp.set_num_threads(request.param)
    yield request.param
    lowp.set_num_threads(old)


@pytest.fixture(params=["native", "scalar"])
def isa(request):
    if request.param == "scalar":
        _lowp.set_isa("scalar")
    yield request.param
    _lowp.set_isa(None)


# ---------------------------------------------------------------- round trips

shapes = st.tuples(st.integers(0, 13), st.integers(0, 13))


@settings(max_examples=60, deadline=None)
@given(shape=shapes, density=st.floats(0, 1), seed=st.integers(0, 2**32 - 1), fmt=st.sampled_from(FORMATS))
def test_dense_round_trip(shape, density, seed, fmt):
    rng = np.random.default_rng(seed)
    x = _random(rng, shape, density)
    if fmt == "nm":
        x = sparse.prune_nm(x, 2, 4)
    M = _build(fmt, x, blocksize=None)
    d = M.to_dense()
    assert d.dtype == np.float32 and d.shape == x.shape
    np.testing.assert_array_equal(d, x)
    assert M.shape == x.shape
    if fmt != "bsr" and fmt != "nm":
        assert M.nnz == np.count_nonzero(x)


@settings(max_examples=40, deadline=None)
@given(bs=st.tuples(st.integers(1, 5), st.integers(1, 5)), nb=st.tuples(st.integers(0, 4), st.integers(0, 4)),
       density=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_bsr_any_block_shape(bs, nb, density, seed):
    rng = np.random.default_rng(seed)
    shape = (bs[0] * nb[0], bs[1] * nb[1])
    x = _random(rng, shape, density)
    M = sparse.BSR.from_dense(x, blocksize=bs)
    assert M.blocksize == bs
    np.testing.assert_array_equal(M.to_dense(), x)
    s = sp.bsr_array(x, blocksize=bs) if x.size else None
    if s is not None:
        np.testing.assert_array_equal(sparse.BSR.from_scipy(s).to_dense(), x)
    b = rng.standard_normal((shape[1], 3)).astype(np.float32)
    _check_product(M @ b, x.astype(np.float64) @ b, np.abs(x).astype(np.float64) @ np.abs(b), shape[1])


@settings(max_examples=60, deadline=None)
@given(shape=shapes, density=st.floats(0, 1), seed=st.integers(0, 2**32 - 1),
       fmt=st.sampled_from(["csr", "csc", "coo", "bsr"]), dup=st.booleans())
def test_scipy_round_trip(shape, density, seed, fmt, dup):
    rng = np.random.default_rng(seed)
    x = _random(rng, shape, density)
    s = sp.coo_array(x)
    if dup and s.nnz:  # duplicate entries summing exactly: halve and repeat
        s = sp.coo_array((np.concatenate([s.data / 2, s.data / 2]).astype(np.float32),
                          (np.concatenate([s.row, s.row]), np.concatenate([s.col, s.col]))), shape=shape)
    s = s.asformat(fmt) if fmt != "bsr" else sp.bsr_array(x, blocksize=(1, 1)) if x.size else sp.bsr_array(x)
    cls = {"csr": sparse.CSR, "csc": sparse.CSC, "coo": sparse.COO, "bsr": sparse.BSR}[fmt]
    M = cls.from_scipy(s)
    back = M.to_scipy()
    assert back.format == fmt and back.shape == s.shape and back.dtype == np.float32
    np.testing.assert_array_equal(back.toarray(), s.toarray())
    np.testing.assert_array_equal(back.data, s.data)
    if fmt in ("csr", "csc", "bsr"):
        np.testing.assert_array_equal(back.indices, s.indices)
        np.testing.assert_array_equal(back.indptr, s.indptr)
    if fmt == "coo":
        np.testing.assert_array_equal(back.row, s.row)
        np.testing.assert_array_equal(back.col, s.col)
    np.testing.assert_array_equal(M.to_dense(), s.toarray())


def test_scipy_zero_copy():
    s = sp.random_array((50, 40), density=0.2, format="csr", dtype=np.float32, rng=1)
    M = sparse.CSR.from_scipy(s)
    assert np.shares_memory(M.indices, s.indices) and np.shares_memory(M.indptr, s.indptr)
    assert np.shares_memory(M._v, s.data)
    c = sparse.CSC.from_scipy(s.tocsc())
    assert np.shares_memory(c._v, c.to_scipy().data)
    q = sp.csr_array(np.array([[1, 0], [0, -3]], np.int8))
    Q = sparse.CSR.from_scipy(q)
    assert Q.dtype == np.int8 and np.shares_memory(Q._v, q.data)


@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (0, 5), (5, 0), (1, 7)])
@pytest.mark.parametrize("fmt", FORMATS)
def test_tiny_and_empty(shape, fmt):
    x = np.zeros(shape, np.float32)
    if shape == (1, 1):
        x[0, 0] = 2.5
    M = _build(fmt, x, blocksize=(1, 1) if fmt == "bsr" else None)
    np.testing.assert_array_equal(M.to_dense(), x)
    np.testing.assert_array_equal(M @ np.ones(shape[1], np.float32), x.sum(axis=1))
    np.testing.assert_array_equal(np.ones(shape[0], np.float32) @ M, x.sum(axis=0))
    np.testing.assert_array_equal(M @ np.ones((shape[1], 3), np.float32), x @ np.ones((shape[1], 3), np.float32))


def test_coo_duplicates_and_canonical():
    row = np.array([2, 0, 2, 1, 0, 2])
    col = np.array([1, 3, 1, 0, 3, 1])
    data = np.array([1.0, 2.0, 3.0, 4.0, 0.5, -1.0], np.float32)
    M = sparse.COO((data, (row, col)), shape=(3, 4))
    ref = sp.coo_array((data, (row, col)), shape=(3, 4))
    assert not M.has_canonical_format
    np.testing.assert_array_equal(M.to_dense(), ref.toarray())
    c = M.sum_duplicates()
    ref.sum_duplicates()
    assert c.has_canonical_format and c.nnz == 3
    np.testing.assert_array_equal(c.row, [0, 1, 2])
    np.testing.assert_array_equal(c.col, [3, 0, 1])
    np.testing.assert_array_equal(c.data, [2.5, 4.0, 3.0])
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_array_equal(M @ x, ref.toarray() @ x)
    for conv in ("tocsr", "tocsc", "tobsr", "tocoo"):
        np.testing.assert_array_equal(getattr(M, conv)().to_dense(), ref.toarray())
    # Duplicates in a low-precision format add once, rounded.
    B = sparse.COO((data.astype(ml_dtypes.bfloat16), (row, col)), shape=(3, 4))
    np.testing.assert_array_equal(B.to_dense().astype(np.float32), ref.toarray())


@pytest.mark.parametrize("src", FORMATS)
@pytest.mark.parametrize("dst", FORMATS)
def test_conversions_between_every_pair(src, dst):
    rng = np.random.default_rng(7)
    x = sparse.prune_nm(_random(rng, (16, 24), 0.5), 2, 4)
    x[3] = 0
    x[:, 5] = 0
    M = _build(src, x, blocksize=(4, 4))
    N = M.asformat(dst)
    assert N.format == dst
    np.testing.assert_array_equal(N.to_dense(), x)
    np.testing.assert_array_equal(M.T.to_dense(), x.T)
    np.testing.assert_array_equal(M.T.T.to_dense(), x)


@pytest.mark.parametrize("vt", VALUE_TYPES, ids=VT_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_value_dtypes_round_trip(vt, fmt):
    rng = np.random.default_rng(3)
    x = sparse.prune_nm(_random(rng, (12, 16), 0.6, ints=(vt is np.int8)), 2, 4)
    M = _build(fmt, x, dtype=vt, blocksize=(4, 4))
    f = lowp.format(vt)
    want = lowp.cast(x, f.dtype) if f.dtype is not None else lowp.round(x.astype(np.float64), f).astype(np.float32)
    d = M.to_dense()
    if f.dtype is not None:
        assert M.dtype == f.dtype and d.dtype == f.dtype
        np.testing.assert_array_equal(d.view(f.storage_dtype), want.view(f.storage_dtype))
    else:
        assert M.dtype == f
        np.testing.assert_array_equal(d, want)
    # From an array already of that dtype: kept as is.
    if f.dtype is not None:
        M2 = _build(fmt, want)
        assert M2.dtype == f.dtype
        np.testing.assert_array_equal(M2.to_dense().view(f.storage_dtype), want.view(f.storage_dtype))
    f32 = _build(fmt, x, blocksize=(4, 4))
    assert M.nbytes == f32.nbytes - f32._v.nbytes + M._v.size * f.storage_dtype.itemsize


# ---------------------------------------------------------------- products

def _check_product(got, want, absref, kmax):
    """|got - want| <= (k + 2) * 2**-24 * (|A| @ |x|): float32 accumulation of k terms."""
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    tol = (kmax + 2) * 2.0**-24 * absref + 1e-30
    bad = np.abs(got - want) > tol
    assert not bad.any(), f"max error {np.max(np.abs(got - want) - tol)} over bound"


@pytest.mark.parametrize("vt", VALUE_TYPES, ids=VT_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_products_match_scipy(vt, fmt, threads, isa):
    rng = np.random.default_rng(11)
    m, n = 48, 64
    x = _random(rng, (m, n), 0.3, ints=(vt is np.int8))
    M = _build(fmt, x, dtype=vt, blocksize=(8, 8) if fmt == "bsr" else None)
    if vt is np.int8:
        M = M.astype(np.int8)._with_values(M._v, M._fmt, 0.25)  # a quantized matrix: scale 1/4
    a = _decoded(M)
    ref = sp.csr_array(a)  # scipy in float64 is the reference
    for k in (None, 1, 3, 8, 17, 64, 70):
        b = rng.standard_normal(n if k is None else (n, k)).astype(np.float32)
        got = M @ b
        assert got.dtype == np.float32
        _check_product(got, ref @ b.astype(np.float64), np.abs(a) @ np.abs(b.astype(np.float64)), n)
        bt = rng.standard_normal(m if k is None else (k, m)).astype(np.float32)
        got_t = bt @ M
        _check_product(got_t, bt.astype(np.float64) @ ref, np.abs(bt.astype(np.float64)) @ np.abs(a), m)
        if k is not None:
            _check_product(M.matmul(bt.T.copy(), transpose=True), (bt.astype(np.float64) @ ref).T,
                           (np.abs(bt.astype(np.float64)) @ np.abs(a)).T, m)


@pytest.mark.parametrize("vt", VALUE_TYPES, ids=VT_IDS)
@pytest.mark.parametrize("blocksize", [(4, 4), (2, 3), (8, 8), (1, 4)], ids=str)
def test_bsr_block_shapes_match_scipy(vt, blocksize, threads, isa):
    # 4x4 and 8x8 blocks have their own SpMV kernels; other shapes run the generic one.
    rng = np.random.default_rng(12)
    m, n = 48, 72
    x = _random(rng, (m, n), 0.3, ints=(vt is np.int8))
    x[8:16] = 0  # empty block rows
    M = sparse.BSR.from_dense(x, vt, blocksize=blocksize)
    a = _decoded(M)
    ref = sp.csr_array(a)
    for k in (None, 5, 64):
        b = rng.standard_normal(n if k is None else (n, k)).astype(np.float32)
        _check_product(M @ b, ref @ b.astype(np.float64), np.abs(a) @ np.abs(b.astype(np.float64)), n)


@pytest.mark.parametrize("fmt", FORMATS)
def test_large_product_thread_invariant(fmt):
    """Big enough to split into many chunks: identical bits at 1 and 2 threads."""
    s = sp.random_array((600, 512), density=0.05, format="csr", dtype=np.float32, rng=5)
    x = s.toarray()
    M = _build(fmt, x, blocksize=(8, 8))
    b = np.random.default_rng(2).standard_normal((512, 40)).astype(np.float32)
    bt = np.random.default_rng(3).standard_normal((40, 600)).astype(np.float32)
    old = lowp.get_num_threads()
    try:
        res = []
        for t in (1, 2):
            lowp.set_num_threads(t)
            res.append((M @ b, bt @ M, M @ b[:, 0]))
    finally:
        lowp.set_num_threads(old)
    for r1, r2 in zip(*res):
        np.testing.assert_array_equal(r1, r2)
    xs = sparse.prune_nm(x, 2, 4) if fmt == "nm" else x
    _check_product(res[0][0], xs.astype(np.float64) @ b, np.abs(xs).astype(np.float64) @ np.abs(b), 512)


def test_product_operands():
    x = np.array([[1, 0, 2], [0, 3, 0]], np.float32)
    M = sparse.CSR.from_dense(x)
    # Low-precision and float64 right-hand sides are read as float32.
    b = np.array([1.5, -2, 0.25])
    np.testing.assert_array_equal(M @ b, x @ b.astype(np.float32))
    np.testing.assert_array_equal(M @ b.astype(ml_dtypes.bfloat16), x @ b.astype(np.float32))
    np.testing.assert_array_equal(M @ np.asfortranarray(np.ones((3, 2))), x @ np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="x"):
        M @ np.ones(4, np.float32)
    with pytest.raises(ValueError, match="x"):
        np.ones(3, np.float32) @ M
    with pytest.raises(TypeError):
        M @ M


# ---------------------------------------------------------------- astype, dtype, nbytes

@pytest.mark.parametrize("rounding", lowp.ROUNDING_MODES)
def test_astype_rounding(rounding):
    rng = np.random.default_rng(4)
    x = _random(rng, (20, 30), 0.4)
    M = sparse.CSR.from_dense(x)
    B = M.astype(ml_dtypes.bfloat16, rounding, seed=9)
    want = lowp.cast(M.data, ml_dtypes.bfloat16, rounding, seed=9)
    np.testing.assert_array_equal(B.data.view(np.uint16), want.view(np.uint16))
    assert B.dtype == lowp.bfloat16 and B.dtype.name == "bfloat16"  # lowp's dtype of the same name
    np.testing.assert_array_equal(B.indices, M.indices)
    P = M.astype(lowp.format("posit16"), rounding, seed=9)
    np.testing.assert_array_equal(P._v, lowp.encode(M.data, "posit16", rounding, seed=9))
    back = B.astype(np.float32)
    np.testing.assert_array_equal(back.data, want.astype(np.float32))


def test_nbytes_counts_everything():
    x = np.zeros((16, 16), np.float32)
    x[::3, ::2] = 1
    csr = sparse.CSR.from_dense(x)
    assert csr.nbytes == csr.nnz * 4 + csr.nnz * 4 + 17 * 4
    coo = sparse.COO.from_dense(x)
    assert coo.nbytes == coo.nnz * 12
    b16 = sparse.CSR.from_dense(x, ml_dtypes.bfloat16)
    assert b16.nbytes == csr.nnz * 2 + csr.nnz * 4 + 17 * 4
    nm = sparse.NM.from_dense(sparse.prune_nm(np.ones((8, 16), np.float32)), np.float32)
    assert nm.nbytes == 8 * 8 * 4 + 8 * 8 * 2 // 8  # values + 2-bit positions
    bsr = sparse.BSR.from_dense(x, blocksize=(4, 4))
    assert bsr.nbytes == bsr._v.size * 4 + bsr.indices.nbytes + bsr.indptr.nbytes


def test_int8_with_scale_and_quantized_input():
    x = np.array([[0.0, 1.0, -0.5], [0.25, 0.0, 0.0]], np.float32)
    q = lowp.quantize(x, "int8")
    M = sparse.CSR.from_dense(q)
    assert M.dtype == np.int8 and M.scale == pytest.approx(float(q.scale))
    np.testing.assert_array_equal(M.to_dense(), q.values)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose(M @ b, q.dequantize() @ b, rtol=1e-6)
    S = M.astype(np.int8, scale=0.5)
    np.testing.assert_array_equal(S.to_dense(), np.round(q.dequantize() / 0.5).astype(np.int8))


def test_nm_structure():
    x = np.array([[1, 2, 3, 4, 0, 0, 5, 0, 7]], np.float32)
    p = sparse.prune_nm(x, 2, 4)
    np.testing.assert_array_equal(p, [[0, 0, 3, 4, 0, 0, 5, 0, 7]])
    M = sparse.NM.from_dense(p)
    assert M.n == 2 and M.m == 4 and M.data.shape == (1, 6) and M._idx.dtype == np.uint8 and M._idx.size == 2
    np.testing.assert_array_equal(M.to_dense(), p)
    N = sparse.NM((M.data, M.positions), shape=(1, 9))
    np.testing.assert_array_equal(N.to_dense(), p)
    with pytest.raises(ValueError, match="prune_nm"):
        sparse.NM.from_dense(x)
    for n, m in ((1, 2), (3, 7), (4, 16), (8, 32)):
        y = sparse.prune_nm(np.random.default_rng(n).standard_normal((5, 45)).astype(np.float32), n, m)
        Y = sparse.NM.from_dense(y, n=n, m=m)
        np.testing.assert_array_equal(Y.to_dense(), y)
        b = np.ones((45, 9), np.float32)
        np.testing.assert_allclose(Y @ b, y @ b, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- validation

def _csr(data, indices, indptr, shape=(2, 3)):
    return sparse.CSR((np.asarray(data, np.float32), np.asarray(indices), np.asarray(indptr)), shape=shape)


@pytest.mark.parametrize("indices,indptr,arg", [
    ([0, 1, 2], [0, 2, 1], "indptr"),      # not monotone
    ([0, 1, 2], [0, 2], "indptr"),         # wrong length
    ([0, 1, 2], [0, 1, 2, 3], "indptr"),   # wrong length (too long)
    ([0, 1, 2], [1, 2, 3], "indptr"),      # first entry not 0
    ([0, 1, 2], [0, 2, 2], "indptr"),      # last entry != nnz
    ([0, 1, 2], [0, 2, 4], "indptr"),      # last entry past the data
    ([0, 3, 2], [0, 2, 3], "indices"),     # out of range
    ([0, -1, 2], [0, 2, 3], "indices"),    # negative
    ([0, 1], [0, 2, 3], "indices"),        # length mismatch with data
    ([0, 1, 2], [0, -2, 3], "indptr"),     # negative pointer
])
@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC])
def test_malformed_compressed(indices, indptr, arg, cls):
    shape = (2, 3) if cls is sparse.CSR else (3, 2)
    with pytest.raises(ValueError, match=arg):
        cls((np.ones(3, np.float32), np.asarray(indices), np.asarray(indptr)), shape=shape)


def test_malformed_other():
    with pytest.raises(ValueError, match="row"):
        sparse.COO((np.ones(2, np.float32), (np.array([0, 5]), np.array([0, 1]))), shape=(3, 3))
    with pytest.raises(ValueError, match="col"):
        sparse.COO((np.ones(2, np.float32), (np.array([0, 1]), np.array([0, -1]))), shape=(3, 3))
    with pytest.raises(ValueError, match="length"):
        sparse.COO((np.ones(3, np.float32), (np.array([0, 1]), np.array([0, 1]))), shape=(3, 3))
    with pytest.raises(ValueError, match="blocksize"):
        sparse.BSR((np.ones((1, 2, 2), np.float32), np.array([0]), np.array([0, 1])), shape=(3, 4))
    with pytest.raises(ValueError, match="blocksize"):
        sparse.BSR.from_dense(np.ones((6, 6), np.float32), blocksize=(4, 4))
    with pytest.raises(ValueError, match="blocksize"):
        sparse.BSR.from_dense(np.ones((6, 6), np.float32), blocksize=(0, 3))
    with pytest.raises(ValueError, match="indices"):
        sparse.BSR((np.ones((1, 2, 2), np.float32), np.array([2]), np.array([0, 1, 1])), shape=(4, 4))
    with pytest.raises(ValueError, match="data"):
        sparse.BSR((np.ones((2, 2), np.float32), np.array([0]), np.array([0, 1, 1])), shape=(4, 4))
    with pytest.raises(ValueError, match="n"):
        sparse.prune_nm(np.ones((4, 4)), n=3, m=2)
    with pytest.raises(ValueError, match="n"):
        sparse.NM.from_dense(np.zeros((4, 4), np.float32), n=5, m=4)
    with pytest.raises(ValueError, match="positions"):
        sparse.NM((np.ones((1, 2), np.float32), np.array([[0, 4]])), shape=(1, 4))
    with pytest.raises(ValueError, match="positions"):
        sparse.NM((np.ones((1, 2), np.float32), np.array([[1, 1]])), shape=(1, 4))
    with pytest.raises(ValueError, match="positions"):
        sparse.NM((np.ones((1, 4), np.float32), np.array([[0, 1, 1, 2]])), shape=(1, 5))  # partial group
    with pytest.raises(ValueError, match="data"):
        sparse.NM((np.ones((1, 3), np.float32), np.array([[0, 1, 2]])), shape=(1, 4))
    with pytest.raises(ValueError, match="shape"):
        sparse.CSR((np.ones(1, np.float32), np.array([0]), np.array([0, 1])), shape=(1, -1))
    with pytest.raises(TypeError, match="dtype"):
        sparse.CSR.from_dense(np.ones((2, 2)), dtype="complex64")


@pytest.mark.parametrize("s", [float("nan"), -0.1, 1.5, float("inf")])
def test_prune_bad_sparsity(s):
    with pytest.raises(ValueError, match="sparsity"):
        sparse.prune(np.ones(4), s)


def test_kernels_check_indices_themselves():
    """Arrays changed after construction still never read out of bounds."""
    M = _csr([1, 2, 3], [0, 1, 2], [0, 2, 3])
    M.indices[1] = 7
    with pytest.raises(ValueError, match="indices"):
        M @ np.ones(3, np.float32)
    with pytest.raises(ValueError, match="indices"):
        np.ones(2, np.float32) @ M
    M.indices[1] = 1
    M.indptr[1] = 5
    with pytest.raises(ValueError, match="indptr"):
        M @ np.ones((3, 9), np.float32)
    for fn in (_lowp.csr_matmul, _lowp.bsr_matmul):
        with pytest.raises(ValueError):
            args = [np.ones(3, np.float32), None, False, np.array([0, 1, 3], np.int32), np.array([0, 1], np.int32),
                    (2, 3)]
            if fn is _lowp.bsr_matmul:
                args.append((1, 1))
            fn(*args, np.ones((3, 1), np.float32), np.empty((2, 1), np.float32), False)
    Bm = sparse.BSR.from_dense(np.ones((8, 16), np.float32), blocksize=(4, 4))
    Bm.indices[1] = 9
    for k in (None, 1, 9, 30):
        with pytest.raises(ValueError, match="indices"):
            Bm @ np.ones(16 if k is None else (16, k), np.float32)
        with pytest.raises(ValueError, match="indices"):
            np.ones(8 if k is None else (k, 8), np.float32) @ Bm
    # Long rows (the vectorised SpMV path) with a bad index in the middle.
    for bad in (-3, 20, 2**31 - 1):
        for dt in (np.float32, ml_dtypes.bfloat16):
            L = sparse.CSR((np.ones(20, dt), np.arange(20, dtype=np.int32), np.array([0, 20])), shape=(1, 20))
            L.indices[5] = bad
            with pytest.raises(ValueError, match="indices"):
                L @ np.ones(20, np.float32)
            with pytest.raises(ValueError, match="indices"):
                L @ np.ones((20, 9), np.float32)
    with pytest.raises(ValueError, match="table"):
        _lowp.csr_matmul(np.ones(1, np.uint8), np.ones(10, np.float32), False, np.array([0, 1], np.int32),
                         np.array([0], np.int32), (1, 1), np.ones((1, 1), np.float32), np.empty((1, 1), np.float32),
                         False)
    with pytest.raises(ValueError, match="indices"):
        _lowp.nm_matmul(np.ones(2, np.float32), None, False, np.array([0b1111], np.uint8), 2, 4, (1, 3),
                        np.ones((3, 1), np.float32), np.empty((1, 1), np.float32), False)


# ---------------------------------------------------------------- in-place edits

@pytest.mark.parametrize("scale", [1.0, 0.5], ids=["scale1", "scale0.5"])
@pytest.mark.parametrize("vt", [lowp.posit32, np.float32, lowp.posit16, ml_dtypes.bfloat16, np.int8],
                         ids=["posit32", "f32", "posit16", "bf16", "i8"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_products_follow_in_place_edits_of_data(fmt, vt, scale):
    """``M.data`` is a writable view of the stored values (``M.data *= 2`` as in scipy):
    every later product uses the values stored at that time, in both directions."""
    rng = np.random.default_rng(21)
    x = sparse.prune_nm(_random(rng, (12, 16), 0.6, ints=True), 2, 4)
    M = _build(fmt, x, dtype=vt, blocksize=(4, 4))
    if scale != 1.0:
        M = M.astype(vt, scale=scale)  # stored x / scale, the matrix is still x
    T = M.T  # shares the stored values with M for csr, csc and coo
    b = rng.integers(-4, 5, 16).astype(np.float32)
    bt = rng.integers(-4, 5, 12).astype(np.float32)
    factor = 1
    # Small integers: every product and sum is exact, so the float64 results are the answer.
    for k in (3, -2, 1, 0):
        want = factor * x.astype(np.float64)
        np.testing.assert_array_equal(M @ b, want @ b)
        np.testing.assert_array_equal(bt @ M, bt @ want)
        np.testing.assert_array_equal(M @ np.stack([b, 2 * b], 1), want @ np.stack([b, 2 * b], 1))
        if fmt in ("csr", "csc", "coo"):
            np.testing.assert_array_equal(T @ bt, bt @ want)
        stored = M.data.astype(np.float32)
        M.data[...] = (stored * k).astype(M.dtype)
        factor *= k
    # Edits through the transpose (shared storage) reach the matrix too.
    if fmt in ("csr", "csc", "coo"):
        T.data[...] = (np.float32(1) + np.zeros(T.nnz, np.float32)).astype(T.dtype)
        ones = (x != 0).astype(np.float64) * scale
        np.testing.assert_array_equal(M @ b, ones @ b)


# ---------------------------------------------------------------- shape argument, empty matrices

CLASSES = [sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR, sparse.NM]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_shape_argument_must_match_the_input(cls):
    x = np.zeros((4, 8), np.float32)
    x[0, 1], x[3, 6] = 2.0, -1.5
    s = sp.csr_array(x)
    for src in (x, sparse.CSR.from_dense(x), sparse.COO.from_dense(x), s, s.tocoo()):
        M = cls(src, shape=(4, 8))
        assert M.shape == (4, 8)
        np.testing.assert_array_equal(M.to_dense(), x)
        for bad in ((8, 8), (4, 4), (8, 4)):
            with pytest.raises(ValueError, match="^shape: "):
                cls(src, shape=bad)
        with pytest.raises(ValueError, match="^shape: "):
            cls(src, shape=(4, -8))


@pytest.mark.parametrize("shape", [(3, 4), (0, 5), (4, 0), (0, 0), (8, 8)], ids=str)
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_empty_matrix_from_shape(cls, shape):
    """``cls((m, n))`` is an all-zero m x n matrix, as in scipy."""
    ref = sp.csr_array(shape).toarray()  # scipy's empty matrix of that shape
    for M in (cls(shape), cls((np.int64(shape[0]), np.int32(shape[1]))), cls(shape, shape=shape)):
        assert M.shape == shape and M.dtype == np.float32
        assert M.nnz == 0 if cls is not sparse.NM else not np.any(M.data)  # N:M stores every slot
        np.testing.assert_array_equal(M.to_dense(), ref)
        np.testing.assert_array_equal(M @ np.ones(shape[1], np.float32), ref @ np.ones(shape[1]))
        np.testing.assert_array_equal(np.ones((2, shape[0]), np.float32) @ M, np.ones((2, shape[0])) @ ref)
        np.testing.assert_array_equal(M.to_scipy().toarray(), ref)
    B = cls(shape, dtype=ml_dtypes.bfloat16)
    assert lowp.format(B.dtype) == lowp.format("bfloat16") and B.shape == shape
    np.testing.assert_array_equal(B.to_dense().astype(np.float64), ref)
    with pytest.raises(ValueError, match="^shape: "):
        cls(shape, shape=(shape[0] + 1, shape[1]))


@pytest.mark.parametrize("bad", [(3, -1), (-2, 4), (3.0, 4), (3, 4.5), (True, 2), ("a", 2)], ids=str)
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_empty_matrix_bad_shapes(cls, bad):
    with pytest.raises(ValueError, match="^arg: .*non-negative ints"):
        cls(bad)


# ---------------------------------------------------------------- scale in conversions

@pytest.mark.parametrize("scale", [0.5, 0.37, 3.0])
@pytest.mark.parametrize("vt", [np.int8, np.float32, np.float16, ml_dtypes.bfloat16, lowp.posit32],
                         ids=["i8", "f32", "f16", "bf16", "posit32"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_to_scipy_is_the_same_matrix(fmt, vt, scale):
    """With a scale, to_scipy holds ``stored * scale``: its products are the lowp products."""
    rng = np.random.default_rng(31)
    x = sparse.prune_nm(_random(rng, (8, 12), 0.6), 2, 4) * 4
    M = _build(fmt, x, blocksize=(4, 4)).astype(vt, scale=scale)
    S = M.to_scipy()
    assert S.dtype == np.float64 and S.shape == M.shape
    np.testing.assert_array_equal(S.toarray(), _decoded(M))
    b = rng.standard_normal(12)
    Sa = abs(S)
    _check_product(M @ b.astype(np.float32), S @ b.astype(np.float32).astype(np.float64),
                   Sa @ np.abs(b.astype(np.float32)).astype(np.float64), 12)
    bt = rng.standard_normal((3, 8)).astype(np.float32)
    _check_product(bt @ M, bt.astype(np.float64) @ S, np.abs(bt).astype(np.float64) @ Sa, 8)
    # Without a scale the values keep their dtype, or become the same numbers in float32
    # (float64 for posit32, which float32 cannot hold).
    U = _build(fmt, x, vt, blocksize=(4, 4)).to_scipy()
    assert U.dtype == {np.int8: np.int8, lowp.posit32: np.float64}.get(vt, np.float32)


# ---------------------------------------------------------------- edited index arrays

def test_conversions_check_edited_index_arrays():
    """Index arrays are writable: conversions validate them as the products do."""
    C = sparse.COO((np.array([1.0, 2.0], np.float32), (np.array([0, 0]), np.array([0, 2]))), shape=(2, 3))
    for arr, bad, name in ((C.col, -1, "col"), (C.col, 3, "col"), (C.row, 2, "row"), (C.row, -5, "row")):
        old = int(arr[0])
        arr[0] = bad
        for conv in (C.to_dense, C.toarray, C.to_scipy, C.tocsr, C.tocsc, lambda: C.tobsr((1, 1)), C.tonm):
            with pytest.raises(ValueError, match=f"^{name}: "):
                conv()
        arr[0] = old
    np.testing.assert_array_equal(C.to_dense(), [[1, 0, 2], [0, 0, 0]])
    x = np.array([[1, 0, 2, 0], [0, 3, 0, 4]], np.float32)
    for cls in (sparse.CSR, sparse.CSC):
        for attr, i, bad in (("indices", 0, -1), ("indices", 1, 9), ("indptr", 1, 7), ("indptr", 1, -1)):
            M = cls.from_dense(x)
            getattr(M, attr)[i] = bad
            for conv in (M.to_dense, M.to_scipy, M.tocoo, M.tobsr, lambda: M.T.to_dense()):
                with pytest.raises(ValueError, match=f"^{attr}: "):
                    conv()
    Bm = sparse.BSR.from_dense(np.ones((8, 16), np.float32), blocksize=(4, 4))
    Bm.indices[1] = 9
    for conv in (Bm.to_dense, Bm.to_scipy, Bm.tocsr, lambda: Bm.T):
        with pytest.raises(ValueError, match="^indices: "):
            conv()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_from_scipy_checks_edited_index_arrays(cls):
    x = np.array([[1.0, 0, 2, 0], [0, 3, 0, 0]])
    for fmt, attr, bad, name in (("coo", "row", 99, "m.row"), ("coo", "col", -1, "m.col"),
                                 ("coo", "col", 4, "m.col"), ("csr", "indices", 4, "m.indices"),
                                 ("csr", "indptr", 9, "m.indptr"), ("csc", "indices", -1, "m.indices"),
                                 ("bsr", "indices", 3, "m.indices")):
        s = sp.coo_array(x).asformat(fmt) if fmt != "bsr" else sp.bsr_array(x, blocksize=(1, 2))
        getattr(s, attr)[0] = bad
        with pytest.raises(ValueError, match=f"^{name}: "):
            cls.from_scipy(s)
        # The constructor's argument is arg.
        with pytest.raises(ValueError, match=f"^arg{name[1:]}: "):
            cls(s)
    with pytest.raises(TypeError, match="^arg.dtype: unsupported dtype complex128"):
        cls(sp.csr_matrix(np.eye(4, dtype=complex)))


# ---------------------------------------------------------------- N:M without rows

@pytest.mark.parametrize("rows,cols", [(0, 0), (0, 3), (0, 8), (0, 9), (2, 0), (3, 9)])
@pytest.mark.parametrize("nm", [(2, 4), (1, 3)], ids=str)
def test_nm_data_and_positions_shapes(rows, cols, nm):
    n, m = nm
    x = np.zeros((rows, cols), np.float32)
    E = sparse.NM.from_dense(x, n=n, m=m)
    want = (rows, -(-cols // m) * n)
    assert E.data.shape == want and E.positions.shape == want
    assert E.data.dtype == np.float32 and E.positions.dtype.kind in "iu"
    back = sparse.NM((E.data, E.positions), shape=(rows, cols), n=n, m=m)
    np.testing.assert_array_equal(back.to_dense(), x)


# ---------------------------------------------------------------- pruning

@settings(max_examples=50, deadline=None)
@given(size=st.integers(0, 60), sparsity=st.floats(0, 1), seed=st.integers(0, 1000), ties=st.booleans())
def test_prune_exact_count(size, sparsity, seed, ties):
    rng = np.random.default_rng(seed)
    x = (rng.integers(-3, 4, size) if ties else rng.standard_normal(size)).astype(np.float32)
    p = sparse.prune(x, sparsity)
    k = math.floor(sparsity * size + 0.5)
    # Exactly k entries were forced to zero: the k first in (|x|, index) order.
    order = sorted(range(size), key=lambda i: (abs(float(x[i])), i))
    want = x.copy()
    want[order[:k]] = 0
    np.testing.assert_array_equal(p, want)
    assert p.dtype == x.dtype


def test_prune_dtypes_and_shapes():
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.bfloat16)
    p = sparse.prune(x, 0.5)
    assert p.dtype == x.dtype and p.shape == x.shape
    # 6 of 12 pruned, the existing zero among them; ties (+-1, +-2) go to the lower index first.
    np.testing.assert_array_equal(p.astype(np.float32).ravel(), [-6, -5, -4, 0, 0, 0, 0, 0, 0, 3, 4, 5])
    np.testing.assert_array_equal(sparse.prune(np.array([1.0, np.nan, -3.0, 0.5]), 0.75), [0, np.nan, 0, 0])


@settings(max_examples=40, deadline=None)
@given(shape=st.tuples(st.integers(1, 6), st.integers(1, 15)), nm=st.sampled_from([(1, 2), (2, 4), (1, 4), (3, 8)]),
       axis=st.sampled_from([0, 1, -1]), seed=st.integers(0, 1000))
def test_prune_nm(shape, nm, axis, seed):
    n, m = nm
    x = np.random.default_rng(seed).integers(-4, 5, shape).astype(np.float32)
    p = sparse.prune_nm(x, n, m, axis=axis)
    xa, pa = np.moveaxis(x, axis, -1), np.moveaxis(p, axis, -1)
    for row_x, row_p in zip(xa.reshape(-1, xa.shape[-1]), pa.reshape(-1, pa.shape[-1])):
        for g0 in range(0, row_x.size, m):
            gx, gp = row_x[g0:g0 + m], row_p[g0:g0 + m]
            keep = sorted(range(gx.size), key=lambda i: (-abs(float(gx[i])), i))[:n]
            want = np.zeros_like(gx)
            want[keep] = gx[keep]
            np.testing.assert_array_equal(gp, want)


# ---------------------------------------------------------------- kernel paths by shape

@pytest.mark.parametrize("vt", [np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn], ids=["f32", "bf16", "e4m3fn"])
@pytest.mark.parametrize("shape", [(5, 6), (37, 130), (70, 258), (130, 64)])
def test_nm24_panels(vt, shape, threads, isa):
    """2:4 products across B's 64-row panels and 64/32/16/8-column tiles with remainders,
    a partial last group, against scipy in float64."""
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    m, n = shape
    x = sparse.prune_nm(rng.standard_normal((m, n)).astype(np.float32), 2, 4)
    M = sparse.NM.from_dense(x, dtype=vt)
    a = _decoded(M)
    for k in (1, 7, 8, 24, 40, 64, 72, 136):
        b = rng.standard_normal((n, k)).astype(np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        _check_product(M @ b, want, np.abs(a).astype(np.float64) @ np.abs(b.astype(np.float64)), n)


@pytest.mark.parametrize("fmt", ["csr", "bsr", "nm"])
def test_unaligned_operand(fmt):
    """B starting off a 64-byte boundary (as NumPy's large buffers do) gives the same bits."""
    rng = np.random.default_rng(7)
    x = _random(rng, (40, 64), 0.3)
    M = _build(fmt, x, blocksize=(8, 8))
    b = rng.standard_normal((64, 32)).astype(np.float32)
    want = M @ b
    for off in (1, 4, 8):
        buf = np.empty(b.size + 16, np.float32)
        bu = buf[off:off + b.size].reshape(b.shape)
        bu[...] = b
        np.testing.assert_array_equal(M @ bu, want)


@pytest.mark.parametrize("dtype", [np.float32, lowp.bfloat16, lowp.float8_e4m3fn])
def test_nm_unused_slots_do_not_meet_infinities(dtype):
    """A group with fewer than n values leaves unused slots; an infinity or NaN of x at a
    place the matrix stores nothing gives no NaN (as scipy and the other formats), on
    both sides of the product; stored values meeting them do."""
    dense = np.array([[0, 0, 3, 0, 1, 0, 0, 2], [0, 0, 0, 0, 0, 0, 0, 0], [5, 0, 0, 0, 0, 0, 0, 0]], np.float32)
    M = sparse.NM.from_dense(dense.astype(dtype))
    ref = sp.csr_array(dense.astype(np.float64))
    for x in (np.array([np.inf, 1, 1, 1, 1, 1, np.nan, 1], np.float32),
              np.array([1, 1, np.inf, 1, 1, 1, 1, 1], np.float32)):
        with np.errstate(invalid="ignore"):
            want = ref @ x.astype(np.float64)
        np.testing.assert_array_equal(M @ x, want.astype(np.float32))
        X = np.stack([x, np.ones(8, np.float32)], axis=1)
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(M @ X, (ref @ X.astype(np.float64)).astype(np.float32))
    v = np.array([np.inf, 1, np.nan], np.float32)
    with np.errstate(invalid="ignore"):
        want = (ref.T @ v.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(v @ M, want)
    np.testing.assert_array_equal(M.T @ v, want)


# ---------------------------------------------------------------- assigning M.data

def _scipy_of(M) -> "sp.sparray":
    """scipy float64 matrix with the same structure and values as ``M`` (scale applied)."""
    return M.to_scipy().astype(np.float64)


@pytest.mark.parametrize("vt", [np.float32, np.float16, np.int8, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                lowp.posit16], ids=["f32", "f16", "i8", "bf16", "e4m3fn", "posit16"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_data_in_place_operators_and_assignment(fmt, vt):
    """``M.data *= s`` and ``M.data = values`` work as in scipy, for every class."""
    rng = np.random.default_rng(41)
    x = sparse.prune_nm(_random(rng, (8, 12), 0.6, ints=True), 2, 4)
    M = _build(fmt, x, dtype=vt, blocksize=(4, 4))
    before = _scipy_of(M)
    M.data *= 2
    np.testing.assert_array_equal(_scipy_of(M).toarray(), 2 * before.toarray())
    b = rng.integers(-4, 5, 12).astype(np.float32)
    np.testing.assert_array_equal(M @ b, 2 * before @ b.astype(np.float64))
    M.data += M.data
    np.testing.assert_array_equal(_scipy_of(M).toarray(), 4 * before.toarray())
    # Assignment stores the values of an array of any real dtype, rounded into the format.
    new = np.asarray(M.data, np.float64) / 4 + 0.25 * (np.asarray(M.data, np.float64) != 0)
    M.data = new
    want = new.astype(vt) if vt is not np.int8 else np.clip(np.round(new), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(M.data.astype(np.float64), want.astype(np.float64))
    S = M.to_scipy().astype(np.float64)
    np.testing.assert_array_equal(M @ b, (S @ b.astype(np.float64)).astype(np.float32))
    for bad in (np.ones(M.data.size + 1), np.ones((1,) + M.data.shape), np.float32(1.0)):
        with pytest.raises(ValueError, match="^data: .*shape"):
            M.data = bad
    with pytest.raises(TypeError, match="^data: "):
        M.data = M.data.astype(np.complex64)


def _nearest_even(v: float, dtype) -> float:
    """Exact oracle: the value of an 8/16-bit ml_dtypes ``dtype`` nearest to ``v`` (ties to
    the even code), from every code's value and Fractions."""
    from fractions import Fraction

    bits = np.dtype(dtype).itemsize * 8
    codes = np.arange(2**bits, dtype=np.uint64).astype(f"u{bits // 8}")
    with np.errstate(invalid="ignore"):
        vals = codes.view(dtype).astype(np.float64)
    ok = np.isfinite(vals)
    vals, codes = vals[ok], codes[ok]
    near = np.argsort(np.abs(vals - v), kind="stable")[:8]  # the candidates; then exactly
    vals, codes = vals[near], codes[near]
    dist = [abs(Fraction(float(g)) - Fraction(v)) for g in vals]
    best = min(dist)
    cands = [(int(c), float(g)) for c, g, d in zip(codes, vals, dist) if d == best]
    return next((g for c, g in cands if c % 2 == 0), cands[0][1])


@pytest.mark.parametrize("fmt", FORMATS)
def test_data_assignment_rounds_once(fmt):
    """float64 values go straight into the format (no float32 step in between)."""
    x = np.zeros((4, 8), np.float32)
    x[0, 0] = x[1, 4] = x[3, 7] = 1
    for dtype, v in ((ml_dtypes.bfloat16, 1 + 2.0**-8 + 2.0**-30), (ml_dtypes.float8_e4m3fn, 1 + 2.0**-4 + 2.0**-40),
                     (ml_dtypes.float8_e5m2, -(1.5 + 2.0**-3 + 2.0**-35))):
        # Just beyond a midpoint of the format; in float32 it is the midpoint itself.
        assert _nearest_even(v, dtype) != _nearest_even(float(np.float32(v)), dtype)
        M = _build(fmt, x, dtype=dtype, blocksize=(2, 2))
        nz = np.asarray(M.data, np.float64) != 0
        M.data = np.where(nz, v, 0.0)
        np.testing.assert_array_equal(M.data.astype(np.float64), np.where(nz, _nearest_even(v, dtype), 0.0))


@pytest.mark.parametrize("fmt", FORMATS)
def test_data_of_formats_without_a_dtype(fmt):
    """Without a numpy dtype ``M.data`` is a decoded copy: it is read-only, so writes raise
    instead of being lost; assigning ``M.data`` stores values."""
    rng = np.random.default_rng(43)
    x = sparse.prune_nm(_random(rng, (8, 12), 0.6, ints=True), 2, 4)
    x = np.clip(x, -3, 3)
    f = lowp.FloatFormat(3, 2)
    M = _build(fmt, x, dtype=f, blocksize=(4, 4))
    assert M.dtype == f and not M.data.flags.writeable
    before = _scipy_of(M)
    with pytest.raises(ValueError, match="read-only"):
        M.data[...] = 0.5
    with pytest.raises(ValueError, match="read-only"):
        M.data *= 2
    np.testing.assert_array_equal(_scipy_of(M).toarray(), before.toarray())  # nothing changed
    M.data = M.data * 2
    np.testing.assert_array_equal(_scipy_of(M).toarray(), 2 * before.toarray())
    b = rng.integers(-4, 5, 12).astype(np.float32)
    np.testing.assert_array_equal(M @ b, 2 * before @ b.astype(np.float64))
    if fmt == "nm":
        with pytest.raises(ValueError, match="read-only"):
            M.positions[...] = 0


# ---------------------------------------------------------------- copies

@pytest.mark.parametrize("fmt", FORMATS)
def test_copy_and_astype_share_nothing(fmt):
    """``copy()`` and ``astype`` (even to the same dtype) give independent matrices, as scipy's."""
    rng = np.random.default_rng(45)
    x = sparse.prune_nm(_random(rng, (8, 12), 0.6, ints=True), 2, 4)
    for vt in (np.float32, ml_dtypes.bfloat16, np.int8):
        M = _build(fmt, x, dtype=vt, blocksize=(4, 4))
        ref = _scipy_of(M).toarray()
        arrays = [a for a in (getattr(M, k, None) for k in ("indices", "indptr", "row", "col", "_idx"))
                  if isinstance(a, np.ndarray)]
        for C in (M.copy(), M.astype(vt), M.astype(np.float32), M.astype(vt, "toward_zero")):
            assert not np.shares_memory(C.data, M.data)
            for k in ("indices", "indptr", "row", "col", "_idx"):
                if hasattr(C, k):
                    assert not any(np.shares_memory(getattr(C, k), a) for a in arrays), k
            C.data = np.zeros(C.data.shape)
            if hasattr(C, "indices"):
                C.indices[...] = 0
            if hasattr(C, "col"):
                C.col[...] = 0
            np.testing.assert_array_equal(_scipy_of(M).toarray(), ref)


# ---------------------------------------------------------------- duplicates after index edits

@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR], ids=lambda c: c.__name__)
def test_edited_indices_with_duplicates_add_up(cls):
    """Index arrays edited in place (in range) into duplicates or unsorted order: every
    conversion adds the duplicates, as scipy does with the same arrays."""
    rng = np.random.default_rng(47)
    for trial in range(20):
        x = _random(rng, (6, 8), 0.5, ints=True)
        x[0, :2] = 1  # at least two entries
        M = cls.from_dense(x, blocksize=(1, 2)) if cls is sparse.BSR else cls.from_dense(x)
        idx = M.col if cls is sparse.COO else M.indices
        nmin = M.shape[1] if cls in (sparse.CSR, sparse.COO) else M.shape[0] if cls is sparse.CSC else 4
        k = rng.integers(1, idx.size + 1)
        pos = rng.choice(idx.size, k, replace=False)
        idx[pos] = rng.integers(0, nmin, k)
        if cls is sparse.COO:
            S = sp.coo_array((M.data.astype(np.float64), (M.row, M.col)), shape=M.shape)
        elif cls is sparse.BSR:
            S = sp.bsr_array((M.data.astype(np.float64), M.indices, M.indptr), shape=M.shape)
        else:
            S = getattr(sp, f"{cls.format}_array")((M.data.astype(np.float64), M.indices, M.indptr), shape=M.shape)
        want = S.toarray()
        if cls is sparse.COO:
            key = M.row.astype(np.int64) * M.shape[1] + M.col
            assert M.has_canonical_format == bool(np.all(np.diff(key) > 0))
        elif cls is not sparse.BSR:  # sorted without duplicates inside every row (column)
            segs = np.split(M.indices, M.indptr[1:-1])
            assert M.has_canonical_format == all(np.all(np.diff(g) > 0) for g in segs)
        np.testing.assert_array_equal(M.to_dense(), want)
        np.testing.assert_array_equal(M.to_scipy().toarray(), want)
        for conv in (M.tocsr, M.tocsc, M.tocoo, lambda: M.tobsr((1, 1)),
                     lambda: cls(M), lambda: M.T.T, lambda: sparse.CSR(M)):
            np.testing.assert_array_equal(conv().to_dense(), want)
        np.testing.assert_array_equal(M @ np.ones(8, np.float32), want @ np.ones(8))
        if cls is not sparse.BSR:
            C = M.sum_duplicates()
            np.testing.assert_array_equal(C.to_dense(), want)
            assert C.has_canonical_format


# ---------------------------------------------------------------- scalar operands, tuple arguments

@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_scalar_operands_are_refused(cls):
    for shape in ((4, 1), (1, 4), (1, 1), (3, 4)):
        M = cls(np.ones(shape, np.float32), n=1, m=1) if cls is sparse.NM else cls(np.ones(shape, np.float32))
        S = sp.csr_array(np.ones(shape))
        for s in (3.0, 2, np.float32(3), np.array(3.0), np.array(2, np.int8), np.float64(1.5)):
            with pytest.raises(ValueError):  # scipy refuses both sides
                S @ s
            with pytest.raises(ValueError):
                s @ S
            for f in (lambda: M @ s, lambda: s @ M, lambda: M.matmul(s), lambda: M.rmatmul(s), lambda: M.T @ s):
                with pytest.raises(ValueError, match="^x: scalar operands are not allowed"):
                    f()


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_tuple_arguments_are_the_scipy_forms(cls):
    """Tuples are (data, indices, indptr), (data, (row, col)), (m, n) (or N:M's (data, positions));
    anything else is refused where scipy refuses it, never read as a dense matrix."""
    for arg in (([1.0, 2.0], [0, 1]), (np.array([1.0, 2.0]), np.array([0, 1])), ([1.0], 3.0)):
        if cls is not sparse.NM:
            with pytest.raises(TypeError):
                getattr(sp, f"{cls.format}_array")(arg)
            with pytest.raises(TypeError, match="^arg: "):
                cls(arg)
    for arg in (((2, 3),), (3,), (), ((1, 0), (0, 1), (1, 1), (0, 0))):
        if len(arg) != 1 or np.ndim(arg[0]):  # (scipy reads (3,) as a 1-D shape; lowp matrices are 2-D)
            with pytest.raises(ValueError):
                sp.csr_array(arg)
        with pytest.raises(ValueError, match="^arg: .*accepted forms"):
            cls(arg)
    if cls is not sparse.NM:
        # (data, ij) with ij a list of two index sequences or a (2, nnz) array, as in scipy.
        data, row, col = [1.0, 2.0, 3.0], [0, 2, 1], [3, 0, 3]
        want = sp.coo_array((data, (row, col)), shape=(3, 4)).toarray()
        for ij in ((row, col), [row, col], np.array([row, col])):
            np.testing.assert_array_equal(cls((data, ij), shape=(3, 4)).to_dense(), want)
            np.testing.assert_array_equal(getattr(sp, f"{cls.format}_array")((data, ij), shape=(3, 4)).toarray(),
                                          want)
    # Dense input: ndarrays and lists.
    x = [[1.0, 0.0], [0.0, 2.0]]
    for d in (x, np.array(x)):
        np.testing.assert_array_equal(cls(d).to_dense(), sp.csr_array(d).toarray())


# -- byte order, wide integers, huge shapes, transposed input to prune ---------------------------

@pytest.mark.parametrize("dt,want", [(">f4", np.float32), (">f8", np.float32), (">f2", np.float16),
                                     (np.dtype(lowp.bfloat16).newbyteorder(">"), lowp.bfloat16)])
@pytest.mark.parametrize("form", ["dense", "scipy", "coo", "csr"])
def test_big_endian_values_are_read_by_value(dt, want, form):
    d = np.array([[1.5, 0.0], [0.0, -2.0]])
    big = d.astype(np.dtype(want)).astype(dt) if form == "dense" else np.array([1.5, -2.0]).astype(np.dtype(want)).astype(dt)
    if form == "dense":
        M = sparse.CSR.from_dense(big)
    elif form == "scipy":
        M = sparse.CSR.from_scipy(sp.csr_array((big.astype(np.dtype(want)).astype(np.float32).astype(
            ">f4" if dt != ">f8" else ">f8"), [0, 1], [0, 1, 2]), shape=(2, 2)))
        want = np.float32
    elif form == "coo":
        M = sparse.COO((big, (np.array([0, 1]), np.array([0, 1]))), shape=(2, 2))
    else:
        M = sparse.CSR((big, np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    assert M.dtype == np.dtype(want)
    np.testing.assert_array_equal(M.to_dense().astype(np.float64), d)
    np.testing.assert_array_equal(M @ np.ones(2, np.float32), [1.5, -2.0])


def test_wide_integers_round_once_into_the_values():
    """int64 beyond 2^53 rounds once from its exact value (not through float64)."""
    x = 2**54 + 2**30 + 1  # float64 rounds it to 2^54, a float32 midpoint's side
    assert int(sparse.CSR.from_dense(np.array([[x]], np.int64)).data[0]) == int(np.array([x]).astype(np.float32)[0]) == 2**54 + 2**31
    y = 2**60 + 2**52 + 1  # just past a bf16 midpoint, which float64 drops
    want = float(lowp.round(np.array([y]), "bf16")[0])
    assert want == 2.0**60 * (1 + 2**-7)
    assert float(sparse.CSR.from_dense(np.array([[y]], np.int64), dtype=lowp.bfloat16).data[0]) == want
    M = sparse.CSR((np.array([y], np.int64), np.array([0]), np.array([0, 1])), shape=(1, 1), dtype=lowp.bfloat16)
    assert float(M.data[0]) == want


@pytest.mark.parametrize("rows,col_shape", [((0, 4), 2**62), ((0, 2), 2**62), ((2, 0), 2**62)])
def test_huge_shapes_keep_entries_apart(rows, col_shape):
    """Sorting on (row, col) must not wrap: a key row * n + col passes 2^63 here."""
    r = np.array(rows)
    C = sparse.COO((np.array([1.0, 2.0], np.float32), (r, np.array([0, 0]))), shape=(5, col_shape))
    assert C.has_canonical_format == bool(r[1] > r[0])
    S = C.tocsr().to_scipy().tocoo()
    got = sorted(zip(S.row.tolist(), S.col.tolist(), S.data.tolist()))
    assert got == sorted(zip(r.tolist(), [0, 0], [1.0, 2.0]))
    B = sparse.BSR.from_scipy(C.to_scipy(), blocksize=(1, 1))
    assert sorted(zip(*(a.tolist() for a in (B.to_scipy().tocoo().row, B.to_scipy().tocoo().data)))) == \
        sorted(zip(r.tolist(), [1.0, 2.0]))


@pytest.mark.parametrize("shape", [(3, 2**63), (2**64, 3), (3, 2**70)])
def test_shapes_past_int64_raise_valueerror(shape):
    with pytest.raises(ValueError, match="shape"):
        sparse.COO((np.ones(1, np.float32), (np.array([0]), np.array([0]))), shape=shape)
    with pytest.raises(ValueError, match="shape"):
        sparse.CSR((np.ones(1, np.float32), np.array([0]), np.zeros(shape[0] + 1 if shape[0] < 10 else 2, np.int64)),
                   shape=shape)


@pytest.mark.parametrize("view", [lambda x: x.T, np.asfortranarray, lambda x: x[:, ::-1], lambda x: x[::-1].T])
def test_prune_of_any_layout_matches_its_c_copy(view):
    x = np.random.default_rng(3).standard_normal((6, 5)).astype(np.float32)
    v = view(x)
    np.testing.assert_array_equal(sparse.prune(v, 0.5), sparse.prune(np.ascontiguousarray(v), 0.5))
    assert np.count_nonzero(sparse.prune(v, 0.5)) == v.size - 15


@pytest.mark.parametrize("cls,kw", [(sparse.CSR, {"dtyp": lowp.bfloat16}), (sparse.CSC, {"foo": 1}),
                                    (sparse.COO, {"blocksize": (2, 2)}), (sparse.NM, {"blocksize": (2, 2)}),
                                    (sparse.BSR, {"n": 2})])
def test_conversions_refuse_unknown_keywords(cls, kw):
    d = np.eye(4, dtype=np.float32)
    name = next(iter(kw))
    with pytest.raises(TypeError, match=name):
        cls.from_dense(d, **kw)
    with pytest.raises(TypeError, match=name):
        cls.from_scipy(sp.csr_array(d), **kw)


def test_nm_from_scipy_takes_n_and_m():
    S = sp.csr_array(np.array([[1, 0, 2, 0, 0, 5], [0, 3, 0, 0, 4, 0]], np.float32))
    M = sparse.NM.from_scipy(S, n=1, m=2)
    assert (M.n, M.m) == (1, 2)
    np.testing.assert_array_equal(M.to_dense(), S.toarray())
    with pytest.raises(ValueError, match="n: row 0"):
        sparse.NM.from_scipy(S, n=1, m=3)


def test_messages_name_the_argument():
    with pytest.raises(TypeError, match="^x: unsupported dtype complex128"):
        sparse.CSR.from_dense(np.ones((3, 3), complex))
    with pytest.raises(TypeError, match="^dtype: .*complex64.*accepted: float32, float16, int8"):
        sparse.CSR.from_dense(np.ones((3, 3)), dtype=np.complex64)


@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR], ids=lambda c: c.__name__)
def test_scipy_sorting_in_place_cannot_reorder_converted_matrices(cls):
    """Where values are converted on the way to or from scipy, the index arrays are not
    shared either: scipy's in-place sort_indices/sum_duplicates (spsolve calls them)
    must not reorder a matrix's indices under its values."""
    import scipy.sparse.linalg as spla

    dense = np.array([[4.0, 1.0], [0.0, 3.0]])
    fmt = cls.format
    # lowp -> scipy, values converted (bf16 -> float32): the structure unsorted on purpose.
    unsorted = sp.csr_array((np.array([1.0, 4.0, 3.0]), np.array([1, 0, 1]), np.array([0, 2, 3])), shape=(2, 2))
    M = cls.from_scipy(unsorted.asformat(fmt) if fmt != "csr" else unsorted, dtype=lowp.bfloat16)
    s = M.to_scipy()
    spla.spsolve(s.tocsc() if fmt == "csc" else s.tocsr(), np.ones(2))
    if hasattr(s, "sort_indices"):
        s.sort_indices()
    if hasattr(s, "sum_duplicates"):
        s.sum_duplicates()
    np.testing.assert_array_equal(M.to_dense().astype(np.float64), dense)
    # scipy -> lowp, values converted (float64 -> float32).
    src = sp.csr_array((np.array([1.0, 2.0, 3.0]), np.array([2, 0, 1]), np.array([0, 3])), shape=(1, 3))
    src = src.asformat(fmt) if fmt != "bsr" else sp.bsr_array(src, blocksize=(1, 1))
    if fmt == "coo":
        src = sp.coo_array((np.array([1.0, 2.0, 3.0]), (np.zeros(3, np.int64), np.array([2, 0, 1]))), shape=(1, 3))
    N = cls.from_scipy(src)
    for f in ("sort_indices", "sum_duplicates"):
        if hasattr(src, f):
            getattr(src, f)()
    np.testing.assert_array_equal(N.to_dense(), [[2.0, 3.0, 1.0]])


@pytest.mark.parametrize("fmt", [lowp.FloatFormat(11, 20), lowp.FloatFormat(10, 5), lowp.PositFormat(32, 4)], ids=repr)
@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR], ids=lambda c: c.__name__)
def test_values_beyond_float32s_range_multiply_exactly(cls, fmt):
    """Values float32 cannot hold are not read as float32 (inf or 0) by the products."""
    big = cls.from_dense(np.array([[1e50, 0.0], [0.0, 2.0]]), dtype=fmt)
    tiny = cls.from_dense(np.array([[1e-50, 0.0], [3.0, 2.0]]), dtype=fmt)
    vb, vt = float(lowp.round(np.array([1e50]), fmt)[0]), float(lowp.round(np.array([1e-50]), fmt)[0])
    np.testing.assert_allclose(big @ np.array([1e-30, 1.0], np.float32), [vb * float(np.float32(1e-30)), 2.0], rtol=1e-6)
    np.testing.assert_allclose(tiny @ np.array([1e30, 1.0], np.float32), [vt * float(np.float32(1e30)), 3e30 + 2], rtol=1e-6)
    np.testing.assert_allclose(tiny.matmul(np.array([1e30, 1.0], np.float32), transpose=True),
                               [vt * float(np.float32(1e30)) + 3.0, 2.0], rtol=1e-6)
    np.testing.assert_allclose(np.array([1e30, 1.0], np.float32) @ tiny, [vt * float(np.float32(1e30)) + 3.0, 2.0], rtol=1e-6)


def test_from_dense_refuses_sparse_input():
    for m in (sp.eye(2, format="csr"), sparse.CSR.from_dense(np.eye(2, dtype=np.float32))):
        with pytest.raises(TypeError, match="^x: expected a dense array, got the sparse"):
            sparse.CSR.from_dense(m)


@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR, sparse.NM])
def test_errors_name_the_argument_given(cls):
    """from_scipy names its argument ``m`` for an unsupported value dtype (it named ``data``),
    and ``x @ A`` names x's columns against A's rows (it spoke of x's rows)."""
    with pytest.raises(TypeError, match="^m.dtype: unsupported dtype complex128"):
        cls.from_scipy(sp.csr_matrix(np.eye(4, dtype=complex)))
    A = cls.from_dense(np.eye(4, dtype=np.float32)[:, ::-1].copy())
    with pytest.raises(ValueError, match="^x: has 3 columns but the matrix has 4 rows"):
        np.ones((2, 3), np.float32) @ A
    with pytest.raises(ValueError, match="^x: has 3 columns but the matrix has 4 rows"):
        A.rmatmul(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="^x: has length 3 but the matrix has 4 rows"):
        np.ones(3, np.float32) @ A
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.testing.assert_array_equal(x @ A, x[:, ::-1])
    np.testing.assert_array_equal(x[0] @ A, x[0, ::-1])


def test_no_elementwise_comparison_or_truth_value():
    """== and != would otherwise compare identity (M == M.copy() False), bool() be True."""
    M = sparse.CSR.from_dense(np.eye(2, dtype=np.float32))
    for f in (lambda: M == M.copy(), lambda: M != M.copy(), lambda: M == np.eye(2), lambda: np.eye(2) == M):
        with pytest.raises(TypeError, match="do not compare elementwise"):
            f()
    with pytest.raises(ValueError, match="truth value"):
        bool(M)
    assert M in {M} and hash(M) == hash(M)


def test_bsr_block_zeros_meet_infinities_as_scipy():
    """Zeros stored inside BSR blocks multiply infinities of x into NaN, as in scipy (the
    float32 kernels, not a conversion that drops them)."""
    d = np.array([[1, 0, 2, 0], [0, 3, 0, 0], [0, 0, 0, 4], [5, 0, 0, 0]], np.float32)
    x = np.array([1, np.inf, 1, 1], np.float32)
    want = sp.bsr_array(d, blocksize=(2, 2)) @ x.astype(np.float64)
    for dtype in (None, lowp.bfloat16):
        B = sparse.BSR.from_dense(d, dtype, blocksize=(2, 2))
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(B @ x, want.astype(np.float32))


def test_bsr_conversions_keep_block_zeros_as_scipy():
    """Zeros stored inside blocks are stored entries: tocoo/tocsr keep them, as scipy's do,
    so a wide format's float64 product (which goes through COO) meets infinities as the
    float32 kernels do."""
    d = np.array([[1, 0, 2, 0], [0, 3, 0, 0], [0, 0, 0, 4], [5, 0, 0, 0]], np.float32)
    S = sp.bsr_array(d, blocksize=(2, 2))
    B = sparse.BSR.from_dense(d, blocksize=(2, 2))
    for conv in ("tocoo", "tocsr", "tocsc"):
        got, want = getattr(B, conv)(), getattr(S, conv)()
        assert got.nnz == want.nnz == B.nnz
        np.testing.assert_array_equal(got.to_dense(), d)
    x = np.array([1, np.inf, 1, 1], np.float32)
    with np.errstate(invalid="ignore"):
        want = (S @ x.astype(np.float64)).astype(np.float32)
        W = sparse.BSR.from_dense(d, lowp.FloatFormat(11, 20), blocksize=(2, 2))
        np.testing.assert_array_equal(W @ x, want)


@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC, sparse.COO], ids=lambda c: c.__name__)
def test_float64_products_of_wide_formats_match_a_float64_reference(cls):
    """The float64 path for values float32 cannot hold: empty rows, both orientations, and
    products wider than one slice of columns."""
    rng = np.random.default_rng(7)
    d = rng.standard_normal((700, 600)) * (rng.random((700, 600)) < 0.3)
    d[5] = 0.0
    d[:, 9] = 0.0
    fmt = lowp.FloatFormat(11, 20)
    M = cls.from_dense(d, dtype=fmt)
    v = lowp.round(d, fmt)
    x = rng.standard_normal((600, 40)).astype(np.float32)
    np.testing.assert_allclose(M @ x, v @ x.astype(np.float64), rtol=1e-5, atol=1e-4)
    y = rng.standard_normal((700, 3)).astype(np.float32)
    np.testing.assert_allclose(M.matmul(y, transpose=True), v.T @ y.astype(np.float64), rtol=1e-5, atol=1e-4)
    assert (M @ x)[5].tolist() == [0.0] * 40


def test_prune_ranks_64_bit_integers_exactly():
    """Magnitudes of int64/uint64 entries beyond 2**53 are ranked exactly (float64 would
    merge 2**62 and 2**62 + 1 into a tie, and the lower index would win), the most
    negative int64 included."""
    x = np.array([2**62, 2**62 + 1, 1, 2], np.int64)
    np.testing.assert_array_equal(sparse.prune_nm(x, 1, 4), [0, 2**62 + 1, 0, 0])
    y = np.array([2**62 + 1, 2**62, 1, 2], np.int64)
    np.testing.assert_array_equal(sparse.prune(y, 0.75), [2**62 + 1, 0, 0, 0])
    z = np.array([2**63 - 1, -2**63, 5, -5, 2**63 - 2, 7], np.int64)
    np.testing.assert_array_equal(sparse.prune(z, 0.5), [2**63 - 1, -2**63, 0, 0, 2**63 - 2, 0])
    np.testing.assert_array_equal(sparse.prune_nm(z.reshape(2, 3), 1, 3, axis=1), [[0, -2**63, 0], [0, 2**63 - 2, 0]])
    u = np.array([2**64 - 2, 2**64 - 1, 3, 1], np.uint64)
    np.testing.assert_array_equal(sparse.prune_nm(u, 1, 2), [0, 2**64 - 1, 3, 0])
    # Ties still keep the lower index.
    np.testing.assert_array_equal(sparse.prune_nm(np.array([-7, 7, 7, -7], np.int64), 1, 2), [-7, 0, 7, 0])


def test_64_bit_integer_operands_round_once():
    """A 64-bit integer dense operand is rounded to float32 once from its exact value (not
    through float64, which would round 2**60 + 2**36 + 1 down to the tie 2**60 + 2**36 and
    then to even, 2**60): the same float32 as lowp.cast, from either side."""
    v = 2**60 + 2**36 + 1
    want = np.float32(2.0**60 + 2**37)
    assert lowp.cast(np.array([v], np.int64), np.float32)[0] == want
    m = sparse.CSR.from_scipy(sp.csr_array(np.eye(2, dtype=np.float32)))
    np.testing.assert_array_equal(m @ np.array([v, 3], np.int64), [want, 3])
    np.testing.assert_array_equal(np.array([v, 3], np.int64) @ m, [want, 3])
    np.testing.assert_array_equal(m @ np.array([[v], [2]], np.uint64), [[want], [2]])
    np.testing.assert_array_equal(m.matmul(np.array([3, v], np.int64), transpose=True), [3, want])


@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC])
@pytest.mark.parametrize("dtype", [np.float32, lowp.bfloat16, "e4m3fn"])
def test_sorted_indices_keeps_duplicates_as_scipy(cls, dtype):
    """sorted_indices sorts each row's (column's) indices and keeps duplicates, as scipy's
    (it used to add them up, changing nnz); has_sorted_indices reads the index arrays."""
    data = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], np.float32)
    indices = np.array([2, 0, 2, 1, 3, 0])
    indptr = np.array([0, 3, 3, 6])
    theirs = (sp.csr_matrix if cls is sparse.CSR else sp.csc_matrix)((data, indices, indptr), shape=(3, 4) if cls is sparse.CSR else (4, 3))
    ours = cls((data, indices, indptr), shape=theirs.shape, dtype=dtype)
    assert not ours.has_sorted_indices and not theirs.has_sorted_indices
    s, t = ours.sorted_indices(), theirs.sorted_indices()
    assert s.nnz == t.nnz == 6 and s.has_sorted_indices and not s.has_canonical_format
    np.testing.assert_array_equal(s.indices, t.indices)
    np.testing.assert_array_equal(s.indptr, t.indptr)
    np.testing.assert_array_equal(s.data.astype(np.float32), t.data)
    np.testing.assert_array_equal(s.to_dense(), t.toarray())
    # The original is untouched; duplicates only: sorted but not canonical.
    np.testing.assert_array_equal(ours.indices, indices)
    dup = cls((data[:2], np.array([1, 1]), np.array([0, 2, 2, 2])), shape=theirs.shape, dtype=dtype)
    assert dup.has_sorted_indices and not dup.has_canonical_format
    u = ours.sum_duplicates().sorted_indices()
    assert u.has_canonical_format and u.nnz == 5
    # Indices changed in place are read again.
    s.indices[:2] = s.indices[1::-1].copy()
    assert not s.has_sorted_indices


def test_index_arrays_written_during_a_product_never_crash():
    """Products release the GIL, and the index arrays are the matrix's own writable
    arrays: another thread writing bad entries into indptr while products run gives
    ValueErrors or numbers, never a crash (the kernels read indptr again after checking
    it, which segfaulted). Indices written meanwhile are checked as the kernels read them,
    except by the float32 vector kernel (see the README)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import threading, time, numpy as np
        from lowp import sparse
        rng = np.random.default_rng(0)
        d = sparse.prune(rng.standard_normal((8000, 2000)).astype(np.float32), 0.95)
        v, v8 = rng.standard_normal(2000).astype(np.float32), rng.standard_normal((2000, 8)).astype(np.float32)
        for M in (sparse.CSR.from_dense(d), sparse.BSR.from_dense(d, blocksize=(4, 4))):
            for arr, xs in ((M.indptr, (v, v8)), (M.indices, (v8,))):
                good, bad = arr.copy(), arr.copy()
                bad[1:-1:2] = 2**30
                bad[2:-1:2] = -7
                end = time.monotonic() + 1.0
                def write():
                    while time.monotonic() < end:
                        arr[:] = bad
                        arr[:] = good
                t = threading.Thread(target=write)
                t.start()
                while t.is_alive():
                    for x in xs:
                        try:
                            M @ x
                        except ValueError:
                            pass
                t.join()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-1] == "ok", (r.returncode, r.stderr[-2000:])


@pytest.mark.parametrize("dtype", [np.float32, lowp.bfloat16])
def test_astype_checks_seed_and_saturate_even_when_nothing_rounds(dtype):
    """seed and saturate are checked as lowp.cast checks them, also where the values need
    no rounding (float32 into float32)."""
    m = sparse.CSR.from_dense(np.array([[1.3, 0.0], [0.0, 2.7]], np.float32))
    for kw, err, msg in (({"seed": -5}, ValueError, "^seed: must be in"), ({"seed": "abc"}, TypeError, "^seed: expected"),
                         ({"seed": 2**80}, ValueError, "^seed: must be in"),
                         ({"saturate": "yes"}, TypeError, "^saturate: expected a bool")):
        with pytest.raises(err, match=msg):
            m.astype(dtype, "stochastic", **kw)
    assert m.astype(dtype, "stochastic", seed=5).nnz == 2


@pytest.mark.parametrize("src,dst", [(np.float16, np.float16), (np.float32, np.float32), (np.float16, np.float32),
                                     (lowp.bfloat16, lowp.bfloat16), (np.float32, lowp.float8_e5m2)])
@pytest.mark.parametrize("rounding", ["nearest_even", "toward_zero"])
def test_astype_saturates_as_cast_does_also_where_nothing_rounds(src, dst, rounding):
    """saturate=True clamps infinities to +-max (NaN stays) in every astype, the same
    format and float32 targets included, as lowp.cast of the values does."""
    x = np.array([[np.inf, -np.inf, 1.0, np.nan]], np.float32).astype(src)
    m = sparse.CSR.from_dense(x)
    got = m.astype(dst, rounding, saturate=True).to_dense()
    want = lowp.cast(x.astype(np.float64), dst, rounding, saturate=True)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))
    assert np.isfinite(got.astype(np.float64)[0, :3]).all()
    kept = m.astype(dst, rounding).to_dense().astype(np.float64)
    assert np.isinf(kept[0, :2]).all()  # (without saturate: kept)


@pytest.mark.parametrize("which", ["row", "col"])
def test_coo_products_name_the_coordinate_made_out_of_range(which):
    """A COO whose row or col is written out of range after construction: products raise
    naming that array (COO has no indices)."""
    M = sparse.COO.from_dense(np.eye(3, dtype=np.float32))
    getattr(M, which)[1] = 7
    x = np.ones(3, np.float32)
    for f in (lambda: M @ x, lambda: x @ M, lambda: M @ np.ones((3, 5), np.float32)):
        with pytest.raises(ValueError, match=f"^{which}: entry 1 is out of range"):
            f()


def test_data_assignment_refused_on_read_only_storage():
    """A matrix built from a read-only values array shares it (so M.T does too): ``M.data =``
    cannot write in place and is refused rather than giving M alone a copy, which left M.T
    with the old values. ``copy()`` gives a matrix that takes it."""
    d = np.array([1.0, 2.0, 3.0], np.float32)
    d.flags.writeable = False
    M = sparse.CSR((d, np.array([0, 1, 2]), np.array([0, 1, 2, 3])), shape=(3, 3))
    T = M.T
    with pytest.raises(ValueError, match="^data: .*read-only.*copy"):
        M.data = np.array([10.0, 20.0, 30.0])
    np.testing.assert_array_equal(np.diag(M.to_dense()), [1, 2, 3])
    np.testing.assert_array_equal(np.diag(T.to_dense()), [1, 2, 3])
    C = M.copy()
    CT = C.T
    C.data = np.array([10.0, 20.0, 30.0])
    np.testing.assert_array_equal(np.diag(CT.to_dense()), [10, 20, 30])
    np.testing.assert_array_equal(np.diag(M.to_dense()), [1, 2, 3])


@pytest.mark.parametrize("src", ["csr", "csc", "bsr", "coo"])
def test_from_scipy_with_byte_swapped_values(src):
    """scipy keeps values assigned in the other byte order but refuses them in its own
    conversions (tocoo, copy); every class reads them by value."""
    sp = pytest.importorskip("scipy.sparse")
    x = sparse.prune_nm(_random(np.random.default_rng(48), (8, 8), 0.5, ints=True), 2, 4)
    for cls in (sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR, sparse.NM):
        m = sp.csr_matrix(x).asformat(src, copy=True)
        m.data = m.data.astype(">f4")
        np.testing.assert_array_equal(cls.from_scipy(m).to_dense(), x)
        np.testing.assert_array_equal(cls.from_scipy(m, dtype=ml_dtypes.bfloat16).to_dense().astype(np.float32), x)


def test_from_scipy_takes_dok_matrices_and_arrays():
    for make in (sp.dok_array, sp.dok_matrix):
        s = make((2, 3), dtype=np.float32)
        s[0, 1] = 3.0
        s[1, 2] = -0.5
        for cls in (sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR):
            np.testing.assert_array_equal(cls.from_scipy(s).to_dense(), s.toarray())
        np.testing.assert_array_equal(sparse.CSR.from_scipy(s, dtype=lowp.bfloat16).to_dense().astype(np.float32),
                                      s.toarray())


@pytest.mark.parametrize("dtype, vals", [(np.int8, [100, 100, -3]), (lowp.posit8, [1.0, 2**-5, 2**-5]),
                                         (np.float32, [1.0, 2**-30, 3.0])])
def test_csr_csc_conversions_keep_duplicates_as_scipy(dtype, vals):
    data = np.array(vals, np.float32)
    indices, indptr = np.array([0, 0, 0]), np.array([0, 3, 3])
    M = sparse.CSR((data, indices, indptr), shape=(2, 1), dtype=dtype)
    x = np.ones(1, np.float32)
    exact = float(np.sum(np.asarray(M.data).astype(np.float64)))
    for N in (M.tocsc(), M.tocsc().tocsr(), M.T.tocsr().T, M.tocoo(), M.tocsc().tocoo()):
        assert N.nnz == 3
        assert (N @ x)[0] == np.float32(exact), type(N)
        np.testing.assert_array_equal(np.sort(N.to_scipy().data), np.sort(M.to_scipy().data))
    s = M.to_scipy()
    assert s.tocsc().nnz == M.tocsc().nnz
    # Where a position holds one value the sum is rounded once into the format.
    fmt = lowp.format(dtype) if dtype != np.float32 else None
    summed = float(np.float32(exact)) if fmt is None else float(lowp.round(np.array([exact]), fmt, saturate=True)[0])
    for N in (M.tocoo().tocsr(), M.tobsr((1, 1)), M.tonm(1, 1)):
        assert N.to_dense().astype(np.float64)[0, 0] == summed, type(N)
    assert M.to_dense().astype(np.float64)[0, 0] == summed


def test_data_errors_name_data():
    M = sparse.CSR.from_dense(np.array([[1.0, 0, 2]]), dtype=np.int8)
    with pytest.raises(ValueError, match="^data: contains NaN"):
        M.data = np.array([np.nan, 1.0])
    with pytest.raises(ValueError, match="^data: contains NaN"):
        sparse.CSR((np.array([np.nan]), [0], [0, 1]), shape=(1, 1), dtype=np.int8)
    with pytest.raises(ValueError, match="^x: contains NaN"):
        sparse.CSR.from_dense(np.array([[np.nan]]), dtype=np.int8)


_ALL = (sparse.CSR, sparse.CSC, sparse.COO, sparse.BSR, sparse.NM)


@pytest.mark.parametrize("cls", _ALL)
def test_from_scipy_checks_value_counts(cls):
    """A scipy matrix whose data was replaced by a shorter array: refused naming m.data
    (scipy's conversions read past its end)."""
    x = np.array([[1, 0, 2], [0, 3, 0]], np.float32)
    s = sp.csr_array(x)
    s.data = np.array([7, 8], np.float32)
    with pytest.raises(ValueError, match=r"^m\.data: expected 3 values"):
        cls.from_scipy(s)
    c = sp.coo_array(x)
    c.data = np.array([7, 8], np.float32)
    with pytest.raises(ValueError, match=r"^m\.data: expected 3 values"):
        cls.from_scipy(c)
    b = sp.bsr_array(np.ones((4, 4), np.float32), blocksize=(2, 2))
    b.data = np.full((1, 2, 2), 5, np.float32)
    with pytest.raises(ValueError, match=r"^m\.data: expected shape \(4, 2, 2\)"):
        cls.from_scipy(b)
    with pytest.raises(ValueError, match=r"^arg\.data: expected 3 values"):
        (cls if cls in (sparse.CSR, sparse.CSC) else sparse.CSR)(s)


@pytest.mark.parametrize("cls", _ALL)
def test_from_scipy_lil_is_checked(cls):
    """A LIL's lists are writable and scipy's conversion trusts them (a column out of
    range crashed it): checked, naming m.rows / m.data."""
    x = np.array([[1, 0, 2], [0, 3, 0]], np.float32)
    for bad in ([0, 10], [-5, 0]):
        s = sp.lil_array(x)
        s.rows[0] = bad
        with pytest.raises(ValueError, match=r"^m\.rows: row 0 holds a column index out of range \[0, 3\)"):
            cls.from_scipy(s)
    s = sp.lil_array(x)
    s.data[0] = [1.0]
    with pytest.raises(ValueError, match=r"^m\.data: row 0 holds 1 values for 2 column indices"):
        cls.from_scipy(s)
    np.testing.assert_array_equal(cls.from_scipy(sp.lil_array(x)).to_dense(), x)
    np.testing.assert_array_equal(cls.from_scipy(sp.lil_array((3, 4), dtype=np.float32)).to_dense(),
                                  np.zeros((3, 4), np.float32))


@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC])
def test_compressed_from_scipy_coo_adds_duplicates_in_float64(cls):
    """As COO.from_scipy(...).tocsr(): duplicates added exactly, rounded once (int8
    saturates), not in the values' own dtype as scipy adds them."""
    s = sp.coo_array((np.array([100, 100], np.int8), ([0, 0], [0, 0])), shape=(1, 1))
    assert cls.from_scipy(s).to_dense().tolist() == [[127]]
    assert cls(s).to_dense().tolist() == [[127]]
    assert cls.from_scipy(s, dtype=np.float32).to_dense().tolist() == [[200.0]]
    d = np.array([1, 2**-24, 2**-24], np.float32)
    s = sp.coo_array((d, ([0, 0, 0], [0, 0, 0])), shape=(1, 1))
    assert cls.from_scipy(s).to_dense()[0, 0] == np.float32(1 + 2**-23)


@pytest.mark.parametrize("cls", _ALL)
@pytest.mark.parametrize("src", ["csr", "csc", "coo", "bsr"])
def test_from_scipy_keeps_low_precision_values(cls, src):
    """scipy matrices holding float16 (or a lowp dtype) values: kept in that dtype by
    every class (scipy's own conversions widen or refuse them)."""
    x = np.array([[1, 0, 2, 0], [0, 3, 0, 0]], np.float32)
    for dt in (np.float16, lowp.bfloat16):
        s = getattr(sp, f"{src}_array")(x)
        s.data = s.data.astype(dt)
        m = cls.from_scipy(s)
        assert m.dtype == np.dtype(dt)
        np.testing.assert_array_equal(m.to_dense().astype(np.float32), x)


def test_compressed_from_lowp_matrix_keeps_duplicates():
    M = sparse.CSR((np.array([1, 2, 3], np.float32), [1, 1, 0], [0, 2, 3]), shape=(2, 2))
    assert (sparse.CSR(M).nnz, sparse.CSC(M).nnz, M.tocsc().nnz) == (3, 3, 3)
    s = sp.csr_array((np.array([1, 2, 3], np.float32), [1, 1, 0], [0, 2, 3]), shape=(2, 2))
    assert (sp.csr_array(s).nnz, sp.csc_array(s).nnz) == (3, 3)
    np.testing.assert_array_equal(sparse.CSC(M).to_dense(), M.to_dense())


def test_bsr_blocksize_not_a_pair_named():
    d = np.ones((1, 2, 2), np.float32)
    with pytest.raises(ValueError, match="^blocksize: expected two positive ints, got 2"):
        sparse.BSR((d, [0], [0, 1]), shape=(2, 2), blocksize=2)
    with pytest.raises(ValueError, match="^blocksize: expected two positive ints"):
        sparse.BSR.from_scipy(sp.bsr_array(np.ones((2, 2), np.float32), blocksize=(2, 2)), blocksize=2)


def test_matrix_subclass_input_and_huge_scale():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        x = np.asmatrix(np.array([[1, 0, 2, 0], [0, 3, 0, 4]], np.float32))
    for cls in _ALL:
        M = cls.from_dense(x)
        assert M.data.shape == cls.from_dense(np.asarray(x)).data.shape
        np.testing.assert_array_equal(M.to_dense(), np.asarray(x))
    M = sparse.CSR.from_dense(np.eye(2, dtype=np.float32))
    with pytest.raises(ValueError, match="^scale: must be a positive finite number, got an int past float64"):
        M.astype(np.int8, scale=2**1024)


@pytest.mark.parametrize("cls", [sparse.CSR, sparse.CSC])
def test_scipy_coo_duplicates_added_before_rounding(cls):
    """float64 duplicates are added exactly and rounded once into the stored format (not
    rounded one by one first, which rounds the sum twice)."""
    s = sp.coo_array((np.array([1.0, 2**-24 + 2**-50]), ([0, 0], [0, 0])), shape=(1, 1))
    assert cls.from_scipy(s).to_dense()[0, 0] == np.float32(1 + 2**-23)
    assert cls(s).to_dense()[0, 0] == np.float32(1 + 2**-23)
    s = sp.coo_array((np.array([1.0, 2**-8 + 2**-20]), ([0, 0], [0, 0])), shape=(1, 1))
    assert float(cls.from_scipy(s, dtype=lowp.bfloat16).to_dense()[0, 0]) == 1 + 2**-7


def test_compressed_of_a_lowp_coo_adds_its_duplicates():
    """As scipy's csr_array(coo) and coo.tocsr(): duplicates added (int8 saturating)."""
    c = sparse.COO((np.float32([1, 2, 3]), ([0, 0, 1], [0, 0, 1])), shape=(2, 2))
    assert sparse.CSR(c).nnz == c.tocsr().nnz == sparse.CSC(c).nnz == 2
    c8 = sparse.COO((np.int8([100, 100]), ([0, 0], [0, 0])), shape=(1, 1))
    assert sparse.CSR(c8).data.tolist() == [127]
