"""Hypothesis strategies for values of any lowp format.

Every value drawn is exactly representable in the format: the strategies draw
*encodings* and decode them (exact), so they work the same for binary floats of any
layout, posits and integers. Draws are biased to where numerics break:

- edges: +-0, the smallest and largest subnormal, the smallest normal (posits: minpos),
  the largest finite value and its neighbour, 1 and its neighbours, NaN and +-inf where
  the format has them;
- subnormal encodings (floats with subnormals);
- ties: values that lie exactly halfway between two consecutive values of a format
  ``k`` bits narrower (the encodings ending in ``10...0``), which is where
  round-to-nearest must break ties; for a float these are midpoints of the same format
  with ``k`` fewer mantissa bits, for a posit the tie points of posit<n-k, es>;
- uniformly drawn encodings.

:func:`midpoints` draws the other kind of tie: the points halfway between two
consecutive values of ``fmt`` itself, which are not in ``fmt`` but are exact in a wider
format (float64 here), for testing rounding *into* ``fmt``.

Values are Python floats (exact: every lowp format up to 64 bits embeds in float64).
"""

from __future__ import annotations

import math

import functools
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .._args import boolean
from .._convert import cast, decode, encode
from .._formats import FloatFormat, Format, IntFormat, PositFormat, format as _format
from . import encoding_classes
from .._ulp import _from_ordinals, _ordinal_limits, _representable, nextafter

__all__ = ["values", "arrays", "midpoints", "encodings"]


@functools.lru_cache(maxsize=64)
def _table(f: Format) -> Optional[np.ndarray]:
    """Every value of a format of at most 16 bits, indexed by encoding (cached)."""
    if f.bits > 16:
        return None
    return decode(np.arange(1 << f.bits, dtype=np.uint64).astype(f.storage_dtype), f, np.float64)


def _decode1(code: int, f: Format) -> float:
    t = _table(f)
    if t is not None:
        return float(t[code])
    return float(decode(np.array([code], dtype=np.uint64).astype(f.storage_dtype), f, np.float64)[0])


def _accept(f: Format, allow_nan: bool, allow_infinity: bool, allow_subnormal: bool):
    """A predicate on decoded values: representable in ``f`` and allowed by the flags."""
    min_normal = f.min_normal
    flushes = isinstance(f, FloatFormat) and not f.subnormals

    def ok(v: float) -> bool:
        if v != v:
            return allow_nan
        if v in (np.inf, -np.inf):
            return allow_infinity
        if isinstance(f, FloatFormat) and v != 0 and abs(v) < min_normal:
            # Codes of "subnormals" in a format that flushes them decode to values the
            # format does not have.
            return allow_subnormal and not flushes
        return True

    return ok


def _edges(f: Format) -> list[float]:
    """The edge values of ``f`` (every encoding class it has), both signs."""
    if isinstance(f, IntFormat):
        lo, hi = int(f.min), int(f.max)  # type: ignore[attr-defined]
        vals = {0, 1, lo, hi, lo + 1, hi - 1}
        if f.signed:
            vals.add(-1)
        # Smallest magnitude first: hypothesis shrinks a sampled value toward the front.
        return sorted((float(v) for v in vals if lo <= v <= hi), key=lambda v: (abs(v), v < 0))
    cand = [f.min_normal, f.max, 1.0, f.min_subnormal]
    cand += [float(nextafter(f.max, 0.0, f)), float(nextafter(1.0, np.inf, f)), float(nextafter(1.0, -np.inf, f)),
             float(nextafter(f.min_normal, np.inf, f)), float(nextafter(f.min_normal, 0.0, f))]  # last: largest subnormal
    finite = np.array([v for v in cand if np.isfinite(v)] or [0.0])
    finite = finite[_representable(finite, f)]
    # Tiny formats can lack 1.0 or any subnormal: keep only values the format has.
    out: list[float] = [0.0, -0.0] + sorted(set(float(v) for v in finite if v > 0))
    out += [-v for v in out if v > 0]
    if "nan" in encoding_classes(f):  # posits: NaR; an ieee format without mantissa bits has none
        out.append(float("nan"))
    if isinstance(f, FloatFormat) and f.inf:
        out += [float("inf"), float("-inf")]
    return out


def _check_flags(**flags: Any) -> None:
    for k, v in flags.items():
        boolean(v, k)


def _uniform_bits(n: int) -> st.SearchStrategy[int]:
    """Integers of ``n`` uniformly random bits (shrinking to 0). ``st.integers(0, 2**n - 1)``
    favours small values, which for 32- and 64-bit codes are mostly subnormals."""
    if n <= 0:
        return st.just(0)
    mask = (1 << n) - 1
    k = (n + 7) // 8
    return st.binary(min_size=k, max_size=k).map(lambda b: int.from_bytes(b, "big") & mask)


# A magnitude is drawn as a few choices and a function of them (not a strategy), so that
# each branch of values() is one flat tuple mapped once: hypothesis copies the choices of
# a span into a span of the same kind nested in it (a map in a map, a tuple in a tuple),
# where they no longer line up, which skewed the draws.
_Draw = tuple[list[st.SearchStrategy[Any]], Callable[..., int]]


def _cells(m: int, cells: int) -> _Draw:
    """Codes ``0 .. m - 1`` drawn uniformly: one of ``cells`` equal slices of them, then a
    code in it. Smaller choices mean smaller codes, and the slice's index is one integer,
    which shrinks exactly: a failure shrinks into the slice of the least failing code or
    to the start of the next (one byte string over all the codes would shrink byte by
    byte, its first byte stopping where the rest still fails: up to a 256th of all the
    codes above it)."""
    c = min(cells, m)
    k = max(1, ((-(-m // c) - 1).bit_length() + 7) // 8)

    def pick(i: int, b: bytes) -> int:
        lo, hi = i * m // c, (i + 1) * m // c
        return lo + (int.from_bytes(b, "big") * (hi - lo) >> (8 * k))

    return [st.sampled_from(range(c)), st.binary(min_size=k, max_size=k)], pick


def _below(points: Sequence[int]) -> tuple[_Draw, _Draw]:
    """Codes up to one of ``points``: the index ``j`` of a point (in increasing order),
    then base-256 digits of a position in ``0 .. points[j]``.

    Returns two draws of the same choices: the first draws the digits, the second fixes
    them at 255, which is the last position, the point itself. So the second draws each
    point (from a finite set of choices, which hypothesis does not repeat: a few hundred
    draws hold every point), and a failure there shrinks as a draw of the first: the same
    choices give the same point, and its digits then shrink through the codes below it.
    (Through all of them: were the range the codes above the point before, the digits of a
    point just above another would not matter, would shrink to 0, and a smaller index then
    went to the bottom of the range below.)
    """
    pts = sorted(set(points))
    nd = max(1, (pts[-1].bit_length() + 7) // 8)

    def pick(j: int, *digits: int) -> int:
        return int.from_bytes(bytes(digits), "big") * (pts[j] + 1) >> (8 * nd)

    # (The index is drawn by sampled_from, the digits by integers: hypothesis also copies
    # choices between spans of the same kind side by side.)
    index = st.sampled_from(range(len(pts)))
    return ([index] + [st.integers(0, 255)] * nd, pick), ([index] + [st.integers(255, 255)] * nd, pick)


def _magnitudes(f: Format) -> int:
    """How many magnitude codes :func:`_signed_value` takes for ``f``."""
    if isinstance(f, IntFormat):
        return max(-int(f.min), int(f.max)) + 1  # type: ignore[attr-defined]
    return 1 << (f.bits - 1)


def _magnitude_of(f: Format, v: float) -> int:
    """The magnitude code of a value ``v`` of ``f`` (NaR and the NaN of fnuz formats: 0,
    which they take with the sign)."""
    if isinstance(f, IntFormat):
        return abs(int(v))
    code = int(encode(np.array([v], dtype=np.float64), f)[0])
    top = 1 << (f.bits - 1)
    if isinstance(f, PositFormat) and code >= top:
        return (2 * top - code) & (top - 1)
    return code & (top - 1)


def _signed_value(f: Format, neg: bool, c: int) -> float:
    """The value of sign ``neg`` and magnitude code ``c``: sign and magnitude, rather than a
    code of ``f.bits`` bits, so that draws shrink toward + and toward 0, the simplest value
    (a code would shrink negative values toward the most negative)."""
    if isinstance(f, IntFormat):
        lo, hi = int(f.min), int(f.max)  # type: ignore[attr-defined]
        return float(-c if neg and lo < 0 else min(c, hi))
    top = 1 << (f.bits - 1)
    if neg:
        # (posits: two's complement, and -0 is NaR)
        c = ((2 * top - c) if c else top) if isinstance(f, PositFormat) else top | c
    return _decode1(c, f)


def encodings(fmt: Any) -> st.SearchStrategy[int]:
    """Uniformly drawn encodings (unsigned integers of ``fmt.bits`` bits), invalid ones included."""
    f = _format(fmt)
    return _uniform_bits(f.bits)


def values(fmt: Any, *, allow_nan: bool = True, allow_infinity: bool = True, allow_subnormal: bool = True,
           allow_negative_zero: bool = True) -> st.SearchStrategy[float]:
    """Values (Python floats) exactly representable in ``fmt``, biased to the edges.

    ``fmt`` is any lowp format, format name or dtype. ``allow_nan``/``allow_infinity``
    only matter for formats that have NaN (posits: NaR) or infinities;
    ``allow_subnormal=False`` leaves out nonzero values below the smallest normal.
    See the module docs for what the draws are biased to.
    """
    f = _format(fmt)
    _check_flags(allow_nan=allow_nan, allow_infinity=allow_infinity, allow_subnormal=allow_subnormal,
                 allow_negative_zero=allow_negative_zero)
    ok = _accept(f, allow_nan, allow_infinity, allow_subnormal)
    if not allow_negative_zero or (isinstance(f, FloatFormat) and f.nan == "fnuz") or not isinstance(f, FloatFormat):
        ok0 = ok

        def ok(v: float, _ok=ok0) -> bool:  # type: ignore[misc]
            return _ok(v) and not (v == 0 and np.signbit(v))

    n = f.bits
    edge_vals = [v for v in _edges(f) if ok(v)]
    m = _magnitudes(f)

    def signed(draw: _Draw, offset: int = 0) -> st.SearchStrategy[float]:
        parts, pick = draw
        return st.tuples(st.booleans(), *parts).map(lambda t: _signed_value(f, t[0], pick(*t[1:]) + offset))

    # Every branch draws a sign and a magnitude whose smaller choices mean smaller
    # magnitudes, and the edges shrink into the branch before them (see _below): a failure
    # shrinks toward small magnitudes wherever it was drawn, not only to smaller edges.
    below, edges = _below([_magnitude_of(f, v) for v in edge_vals] or [0])
    if isinstance(f, IntFormat):  # (integers shrink exactly)
        uniform = st.integers(int(f.min), int(f.max)).map(float).filter(ok)  # type: ignore[attr-defined]
    else:
        uniform = signed(_cells(m, 256)).filter(ok)
    branches: list[st.SearchStrategy[float]] = [uniform, signed(below).filter(ok), signed(edges).filter(ok)]
    if isinstance(f, FloatFormat) and f.subnormals and f.man_bits > 0 and allow_subnormal:
        branches.append(signed(_cells((1 << f.man_bits) - 1, 256), offset=1))
    # Ties of narrower formats: encodings ending in a one followed by k-1 zeros; drawn as
    # a magnitude rounded down to such an encoding, and k last, so that a smaller k moves
    # the value by less than a step of the narrower format.
    kmax = f.man_bits if isinstance(f, FloatFormat) else (n - 2 if isinstance(f, PositFormat) else 0)
    kmax = min(kmax, 12)
    if kmax >= 1:
        parts, pick = _cells(m, 256)

        def tie(t: tuple[Any, ...]) -> float:
            neg, *choices, k = t
            c, h = pick(*choices), 1 << (k - 1)
            return _signed_value(f, neg, ((c - h) >> k << k) + h if c >= h else h)

        branches.append(st.tuples(st.booleans(), *parts, st.integers(1, kmax)).map(tie).filter(ok))
    return st.one_of(branches)


def arrays(fmt: Any, shape: Union[int, Sequence[int], st.SearchStrategy], *, dtype: Any = np.float64,
           allow_nan: bool = True, allow_infinity: bool = True, allow_subnormal: bool = True,
           allow_negative_zero: bool = True, elements: Optional[st.SearchStrategy] = None,
           unique: bool = False) -> st.SearchStrategy[np.ndarray]:
    """Arrays of ``shape`` (an int, a tuple or a strategy for one, as
    ``hypothesis.extra.numpy.arrays``) whose elements are drawn by :func:`values`.

    ``dtype`` is float64 (default), float32 (only for formats whose values all fit
    float32 exactly), or the numpy dtype of ``fmt`` itself (a lowp or ml_dtypes dtype,
    float16, int8): the values are then stored in that dtype (exactly).
    """
    f = _format(fmt)
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: expected a numpy dtype, got {dtype!r}") from None
    if elements is None:
        elements = values(f, allow_nan=allow_nan, allow_infinity=allow_infinity, allow_subnormal=allow_subnormal,
                          allow_negative_zero=allow_negative_zero)
    if dt == np.float64:
        return hnp.arrays(np.float64, shape, elements=elements, unique=unique)
    if dt == np.float32:
        # Signed 25-bit integers are the one format that _fits_f32 (which also stands for
        # the kernels' float32 arithmetic) leaves out although every value is a float32.
        if not (f._fits_f32() or (isinstance(f, IntFormat) and f.signed and f.bits == 25)):
            raise TypeError(f"dtype: float32 cannot hold every value of {f!r} exactly; use float64")
        return hnp.arrays(np.float64, shape, elements=elements, unique=unique).map(lambda a: a.astype(np.float32))
    try:
        same = _format(dt) == f
    except (TypeError, ValueError):
        same = False
    if not same:
        raise TypeError(f"dtype: {dt} does not store {f!r}; accepted: float64, float32 or the format's own dtype")
    return hnp.arrays(np.float64, shape, elements=elements, unique=unique).map(lambda a: cast(a, dt))


def midpoints(fmt: Any, *, allow_overflow: bool = True) -> st.SearchStrategy[float]:
    """The ties of ``fmt`` (float64): the points where rounding to nearest goes by the tie
    rule, between two consecutive finite values.

    For floats and integers these lie exactly halfway. Posits round by their bit strings,
    so a posit's tie is the value of the bit string one bit longer (the posit of n + 1 bits
    between the two), which is halfway only where the two share their exponent; the
    neighbours of zero have no tie (a posit never rounds to zero). With ``allow_overflow``
    the draws include the point half an ulp above a float's largest finite value (its
    overflow threshold; floats with neither infinity nor NaN saturate and have none). Needs a format with at least one fewer significand bit than
    float64 (every lowp format but float64 itself) whose ties lie in float64's range
    (ValueError otherwise).
    """
    f = _format(fmt)
    _check_flags(allow_overflow=allow_overflow)
    if isinstance(f, FloatFormat) and (f.precision > 52 or f.emax > 1023 or f.emin - f.man_bits - 1 < -1074):
        # (Too many digits, beyond float64's range, or halves of the smallest gap below it.)
        raise ValueError(f"fmt: midpoints of {f!r} are not exact in float64")
    lo, hi = _ordinal_limits(f)
    if isinstance(f, PositFormat):
        n, es = f.nbits, f.es
        # Ordinals lo .. hi - 1 open the gaps; -1 and 0 (the gaps beside zero) have no tie.
        if hi - 3 < lo:
            raise ValueError(f"fmt: {f!r} has no ties (its only gaps are beside zero)")
        return st.integers(lo, hi - 3).map(lambda j: _posit_value(2 * (j if j < -1 else j + 2) + 1, n + 1, es))

    def mid(o: int) -> float:
        a, b = _from_ordinals(np.array([o, o + 1], dtype=np.int64), f)
        if not np.isfinite(b):
            # Past the top: the overflow threshold max + ulp/2, the unit of max's binade
            # (as if the exponent went on; twice the gap below max where max opens it),
            # added as a half (max + ulp can lie beyond float64's range).
            return float(a + math.ldexp(1.0, math.frexp(a)[1] - 2 - f.man_bits))
        return float(a + (b - a) / 2)

    top = hi if allow_overflow and isinstance(f, FloatFormat) and (f.inf or f.nan is not None) else hi - 1
    return st.integers(lo, top).map(mid)


def _posit_value(code: int, n: int, es: int) -> float:
    """The value of the ``n``-bit posit (exponent size ``es``) with two's-complement code
    ``code`` (exact in float64 for n up to 33)."""
    mask = (1 << n) - 1
    code &= mask
    if code == 0:
        return 0.0
    if code == 1 << (n - 1):
        return math.nan
    neg = code >> (n - 1) & 1
    if neg:
        code = -code & mask
    body = n - 1  # bits after the sign
    first = code >> (body - 1) & 1
    run = 0
    while run < body and (code >> (body - 1 - run) & 1) == first:
        run += 1
    regime = run - 1 if first else -run
    rest = max(body - run - 1, 0)  # bits after the regime's terminating bit
    eb = min(es, rest)
    e = (code >> (rest - eb) & ((1 << eb) - 1)) << (es - eb)
    fb = rest - eb
    frac = code & ((1 << fb) - 1)
    v = math.ldexp(1.0 + frac / (1 << fb), regime * (1 << es) + e)
    return -v if neg else v
