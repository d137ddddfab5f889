"""Argument checks shared by the training tools (messages name the argument)."""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np

from .._args import boolean as boolean
from .._convert import ROUNDING_MODES, _refuse_masked
from .._formats import FloatFormat, Format, PositFormat, format as _format

FLOAT_DTYPES = "float16/32/64 or a float or posit dtype of lowp or ml_dtypes (bfloat16, float8_*, posit*)"


def is_float_dtype(dt: np.dtype) -> bool:
    """Whether ``dt`` holds real floating-point values: numpy's floats, and the float and
    posit dtypes of lowp and ml_dtypes (some of which numpy reports as kind 'V')."""
    if dt.kind == "f":
        return True
    if dt.kind != "V":
        return False
    try:
        f = _format(dt)
    except (TypeError, ValueError):
        return False
    return isinstance(f, (FloatFormat, PositFormat))


def number(value: Any, name: str, *, gt: Optional[float] = None, ge: Optional[float] = None,
           lt: Optional[float] = None, le: Optional[float] = None) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a real number, got {type(value).__name__}")
    try:
        v = float(value)
    except OverflowError:  # (a Python int past float64's range)
        raise ValueError(f"{name}: must be finite, got an int of {int(value).bit_length()} bits, "
                         f"beyond float64's range") from None
    if math.isnan(v):
        raise ValueError(f"{name}: must be a number, got nan")
    if math.isinf(v):
        raise ValueError(f"{name}: must be finite, got {v}")
    if gt is not None and not v > gt:
        raise ValueError(f"{name}: must be > {gt}, got {v}")
    if ge is not None and not v >= ge:
        raise ValueError(f"{name}: must be >= {ge}, got {v}")
    if lt is not None and not v < lt:
        raise ValueError(f"{name}: must be < {lt}, got {v}")
    if le is not None and not v <= le:
        raise ValueError(f"{name}: must be <= {le}, got {v}")
    return v


def integer(value: Any, name: str, *, ge: Optional[int] = None, le: Optional[int] = None) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    v = int(value)
    if ge is not None and v < ge:
        raise ValueError(f"{name}: must be >= {ge}, got {v}")
    if le is not None and v > le:
        raise ValueError(f"{name}: must be <= {le}, got {v}")
    return v


def rounding(value: Any, name: str = "rounding") -> str:
    if not isinstance(value, str) or value not in ROUNDING_MODES:
        raise ValueError(f"{name}: unknown rounding mode {value!r}; accepted: {', '.join(map(repr, ROUNDING_MODES))}")
    return value


def real_format(value: Any, name: str, also: str = "") -> Format:
    """A float or posit Format; integer formats (which hold no fractions without a
    scale) are refused with a message naming ``name``."""
    try:
        f = _format(value)
    except (TypeError, ValueError) as e:
        msg = str(e).split(": ", 1)[-1]
        raise type(e)(f"{name}: {msg}{also}") from None
    if not isinstance(f, (FloatFormat, PositFormat)):
        raise ValueError(f"{name}: expected a float or posit format (an integer format needs a scale: "
                         f"see lowp.quantize), got {f!r}{also}")
    return f


def fmt_or_none(value: Any, name: str) -> Optional[Format]:
    """A float or posit Format, or None for plain float32."""
    if value is None:
        return None
    f = real_format(value, name)
    if f.name == "float32":
        return None
    return f


def weight_format(value: Any, name: str) -> Optional[Format]:
    """A weight format (or None: float32) whose values float32 holds: the working
    copies are float32 arrays, so a wider format would be rounded twice on the way in."""
    f = fmt_or_none(value, name)
    if f is not None and not f._fits_f32():
        raise ValueError(f"{name}: the working copies are float32, and {f!r} has values float32 cannot hold; "
                         f"accepted: formats within float32 (bfloat16, float16, the fp8 formats, posit8, posit16, ...)")
    return f


def real_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a float32 array: real numbers only (numpy's bools, ints and floats,
    the float dtypes of lowp and ml_dtypes, and sequences of real numbers); dates,
    strings, complex and object arrays are refused with a message naming ``name``."""
    _refuse_masked(value, name)
    try:
        a = value if isinstance(value, np.ndarray) else np.asarray(value)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{name}: expected an array of real numbers, got {type(value).__name__} ({e})") from None
    if a.dtype.kind not in "biuf" and not is_float_dtype(a.dtype):
        raise TypeError(f"{name}: expected real numbers (bool, int, float or a low-precision float dtype), "
                        f"got dtype {a.dtype}")
    return a.astype(np.float32)


def array_list(value: Any, name: str) -> list:
    """``list(value)``, with a message naming ``name`` when it is no sequence (a str, bytes
    or a mapping is none here: its characters or keys are no arrays)."""
    if isinstance(value, (str, bytes, dict)):
        raise TypeError(f"{name}: expected a sequence of numpy arrays, got {type(value).__name__}")
    _refuse_masked(value, name)
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of numpy arrays, got {type(value).__name__}") from None
    for i, v in enumerate(items):
        _refuse_masked(v, f"{name}[{i}]")
    return items


def optimizer(value: Any, name: str = "optimizer") -> Any:
    """An object with a callable ``step(grads)`` (lowp's SGD and Adam, or the caller's own)."""
    if not callable(getattr(value, "step", None)):
        raise TypeError(f"{name}: expected an optimizer with a step(grads) method (such as lowp.training.SGD "
                        f"or Adam), got {type(value).__name__}")
    return value


def first_overlap(items: list[tuple[np.ndarray, int]]) -> Optional[tuple[int, int]]:
    """The tags ``(i, j)`` (``i < j``) of two entries of ``items`` whose arrays share
    memory (the same array twice included), or None. Only arrays whose byte ranges
    overlap are compared: sorted by start, each is checked against the earlier ones still
    open (usually none), so n views of one buffer cost n log n, not n squared."""
    try:
        from numpy.lib.array_utils import byte_bounds
    except ImportError:  # numpy < 2
        byte_bounds = np.byte_bounds

    spans = sorted(((*byte_bounds(a), tag, a) for a, tag in items if a.size), key=lambda t: t[0])
    open_: list[tuple[int, int, np.ndarray]] = []  # (end, tag, array) of spans not yet closed
    for lo, hi, tag, a in spans:
        open_ = [o for o in open_ if o[0] > lo]
        for _, t, b in open_:
            if a is b or np.shares_memory(a, b):
                return (min(t, tag), max(t, tag))
        open_.append((hi, tag, a))
    return None


def params_list(params: Any, name: str = "params") -> list[np.ndarray]:
    if isinstance(params, np.ndarray):
        params = [params]
    try:
        ps = list(params)
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of numpy arrays, got {type(params).__name__}") from None
    if not ps:
        raise ValueError(f"{name}: is empty")
    for i, p in enumerate(ps):
        if not isinstance(p, np.ndarray):
            raise TypeError(f"{name}[{i}]: expected a numpy array, got {type(p).__name__}")
        _refuse_masked(p, f"{name}[{i}]")
        if p.dtype != np.float32:
            raise TypeError(f"{name}[{i}]: expected dtype float32 (the working copy), got {p.dtype}")
        if not p.flags.writeable:
            raise ValueError(f"{name}[{i}]: must be writeable (it is updated in place)")
    clash = first_overlap([(p, i) for i, p in enumerate(ps)])
    if clash is not None:
        i, j = clash
        raise ValueError(f"{name}[{j}]: shares memory with {name}[{i}]; each parameter is updated in place once a "
                         f"step, so pass it once (tied weights: one array, the sum of its gradients)")
    return ps


def grads_list(grads: Any, params: Sequence[np.ndarray], name: str = "grads") -> list[np.ndarray]:
    if isinstance(grads, np.ndarray):
        grads = [grads]
    try:
        gs = list(grads)
    except TypeError:
        raise TypeError(f"{name}: expected a sequence of numpy arrays, got {type(grads).__name__}") from None
    if len(gs) != len(params):
        raise ValueError(f"{name}: got {len(gs)} arrays for {len(params)} parameters")
    out = []
    for i, (g, p) in enumerate(zip(gs, params)):
        _refuse_masked(g, f"{name}[{i}]")
        g = np.asarray(g)
        if g.shape != p.shape:
            raise ValueError(f"{name}[{i}]: shape {g.shape} does not match the parameter's shape {p.shape}")
        if not is_float_dtype(g.dtype):
            raise TypeError(f"{name}[{i}]: expected an array of {FLOAT_DTYPES}, got dtype {g.dtype}")
        out.append(g)
    return out


class SeedStream:
    """Reproducible per-call seeds for stochastic rounding from one user seed."""

    def __init__(self, seed: Any, name: str = "seed") -> None:
        if seed is not None and not isinstance(seed, np.random.Generator):
            if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
                raise TypeError(f"{name}: expected None, an int or a numpy.random.Generator, got {type(seed).__name__}")
            if int(seed) < 0:
                raise ValueError(f"{name}: must be >= 0, got {seed}")
        self._rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)

    def next(self) -> int:
        return int(self._rng.integers(0, 2**63, dtype=np.int64))
