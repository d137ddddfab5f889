"""Units in the last place and neighbours of values in any format: ``lowp.ulp``, ``lowp.nextafter``.

Both work on *ordinals*: an integer per representable value such that consecutive
representable values have consecutive ordinals (+0 and -0 share ordinal 0). For binary
floats the ordinal is the sign-magnitude code read as a signed magnitude (minus the
unused subnormal codes when the format flushes subnormals); for posits it is the code
read as a two's complement integer (posit codes are ordered that way); for integers it
is the value itself.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Optional

import numpy as np

from ._convert import _as_float_array, decode, encode, round as _round
from ._formats import FloatFormat, Format, IntFormat, PositFormat, format as _format

__all__ = ["ulp", "nextafter"]


def _exact_scalar(x: Any) -> Optional[Fraction]:
    """``x`` as a Fraction when it is a Python int numpy cannot hold (beyond 64 bits) or a
    Fraction; None for anything else."""
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int) and not isinstance(x, (bool, np.bool_)) and not -(2**63) <= x < 2**64:
        return Fraction(x)
    return None


def _nearest_f64(v: Fraction) -> float:
    """``v`` rounded to the nearest float64 (infinities beyond the range)."""
    try:
        return float(v)  # correctly rounded
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _as_f64(x: Any, arg: str, f: Optional[Format] = None) -> np.ndarray:
    # Low-precision dtypes are decoded exactly; float16/32 and integers widen exactly;
    # integers beyond 2**53 and longdouble values are rounded to odd for a format of at
    # most 50 significant bits, which brackets them between the same two values.
    # (Longdouble values beyond float64's range become inf here; _not_float64 has them,
    # as it has Python ints beyond 64 bits and Fractions, here rounded to nearest.)
    e = _exact_scalar(x)
    if e is not None:
        return np.array(_nearest_f64(e))
    _check_sequence(x, arg)
    if isinstance(x, (list, tuple, np.ndarray)) and np.asarray(x).dtype == object:
        raise TypeError(f"{arg}: arrays of Python objects (such as ints beyond 64 bits) are not supported; pass "
                        "such a value as a scalar, or use an array of a numeric dtype")
    with np.errstate(over="ignore"):
        a = _as_float_array(x, arg, f)
    return a.astype(np.float64).reshape(np.shape(x))


_F64_EXACT_INT = 2**53  # integers of at most this magnitude are float64 values


def _is_f64(v: int) -> bool:
    """Is the int ``v`` a float64 value?"""
    try:
        return int(float(v)) == v
    except OverflowError:
        return False


def _check_sequence(x: Any, arg: str) -> None:
    """A list or tuple numpy cannot read, or reads as floats while it holds Python ints
    float64 cannot hold (numpy reads [2**63 + 1, 0] as float64): TypeError."""
    if not isinstance(x, (list, tuple)):
        return
    try:
        a = np.asarray(x)
    except ValueError as err:  # ragged nested sequences
        raise TypeError(f"{arg}: cannot be read as a numeric array: {err}") from None
    if a.dtype.kind in "fc" and any(type(v) is int and abs(v) > _F64_EXACT_INT and not _is_f64(v)
                                    for v in np.asarray(x, dtype=object).reshape(-1)):
        raise TypeError(f"{arg}: a sequence that numpy reads as float64 holds Python ints float64 cannot hold, "
                        "which it would round; pass them in an int64 or uint64 array, or as scalars")


def _not_float64(x: Any) -> Optional[tuple[np.ndarray, list[Fraction]]]:
    """Entries of ``x`` that float64 cannot hold (64-bit integers beyond 2**53, longdouble
    values, Python ints beyond 64 bits, Fractions): (mask, their exact values, in flat
    order), or None when there are none. ``x`` has been read by :func:`_as_f64` (which
    refuses the sequences :func:`_check_sequence` does)."""
    e = _exact_scalar(x)
    if e is not None:
        return None if _f64_or_none(e) is not None else (np.ones((), bool), [e])
    a = np.asarray(x)
    dt = a.dtype
    if dt.kind in "iu" and dt.itemsize >= 8:
        cand = (a > _F64_EXACT_INT) | (a < -_F64_EXACT_INT)
        exact = lambda v: Fraction(int(v))  # noqa: E731
    elif dt.kind == "f" and dt.itemsize > 8:
        with np.errstate(over="ignore"):
            cand = a != a.astype(np.float64).astype(dt)
        cand &= np.isfinite(a)
        exact = lambda v: Fraction(*v.as_integer_ratio())  # noqa: E731
    else:
        return None
    if not cand.any():
        return None
    idx = np.flatnonzero(cand)
    flat = a.reshape(-1)
    vals = [exact(flat[i]) for i in idx]
    keep = [_f64_or_none(v) is None for v in vals]
    mask = np.zeros(a.shape, bool)
    mask.reshape(-1)[idx[np.array(keep, bool)]] = True
    vals = [v for v, k in zip(vals, keep) if k]
    return (mask, vals) if vals else None


def _f64_or_none(v: Fraction) -> Optional[float]:
    """``v`` as a float64 when it is one exactly."""
    try:
        f = float(v)
    except OverflowError:
        return None
    return f if math.isfinite(f) and Fraction(f) == v else None


def _float64_bracket(v: Fraction) -> tuple[float, float]:
    """The float64 values just below and just above ``v`` (not a float64), infinities
    beyond the finite range."""
    f = _nearest_f64(v)
    if math.isinf(f):
        big = float(np.finfo(np.float64).max)
        return (big, math.inf) if f > 0 else (-math.inf, -big)
    if Fraction(f) > v:
        return math.nextafter(f, -math.inf), f
    return f, math.nextafter(f, math.inf)


def _exact_sign(a: Any, b: Any) -> float:
    """sign(b - a) of two values each a Fraction or a float64 (NaN: NaN)."""
    if isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b):
        return math.nan
    for v, s in ((a, -1.0), (b, 1.0)):
        if isinstance(v, float) and math.isinf(v):
            other = b if s < 0 else a
            if isinstance(other, float) and other == v:
                return 0.0
            return s if v > 0 else -s
    d = Fraction(b) - Fraction(a)
    return float((d > 0) - (d < 0))


def _subnormal_gap(f: FloatFormat) -> int:
    """Number of subnormal codes a format without subnormals leaves unused."""
    return 0 if f.subnormals else (1 << f.man_bits) - 1


def _ordinal_limits(f: Format) -> tuple[int, int]:
    """(lowest, highest) ordinal of a finite value of ``f``."""
    if isinstance(f, IntFormat):
        return int(f.min), int(f.max)
    hi = int(_ordinals(np.array([f.max]), f)[0])
    return -hi, hi


def _ordinals(v: np.ndarray, f: Format) -> np.ndarray:
    """Ordinals (int64) of values ``v`` (float64) that are finite and representable in ``f``."""
    if isinstance(f, IntFormat):
        return v.astype(np.int64)
    codes = encode(v, f).astype(np.uint64)
    n = f.bits
    if isinstance(f, PositFormat):
        # Two's complement: codes >= 2**(n-1) are negative.
        c = codes.astype(np.int64)
        return np.where(c >= (1 << (n - 1)), c - (1 << n), c)
    assert isinstance(f, FloatFormat)
    sign_bit = np.uint64(1) << np.uint64(n - 1)
    mag = (codes & (sign_bit - np.uint64(1))).astype(np.int64)
    gap = _subnormal_gap(f)
    if gap:
        mag = np.where(mag > 0, mag - gap, 0)
    return np.where((codes & sign_bit) != 0, -mag, mag)


def _from_ordinals(o: np.ndarray, f: Format) -> np.ndarray:
    """Values (float64) of ordinals ``o``; beyond the finite range: +-inf if ``f`` has
    infinities, else NaN."""
    lo, hi = _ordinal_limits(f)
    over = o > hi
    under = o < lo
    oc = np.clip(o, lo, hi)
    if isinstance(f, IntFormat):
        out = oc.astype(np.float64)
    elif isinstance(f, PositFormat):
        n = f.bits
        codes = np.where(oc < 0, oc + (1 << n), oc).astype(np.uint64)
        out = decode(codes.astype(f.storage_dtype), f, np.float64)
    else:
        assert isinstance(f, FloatFormat)
        mag = np.abs(oc)
        gap = _subnormal_gap(f)
        if gap:
            mag = np.where(mag > 0, mag + gap, 0)
        codes = mag.astype(np.uint64) | np.where(oc < 0, np.uint64(1) << np.uint64(f.bits - 1), np.uint64(0))
        out = decode(codes.astype(f.storage_dtype), f, np.float64)
        # No negative zero in formats that lack one (fnuz): canonical +0.
        out = np.where(oc == 0, 0.0, out)
    has_inf = isinstance(f, FloatFormat) and f.inf
    if over.any() or under.any():
        out = np.where(over, np.inf if has_inf else np.nan, out)
        out = np.where(under, -np.inf if has_inf else np.nan, out)
    return out


def _representable(v: np.ndarray, f: Format) -> np.ndarray:
    """Which finite entries of ``v`` are exactly representable in ``f``."""
    fin = np.isfinite(v)
    r = np.zeros(v.shape, bool)
    if fin.any():
        vf = v[fin]
        r[fin] = _round(vf, f, "nearest_even", saturate=True) == vf
    return r


def _next_up(x: np.ndarray, f: Format) -> np.ndarray:
    """The smallest value of ``f`` strictly greater than ``x`` (finite float64 ``x``)."""
    lo, hi = _ordinal_limits(f)
    fmax = float(_from_ordinals(np.array([hi]), f)[0])
    fmin = float(_from_ordinals(np.array([lo]), f)[0])
    out = np.empty_like(x)
    big = x >= fmax
    small = x < fmin
    mid = ~big & ~small
    has_inf = isinstance(f, FloatFormat) and f.inf
    out[big] = np.inf if has_inf else np.nan
    out[small] = fmin
    if mid.any():
        xm = x[mid]
        r = _round(xm, f, "up", saturate=True)
        o = _ordinals(r, f)
        o = np.where(r > xm, o, o + 1)
        out[mid] = _from_ordinals(o, f)
    return out


def nextafter(x: Any, y: Any, fmt: Any) -> np.ndarray:
    """The next value of ``fmt`` after ``x`` in the direction of ``y`` (elementwise, float64).

    As ``numpy.nextafter`` but in any lowp format: for a representable ``x`` its
    neighbour toward ``y``; for any other ``x`` the nearest value of ``fmt`` strictly
    beyond ``x`` toward ``y`` (``x`` rounded toward ``y``). ``x == y`` gives ``y``; NaN in
    either gives NaN. Stepping past the largest finite value gives inf when ``fmt`` has
    infinities and NaN otherwise (posits, fn/fnuz floats, integers). Infinite ``x`` steps
    to the largest finite value toward ``y`` (also in formats without infinities).
    Integers beyond 2**53 (int64, uint64 and Python ints of any size), Fractions and
    longdouble values are compared and stepped from exactly. Returns a float64 array (a
    scalar for scalar inputs).
    """
    f = _format(fmt)
    xa = _as_f64(x, "x", f)
    ya = _as_f64(y, "y", f)
    try:
        xa, ya = np.broadcast_arrays(xa, ya)
    except ValueError:
        raise ValueError(f"y: shape {ya.shape} does not broadcast with x's shape {xa.shape}") from None
    xa, ya = xa.copy(), ya.copy()
    out = np.full(xa.shape, np.nan)
    eq = np.asarray(xa == ya)
    up = np.asarray((ya > xa) & ~np.isnan(xa))
    down = np.asarray((ya < xa) & ~np.isnan(xa))
    _exact_directions(x, y, xa, ya, eq, up, down)
    out[eq] = ya[eq]
    # An infinite x steps to the largest finite value toward y.
    lowest = float(_from_ordinals(np.array([_ordinal_limits(f)[0]]), f)[0])
    if up.any():
        xu = xa[up]
        out[up] = np.where(np.isneginf(xu), lowest, _next_up(np.where(np.isneginf(xu), 0.0, xu), f))
    if down.any():
        if isinstance(f, IntFormat):
            xd = xa[down]
            lo, hi = _ordinal_limits(f)
            c = np.ceil(np.minimum(xd, np.float64(hi) + 1)) - 1
            out[down] = np.where(c < lo, np.nan, c)
        else:
            # Floats and posits are symmetric about zero.
            xd = xa[down]
            out[down] = np.where(np.isposinf(xd), -lowest, -_next_up(np.where(np.isposinf(xd), 0.0, -xd), f))
    # A step onto zero lands on the zero of x's side, as numpy's (C's) nextafter, and
    # x == y == 0 gives y's zero; formats without -0 (fnuz floats, posits, integers)
    # have only +0.
    if isinstance(f, FloatFormat) and f.nan != "fnuz":
        z = (out == 0) & ~eq
        out[z] = np.where(np.signbit(xa[z]), -0.0, 0.0)
    else:
        out[out == 0] = 0.0
    return out[()] if out.ndim == 0 else out


def _exact_directions(x: Any, y: Any, xa: np.ndarray, ya: np.ndarray, eq: np.ndarray, up: np.ndarray,
                      down: np.ndarray) -> None:
    """Where ``x`` or ``y`` is not a float64 (so ``xa``/``ya`` are only close to it), decide
    ``eq``/``up``/``down`` from the exact values, and replace ``xa`` by the float64 just
    behind ``x`` (below it when stepping up, above it when stepping down): no float64, so
    no value of any format, lies strictly between the two, and the next value beyond it
    toward ``y`` is the next value beyond ``x``. All arrays have the broadcast shape."""
    ex, ey = _not_float64(x), _not_float64(y)
    if ex is None and ey is None:
        return
    shape = xa.shape
    exact_x = np.empty(shape, object)
    exact_y = np.empty(shape, object)
    exact_x[...] = xa
    exact_y[...] = ya
    where = np.zeros(shape, bool)
    for e, arr in ((ex, exact_x), (ey, exact_y)):
        if e is not None:
            mask, vals = e
            vm = np.empty(mask.shape, object)
            vm[mask] = vals
            vm, m = np.broadcast_to(vm, shape), np.broadcast_to(mask, shape)
            arr[m] = vm[m]
            where |= m
    for i in map(tuple, np.argwhere(where)):
        xv, yv = exact_x[i], exact_y[i]
        if isinstance(xv, float):
            xv = float(xv)
        if isinstance(yv, float):
            yv = float(yv)
        d = _exact_sign(xv, yv)
        eq[i], up[i], down[i] = d == 0, d > 0, d < 0
        if isinstance(xv, Fraction) and not math.isnan(d) and d != 0:
            lo, hi = _float64_bracket(xv)
            xa[i] = lo if d > 0 else hi


def ulp(x: Any, fmt: Any) -> np.ndarray:
    """The unit in the last place of ``x`` in ``fmt`` (elementwise, float64).

    The gap between the two consecutive values of ``fmt`` that bracket ``|x|``, the
    upper one strictly above ``|x|``: for a representable ``x`` that is the distance from
    ``|x|`` to the next larger magnitude (``numpy.spacing``), so ``ulp(1, fmt) == fmt.eps``
    and ``ulp(0, fmt)`` is the smallest positive value. At and beyond the largest finite
    value it is the gap just below it. Integers: 1. NaN and infinities give NaN. Integers
    beyond 2**53 (Python ints of any size included), Fractions and longdouble values are
    placed exactly.
    """
    f = _format(fmt)
    xa = np.asarray(np.abs(_as_f64(x, "x", f)))
    ex = _not_float64(x)
    if ex is not None:
        # |x| between two float64 values: the one below brackets it the same way in fmt.
        mask, vals = ex
        xa[mask] = [_float64_bracket(abs(v))[0] for v in vals]
    out = np.full(xa.shape, np.nan)
    fin = np.isfinite(xa)
    if fin.any():
        a = xa[fin]
        if isinstance(f, IntFormat):
            res = np.ones_like(a)
        else:
            lo_v = _round(a, f, "down", saturate=True)
            o = _ordinals(lo_v, f)
            # Posits never round a nonzero value to 0: below minpos "down" gives minpos.
            above = lo_v > a
            if above.any():
                o = np.where(above, o - 1, o)
                lo_v = np.where(above, _from_ordinals(o, f), lo_v)
            _, hi = _ordinal_limits(f)
            top = o >= hi
            nxt = _from_ordinals(np.where(top, o - 1, o + 1), f)
            res = np.where(top, lo_v - nxt, nxt - lo_v)
        out[fin] = res
    return out[()] if out.ndim == 0 else out
