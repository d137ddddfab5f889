"""Stochastic rounding: one of the two neighbours, unbiased in every binade (subnormals
included), reproducible for a seed whatever the thread count or SIMD path, and the
documented effect of ``rbits``: P(up) = floor(frac * 2**rbits) / 2**rbits.

Statistical checks use fixed seeds (so they are deterministic) and 4-sigma bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

import lowp

FORMATS = ["bf16", "e4m3fn", "e5m2", "float16", "e5m2fnuz"]


def binade_probes(fmt, per_binade=3, seed=0):
    """Non-representable values, `per_binade` in every binade of fmt (the subnormal range
    counts as one binade per power of two), with their neighbours lo < x < hi."""
    f = lowp.format(fmt)
    rng = np.random.default_rng(seed)
    lo_exp = f.emin - f.man_bits if f.subnormals else f.emin
    xs = []
    for e in range(lo_exp, f.emax + 1):
        unit = 2.0 ** (max(e, f.emin) - f.man_bits)
        base = 2.0**e
        steps = max(int(round(base / unit)), 1)
        k = rng.integers(0, steps, per_binade)
        frac = rng.uniform(0.05, 0.95, per_binade)
        xs.append(base + (k + frac) * unit)
    x = np.concatenate(xs)
    x = x[x < f.max]
    lo = lowp.round(x, f, "down")
    hi = lowp.round(x, f, "up")
    assert np.all(lo < x) and np.all(x < hi)
    return x, lo, hi


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mean_within_4_sigma_every_binade(fmt, dtype, isa):
    x, lo, hi = binade_probes(fmt, seed=len(fmt))
    x = x.astype(dtype)
    keep = x.astype(np.float64) == lowp.round(x, fmt, "toward_zero").astype(np.float64)
    x, lo, hi = x[~keep], lo[~keep], hi[~keep]  # (all inexact in float32 as well)
    n = 4096
    xs = np.repeat(x, n)
    r = lowp.round(xs, fmt, "stochastic", seed=2024).astype(np.float64).reshape(-1, n)
    lo64, hi64, x64 = lo.astype(np.float64), hi.astype(np.float64), x.astype(np.float64)
    assert np.all((r == lo64[:, None]) | (r == hi64[:, None])), "a result is not a neighbour"
    p = (x64 - lo64) / (hi64 - lo64)
    p_hat = (r == hi64[:, None]).mean(axis=1)
    sigma = np.sqrt(p * (1 - p) / n)
    z = np.abs(p_hat - p) / sigma
    worst = np.argmax(z)
    assert z.max() <= 4.0, f"x={x64[worst]!r}: P(up) {p_hat[worst]} expected {p[worst]} ({z.max():.1f} sigma)"
    # the mean itself, in the units of each binade
    mean_err = np.abs(r.mean(axis=1) - x64) / ((hi64 - lo64) * sigma)
    assert mean_err.max() <= 4.0 + 1e-9


@pytest.mark.parametrize("fmt", FORMATS + ["posit16", "posit8", lowp.PositFormat(12, 1), lowp.FloatFormat(6, 9),
                                           lowp.FloatFormat(4, 3, subnormals=False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_always_a_neighbour(fmt, dtype, any_isa):
    rng = np.random.default_rng(1)
    f = lowp.format(fmt)
    e = rng.integers(-40, 40, 200_000)
    x = (np.ldexp(rng.random(e.size) + 0.5, e) * rng.choice([-1, 1], e.size)).astype(dtype)
    x = np.concatenate([x, np.array([0, -0.0, np.inf, -np.inf, f.max, -f.max, f.min_subnormal], dtype)])
    r = lowp.round(x, f, "stochastic", seed=7)
    lo, hi = lowp.round(x, f, "down"), lowp.round(x, f, "up")

    def same(a, b):  # NaN (overflow into a format without inf, posit NaR) equals NaN
        return (a == b) | (np.isnan(a) & np.isnan(b))

    ok = same(r, lo) | same(r, hi)
    assert ok.all(), x[~ok][:5]
    exact = lo == hi
    assert np.array_equal(r[exact], lowp.round(x[exact], f))
    # both neighbours occur
    inexact = ~exact & np.isfinite(hi) & np.isfinite(lo)
    assert (r[inexact] == lo[inexact]).any() and (r[inexact] == hi[inexact]).any()


@pytest.mark.parametrize("fmt", ["bf16", "e4m3fn", "e5m2", "float16", "posit16", lowp.FloatFormat(6, 9)])
def test_same_seed_same_output_threads_and_paths(fmt):
    rng = np.random.default_rng(3)
    n = 1_000_003  # several chunks, odd tail
    # normal-sized values, and values spread over every binade (subnormal, tiny, overflowing)
    spread = np.ldexp(rng.random(n // 4) + 0.5, rng.integers(-150, 128, n // 4)) * rng.choice([-1, 1], n // 4)
    x64 = np.concatenate([rng.standard_normal(n - spread.size) * 3, spread])
    rng.shuffle(x64)
    with np.errstate(over="ignore"):
        x32 = x64.astype(np.float32)
    before = lowp.get_num_threads()
    results = {}
    try:
        for isa in (None, "sse2", "scalar"):
            lowp._lowp.set_isa(isa)
            for t in (1, 2):
                lowp.set_num_threads(t)
                results[(isa, t)] = (lowp.encode(x32, fmt, "stochastic", seed=99),
                                     lowp.encode(x64, fmt, "stochastic", seed=99),
                                     lowp.round(x32, fmt, "stochastic", seed=99),
                                     lowp.encode(x32, fmt, "stochastic", seed=99, rbits=11))
    finally:
        lowp._lowp.set_isa(None)
        lowp.set_num_threads(before)
    ref = results[("scalar", 1)]
    for key, res in results.items():
        for a, b in zip(res, ref):
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), key
    # the round path equals decoding the encode path
    np.testing.assert_array_equal(ref[2], lowp.decode(ref[0], fmt, np.float32))


def test_offset_views_keep_element_keys():
    """The random stream is keyed by element index within the call."""
    x = np.full(1000, 1 + 2.0**-9, np.float32)
    a = lowp.encode(x, "bf16", "stochastic", seed=5)
    b = lowp.encode(x[:500], "bf16", "stochastic", seed=5)
    assert np.array_equal(a[:500], b)
    assert not np.array_equal(a[:500], a[500:])


def test_different_seeds_differ():
    x = np.full(100_000, 1 + 2.0**-9, np.float32)
    a = lowp.encode(x, "bf16", "stochastic", seed=1)
    b = lowp.encode(x, "bf16", "stochastic", seed=2)
    c = lowp.encode(x, "bf16", "stochastic", seed=1)
    assert np.array_equal(a, c) and not np.array_equal(a, b)
    # seed None draws fresh entropy
    d = lowp.encode(x, "bf16", "stochastic")
    e = lowp.encode(x, "bf16", "stochastic")
    assert not np.array_equal(d, e)
    # nearby seeds are not correlated: agreement near 1/2 + 1/2 p^2... just different streams
    agree = (a == b).mean()
    p = 0.25  # P(up) for 1 + 2^-9 in bf16 (unit 2^-7)
    expect = p * p + (1 - p) * (1 - p)
    assert abs(agree - expect) < 4 * np.sqrt(expect * (1 - expect) / x.size)


def test_seeds_draw_unrelated_streams_not_shifted_copies():
    """Each seed has its own Weyl step: two seeds never draw one sequence some elements
    apart (with one step for all, 19293 and 131765 drew the same million decisions,
    262762 and 32739 the same shifted by one, and Generator draws overlapped within a
    few dozen calls of a million elements)."""
    x = np.full(1_000_000, 1 + 2.0**-9, np.float32)
    p = 0.25
    expect = p * p + (1 - p) * (1 - p)
    tol = 5 * np.sqrt(expect * (1 - expect) / x.size)
    r = {s: lowp.round(x, "bf16", "stochastic", seed=s) > 1 for s in (19293, 131765, 262762, 32739)}
    for s, t, shift in ((19293, 131765, 0), (19293, 131765, 1), (262762, 32739, 1), (32739, 262762, 1)):
        agree = (r[s][shift:] == r[t][:x.size - shift]).mean()
        assert abs(agree - expect) < tol, (s, t, shift, agree)
    g = np.random.default_rng(0)
    draws = [lowp.round(x, "bf16", "stochastic", seed=g) > 1 for _ in range(40)]
    assert abs((draws[39][:-241496] == draws[4][241496:]).mean() - expect) < 2 * tol


def test_seed_generator():
    x = np.full(50_000, 1 + 2.0**-9)
    a = lowp.round(x, "bf16", "stochastic", seed=np.random.default_rng(11))
    b = lowp.round(x, "bf16", "stochastic", seed=np.random.default_rng(11))
    assert np.array_equal(a, b)
    g = np.random.default_rng(11)
    c1 = lowp.round(x, "bf16", "stochastic", seed=g)
    c2 = lowp.round(x, "bf16", "stochastic", seed=g)  # the generator advanced
    assert np.array_equal(c1, a) and not np.array_equal(c1, c2)
    # numpy integer seeds work like ints
    assert np.array_equal(lowp.round(x, "bf16", "stochastic", seed=np.uint64(5)),
                          lowp.round(x, "bf16", "stochastic", seed=5))
    assert np.array_equal(lowp.round(x, "bf16", "stochastic", seed=2**64 - 1),
                          lowp.round(x, "bf16", "stochastic", seed=2**64 - 1))


@pytest.mark.parametrize("rbits", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rbits_probability(rbits, dtype, any_isa):
    """P(up) = floor(frac * 2^rbits) / 2^rbits, frac the remainder in units of the last place."""
    unit = 2.0**-7  # bf16 at [1, 2)
    fracs = np.array([0.1, 0.24, 0.25, 0.3, 0.4, 0.49, 0.5, 0.6, 0.75, 0.9, 0.99])
    n = 20_000
    x = np.repeat((1 + 3 * unit) + fracs * unit, n).astype(dtype)
    fr = (x.astype(np.float64).reshape(-1, n)[:, 0] - (1 + 3 * unit)) / unit
    r = lowp.round(x, "bf16", "stochastic", seed=17, rbits=rbits).astype(np.float64).reshape(-1, n)
    assert np.all((r == 1 + 3 * unit) | (r == 1 + 4 * unit))
    p_hat = (r == 1 + 4 * unit).mean(axis=1)
    p = np.floor(fr * 2**rbits) / 2**rbits
    sigma = np.sqrt(np.maximum(p * (1 - p), 1e-12) / n)
    assert np.all(np.abs(p_hat - p) <= 4 * sigma + 1e-12), list(zip(fr, p, p_hat))
    # where the formula gives 0 the result never rounds up
    assert np.all(p_hat[p == 0] == 0)


def test_rbits_other_formats():
    n = 40_000
    # int8 via quantize-free encode: 2.3 -> P(3) = floor(0.3 * 4) / 4 = 0.25 with 2 bits
    x = np.full(n, 2.3)
    r = lowp.round(x, "int8", "stochastic", seed=3, rbits=2)
    p_hat = (r == 3).mean()
    assert set(np.unique(r)) <= {2.0, 3.0}
    assert abs(p_hat - 0.25) <= 4 * np.sqrt(0.25 * 0.75 / n)
    r = lowp.round(np.full(n, 2.2), "int8", "stochastic", seed=3, rbits=2)
    assert abs((r == 3).mean() - 0.0) == 0  # floor(0.2 * 4) = 0
    # posit16 between 1 and 1 + 2^-11: frac 0.7 with 1 bit -> 1/2
    x = np.full(n, 1 + 0.7 * 2.0**-11)
    r = lowp.round(x, "posit16", "stochastic", seed=4, rbits=1)
    p_hat = (r > 1).mean()
    assert abs(p_hat - 0.5) <= 4 * np.sqrt(0.25 / n)


def test_default_rbits_is_exact_for_input_resolution():
    """With the default rbits, a remainder with few bits gets exactly its probability."""
    n = 200_000
    x = np.full(n, 1 + 2.0**-7 * (1 + 2.0**-16))  # remainder 2^-16 of a bf16 unit: P(up) = 2^-16
    for dt in (np.float32, np.float64):
        r = lowp.round(x.astype(dt), "bf16", "stochastic", seed=8)
        ups = int((r > 1 + 2.0**-7).sum())
        lam = n * 2.0**-16  # ~3 expected
        assert ups <= lam + 4 * np.sqrt(lam) + 4
    # (and a frac of 0.5 is 0.5 on every path)
    r = lowp.round(np.full(n, 1 + 2.0**-8, np.float32), "bf16", "stochastic", seed=9)
    assert abs((r > 1).mean() - 0.5) <= 4 * np.sqrt(0.25 / n)


@pytest.mark.parametrize("fmt", ["e4m3fn", "e5m2", "bf16", "posit8", lowp.FloatFormat(3, 2, nan=None)])
def test_stochastic_saturate_stays_finite(fmt, isa):
    f = lowp.format(fmt)
    x = np.concatenate([np.linspace(-2 * f.max, 2 * f.max, 20001), [np.inf, -np.inf]])
    r = lowp.round(x, f, "stochastic", saturate=True, seed=12)
    assert np.all(np.isfinite(r)) and np.all(np.abs(r) <= f.max)
    assert np.all(r[x >= f.max] == f.max) and np.all(r[x <= -f.max] == -f.max)


@pytest.mark.parametrize("fmt", ["bf16", "e4m3fn", "e5m2", "float16"])
@pytest.mark.parametrize("rbits", [1, 8, 23, 32, 33, 64])
def test_float32_and_float64_inputs_agree(fmt, rbits):
    """The same values as float32 (SIMD path when rbits <= 32) and float64 (generic engine)
    with the same seed and rbits give the same codes."""
    rng = np.random.default_rng(rbits)
    x = np.ldexp(rng.random(300_000) + 0.5, rng.integers(-30, 20, 300_000)).astype(np.float32)
    a = lowp.encode(x, fmt, "stochastic", seed=21, rbits=rbits)
    b = lowp.encode(x.astype(np.float64), fmt, "stochastic", seed=21, rbits=rbits)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("index0", [0, 2**32 - 37, 2**33 + 5, 2**63])
def test_element_index_keys_across_high_words(index0):
    """The stream is a function of (seed, element index) also where the index's upper
    32 bits change inside a call: every path, and element by element, agree."""
    from lowp import _lowp

    spec = lowp.format("bf16")._spec
    x = np.full(200, 1 + 2.0**-9, np.float32)
    outs = []
    try:
        for isa in (None, "sse2", "scalar"):
            _lowp.set_isa(isa)
            d = np.empty(200, np.uint16)
            _lowp.encode_into(x, spec, d, "stochastic", False, 77, 32, index0)
            outs.append(d)
    finally:
        _lowp.set_isa(None)
    assert all(np.array_equal(o, outs[0]) for o in outs)
    one = np.empty(1, np.uint16)
    for i in range(0, 200, 7):
        _lowp.encode_into(x[i:i + 1], spec, one, "stochastic", False, 77, 32, index0 + i)
        assert one[0] == outs[0][i]
    assert len(set(outs[0].tolist())) == 2  # both neighbours occur


@pytest.mark.parametrize("acc", ["float16", "bfloat16", "float8_e5m2", "float32"])
@pytest.mark.parametrize("chunk", [None, 16])
def test_one_column_sum_draws_the_same_bits_as_the_lanes(acc, chunk):
    """A 1-D sum runs the one-column step; the first column of a many-column sum has
    the same element index, so the same random bits, and must round the same way."""
    g = np.random.default_rng(21)
    x = (g.standard_normal((300, 9)) * np.exp2(g.integers(-6, 6, (300, 9)))).astype(np.float32)
    lanes = lowp.sum(x, axis=0, accumulate=acc, rounding="stochastic", seed=3, chunk=chunk)
    one = lowp.sum(x[:, 0].copy(), accumulate=acc, rounding="stochastic", seed=3, chunk=chunk)
    assert lanes[0].tobytes() == np.asarray(one, lanes.dtype).tobytes()
    # Different seeds do differ (the bits are drawn at all): one of five others, as a
    # coarse accumulator can land on the same value by chance.
    others = {float(lowp.sum(x[:, 0].copy(), accumulate=acc, rounding="stochastic", seed=s, chunk=chunk)) for s in range(4, 9)}
    assert acc == "float32" or others != {float(one)}


@pytest.mark.parametrize("fmt", ["posit8", "posit16", lowp.PositFormat(8, 1), lowp.PositFormat(10, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_posits_unbiased_where_exponent_bits_are_cut(fmt, dtype, isa):
    """Near maxpos and minpos a posit keeps no fraction bits and its neighbours are
    powers of two several binades apart (posit8: 2^20 and 2^24): stochastic rounding
    still rounds up with the probability of the distance, not of the bit string
    (2^22 a fifth of the way up, where the bits say a half); float32 and float64 inputs
    give the same codes."""
    f = lowp.format(fmt) if isinstance(fmt, str) else fmt
    # Values spread over every neighbour pair of the top and bottom few codes.
    codes = np.arange(1, 2 ** (f.bits - 1) - 1, dtype=np.uint64)
    v = lowp.decode(codes.astype(f.storage_dtype), f, np.float64)
    ratio = v[1:] / v[:-1]
    gaps = np.nonzero(ratio >= 4)[0]  # neighbours at least two binades apart
    assert gaps.size > 0
    rng = np.random.default_rng(f.bits)
    n = 4096
    for i in gaps[:: max(1, gaps.size // 12)]:
        lo, hi = v[i], v[i + 1]
        x = lo + (hi - lo) * rng.uniform(0.05, 0.95)
        x = float(np.asarray(x, dtype))
        if not lo < x < hi:
            continue
        r = lowp.round(np.full(n, x, dtype), f, "stochastic", seed=7).astype(np.float64)
        assert np.all((r == lo) | (r == hi))
        p = (x - lo) / (hi - lo)
        p_hat = (r == hi).mean()
        assert abs(p_hat - p) <= 4 * np.sqrt(p * (1 - p) / n), (x, lo, hi, p, p_hat)
        a = lowp.encode(np.full(64, x, np.float32), f, "stochastic", seed=3, rbits=24)
        b = lowp.encode(np.full(64, x, np.float32).astype(np.float64), f, "stochastic", seed=3, rbits=24)
        assert np.array_equal(a, b)


def test_stochastic_rounding_of_values_float64_does_not_hold_is_unbiased():
    """64-bit integers beyond 2**53 and longdouble values round up with the probability of
    their exact place between the neighbours, not of the float64 they were read as."""
    f50, f52 = lowp.FloatFormat(11, 50), lowp.FloatFormat(11, 52)
    n = 20000
    up = (lowp.round(np.full(n, 2**60 + 1, np.int64), f50, "stochastic", seed=3) > 2**60).sum()
    assert abs(up - n / 1024) < 5 * math.sqrt(n / 1024)  # 1/1024 (it was 1/4)
    half = lowp.round(np.full(4000, 2**53 + 1, np.int64), f52, "stochastic", seed=4)
    assert abs((half > 2**53).mean() - 0.5) < 0.05
    np.testing.assert_array_equal(half, lowp.round(np.full(4000, 2**53 + 1, np.int64), f52, "stochastic", seed=4))
    neg = lowp.round(np.full(4000, -(2**53 + 1), np.int64), f52, "stochastic", seed=6)
    assert abs((neg < -(2**53)).mean() - 0.5) < 0.05
    codes = lowp.encode(np.full(n, 2**60 + 1, np.uint64), f50, "stochastic", seed=1)
    assert abs((lowp.decode(codes, f50, np.float64) > 2**60).sum() - n / 1024) < 5 * math.sqrt(n / 1024)
    if np.finfo(np.longdouble).nmant > 60:
        ld = np.full(n, np.longdouble(1) + np.longdouble(2) ** -60)
        ups = (lowp.round(ld, f52, "stochastic", seed=5) > 1).sum()
        assert abs(ups - n / 256) < 5 * math.sqrt(n / 256)


def test_a_refused_call_draws_nothing_from_a_generator():
    """A call that raises leaves a numpy Generator passed as seed as it was (the next
    seeded call gives the bits it would have), as numpy's own Generator methods do."""
    x = np.linspace(0.1, 0.9, 64).astype(np.float32)
    a = np.ones((4, 8), np.float32)

    def next_bits(g):
        return lowp.round(x, "e4m3fn", "stochastic", seed=g)

    want = next_bits(np.random.default_rng(7))
    refused = [
        lambda g: lowp.round(x, "bf16", "stochastic", seed=g, out=np.empty(3, np.float32)),
        lambda g: lowp.round(np.float32([np.nan]), "int8", "stochastic", seed=g),
        lambda g: lowp.encode(np.float32([np.nan]), "int8", "stochastic", seed=g),
        lambda g: lowp.cast(np.float32([np.nan]), lowp.posit8, "stochastic", seed=g, saturate="no"),
        lambda g: lowp.matmul(a, a.T, accumulate="bf16", rounding="stochastic", seed=g, out=np.empty((3, 3), np.float32)),
        lambda g: lowp.matmul(a, a.T, accumulate="bf16", rounding="stochastic", seed=g, out_dtype="foo"),
        lambda g: lowp.sum(a, axis=5, accumulate="bf16", rounding="stochastic", seed=g),
    ]
    for i, call in enumerate(refused):
        g = np.random.default_rng(7)
        with pytest.raises((TypeError, ValueError)):
            call(g)
        np.testing.assert_array_equal(next_bits(g), want, err_msg=str(i))
