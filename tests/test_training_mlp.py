"""lowp.training.MLP and its GEMM: gradients, per-config rounding, the lowp.matmul path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowp
from lowp.testing import strategies as lst
from lowp.training import MLP, PRESETS, QuantConfig, preset
from lowp.training import _gemm

needs_matmul = pytest.mark.skipif(not _gemm.matmul_available(), reason="lowp.matmul not built")


def data(n=40, d=12, k=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, d)).astype(np.float32), rng.integers(0, k, n)


def reference_grads(params, x, y):
    """Loss and gradients of a ReLU MLP with softmax cross-entropy, float64, by hand."""
    ws = [p.astype(np.float64) for p in params]
    hs = [x.astype(np.float64)]
    nl = len(ws) // 2
    for i in range(nl):
        z = hs[-1] @ ws[2 * i] + ws[2 * i + 1]
        hs.append(z if i == nl - 1 else np.maximum(z, 0))
    z = hs[-1]
    z = z - z.max(1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y]).mean()
    d = p.copy()
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    grads = [None] * len(ws)
    for i in reversed(range(nl)):
        grads[2 * i] = hs[i].T @ d
        grads[2 * i + 1] = d.sum(0)
        if i:
            d = (d @ ws[2 * i].T) * (hs[i] > 0)
    return loss, grads


@pytest.mark.parametrize("backend", ["numpy", pytest.param("lowp", marks=needs_matmul)])
def test_fp32_gradients_match_float64_reference(backend):
    x, y = data()
    m = MLP([12, 16, 8, 5], "fp32", seed=1, backend=backend)
    loss, g = m.grads(x, y)
    rl, rg = reference_grads(m.params, x, y)
    assert abs(loss - rl) < 1e-5
    for a, b in zip(g, rg):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    # And the reference against a central difference on one weight.
    w = m.params[0]
    i, j, h = 3, 2, 1e-3
    def f(v):
        ps = [p.astype(np.float64) for p in m.params]
        ps[0][i, j] = v
        return reference_grads(ps, x, y)[0]
    fd = (f(w[i, j] + h) - f(w[i, j] - h)) / (2 * h)
    assert abs(fd - rg[0][i, j]) < 1e-6


def test_loss_scale_scales_gradients():
    x, y = data()
    m = MLP([12, 16, 5], "fp32", seed=2)
    _, g1 = m.grads(x, y)
    _, g8 = m.grads(x, y, loss_scale=8.0)
    for a, b in zip(g1, g8):
        np.testing.assert_allclose(b, 8 * a, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", PRESETS)
def test_tensors_are_rounded_per_config(name):
    """Every GEMM operand holds values of its format, and the gradients hold values of
    the output/backward format."""
    cfg = preset(name)
    x, y = data()
    m = MLP([12, 16, 5], cfg, seed=3)
    seen = []
    real = _gemm.gemm

    def spy(a, b, **kw):
        seen.append((a.copy(), b.copy(), kw))
        return real(a, b, **kw)

    _gemm.gemm = spy
    import lowp.training.mlp as mlp_mod

    mlp_mod.gemm = spy
    try:
        opt = m.optimizer("sgd", 0.1, momentum=0.9, seed=0)
        scaler = m.loss_scaler()
        for _ in range(3):
            m.train_step(x, y, opt, scaler)
        _, grads = m.grads(x, y)
    finally:
        _gemm.gemm = real
        mlp_mod.gemm = real
    # 2 layers: forward 2 GEMMs, backward 3 (dW twice, dX once) per step, 4 grads passes.
    assert len(seen) == 4 * 5
    for a, b, kw in seen:
        assert kw["accumulate"] == cfg.accumulate and kw["chunk"] == cfg.chunk
    fwd, bwd = cfg.forward, cfg.backward
    out_b = cfg.output if cfg.output is not None else bwd
    if fwd is not None:
        # forward GEMMs: x @ W, both operands in the forward format (up to the
        # power-of-two per-tensor scale when fp8 scaling is on).
        for a, b, _ in seen[:2]:
            for t in (a, b):
                if cfg.fp8_scaling:
                    # Undo a power-of-two scale: bring the largest value into the top binade.
                    t = t.astype(np.float64) * 2.0 ** np.floor(np.log2(fwd.max / np.max(np.abs(t))))
                np.testing.assert_array_equal(lowp.round(t, fwd), t)
    if out_b is not None:
        for gi in grads:
            np.testing.assert_array_equal(lowp.round(gi, out_b), gi)
    if cfg.weights is not None:
        for p in m.params:
            np.testing.assert_array_equal(lowp.round(p, cfg.weights), p)


@needs_matmul
@pytest.mark.parametrize("name", ["hfp8", "bf16", "posit16"])
def test_lowp_matmul_path_equals_numpy_emulation(name):
    """With a format accumulator the emulation is bit-exact, so both backends agree
    exactly on the whole training step; with float32 accumulation they agree closely."""
    x, y = data(n=70, d=80)
    cfg = preset(name)
    if cfg.accumulate == "float32":
        cfg = cfg.replace(accumulate="bfloat16", chunk=16, chunk_accumulate="float32")
    a = MLP([80, 24, 5], cfg, seed=4, backend="lowp")
    b = MLP([80, 24, 5], cfg, seed=4, backend="numpy")
    la, ga = a.grads(x, y)
    lb, gb = b.grads(x, y)
    assert la == lb
    for u, v in zip(ga, gb):
        np.testing.assert_array_equal(u, v)


@needs_matmul
@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 150), st.integers(1, 6), st.sampled_from([None, 1, 7, 64]),
       st.sampled_from(["float16", "bfloat16", "float8_e5m2"]), st.data())
def test_gemm_emulation_matches_lowp_matmul(m, k, n, chunk, acc, data_):
    a = data_.draw(lst.arrays("float8_e4m3fn", (m, k), dtype=np.float32, allow_nan=False))
    b = data_.draw(lst.arrays("float16", (k, n), dtype=np.float32, allow_nan=False, allow_infinity=False))
    fmt = lowp.format(acc)
    want = np.asarray(lowp.matmul(a, b, accumulate=fmt, chunk=chunk, out_dtype=np.float32))
    got = _gemm.gemm(a, b, accumulate=fmt, chunk=chunk, backend="numpy")
    np.testing.assert_array_equal(got, want)


@settings(max_examples=200, deadline=None)
@given(st.one_of(lst.midpoints("float16"), lst.values("float32"), lst.values("float64", allow_nan=False)))
def test_numpy_fp16_cast_is_lowp_round(x):
    """The emulation's shortcut: NumPy's float64 -> float16 cast rounds like lowp.round."""
    a = np.array([x])
    with np.errstate(over="ignore"):
        fast = a.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(fast, lowp.round(a, "float16"))


def test_fp16_accumulation_swamps_and_chunks_help():
    """Adding 4096 ones into fp16 stops at 2048 (the next sum rounds back); chunks of 64
    keep every partial sum exact."""
    a = np.ones((1, 4096), np.float32)
    b = np.ones((4096, 1), np.float32)
    fp16 = lowp.format("float16")
    assert _gemm.gemm(a, b, accumulate=fp16, backend="numpy")[0, 0] == 2048
    assert _gemm.gemm(a, b, accumulate=fp16, chunk=64, backend="numpy")[0, 0] == 4096


def test_training_learns():
    from sklearn.datasets import load_digits

    d = load_digits()
    x = (d.data[:600] / 16).astype(np.float32)
    y = d.target[:600]
    m = MLP([64, 32, 10], "bf16", seed=0)
    opt = m.optimizer("sgd", 0.1, momentum=0.9, seed=0)
    before = m.evaluate(x, y)[1]
    for _ in range(3):
        for i in range(0, 600, 50):
            m.train_step(x[i:i + 50], y[i:i + 50], opt)
    acc, after = m.evaluate(x, y)
    assert after < before / 3 and acc > 0.85


def test_fp16_loss_scaler_skips_overflowing_steps():
    x, y = data()
    m = MLP([12, 16, 5], "fp16_mixed", seed=0)
    opt = m.optimizer("sgd", 0.1, seed=0)
    scaler = m.loss_scaler()
    scaler._scale = 2.0**40  # gradients overflow fp16
    w0 = [p.copy() for p in m.params]
    _, taken = m.train_step(x, y, opt, scaler)
    assert not taken and scaler.scale == 2.0**39
    for p, q in zip(m.params, w0):
        np.testing.assert_array_equal(p, q)


def test_mlp_bad_input():
    x, y = data()
    m = MLP([12, 16, 5])
    with pytest.raises(ValueError, match="x"):
        m.forward(np.zeros((3, 11), np.float32))
    with pytest.raises(ValueError, match="y"):
        m.grads(x, y[:-1])
    with pytest.raises(ValueError, match="y"):
        m.grads(x, y + 5)
    with pytest.raises(ValueError, match="^config: unknown preset"):
        MLP([12, 5], "fp9")
    with pytest.raises(ValueError, match="sizes"):
        MLP([12])
    with pytest.raises(ValueError, match=r"sizes\[1\]"):
        MLP([12, 0, 3])
    with pytest.raises(ValueError, match="backend"):
        MLP([12, 3], backend="gpu")
    with pytest.raises(ValueError, match="kind"):
        m.optimizer("rmsprop")
    with pytest.raises(ValueError, match="lr"):
        m.optimizer("sgd", lr=0)
    with pytest.raises(ValueError, match="loss_scale"):
        m.grads(x, y, loss_scale=0)
    with pytest.raises(TypeError, match="config"):
        MLP([12, 3], config=3)
    with pytest.raises(ValueError, match="b"):
        _gemm.gemm(np.zeros((2, 3), np.float32), np.zeros((4, 2), np.float32))


def test_inference_does_not_change_training_or_its_own_answers():
    """With stochastic rounding, forward/predict/evaluate draw from a stream of their own,
    started afresh each call: evaluating between steps leaves the trained weights as they
    would be without it, and an unchanged model gives the same logits every time."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 16)).astype(np.float32)
    y = rng.integers(0, 4, 32)
    cfg = QuantConfig(forward="bf16", backward="bf16", weights="bf16", rounding="stochastic", accumulate="bf16",
                      accumulate_rounding="stochastic")

    def train(look: bool) -> np.ndarray:
        m = MLP([16, 32, 4], cfg, seed=0)
        opt = m.optimizer("sgd", 0.05, seed=1)
        for _ in range(4):
            m.train_step(x, y, opt)
            if look:
                m.evaluate(x, y)
                m.predict(x)
                m.loss(x, y)
        return np.concatenate([p.ravel() for p in m.params])

    np.testing.assert_array_equal(train(False), train(True))
    m = MLP([16, 32, 4], cfg, seed=0)
    first = m.forward(x)
    np.testing.assert_array_equal(first, m.forward(x))


def _grads_state(m):
    hist = [s.amax_history.tolist() for s in (m.x_scaling or [])]
    return hist, [s.scale for s in (m.x_scaling or [])]


@pytest.mark.parametrize("bad_y, err", [(lambda y: y + 10, ValueError), (lambda y: y.astype(float), TypeError),
                                        (lambda y: y[:-1], ValueError)])
def test_a_refused_grads_call_leaves_the_model_as_it_was(bad_y, err):
    rng = np.random.default_rng(0)
    x = rng.random((8, 4)).astype(np.float32)
    y = np.arange(8) % 3
    for cfg in ("hfp8", QuantConfig(forward="bf16", backward="bf16", rounding="stochastic")):
        a, b = MLP([4, 5, 3], cfg, seed=0), MLP([4, 5, 3], cfg, seed=0)
        with pytest.raises(err, match="y: "):
            a.grads(x, bad_y(y))
        assert _grads_state(a) == _grads_state(b)
        for _ in range(2):
            ga, gb = a.grads(x, y)[1], b.grads(x, y)[1]
            assert all(np.array_equal(u, v) for u, v in zip(ga, gb))


def test_train_step_refuses_a_mismatched_optimizer_before_computing():
    rng = np.random.default_rng(0)
    x = rng.random((8, 4)).astype(np.float32)
    y = np.arange(8) % 3
    a, b = MLP([4, 5, 3], "hfp8", seed=0), MLP([4, 5, 3], "hfp8", seed=0)
    other = MLP([4, 6, 3], "hfp8", seed=0)
    with pytest.raises(ValueError, match="optimizer: its parameters' shapes"):
        a.train_step(x, y, other.optimizer())
    assert _grads_state(a) == _grads_state(b)
    oa, ob = a.optimizer(), b.optimizer()
    a.train_step(x, y, oa), b.train_step(x, y, ob)
    assert all(np.array_equal(u, v) for u, v in zip(a.params, b.params))


@needs_matmul
@pytest.mark.parametrize("rounding", ["toward_zero", "up", "down", "odd", "nearest_away"])
@pytest.mark.parametrize("chunk", [None, 16])
def test_gemm_emulation_rounds_float32_accumulation_as_asked(rounding, chunk):
    """accumulate="float32" with a rounding other than nearest even rounds every add
    (lowp.matmul does): the NumPy fallback emulates it rather than running BLAS."""
    rng = np.random.default_rng(0)
    a = lowp.round(rng.standard_normal((5, 70)).astype(np.float32), "bf16")
    b = lowp.round(rng.standard_normal((70, 6)).astype(np.float32), "bf16")
    want = _gemm.gemm(a, b, rounding=rounding, chunk=chunk, backend="lowp")
    assert not np.array_equal(want, _gemm.gemm(a, b, chunk=chunk, backend="lowp"))
    np.testing.assert_array_equal(_gemm.gemm(a, b, rounding=rounding, chunk=chunk, backend="numpy"), want)


def test_train_step_refuses_an_optimizer_over_another_models_params():
    x, y = data(4, 4, 3)
    a, b = MLP([4, 3], seed=0), MLP([4, 3], seed=1)
    before = [p.copy() for p in a.params] + [p.copy() for p in b.params]
    with pytest.raises(ValueError, match="^optimizer: updates other arrays than this model's params"):
        a.train_step(x, y, b.optimizer())
    for u, v in zip(before, a.params + b.params):
        np.testing.assert_array_equal(u, v)
    assert a.train_step(x, y, a.optimizer())[1]


def test_forward_training_flag_and_loss_scale_range():
    m = MLP([4, 3], QuantConfig(forward="e4m3fn", fp8_scaling=True), seed=0)
    x, y = data(4, 4, 3)
    with pytest.raises(TypeError, match="^training: expected a bool"):
        m.forward(x, training="no")
    assert all(s.amax_history.size == 0 for s in m.x_scaling)
    with pytest.raises(ValueError, match="^loss_scale: must be <="):
        m.grads(x, y, loss_scale=1e300)
    m.grads(x, y, loss_scale=float(np.finfo(np.float32).max))  # LossScaler's largest scale
