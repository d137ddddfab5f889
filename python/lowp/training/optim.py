"""SGD and Adam with float32 master weights and low-precision working copies.

The model computes with the *working copies*: the float32 arrays passed as ``params``,
which the optimizer keeps holding values of ``weight_format``. Two ways to update them:

- ``master_weights=True`` (default): the optimizer keeps a float32 master copy of every
  parameter, applies each update to it, and then rounds the master into the working
  copy with ``rounding`` (stochastic by default, reproducible with ``seed``). Small
  updates accumulate in the master, so nothing is lost.
- ``master_weights=False``: no master; each update is applied to the low-precision
  weights directly, ``w <- round(w - lr * update, weight_format, rounding)``: the exact
  value of ``w - lr * update`` (``lr`` as given, a float64; ``update`` the float32 step
  of the optimizer's state, the momentum buffer or Adam's ``m / denom``) rounded once.
  With round-to-nearest an update smaller than half
  an ulp of ``w`` is lost every time (training stalls); stochastic rounding moves ``w``
  by an ulp with probability ``|update| / ulp``, so the expected step is the update.

Optimizer state (momentum, Adam moments) is float32.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Optional, Sequence

import numpy as np

from .._convert import _add_to_odd, _two_product, _two_sum, round as _round
from .._formats import Format, _has_nan
from . import _checks

__all__ = ["SGD", "Adam", "Optimizer"]


class Optimizer:
    """Base of :class:`SGD` and :class:`Adam`: parameters, master copies and rounding."""

    def __init__(self, params: Any, lr: float, *, weight_format: Any = None, rounding: str = "stochastic",
                 seed: Any = None, master_weights: bool = True) -> None:
        self.params = _checks.params_list(params)
        self.lr = lr
        self.weight_format: Optional[Format] = _checks.weight_format(weight_format, "weight_format")
        self.rounding = _checks.rounding(rounding)
        self.master_weights = _checks.boolean(master_weights, "master_weights")
        self._seeds = _checks.SeedStream(seed)
        self.steps = 0
        if self.master_weights:
            self.master: Optional[list[np.ndarray]] = [p.astype(np.float32, copy=True) for p in self.params]
            self._write_working_copies()
        else:
            self.master = None
            # The working copies must hold values of the format to begin with.
            if self.weight_format is not None:
                for p in self.params:
                    p[...] = self._rounded(p, "nearest_even")

    @property
    def lr(self) -> float:
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        # Within float32's positive range (a float32 optimizer's learning rate), where the
        # exact products of the updates without masters stay clear of float64's ends.
        self._lr = _checks.number(value, "lr", ge=2.0**-149, le=float(np.finfo(np.float32).max))

    def _seed(self) -> Optional[int]:
        return self._seeds.next() if self.rounding == "stochastic" else None

    def _write_working_copies(self) -> None:
        assert self.master is not None
        for p, m in zip(self.params, self.master):
            if self.weight_format is None:
                p[...] = m
            else:
                p[...] = self._rounded(m)

    def _rounded(self, x: np.ndarray, rounding: Optional[str] = None) -> np.ndarray:
        """``x`` rounded into the weight format (with ``rounding``, default the
        optimizer's): finite values saturate at its largest value; an infinite ``x`` (a
        diverged weight) stays visible as the format's infinity, or NaN where it has none."""
        assert self.weight_format is not None
        seed = self._seed() if rounding is None else None
        r = _round(x, self.weight_format, rounding or self.rounding, saturate=True, seed=seed)
        inf = np.isinf(x)
        if inf.any() and _has_nan(self.weight_format):
            r[inf] = _round(x[inf], self.weight_format, "nearest_even")
        return r

    def _new_value(self, i: int, factor: float, direction: np.ndarray) -> np.ndarray:
        """``param_i - factor * direction``: the new master (float32 arithmetic, as a
        float32 optimizer's), or without masters the new weights before rounding: the
        exact value rounded to odd in float64, so that rounding it into the weight format
        (at most 24 bits) rounds the exact value once. (The product is exact as two
        float64s, and the difference is formed as Boldo and Melquiond's FMA emulation
        with rounding to odd forms ``y + a*x``.)"""
        if self.master is not None:
            return self.master[i] - np.float32(factor) * direction
        p = self.params[i]
        if self.weight_format is None:
            return p - np.float32(factor) * direction
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            ph, pl = _two_product(np.float64(factor), direction.astype(np.float64))
            th, tl = _two_sum(p.astype(np.float64), -ph)
            v = _add_to_odd(th, _add_to_odd(tl, -pl))
            # (An infinite or NaN step, or a zero one: as float arithmetic has it, -0 kept.)
            v = np.where(np.isfinite(ph) & (ph != 0), v, th)
            # Where float32's nearest-even rounding overflows (its largest value plus half a
            # step, 2^128 - 2^103): an overflow, as with masters (a diverged weight).
            return np.where(np.abs(v) >= 2.0**128 - 2.0**103, np.copysign(np.inf, v), v)

    def _apply(self, i: int, new: np.ndarray) -> None:
        if self.master is not None:
            self.master[i][...] = new
        elif self.weight_format is None:
            self.params[i][...] = new
        else:
            self.params[i][...] = self._rounded(new)

    def step(self, grads: Sequence[np.ndarray]) -> None:
        """Apply one update from ``grads`` (one float array per parameter, same shapes).

        Into a weight format without NaN (which cannot show a diverged weight), a
        gradient or an update that is not finite (an overflow in float32) raises
        ValueError, and nothing is changed: weights, masters, optimizer state, ``steps``.
        """
        gs = _checks.grads_list(grads, self.params)
        strict = self.weight_format is not None and not _has_nan(self.weight_format)
        if strict:
            for i, g in enumerate(gs):
                if not np.isfinite(g).all():
                    raise ValueError(f"grads[{i}]: has NaN or infinite values, whose update {self.weight_format!r} "
                                     f"(weight_format) cannot hold; nothing was updated")
        # Every update is computed before anything changes (state included).
        news, states = [], []
        for i, g in enumerate(gs):
            with np.errstate(over="ignore", invalid="ignore") if strict else contextlib.nullcontext():
                factor, direction, state = self._update(i, g.astype(np.float32, copy=False), self.steps + 1)
                new = self._new_value(i, factor, direction)
            if strict and not np.isfinite(new).all():
                raise ValueError(f"grads[{i}]: gives an update that overflows float32 (to inf or NaN), which "
                                 f"{self.weight_format!r} (weight_format) cannot hold; nothing was updated")
            news.append(new)
            states.append(state)
        self.steps += 1
        for i, (new, state) in enumerate(zip(news, states)):
            self._commit(i, state)
            self._apply(i, new)
        if self.master is not None:
            self._write_working_copies()

    def _update(self, i: int, g: np.ndarray, t: int) -> tuple[float, np.ndarray, Any]:  # pragma: no cover - abstract
        """The update of step ``t`` as ``(factor, direction)``, the parameter moving by
        ``-factor * direction`` (the learning rate, and the float32 step), and the
        optimizer's new state for parameter ``i``, without changing anything."""
        raise NotImplementedError

    def _commit(self, i: int, state: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class SGD(Optimizer):
    """Stochastic gradient descent with momentum and L2 weight decay (PyTorch's form:
    ``b <- momentum*b + (g + weight_decay*w)``, ``w <- w - lr*b``).

    ``weight_format``: the format of the working copies (None: float32); ``rounding``:
    how they are rounded (stochastic by default); ``seed``: makes stochastic rounding
    reproducible; ``master_weights``: keep float32 masters (see the module docs).
    """

    def __init__(self, params: Any, lr: float, momentum: float = 0.0, weight_decay: float = 0.0, *,
                 weight_format: Any = None, rounding: str = "stochastic", seed: Any = None,
                 master_weights: bool = True) -> None:
        self.momentum = _checks.number(momentum, "momentum", ge=0.0, lt=1.0)
        self.weight_decay = _checks.number(weight_decay, "weight_decay", ge=0.0)
        super().__init__(params, lr, weight_format=weight_format, rounding=rounding, seed=seed,
                         master_weights=master_weights)
        self._buf: list[Optional[np.ndarray]] = [None] * len(self.params)

    def _update(self, i: int, g: np.ndarray, t: int) -> tuple[float, np.ndarray, Any]:
        w = self.master[i] if self.master is not None else self.params[i]
        if self.weight_decay:
            g = g + np.float32(self.weight_decay) * w
        b = None
        if self.momentum:
            prev = self._buf[i]
            b = g.astype(np.float32, copy=True) if prev is None else np.float32(self.momentum) * prev + g
            g = b
        return self.lr, g, b

    def _commit(self, i: int, state: Any) -> None:
        self._buf[i] = state

    def __repr__(self) -> str:
        return (f"SGD(lr={self.lr:g}, momentum={self.momentum:g}, weight_decay={self.weight_decay:g}, "
                f"weight_format={self.weight_format!r}, rounding={self.rounding!r}, master_weights={self.master_weights})")


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction and L2 weight decay added to the gradient.

    Keyword arguments after ``*`` as for :class:`SGD`.
    """

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, weight_format: Any = None, rounding: str = "stochastic",
                 seed: Any = None, master_weights: bool = True) -> None:
        try:
            b1, b2 = betas
        except (TypeError, ValueError):
            raise ValueError(f"betas: expected a pair of numbers, got {betas!r}") from None
        self.betas = (_checks.number(b1, "betas[0]", ge=0.0, lt=1.0), _checks.number(b2, "betas[1]", ge=0.0, lt=1.0))
        self.eps = _checks.number(eps, "eps", gt=0.0)
        self.weight_decay = _checks.number(weight_decay, "weight_decay", ge=0.0)
        super().__init__(params, lr, weight_format=weight_format, rounding=rounding, seed=seed,
                         master_weights=master_weights)
        self._m = [np.zeros_like(p) for p in self.params]
        self._v = [np.zeros_like(p) for p in self.params]

    def _update(self, i: int, g: np.ndarray, t: int) -> tuple[float, np.ndarray, Any]:
        w = self.master[i] if self.master is not None else self.params[i]
        if self.weight_decay:
            g = g + np.float32(self.weight_decay) * w
        b1, b2 = self.betas
        m = np.float32(b1) * self._m[i] + np.float32(1 - b1) * g
        # ((1 - b2) * g) * g: g*g first would overflow float32 from |g| of about 1.8e19.
        v = np.float32(b2) * self._v[i] + (np.float32(1 - b2) * g) * g
        # PyTorch's order: sqrt(v) / sqrt(1 - b2**t), as v / (1 - b2**t) could overflow.
        denom = np.sqrt(v) / np.float32(math.sqrt(1 - b2**t)) + np.float32(self.eps)
        return self.lr / (1 - b1**t), (m / denom).astype(np.float32), (m, v)

    def _commit(self, i: int, state: Any) -> None:
        self._m[i], self._v[i] = state

    def __repr__(self) -> str:
        return (f"Adam(lr={self.lr:g}, betas={self.betas}, eps={self.eps:g}, weight_decay={self.weight_decay:g}, "
                f"weight_format={self.weight_format!r}, rounding={self.rounding!r}, master_weights={self.master_weights})")
