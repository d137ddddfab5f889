"""Dynamic loss scaling."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .._formats import PositFormat, format as _format
from . import _checks
from .optim import Optimizer

__all__ = ["LossScaler"]

_F32_MAX = float(np.finfo(np.float32).max)
_NATIVE_FLOATS = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.longdouble))


def _is_posit(dt: np.dtype) -> bool:
    try:
        return isinstance(_format(dt), PositFormat)
    except (TypeError, ValueError):
        return False


def _posit_max(dt: np.dtype) -> float:
    return float(_format(dt).max)


class LossScaler:
    """Dynamic loss scaling for training with narrow-range gradients (fp16, fp8).

    Multiply the loss (or its gradient) by :attr:`scale` before the backward pass; then
    :meth:`unscale` divides the gradients in place and reports whether all are finite.
    :meth:`update` adjusts the scale: on inf/NaN the step is skipped and the scale is
    multiplied by ``backoff_factor`` (never below ``min_scale``); after
    ``growth_interval`` consecutive clean steps it is multiplied by ``growth_factor``
    (unless that would overflow float32). The defaults are PyTorch AMP's GradScaler:
    start at 2**16, halve on overflow, double after 2000 clean steps.

    Typical step::

        loss, grads = model.grads(x, y, loss_scale=scaler.scale)
        if scaler.unscale(grads):
            optimizer.step(grads)
        scaler.update()            # uses what unscale found

    or simply ``scaler.step(optimizer, grads)``, which unscales ``grads`` first unless
    :meth:`unscale` was called since the last :meth:`update` (as PyTorch's
    ``GradScaler.step`` after ``unscale_``): then every array in ``grads`` must be one that
    was unscaled, so ``unscale``, clipping in place, then ``step`` divides once. Arrays
    that were not (clipped copies, or a group not unscaled yet) are ambiguous and raise
    RuntimeError: pass ``unscaled=True`` for gradients computed from unscaled ones, or
    unscale the group first. Unscaling the same array twice between updates raises
    RuntimeError.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, min_scale: float = 1.0) -> None:
        # (At most float32's largest value, as the scale never grows past it.)
        self._scale = _checks.number(init_scale, "init_scale", gt=0.0, le=_F32_MAX)
        self.growth_factor = _checks.number(growth_factor, "growth_factor", gt=1.0)
        self.backoff_factor = _checks.number(backoff_factor, "backoff_factor", gt=0.0, lt=1.0)
        self.growth_interval = _checks.integer(growth_interval, "growth_interval", ge=1)
        self.min_scale = _checks.number(min_scale, "min_scale", gt=0.0)
        if self.min_scale > self._scale:
            raise ValueError(f"init_scale: {self._scale:g} is below min_scale ({self.min_scale:g}); pass a "
                             f"min_scale no larger than init_scale")
        self._growth_tracker = 0
        self._found_inf: Optional[bool] = None
        self._unscaled: list[np.ndarray] = []  # unscaled since the last update (held: ids stay unique)
        self.skipped_steps = 0

    @property
    def scale(self) -> float:
        """The current loss scale."""
        return self._scale

    @property
    def growth_tracker(self) -> int:
        """Consecutive clean steps since the last change of scale."""
        return self._growth_tracker

    def scale_loss(self, loss: Any) -> Any:
        """``loss * scale``."""
        return loss * self._scale

    def unscale(self, grads: Sequence[np.ndarray]) -> bool:
        """Divide the float ``grads`` in place by the scale; True when every unscaled value
        is finite.

        ``grads`` are arrays of float16/32/64 or of a float or posit dtype of lowp or
        ml_dtypes. Each quotient is computed in float64 and rounded once into the
        gradients' dtype: exact division by a power-of-two scale (as with the default
        factors), where ``1/scale`` in float16 itself would underflow from 2**25 on.
        Finiteness is checked after the division, so a quotient that overflows the
        gradients' format (a scale below 1; for posits, past their largest value, where
        they saturate) is reported like an inf in the input. An array given twice (tied
        parameters) is divided once; distinct arrays sharing memory, or an array unscaled
        before since the last update, raise RuntimeError.
        """
        if isinstance(grads, np.ndarray):
            grads = [grads]
        given = _checks.array_list(grads, "grads")
        gs: list[np.ndarray] = []
        index: list[int] = []
        seen: set[int] = set()
        for i, g in enumerate(given):  # all checked before any is changed
            if not isinstance(g, np.ndarray) or not _checks.is_float_dtype(g.dtype):
                raise TypeError(f"grads[{i}]: expected a numpy array of {_checks.FLOAT_DTYPES}, got "
                                f"{getattr(g, 'dtype', type(g).__name__)}")
            if not g.flags.writeable:
                raise ValueError(f"grads[{i}]: must be writeable (unscaled in place)")
            if id(g) not in seen:  # (the same array again, tied parameters: divided once)
                seen.add(id(g))
                gs.append(g)
                index.append(i)
        clash = _checks.first_overlap([(u, -1) for u in self._unscaled] + list(zip(gs, index)))
        if clash is not None:
            i, j = clash
            if i < 0:
                raise RuntimeError(f"grads[{j}]: already unscaled since the last update(); dividing again "
                                   f"would scale it down twice")
            raise RuntimeError(f"grads[{j}]: shares memory with grads[{i}]; dividing both would scale the shared "
                               f"values down twice")
        finite = True
        scale = np.float64(self._scale)
        with np.errstate(over="ignore", invalid="ignore"):
            for g in gs:
                if g.dtype in _NATIVE_FLOATS:
                    np.divide(g, scale, out=g, casting="unsafe")
                    ok = bool(np.isfinite(g).all())
                else:  # decoded exactly into float64, the quotient rounded once on the way back
                    q = g.astype(np.float64) / scale
                    g[...] = q
                    # A posit saturates rather than overflowing: a quotient past its
                    # largest value is reported as an overflow all the same.
                    ok = bool(np.isfinite(g).all()) and not (_is_posit(g.dtype) and
                                                             (np.abs(q) > _posit_max(g.dtype)).any())
                finite = finite and ok
        self._unscaled.extend(gs)
        # Several groups may be unscaled before one update: an inf in any skips the step.
        self._found_inf = bool(self._found_inf) or not finite
        return finite

    def update(self, found_inf: Optional[bool] = None) -> None:
        """Adjust the scale after a step. ``found_inf`` defaults to what the last
        :meth:`unscale` found."""
        if found_inf is None:
            if self._found_inf is None:
                raise ValueError("found_inf: not given and unscale() has not been called since the last update")
            found_inf = self._found_inf
        elif not isinstance(found_inf, (bool, np.bool_)):
            raise TypeError(f"found_inf: expected a bool or None, got {type(found_inf).__name__}")
        self._found_inf = None
        self._unscaled = []
        if found_inf:
            self._scale = max(self._scale * self.backoff_factor, self.min_scale)
            self._growth_tracker = 0
            self.skipped_steps += 1
            return
        self._growth_tracker += 1
        if self._growth_tracker >= self.growth_interval:
            grown = self._scale * self.growth_factor
            if grown <= _F32_MAX:
                self._scale = grown
            self._growth_tracker = 0

    def step(self, optimizer: Any, grads: Sequence[np.ndarray], *, unscaled: Optional[bool] = None) -> bool:
        """Unscale ``grads``, let ``optimizer`` step when every gradient unscaled since the
        last :meth:`update` is finite, update the scale. Returns whether the step was taken.

        ``unscaled``: None (default) unscales ``grads`` unless :meth:`unscale` was called
        since the last update, in which case each array must be one it divided (else
        RuntimeError: ambiguous); True takes ``grads`` as unscaled (clipped copies of
        unscaled gradients); False unscales them all. When ``optimizer.step`` raises, the
        error propagates and this step's state is cleared (as by :meth:`update`, the scale
        unchanged): the gradients given stay unscaled, in place."""
        _checks.optimizer(optimizer)
        if unscaled is not None:
            unscaled = _checks.boolean(unscaled, "unscaled")
        if isinstance(grads, np.ndarray):
            grads = [grads]
        gs = _checks.array_list(grads, "grads")  # (once: grads may be an iterator)
        if isinstance(optimizer, Optimizer):
            # What the optimizer would refuse is refused before any gradient is divided.
            _checks.grads_list(gs, optimizer.params)
        if unscaled is None and self._found_inf is not None:
            for j, g in enumerate(gs):
                if not any(g is u for u in self._unscaled):
                    raise RuntimeError(f"grads[{j}]: was not unscaled since the last update(), while unscale() was "
                                       f"called: pass unscaled=True if these gradients are computed from unscaled "
                                       f"ones (clipped copies), or unscale() them first")
        elif unscaled is False or self._found_inf is None and not unscaled:
            self.unscale(gs)
        if self._found_inf is None:  # (unscaled=True with nothing unscaled: taken as finite if they are)
            self._found_inf = not all(bool(np.isfinite(np.asarray(g, np.float64)).all()) for g in gs)
        ok = not self._found_inf
        if ok:
            try:
                optimizer.step(gs)
            except BaseException:
                self._found_inf, self._unscaled = None, []
                raise
        self.update(not ok)
        return ok

    def state_dict(self) -> dict:
        """The scale, the counters and the factors, for :meth:`load_state_dict`."""
        return {"scale": self._scale, "growth_tracker": self._growth_tracker, "skipped_steps": self.skipped_steps,
                "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval, "min_scale": self.min_scale}

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` (factors absent from older states stay as they
        are). Everything is checked before anything changes; a growth tracker at or
        past the interval grows the scale at the next clean step."""
        if not isinstance(state, dict):
            raise TypeError(f"state: expected a dict from state_dict(), got {type(state).__name__}")
        for key in ("scale", "growth_tracker"):
            if key not in state:
                raise ValueError(f"state: missing {key!r}")
        gf = _checks.number(state.get("growth_factor", self.growth_factor), "state['growth_factor']", gt=1.0)
        bf = _checks.number(state.get("backoff_factor", self.backoff_factor), "state['backoff_factor']", gt=0.0, lt=1.0)
        gi = _checks.integer(state.get("growth_interval", self.growth_interval), "state['growth_interval']", ge=1)
        ms = _checks.number(state.get("min_scale", self.min_scale), "state['min_scale']", gt=0.0)
        scale = _checks.number(state["scale"], "state['scale']", ge=ms, le=_F32_MAX)
        tracker = _checks.integer(state["growth_tracker"], "state['growth_tracker']", ge=0)
        skipped = _checks.integer(state.get("skipped_steps", 0), "state['skipped_steps']", ge=0)
        self.growth_factor, self.backoff_factor, self.growth_interval, self.min_scale = gf, bf, gi, ms
        self._scale, self._growth_tracker, self.skipped_steps = scale, tracker, skipped
        self._found_inf, self._unscaled = None, []

    def __repr__(self) -> str:
        return (f"LossScaler(scale={self._scale:g}, growth_factor={self.growth_factor:g}, "
                f"backoff_factor={self.backoff_factor:g}, growth_interval={self.growth_interval}, "
                f"min_scale={self.min_scale:g})")
