"""A small NumPy multilayer perceptron whose arithmetic follows a QuantConfig."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import numpy as np

from .._convert import round as _round
from .._formats import Format
from . import _checks
from ._gemm import BACKENDS, gemm
from .config import PRESETS, QuantConfig, preset
from .fp8 import Fp8Scaling
from .optim import SGD, Adam, Optimizer
from .scaler import LossScaler

__all__ = ["MLP"]


class _Cache:
    __slots__ = ("xq", "sx", "wq", "sw", "mask")

    def __init__(self, xq: np.ndarray, sx: float, wq: np.ndarray, sw: float, mask: Optional[np.ndarray]) -> None:
        self.xq, self.sx, self.wq, self.sw, self.mask = xq, sx, wq, sw, mask


class MLP:
    """Linear layers with ReLU between them and a softmax cross-entropy loss (float32).

    ``sizes``: layer widths, input first, number of classes last (e.g. ``[64, 128, 10]``).
    ``config``: a :class:`QuantConfig` or a preset name (None: fp32). Every matrix
    product, forward (``x @ W``) and backward (``x.T @ dz``, ``dz @ W.T``), runs through
    one function that calls ``lowp.matmul`` with the config's accumulator and chunk
    size, on operands rounded to the config's formats:

    - forward: the layer input and the weights are rounded to ``config.forward`` (with
      per-tensor delayed power-of-two scaling when ``config.fp8_scaling``), the product to
      ``config.output`` (default ``config.forward``), the bias added and the sum
      rounded again;
    - backward: the output gradient is rounded to ``config.backward`` (scaled likewise),
      the weight, bias and input gradients to ``config.output`` (default
      ``config.backward``);
    - the loss, its softmax and its gradient are float32.

    ``params`` (``[W1, b1, W2, b2, ...]``, float32, ``W`` of shape (in, out)) are the
    working copies an optimizer from :meth:`optimizer` updates in place.
    ``backend``: "auto" (``lowp.matmul`` when available), "lowp" or "numpy" (the
    emulation in :mod:`lowp.training._gemm`).
    """

    def __init__(self, sizes: Sequence[int], config: Union[None, str, QuantConfig] = None, *, seed: int = 0,
                 backend: str = "auto") -> None:
        try:
            sz = [_checks.integer(s, f"sizes[{i}]", ge=1) for i, s in enumerate(sizes)]
        except TypeError:
            raise TypeError(f"sizes: expected a sequence of ints, got {sizes!r}") from None
        if len(sz) < 2:
            raise ValueError(f"sizes: need at least an input and an output size, got {list(sizes)!r}")
        for i in range(len(sz) - 1):
            if sz[i] * sz[i + 1] >= 2**40:  # (a weight matrix of 4 TiB)
                raise ValueError(f"sizes: layer {i} would have {sz[i]} x {sz[i + 1]} weights; too many to allocate")
        if config is None:
            config = preset("fp32")
        elif isinstance(config, str):
            if config not in PRESETS:
                raise ValueError(f"config: unknown preset {config!r}; accepted: a QuantConfig, None or one of "
                                 f"{', '.join(map(repr, PRESETS))}")
            config = preset(config)
        elif not isinstance(config, QuantConfig):
            raise TypeError(f"config: expected a QuantConfig, a preset name or None, got {type(config).__name__}")
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
        self.sizes = sz
        self.config: QuantConfig = config
        self.backend = backend
        seed = _checks.integer(seed, "seed", ge=0)
        self._seeds = _checks.SeedStream(seed + 0x5EED)
        # Inference (forward without training, predict, evaluate) draws from a stream of
        # its own, started afresh on each call: looking at the model changes neither its
        # training nor its answers.
        self._eval_seed = seed + 0xE7A1
        rng = np.random.default_rng(seed)
        self.params: list[np.ndarray] = []
        for fan_in, fan_out in zip(sz[:-1], sz[1:]):
            # He initialisation for ReLU layers.
            w = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_in, fan_out)).astype(np.float32)
            self.params += [w, np.zeros(fan_out, np.float32)]
        nl = len(sz) - 1
        if config.fp8_scaling:
            # Power-of-two scales: q / scale is exact, so the GEMM sees the fp8 values at their
            # true magnitudes (a per-tensor exponent bias) and a narrow accumulator such as
            # fp16 does not overflow on values scaled up to the fp8 maximum.
            kw = dict(margin=config.margin, amax_history_len=config.amax_history_len, power_of_two=True)
            fwd = config.forward if config.forward is not None else "e4m3fn"
            bwd = config.backward if config.backward is not None else "e5m2"
            self.x_scaling: Optional[list[Fp8Scaling]] = [Fp8Scaling(fwd, **kw) for _ in range(nl)]
            self.w_scaling: Optional[list[Fp8Scaling]] = [Fp8Scaling(fwd, **kw) for _ in range(nl)]
            self.dy_scaling: Optional[list[Fp8Scaling]] = [Fp8Scaling(bwd, **kw) for _ in range(nl)]
        else:
            self.x_scaling = self.w_scaling = self.dy_scaling = None
        self._cache: list[_Cache] = []

    # -- pieces ----------------------------------------------------------------------

    @property
    def n_layers(self) -> int:
        return len(self.sizes) - 1

    def _seed(self, rounding: str, seeds: Optional[_checks.SeedStream]) -> Optional[int]:
        """The next seed of ``seeds`` (None: the training stream) for a stochastic rounding."""
        return (seeds or self._seeds).next() if rounding == "stochastic" else None

    def _cast(self, x: np.ndarray, fmt: Optional[Format], scaling: Optional[Fp8Scaling], update: bool,
              seeds: Optional[_checks.SeedStream] = None) -> tuple[np.ndarray, float]:
        """Round ``x`` to ``fmt`` (scaled when ``scaling``): ``(q, scale)``, ``x ~ q/scale``."""
        r = self.config.rounding
        if fmt is None:
            return x.astype(np.float32, copy=False), 1.0
        if scaling is not None:
            return scaling.fake_quantize(x, r, seed=self._seed(r, seeds), update=update), 1.0
        return _round(x.astype(np.float32, copy=False), fmt, r, seed=self._seed(r, seeds)), 1.0

    def _round(self, x: np.ndarray, fmt: Optional[Format], seeds: Optional[_checks.SeedStream] = None) -> np.ndarray:
        if fmt is None:
            return x.astype(np.float32, copy=False)
        r = self.config.rounding
        return _round(x.astype(np.float32, copy=False), fmt, r, seed=self._seed(r, seeds))

    def _gemm(self, a: np.ndarray, b: np.ndarray, scale: float, seeds: Optional[_checks.SeedStream] = None) -> np.ndarray:
        c = self.config
        acc_r = c.accumulate_rounding
        out = gemm(a, b, accumulate=c.accumulate, chunk=c.chunk, chunk_accumulate=c.chunk_accumulate,
                   rounding=acc_r, seed=self._seed(acc_r, seeds), backend=self.backend)
        if scale != 1.0:
            out = (out.astype(np.float64) * (1.0 / scale)).astype(np.float32)
        return out

    # -- forward and backward ----------------------------------------------------------

    def forward(self, x: Any, *, training: bool = False) -> np.ndarray:
        """Logits (float32) for inputs ``x`` of shape (batch, sizes[0]). ``training``
        keeps what the backward pass needs and updates the fp8 amax histories."""
        training = _checks.boolean(training, "training")
        h = self._inputs(x)
        return self._forward(h, training, None if training else _checks.SeedStream(self._eval_seed))

    def _inputs(self, x: Any) -> np.ndarray:
        h = _checks.real_array(x, "x")
        if h.ndim != 2 or h.shape[1] != self.sizes[0]:
            raise ValueError(f"x: expected shape (batch, {self.sizes[0]}), got {np.shape(x)}")
        return h

    def _forward(self, h: np.ndarray, training: bool, seeds: Optional[_checks.SeedStream]) -> np.ndarray:
        c = self.config
        out_fmt = c.output if c.output is not None else c.forward
        cache: list[_Cache] = []
        for layer in range(self.n_layers):
            w, b = self.params[2 * layer], self.params[2 * layer + 1]
            xs = self.x_scaling[layer] if self.x_scaling else None
            ws = self.w_scaling[layer] if self.w_scaling else None
            xq, sx = self._cast(h, c.forward, xs, training, seeds)
            wq, sw = self._cast(w, c.forward, ws, training, seeds)
            z = self._round(self._gemm(xq, wq, sx * sw, seeds), out_fmt, seeds)
            z = self._round(z + b, out_fmt, seeds)
            last = layer == self.n_layers - 1
            mask = None if last else z > 0
            # ReLU; a NaN passes through (as np.maximum does), so a diverged layer shows.
            h = z if last else np.where(mask | np.isnan(z), z, np.float32(0))
            if training:
                cache.append(_Cache(xq, sx, wq, sw, mask))
        if training:
            self._cache = cache
        return h

    @staticmethod
    def _labels(y: Any, n: int, classes: int) -> np.ndarray:
        ya = np.asarray(y)
        if ya.shape != (n,):
            raise ValueError(f"y: expected shape ({n},) to match x, got {ya.shape}")
        if ya.dtype.kind not in "iu":
            raise TypeError(f"y: expected integer class labels, got dtype {ya.dtype}")
        if n and (ya.min() < 0 or ya.max() >= classes):
            raise ValueError(f"y: labels must be in [0, {classes}), got range [{ya.min()}, {ya.max()}]")
        return ya.astype(np.intp)

    @staticmethod
    def _softmax_xent(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean cross-entropy and softmax probabilities (float32)."""
        z = logits.astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            z = z - z.max(axis=1, keepdims=True)  # (inf - inf in a diverged row: NaN, no warning)
            e = np.exp(z)
            p = e / e.sum(axis=1, keepdims=True)
            logp = z - np.log(e.sum(axis=1, keepdims=True))
        loss = float(-logp[np.arange(len(y)), y].mean()) if len(y) else 0.0
        return loss, p.astype(np.float32)

    def loss(self, x: Any, y: Any) -> float:
        """Mean softmax cross-entropy on (x, y)."""
        logits = self.forward(x)
        return self._softmax_xent(logits, self._labels(y, logits.shape[0], self.sizes[-1]))[0]

    def grads(self, x: Any, y: Any, *, loss_scale: float = 1.0) -> tuple[float, list[np.ndarray]]:
        """``(loss, grads)``: the mean loss and the gradients of ``loss * loss_scale`` with
        respect to ``params`` (same order and shapes), computed per the config."""
        # (At most float32's largest value, as LossScaler's scale.)
        scale = _checks.number(loss_scale, "loss_scale", gt=0.0, le=float(np.finfo(np.float32).max))
        # Every argument is checked before the forward pass, which records fp8 amaxes and
        # draws rounding seeds: a refused call leaves the model as it was.
        h = self._inputs(x)
        n = h.shape[0]
        yy = self._labels(y, n, self.sizes[-1])
        logits = self._forward(h, True, None)
        loss, p = self._softmax_xent(logits, yy)
        dz = p
        dz[np.arange(n), yy] -= 1.0
        dz = (dz * np.float32(scale / max(n, 1))).astype(np.float32)
        c = self.config
        out_fmt = c.output if c.output is not None else c.backward
        grads: list[np.ndarray] = [None] * len(self.params)  # type: ignore[list-item]
        for layer in reversed(range(self.n_layers)):
            ch = self._cache[layer]
            ds = self.dy_scaling[layer] if self.dy_scaling else None
            dq, sd = self._cast(dz, c.backward, ds, True)
            grads[2 * layer] = self._round(self._gemm(ch.xq.T, dq, ch.sx * sd), out_fmt)
            grads[2 * layer + 1] = self._round(dz.sum(axis=0, dtype=np.float32), out_fmt)
            if layer:
                dh = self._round(self._gemm(dq, ch.wq.T, sd * ch.sw), out_fmt)
                prev = self._cache[layer - 1].mask
                assert prev is not None
                dz = np.where(prev, dh, np.float32(0))
        self._cache = []
        return loss, grads

    # -- training ------------------------------------------------------------------------

    def optimizer(self, kind: str = "sgd", lr: float = 0.1, *, seed: Any = 0, **kwargs: Any) -> Optimizer:
        """An SGD or Adam optimizer over ``params`` with the config's weight format,
        weight rounding and master-weight choice (``kwargs``: momentum, weight_decay,
        betas, eps)."""
        c = self.config
        common = dict(weight_format=c.weights, rounding=c.weight_rounding, seed=seed, master_weights=c.master_weights)
        if kind == "sgd":
            return SGD(self.params, lr, **kwargs, **common)
        if kind == "adam":
            return Adam(self.params, lr, **kwargs, **common)
        raise ValueError(f"kind: expected 'sgd' or 'adam', got {kind!r}")

    def loss_scaler(self) -> Optional[LossScaler]:
        """A LossScaler when the config asks for loss scaling, else None."""
        return LossScaler() if self.config.loss_scaling else None

    def train_step(self, x: Any, y: Any, optimizer: Optimizer, scaler: Optional[LossScaler] = None) -> tuple[float, bool]:
        """One step on the batch (x, y): ``(loss, step_taken)``. With a scaler the step is
        skipped when the scaled gradients overflow."""
        _checks.optimizer(optimizer)
        if scaler is not None and not isinstance(scaler, LossScaler):
            raise TypeError(f"scaler: expected a LossScaler or None, got {type(scaler).__name__}")
        if isinstance(optimizer, Optimizer):
            # Refused before the gradients are computed (which changes the model's state).
            shapes = [p.shape for p in self.params]
            if [p.shape for p in optimizer.params] != shapes:
                raise ValueError(f"optimizer: its parameters' shapes {[p.shape for p in optimizer.params]} do not "
                                 f"match the model's {shapes}; build it with model.optimizer()")
            if not all(o is p for o, p in zip(optimizer.params, self.params)):
                raise ValueError("optimizer: updates other arrays than this model's params (another model's?); "
                                 "build it with model.optimizer()")
        if scaler is None:
            loss, g = self.grads(x, y)
            if not all(np.isfinite(gi).all() for gi in g):
                return loss, False
            optimizer.step(g)
            return loss, True
        loss, g = self.grads(x, y, loss_scale=scaler.scale)
        return loss, scaler.step(optimizer, g)

    def predict(self, x: Any) -> np.ndarray:
        """Predicted class per row of ``x``."""
        return np.argmax(self.forward(x), axis=1)

    def evaluate(self, x: Any, y: Any) -> tuple[float, float]:
        """``(accuracy, mean loss)`` on (x, y)."""
        logits = self.forward(x)
        yy = self._labels(y, logits.shape[0], self.sizes[-1])
        loss, _ = self._softmax_xent(logits, yy)
        return float(np.mean(np.argmax(logits, axis=1) == yy)) if len(yy) else 0.0, loss

    def __repr__(self) -> str:
        return f"MLP(sizes={self.sizes}, config={self.config.name!r})"
