"""Tools for testing code that uses low-precision formats.

- :func:`assert_ulp_close`: compare arrays in units in the last place of a format.
- :func:`encoding_class`: which kind of encoding a value of a format is (zero, subnormal, ...).
- :mod:`lowp.testing.strategies` (needs ``hypothesis``): strategies drawing exactly
  representable values of any format, biased to the edges of the format.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, Optional

import numpy as np

from .._formats import FloatFormat, Format, IntFormat, PositFormat, _has_nan, format as _format
from .._ulp import _as_f64, _not_float64, _ordinals, _representable, nextafter, ulp

__all__ = ["assert_ulp_close", "ulp_distance", "encoding_class", "ENCODING_CLASSES", "encoding_classes", "strategies"]

#: Every class :func:`encoding_class` can return.
ENCODING_CLASSES = ("zero", "negative_zero", "subnormal", "min_normal", "normal", "max", "nan", "inf", "min")


def encoding_classes(fmt: Any) -> frozenset[str]:
    """The encoding classes that values of ``fmt`` fall into (see :func:`encoding_class`)."""
    return _encoding_classes(_format(fmt))


@functools.lru_cache(maxsize=256)
def _encoding_classes(f: Format) -> frozenset[str]:
    if f.bits <= 16:
        # Small formats: classify every encoding (exact, and right for degenerate layouts).
        codes = np.arange(1 << f.bits, dtype=np.uint64).astype(f.storage_dtype)
        from .._convert import decode

        vals = decode(codes, f, np.float64)
        if isinstance(f, FloatFormat) and not f.subnormals:
            vals = vals[~((vals != 0) & (np.abs(vals) < f.min_normal))]
        return frozenset(encoding_class(float(v), f) for v in vals)
    if isinstance(f, IntFormat):
        return frozenset({"zero", "normal", "max", "min"} if f.signed else {"zero", "normal", "max"})
    if isinstance(f, PositFormat):
        return frozenset({"zero", "min_normal", "normal", "max", "nan"})
    assert isinstance(f, FloatFormat)
    c = {"zero", "min_normal", "normal", "max"}
    if f.nan != "fnuz":
        c.add("negative_zero")
    if f.subnormals and f.man_bits > 0:
        c.add("subnormal")
    if f.nan is not None:
        c.add("nan")
    if f.inf:
        c.add("inf")
    return frozenset(c)


def encoding_class(value: float, fmt: Any) -> str:
    """The kind of encoding the representable ``value`` has in ``fmt``.

    One of ``"zero"``, ``"negative_zero"``, ``"subnormal"``, ``"min_normal"`` (the
    smallest normal magnitude; posits: minpos), ``"normal"``, ``"max"`` (the largest
    finite magnitude), ``"nan"`` (posits: NaR), ``"inf"``, and for signed integers
    ``"min"`` (the most negative value, which has no positive counterpart). The sign is
    ignored except for zero. A value that ``fmt`` does not hold (not on its grid, beyond
    its range, an infinity or NaN of a format without them) raises ValueError.
    """
    f = _format(fmt)
    try:
        v = float(value)
    except OverflowError:
        raise ValueError(f"value: a {type(value).__name__} beyond float64's range, which no format holds") from None
    except (TypeError, ValueError):
        raise TypeError(f"value: expected a real number, got {type(value).__name__}") from None
    if np.isnan(v):
        if not _has_nan(f):
            raise ValueError(f"value: NaN, which {f!r} does not have")
        return "nan"
    if np.isinf(v):
        if not (isinstance(f, FloatFormat) and f.inf):
            raise ValueError(f"value: {v}, which {f!r} does not have (it has no infinities)")
        return "inf"
    exact_elsewhere = isinstance(value, Decimal) and Fraction(value) != Fraction(v)
    if exact_elsewhere or _not_float64(value) is not None or not _representable(np.array([v]), f)[0]:
        raise ValueError(f"value: {value!r} is not a value of {f!r} (expected one of its values; "
                         "lowp.round gives the nearest)")
    if v == 0:
        return "negative_zero" if np.signbit(v) and isinstance(f, FloatFormat) and f.nan != "fnuz" else "zero"
    if isinstance(f, IntFormat):
        if v == f.max:
            return "max"
        if v == f.min:  # type: ignore[attr-defined]
            return "min"
        return "normal"
    a = abs(v)
    if a == f.max:
        return "max"
    if a == f.min_normal:
        return "min_normal"
    if a < f.min_normal:
        return "subnormal"
    return "normal"


def ulp_distance(actual: Any, desired: Any, fmt: Any) -> Any:
    """Elementwise distance between ``actual`` and ``desired`` in ulps of ``fmt`` (float64).

    When both values are finite and representable in ``fmt`` it is the number of steps
    between them (how many times ``nextafter`` goes from one to the other; +0 and -0 are
    0 apart). A value between two consecutive values of ``fmt`` counts as the fraction of
    that step it lies past the lower one (beyond the largest finite value, in steps of the
    last gap), so the distance grows with ``|actual - desired|`` and is continuous in
    both. NaN against NaN and
    equal infinities are 0 apart; NaN against a number, or an infinity against anything
    else, is infinitely far. Values float64 cannot hold (integers beyond 2**53, longdouble
    values, Python ints beyond 64 bits, Fractions) are taken exactly: the distance is
    computed exactly and rounded once to float64. Scalars give a float64 scalar, as numpy's
    ufuncs do.
    """
    d = _distances(actual, desired, _format(fmt))[0]
    return d[()] if d.ndim == 0 else d


def _exact_entries(x: Any, shape: tuple[int, ...]) -> Optional[np.ndarray]:
    """An object array of ``shape``: the exact value (Fraction) where ``x`` holds a value
    float64 cannot, else None; or None when there is no such value."""
    e = _not_float64(x)
    if e is None:
        return None
    mask, vals = e
    out = np.full(mask.shape, None, object)
    flat = out.reshape(-1)
    for i, v in zip(np.flatnonzero(mask), vals):
        flat[i] = v
    return np.broadcast_to(out, shape)


def _distances(actual: Any, desired: Any, f: Format) -> tuple[np.ndarray, dict[tuple[int, ...], Fraction]]:
    """(:func:`ulp_distance` of ``actual`` and ``desired``, the exact distances (Fractions) of
    the elements where either value is not a float64, by index)."""
    a = _as_f64(actual, "actual")
    d = _as_f64(desired, "desired")
    try:
        a, d = np.broadcast_arrays(a, d)
    except ValueError:
        raise ValueError(f"actual: shape {a.shape} does not match desired's shape {d.shape}") from None
    dist = np.full(a.shape, np.inf)
    both_nan = np.isnan(a) & np.isnan(d)
    same_inf = np.isinf(a) & (a == d)
    dist[both_nan | same_inf] = 0.0
    exact: dict[tuple[int, ...], Fraction] = {}
    fin = np.isfinite(a) & np.isfinite(d)
    if fin.any():
        (oa, fa), (od, fd) = _fractional_ordinals(a[fin], f), _fractional_ordinals(d[fin], f)
        # |oa - od| passes int64 for 64-bit codes of opposite signs: the difference of the
        # larger and the smaller, taken modulo 2^64, is exact in uint64.
        steps = np.maximum(oa, od).astype(np.uint64) - np.minimum(oa, od).astype(np.uint64)
        sign = np.where(oa >= od, 1.0, -1.0)
        dist[fin] = np.abs(sign * steps.astype(np.float64) + (fa - fd))
        # (float64 rounds step counts past 2**53: the exact count is kept too.)
        big = (steps > np.uint64(1 << 53)) & (fa == 0) & (fd == 0)
        if big.any():
            for i, v in zip(np.argwhere(fin)[big], steps[big]):
                exact[tuple(int(j) for j in i)] = Fraction(int(v))
    ea, ed = _exact_entries(actual, a.shape), _exact_entries(desired, a.shape)
    if ea is None and ed is None:
        return dist, exact
    # Where a value is not a float64 (so a or d is only near it): the exact distance.
    where = np.zeros(a.shape, bool)
    for e in (ea, ed):
        if e is not None:
            where |= e != None  # noqa: E711 - elementwise on an object array
    for i in map(tuple, np.argwhere(where)):
        va = ea[i] if ea is not None and ea[i] is not None else float(a[i])
        vd = ed[i] if ed is not None and ed[i] is not None else float(d[i])
        if isinstance(va, float) and not math.isfinite(va) or isinstance(vd, float) and not math.isfinite(vd):
            dist[i] = np.inf  # NaN or an infinity against a finite value
            continue
        exact[i] = abs(_exact_fractional_ordinal(va, f) - _exact_fractional_ordinal(vd, f))
        try:
            dist[i] = float(exact[i])
        except OverflowError:  # (a distance past float64's range: an int beyond it)
            dist[i] = np.inf
    return dist, exact


def _fractional_ordinals(x: np.ndarray, f: Format) -> tuple[np.ndarray, np.ndarray]:
    """For finite float64 ``x``: (the ordinal of the largest value of ``f`` at or below
    ``x``, the fraction of the step to the next value that ``x`` lies past it). Beyond
    the largest finite value, from it in steps of the last gap (a negative fraction below
    the lowest)."""
    ords = np.zeros(x.shape, np.int64)
    frac = np.zeros(x.shape)
    rep = _representable(x, f)
    if rep.any():
        ords[rep] = _ordinals(x[rep], f)
    if not rep.all():
        v = x[~rep]
        top, last_gap = _top(f)
        beyond = np.abs(v) > top
        inside = v[~beyond]
        lo = np.where(v > 0, top, -top)
        gap = np.full(v.shape, last_gap)
        if inside.size:
            lo[~beyond] = nextafter(inside, -np.inf, f)
            gap[~beyond] = nextafter(inside, np.inf, f) - lo[~beyond]
        ords[~rep] = _ordinals(lo, f)
        frac[~rep] = (v - lo) / gap
    return ords, frac


def _exact_fractional_ordinal(v: Any, f: Format) -> Fraction:
    """:func:`_fractional_ordinals` of one value (a float or a Fraction), exactly."""
    if isinstance(v, float):
        if _representable(np.array([v]), f)[0]:
            return Fraction(int(_ordinals(np.array([v]), f)[0]))
        v = Fraction(v)
    top, last_gap = _top(f)
    if abs(v) > top:
        lo, gap = Fraction(top) if v > 0 else -Fraction(top), Fraction(last_gap)
    else:
        lo = Fraction(float(nextafter(v, -math.inf, f)))
        gap = Fraction(float(nextafter(v, math.inf, f))) - lo
    return int(_ordinals(np.array([float(lo)]), f)[0]) + (v - lo) / gap


def _top(f: Format) -> tuple[float, float]:
    """``f``'s largest finite value and the gap below it."""
    top = float(f.max)
    return top, top - float(nextafter(top, 0.0, f))


def assert_ulp_close(actual: Any, desired: Any, fmt: Any, ulps: float = 0, *, err_msg: str = "") -> None:
    """Raise AssertionError unless ``actual`` and ``desired`` are within ``ulps`` units in
    the last place of ``fmt`` everywhere (see :func:`ulp_distance`).

    ``ulps=0`` asks for equal values (NaN where the other has NaN, the same infinities;
    +0 equals -0). Shapes must broadcast. The message lists the worst elements. Values
    float64 cannot hold (integers beyond 2**53, longdouble values, Python ints beyond 64
    bits, Fractions) are compared exactly, not rounded to float64 first.
    """
    if isinstance(ulps, (bool, np.bool_)) or not isinstance(ulps, (int, float, np.integer, np.floating)):
        raise TypeError(f"ulps: expected a number, got {type(ulps).__name__}")
    if not ulps >= 0:
        raise ValueError(f"ulps: must be >= 0, got {ulps}")
    if not isinstance(err_msg, str):
        raise TypeError(f"err_msg: expected a str, got {type(err_msg).__name__}")
    try:
        ulps_f = float(ulps)
    except OverflowError:  # (an int beyond float64's range: every finite distance passes)
        ulps_f = math.inf
    f: Format = _format(fmt)
    dist, exact = _distances(actual, desired, f)
    # (An infinite distance, NaN or an infinity against another value, fails any ulps.)
    bad = np.asarray((dist > ulps_f) | np.isinf(dist))
    if exact:
        tol = Fraction(ulps) if isinstance(ulps, (int, np.integer)) or math.isfinite(ulps) else None
        for i, v in exact.items():
            bad[i] = tol is not None and v > tol
    if not bad.any():
        return
    a, d = np.broadcast_arrays(_as_f64(actual, "actual"), _as_f64(desired, "desired"))
    idx = np.argwhere(bad) if dist.ndim else np.zeros((1, 0), int)
    order = np.argsort(-dist[bad], kind="stable")[:5]
    lines = [f"Arrays are not within {ulps} ulp of {f!r}: {int(bad.sum())} of {dist.size} elements differ"]
    if err_msg:
        lines.append(err_msg)
    lines.append(f"max distance: {float(dist[bad].max())} ulp")
    for k in order:
        i = tuple(int(j) for j in idx[k])
        va, vd = _shown(actual, a, i), _shown(desired, d, i)
        lines.append(f"  at {i}: actual {va}, desired {vd}, {exact[i] if i in exact else float(dist[i])} ulp")
    raise AssertionError("\n".join(lines))


def _shown(x: Any, approx: np.ndarray, i: tuple[int, ...]) -> str:
    """The value of ``x`` at ``i`` for a message: exact where float64 cannot hold it."""
    e = _exact_entries(x, approx.shape)
    if e is not None and e[i] is not None:
        v = e[i]
        return str(v.numerator) if v.denominator == 1 else f"{v} (~{float(approx[i])!r})"
    return repr(float(approx[i]))


def __getattr__(name: str) -> Any:
    # The strategies need hypothesis; import them only when asked for.
    if name == "strategies":
        import importlib

        return importlib.import_module(".strategies", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
