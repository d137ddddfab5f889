"""lowp.training: LossScaler, SGD/Adam, Fp8Scaling, QuantConfig presets."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowp
from lowp.testing import strategies as lst
from lowp.training import PRESETS, SGD, Adam, Fp8Scaling, LossScaler, QuantConfig, preset


# -- LossScaler ---------------------------------------------------------------------------------

def test_loss_scaler_defaults_are_pytorch_gradscaler():
    s = LossScaler()
    assert s.scale == 2.0**16
    assert (s.growth_factor, s.backoff_factor, s.growth_interval) == (2.0, 0.5, 2000)
    for _ in range(1999):
        s.update(False)
    assert s.scale == 2.0**16
    s.update(False)  # the 2000th clean step doubles
    assert s.scale == 2.0**17 and s.growth_tracker == 0
    s.update(True)  # overflow halves
    assert s.scale == 2.0**16


def test_loss_scaler_step_by_step_with_synthetic_gradients():
    s = LossScaler(init_scale=8.0, growth_interval=3, min_scale=2.0)
    opt_steps = []

    class Opt:
        def step(self, grads):
            opt_steps.append([g.copy() for g in grads])

    def grads(*vals):
        return [np.array(vals, np.float32) * np.float32(s.scale), np.full((2, 2), s.scale, np.float32)]

    trace = []
    for vals in [(1.0, 2.0), (np.inf, 1.0), (1.0, np.nan), (3.0, 4.0), (1.0, 1.0), (1.0, 1.0), (-np.inf, 0.0),
                 (np.nan, np.nan), (0.5, 0.5), (0.5, 0.5), (0.5, 0.5)]:
        taken = s.step(Opt(), grads(*vals))
        trace.append((taken, s.scale, s.growth_tracker))
    assert trace == [
        (True, 8.0, 1),
        (False, 4.0, 0),   # inf: skip, back off
        (False, 2.0, 0),   # NaN: skip, back off
        (True, 2.0, 1),
        (True, 2.0, 2),
        (True, 4.0, 0),    # third clean step in a row: grow
        (False, 2.0, 0),
        (False, 2.0, 0),   # min_scale floor
        (True, 2.0, 1),
        (True, 2.0, 2),
        (True, 4.0, 0),
    ]
    # Steps taken saw unscaled gradients.
    np.testing.assert_array_equal(opt_steps[0][0], [1.0, 2.0])
    np.testing.assert_array_equal(opt_steps[0][1], np.ones((2, 2)))
    np.testing.assert_array_equal(opt_steps[1][0], [3.0, 4.0])
    assert len(opt_steps) == 7 and s.skipped_steps == 4


def test_unscale_in_place_and_update_uses_its_finding():
    s = LossScaler(init_scale=4.0, growth_interval=1)
    g = [np.array([4.0, 8.0], np.float32), np.array([[2.0]], np.float64)]
    assert s.unscale(g) is True
    np.testing.assert_array_equal(g[0], [1.0, 2.0])
    np.testing.assert_array_equal(g[1], [[0.5]])
    s.update()
    assert s.scale == 8.0
    assert s.unscale([np.array([1.0, np.inf], np.float32)]) is False
    s.update()
    assert s.scale == 4.0
    with pytest.raises(ValueError, match="found_inf"):
        s.update()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.booleans(), max_size=60), st.integers(1, 5), st.sampled_from([1.5, 2.0, 4.0]),
       st.sampled_from([0.25, 0.5]))
def test_loss_scaler_matches_gradscaler_rule(found, interval, growth, backoff):
    """GradScaler's update rule (torch._amp_update_scale_), transcribed."""
    s = LossScaler(init_scale=2.0**10, growth_factor=growth, backoff_factor=backoff, growth_interval=interval,
                   min_scale=2.0**-40)
    scale, tracker = 2.0**10, 0
    for f in found:
        if f:
            scale *= backoff
            tracker = 0
        else:
            tracker += 1
            if tracker == interval:
                scale *= growth
                tracker = 0
        s.update(f)
        assert (s.scale, s.growth_tracker) == (scale, tracker)


def test_loss_scaler_does_not_grow_past_float32():
    s = LossScaler(init_scale=2.0**127, growth_interval=1)
    s.update(False)
    assert s.scale == 2.0**127


@pytest.mark.parametrize("kw,arg", [(dict(growth_factor=1.0), "growth_factor"), (dict(growth_factor=0.5), "growth_factor"),
                                    (dict(backoff_factor=1.0), "backoff_factor"), (dict(backoff_factor=0.0), "backoff_factor"),
                                    (dict(init_scale=0.0), "init_scale"), (dict(init_scale=math.inf), "init_scale"),
                                    (dict(growth_interval=0), "growth_interval"), (dict(min_scale=0.0), "min_scale"),
                                    (dict(min_scale=2.0**20), "min_scale"), (dict(growth_factor=math.inf), "growth_factor"),
                                    (dict(init_scale=1e300), "init_scale")])
def test_loss_scaler_bad_arguments(kw, arg):
    with pytest.raises(ValueError, match=arg):
        LossScaler(**kw)


def test_unscale_divides_in_float64_and_rounds_once():
    """float16 gradients at a scale of 2**25 and more: ``1/scale`` underflows in float16,
    the quotients do not (each is the exact one rounded once)."""
    for scale in (2.0**25, 2.0**30, 3.0 * 2**20):
        s = LossScaler(init_scale=scale)
        g = np.array([1000.0, 65504.0, -3.0, 2.0**-10], np.float16)
        want = (g.astype(np.float64) / scale).astype(np.float16)
        assert s.unscale([g]) is True
        np.testing.assert_array_equal(g, want)
        assert g[0] != 0
    g = np.array([1.5, -3.0], np.float32)
    LossScaler(init_scale=2.0**100, min_scale=1.0).unscale([g])
    np.testing.assert_array_equal(g, np.array([1.5 * 2.0**-100, -3.0 * 2.0**-100], np.float32))
    with pytest.raises(ValueError, match="state"):
        LossScaler().load_state_dict({"scale": math.inf, "growth_tracker": 0})


def test_loss_scaler_bad_types():
    with pytest.raises(TypeError, match="growth_interval"):
        LossScaler(growth_interval=2.5)
    with pytest.raises(TypeError, match="grads"):
        LossScaler().unscale([np.array([1, 2])])


LOWP_FLOAT_DTYPES = [lowp.bfloat16, lowp.float8_e5m2, lowp.float8_e4m3fn, lowp.float8_e4m3, lowp.float8_e4m3fnuz,
                     lowp.float8_e5m2fnuz, lowp.posit8, lowp.posit16, lowp.posit32, ml_dtypes.bfloat16,
                     ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn, np.float16]
LOWP_FLOAT_IDS = ["bf16", "e5m2", "e4m3fn", "e4m3", "e4m3fnuz", "e5m2fnuz", "posit8", "posit16", "posit32",
                  "ml-bf16", "ml-e5m2", "ml-e4m3fn", "f16"]


@pytest.mark.parametrize("dt", LOWP_FLOAT_DTYPES, ids=LOWP_FLOAT_IDS)
def test_unscale_accepts_lowp_and_ml_dtypes(dt):
    """Gradients of any low-precision float or posit dtype (lowp's or ml_dtypes') are
    unscaled in place: the exact quotient rounded once into their dtype."""
    f = lowp.format(dt)
    vals = np.array([8.0, -3.0, 0.5, 0.0, 1.5, -20.0])
    for scale in (4.0, 3.0, 0.5):
        g = lowp.cast(vals, dt) if np.dtype(dt).kind == "V" else vals.astype(dt)
        g = g.view(dt) if g.dtype != np.dtype(dt) else g
        exact = lowp.decode(g.view(f.storage_dtype), f, np.float64) / scale  # float64: exact for these
        s = LossScaler(init_scale=scale, min_scale=0.5)
        assert s.unscale([g]) is True
        assert g.dtype == np.dtype(dt)
        got = lowp.decode(g.view(f.storage_dtype), f, np.float64)
        np.testing.assert_array_equal(got, lowp.round(exact, f, saturate=True))
    g = np.array([1.0, np.nan], np.float32).astype(dt)
    assert LossScaler(init_scale=2.0).unscale([g]) is False


@pytest.mark.parametrize("bad", [np.int8, np.int32, np.uint16, np.bool_, np.complex64, object, "U2", ml_dtypes.int4],
                         ids=str)
def test_unscale_and_step_reject_non_float_dtypes(bad):
    g = np.zeros(3, dtype=bad)
    with pytest.raises(TypeError, match=r"^grads\[1\]: .*float"):
        LossScaler().unscale([np.ones(3, np.float32), g])
    for make in (lambda p: SGD(p, lr=0.1), lambda p: Adam(p)):
        with pytest.raises(TypeError, match=r"^grads\[1\]: .*float"):
            make([np.ones(2, np.float32), np.ones(3, np.float32)]).step([np.ones(2, np.float32), g])


def test_unscale_checks_every_gradient_before_changing_any():
    g0 = np.array([4.0], np.float32)
    with pytest.raises(TypeError, match=r"grads\[1\]"):
        LossScaler(init_scale=2.0).unscale([g0, np.array([1])])
    assert g0[0] == 4.0


@pytest.mark.parametrize("dt", [lowp.bfloat16, lowp.posit16, lowp.float8_e4m3fn, ml_dtypes.bfloat16, np.float16],
                         ids=["bf16", "posit16", "e4m3fn", "ml-bf16", "f16"])
@pytest.mark.parametrize("make", [lambda p, **k: SGD(p, lr=0.1, momentum=0.9, **k), lambda p, **k: Adam(p, **k)],
                         ids=["sgd", "adam"])
def test_optimizers_take_low_precision_gradients(dt, make):
    """A step from gradients of a low-precision dtype is the step from the same values in float32."""
    rng = np.random.default_rng(4)
    grads = [rng.standard_normal(s).astype(np.float32).astype(dt) for s in ((3, 4), (4,))]
    grads32 = [g.astype(np.float32) for g in grads]
    p1, p2 = _params(), _params()
    o1, o2 = make(p1, seed=1), make(p2, seed=1)
    for _ in range(3):
        o1.step(grads)
        o2.step(grads32)
    for a, b in zip(p1, p2):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dt,big", [(np.float16, 40000.0), (lowp.float8_e5m2, 40000.0), (ml_dtypes.float8_e5m2, 40000.0),
                                    (lowp.float8_e4m3fn, 400.0), (lowp.bfloat16, 3e38), (np.float32, 3e38)],
                         ids=["f16", "e5m2", "ml-e5m2", "e4m3fn", "bf16", "f32"])
def test_unscale_reports_quotients_that_overflow(dt, big):
    """A scale below 1 can push finite gradients past the format's range: reported as not
    finite, like an inf in the input, and the step is skipped."""
    f = lowp.format(dt)
    g = np.array([big, 1.0], np.float32).astype(dt)
    exact = lowp.decode(g.view(f.storage_dtype), f, np.float64) / 0.25
    assert not np.all(np.abs(exact) <= f.max)  # the oracle: the quotient is past the largest value
    s = LossScaler(init_scale=0.25, min_scale=0.125)
    steps = []

    class Opt:
        def step(self, grads):
            steps.append(grads)

    assert s.step(Opt(), [g]) is False
    assert steps == [] and s.skipped_steps == 1 and s.scale == 0.125
    assert not np.isfinite(g[0]) and g[1] == 4.0
    ok = np.array([big / 8, 1.0], np.float32).astype(dt)  # quotients in range: finite
    assert LossScaler(init_scale=0.25, min_scale=0.125).unscale([ok]) is True


# -- optimizers ---------------------------------------------------------------------------------

def _params(seed=0, shapes=((3, 4), (4,))):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def test_sgd_float32_matches_reference():
    ps = _params()
    ref = [p.astype(np.float64) for p in ps]
    bufs = [np.zeros_like(r) for r in ref]
    opt = SGD(ps, 0.1, momentum=0.9, weight_decay=0.01, weight_format=None)
    rng = np.random.default_rng(1)
    for t in range(5):
        gs = [rng.standard_normal(p.shape).astype(np.float32) for p in ps]
        opt.step(gs)
        for r, b, g in zip(ref, bufs, gs):
            d = g + 0.01 * r
            b[...] = d if t == 0 else 0.9 * b + d
            r -= 0.1 * b
    for p, r in zip(ps, ref):
        np.testing.assert_allclose(p, r, rtol=1e-5, atol=1e-6)


def test_adam_float32_matches_reference():
    ps = _params()
    ref = [p.astype(np.float64) for p in ps]
    m = [np.zeros_like(r) for r in ref]
    v = [np.zeros_like(r) for r in ref]
    opt = Adam(ps, 0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    rng = np.random.default_rng(2)
    for t in range(1, 6):
        gs = [rng.standard_normal(p.shape).astype(np.float32) for p in ps]
        opt.step(gs)
        for r, mi, vi, g in zip(ref, m, v, gs):
            d = g + 0.1 * r
            mi[...] = 0.8 * mi + 0.2 * d
            vi[...] = 0.99 * vi + 0.01 * d * d
            r -= 0.01 * (mi / (1 - 0.8**t)) / (np.sqrt(vi / (1 - 0.99**t)) + 1e-6)
    for p, r in zip(ps, ref):
        np.testing.assert_allclose(p, r, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn", "posit16"])
@pytest.mark.parametrize("rounding", ["nearest_even", "stochastic", "toward_zero"])
def test_master_weights_and_working_copies(fmt, rounding):
    ps = _params(3)
    opt = SGD(ps, 0.05, momentum=0.5, weight_format=fmt, rounding=rounding, seed=7)
    rng = np.random.default_rng(4)
    for _ in range(4):
        opt.step([rng.standard_normal(p.shape).astype(np.float32) for p in ps])
        for p, mst in zip(ps, opt.master):
            assert mst.dtype == np.float32
            # The working copy holds values of the format, one of the master's two neighbours.
            np.testing.assert_array_equal(lowp.round(p, fmt), p)
            lo = lowp.round(mst, fmt, "down", saturate=True)
            hi = lowp.round(mst, fmt, "up", saturate=True)
            assert np.all((p == lo) | (p == hi))
            if rounding != "stochastic":
                np.testing.assert_array_equal(p, lowp.round(mst, fmt, rounding, saturate=True))


def test_stochastic_working_copies_are_reproducible():
    def run(seed):
        ps = _params(5)
        opt = Adam(ps, 0.01, weight_format="bf16", seed=seed)
        for k in range(3):
            opt.step([np.full(p.shape, 0.3 * (k + 1), np.float32) for p in ps])
        return ps

    a, b, c = run(11), run(11), run(12)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, z) for x, z in zip(a, c))


def test_no_master_round_to_nearest_stalls_stochastic_does_not():
    """The classic result: w in bf16, updates of 1/8 ulp. RNE never moves w; SR moves
    it by the updates' sum in expectation (while the master-weight mode keeps exact sums)."""
    n, steps = 10_000, 20
    ulp = float(lowp.ulp(1.5, "bf16"))
    delta = ulp / 8  # lr * grad
    grad = np.full(n, delta / 0.5, np.float32)
    w_rne = [np.full(n, 1.5, np.float32)]
    w_sr = [np.full(n, 1.5, np.float32)]
    w_master = [np.full(n, 1.5, np.float32)]
    rne = SGD(w_rne, 0.5, weight_format="bf16", rounding="nearest_even", master_weights=False)
    sr = SGD(w_sr, 0.5, weight_format="bf16", rounding="stochastic", seed=0, master_weights=False)
    mst = SGD(w_master, 0.5, weight_format="bf16", rounding="nearest_even")
    assert 0.5 * float(grad[0]) < ulp / 2
    for _ in range(steps):
        rne.step([grad])
        sr.step([grad])
        mst.step([grad])
    np.testing.assert_array_equal(w_rne[0], 1.5)  # stalled: every update rounded away
    drift = 1.5 - w_sr[0].astype(np.float64)
    expected = steps * delta
    # Per weight the drift is a sum of Bernoulli ulps: mean over 10k weights is within
    # 16 standard deviations of the expectation (deterministic here: the seed is fixed).
    sd = math.sqrt(steps * (1 / 8) * (7 / 8)) * ulp / math.sqrt(n)
    assert abs(drift.mean() - expected) < 16 * sd
    np.testing.assert_array_equal(lowp.round(w_sr[0], "bf16"), w_sr[0])
    np.testing.assert_allclose(mst.master[0], 1.5 - expected, rtol=1e-6)
    np.testing.assert_array_equal(w_master[0], lowp.round(mst.master[0], "bf16"))


@settings(max_examples=60, deadline=None)
@given(lst.arrays("bfloat16", 16, allow_nan=False, allow_infinity=False),
       st.floats(1e-3, 1.0), st.integers(0, 2**32))
def test_no_master_update_is_one_rounding_of_the_exact_sum(w0, lr, seed):
    """Direct low-precision updates: each new weight is one of the two bf16 neighbours of
    w - lr*g computed exactly (RNE: the nearest one)."""
    w = [w0.astype(np.float32)]
    g = np.linspace(-2, 2, 16).astype(np.float32)
    opt = SGD(w, lr, weight_format="bf16", rounding="nearest_even", master_weights=False)
    exact = w0 - np.float64(np.float32(lr) * g)
    opt.step([g])
    np.testing.assert_array_equal(w[0], lowp.round(exact, "bf16", saturate=True))
    w2 = [w0.astype(np.float32)]
    SGD(w2, lr, weight_format="bf16", seed=seed, master_weights=False).step([g])
    lo = lowp.round(exact, "bf16", "down", saturate=True)
    hi = lowp.round(exact, "bf16", "up", saturate=True)
    assert np.all((w2[0] == lo) | (w2[0] == hi))


@pytest.mark.parametrize("make", [lambda p, **k: SGD(p, **k), lambda p, **k: Adam(p, **k)])
def test_optimizer_bad_input(make):
    ps = _params()
    with pytest.raises(ValueError, match="lr"):
        make(ps, lr=0.0)
    with pytest.raises(ValueError, match="lr"):
        make(ps, lr=-1.0)
    opt = make(ps, lr=0.1)
    with pytest.raises(ValueError, match="lr"):
        opt.lr = 0
    with pytest.raises(ValueError, match=r"grads\[0\]"):
        opt.step([np.zeros((4, 3), np.float32), np.zeros(4, np.float32)])
    with pytest.raises(ValueError, match="grads"):
        opt.step([np.zeros((3, 4), np.float32)])
    with pytest.raises(ValueError, match="rounding"):
        make(ps, lr=0.1, rounding="nearest")
    with pytest.raises(ValueError, match="weight_format"):
        make(ps, lr=0.1, weight_format="bf17")
    with pytest.raises(TypeError, match=r"params\[0\]"):
        make([np.zeros(3)], lr=0.1)


@pytest.mark.parametrize("make", [lambda p, **k: SGD(p, **k), lambda p, **k: Adam(p, **k)])
def test_optimizer_infinite_arguments(make):
    ps = _params()
    for kw, arg in ((dict(lr=math.inf), "lr"), (dict(lr=0.1, weight_decay=math.inf), "weight_decay")):
        with pytest.raises(ValueError, match=f"^{arg}: must be finite"):
            make(ps, **kw)
    with pytest.raises(ValueError, match="^eps: must be finite"):
        Adam(ps, 0.1, eps=math.inf)
    opt = make(ps, lr=0.1)
    with pytest.raises(ValueError, match="^lr: must be finite"):
        opt.lr = math.inf


@pytest.mark.parametrize("make", [lambda p, **k: SGD(p, momentum=0.9, **k), lambda p, **k: Adam(p, **k)])
@pytest.mark.parametrize("master", [True, False])
def test_a_step_that_cannot_be_written_changes_nothing(make, master):
    """A weight format without NaN cannot hold the update of a NaN (or infinite)
    gradient: the step raises before it changes the weights, the masters, the state
    or the step count."""
    f = lowp.FloatFormat(4, 3, nan=None)
    ps = [np.array([1.0, 2.0, -0.5], np.float32)]
    opt = make(ps, lr=0.125, weight_format=f, rounding="nearest_even", master_weights=master)
    opt.step([np.array([0.5, 0.5, 0.5], np.float32)])
    before = (ps[0].copy(), None if opt.master is None else opt.master[0].copy(), opt.steps)
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match=r"^grads\[0\]: has NaN or infinite values.*nothing was updated"):
            opt.step([np.array([0.5, bad, 0.5], np.float32)])
        np.testing.assert_array_equal(ps[0], before[0])
        if master:
            np.testing.assert_array_equal(opt.master[0], before[1])
        assert opt.steps == before[2]
    opt.step([np.array([0.5, 0.5, 0.5], np.float32)])
    assert opt.steps == 2
    # A format with NaN takes such a step.
    ps = [np.array([1.0, 2.0], np.float32)]
    SGD(ps, lr=0.1, weight_format="e4m3fn").step([np.array([np.nan, 1.0], np.float32)])
    assert np.isnan(ps[0][0])


@pytest.mark.parametrize("make", [lambda p, **k: SGD(p, momentum=0.9, **k), lambda p, **k: Adam(p, **k)])
@pytest.mark.parametrize("master", [True, False])
@pytest.mark.parametrize("fmt", [lowp.FloatFormat(4, 3, nan=None), "float4_e2m1fn"])
def test_an_update_that_overflows_float32_changes_nothing(make, master, fmt):
    """Finite gradients whose update overflows float32 (a float64 gradient past float32's
    range, or lr * g) cannot be written into a format without NaN either: refused like
    an infinite gradient, before the weights, masters, moments or step count change."""
    ps = [np.array([1.0, 0.5], np.float32), np.array([2.0], np.float32)]
    opt = make(ps, lr=0.125, weight_format=fmt, rounding="nearest_even", master_weights=master)
    opt.step([np.array([0.25, 0.25], np.float32), np.array([0.25], np.float32)])
    state = lambda: ([p.copy() for p in ps], None if opt.master is None else [m.copy() for m in opt.master],
                     opt.steps, [None if b is None else np.copy(b) for b in getattr(opt, "_buf", [])],
                     [np.copy(m) for m in getattr(opt, "_m", [])], [np.copy(v) for v in getattr(opt, "_v", [])])
    before = state()
    for grads in ([np.array([1e39, 0.5]), np.array([1.0], np.float32)],
                  [np.array([0.5, 0.5], np.float32), np.array([1e39])]):
        bad = 0 if grads[0].dtype == np.float64 else 1
        with pytest.raises(ValueError, match=rf"^grads\[{bad}\]: gives an update that overflows float32.*nothing was updated"):
            opt.step(grads)
        after = state()
        for u, v in zip(before, after):
            if isinstance(u, list):
                for x, y in zip(u, v):
                    np.testing.assert_array_equal(x, y)
            else:
                assert u == v
    # SGD's lr * g overflowing float32 with a float32 gradient: the same.
    o = SGD([np.array([1.0], np.float32)], 1e10, weight_format=fmt, rounding="nearest_even", master_weights=master)
    with pytest.raises(ValueError, match=r"^grads\[0\]: gives an update that overflows"):
        o.step([np.array([1e30], np.float32)])
    assert o.steps == 0


def test_adam_second_moment_does_not_overflow_before_its_value_does():
    """v += (1 - b2) * g * g is formed as ((1 - b2) * g) * g: |g| = 1e20 gives a finite
    v of about 1e37 (g * g first would be inf, freezing the weight for good)."""
    p = np.ones(2, np.float32)
    o = Adam([p], 0.01)
    o.step([np.array([1e20, 1.0], np.float32)])
    assert np.isfinite(o._v[0]).all()
    before = p.copy()
    o.step([np.array([1.0, 1.0], np.float32)])
    assert p[0] != before[0]


def test_sgd_and_adam_specific_bad_input():
    ps = _params()
    with pytest.raises(ValueError, match="momentum"):
        SGD(ps, 0.1, momentum=1.0)
    with pytest.raises(ValueError, match="weight_decay"):
        SGD(ps, 0.1, weight_decay=-1)
    with pytest.raises(ValueError, match="betas"):
        Adam(ps, 0.1, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="eps"):
        Adam(ps, 0.1, eps=0)


# -- Fp8Scaling ---------------------------------------------------------------------------------

def test_fp8_scaling_delayed_scale_and_history():
    s = Fp8Scaling("e4m3fn", margin=1, amax_history_len=3, amax_compute="max")
    assert s.scale == 1.0
    x = np.array([0.5, -2.0, 1.0], np.float32)
    q, used = s.quantize(x)
    assert used == 1.0  # delayed: the first cast uses the initial scale
    assert s.scale == 448.0 / (2.0 * 2)
    for amax in (4.0, 1.0, 0.5):
        s.record(amax)
    # History holds the last three: 4, 1, 0.5 -> max 4.
    np.testing.assert_array_equal(s.amax_history, [4.0, 1.0, 0.5])
    assert s.scale == 448.0 / (4.0 * 2)
    s.record(0.25)
    assert s.scale == 448.0 / (1.0 * 2)
    s.record(0.0)  # zeros: keep the scale from the last nonzero reference
    s.record(np.inf)  # not recorded
    np.testing.assert_array_equal(s.amax_history, [0.5, 0.25, 0.0])
    assert s.scale == 448.0 / (0.5 * 2)
    m = Fp8Scaling("e5m2", amax_history_len=4, amax_compute="most_recent")
    m.record(8.0)
    m.record(2.0)
    assert m.scale == 57344.0 / 2.0


@settings(max_examples=100, deadline=None)
@given(lst.arrays("float32", st.integers(1, 30), allow_nan=False, allow_infinity=False),
       st.sampled_from(["float8_e4m3fn", "float8_e5m2"]), st.floats(2.0**-20, 2.0**20))
def test_fp8_scaling_cast_clips_like_ml_dtypes(x, name, amax):
    """q = saturating cast of x*scale, checked against ml_dtypes on the clipped values."""
    s = Fp8Scaling(name)
    s.record(amax)
    scale = s.scale
    q, used = s.quantize(x)
    assert used == scale
    fmax = lowp.format(name).max
    y = np.clip(x.astype(np.float64) * scale, -fmax, fmax)
    expect = y.astype(getattr(ml_dtypes, name)).astype(np.float64)
    np.testing.assert_array_equal(q.astype(np.float64), expect)
    assert s.amax_history[-1] == np.max(np.abs(x))


def test_fp8_scaling_power_of_two_and_fake_quantize():
    s = Fp8Scaling("e4m3fn", power_of_two=True)
    s.record(3.0)
    assert s.scale == 128.0  # 448/3 = 149.3 -> 128
    x = np.array([0.1, 3.0, -1.7], np.float32)
    y = s.fake_quantize(x, update=False)
    q, sc = s.quantize(x, update=False)
    np.testing.assert_array_equal(y, q / np.float32(sc))


@pytest.mark.parametrize("kw,arg", [(dict(format="int8"), "format"), (dict(format="nope"), "format"),
                                    (dict(margin=-1), "margin"), (dict(margin=2000), "margin"),
                                    (dict(amax_history_len=0), "amax_history_len"),
                                    (dict(amax_compute="mean"), "amax_compute")])
def test_fp8_scaling_bad_input(kw, arg):
    with pytest.raises(ValueError, match=arg):
        Fp8Scaling(**kw)


# -- QuantConfig ----------------------------------------------------------------------------------

def test_presets():
    assert set(PRESETS) == {"fp32", "bf16", "fp16_mixed", "hfp8", "posit16"}
    fp32 = preset("fp32")
    assert (fp32.forward, fp32.backward, fp32.weights, fp32.accumulate) == (None, None, None, "float32")
    bf = preset("bf16")
    assert bf.forward == bf.backward == bf.weights == lowp.format("bf16") and bf.master_weights
    fp16 = preset("fp16_mixed")
    assert fp16.forward == lowp.format("fp16") and fp16.loss_scaling and fp16.master_weights
    h = QuantConfig.preset("hfp8")
    assert h.forward == lowp.format("e4m3fn") and h.backward == lowp.format("e5m2")
    assert h.accumulate == lowp.format("fp16") and h.chunk == 64 and h.weight_rounding == "stochastic"
    assert h.fp8_scaling and not h.master_weights
    p = preset("posit16")
    assert p.forward == lowp.format("posit16")
    assert preset("bf16", master_weights=False, name="x").name == "x"
    assert bf.replace(chunk=32).chunk == 32
    with pytest.raises(dataclasses_FrozenInstanceError()):
        bf.chunk = 3  # type: ignore[misc]


def dataclasses_FrozenInstanceError():
    import dataclasses

    return dataclasses.FrozenInstanceError


@pytest.mark.parametrize("kw,arg", [(dict(chunk=0), "chunk"), (dict(forward="nope"), "forward"),
                                    (dict(accumulate="bf17"), "accumulate"), (dict(rounding="up-ish"), "rounding"),
                                    (dict(weight_rounding="x"), "weight_rounding"),
                                    (dict(master_weights=False), "master_weights")])
def test_quant_config_bad_input(kw, arg):
    with pytest.raises(ValueError, match=arg):
        QuantConfig(**kw)


def test_unknown_preset():
    with pytest.raises(ValueError, match="name.*'fp32'"):
        preset("fp8")
    with pytest.raises(ValueError, match="name"):
        QuantConfig.preset("bf16x")


# -- LossScaler: unscale, then step; several groups; saved states --------------------------------

class _Recorder:
    def __init__(self):
        self.seen = []

    def step(self, grads):
        self.seen.append([g.copy() for g in grads])


def test_step_after_unscale_divides_once():
    """The clipping pattern (unscale, clip, step) must not divide twice."""
    s = LossScaler(init_scale=1024.0)
    g = [np.array([1024.0, -2048.0], np.float32)]
    assert s.unscale(g)
    g[0] *= np.float32(0.5)  # clipping in between
    opt = _Recorder()
    assert s.step(opt, g) is True
    np.testing.assert_array_equal(opt.seen[0][0], [0.5, -1.0])
    # The update cleared the record: the next step unscales again.
    s.step(opt, [np.array([1024.0], np.float32)])
    np.testing.assert_array_equal(opt.seen[1][0], [1.0])


def test_step_after_unscale_and_out_of_place_clipping_divides_once():
    """Clipping into new arrays (``g * c``) between unscale and step: step cannot tell
    such arrays from gradients not unscaled yet, and raises rather than guess; with
    unscaled=True it takes them as unscaled (divided once)."""
    p = [np.zeros(2, np.float32)]
    s = LossScaler(init_scale=4.0)
    g = [np.array([8.0, 40.0], np.float32)]
    assert s.unscale(g)
    g = [x * np.float32(0.5) for x in g]
    with pytest.raises(RuntimeError, match=r"^grads\[0\]: was not unscaled since the last update\(\).*unscaled=True"):
        s.step(SGD(p, 1.0), g)
    np.testing.assert_array_equal(p[0], [0.0, 0.0])
    assert s.step(SGD(p, 1.0), g, unscaled=True)
    np.testing.assert_array_equal(p[0], [-1.0, -5.0])


def test_step_after_a_partial_unscale_raises_rather_than_guess():
    """One group unscaled, another not: the second is not divided silently by step
    (nor a clipped copy divided twice)."""
    w1, w2 = np.zeros(2, np.float32), np.zeros(2, np.float32)
    s = LossScaler(init_scale=1024.0)
    g1, g2 = np.full(2, 1024.0, np.float32), np.full(2, 1024.0, np.float32)
    s.unscale([g1])
    with pytest.raises(RuntimeError, match=r"^grads\[1\]: was not unscaled"):
        s.step(SGD([w1, w2], 1.0, master_weights=False), [g1, g2])
    s.unscale([g2])
    assert s.step(SGD([w1, w2], 1.0, master_weights=False), [g1, g2])
    np.testing.assert_array_equal(w2, [-1.0, -1.0])
    with pytest.raises(TypeError, match="^unscaled: expected a bool"):
        s.step(SGD([w1], 1.0), [g1], unscaled="yes")


def test_a_refused_optimizer_step_clears_the_scalers_step():
    """The optimizer refusing a step (an update it cannot hold) propagates; the next
    step's fresh gradients are unscaled as usual (not taken as unscaled already)."""
    opt = SGD([np.zeros(2, np.float32)], 1.0, weight_format="float4_e2m1fn", rounding="nearest_even")
    s = LossScaler(init_scale=2.0)
    opt.master[0][...] = -3e38
    with pytest.raises(ValueError, match="overflows float32"):
        s.step(opt, [np.full(2, 3e38, np.float32)])
    assert s.scale == 2.0
    opt.master[0][...] = 0
    assert s.step(opt, [np.full(2, 2.0, np.float32)])
    np.testing.assert_array_equal(opt.master[0], [-1.0, -1.0])


def test_step_unscaled_true_checks_finiteness():
    p = [np.zeros(2, np.float32)]
    s = LossScaler(init_scale=4.0)
    assert not s.step(SGD(p, 1.0), [np.array([np.inf, 1.0], np.float32)], unscaled=True)
    assert s.scale == 2.0 and s.skipped_steps == 1
    g = [np.array([1.0, 2.0], np.float32)]
    assert s.step(SGD(p, 1.0), g, unscaled=True)
    np.testing.assert_array_equal(g[0], [1.0, 2.0])  # (not divided)


def test_loss_scaler_init_scale_below_min_scale_names_both():
    with pytest.raises(ValueError, match=r"^init_scale: 0.5 is below min_scale \(1\)"):
        LossScaler(init_scale=0.5)
    assert LossScaler(init_scale=0.5, min_scale=0.25).scale == 0.5


def test_unscaling_an_array_twice_between_updates_raises():
    s = LossScaler(init_scale=4.0)
    g = np.array([8.0], np.float32)
    s.unscale([g])
    with pytest.raises(RuntimeError, match="already unscaled"):
        s.unscale([g])
    np.testing.assert_array_equal(g, [2.0])
    s.update()
    s.unscale([g])  # a new step
    np.testing.assert_array_equal(g, [0.5])


def test_an_inf_in_any_unscaled_group_skips_the_step():
    s = LossScaler(init_scale=2.0)
    g1, g2 = np.array([np.inf], np.float32), np.array([4.0], np.float32)
    assert s.unscale([g1]) is False
    assert s.unscale([g2]) is True  # this group alone is finite
    opt = _Recorder()
    assert s.step(opt, [g1, g2]) is False  # both already unscaled: nothing divided again
    assert opt.seen == [] and s.scale == 1.0 and s.skipped_steps == 1
    np.testing.assert_array_equal(g2, [2.0])


def test_state_dict_round_trip_keeps_factors_and_checks_values():
    a = LossScaler(init_scale=64.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3, min_scale=2.0)
    a.update(True)
    a.update(False)
    b = LossScaler()
    b.load_state_dict(a.state_dict())
    assert (b.scale, b.growth_tracker, b.skipped_steps) == (16.0, 1, 1)
    assert (b.growth_factor, b.backoff_factor, b.growth_interval, b.min_scale) == (4.0, 0.25, 3, 2.0)
    # A state below min_scale would make the next backoff raise the scale.
    with pytest.raises(ValueError, match=r"state\['scale'\]"):
        LossScaler(init_scale=8.0, min_scale=4.0).load_state_dict({"scale": 1.0, "growth_tracker": 0})
    with pytest.raises(ValueError, match="growth_tracker"):
        LossScaler().load_state_dict({"scale": 1.0})
    before = LossScaler(init_scale=8.0)
    with pytest.raises(ValueError, match="growth_interval"):
        before.load_state_dict({"scale": 2.0, "growth_tracker": 0, "growth_interval": 0})
    assert before.scale == 8.0  # nothing changed


def test_tracker_past_the_interval_grows_at_the_next_clean_step():
    """A checkpoint from a longer interval: the scale still grows (it used to never again)."""
    s = LossScaler(init_scale=2.0, growth_interval=3)
    s.load_state_dict({"scale": 2.0, "growth_tracker": 5})
    s.update(False)
    assert s.scale == 4.0 and s.growth_tracker == 0
    for _ in range(3):
        s.update(False)
    assert s.scale == 8.0


# -- integer formats are refused where no scale exists --------------------------------------------

@pytest.mark.parametrize("field", ["forward", "backward", "weights", "accumulate"])
def test_quant_config_refuses_integer_formats(field):
    with pytest.raises(ValueError, match=field):
        QuantConfig(**{field: "int8"})


def test_optimizer_refuses_integer_weight_format():
    with pytest.raises(ValueError, match="weight_format"):
        SGD([np.ones(2, np.float32)], 0.1, weight_format="int8")


# -- a diverged weight stays visible in the working copy ------------------------------------------

@pytest.mark.parametrize("fmt,want", [("float16", np.inf), ("bf16", np.inf), ("e5m2", np.inf),
                                      ("e4m3fn", np.nan), ("posit16", np.nan)])
@pytest.mark.parametrize("master", [True, False])
def test_infinite_update_is_not_saturated_into_a_finite_weight(fmt, want, master):
    p = [np.ones(3, np.float32)]
    o = SGD(p, 1.0, weight_format=fmt, master_weights=master, seed=0)
    with np.errstate(over="ignore", invalid="ignore"):
        o.step([np.array([-np.inf, 1.0, -1e30], np.float32)])
    if np.isnan(want):
        assert np.isnan(p[0][0])
    else:
        assert p[0][0] == np.inf
    assert p[0][1] == 0.0
    # A finite update past the format's range still saturates, as documented.
    f = lowp.format(fmt)
    assert p[0][2] == (float(f.max) if f.max < 1e30 else pytest.approx(1e30, rel=2**-7))


# -- Fp8Scaling.record names its argument ---------------------------------------------------------

@pytest.mark.parametrize("bad,err", [("x", TypeError), (np.array([1.0, 2.0]), TypeError), (True, TypeError),
                                     (None, TypeError), (-1.0, ValueError)])
def test_fp8_record_rejects_bad_amax(bad, err):
    with pytest.raises(err, match="amax"):
        Fp8Scaling().record(bad)


def test_fp8_record_takes_numpy_and_lowp_scalars():
    s = Fp8Scaling(power_of_two=False)
    s.record(lowp.bfloat16(4.0))
    s.record(np.array(2.0))
    assert s.scale == 448.0 / 4.0


def test_fp8_scaling_rounds_the_exact_scaled_value_once():
    """float64 input is scaled and rounded once (no float32 step), and amaxes past
    float32's range are recorded; power-of-two scales are the largest not above."""
    from fractions import Fraction

    from _reference import FloatSpec, round_float

    f = Fp8Scaling("e4m3fn")
    q, _ = f.quantize(np.array([1 + 2.0**-4 + 2.0**-40]))
    assert q[0] == 1.125  # through float32 it was the tie 1.0625, to even: 1.0
    f.quantize(np.array([1e39]))
    assert f.scale == 448 / 1e39
    g = Fp8Scaling(power_of_two=True)
    g.record(0.0008544921875000001)  # 448 / amax is just below 2**19
    assert g.scale == 2.0**18
    rng = np.random.default_rng(3)
    x = rng.standard_normal(3000) * rng.choice([1e-3, 1.0, 1e3], 3000)
    spec = FloatSpec(4, 3, nan="fn")
    for amax in (3.7, 1 / 3, 1234.5):
        h = Fp8Scaling("e4m3fn")
        h.record(amax)
        s = h.scale
        q, used = h.quantize(x, update=False)
        assert used == s
        want = [round_float(Fraction(v) * Fraction(s), spec, "nearest_even", saturate=True) for v in x]
        np.testing.assert_array_equal(q, np.array(want, np.float32))


def test_loss_scaler_divides_each_gradient_once():
    p1, p2 = np.zeros(2, np.float32), np.zeros(2, np.float32)
    g = np.full(2, 4.0, np.float32)
    assert LossScaler(init_scale=2.0).step(SGD([p1, p2], 1.0), [g, g])  # tied: one array twice
    np.testing.assert_array_equal(p1, [-2, -2])
    np.testing.assert_array_equal(p2, [-2, -2])
    s = LossScaler(init_scale=2.0)
    h = np.array([4.0, 8.0], np.float32)
    s.unscale([h])
    with pytest.raises(RuntimeError, match="already unscaled"):
        s.unscale([h[:]])
    k = np.array([4.0, 8.0], np.float32)
    with pytest.raises(RuntimeError, match="shares memory"):
        LossScaler(init_scale=2.0).unscale([k, k[:1]])
    np.testing.assert_array_equal(k, [4, 8])  # nothing divided


def test_loss_scaler_reports_posit_overflow():
    """Posits saturate instead of overflowing: a quotient past the largest posit counts as
    an overflow, as an inf does for the float formats."""
    import lowp

    top = float(lowp.finfo("posit16").max)
    g = np.array([top], lowp.posit16)
    assert not LossScaler(init_scale=0.25, min_scale=0.125).unscale([g])
    assert LossScaler(init_scale=0.25, min_scale=0.125).unscale([np.array([top / 8], lowp.posit16)])


def test_weight_formats_wider_than_float32_are_refused():
    """Working copies are float32: a format float32 cannot hold would be rounded twice."""
    p = np.ones(4, np.float32)
    for fmt in ("posit32", "float64"):
        for master in (True, False):
            with pytest.raises(ValueError, match="^weight_format: the working copies are float32"):
                SGD([p], 0.1, weight_format=fmt, master_weights=master)
        with pytest.raises(ValueError, match="^weights: the working copies are float32"):
            QuantConfig(weights=fmt)
    with pytest.raises(ValueError, match="^fp8_scaling: "):
        QuantConfig(fp8_scaling=True)
    assert QuantConfig(fp8_scaling=True, forward="e4m3fn").fp8_scaling


def test_fp8_scaling_scalars_and_float64_extremes():
    from fractions import Fraction

    from _reference import FloatSpec, round_float

    fs = Fp8Scaling("e4m3fn")
    fs.record(3.3)
    q, s = fs.quantize(np.float32(0.3))  # 0-d input
    assert q.shape == () and float(q) == round_float(Fraction(float(np.float32(0.3))) * Fraction(s), FloatSpec(4, 3, nan="fn"), "nearest_even", saturate=True)
    spec = FloatSpec(4, 3, nan="fn")
    for amax, v in ((2e300, 1.785714285714286e300), (1.5e-300, 3.557477678571429e-303)):
        f = Fp8Scaling("e4m3fn")
        f.record(amax)
        q, s = f.quantize(np.array([v, -v]), update=False)
        want = round_float(Fraction(v) * Fraction(s), spec, "nearest_even", saturate=True)
        np.testing.assert_array_equal(q, [want, -want])


def test_loss_scaler_step_takes_a_generator_of_gradients():
    p = np.ones(2, np.float32)
    s = LossScaler(init_scale=4.0)
    g = np.array([4.0, 8.0], np.float32)
    assert s.step(SGD([p], 0.1), (t for t in [g]))
    np.testing.assert_array_equal(g, [1.0, 2.0])
    np.testing.assert_allclose(p, [0.9, 0.8], rtol=1e-6)


def test_loss_scaler_step_refused_by_the_optimizer_divides_nothing():
    s = LossScaler(init_scale=4.0)
    g = np.array([4.0, 8.0, 12.0], np.float32)
    with pytest.raises(ValueError, match=r"grads\[0\]: shape"):
        s.step(SGD([np.ones(2, np.float32)], 0.1), [g])
    np.testing.assert_array_equal(g, [4.0, 8.0, 12.0])
    with pytest.raises(ValueError, match="grads: got 2 arrays for 1"):
        s.step(SGD([np.ones(3, np.float32)], 0.1), [g, g.copy()])
    np.testing.assert_array_equal(g, [4.0, 8.0, 12.0])
    assert s.step(SGD([np.ones(3, np.float32)], 0.1), [g])  # nothing was left half-done


@pytest.mark.parametrize("master", [True, False])
def test_optimizers_refuse_a_parameter_passed_twice(master):
    p = np.ones(4, np.float32)
    for params in ([p, p], [p, p[:2]], [p[::2], p[1:3]]):
        with pytest.raises(ValueError, match=r"params\[1\]: shares memory with params\[0\]"):
            SGD(params, 0.1, weight_format="bf16", master_weights=master)
        with pytest.raises(ValueError, match=r"params\[1\]: shares memory"):
            Adam(params, weight_format="bf16", master_weights=master)
    SGD([p[::2], p[1::2]], 0.1, master_weights=master)  # interleaved, disjoint: fine


@pytest.mark.parametrize("fmt", ["bf16", "float16", "e5m2", "e4m3fn", "posit16"])
def test_infinite_weights_stay_visible_without_masters(fmt):
    f = lowp.format(fmt)
    ws = {}
    for master in (True, False):
        p = np.array([np.inf, -np.inf, 1.0], np.float32)
        SGD([p], 0.1, weight_format=fmt, master_weights=master)
        ws[master] = p
    np.testing.assert_array_equal(ws[False], ws[True])
    expect = lowp.round(np.array([np.inf, -np.inf], np.float32), f)
    np.testing.assert_array_equal(ws[False][:2], expect)
    assert ws[False][2] == 1.0


@pytest.mark.parametrize("make", [
    lambda v: LossScaler(init_scale=v), lambda v: LossScaler(min_scale=v), lambda v: SGD([np.ones(2, np.float32)], v),
    lambda v: SGD([np.ones(2, np.float32)], 0.1, weight_decay=v), lambda v: Adam([np.ones(2, np.float32)], eps=v)])
def test_huge_python_ints_are_refused_by_name(make):
    with pytest.raises(ValueError, match="must be finite, got an int of 1329 bits"):
        make(10**400)


def test_fp8_scaling_takes_a_huge_int_amax_as_infinite():
    s = Fp8Scaling()
    s.record(2.0)
    s.record(10**400)  # not recorded, as inf is not
    assert s.amax_history.tolist() == [2.0] and s.scale == 224.0
    with pytest.raises(ValueError, match="amax: an absolute maximum is >= 0"):
        s.record(-(10**400))


def test_quant_config_refuses_at_construction_what_the_model_would():
    with pytest.raises(ValueError, match="^chunk_accumulate: only meaningful together with chunk"):
        QuantConfig(chunk_accumulate="float64")
    QuantConfig(chunk=64, chunk_accumulate="float64")
    with pytest.raises(ValueError, match="forward: fp8_scaling scales casts into float formats"):
        QuantConfig(forward="posit8", fp8_scaling=True)
    with pytest.raises(ValueError, match="backward: fp8_scaling"):
        QuantConfig(forward="e4m3fn", backward="posit16", fp8_scaling=True)
    with pytest.raises(ValueError, match="margin: must be <= 127"):
        QuantConfig(forward="e4m3fn", fp8_scaling=True, margin=1000)
    c = QuantConfig(forward="bf16", loss_scaling=np.True_, fp8_scaling=np.False_)
    assert c.loss_scaling is True and c.fp8_scaling is False
    QuantConfig(forward="posit8")  # without fp8 scaling any real format goes


@pytest.mark.parametrize("bad", ["no", 0, 1, np.array([False, False]), None])
def test_boolean_arguments_take_bools_only(bad):
    """A truthy string or an array is not a bool: refused naming the argument, before
    anything is recorded."""
    f = Fp8Scaling()
    with pytest.raises(TypeError, match="^update: expected a bool"):
        f.quantize([3.0], update=bad)
    with pytest.raises(TypeError, match="^update: expected a bool"):
        f.fake_quantize([3.0], update=bad)
    assert f.amax_history.size == 0
    with pytest.raises(TypeError, match="^power_of_two: expected a bool"):
        Fp8Scaling(power_of_two=bad)
    with pytest.raises(TypeError, match="^master_weights: expected a bool"):
        SGD([np.ones(2, np.float32)], 0.1, master_weights=bad)


def test_fp8_scaling_refuses_complex_amax_and_array_amax_compute():
    f = Fp8Scaling()
    for bad in (np.complex128(3 + 4j), 3 + 4j, np.complex64(1)):
        with pytest.raises(TypeError, match="^amax: expected a real number"):
            f.record(bad)
    assert f.amax_history.size == 0
    with pytest.raises(ValueError, match="^amax_compute: expected one of"):
        Fp8Scaling(amax_compute=np.array(["max"]))


@pytest.mark.parametrize("bad", ["", b"", {}, {"a": np.ones(2, np.float32)}])
def test_unscale_refuses_strings_and_mappings(bad):
    with pytest.raises(TypeError, match="^grads: expected a sequence of numpy arrays"):
        LossScaler().unscale(bad)


# -- scaled casts of tiny tensors, float64 formats, no-master updates rounded once ----------------

def test_scaled_casts_of_tiny_tensors_are_not_zeroed():
    """With a wide format (bfloat16) the delayed scale passes 2**150, where 1/scale is 0 in
    float32: the casts came out all zero, the GEMM saw zeros."""
    from lowp.training import MLP, QuantConfig

    cfg = QuantConfig(forward="bfloat16", backward="bfloat16", fp8_scaling=True)
    m = MLP([4, 3], cfg, seed=0)
    X = np.full((2, 4), 1e-8, np.float32)
    Y = np.array([0, 1])
    m.grads(X, Y)
    m.grads(X, Y)
    assert m.x_scaling[0].scale > 2.0**149
    m.forward(X, training=True)
    xq = m._cache[0].xq
    np.testing.assert_array_equal(xq, m.x_scaling[0].fake_quantize(X, update=False))
    assert np.all(xq != 0) and np.allclose(xq, 1e-8, rtol=2.0**-7)


def test_scaling_into_formats_float32_cannot_hold_is_refused():
    from lowp.training import Fp8Scaling, QuantConfig

    with pytest.raises(ValueError, match="^format: scaled casts are float32"):
        Fp8Scaling("float64")
    with pytest.raises(ValueError, match="^forward: fp8_scaling's scaled casts are float32"):
        QuantConfig(forward="float64", fp8_scaling=True)
    with pytest.raises(ValueError, match="^backward: fp8_scaling's scaled casts are float32"):
        QuantConfig(forward="e4m3fn", backward=lowp.FloatFormat(11, 30), fp8_scaling=True)


def test_unknown_preset_of_an_mlp_names_config():
    from lowp.training import MLP

    with pytest.raises(ValueError, match="^config: unknown preset 'bogus'"):
        MLP([4, 3], config="bogus")


@pytest.mark.parametrize("mode", ["nearest_even", "toward_zero", "up", "down"])
def test_updates_without_masters_are_the_exact_value_rounded_once(mode):
    """w - lr * b rounded once from the exact value: lr*b was first rounded to float32 (lr
    itself too), and a product landing on a tie then tied to even."""
    from fractions import Fraction

    from _reference import FloatSpec, round_float

    g = np.random.default_rng(5)
    w0 = lowp.round(g.standard_normal(400).astype(np.float32), "bf16")
    b = (g.standard_normal(400) * 2.0 ** g.integers(-12, 2, 400)).astype(np.float32)
    b[0] = 1 + 2.0**-8 - 2.0**-23
    w0[0] = 0.0
    for lr in (1 + 2.0**-23, 0.1, 3e-3):
        w = w0.copy()
        SGD([w], lr, weight_format="bf16", rounding=mode, master_weights=False).step([b])
        exact = [Fraction(float(x)) - Fraction(lr) * Fraction(float(y)) for x, y in zip(w0, b)]
        want = np.array([round_float(e, FloatSpec(8, 7), mode) for e in exact], np.float32)
        np.testing.assert_array_equal(w, want)
    w = np.zeros(1, np.float32)
    SGD([w], 1 + 2.0**-23, weight_format="bf16", rounding="nearest_even", master_weights=False).step(
        [np.array([1 + 2.0**-8 - 2.0**-23], np.float32)])
    assert w[0] == -1.0078125


def test_learning_rates_lie_in_float32s_range_and_zero_steps_keep_negative_zero():
    for lr in (0.0, 1e-300, 1e301, 2.0**-150, float(np.finfo(np.float32).max) * 2):
        with pytest.raises(ValueError, match="^lr: must be"):
            SGD([np.zeros(1, np.float32)], lr)
    for lr in (2.0**-149, float(np.finfo(np.float32).max)):
        assert SGD([np.zeros(1, np.float32)], lr).lr == lr
    # A zero step leaves -0.0 as float arithmetic does, with or without masters.
    for master in (True, False):
        for make in (lambda p: SGD(p, 0.1, weight_format="bf16", master_weights=master),
                     lambda p: Adam(p, weight_format="bf16", master_weights=master)):
            w = np.array([-0.0, 1.0], np.float32)
            make([w]).step([np.zeros(2, np.float32)])
            assert np.signbit(w[0]) and w[1] == 1.0
    # The overflow point of float32's nearest-even rounding: its largest value plus half a step.
    bmax = float(lowp.finfo("bf16").max)
    w = np.array([-bmax], np.float32)
    SGD([w], 1.0, weight_format="bf16", rounding="nearest_even", master_weights=False).step(
        [np.array([1.3292087e36], np.float32)])
    assert w[0] == -bmax  # (-3.4028234764e38 rounds to float32's -max, saturated into bf16)
