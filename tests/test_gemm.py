"""lowp.matmul (float32 / float64 / int8 paths), qmatmul, padded_ld, empty."""

import ml_dtypes
import numpy as np
import pytest

import lowp
from lowp import _lowp

FLOAT_DTYPES = [
    np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn,
    ml_dtypes.float8_e4m3, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz,
    lowp.posit8, lowp.posit16,
]
MR, NR = 6, 16  # the AVX2 tile
MR5, NR5 = 12, 32  # the AVX-512 tile
SHAPES = [(0, 5, 3), (5, 0, 3), (4, 3, 0), (1, 1, 1), (MR - 1, NR - 1, 7), (MR + 1, NR + 1, 5), (MR, NR, 1),
          (63, 65, 257), (65, 63, 63), (257, 17, 33), (MR5 + 1, NR5 - 1, 300), (MR5 * 3 - 1, NR5 * 2 + 1, 513)]


@pytest.fixture(params=["simd", "avx2", "scalar"])
def isa(request):
    """The best SIMD path, the AVX2 one where the best is AVX-512 (the float32 GEMM has
    kernels for both), and the scalar reference."""
    if request.param == "avx2" and _lowp.detected_isa() != "avx512":
        pytest.skip("the AVX2 path is the best path on this CPU")
    if request.param != "simd":
        _lowp.set_isa(request.param)
    yield request.param
    _lowp.set_isa(None)


def rand(shape, dtype, seed=0, scale=1.0):
    g = np.random.default_rng(seed)
    x = (g.standard_normal(shape) * scale).astype(np.float32)
    if np.dtype(dtype).name.startswith("float8"):
        x = np.clip(x, -200, 200)
    return x.astype(dtype)


def check_f32(c, a, b):
    """c equals the float64 product within float32 accumulation error: k*u*(|a| @ |b|)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    k = a.shape[-1]
    bound = (k + 2) * 2.0**-24 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    assert c.shape == ref.shape
    assert np.all(np.abs(c.astype(np.float64) - ref) <= bound), np.max(np.abs(c - ref) - bound)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_shapes_and_dtypes(isa, dtype, shape):
    m, n, k = shape
    a = rand((m, k), dtype, 1)
    b = rand((k, n), dtype, 2)
    c = lowp.matmul(a, b)
    assert c.dtype == np.float32
    check_f32(c, a, b)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.float16],
                         ids=lambda d: np.dtype(d).name)
def test_strides_and_views(isa, dtype):
    big_a = rand((70, 90), dtype, 3)
    big_b = rand((90, 80), dtype, 4)
    cases = [
        (big_a[::2, ::3], big_b[:30, ::2]),          # non-contiguous
        (big_a[:40, :50].T, big_b[:40, :33]),       # transposed a
        (big_a[:33, :40], big_b[:50, :40].T),       # transposed b
        (big_a[::-1, :20], big_b[:20, ::-1]),       # negative strides
        (big_a[:20, ::-2], big_b[::-2, :19]),       # negative inner strides
        (np.asfortranarray(big_a[:17, :29]), np.asfortranarray(big_b[:29, :23])),
    ]
    for a, b in cases:
        check_f32(lowp.matmul(a, b), a, b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [np.int8], ids=lambda d: np.dtype(d).name)
def test_b_layouts_give_the_same_bits(isa, dtype):
    """B row-major (its rows in either order; bf16 rows of products of few rows
    are read in place, not packed), as the transposed view of a row-major W (x @
    w.T: its columns contiguous, packed a strip at a time, or dotted for up to 6
    rows, two groups of columns or one where they lie 2 KiB apart), Fortran-ordered and
    strided: one result, bit for bit, at 1 and 2 threads, over several depth blocks, strips
    and a partial last strip; and that result the float64 product's within
    float32 accumulation error (int8: exact)."""
    n0 = lowp.get_num_threads()
    try:
        for m, k, n in [(8, 700, 70), (1, 1030, 33), (13, 513, 17), (40, 600, 200), (12, 300, 48), (2, 257, 20), (5, 601, 40),
                        (1, 1024, 24)]:
            if dtype is np.int8:
                g = np.random.default_rng(m + k)
                a = g.integers(-128, 128, (m, k)).astype(np.int8)
                w = g.integers(-128, 128, (n, k)).astype(np.int8)
            else:
                a = rand((m, k), dtype, m + k)
                w = rand((n, k), dtype, n + k)
            wide = np.zeros((n, 2 * k), w.dtype)
            wide[:, ::2] = w
            layouts = [np.ascontiguousarray(w.T), w.T, np.asfortranarray(w.T), wide[:, ::2].T, w[::-1].T[:, ::-1],
                       np.ascontiguousarray(w.T[::-1])[::-1]]
            results = []
            for threads in (1, 2):
                lowp.set_num_threads(threads)
                results += [lowp.matmul(a, b) for b in layouts]
            ref = results[0]
            for r in results[1:]:
                assert r.dtype == ref.dtype and np.array_equal(r.view(np.uint8), ref.view(np.uint8)), (m, k, n)
            # Columns in reverse (a negative stride between the contiguous columns).
            rev = lowp.matmul(a, w[::-1].T)
            assert np.array_equal(rev.view(np.uint8), lowp.matmul(a, np.ascontiguousarray(w[::-1].T)).view(np.uint8))
            assert np.array_equal(rev.view(np.uint8), np.ascontiguousarray(ref[:, ::-1]).view(np.uint8))
            if dtype is np.int8:
                assert np.array_equal(ref.astype(np.int64), a.astype(np.int64) @ w.T.astype(np.int64))
            else:
                check_f32(ref, a, w.T)
    finally:
        lowp.set_num_threads(n0)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz], ids=lambda d: np.dtype(d).name)
def test_vector_times_aliasing_columns(isa, dtype):
    """One row times a w.T whose rows (B's columns) lie a multiple of 2 KiB apart
    (padded rows of 2048 bytes and 4096; float32's 4096 and 8192), its depth 800 (a last block of 32
    steps), and a row-major matrix times a vector so stored: the bits of the
    same product with B's rows contiguous, the float64 product's within float32
    accumulation error."""
    k, n = 800, 37
    size = np.dtype(dtype).itemsize
    for row_bytes in [r for r in (2048, 4096, 8192) if r // size >= k][:2]:
        ld = row_bytes // size
        big = rand((n, ld), dtype, ld)
        w = big[:, :k]
        x = rand((1, k), dtype, 5)
        got = lowp.matmul(x, w.T)
        assert np.array_equal(got.view(np.uint32), lowp.matmul(x, np.ascontiguousarray(w.T)).view(np.uint32)), row_bytes
        check_f32(got, x, w.T)
        col = lowp.matmul(w, x.T)
        assert np.array_equal(col.view(np.uint32), lowp.matmul(np.ascontiguousarray(w), np.ascontiguousarray(x.T)).view(np.uint32))
        assert np.array_equal(col[:, 0].view(np.uint32), got[0].view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fnuz, np.float64, np.int8],
                         ids=lambda d: np.dtype(d).name)
def test_few_columns(isa, dtype):
    """A matrix times a few columns (2 to 8), A row-major, Fortran-ordered or reversed, at
    1 and 2 threads: the bits of the same columns of a product with 16 columns, and the
    float64 product's within float32 accumulation error (int8: exact; float64: its own
    accumulation)."""
    n0 = lowp.get_num_threads()
    try:
        for m, k in [(700, 1030), (9, 300), (40, 257)]:
            g = np.random.default_rng(m + k)
            if dtype is np.int8:
                w = g.integers(-128, 128, (m, k)).astype(np.int8)
                x = g.integers(-128, 128, (k, 16)).astype(np.int8)
            else:
                w = rand((m, k), dtype, m)
                x = rand((k, 16), dtype, k)
            for threads in (1, 2):
                lowp.set_num_threads(threads)
                wide = lowp.matmul(w, x)
                for a in (w, np.asfortranarray(w), w[::-1, ::-1]):
                    # (A reversed sums in the other order: its own 16 columns.)
                    full = wide if a.strides[1] > 0 else lowp.matmul(a, x)
                    for n in (2, 3, 6, 8):
                        xa = x[:, :n]
                        got = lowp.matmul(a, xa)
                        assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(full[:, :n]).view(np.uint8)), (m, k, n)
                        if dtype is np.int8:
                            assert np.array_equal(got.astype(np.int64), a.astype(np.int64) @ xa.astype(np.int64))
                        elif dtype is np.float64:
                            ref = a @ xa
                            assert np.all(np.abs(got - ref) <= (k + 2) * 2.0**-53 * (np.abs(a) @ np.abs(xa)))
                        else:
                            check_f32(got, a, xa)
    finally:
        lowp.set_num_threads(n0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16], ids=lambda d: np.dtype(d).name)
def test_a_rows_read_in_place(isa, dtype):
    """Products of up to 256 columns of B whose A has contiguous rows of float32 or float64
    (64 of bf16 and 16 of fp16, decoded by the kernel; fp16 with a signaling NaN, which
    the kernel's conversion quiets as the FMA quiets the packed one) read those rows in
    place (a last strip of fewer rows packed): the bits of the same
    product with A Fortran-ordered (packed), for A row-major, a view of padded rows and
    rows reversed, at 1 and 2 threads, over several depth blocks; NaN and infinities in A
    where they were. Columns on both sides of the limit and of a strip."""
    n0 = lowp.get_num_threads()
    nr = 8 if dtype is np.float64 else 16
    try:
        for m, k in [(601, 700), (37, 300), (6, 513)]:
            g = np.random.default_rng(m * k)
            wide = g.standard_normal((m, k + 5)).astype(dtype)
            wide[m // 2, 3] = np.nan
            if dtype is np.float16:
                wide.view(np.uint16)[m // 3, 5] = 0x7C01  # signaling
            wide[m - 1, k - 1] = np.inf
            wide[0, 0] = -np.inf
            for n in (1, 7, nr, nr + 1, 64, 65, 256, 257):
                x = g.standard_normal((k, n)).astype(dtype)
                for threads in (1, 2):
                    lowp.set_num_threads(threads)
                    for a in (np.ascontiguousarray(wide[:, :k]), wide[:, :k], wide[::-1, :k]):
                        got = lowp.matmul(a, x)
                        want = lowp.matmul(np.asfortranarray(a), x)
                        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (m, k, n, threads, a.strides)
                        ok = np.isfinite(a).all(axis=1)
                        if dtype is not np.float64:
                            check_f32(got[ok], a[ok], x)
                        else:
                            ref = a[ok] @ x
                            assert np.all(np.abs(got[ok] - ref) <= (k + 2) * 2.0**-53 * (np.abs(a[ok]) @ np.abs(x)))
                        assert not np.isfinite(got[~ok]).any()
    finally:
        lowp.set_num_threads(n0)


@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3],
                         ids=lambda d: np.dtype(d).name)
def test_fp8_specials_in_vector_products(isa, dtype):
    """A NaN (and for float8_e4m3 an infinity) among the fp8 values of B in a
    vector-matrix, an x @ w.T and a matrix-vector product (whose codes are read
    in registers, special codes set aside): NaN or infinity exactly where the
    float64 product has them, the rest within float32 accumulation error."""
    k, n = 700, 300
    x = rand((1, k), np.float32, 7)
    w = rand((n, k), dtype, 8)
    w[5, 600] = np.nan
    if dtype is ml_dtypes.float8_e4m3:
        w[200, 3] = np.inf
        w[201, 699] = -np.inf
    for a, b in [(x, np.ascontiguousarray(w.T)), (x, w.T), (w, x.T)]:
        got = lowp.matmul(a, b).astype(np.float64)
        with np.errstate(invalid="ignore"):
            ref = a.astype(np.float64) @ b.astype(np.float64)
        assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.isnan(ref).sum() == 1
        assert np.array_equal(got[np.isinf(ref)], ref[np.isinf(ref)])
        fin = np.isfinite(ref)
        assert fin.sum() == ref.size - (1 if dtype is not ml_dtypes.float8_e4m3 else 3)
        b64 = b.astype(np.float64)
        bound = (k + 2) * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(np.where(np.isfinite(b64), b64, 0)))
        assert np.all(np.abs(got[fin] - ref[fin]) <= bound[fin])


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_b_layouts_give_the_same_nan_bits(isa, dtype):
    """Signaling and quiet NaNs of both signs and payloads, and infinities, in A and
    B: B read in place (bf16 and fp16 rows of products of few rows) and packed
    (its transposed view) give the same bits, NaN payloads included. Up to 6
    rows times the transposed view take the column dots instead: the same bits
    and NaNs in the same places (a NaN's payload, where several meet, follows
    the operand order of each path's FMAs)."""
    bits = {np.float16: (np.uint16, [0x7C01, 0xFC05, 0x7E00, 0x7D55, 0x7C00, 0xFC00]),
            ml_dtypes.bfloat16: (np.uint16, [0x7F81, 0xFF85, 0x7FC0, 0x7FD5, 0x7F80, 0xFF80]),
            np.float32: (np.uint32, [0x7F800001, 0xFF800005, 0x7FC00000, 0x7FD55555, 0x7F800000, 0xFF800000])}
    ut, codes = bits[dtype]
    for m, k, n in [(8, 300, 48), (9, 600, 33), (3, 600, 33)]:
        a = rand((m, k), dtype, m)
        w = rand((n, k), dtype, n)
        g = np.random.default_rng(k)
        for x, count in ((w, 40), (a, 3)):
            flat = x.reshape(-1).view(ut)
            flat[g.integers(0, flat.size, count)] = g.choice(np.array(codes, ut), count)
        rows = lowp.matmul(a, np.ascontiguousarray(w.T))
        packed = lowp.matmul(a, w.T)
        nan = np.isnan(rows)
        assert nan.any() and (~nan).any()
        if m <= 6:
            assert np.array_equal(np.isnan(packed), nan), (m, k, n)
            assert np.array_equal(rows[~nan].view(np.uint32), packed[~nan].view(np.uint32)), (m, k, n)
        else:
            assert np.array_equal(rows.view(np.uint32), packed.view(np.uint32)), (m, k, n)


def test_mixed_formats_and_f64(isa):
    a = rand((20, 30), ml_dtypes.bfloat16, 5)
    b = rand((30, 10), ml_dtypes.float8_e5m2, 6)
    check_f32(lowp.matmul(a, b), a, b)
    a64 = rand((20, 30), np.float64, 7)
    c = lowp.matmul(a64, b)
    assert c.dtype == np.float64
    ref = a64 @ b.astype(np.float64)
    assert np.allclose(c, ref, rtol=1e-13, atol=1e-13)
    c = lowp.matmul(a, b, accumulate="float64")
    assert c.dtype == np.float64
    assert np.allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-14, atol=1e-14)


def test_numpy_matmul_shapes():
    a = rand((3, 4, 5), np.float32, 8)
    b = rand((5, 6), np.float32, 9)
    v = rand((5,), np.float32, 10)
    check_f32(lowp.matmul(a, b), a, b)
    assert lowp.matmul(a, v).shape == (3, 4)
    assert np.allclose(lowp.matmul(a, v), a @ v, rtol=1e-5, atol=1e-5)
    assert lowp.matmul(v, b).shape == (6,)
    assert np.allclose(lowp.matmul(v, b), v @ b, rtol=1e-5, atol=1e-5)
    assert np.allclose(lowp.matmul(v, v), v @ v, rtol=1e-5)
    bb = rand((2, 1, 5, 3), np.float32, 11)
    assert lowp.matmul(a, bb).shape == (2, 3, 4, 3)
    assert np.allclose(lowp.matmul(a, bb), a @ bb, rtol=1e-5, atol=1e-5)


def _per_matrix(a, b, **kw):
    """The stack product one matrix at a time (the batch broadcast first). Stochastic
    rounding draws from a key of each matrix's own (its index in the broadcast batch, the
    first's the seed's): there, the first matrix alone, and the others as the same
    matrices copied into one contiguous batch axis give them."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    idx = list(np.ndindex(*batch))
    if not idx:
        return None
    if kw.get("rounding") == "stochastic":
        flat = lowp.matmul(np.ascontiguousarray(a).reshape((-1,) + a.shape[-2:]),
                           np.ascontiguousarray(b).reshape((-1,) + b.shape[-2:]), **kw)
        assert np.array_equal(_bits(flat[0]), _bits(lowp.matmul(a[idx[0]], b[idx[0]], **kw)))
        return flat.reshape(batch + flat.shape[-2:])
    out = [lowp.matmul(a[i], b[i], **kw) for i in idx]
    return np.stack(out).reshape(batch + out[0].shape)


def _bits(x):
    return np.ascontiguousarray(x).view(np.uint8)


_EMULATED = [{"accumulate": "float16"}, {"accumulate": "bfloat16", "rounding": "stochastic", "seed": 5},
             {"accumulate": "float16", "chunk": 8, "rounding": "toward_zero"}]
# The float32, float64 and int8 paths, and emulated accumulation (float32 or narrower inputs).
_STACK_CASES = [(dt, {}) for dt in (np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.float64, np.int8)] + [
    (dt, kw) for dt in (np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn) for kw in _EMULATED]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype, kw", _STACK_CASES, ids=lambda x: np.dtype(x).name if isinstance(x, type) else str(x))
def test_stacks_equal_their_matrices(isa, threads, dtype, kw):
    # A stack runs its last batch axis in one call (small products one per thread):
    # every matrix of it is what the product of that matrix alone is, bit for bit,
    # with broadcast batch axes, strided and reversed views, both thread counts.
    g = np.random.default_rng(41)
    def mk(shape):
        x = g.standard_normal(shape) * 4
        return (np.clip(np.round(x), -128, 127) if dtype == np.int8 else x).astype(dtype)
    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(threads)
        cases = [
            (mk((7, 5, 9)), mk((7, 9, 4))),                      # one batch axis
            (mk((2, 1, 6, 33)), mk((3, 33, 17))),                # broadcast: (2, 3)
            (mk((3, 9, 8))[:, ::-1, ::2], mk((3, 5, 4)).transpose(0, 2, 1)[::-1]),  # views
            (mk((40, 3, 3)), mk((3, 5))),                        # b shared by every matrix
            (mk((2, 180, 170)), mk((2, 170, 150))),              # products split over threads
            (mk((0, 4, 5)), mk((5, 2))),                         # empty batch
        ]
        for a, b in cases:
            got = lowp.matmul(a, b, **kw)
            want = _per_matrix(a, b, **kw)
            if want is None:
                assert got.shape == (0, 4, 2)
                continue
            assert got.shape == want.shape and got.dtype == want.dtype
            assert np.array_equal(_bits(got), _bits(want)), (a.shape, b.shape)
        # A vector times a stack, and out= (a strided view).
        a, v = mk((6, 4, 10)), mk((10,))
        assert np.array_equal(_bits(lowp.matmul(a, v, **kw)), _bits(_per_matrix(a, v[:, None], **kw)[..., 0]))
        out = np.zeros((6, 4, 2 * 3), dtype=lowp.matmul(a[0], mk((10, 3)), **kw).dtype)[:, :, ::2]
        b = mk((10, 3))
        lowp.matmul(a, b, out=out, **kw)
        assert np.array_equal(_bits(out), _bits(_per_matrix(a, b, **kw)))
    finally:
        lowp.set_num_threads(n0)


def test_stack_errors_name_the_argument():
    with pytest.raises(ValueError, match="b"):
        lowp.matmul(np.ones((3, 4, 5), np.float32), np.ones((3, 6, 2), np.float32))
    with pytest.raises(ValueError, match="b"):
        lowp.matmul(np.ones((3, 4, 5), np.float32), np.ones((2, 5, 2), np.float32))
    with pytest.raises(ValueError, match="out"):
        lowp.matmul(np.ones((3, 4, 5), np.float32), np.ones((5, 2), np.float32), out=np.zeros((3, 4, 3), np.float32))


def test_byte_order_and_lists():
    a = rand((5, 7), np.float32, 22)
    b = rand((7, 3), np.float32, 23)
    check_f32(lowp.matmul(a.astype(">f4"), b), a, b)
    c = lowp.matmul(a.tolist(), b.tolist())
    assert c.dtype == np.float64 and np.allclose(c, a.astype(np.float64) @ b)


def test_threads_do_not_change_results():
    a = rand((130, 300), ml_dtypes.bfloat16, 12)
    b = rand((300, 170), ml_dtypes.bfloat16, 13)
    n0 = lowp.get_num_threads()
    try:
        lowp.set_num_threads(1)
        c1 = lowp.matmul(a, b)
        lowp.set_num_threads(2)
        c2 = lowp.matmul(a, b)
    finally:
        lowp.set_num_threads(n0)
    assert np.array_equal(c1, c2)


def test_out_and_out_dtype():
    a = rand((20, 30), ml_dtypes.bfloat16, 14)
    b = rand((30, 25), ml_dtypes.bfloat16, 15)
    ref = lowp.matmul(a, b)
    out = np.full((25, 40), np.nan, dtype=np.float32).T[:20, :25]  # strided out
    r = lowp.matmul(a, b, out=out)
    assert r is out and np.array_equal(out, ref)
    r = lowp.matmul(a, b, out_dtype=ml_dtypes.bfloat16)
    assert r.dtype == ml_dtypes.bfloat16
    assert np.array_equal(r.view(np.uint16), ref.astype(ml_dtypes.bfloat16).view(np.uint16))
    o16 = np.empty((20, 25), ml_dtypes.bfloat16)
    lowp.matmul(a, b, out=o16)
    assert np.array_equal(o16.view(np.uint16), r.view(np.uint16))
    r = lowp.matmul(a, b, out_dtype=np.float64)
    assert r.dtype == np.float64 and np.array_equal(r, ref.astype(np.float64))
    # Low-precision results: the float32 accumulators rounded once, to nearest even,
    # into contiguous and strided outputs alike (one path writes the codes directly,
    # the other goes through a temporary), lowp's dtypes and ml_dtypes' alike.
    big = rand((20, 25), np.float32, 17) * np.float32(1e3)
    for dt in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, lowp.posit16, lowp.bfloat16):
        f = lowp.format(dt)
        for prod in (ref, big):
            want = lowp.encode(prod, f)
            r = lowp.matmul(a, b, out_dtype=dt) if prod is ref else None
            if r is not None:
                assert r.dtype == np.dtype(dt) and np.array_equal(r.view(want.dtype), want), dt
            o = np.zeros((25, 40), dt).T[:20, :25]
            ident = np.eye(25, dtype=np.float32)
            lowp.matmul(prod, ident, out=o)
            assert np.array_equal(o.view(want.dtype), want), dt
            oc = np.zeros((20, 25), dt)
            lowp.matmul(prod, ident, out=oc)
            assert np.array_equal(oc.view(want.dtype), want), dt
    # out overlapping an input.
    x = rand((16, 16), np.float32, 16)
    want = lowp.matmul(x, x)
    lowp.matmul(x, x, out=x)
    assert np.array_equal(x, want)


@pytest.mark.parametrize("shape", [(7, 17, 513), (1, 1, 1), (6, 16, 2), (33, 65, 1031), (0, 3, 4), (3, 3, 0)], ids=str)
def test_int8_exact(isa, shape):
    m, n, k = shape
    g = np.random.default_rng(17)
    cases = [
        (g.integers(-128, 128, (m, k)), g.integers(-128, 128, (k, n))),
        (np.full((m, k), -128), np.full((k, n), -128)),
        (np.full((m, k), 127), np.full((k, n), 127)),
        (np.full((m, k), -128), np.full((k, n), 127)),
    ]
    for a, b in cases:
        a8, b8 = a.astype(np.int8), b.astype(np.int8)
        c = lowp.matmul(a8, b8)
        assert c.dtype == np.int32
        assert np.array_equal(c.astype(np.int64), a.astype(np.int64) @ b.astype(np.int64))


def test_int8_strided(isa):
    g = np.random.default_rng(18)
    a = g.integers(-128, 128, (50, 80)).astype(np.int8)
    b = g.integers(-128, 128, (80, 60)).astype(np.int8)
    for x, y in [(a[::2, ::-1], b[::-1, ::3]), (a[:, :40].T.copy().T, b[:40].T.T), (a.T[:30, :40], b[:40, :50])]:
        assert np.array_equal(lowp.matmul(x, y).astype(np.int64), x.astype(np.int64) @ y.astype(np.int64))


def test_int8_vector_products(isa):
    """Products of 1 to 9 rows (up to 8 take the vector paths, B read in place) and
    matrices times vectors, exact against int64: B row-major, as w.T, with its rows or
    columns in reverse, Fortran-ordered and strided both ways; A row-major,
    Fortran-ordered and strided; depths and widths around the 16-element steps and
    strips; at 1 and 2 threads, the larger shapes split over them; sums past 2^31 are
    whole in int64 and refused in int32."""
    g = np.random.default_rng(21)
    n0 = lowp.get_num_threads()
    shapes = [(m, k, n) for m in (1, 2, 3, 5, 8, 9) for k, n in ((1, 1), (15, 17), (33, 16), (514, 47))]
    shapes += [(3, 1000, 1500), (4100, 1030, 1), (1, 1030, 4100)]
    try:
        for threads in (1, 2):
            lowp.set_num_threads(threads)
            for m, k, n in shapes:
                a = g.integers(-128, 128, (m, k)).astype(np.int8)
                w = g.integers(-128, 128, (n, k)).astype(np.int8)
                want = a.astype(np.int64) @ w.T.astype(np.int64)
                wide = np.zeros((2 * k, 2 * n), np.int8)
                wide[::2, ::2] = w.T
                for b in (np.ascontiguousarray(w.T), w.T, w[::-1].T[:, ::-1], np.ascontiguousarray(w.T[::-1])[::-1],
                          np.asfortranarray(w.T), wide[::2, ::2]):
                    for x in (a, np.asfortranarray(a), np.repeat(a, 2, axis=1)[:, ::2]):
                        r = lowp.matmul(x, b)
                        assert r.dtype == np.int32 and np.array_equal(r.astype(np.int64), want), (threads, m, k, n)
        # A row of -128 times columns of -128: 16384 a product, past 2^31 from depth 131073.
        k = 140000
        a = np.full((1, k), -128, np.int8)
        w = np.full((3, k), -128, np.int8)
        for b in (w.T, np.ascontiguousarray(w.T)):
            assert np.array_equal(lowp.matmul(a, b, out_dtype=np.int64), np.full((1, 3), 16384 * k))
            with pytest.raises(ValueError, match="do not fit int32"):
                lowp.matmul(a, b)
    finally:
        lowp.set_num_threads(n0)


def test_int8_few_columns(isa):
    """9 to 16 columns of B against more rows of A (two products of at most 8 columns,
    each run transposed), exact against int64 with the extreme values: A row-major,
    Fortran-ordered, strided and reversed; B either way; 1 and 2 threads; 17 columns
    and 16 rows or fewer take the loop nest, the same values."""
    g = np.random.default_rng(29)
    n0 = lowp.get_num_threads()
    try:
        for threads in (1, 2):
            lowp.set_num_threads(threads)
            for m, k, n in ((600, 700, 9), (600, 700, 12), (40, 300, 16), (17, 33, 16), (600, 514, 17), (16, 100, 12)):
                a = g.integers(-128, 128, (m, k)).astype(np.int8)
                b = g.integers(-128, 128, (k, n)).astype(np.int8)
                a[0] = -128
                b[:, 0] = -128
                a[1] = 127
                want = a.astype(np.int64) @ b.astype(np.int64)
                for x in (a, np.asfortranarray(a), np.repeat(a, 2, axis=1)[:, ::2], a[::-1][::-1]):
                    for y in (b, np.asfortranarray(b)):
                        r = lowp.matmul(x, y)
                        assert r.dtype == np.int32 and np.array_equal(r.astype(np.int64), want), (threads, m, k, n)
    finally:
        lowp.set_num_threads(n0)


def test_float64_vector_products(isa):
    """float64 accumulation for products of 1 to 9 rows (up to 8 take the vector paths
    where B is float64, float32, bf16 or fp16 with its rows or columns contiguous) and
    matrices times vectors: B row-major, as w.T, reversed, Fortran-ordered and strided;
    A row-major and Fortran-ordered; columns 4 KiB apart (depth 512); bf16, float32
    and posit32 operands too; at 1 and 2 threads. Integer values, so that every sum is
    exact and equals the int64 product."""
    g = np.random.default_rng(23)
    n0 = lowp.get_num_threads()
    shapes = [(m, k, n) for m in (1, 2, 3, 6, 8, 9) for k, n in ((1, 1), (9, 17), (512, 37), (700, 70))]
    shapes += [(4100, 1030, 1), (1, 1030, 4100), (70, 512, 1)]
    try:
        for threads in (1, 2):
            lowp.set_num_threads(threads)
            for m, k, n in shapes:
                a = g.integers(-100, 101, (m, k))
                w = g.integers(-100, 101, (n, k))
                want = a @ w.T
                for dt in (np.float64, np.float32, ml_dtypes.bfloat16, lowp.posit32):
                    if dt != np.float64 and m * n * k > 10**6:
                        continue
                    at, wt = a.astype(dt), w.astype(dt)
                    wide = np.zeros((2 * k, 2 * n), dt)
                    wide[::2, ::2] = wt.T
                    for b in (np.ascontiguousarray(wt.T), wt.T, wt[::-1].T[:, ::-1], np.asfortranarray(wt.T), wide[::2, ::2]):
                        for x in (at, np.asfortranarray(at)):
                            r = lowp.matmul(x, b, accumulate="float64")
                            assert r.dtype == np.float64 and np.array_equal(r, want), (threads, m, k, n, dt)
    finally:
        lowp.set_num_threads(n0)


def test_qmatmul():
    """Against the float64 product of the dequantized operands, for 33 rows (the loop
    nest), 1, 7 and 8 (B read in place; with zero points, B's column sums taken with
    the rows below 8, by a product of its own above), B row-major and as w.T."""
    g = np.random.default_rng(19)
    for m, k, n in ((33, 70, 21), (1, 300, 40), (7, 300, 40), (8, 300, 40)):
        x = g.standard_normal((m, k)).astype(np.float32)
        w = g.standard_normal((k, n)).astype(np.float32) + 0.5
        for sym in (True, False):
            for ax_a, ax_b in [(None, None), (0, 1), (0, None), (None, 1), (1, 0)]:
                qa = lowp.quantize(x, "int8", axis=ax_a, symmetric=sym)
                qb = lowp.quantize(w, "int8", axis=ax_b, symmetric=sym)
                ref = qa.dequantize().astype(np.float64) @ qb.dequantize().astype(np.float64)
                for qbl in (qb, lowp.QuantizedArray(np.ascontiguousarray(qb.values.T).T, qb.scale, qb.zero_point, qb.axis, qb.format)):
                    c = lowp.qmatmul(qa, qbl)
                    assert c.dtype == np.float32
                    assert np.allclose(c, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max()), (m, sym, ax_a, ax_b)
    with pytest.raises(TypeError, match="qa"):
        lowp.qmatmul(x, qb)


def test_qmatmul_beyond_int32_depth():
    """Depths past 2^17 - 1, where int8 x int8 sums can pass int32's range: exact sums by
    blocks of depth that int32 holds, with and without zero points."""
    g = np.random.default_rng(23)
    k = 140000
    ones = lowp.quantize(np.ones((2, k)))
    assert lowp.qmatmul(ones, lowp.quantize(np.ones((k, 3))))[0, 0] == np.float32(k)
    a = g.integers(-128, 128, (3, k)).astype(np.int8)
    b = g.integers(-128, 128, (k, 2)).astype(np.int8)
    a[0] = -128
    b[:, 0] = -128
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert exact[0, 0] == k * 2**14 and exact[0, 0] > 2**31
    for za, zb in ((0, 0), (3, -5)):
        qa = lowp.QuantizedArray(a, np.float32(1.0), np.int32(za), None, lowp.format("int8"))
        qb = lowp.QuantizedArray(b, np.float32(1.0), np.int32(zb), None, lowp.format("int8"))
        want = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
        np.testing.assert_array_equal(lowp.qmatmul(qa, qb, out_dtype=np.float64), want.astype(np.float64))


def test_errors():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="b: shape mismatch"):
        lowp.matmul(a, np.ones((5, 2), np.float32))
    with pytest.raises(TypeError, match="a: unsupported dtype"):
        lowp.matmul(a.astype(np.complex64), np.ones((4, 2), np.float32))
    with pytest.raises(TypeError, match="b: unsupported dtype"):
        lowp.matmul(a, np.ones((4, 2), np.int64))
    with pytest.raises(TypeError, match="b: unsupported dtype"):
        lowp.matmul(a, np.ones((4, 2), bool))
    # int8 beside a float: float32 holds its values (as numpy's int8 @ float32).
    np.testing.assert_array_equal(lowp.matmul(a, np.ones((4, 2), np.int8)), a @ np.ones((4, 2), np.float32))
    for bad in (0, -3):
        with pytest.raises(ValueError, match="chunk"):
            lowp.matmul(a, np.ones((4, 2), np.float32), accumulate="fp16", chunk=bad)
    with pytest.raises(TypeError, match="chunk"):
        lowp.matmul(a, np.ones((4, 2), np.float32), accumulate="fp16", chunk=2.5)
    with pytest.raises(ValueError, match="out: shape"):
        lowp.matmul(a, np.ones((4, 2), np.float32), out=np.empty((3, 3), np.float32))
    with pytest.raises(TypeError, match="out"):
        lowp.matmul(a, np.ones((4, 2), np.float32), out=[1, 2])
    with pytest.raises(TypeError, match="out"):
        lowp.matmul(a, np.ones((4, 2), np.float32), out=np.empty((3, 2), np.complex64))
    with pytest.raises(TypeError, match="out: dtype"):
        lowp.matmul(a, np.ones((4, 2), np.float32), out=np.empty((3, 2), np.float64), out_dtype=np.float32)
    with pytest.raises(ValueError, match="rounding"):
        lowp.matmul(a, np.ones((4, 2), np.float32), accumulate="bf16", rounding="nearest")
    with pytest.raises(ValueError, match="accumulate"):
        lowp.matmul(a, np.ones((4, 2), np.float32), accumulate="bogus")
    with pytest.raises(ValueError, match="^chunk: must be a positive"):  # (float64 inputs' own path)
        lowp.matmul(a.astype(np.float64), np.ones((4, 2)), accumulate="bf16", chunk=0)
    with pytest.raises(ValueError, match="a:"):
        lowp.matmul(np.float32(1), a)


def test_padded_ld_and_empty():
    assert lowp.padded_ld(1024, np.float32) == 1040
    assert lowp.padded_ld(1008, np.float32) == 1008
    assert lowp.padded_ld(1000, np.float32) == 1008
    assert lowp.padded_ld(2048, ml_dtypes.bfloat16) == 2080
    assert lowp.padded_ld(256, np.float64) == 264
    for n in range(1, 3000, 7):
        for dt in (np.float32, np.float16, np.float64, np.int8):
            ld = lowp.padded_ld(n, dt)
            isz = np.dtype(dt).itemsize
            assert ld >= n and (ld * isz) % 64 == 0 and (ld * isz) % 1024 != 0
    x = lowp.empty((5, 1024), np.float32)
    assert x.shape == (5, 1024) and x.strides == (4160, 4) and x.ctypes.data % 64 == 0
    y = lowp.empty((2, 3, 100), ml_dtypes.bfloat16)
    assert y.shape == (2, 3, 100) and y.dtype == ml_dtypes.bfloat16 and y.strides[-2] == 128 * 2
    assert lowp.empty((4, 1024), np.float32, padded=False).strides == (4096, 4)
    with pytest.raises(ValueError, match="n"):
        lowp.padded_ld(-1, np.float32)
    with pytest.raises(TypeError, match="n"):
        lowp.padded_ld(1.5, np.float32)
    for dt in ("V3", "V12", "V16"):  # (raw bytes: no numbers)
        with pytest.raises(TypeError, match="^dtype: expected a numeric dtype"):
            lowp.padded_ld(10, dt)
    assert lowp.padded_ld(10, np.complex128) == 12 and lowp.padded_ld(10, np.clongdouble) == 10  # (5 lines of 64 bytes)
    # A padded array is a normal matmul operand.
    a = lowp.empty((64, 1024), np.float32)
    a[...] = rand((64, 1024), np.float32, 20)
    b = rand((1024, 32), np.float32, 21)
    check_f32(lowp.matmul(a, b), a, b)


def test_back_to_back_and_concurrent_products_at_two_threads():
    """Products in quick succession hand their second part to a worker still spinning
    after the previous one; from several Python threads at once, at most one of them
    does. Every result must equal the 1-thread result bit for bit."""
    import concurrent.futures

    g = np.random.default_rng(31)
    shapes = [(170, 171, 172), (256, 64, 300), (97, 300, 250), (400, 33, 330)]
    ops = [(g.standard_normal((m, k)).astype(np.float32), g.standard_normal((k, n)).astype(np.float32).astype(
        ml_dtypes.bfloat16)) for m, k, n in shapes]
    old = lowp.get_num_threads()
    try:
        lowp.set_num_threads(1)
        want = [lowp.matmul(a, b) for a, b in ops]
        lowp.set_num_threads(2)
        for r in range(50):
            i = r % len(ops)
            np.testing.assert_array_equal(lowp.matmul(*ops[i]), want[i])

        def worker(seed):
            rr = np.random.default_rng(seed)
            for _ in range(20):
                i = int(rr.integers(len(ops)))
                np.testing.assert_array_equal(lowp.matmul(*ops[i]), want[i])
            return True

        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            assert all(ex.map(worker, range(4)))
    finally:
        lowp.set_num_threads(old)


# -- formats with infinities but no NaN; argument names; int8 depths past 2^17 ------------------

def test_accumulators_without_nan_codes_refuse_nan_and_opposite_infinities():
    """An IEEE-style format with no mantissa bits has infinities but no NaN: a NaN product,
    or infinite inputs (whose products can meet an infinite sum of the other sign), raise
    instead of coming out as an infinity."""
    F = lowp.FloatFormat(3, 0)
    one = np.ones((2, 1), np.float32)
    with pytest.raises(ValueError, match="accumulate: .*has no NaN"):
        lowp.matmul(np.array([[np.nan, 1.0]], np.float32), one, accumulate=F)
    with pytest.raises(ValueError, match="accumulate: .*infinities but no NaN"):
        lowp.matmul(np.array([[np.inf, -np.inf]], np.float32), one, accumulate=F)
    with pytest.raises(ValueError, match="chunk_accumulate: .*infinities but no NaN"):
        lowp.matmul(np.array([[1.0, 1.0]], np.float32), np.array([[np.inf], [0.0]], np.float32),
                    accumulate="bf16", chunk=1, chunk_accumulate=F)
    with pytest.raises(ValueError, match="has no NaN"):
        lowp.sum(np.array([np.nan], np.float32), accumulate=lowp.FloatFormat(8, 0))
    with pytest.raises(ValueError, match="infinities but no NaN"):
        lowp.sum(np.array([np.inf, 1.0], np.float32), accumulate=F)
    # Finite inputs overflow to its infinity and stay there, as every add rounds.
    r = lowp.matmul(np.array([[1e30, -2e30, 5.0]], np.float32), np.ones((3, 1), np.float32), accumulate=F)
    assert r[0, 0] == np.inf
    # Saturating formats (no NaN, no infinities) take infinities as their largest values.
    S = lowp.FloatFormat(4, 3, nan=None)
    assert lowp.matmul(np.array([[np.inf, -np.inf]], np.float32), one, accumulate=S)[0, 0] == -float(S.max)


@pytest.mark.parametrize("fn", ["matmul", "sum"])
def test_bad_chunk_accumulate_is_named(fn):
    x = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match='^chunk_accumulate: expected "float32", "float64" or a format'):
        if fn == "matmul":
            lowp.matmul(x, x, chunk=2, chunk_accumulate="bogus")
        else:
            lowp.sum(x, chunk=2, chunk_accumulate="bogus")
    with pytest.raises(ValueError, match='^accumulate: expected "float32", "float64" or a format'):
        lowp.sum(x, accumulate="bogus")


@pytest.mark.parametrize("out_dtype", [np.int64, np.float64])
def test_int8_depths_past_2_17_are_whole_in_a_wider_output(out_dtype):
    """Deeper than 2^17 - 1 an int64 or float64 result gets the exact sums; an int32 result
    gets them where they fit and raises where they do not (rather than wrapping)."""
    A = np.full((2, 2**17 + 5), -128, np.int8)
    want = A.astype(np.int64) @ A.T.astype(np.int64)
    np.testing.assert_array_equal(lowp.matmul(A, A.T, out_dtype=out_dtype), want.astype(out_dtype))
    np.testing.assert_array_equal(lowp.matmul(A, A.T, out=np.zeros((2, 2), out_dtype)), want.astype(out_dtype))
    assert lowp.matmul(A[0], A[0], out_dtype=out_dtype) == want[0, 0]
    rng = np.random.default_rng(1)
    B = rng.integers(-128, 128, (2, 3, 2**18 + 3)).astype(np.int8)
    np.testing.assert_array_equal(lowp.matmul(B, B.transpose(0, 2, 1), out_dtype=np.int64),
                                  B.astype(np.int64) @ B.transpose(0, 2, 1).astype(np.int64))
    with pytest.raises(ValueError, match=r"^out_dtype: the exact int8 sums .* do not fit int32; pass out_dtype=np.int64"):
        lowp.matmul(A, A.T)
    with pytest.raises(ValueError, match=r"^out: the exact int8 sums"):
        lowp.matmul(A, A.T, out=np.zeros((2, 2), np.int32))
    C = np.full((2, 2**17 + 5), 127, np.int8)
    C[:, ::2] = -128  # sums that fit int32 at this depth
    np.testing.assert_array_equal(lowp.matmul(C, C.T), C.astype(np.int64) @ C.T.astype(np.int64))
    assert lowp.matmul(C, C.T).dtype == np.int32


def _odd_strided(values: np.ndarray, dtype, strides: tuple) -> np.ndarray:
    """``values`` in a view whose byte strides are not whole elements (legal in numpy)."""
    a = np.ndarray(values.shape, dtype, buffer=np.zeros(1024, np.uint8), strides=strides)
    a[...] = values
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, lowp.bfloat16, lowp.posit16])
def test_strides_that_are_not_whole_elements(dtype):
    """Views whose byte strides are not multiples of the itemsize read the right elements
    in matmul (every path) and sum."""
    vals = np.array([[1, 2], [3, 4]], np.float32)
    size = np.dtype(dtype).itemsize
    a = _odd_strided(vals.astype(dtype), dtype, (2 * size + 1, size))
    eye = np.eye(2, dtype=np.float32)
    want = vals.astype(np.float64)
    emulated = [] if dtype == np.float64 else [{"accumulate": "bf16"}, {"rounding": "toward_zero"}]
    for kw in [{}, {"accumulate": "float64"}] + emulated:
        np.testing.assert_array_equal(lowp.matmul(a, eye.astype(dtype), **kw).astype(np.float64), want)
        np.testing.assert_array_equal(lowp.matmul(eye.astype(dtype), a, **kw).astype(np.float64), want)
    np.testing.assert_array_equal(lowp.sum(a, axis=1), [3, 7])
    np.testing.assert_array_equal(lowp.sum(a, axis=0), [4, 6])
    v = _odd_strided(np.array([1, 2, 3], np.float32).astype(dtype), dtype, (np.dtype(dtype).itemsize + 1,))
    assert float(lowp.matmul(v, v)) == 14 and float(lowp.sum(v)) == 6
    stack = _odd_strided(np.stack([vals, 2 * vals]).astype(dtype), dtype, (6 * size + 1, 2 * size + 1, size))
    np.testing.assert_array_equal(lowp.matmul(stack, eye).astype(np.float64), np.stack([want, 2 * want]))


@pytest.mark.parametrize("dtype", ["f2", "f4", "f8", "bfloat16", "posit16", "posit32"])
def test_big_endian_outputs(dtype):
    """out= and out_dtype= of a byte-swapped dtype get the values, not swapped codes."""
    be = (np.dtype(">" + dtype) if dtype[0] == "f" else np.dtype(getattr(lowp, dtype)).newbyteorder(">"))
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.float32(1.5) * np.eye(2, dtype=np.float32)
    want = a.astype(np.float64) @ b
    o = np.zeros((2, 2), be)
    lowp.matmul(a, b, out=o)
    np.testing.assert_array_equal(o.astype(np.float64), want)
    np.testing.assert_array_equal(lowp.matmul(a, b, out_dtype=be).astype(np.float64), want)
    np.testing.assert_array_equal(lowp.matmul(a, b, out_dtype=be, accumulate="bf16").astype(np.float64), want)
    o2 = np.zeros((2, 4), be)[:, ::2]
    lowp.matmul(a, b, out=o2)
    np.testing.assert_array_equal(o2.astype(np.float64), want)
    qa, qb = lowp.quantize(a, "int8"), lowp.quantize(b, "int8")
    np.testing.assert_array_equal(lowp.qmatmul(qa, qb, out_dtype=be).astype(np.float64),
                                  lowp.qmatmul(qa, qb, out_dtype=be.newbyteorder("=")).astype(np.float64))
    x = np.array([1.5, 3.0, 4.5], np.float32)
    c = lowp.cast(x, be)
    assert c.dtype == be
    np.testing.assert_array_equal(c.astype(np.float64), x)


@pytest.mark.parametrize("dtype", [np.float32, lowp.posit16, np.float16, lowp.bfloat16], ids=lambda d: np.dtype(d).name)
def test_float32_path_fuses_products_on_every_isa(dtype):
    """The float32 path's products are exact on the portable kernels too (an FMA emulated
    without the hardware), so every path gives the same bits."""
    a = np.array([[1.0, 1 + 2**-12]], np.float32)
    b = np.array([[-1.0], [1 + 2**-12]], np.float32)
    rng = np.random.default_rng(11)
    shapes = [(69, 120, 130), (5, 7, 3), (1, 300, 1), (2, 600, 40), (6, 16, 16), (200, 50, 1)]
    cases = [(rng.standard_normal((m, k)) * 30, rng.standard_normal((k, n)) * 30) for m, k, n in shapes]
    try:
        for isa in ("scalar", "sse2", None):
            lowp._lowp.set_isa(isa)
            assert lowp.matmul(a, b)[0, 0] == np.float32(2**-11 + 2**-24), isa
        lowp._lowp.set_isa(None)
        simd = [lowp.matmul(x.astype(dtype), y.astype(dtype)) for x, y in cases]
        lowp._lowp.set_isa("scalar")
        scalar = [lowp.matmul(x.astype(dtype), y.astype(dtype)) for x, y in cases]
    finally:
        lowp._lowp.set_isa(None)
    for s, r in zip(simd, scalar):
        np.testing.assert_array_equal(s.view(np.uint32), r.view(np.uint32))


def _paths():
    """The instruction-set paths this CPU has, best first."""
    order = ["avx512", "avx2", "sse2", "scalar"]
    return order[order.index(_lowp.detected_isa()):]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, lowp.bfloat16, ml_dtypes.float8_e4m3fn, lowp.posit16],
                         ids=lambda d: np.dtype(d).name)
def test_float32_gemm_paths_give_the_same_bits(dtype):
    """The loop nest's kernels (AVX-512 12x32, AVX2 6x16, portable) sum every element of C
    in the same depth blocks with the same FMA chains, so they give the same bits (finite
    inputs: a NaN's payload may come from either operand): over
    several depth blocks, partial tiles of either kernel, transposed and strided operands,
    and outputs with strided columns (stored through the scratch tile), at 1 and 2 threads."""
    rng = np.random.default_rng(5)
    cases = []
    for m, k, n in [(100, 600, 70), (37, 257, 95), (12, 256, 32), (200, 300, 260)]:
        a = (rng.standard_normal((m, k)) * 3).astype(dtype)
        b = (rng.standard_normal((k, n)) * 3).astype(dtype)
        cases.append((a, b, None))
        cases.append((np.asfortranarray(a), b[:, ::-1], None))
        cases.append((a, np.ascontiguousarray(b.T).T, np.zeros((n, m), np.float32).T))
        cases.append((a, b, np.zeros((m, 2 * n), np.float32)[:, ::2]))
    before = lowp.get_num_threads()
    results = {}
    try:
        for isa in _paths():
            _lowp.set_isa(isa)
            for t in (1, 2):
                lowp.set_num_threads(t)
                got = []
                for a, b, out in cases:
                    if out is not None:
                        out[...] = np.nan
                        got.append(lowp.matmul(a, b, out=out).copy())
                    else:
                        got.append(lowp.matmul(a, b))
                results[isa, t] = got
    finally:
        _lowp.set_isa(None)
        lowp.set_num_threads(before)
    first = next(iter(results))
    for key, got in results.items():
        for i, (g, w) in enumerate(zip(got, results[first])):
            np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32), err_msg=f"{key} case {i}")
    for (a, b, _), c in zip(cases, results[first]):
        check_f32(c, a, b)


def test_out_without_elements_and_out_of_an_equivalent_dtype():
    """numpy gives arrays without elements zero strides: such an ``out`` of the right
    shape is taken (not refused as overlapping). An ``out`` whose dtype holds the same
    values as ``out_dtype`` (the lowp and ml_dtypes dtypes of one format, another byte
    order) is written; one of another format is refused."""
    a8, b8 = np.ones((0, 3), np.int8), np.ones((3, 4), np.int8)
    out = np.empty((0, 4), np.int32)
    assert lowp.matmul(a8, b8, out=out) is out
    f = np.ones((2, 3), np.float32)
    out = np.empty((2, 0), np.float32)
    assert lowp.matmul(f, np.ones((3, 0), np.float32), out=out) is out
    out = np.empty((0, 2, 4), np.float32)
    assert lowp.matmul(np.ones((0, 2, 3), np.float32), np.ones((3, 4), np.float32), out=out) is out
    a, b = np.ones((2, 3), np.int8), np.ones((3, 2), np.int8)
    for dt, name in ((ml_dtypes.bfloat16, "bf16"), (ml_dtypes.bfloat16, lowp.bfloat16),
                     (lowp.bfloat16, ml_dtypes.bfloat16), (ml_dtypes.float8_e4m3fn, "e4m3fn"),
                     (np.dtype(">f4"), np.float32)):
        out = np.zeros((2, 2), dt)
        assert lowp.matmul(a, b, out=out, out_dtype=name) is out
        np.testing.assert_array_equal(out.astype(np.float64), np.full((2, 2), 3.0))
    with pytest.raises(TypeError, match="^out: dtype float16 does not match out_dtype"):
        lowp.matmul(a, b, out=np.zeros((2, 2), np.float16), out_dtype="bf16")
    with pytest.raises(ValueError, match="^out: must not have zero strides"):
        lowp.matmul(f, f.T, out=np.lib.stride_tricks.as_strided(np.zeros(2, np.float32), (2, 2), (4, 0)))
