"""Integer quantization: scales and zero points, per tensor or per axis."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Optional, Union

import numpy as np

from . import _lowp
from ._args import boolean
from ._convert import (SeedLike, _add_to_odd, _as_float_array, _check_rounding, _div_to_odd, _mul_to_odd, _round_exact,
                       _seed_word)
from ._formats import _NAMED, IntFormat, _code_format, format as _format

__all__ = ["quantize", "QuantizedArray"]

_F32_TINY = float(np.finfo(np.float32).tiny)  # smallest normal
_F32_TINIEST = float(np.finfo(np.float32).smallest_subnormal)
_F32_MAX = float(np.finfo(np.float32).max)


class QuantizedArray:
    """Integer values with the scale and zero point that map them back to reals:
    ``real = (values - zero_point) * scale``, per tensor or along ``axis``."""

    __slots__ = ("values", "scale", "zero_point", "axis", "format")

    def __init__(self, values: np.ndarray, scale: Any, zero_point: Any, axis: Optional[int], fmt: Any) -> None:
        if isinstance(values, np.ndarray) and values.dtype.kind == "V" and isinstance(_code_format(values.dtype), IntFormat):
            values = values.astype(np.int8)  # ml_dtypes' narrow integers, stored as quantize stores them
        zp = np.asarray(zero_point) if isinstance(zero_point, (np.ndarray, np.generic)) else None
        if zp is not None and zp.dtype.kind == "V" and isinstance(_code_format(zp.dtype), IntFormat):
            zero_point = zp.astype(np.int32)  # (as quantize stores zero points)
        if not isinstance(values, np.ndarray) or values.dtype.kind not in "iu":
            raise TypeError(f"values: expected a numpy array of integers, got "
                            f"{getattr(values, 'dtype', type(values).__name__)}")
        try:
            f = _format(fmt)
        except (TypeError, ValueError) as e:
            raise type(e)(f"fmt: {e}".replace("fmt: fmt: ", "fmt: ")) from None
        if not isinstance(f, IntFormat):
            raise TypeError(f"fmt: expected an integer format (such as \"int8\"), got {f!r}")
        if axis is not None:
            if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
                raise TypeError(f"axis: expected None or an int, got {type(axis).__name__}")
            if not -values.ndim <= axis < values.ndim:
                raise ValueError(f"axis: {axis} is out of range for values of shape {values.shape}")
            axis = int(axis) % values.ndim
        count = 1 if axis is None else values.shape[axis]
        for name, p, kinds in (("scale", scale, "iuf"), ("zero_point", zero_point, "iu")):
            a = np.asarray(p)
            if kinds == "iuf" and a.dtype.kind == "V" and _code_format(a.dtype) is not None:
                a = a.astype(np.float64)  # a low-precision float (lowp's or ml_dtypes' dtypes)
            if a.dtype.kind not in kinds:
                what = "real numbers" if kinds == "iuf" else "integers"
                raise TypeError(f"{name}: expected {what}, got dtype {a.dtype}")
            if not (a.ndim == 0 or (axis is not None and a.ndim == 1 and a.shape[0] in (1, count))):
                want = "a scalar" if axis is None else f"a scalar or {count} values (one per index along axis {axis})"
                raise ValueError(f"{name}: expected {want}, got shape {a.shape}")
        sc = np.asarray(scale).astype(np.float64)  # (numpy's or a low-precision float dtype, checked above)
        if not (np.isfinite(sc) & (sc > 0)).all():
            raise ValueError("scale: every scale must be a positive finite number")
        with np.errstate(over="ignore", under="ignore"):
            s32 = sc.astype(np.float32)
        if not (np.isfinite(s32) & (s32 > 0)).all():
            raise ValueError("scale: scales are stored as float32, and some lie beyond its range")
        if values.size and (int(values.min()) < f.min or int(values.max()) > f.max):
            raise ValueError(f"values: must lie in {f!r}'s range {int(f.min)}..{int(f.max)}, got "
                             f"{int(values.min())}..{int(values.max())}")
        zpa = np.asarray(zero_point)
        if zpa.size and (int(zpa.min()) < f.min or int(zpa.max()) > f.max):
            raise ValueError(f"zero_point: must lie in {f!r}'s range {int(f.min)}..{int(f.max)}")
        self.values = values
        # Scales as float32 (what quantize gives): dequantize and qmatmul read the same ones.
        self.scale = s32[()] if s32.ndim == 0 else s32
        # Zero points as integers of their own (a list or array of the caller's, edited
        # later, would pass values the range check above never saw).
        zpa = zpa.astype(np.int32 if f.max < 2**31 else np.int64)
        self.zero_point = zpa[()] if zpa.ndim == 0 else zpa
        self.axis = axis
        self.format = f

    def __setattr__(self, key: str, value: Any) -> None:
        # A field assigned after construction is checked as the constructor checks it (a
        # negative scale, a float zero point, a scale count that does not match the axis
        # would otherwise reach dequantize and qmatmul unchecked).
        if key not in QuantizedArray.__slots__ or not hasattr(self, "format"):  # (in __init__: format comes last)
            object.__setattr__(self, key, value)
            return
        parts = {k: getattr(self, k) for k in QuantizedArray.__slots__}
        parts[key] = value
        q = QuantizedArray(parts["values"], parts["scale"], parts["zero_point"], parts["axis"], parts["format"])
        for k in QuantizedArray.__slots__:
            object.__setattr__(self, k, getattr(q, k))

    def __reduce__(self) -> tuple:
        # (Every pickle protocol: __slots__ without __getstate__ needs protocol 2.)
        return (QuantizedArray, (self.values, self.scale, self.zero_point, self.axis, self.format))

    @property
    def shape(self) -> tuple:
        return self.values.shape

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    def _broadcast(self, p: Any) -> np.ndarray:
        p = np.asarray(p)
        if self.axis is None or p.ndim == 0:
            return p
        shape = [1] * self.values.ndim
        shape[self.axis] = -1
        return p.reshape(shape)

    def dequantize(self) -> np.ndarray:
        """float32 reals ``(values - zero_point) * scale``, each the exact value rounded once."""
        with np.errstate(over="ignore"):
            return self._dequantize64().astype(np.float32)

    def _dequantize64(self) -> np.ndarray:
        """The reals as float64: exact (a float32 scale times an integer below 2**29),
        else rounded to odd, which the rounding to float32 then rounds once."""
        d = self.values.astype(np.int64) - self._broadcast(self.zero_point).astype(np.int64)
        sc = self._broadcast(self.scale).astype(np.float32).astype(np.float64)
        with np.errstate(over="ignore"):
            return _mul_to_odd(d.astype(np.float64), sc)

    def __repr__(self) -> str:
        return (f"QuantizedArray(shape={self.values.shape}, format={self.format!r}, axis={self.axis}, "
                f"scale={self.scale!r}, zero_point={self.zero_point!r})")


def _calibrate(a: np.ndarray, calibration: Any, reduce_axes: Optional[tuple], symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of the range to map, reduced over ``reduce_axes`` (None: everything)."""
    # An empty array maps nothing: zeros, one per index along the kept axis.
    empty = np.zeros(np.sum(a, axis=reduce_axes).shape) if not a.size else None
    if isinstance(calibration, str) and calibration == "max":
        if empty is not None:
            return empty, empty
        if symmetric:
            hi = np.max(np.abs(a), axis=reduce_axes)
            return -hi, hi
        return np.min(a, axis=reduce_axes), np.max(a, axis=reduce_axes)
    if (isinstance(calibration, (tuple, list)) and len(calibration) == 2 and calibration[0] == "percentile"):
        p = calibration[1]
        if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)) or not 0 < float(p) <= 100:
            raise ValueError(f"calibration: percentile must be in (0, 100], got {p!r}")
        p = float(p)
        if not symmetric and p < 50:
            raise ValueError(f"calibration: an asymmetric range keeps the values between the percentiles 100 - p "
                             f"and p, so p must be in [50, 100], got {p!r}")
        if empty is not None:
            return empty, empty
        if symmetric:
            hi = np.percentile(np.abs(a), p, axis=reduce_axes)
            return -hi, hi
        with np.errstate(over="ignore", invalid="ignore"):  # (interpolating across float64's range overflows)
            lo, hi = np.percentile(a, 100.0 - p, axis=reduce_axes), np.percentile(a, p, axis=reduce_axes)
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise ValueError(f"x: values from {float(np.min(a)):g} to {float(np.max(a)):g} need a scale beyond "
                             f"float32's range (scales are stored as float32)")
        return lo, hi
    raise ValueError(f"calibration: expected 'max' or ('percentile', p), got {calibration!r}")


def _quantize_piece(a: np.ndarray, sc: Any, zp: Any, cmin: Any, cmax: Any, f: IntFormat, symmetric: bool, r: str,
                    key: int, index0: int) -> np.ndarray:
    """The integers of the float64 values ``a`` (1-D) with the scales, zero points and
    code bounds ``sc``, ``zp``, ``cmin``, ``cmax`` (scalars or arrays like ``a``);
    stochastic rounding draws the bits of element ``index0 + i`` for ``a[i]`` (64 bits,
    as for any float64 input), keyed by ``key``."""
    # x / scale rounded to odd, so that the rounding into the integers is the exact
    # quotient's, once; the rounding mode acts on x / scale and the zero point is added
    # after (as ONNX and PyTorch quantize), in a format one bit wider that holds the
    # rounded quotient whatever the zero point. No integer format is wider than 32 bits:
    # there an even integer part of the quotient is set aside (exactly: y - base is a
    # Sterbenz difference) and added back with the zero point, which changes no rounding,
    # ties to even and to odd included.
    y = _div_to_odd(a, sc)
    base = 2.0 * np.trunc(y * 0.5) if not symmetric and f.bits >= 32 else None
    wide = f if symmetric else IntFormat(3) if base is not None else IntFormat(f.bits + 1)
    yy = np.ascontiguousarray(y if base is None else y - base, np.float64)
    codes = np.empty(yy.shape, wide.storage_dtype)
    # (No NaN here: x was checked, and the scales are finite and positive.)
    _lowp.encode_into(yy, wide._spec, codes, r, False, key, 64, index0)
    itype = np.dtype(f"i{wide.storage_dtype.itemsize}")
    vals = np.asarray(codes.view(itype))
    if wide.bits < 8 * itype.itemsize:  # sign-extend narrower formats
        sh = 8 * itype.itemsize - wide.bits
        vals = (vals << sh) >> sh
    if wide is not f:
        vals = vals.astype(np.int64) + np.asarray(zp).astype(np.int64)  # (clipped into f's range below)
        if base is not None:
            vals = vals + base.astype(np.int64)
    return np.clip(vals, cmin, cmax)


def quantize(x: Any, fmt: Union[str, IntFormat] = "int8", *, axis: Optional[int] = None, symmetric: bool = True,
             rounding: str = "nearest_even", seed: SeedLike = None, calibration: Any = "max") -> QuantizedArray:
    """Quantize ``x`` to integers with a scale (and zero point when not ``symmetric``).

    Symmetric uses ``[-(2**(b-1)-1), 2**(b-1)-1]`` (int8: [-127, 127]) and zero point 0;
    asymmetric uses the full range (int8: [-128, 127]) with a zero point that maps 0
    exactly. ``axis`` gives one scale per index along it; ``calibration`` is ``"max"``
    or ``("percentile", p)``.

    Scales are float32: the exact scale (range / steps) rounded to nearest, or rounded up
    where it is below float32's normal range, so the calibrated range always fits (tiny
    values such as float32 subnormals then quantize at the resolution float32 allows,
    exactly for float32 input). A range beyond what a float32 scale can cover (a scale
    above float32's largest value, or values spanning less than its smallest positive
    value, 2**-149) raises ValueError. An all-zero range gives scale 1.
    """
    symmetric = boolean(symmetric, "symmetric")
    f = _format(fmt)
    if not isinstance(f, IntFormat) or not f.signed:
        raise ValueError(f"fmt: quantize takes signed integer formats ('int8', 'int4', 'int2', IntFormat(bits)), got {f!r}")
    r = _check_rounding(rounding)
    # (Integers past 2**53 and longdouble values rounded to odd: the quotients' rounding
    # into f is then the exact one's for formats up to 28 bits, where a midpoint times the
    # scale fits float64; wider formats can round such inputs twice.)
    a = np.asarray(_as_float_array(x, "x", f), np.float64)
    if np.isnan(a).any():
        raise ValueError("x: contains NaN; quantization needs finite values")
    if np.isinf(a).any():
        raise ValueError("x: contains inf; quantization needs finite values")
    if axis is not None:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
            raise TypeError(f"axis: expected None or an int, got {type(axis).__name__}")
        if not -a.ndim <= axis < a.ndim:
            raise ValueError(f"axis: {axis} is out of range for an array of {a.ndim} dimensions")
        axis = int(axis) % a.ndim
        reduce_axes: Optional[tuple] = tuple(i for i in range(a.ndim) if i != axis)
    else:
        reduce_axes = None
    qmax = (1 << (f.bits - 1)) - 1
    qmin = -qmax if symmetric else -qmax - 1
    lo, hi = _calibrate(a, calibration, reduce_axes, symmetric)
    lo = np.minimum(np.asarray(lo, np.float64), 0.0)
    hi = np.maximum(np.asarray(hi, np.float64), 0.0)
    # The scale rounded to odd in float64, so that the float32 scale below is the exact
    # one rounded once: the range hi - lo rounded to odd first, up to 28 bits (steps times
    # a float32 midpoint fit float64), else the quotient rounded to odd from exact values.
    if symmetric:
        scale = _div_to_odd(hi, qmax)
        zp = np.zeros_like(scale)
    elif f.bits <= 28:
        scale = _div_to_odd(_add_to_odd(hi, -lo), qmax - qmin)
    else:
        ranges = [Fraction(h) - Fraction(lo_) for h, lo_ in zip(hi.ravel().tolist(), lo.ravel().tolist())]
        scale = np.array([_round_exact(r / (qmax - qmin), _NAMED["float64"], "odd") if r else 0.0
                          for r in ranges]).reshape(hi.shape)
    scale = np.where(scale > 0, scale, 1.0)
    if (scale > _F32_MAX).any():
        raise ValueError(f"x: values up to {max(abs(float(np.min(lo))), float(np.max(hi))):g} need a scale beyond "
                         f"float32's range (scales are stored as float32)")
    if (hi > _F32_MAX).any() or (lo < -_F32_MAX).any():
        raise ValueError(f"x: values up to {max(-float(np.min(lo)), float(np.max(hi))):g} lie beyond float32's range "
                         f"(quantized values dequantize to float32)")
    span = hi if symmetric else hi - lo
    if ((span > 0) & (span < _F32_TINIEST)).any():
        what = "values up to {:g} are" if symmetric else "a range of {:g} is"
        raise ValueError(f"x: {what.format(float(np.min(span[span > 0])))} below one step of the smallest float32 "
                         f"scale, {_F32_TINIEST:g} (scales are stored as float32): nothing but 0 could represent it")
    # Quantize with the float32 scale that is stored, so values and scale agree exactly
    # (values * scale with the stored scale is what the integers were rounded from).
    s32 = np.asarray(scale, np.float32)
    # Below float32's normal range the nearest float32 can be far below the exact scale
    # (by up to half of it), which would clip the largest values; rounded up instead, the
    # calibrated range still fits in [qmin, qmax].
    up = (s32.astype(np.float64) < scale) & (scale < _F32_TINY)
    with np.errstate(over="ignore"):  # (np.where computes both sides: the unused one may overflow)
        s32 = np.where(up, np.nextafter(s32, np.float32(np.inf)), s32)
    # Rounded up at the top of float32's range, qmax steps would pass its largest value:
    # rounded down instead, the largest values land a fraction of a step past qmax.
    down = s32.astype(np.float64) * qmax > _F32_MAX
    s32 = np.where(down, np.nextafter(s32, np.float32(0)), s32)
    scale = s32.astype(np.float64)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    if not symmetric:
        zp = np.clip(np.rint(qmin - lo / scale), qmin, qmax)
    out_dtype = np.dtype(np.int8) if f.bits <= 8 else np.dtype(f"i{f.storage_dtype.itemsize}")
    # Where the scale rounded up (or the zero point by half a step) at the top of float32's
    # range, the extreme codes would dequantize past float32's largest value: those are
    # clipped to the last code whose value is finite, so dequantize() never returns inf.
    steps = np.floor(_F32_MAX / scale)
    steps = np.where(steps * scale > _F32_MAX, steps - 1, steps)
    cmin, cmax = np.maximum(qmin, zp - steps), np.minimum(qmax, zp + steps)
    vals = np.empty(a.shape, out_dtype)
    flat_a, flat_v = a.reshape(-1), vals.reshape(-1)
    # The parameters of each element: along axis, `inner` elements apart.
    inner = math.prod(a.shape[axis + 1:]) if axis is not None else 1
    params = [np.asarray(p_, np.float64).reshape(-1) for p_ in (scale, zp, cmin, cmax)]
    # In pieces (the exact quotients take a dozen float64 temporaries an element);
    # stochastic rounding draws each element's bits by its flat index, in one sequence.
    key = _seed_word(seed, r)
    piece = 1 << 16
    for i0 in range(0, flat_a.size, piece):
        i1 = min(flat_a.size, i0 + piece)
        if axis is None:
            sc, z, c0, c1 = (p_[0] for p_ in params)
        else:
            idx = (np.arange(i0, i1) // inner) % a.shape[axis]
            sc, z, c0, c1 = (p_[idx] for p_ in params)
        flat_v[i0:i1] = _quantize_piece(flat_a[i0:i1], sc, z, c0, c1, f, symmetric, r, key, i0)
    if axis is None:
        return QuantizedArray(vals, np.float32(scale), np.int32(zp), None, f)
    return QuantizedArray(vals, scale.astype(np.float32), zp.astype(np.int32), axis, f)
