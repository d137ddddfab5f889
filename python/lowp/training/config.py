"""QuantConfig: which format and rounding every tensor of a training step uses."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import numpy as np

from .._formats import FloatFormat, Format
from . import _checks

__all__ = ["QuantConfig", "PRESETS", "preset"]

_ACC_NAMES = ("float32", "float64")

# What lowp.format accepts: a Format, a name, a numpy/lowp/ml_dtypes dtype or scalar type.
FormatLike = Union[str, Format, np.dtype, type]


@dataclasses.dataclass(frozen=True)
class QuantConfig:
    """Formats and roundings for a low-precision training step.

    - ``forward``: GEMM inputs of the forward pass (the layer input and the weights);
      None is float32 (no rounding).
    - ``backward``: gradients: the output gradient fed to the backward GEMMs, the
      activation and weight gradients they produce.
    - ``weights``: the stored weights (the optimizer's working copies).
    - ``output``: format GEMM results are rounded to (None: ``forward`` in the forward
      pass, ``backward`` in the backward pass), e.g. fp16 outputs of fp8 GEMMs.
    - ``accumulate``, ``chunk``, ``chunk_accumulate``, ``accumulate_rounding``: the GEMM
      accumulator, as ``lowp.matmul`` takes them.
    - ``rounding``: rounding of activations and gradients into their formats.
    - ``weight_rounding``: rounding of the working copies (stochastic: SR updates).
    - ``master_weights``: keep float32 master weights; False applies updates directly to
      the low-precision weights.
    - ``loss_scaling``: use a dynamic :class:`LossScaler`.
    - ``fp8_scaling``: cast GEMM inputs with per-tensor delayed scaling
      (:class:`Fp8Scaling`, ``margin`` and ``amax_history_len`` as there).
    """

    # Formats are given as anything lowp.format takes (a Format, a name such as "bf16",
    # a dtype) and stored as Formats (None: float32).
    forward: Optional[FormatLike] = None
    backward: Optional[FormatLike] = None
    weights: Optional[FormatLike] = None
    accumulate: FormatLike = "float32"
    chunk: Optional[int] = None
    chunk_accumulate: Optional[FormatLike] = None
    accumulate_rounding: str = "nearest_even"
    output: Optional[FormatLike] = None
    rounding: str = "nearest_even"
    weight_rounding: str = "stochastic"
    master_weights: bool = True
    loss_scaling: bool = False
    fp8_scaling: bool = False
    margin: int = 0
    amax_history_len: int = 16
    name: str = "custom"

    def __post_init__(self) -> None:
        s = object.__setattr__
        for field in ("forward", "backward", "output"):
            s(self, field, _checks.fmt_or_none(getattr(self, field), field))
        s(self, "weights", _checks.weight_format(self.weights, "weights"))
        s(self, "accumulate", _acc(self.accumulate, "accumulate"))
        if self.chunk_accumulate is not None:
            s(self, "chunk_accumulate", _acc(self.chunk_accumulate, "chunk_accumulate"))
        if self.chunk is not None:
            s(self, "chunk", _checks.integer(self.chunk, "chunk", ge=1))
        elif self.chunk_accumulate is not None:
            raise ValueError("chunk_accumulate: only meaningful together with chunk (the format each run of "
                             "chunk products is added into)")
        for field in ("accumulate_rounding", "rounding", "weight_rounding"):
            _checks.rounding(getattr(self, field), field)
        for field in ("master_weights", "loss_scaling", "fp8_scaling"):
            s(self, field, _checks.boolean(getattr(self, field), field))
        # (As Fp8Scaling takes it: 2**margin past float32's exponent range leaves no scale.)
        _checks.integer(self.margin, "margin", ge=0, le=127)
        _checks.integer(self.amax_history_len, "amax_history_len", ge=1, le=2**31 - 1)
        if not isinstance(self.name, str):
            raise TypeError(f"name: expected a str, got {type(self.name).__name__}")
        if not self.master_weights and self.weights is None:
            raise ValueError("master_weights: False needs a low-precision weights format (weights=None is float32)")
        if self.fp8_scaling and self.forward is None and self.backward is None:
            raise ValueError("fp8_scaling: scales the casts into forward and backward, which are both None (float32); "
                             "name their formats (e.g. forward='e4m3fn', backward='e5m2')")
        if self.fp8_scaling:
            for field in ("forward", "backward"):
                f = getattr(self, field)
                if f is not None and not isinstance(f, FloatFormat):
                    raise ValueError(f"{field}: fp8_scaling scales casts into float formats (e.g. 'e4m3fn', "
                                     f"'e5m2'), got {f!r}")
                if f is not None and not f._fits_f32():
                    raise ValueError(f"{field}: fp8_scaling's scaled casts are float32, and {f!r} has values "
                                     f"float32 cannot hold; accepted: float formats within float32")

    @classmethod
    def preset(cls, name: str, /, **changes: Any) -> "QuantConfig":
        """A named preset (see :data:`PRESETS`), optionally with some fields changed."""
        return preset(name, **changes)

    def replace(self, **changes: Any) -> "QuantConfig":
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def describe(self) -> str:
        """A one-line summary."""
        def n(f: Any) -> str:
            return "fp32" if f is None else (f if isinstance(f, str) else (f.name or repr(f)))

        parts = [f"fwd {n(self.forward)}", f"bwd {n(self.backward)}", f"w {n(self.weights)}",
                 f"acc {n(self.accumulate)}" + (f"/chunk {self.chunk}" if self.chunk else "")]
        if self.output is not None:
            parts.append(f"out {n(self.output)}")
        if self.weights is not None:
            parts.append(("master fp32" if self.master_weights else "no master") + f", {self.weight_rounding}")
        if self.loss_scaling:
            parts.append("loss scaling")
        if self.fp8_scaling:
            parts.append("delayed scaling")
        return ", ".join(parts)


def _acc(value: Any, name: str) -> Union[str, Format]:
    if isinstance(value, str) and value in _ACC_NAMES:
        return value
    f = _checks.real_format(value, name, "; or 'float32', 'float64'")
    if f.name in _ACC_NAMES:
        return f.name  # type: ignore[return-value]
    return f


def _presets() -> dict[str, dict[str, Any]]:
    return {
        # Plain float32 everywhere.
        "fp32": dict(),
        # bf16 tensors, float32 accumulation and masters (working copies rounded to nearest).
        "bf16": dict(forward="bfloat16", backward="bfloat16", weights="bfloat16", weight_rounding="nearest_even"),
        # fp16 tensors, float32 accumulation and masters, dynamic loss scaling (AMP).
        "fp16_mixed": dict(forward="float16", backward="float16", weights="float16", weight_rounding="nearest_even",
                           loss_scaling=True),
        # Hybrid fp8: E4M3 forward, E5M2 backward (both with delayed per-tensor scaling),
        # fp16 accumulation in chunks of 64, fp16 GEMM outputs, fp16 weights updated with
        # stochastic rounding and no float32 master.
        "hfp8": dict(forward="float8_e4m3fn", backward="float8_e5m2", weights="float16", output="float16",
                     accumulate="float16", chunk=64, weight_rounding="stochastic", master_weights=False,
                     fp8_scaling=True),
        # posit<16,2> tensors, float32 accumulation and masters.
        "posit16": dict(forward="posit16", backward="posit16", weights="posit16", weight_rounding="nearest_even"),
    }


#: Names of the presets, for :func:`preset`.
PRESETS = tuple(_presets())


def preset(name: str, /, **changes: Any) -> QuantConfig:
    """The preset ``name`` (one of :data:`PRESETS`) as a :class:`QuantConfig`; keyword
    arguments change fields."""
    table = _presets()
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"name: unknown preset {name!r}; accepted: {', '.join(map(repr, PRESETS))}")
    kw = dict(table[name], name=name)
    kw.update(changes)
    return QuantConfig(**kw)
