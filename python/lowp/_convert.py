"""round / cast / encode / decode: the array entry points of the conversion kernels."""

from __future__ import annotations

import functools
import math
import sys
from fractions import Fraction
from typing import Any, Callable, Optional, TypeVar, Union

import numpy as np

from . import _lowp
from ._args import boolean
from ._memory import result_empty
from ._formats import (Format, FloatFormat, PositFormat, _canonical, _code_format, _dtype_registry, _has_nan,
                       format as _format)

__all__ = ["round", "cast", "encode", "decode", "ROUNDING_MODES", "nextafter_scalar"]

ROUNDING_MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd", "stochastic")

SeedLike = Union[None, int, np.integer, np.random.Generator]


def _check_rounding(rounding: Any) -> str:
    if not isinstance(rounding, str) or rounding not in ROUNDING_MODES:
        raise ValueError(f"rounding: unknown mode {rounding!r}; accepted: {', '.join(map(repr, ROUNDING_MODES))}")
    return rounding


def _seed_word(seed: SeedLike, rounding: str) -> int:
    """A 64-bit key from ``seed`` (an int >= 0 or a numpy Generator; None: fresh entropy).
    Deterministic roundings draw nothing (a Generator is left as it is): 0, the seed checked."""
    if rounding != "stochastic" and (seed is None or isinstance(seed, np.random.Generator)):
        return 0
    if seed is None:
        return int(np.random.default_rng().integers(0, 2**63, dtype=np.int64)) * 2 + 1
    if isinstance(seed, np.random.Generator):
        return int(seed.integers(0, 2**64, dtype=np.uint64))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed: expected None, an int or a numpy.random.Generator, got {type(seed).__name__}")
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed: must be in [0, 2**64), got {seed}")
    return seed if rounding == "stochastic" else 0


_F = TypeVar("_F", bound=Callable[..., Any])


def _keeps_generator_on_error(fn: _F) -> _F:
    """``fn`` (whose ``seed`` is keyword-only), with a numpy Generator passed as ``seed``
    put back as it was when the call raises: a refused call draws nothing, as numpy's
    own Generator methods check their arguments first."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        g = kwargs.get("seed")
        if not isinstance(g, np.random.Generator):
            return fn(*args, **kwargs)
        state = g.bit_generator.state
        try:
            return fn(*args, **kwargs)
        except BaseException:
            g.bit_generator.state = state
            raise

    return wrapper  # type: ignore[return-value]


def _rbits(rbits: Any, dtype: np.dtype) -> int:
    if rbits is None:
        return 32 if dtype == np.float32 else 64
    if isinstance(rbits, (bool, np.bool_)) or not isinstance(rbits, (int, np.integer)):
        raise TypeError(f"rbits: expected None or an int, got {type(rbits).__name__}")
    if not 1 <= int(rbits) <= 64:
        raise ValueError(f"rbits: must be in 1..64, got {rbits}")
    return int(rbits)




def _contiguous(a: np.ndarray) -> np.ndarray:
    """C-contiguous and aligned, keeping 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def _int_to_f64(a: np.ndarray) -> np.ndarray:
    """Integers to float64 rounded to odd (truncate, then set the last kept bit when
    anything was cut). A later rounding to a format of at most 50 significant bits is
    then correctly rounded in every mode, as if from the exact integer (no double rounding)."""
    if a.dtype.itemsize < 8:
        return a.astype(np.float64)  # exact
    u = a.view(np.uint64)
    neg = a < 0 if a.dtype.kind == "i" else np.zeros(a.shape, bool)
    with np.errstate(over="ignore"):  # (wrapping is the point; 0-d values would warn)
        mag = np.where(neg, ~u + np.uint64(1), u)  # |a| in uint64 (2^63 for the most negative int64)
    e = np.frexp(mag.astype(np.float64))[1]  # bit length of |a| (one more if it rounded up)
    shift = np.maximum(e - 53, 0).astype(np.uint64)
    kept = (mag >> shift) << shift  # truncated to at most 53 significant bits
    jam = (kept != mag).astype(np.uint64) << shift  # sticky: force the last kept bit to 1
    v = (kept | jam).astype(np.float64)  # exact
    return np.where(neg, -v, v)


def _longdouble_to_f64_odd(a: np.ndarray) -> np.ndarray:
    """longdouble values as float64 rounded to odd (their last bit set where inexact),
    the finite ones beyond float64's range as its largest value of their sign: one
    more rounding to at most 51 significant bits is then the values' own rounding."""
    with np.errstate(over="ignore"):
        f = a.astype(np.float64)
    big = np.isinf(f) & np.isfinite(a)
    f[big] = np.copysign(np.finfo(np.float64).max, f[big])
    fin = np.isfinite(a)
    r = np.where(fin, a, 0) - np.where(fin, f, 0).astype(a.dtype)  # exact: f is a neighbour of a
    fix = (r != 0) & ((f.view(np.uint64) & 1) == 0)
    f[fix] = np.nextafter(f[fix], np.where(r[fix] > 0, np.inf, -np.inf))
    return f


def _wide_exact(a: np.ndarray, fmt: Format, rounding: str, exact: Any) -> np.ndarray:
    """64-bit integers or longdouble values (``exact(v)``: the value as an int or Fraction,
    None when not finite) for a format of 52 or 53 significant bits, where rounding to odd
    at float64's 53 would round twice: as float64, each value float64 does not hold is
    first rounded into ``fmt`` exactly with ``rounding`` (the core then keeps it)."""
    with np.errstate(over="ignore"):
        f = a.astype(np.float64)
    if not isinstance(fmt, FloatFormat) or rounding == "stochastic":
        return f
    if a.dtype.kind in "iu":
        # Beyond 2**53 in magnitude (the candidates), then compared exactly as Python ints.
        cand = (a > 2**53) | (a < -(2**53)) if a.dtype.kind == "i" else a > 2**53
    else:
        cand = np.isfinite(a) & ((f.astype(a.dtype) != a) | np.isinf(f))
    for i in zip(*np.nonzero(cand)) if a.ndim else ([()] if cand else []):
        v = exact(a[i])
        if v is not None and (not np.isfinite(f[i]) or Fraction(v) != Fraction(float(f[i]))):
            f[i] = _round_exact(Fraction(v), fmt, rounding)
    return f


def _round_exact(v: Fraction, fmt: FloatFormat, rounding: str) -> float:
    """The nonzero ``v`` rounded into ``fmt`` with a deterministic ``rounding``, as a float64
    that the core's rounding keeps (past the largest value: a value it overflows alike;
    below the smallest normal of a format without subnormals: a float64 it rounds as v)."""
    neg = v < 0
    a = -v if neg else v
    if not fmt.subnormals and a < Fraction(2) ** fmt.emin:
        # Between zero and the smallest normal, m: a float64 in the same place relative to
        # m / 2 (below, on, above), which the core rounds as it rounds v in every mode.
        m = Fraction(2) ** fmt.emin
        proxy = m / 4 if a * 2 < m else m / 2 if a * 2 == m else m * 3 / 4
        return math.copysign(float(proxy), -1.0 if neg else 1.0)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    q = max(e - fmt.man_bits, fmt.emin - fmt.man_bits)  # the unit at a (subnormal units below emin)
    unit = Fraction(2) ** q
    k = a.numerator * unit.denominator // (a.denominator * unit.numerator)
    r = a - k * unit
    # The parity of the code below a: its last mantissa bit, or without mantissa bits its
    # exponent field's (e - emin + 1 for a normal a).
    odd = (e - fmt.emin + 1) % 2 == 1 if fmt.man_bits == 0 and e >= fmt.emin else k % 2 == 1
    up = {"toward_zero": False, "nearest_even": r * 2 > unit or (r * 2 == unit and odd),
          "nearest_away": r * 2 >= unit, "odd": r != 0 and not odd,
          "up": r != 0 and not neg, "down": r != 0 and neg}[rounding]
    c = (k + up) * unit
    if c > Fraction(fmt.max):
        # Overflow: what the core makes of a value past the largest in this mode.
        inf = rounding in ("nearest_even", "nearest_away") or (rounding == "up" and not neg) or (rounding == "down" and neg)
        return -math.inf if neg and inf else math.inf if inf else math.copysign(fmt.max, -1.0 if neg else 1.0)
    return math.copysign(float(c), -1.0 if neg else 1.0)  # (a zero keeps v's sign)


def _stochastic_exact(src: np.ndarray, a: np.ndarray, fmt: Format, key: int, nb: int) -> np.ndarray:
    """Stochastic rounding of 64-bit integers and longdouble values float64 does not hold
    (``src``, native order; ``a``: float64 as the core will read them), into a float
    format: float64 keeps only
    52 - p bits of such a value's place between its two neighbours in a format of p
    significant bits, which would bias the draw (2**60 + 1 into FloatFormat(11, 50)
    rounded up a quarter of the time). Those values are rounded here from their exact
    place, with ``nb`` bits drawn for each from a generator keyed by ``key`` in flat index
    order (reproducible whatever the threads), and handed to the core as the chosen
    neighbour, which it keeps."""
    wide = src.dtype.kind in "iu" and src.dtype.itemsize == 8 or src.dtype.kind == "f" and src.dtype.itemsize > 8
    if not wide or not isinstance(fmt, FloatFormat) or a.dtype != np.float64 or not a.size:
        return a
    flat = src.reshape(-1)
    if src.dtype.kind in "iu":
        big = (flat > 2**53) | (flat < -(2**53)) if src.dtype.kind == "i" else flat > 2**53
        cand = np.flatnonzero(big)
        exact: Any = lambda v: Fraction(int(v))
    else:
        with np.errstate(over="ignore"):
            f64 = flat.astype(np.float64)
        cand = np.flatnonzero(np.isfinite(f64) & (f64.astype(flat.dtype) != flat))
        exact = lambda v: Fraction(*v.as_integer_ratio())
    if not cand.size:
        return a
    words = np.random.default_rng([key, 0x5354_4f43]).integers(0, 2**64, size=flat.size, dtype=np.uint64)
    out = np.array(a, np.float64, copy=True).reshape(-1)
    top = Fraction(fmt.max)
    for i in cand:
        v = exact(flat[i])
        mag = abs(v)
        if mag < Fraction(fmt.min_normal) or mag >= top:
            continue  # (the core's rounding of the float64: below the normal range or at the top)
        lo = Fraction(_round_exact(mag, fmt, "toward_zero"))
        if lo == mag:
            continue
        hi = Fraction(_round_exact(mag, fmt, "up"))  # (at most max: mag lies below it)
        # Rounds away when the nb drawn bits lie below the top nb bits of the place.
        t = ((mag - lo) * 2**nb / (hi - lo)).__floor__()
        r = int(words[i]) >> (64 - nb)
        out[i] = math.copysign(float(hi if r < t else lo), -1.0 if v < 0 else 1.0)
    return out.reshape(a.shape)


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` in the machine's byte order: numpy's own types by a cast, the low-precision
    dtypes (1, 2 or 4 bytes) by swapping the bytes of their codes, which needs no cast
    of theirs. A view whose byte strides are not whole elements (legal in numpy, made
    with ``as_strided`` or ``np.ndarray(..., strides=)``) is copied: the core steps in
    elements."""
    dt = a.dtype
    if dt.isnative:
        if dt.itemsize > 1 and any(st % dt.itemsize for st, n in zip(a.strides, a.shape) if n > 1):
            return _contiguous(a)
        return a
    if dt.kind in "biufc":
        return a.astype(dt.newbyteorder("="))
    codes = _contiguous(a).view(np.dtype(f"u{dt.itemsize}"))
    return codes.byteswap().view(dt.newbyteorder("="))


def _two_product(a: np.ndarray, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(p, e)`` with ``p = a * b`` rounded and ``p + e`` the exact product (Dekker's
    splitting, no FMA needed; exact away from float64's overflow and underflow, where
    ``e`` comes out non-finite or loses bits)."""
    split = 134217729.0  # 2**27 + 1
    p = a * b
    ta, tb = split * a, split * b
    ah, bh = ta - (ta - a), tb - (tb - b)
    al, bl = a - ah, b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _to_odd(p: np.ndarray, err: np.ndarray) -> np.ndarray:
    """``p`` (the rounded float64 result) made odd where the exact result lies ``err``
    away from it: the float64 on that side whose last bit is 1."""
    p = np.array(p, np.float64)
    err = np.broadcast_to(err, p.shape)
    even = (p.view(np.int64) & 1) == 0
    fix = even & (err != 0) & np.isfinite(err) & np.isfinite(p)
    if fix.any():
        p[fix] = np.nextafter(p[fix], np.where(err[fix] > 0, np.inf, -np.inf))
    return p


def _scaled_to_odd(t: np.ndarray, k: np.ndarray) -> np.ndarray:
    """``t * 2**k`` for a result rounded to odd at ``t``'s precision: exact where that is a
    normal float64; where it falls below float64's subnormals, the smallest subnormal of
    its sign (rounded to odd, not to zero: the directed modes see a nonzero value)."""
    r = np.ldexp(t, k)
    return np.where((r == 0) & (t != 0), np.copysign(np.float64(5e-324), t), r)


def _mul_to_odd(a: Any, b: Any) -> np.ndarray:
    """``a * b`` (float64, broadcast) rounded to odd: the exact product, or of the two
    float64s around it the one whose last bit is 1, so that rounding it once more into a
    format of at most 51 significand bits (any rounding mode) rounds the exact product
    once. The significands are multiplied (frexp: exact, far from overflow and
    underflow) and the exponents added back, exactly wherever the result is a normal
    float64; past float64's range it is inf, as ``a * b``."""
    ma, ea = np.frexp(np.asarray(a, np.float64))
    mb, eb = np.frexp(np.asarray(b, np.float64))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        p, e = _two_product(ma, mb)
        return _scaled_to_odd(_to_odd(p, e), ea + eb)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(s, e)`` with ``s = a + b`` rounded and ``s + e`` the exact sum (Knuth's two-sum;
    ``e`` is not finite where ``s`` overflows)."""
    s = a + b
    back = s - a
    return s, (a - (s - back)) + (b - back)


def _add_to_odd(a: Any, b: Any) -> np.ndarray:
    """``a + b`` (float64, broadcast) rounded to odd, as :func:`_mul_to_odd`: the error
    of the rounded sum is exact (two-sum) and gives the side of the exact sum."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # (an overflow to inf: the caller's to refuse)
        return _to_odd(*_two_sum(a, b))


def _div_to_odd(a: Any, b: Any) -> np.ndarray:
    """``a / b`` (float64, broadcast, b nonzero) rounded to odd, as :func:`_mul_to_odd`:
    of the significands, whose remainder ``a - q*b`` is exact (Sterbenz: ``q*b`` lies
    within a factor 2 of ``a``) and says by its sign on which side of q the quotient
    lies."""
    ma, ea = np.frexp(np.asarray(a, np.float64))
    mb, eb = np.frexp(np.asarray(b, np.float64))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        q = ma / mb
        p, e = _two_product(q, mb)
        r = (ma - p) - e
        return _scaled_to_odd(_to_odd(q, r * np.sign(mb)), ea - eb)


def _refuse_masked(x: Any, arg: str) -> None:
    """Masked arrays are refused: their masked elements' hidden values would be used."""
    ma = sys.modules.get("numpy.ma")  # (a masked array means numpy.ma is loaded)
    if ma is not None and isinstance(x, ma.MaskedArray):
        raise TypeError(f"{arg}: masked arrays are not supported (the values under the mask would be used); "
                        f"pass {arg}.filled(value) or {arg}.compressed()")


def _array_arg(x: Any, arg: str) -> np.ndarray:
    """``x`` as an array (itself if it is one); what numpy cannot read as one (ragged
    nested sequences) and masked arrays raise TypeError naming ``arg``."""
    if isinstance(x, np.ndarray):
        if type(x) is not np.ndarray:
            _refuse_masked(x, arg)
        return x
    try:
        return np.asarray(x)
    except Exception as e:  # e.g. ragged nested sequences
        raise TypeError(f"{arg}: cannot be read as a numeric array: {e}") from None


# ml_dtypes' types without a lowp format, named where an argument of one is refused.
_NO_FORMAT = " (not ml_dtypes' float8_e8m0fnu, float8_e5m3fnu, int1 or uint1, which have no lowp format)"


def _distinct(x: np.ndarray) -> np.ndarray:
    """``x`` with its broadcast axes (stride 0) cut to one element: its distinct values."""
    return x[tuple(slice(0, 1) if st == 0 and n > 1 else slice(None) for st, n in zip(x.strides, x.shape))]


def _sub_byte_codes(v: np.ndarray, f: Format, dt: np.dtype, arg: str) -> np.ndarray:
    """``v``, the codes of an array of dtype ``dt`` viewed as ``f``'s storage: ml_dtypes'
    4- and 6-bit floats and narrow integers store a code in the low bits of a byte, and
    other bytes are no values (ValueError naming ``arg``)."""
    if f.bits < 8 * v.dtype.itemsize and v.size:
        top = int(_distinct(v).max())
        if top >> f.bits:
            raise ValueError(f"{arg}: codes of {dt} lie in 0..{(1 << f.bits) - 1}; got {top}")
    return v


def _as_float_array(x: Any, arg: str = "x", fmt: Optional[Format] = None, rounding: Optional[str] = None) -> np.ndarray:
    """``x`` as a C-contiguous float32 or float64 array (low-precision dtypes are decoded exactly;
    64-bit integers beyond 2**53, and longdouble values, are rounded to odd when ``fmt`` is
    narrow enough for that to be exact, else into ``fmt`` with ``rounding`` exactly)."""
    a = _native(_array_arg(x, arg))
    dt = a.dtype
    if dt == np.float32 or dt == np.float64:
        return _contiguous(a)
    f = _code_format(dt)
    if f is not None:
        bits = _contiguous(a).view(f.storage_dtype)
        try:
            return decode(bits, f, dtype=np.float64 if not f._fits_f32() else np.float32)
        except ValueError:
            _sub_byte_codes(bits, f, dt, arg)  # (the same refusal, naming the argument)
            raise
    if dt == np.float16:
        return a.astype(np.float32)
    if dt.kind in "iu" and fmt is not None and _significand_bits(fmt) <= 51:
        return _int_to_f64(a)
    if dt.kind in "iu" and fmt is not None and dt.itemsize == 8 and rounding is not None:
        return _wide_exact(a, fmt, rounding, lambda v: int(v))
    if dt.kind in "iub":
        return a.astype(np.float64)
    if dt.kind == "f" and fmt is not None and _significand_bits(fmt) <= 51 and _unit_exp(fmt) >= -1072:  # longdouble
        # (Rounded to odd, float64 keeps two bits below the format's finest unit, also on
        # its own subnormal grid of 2^-1074: formats whose unit is finer go the exact way.)
        return _longdouble_to_f64_odd(_contiguous(a))
    if dt.kind == "f" and fmt is not None and rounding is not None:
        return _wide_exact(a, fmt, rounding, lambda v: Fraction(*v.as_integer_ratio()) if np.isfinite(v) else None)
    if dt.kind == "f":
        return a.astype(np.float64)
    raise TypeError(f"{arg}: unsupported dtype {dt}; accepted: float16/32/64, integers, bool, "
                    f"and the low-precision dtypes of lowp and ml_dtypes{_NO_FORMAT}")


def _unit_exp(f: Format) -> int:
    """The exponent of the finest step between values of ``f`` (floats: of the subnormal
    grid, or of the smallest binade without subnormals)."""
    if isinstance(f, FloatFormat):
        return f.emin - f.man_bits
    return math.frexp(float(f.min_subnormal))[1] - 1 if f.min_subnormal else 0


def _significand_bits(f: Format) -> int:
    if isinstance(f, FloatFormat):
        return f.man_bits + 1
    if isinstance(f, PositFormat):
        return max(f.nbits - 3 - f.es, 1) + 1
    return f.bits  # integers


def _check_out(out: Any, shape: tuple, dtype: np.dtype) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out: expected a numpy array, got {type(out).__name__}")
    _refuse_masked(out, "out")
    if out.shape != shape:
        raise ValueError(f"out: shape {out.shape} does not match {shape}")
    if out.dtype.newbyteorder("=") != dtype:
        raise TypeError(f"out: dtype {out.dtype} must be {dtype}")
    if not out.flags.writeable:
        raise ValueError("out: is read-only")
    _refuse_overlapping(out)
    return out


def _refuse_overlapping(out: np.ndarray) -> None:
    """An ``out`` whose elements overlap (a zero stride along an axis of more than one
    element) is refused: every element would be written to the same place."""
    # (numpy gives arrays without elements zero strides.)
    if out.size and any(st == 0 for st, n in zip(out.strides, out.shape) if n > 1):
        raise ValueError("out: must not have zero strides (overlapping elements)")


def _into(res: np.ndarray, src: np.ndarray, call: Any, keep: bool = False) -> Any:
    """``call(dst)`` writing into ``res``; through a temporary when ``res`` overlaps the
    input (``out=x`` rounds in place; the kernels never see aliased buffers), is not a
    C-contiguous, aligned array in the machine's byte order (which the kernels write), or
    ``keep`` asks that a failure leave ``res`` as it was: copied back only when the call
    reports no failure (a false result). (Otherwise a call that fails may have written
    part of ``res``.)"""
    if keep or not (res.flags.c_contiguous and res.flags.aligned and res.dtype.isnative) \
            or np.may_share_memory(res, src):
        tmp = np.empty(res.shape, res.dtype.newbyteorder("="))
        r = call(tmp)
        if not r:
            res[...] = tmp
        return r
    return call(res)


def _prepare(fmt: Any, rounding: Any, saturate: Any) -> tuple[Format, str, bool]:
    f = _format(fmt)
    r = _check_rounding(rounding)
    return f, r, boolean(saturate, "saturate")


def _raise_nan(f: Format, name: str = "x") -> None:
    raise ValueError(f"{name}: contains NaN, which {f!r} cannot represent")


@_keeps_generator_on_error
def round(x: Any, fmt: Any, rounding: str = "nearest_even", *, saturate: bool = False, subnormals: bool = True,
          seed: SeedLike = None, rbits: Optional[int] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Round ``x`` to values representable in ``fmt``, returned as float32 for float32 and
    the inputs it holds exactly (float16, bf16, fp8, posit8/16) and as float64 for the
    others (float64, integers, longdouble, posit32). From float32 into a format whose
    range passes float32's, or of more than 24 significant bits, the values are given as
    float32 holds them (infinities, zeros, float32's precision): pass float64, or use
    :func:`encode`.

    Rounding from float64 is correct rounding (never through float32). ``saturate`` clamps
    results (infinities included) to +-max; ``subnormals=False`` flushes results below the
    smallest normal to 0 or the smallest normal (by ``rounding``). Stochastic rounding uses
    ``rbits`` random bits (default 32 for float32 input, 64 for float64) drawn from ``seed``
    (an int or a numpy Generator) and is reproducible at any thread count and on every
    path. ``out``: an array of the result's shape and dtype to write into.
    """
    f, r, sat = _prepare(fmt, rounding, saturate)
    if not boolean(subnormals, "subnormals") and isinstance(f, FloatFormat) and f.subnormals:
        f = f.replace(subnormals=False)
    src = _native(_array_arg(x, "x"))
    a = _as_float_array(src, fmt=f, rounding=r)
    key = _seed_word(seed, r)
    nb = _rbits(rbits, a.dtype)
    if r == "stochastic":
        a = _stochastic_exact(src, a, f, key, nb)
    if out is None:
        res = result_empty(a.shape, a.dtype)
    else:
        res = _check_out(out, a.shape, a.dtype)
    # (A format without NaN fails on a NaN input: a caller's out is then left untouched.)
    bad = _into(res, a, lambda d: _lowp.round_into(a.reshape(-1), f._spec, d.reshape(-1), r, sat, key, nb),
                keep=out is not None and not _has_nan(f))
    if bad:
        _raise_nan(f)
    return res


def encode(x: Any, fmt: Any, rounding: str = "nearest_even", *, saturate: bool = False, seed: SeedLike = None,
           rbits: Optional[int] = None, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Round ``x`` into ``fmt`` and return the encodings as uint8/16/32/64 (by ``fmt.bits``).
    ``rounding``, ``saturate``, ``seed``, ``rbits`` and ``out`` as for :func:`round`."""
    return _encode(x, fmt, rounding, saturate=saturate, seed=seed, rbits=rbits, out=out)


@_keeps_generator_on_error
def _encode(x: Any, fmt: Any, rounding: str = "nearest_even", *, saturate: bool = False, seed: SeedLike = None,
            rbits: Optional[int] = None, out: Optional[np.ndarray] = None, name: str = "x") -> np.ndarray:
    """:func:`encode`, its errors about the values naming them ``name``."""
    f, r, sat = _prepare(fmt, rounding, saturate)
    src = _native(_array_arg(x, name))
    a = _as_float_array(src, name, fmt=f, rounding=r)
    key = _seed_word(seed, r)
    nb = _rbits(rbits, a.dtype)
    if r == "stochastic":
        a = _stochastic_exact(src, a, f, key, nb)
    sd = f.storage_dtype
    res = result_empty(a.shape, sd) if out is None else _check_out(out, a.shape, sd)
    bad = _into(res, a, lambda d: _lowp.encode_into(a.reshape(-1), f._spec, d.reshape(-1), r, sat, key, nb),
                keep=out is not None and not _has_nan(f))
    if bad:
        _raise_nan(f, name)
    return res


def decode(bits: Any, fmt: Any, dtype: Any = np.float32, *, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Values of the encodings ``bits`` (unsigned or signed integers of fmt's storage width or wider)."""
    f = _format(fmt)
    try:
        if dtype is None:
            raise TypeError  # (numpy would read None as float64)
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype: expected float32 or float64, got {dtype!r}") from None
    if dt.newbyteorder("=") not in (np.float32, np.float64):
        raise TypeError(f"dtype: expected float32 or float64, got {dt}")
    b = _array_arg(bits, "bits")
    if b.dtype.kind not in "iu":
        raise TypeError(f"bits: expected an integer array, got dtype {b.dtype}")
    if b.dtype.itemsize < f.storage_dtype.itemsize:
        raise TypeError(f"bits: {b.dtype} is too narrow for a {f.bits}-bit format (need {f.storage_dtype} or wider)")
    if b.dtype.itemsize not in (1, 2, 4, 8):
        raise TypeError(f"bits: unsupported dtype {b.dtype}")
    if 8 * b.dtype.itemsize > f.bits and b.size:
        # Codes of a narrower format: 0 .. 2^bits - 1, or sign-extended from a signed dtype.
        lo, hi = int(b.min()), int(b.max())
        if hi >= 1 << f.bits or lo < (-(1 << (f.bits - 1)) if b.dtype.kind == "i" else 0):
            raise ValueError(f"bits: codes of a {f.bits}-bit format lie in 0..{(1 << f.bits) - 1}"
                             f"{' (or sign-extended, from -' + str(1 << (f.bits - 1)) + ')' if b.dtype.kind == 'i' else ''}; "
                             f"got values from {lo} to {hi}")
    b = _native(b)
    if b.dtype.kind == "i":
        b = b.view(np.dtype(f"u{b.dtype.itemsize}"))
    b = _contiguous(b)
    native = dt.newbyteorder("=")
    res = result_empty(b.shape, native) if out is None else _check_out(out, b.shape, native)
    _into(res, b, lambda d: _lowp.decode_into(b.reshape(-1), f._spec, d.reshape(-1)))
    return res if out is not None or dt.isnative else res.astype(dt)


def cast(x: Any, dtype: Any, rounding: str = "nearest_even", *, saturate: bool = False, seed: SeedLike = None,
         rbits: Optional[int] = None) -> np.ndarray:
    """Convert ``x`` to a low-precision ``dtype`` with any rounding mode.

    ``dtype`` may be a lowp or ml_dtypes dtype (the result is an array of it), numpy's
    float16/float32/float64 or int8, or a Format with a registered dtype.
    """
    if isinstance(dtype, str) and len(dtype) > 1 and dtype[0] in "<>":
        try:
            dtype = np.dtype(dtype)  # a numpy type string with its byte order ('>f4')
        except TypeError:
            raise TypeError(f"dtype: expected a numpy dtype or a Format, got {dtype!r}") from None
    if isinstance(dtype, str):
        try:
            dtype = _format(dtype)  # a format name ("bf16", "e4m3fn", ...)
        except (TypeError, ValueError) as e:
            raise type(e)(f"dtype: {e}".replace("dtype: fmt: ", "dtype: ")) from None
    if isinstance(dtype, Format):
        f = dtype
        dt = f.dtype
        if dt is None:
            hint = ""
            if getattr(f, "_name", None) and "ml_dtypes" not in sys.modules:
                # (ml_dtypes' formats without a lowp dtype take ml_dtypes' once it is imported.)
                hint = f" until ml_dtypes, which has {f._name}, is imported (import ml_dtypes)"
            raise TypeError(f"dtype: {f!r} has no numpy dtype{hint}; use lowp.encode for its bits or lowp.round "
                            f"for values")
    else:
        try:
            dt = np.dtype(dtype) if dtype is not None else None
        except TypeError:
            dt = None
        if dt is None:
            raise TypeError(f"dtype: expected a numpy dtype or a Format, got {dtype!r}")
        try:
            f = _format(dt)
        except TypeError as e:
            raise TypeError(f"dtype: {e}".replace("dtype: fmt: ", "dtype: ")) from None
    f = _canonical(f)
    codes = encode(x, f, rounding, saturate=saturate, seed=seed, rbits=rbits)
    if not dt.isnative:
        # The native type's codes, byte-swapped into the requested order.
        native = dt.newbyteorder("=")
        res = decode(codes, f, native) if native in (np.float32, np.float64) else codes.view(native)
        return res.astype(dt)
    if dt in (np.float32, np.float64):
        return decode(codes, f, dt)
    return codes.view(dt)


def nextafter_scalar(x: float, toward: float, fmt: Format) -> float:
    """The next value of ``fmt`` after the representable ``x`` in the direction of ``toward``."""
    if math.isnan(x) or math.isnan(toward) or x == toward:
        return x if not math.isnan(toward) else math.nan
    mode = "up" if toward > x else "down"
    # The neighbour is the directed rounding of the next float64 after x (every
    # format is narrower than float64, so that float64 lies strictly before the
    # format's neighbour, or is it).
    y = math.nextafter(x, toward)
    r = float(round(np.array([y]), fmt, mode, saturate=True)[0])
    if r == x and abs(y) < abs(x):
        # Toward zero from the smallest posit: no rounding gives zero, the neighbour.
        return 0.0
    return r


def _register_dtype(spec: tuple, dt: np.dtype) -> None:
    _dtype_registry.setdefault(spec, dt)
