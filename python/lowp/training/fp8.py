"""Per-tensor delayed scaling for fp8 casts."""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Optional

import numpy as np

from .._convert import _as_float_array, _mul_to_odd, round as _round
from .._formats import FloatFormat, Format, format as _format
from . import _checks

__all__ = ["Fp8Scaling"]

AMAX_COMPUTE = ("max", "most_recent")


def _times_to_odd(a: np.ndarray, s: float) -> np.ndarray:
    """``a * s`` rounded to odd in float64 (see ``_mul_to_odd``); products past float64's
    range saturate at its largest value, which every format's saturating cast clips the
    same way."""
    p = _mul_to_odd(a, s)
    over = np.isinf(p) & np.isfinite(a)
    if over.any():
        p[over] = np.copysign(np.finfo(np.float64).max, p[over])
    return p


class Fp8Scaling:
    """Delayed per-tensor scaling, as used for fp8 training (Transformer Engine's recipe).

    A tensor ``x`` is cast as ``q = round(x * scale, format, saturate=True)``: values past
    the format's largest finite value clip to it. The scale used for a cast comes from
    earlier casts only: ``scale = format.max / (amax * 2**margin)`` where ``amax`` is the
    largest ``|x|`` recorded over the last ``amax_history_len`` casts (``"max"``) or at the
    last one (``"most_recent"``). Before any amax is recorded the scale is 1; a history
    of zeros keeps the previous scale; non-finite amaxes are not recorded.
    ``power_of_two=True`` rounds the scale down to a power of two, so ``q / scale`` is
    exact: the scale is then a per-tensor exponent bias.

    ``q / scale`` approximates ``x``; :meth:`quantize` returns both.
    """

    def __init__(self, format: Any = "e4m3fn", margin: int = 0, amax_history_len: int = 16,
                 amax_compute: str = "max", *, power_of_two: bool = False) -> None:
        try:
            f = _format(format)
        except (TypeError, ValueError) as e:
            raise type(e)(f"format: {str(e).split(': ', 1)[-1]}") from None
        if not isinstance(f, FloatFormat):
            raise ValueError(f"format: expected a float format (e.g. 'e4m3fn', 'e5m2'), got {f!r}")
        if not f._fits_f32():
            # (Its scale, max / amax, and the scaled values are float32.)
            raise ValueError(f"format: scaled casts are float32, and {f!r} has values float32 cannot hold; "
                             f"accepted: float formats within float32 (e4m3fn, e5m2, float16, bfloat16, ...)")
        self.format: Format = f
        # (2**margin beyond float32's exponent range would leave no usable scale.)
        self.margin = _checks.integer(margin, "margin", ge=0, le=127)
        self.amax_history_len = _checks.integer(amax_history_len, "amax_history_len", ge=1, le=2**31 - 1)
        if not isinstance(amax_compute, str) or amax_compute not in AMAX_COMPUTE:
            raise ValueError(f"amax_compute: expected one of {', '.join(map(repr, AMAX_COMPUTE))}, got {amax_compute!r}")
        self.amax_compute = amax_compute
        self.power_of_two = _checks.boolean(power_of_two, "power_of_two")
        self._history: deque[float] = deque(maxlen=self.amax_history_len)
        self._scale = 1.0

    @property
    def scale(self) -> float:
        """The scale the next cast uses."""
        return self._scale

    @property
    def scale_inv(self) -> float:
        return 1.0 / self._scale

    @property
    def amax_history(self) -> np.ndarray:
        """Recorded amaxes, oldest first (at most ``amax_history_len``)."""
        return np.array(self._history, dtype=np.float64)

    def record(self, amax: float) -> None:
        """Record the amax of a cast and recompute the scale for the next one. A
        non-finite amax (an overflowed step) is not recorded."""
        try:
            if isinstance(amax, (str, bytes, bool, np.bool_, complex, np.complexfloating)) or np.ndim(amax) != 0:
                raise TypeError
            try:
                a = float(amax)
            except OverflowError:  # an int past float64's range: as an infinite amax
                a = -math.inf if amax < 0 else math.inf
        except (TypeError, ValueError):
            raise TypeError(f"amax: expected a real number, got {type(amax).__name__}") from None
        if a < 0:
            raise ValueError(f"amax: an absolute maximum is >= 0, got {a}")
        if not math.isfinite(a):
            return
        self._history.append(a)
        ref = max(self._history) if self.amax_compute == "max" else self._history[-1]
        if ref > 0:
            scale = self.format.max / (ref * 2.0**self.margin)
            if self.power_of_two and math.isfinite(scale) and scale > 0:
                # The largest power of two not above it, exactly (frexp: scale = m * 2**e,
                # 0.5 <= m < 1; log2 in floating point can round up near a power of two).
                scale = math.ldexp(1.0, math.frexp(scale)[1] - 1)
            if math.isfinite(scale) and scale > 0:
                self._scale = scale

    def quantize(self, x: Any, rounding: str = "nearest_even", *, seed: Any = None,
                 update: bool = True) -> tuple[np.ndarray, float]:
        """Cast ``x`` with the current scale: ``(q, scale)`` with ``q`` (float32, values of
        the format) ``= round(x * scale, saturate=True)``. With ``update`` the amax of ``x``
        is recorded afterwards (delayed scaling)."""
        update = _checks.boolean(update, "update")
        a = _as_float_array(x)
        scale = self._scale
        q = _round(_times_to_odd(a.astype(np.float64, copy=False), scale), self.format, rounding, saturate=True,
                   seed=seed).astype(np.float32)
        if update:
            self.record(float(np.max(np.abs(a))) if a.size else 0.0)
        return q, scale

    def fake_quantize(self, x: Any, rounding: str = "nearest_even", *, seed: Any = None,
                      update: bool = True) -> np.ndarray:
        """``q / scale`` from :meth:`quantize`, as float32."""
        q, s = self.quantize(x, rounding, seed=seed, update=update)
        return (q.astype(np.float64) / s).astype(np.float32)

    def __repr__(self) -> str:
        return (f"Fp8Scaling(format={self.format!r}, margin={self.margin}, amax_history_len={self.amax_history_len}, "
                f"amax_compute={self.amax_compute!r}, power_of_two={self.power_of_two}, scale={self._scale:g})")
