"""The bounded cache of result memory (lowp.set_buffer_cache) and the arrays made from it."""

import gc

import ml_dtypes
import numpy as np
import pytest

import lowp
from lowp import _lowp

N = 1 << 21  # 8 MB of float32: above the size that uses the cache


@pytest.fixture(autouse=True)
def _restore_limit():
    old = lowp.set_buffer_cache(1 << 30)
    yield
    lowp.set_buffer_cache(0)
    lowp.set_buffer_cache(old)


def _x(n=N, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


def test_large_results_use_the_cache_and_stay_exact():
    x = _x()
    lowp.set_buffer_cache(0)
    lowp.set_buffer_cache(1 << 30)
    assert lowp.buffer_cache_info()["blocks"] == 0
    for _ in range(3):
        codes = lowp.encode(x, "bf16")
        assert isinstance(codes.base.base, _lowp.Buffer) and codes.base.base.nbytes >= codes.nbytes
        assert codes.flags.c_contiguous and codes.flags.writeable and codes.flags.aligned
        # Made read-only, such an array can be made writeable again, as numpy's own.
        codes.flags.writeable = False
        codes.flags.writeable = True
        np.testing.assert_array_equal(codes, x.astype(ml_dtypes.bfloat16).view(np.uint16))
        vals = lowp.decode(codes, "bf16")
        np.testing.assert_array_equal(vals, x.astype(ml_dtypes.bfloat16).astype(np.float32))
        r = lowp.round(x, "e4m3fn")
        np.testing.assert_array_equal(r, x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
        c = lowp.cast(x, lowp.bfloat16)
        assert c.dtype == np.dtype(lowp.bfloat16)
        np.testing.assert_array_equal(c.view(np.uint16), codes)
        np.testing.assert_array_equal((c + c).astype(np.float32), 2 * vals)
        del codes, vals, r, c
        gc.collect()
        info = lowp.buffer_cache_info()
        # Freed results came back (the loop's later rounds take them again).
        assert 1 <= info["blocks"] <= 8 and info["bytes"] <= info["limit"]


def test_reuse_takes_a_freed_block():
    x = _x()
    a = lowp.decode(lowp.encode(x, "e5m2"), "e5m2")
    ptr = a.__array_interface__["data"][0]
    del a
    gc.collect()
    before = lowp.buffer_cache_info()["blocks"]
    b = lowp.decode(lowp.encode(x, "e5m2"), "e5m2")
    # Same size again: the block just freed serves it, no new mapping.
    assert b.__array_interface__["data"][0] == ptr
    assert lowp.buffer_cache_info()["blocks"] <= before
    np.testing.assert_array_equal(b, x.astype(ml_dtypes.float8_e5m2).astype(np.float32))


def test_results_outlive_the_cache_and_their_views():
    x = _x()
    a = lowp.round(x, "bf16")
    v = a[::3]
    expect = x.astype(ml_dtypes.bfloat16).astype(np.float32)[::3].copy()
    del a
    lowp.set_buffer_cache(0)  # frees only what is cached, never memory in use
    gc.collect()
    junk = [np.ones(N, np.float32) for _ in range(4)]  # would overwrite freed memory
    np.testing.assert_array_equal(v, expect)
    del junk


def test_bounded():
    lowp.set_buffer_cache(64 << 20)
    arrays = [lowp.round(_x(N + 4096 * k, seed=k), "e4m3fn") for k in range(12)]
    del arrays
    gc.collect()
    info = lowp.buffer_cache_info()
    assert info["blocks"] <= 8 and info["bytes"] <= 64 << 20
    assert lowp.set_buffer_cache(0) == 64 << 20
    assert lowp.buffer_cache_info() == {"blocks": 0, "bytes": 0, "limit": 0}
    # With the cache off, results still work (fresh memory each time).
    np.testing.assert_array_equal(lowp.round(_x(), "bf16"), lowp.round(_x(), "bf16"))
    assert lowp.buffer_cache_info()["blocks"] == 0


def test_small_results_use_numpy():
    r = lowp.round(_x(1000), "bf16")
    assert r.flags.owndata


@pytest.mark.parametrize("bad", [-1, 1.5, "1", None, True])
def test_bad_limit(bad):
    with pytest.raises((TypeError, ValueError), match="nbytes"):
        lowp.set_buffer_cache(bad)


def test_cached_empty_rejects_bad_input():
    with pytest.raises(TypeError, match="dtype"):
        _lowp.cached_empty([4], np.dtype(object))
    with pytest.raises(ValueError, match="shape"):
        _lowp.cached_empty([1 << 62, 8], np.dtype(np.float64))
    z = _lowp.cached_empty([0, 3], np.dtype(np.float32))
    assert z.shape == (0, 3)


def test_emulated_products_of_vectors_and_broadcasts_stay_small():
    """A 1-D dot product with every add rounded, and sums of broadcast operands, need no
    copy of the depth: peak memory stays far below the 64 bytes a step that a packed
    copy of a vector's column would take (2^24 steps: 1 GiB)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, numpy as np, lowp
        K = 2**24
        x = np.ones(K, np.float32)
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert float(lowp.matmul(x, x, accumulate="bf16")) == 256.0
        assert float(lowp.matmul(x.astype(np.float16), x.astype(np.float16), accumulate="float16")) == 2048.0
        b = np.broadcast_to(np.float32(1.0), (K,))
        assert float(lowp.sum(b, accumulate="bf16")) == 256.0
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    grown_kib = int(r.stdout.split()[-1])
    assert grown_kib < 256 * 1024, grown_kib  # inputs: 64 MiB of float32, 32 MiB of float16


def test_nan_checks_make_no_wide_copies():
    """Accumulators without NaN check the inputs for NaN (and products for inf * 0) on
    their own dtypes, broadcast axes once: no float64 copy of the inputs; a NaN in the
    last block of a large low-precision array is still found."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, numpy as np, lowp
        f = lowp.FloatFormat(5, 2, nan=None)
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        x = np.broadcast_to(np.float32(1), (2**27,))
        assert float(lowp.sum(x, accumulate=f)) == 8.0
        a = np.broadcast_to(np.float32(.5), (4, 2**22))
        assert float(lowp.matmul(a, a.T, accumulate=f)[0, 0]) == 2.0  # 0.25 a step stalls at 2
        stall = float(lowp.matmul(np.full((1, 4096), .5, np.float32), np.full((4096, 1), .5, np.float32), accumulate="bf16")[0, 0])
        assert stall == 64.0 and (lowp.matmul(a, a.T, accumulate="bf16") == stall).all()  # broadcast: one column computed
        ints = np.broadcast_to(np.arange(8192, dtype=np.int16)[None, :], (8192, 8192))  # widened: distinct values only
        assert lowp.sum(ints, axis=0)[5] == 5 * 8192
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        y = np.ones(2**23 + 5, lowp.bfloat16)
        y[-1] = np.nan
        try:
            lowp.sum(y, accumulate=f)
            raise SystemExit("NaN not found")
        except ValueError as e:
            assert "NaN" in str(e)
        print(grown)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) < 64 * 1024  # KiB: a float64 copy would be 1 GiB


def test_deep_vector_products_decode_a_in_pieces():
    """A vector product decodes A's rows in depth pieces: a 1 x 2^26 dot product of
    broadcast fp8 operands (no memory of their own) grows the peak by far less than the
    256 MiB a whole float32 copy of A would take (512 MiB as float64), and its value is
    exact."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, numpy as np, ml_dtypes, lowp
        K = 2**26
        one = np.ones((), ml_dtypes.float8_e4m3fn)
        a, b = np.broadcast_to(one, (1, K)), np.broadcast_to(one, (K, 1))
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert float(lowp.matmul(a, b)[0, 0]) == K
        assert float(lowp.matmul(b.T, a.T)[0, 0]) == K
        assert float(lowp.matmul(a, b, out_dtype=np.float64)[0, 0]) == K
        p = np.broadcast_to(np.ones((), lowp.posit32), (3, K))
        assert (lowp.matmul(p, p.T[:, :2]) == K).all()  # posit32 accumulates in float64
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) < 64 * 1024  # KiB


def test_operator_keeps_no_output_sized_scratch():
    """np.matmul on lowp dtypes sums into a scratch of at most 2^22 elements a block (32
    MiB of sums and codes, kept for the next product): an 8192 x 8192 fp8 result (64 MiB)
    left 512 MiB of sums and codes on the thread for its life."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, lowp
        rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096 >> 10
        x = np.ones((8192, 1), lowp.float8_e4m3fn)
        y = np.ones((1, 8192), lowp.float8_e4m3fn)
        base = rss()
        z = x @ y
        assert z.dtype == lowp.float8_e4m3fn and float(z[-1, -1]) == 1.0
        del z
        print(rss() - base)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) < 64 * 1024  # KiB


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_forked_children_compute_with_their_own_pool():
    """A child of os.fork() (multiprocessing's "fork" start method) after the parent used
    the thread pool: the child's kernels ran on the parent's workers, which it does not
    have, and hung. It now starts its own pool, with the parent's thread count, and gets
    the parent's bits."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import multiprocessing as mp, os, signal, numpy as np, lowp
        def f(seed):
            a = np.random.default_rng(seed).standard_normal((300, 300)).astype(np.float32)
            return lowp.matmul(a, a.T, accumulate="bf16", rounding="stochastic", seed=seed).tobytes()
        if __name__ == "__main__":
            lowp.set_num_threads(2)
            x = np.random.default_rng(0).standard_normal(1 << 21).astype(np.float32)
            want = lowp.round(x, "bf16")
            parent = [f(s) for s in range(3)]
            pid = os.fork()
            if pid == 0:
                signal.alarm(60)
                ok = lowp.get_num_threads() == 2 and np.array_equal(lowp.round(x, "bf16"), want) and f(1) == parent[1]
                os._exit(0 if ok else 1)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
            with mp.get_context("fork").Pool(2) as p:
                assert p.map_async(f, range(3)).get(timeout=60) == parent
            print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-1] == "ok", r.stderr


def test_tables_of_many_custom_formats_stay_bounded():
    """Decoding tables are cached per format within a bound: a sweep over 1000 custom
    16-bit formats kept every table (half a MiB each, 500 MiB in all)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np, lowp
        rss = lambda: int(open('/proc/self/statm').read().split()[1]) * 4096 >> 10
        codes = np.arange(1024, dtype=np.uint16)
        base = rss()
        for b in range(-500, 500):
            f = lowp.FloatFormat(5, 10, bias=b)
            v = lowp.decode(codes, f, np.float64)
            assert v[1] == 2.0 ** (1 - b - 10)
            lowp.decode(codes, f, np.float32)
        print(rss() - base)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) < 64 * 1024  # KiB


def test_bsr_without_blocks_converts_in_constant_memory():
    """A BSR matrix with no stored blocks converts to COO without index grids the size of
    a block (blocks of 2^26 x 2^26 took a GiB of grids for nothing)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, lowp
        from lowp import sparse
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        b = sparse.BSR((2**27, 2**27), blocksize=(2**26, 2**26))
        c = b.tocoo()
        assert c.nnz == 0 and c.shape == (2**27, 2**27) and c.to_scipy().nnz == 0
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-1]) < 64 * 1024  # KiB


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_fork_after_reloading_the_package():
    """The fork hooks are registered once per process: reloading the package registered
    them again, and the second hook waited forever on the lock the first one held."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import importlib, os, numpy as np, lowp
        importlib.reload(lowp)
        importlib.reload(lowp)
        lowp.round(np.ones(1 << 21, np.float32), "bf16")
        pid = os.fork()
        if pid == 0:
            os._exit(0 if lowp.round(np.ones(1 << 21, np.float32), "bf16")[0] == 1 else 1)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split()[-1] == "ok", r.stderr


def test_more_dimensions_than_32():
    """numpy 2 arrays take 64 dimensions: results of any size (the large ones come from the
    buffer cache) and matmul's broadcast batch take them too."""
    if np.lib.NumpyVersion(np.__version__) < "2.0.0":
        pytest.skip("numpy before 2 stops at 32 dimensions")
    rng = np.random.default_rng(5)
    for shape in ((2,) * 21 + (1,) * 20, (3,) + (1,) * 40):  # 16 MiB of float64, and small
        x = rng.standard_normal(shape)
        np.testing.assert_array_equal(lowp.round(x, "bf16"), lowp.round(x.reshape(-1), "bf16").reshape(shape))
        c = lowp.encode(x, "bf16")
        assert c.shape == shape and lowp.decode(c, "bf16").shape == shape
    for nd in (33, 35, 40):
        a = rng.standard_normal((1,) * (nd - 2) + (300, 300)).astype(np.float32)
        b = rng.standard_normal((2,) + (1,) * (nd - 3) + (300, 300)).astype(np.float32)
        r = lowp.matmul(a, b)
        assert r.shape == np.matmul(a, b).shape
        np.testing.assert_allclose(r, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4, atol=1e-3)
    with pytest.raises(ValueError, match="^b: batch"):
        lowp.matmul(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))


def test_emulated_products_without_memory_for_their_panel_raise_memory_error():
    """The emulated products pack B whole (4 bytes a value): where that memory is not to
    be had (here: an address-space limit), MemoryError, not an aborted process. A
    product of broadcast views needing terabytes too."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, numpy as np, lowp
        K = 1 << 20
        a, b = np.ones((64, K), lowp.bfloat16), np.ones((K, 64), lowp.bfloat16)
        vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), hard))
        for f in (lambda: lowp.matmul(a, b, accumulate="bf16"), lambda: lowp.sum(a, axis=1, accumulate="bf16")):
            try:
                f()
            except MemoryError as e:
                assert "cannot allocate a work buffer" in str(e), e
            else:
                raise AssertionError("no MemoryError")
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        x = np.broadcast_to(np.ones((1, 1), lowp.bfloat16), (2, 2**44))
        try:
            lowp.matmul(x, x.T, accumulate="float8_e5m2")
        except MemoryError:
            pass
        else:
            raise AssertionError("no MemoryError")
        assert float(lowp.matmul(a[:8, :64], b[:64, :8], accumulate="bf16")[0, 0]) == 64.0
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-1] == "ok", (r.returncode, r.stderr[-2000:])


def test_quantize_works_in_a_few_copies_of_its_input():
    """quantize's exact quotients run in pieces: 2**24 float32 values (64 MiB) quantize
    within 640 MiB more address space, to nearest and stochastically (they took 1.6 GB,
    100 bytes a value)."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import resource, numpy as np, lowp
        x = np.random.default_rng(0).standard_normal(1 << 24).astype(np.float32)
        lowp.quantize(x[:1 << 17], "int8", symmetric=False)  # (the pool and tables set up first)
        vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        resource.setrlimit(resource.RLIMIT_AS, (vm + (640 << 20), hard))
        q = lowp.quantize(x, "int8", symmetric=False)
        s = lowp.quantize(x, "int8", rounding="stochastic", seed=5)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        d = q.dequantize()
        assert np.abs(d - x).max() <= float(q.scale) / 2 * (1 + 1e-6)
        assert np.abs(s.dequantize() - x).max() <= float(s.scale) * (1 + 1e-6)
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-1] == "ok", (r.returncode, r.stderr[-2000:])
