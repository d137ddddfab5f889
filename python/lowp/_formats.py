"""Number formats: immutable, hashable, picklable descriptions of encodings.

The arithmetic lives in the Rust core; a Python format carries its parameters
(its *spec*) and the facts the core computes for it.
"""

from __future__ import annotations

import math
import operator
import sys
from typing import Any, Optional

import numpy as np

from . import _lowp
from ._args import boolean

__all__ = [
    "Format",
    "FloatFormat",
    "PositFormat",
    "IntFormat",
    "format",
    "finfo",
    "named_formats",
]

_NAN_POLICIES = ("ieee", "fn", "fnuz", None)


def _int_arg(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}")
    return operator.index(value)


class Format:
    """Base of all formats. Use :class:`FloatFormat`, :class:`PositFormat` or :class:`IntFormat`."""

    __slots__ = ("_spec", "_info", "_name")

    _spec: tuple
    _info: dict
    _name: Optional[str]

    def _init(self, spec: tuple, name: Optional[str] = None) -> None:
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_info", dict(_lowp.format_info(spec)))
        object.__setattr__(self, "_name", name)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Format) and other._spec == self._spec

    def __hash__(self) -> int:
        return hash(self._spec)

    @property
    def name(self) -> Optional[str]:
        """The registered name (e.g. ``"float8_e4m3fn"``), or None for a custom format."""
        return self._name

    @property
    def bits(self) -> int:
        """Bits of one encoding, sign included."""
        return self._info["bits"]

    @property
    def max(self) -> float:
        """Largest finite value."""
        return self._info["max"]

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value (for posits: minpos)."""
        return self._info["min_normal"]

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value."""
        return self._info["min_subnormal"]

    @property
    def eps(self) -> float:
        """Gap between 1 and the next larger value (where 1 is subnormal, the subnormal unit)."""
        e = self._info["eps"]
        if isinstance(self, FloatFormat) and self.emin > 0:
            # 1 below the normal range: the subnormal unit.
            e = max(e, math.ldexp(1.0, self.emin - self.man_bits))
        return e

    @property
    def precision(self) -> int:
        """Significand bits at 1, the hidden bit included (p, not decimal digits)."""
        return self._info["precision"]

    @property
    def emax(self) -> int:
        """Exponent (log2) of the largest binade."""
        return self._info["emax"]

    @property
    def emin(self) -> int:
        """Exponent (log2) of the smallest normal binade."""
        return self._info["emin"]

    @property
    def storage_dtype(self) -> np.dtype:
        """The unsigned integer dtype that holds one encoding."""
        return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[self._info["storage_bytes"]])

    @property
    def dtype(self) -> Optional[np.dtype]:
        """The numpy dtype storing this format, or None when none is registered.

        lowp's own dtypes first; for a named format without one, ml_dtypes' dtype of
        the same name when ml_dtypes has been imported."""
        dt = _dtype_registry.get(self._spec)
        named = _BY_SPEC.get(self._spec)  # FloatFormat(8, 7) stores like lowp.format("bf16")
        name = self._name or (named._name if named is not None else None)
        if dt is None and name:
            ml = sys.modules.get("ml_dtypes")
            t = getattr(ml, name, None) if ml is not None else None
            if t is not None:
                dt = np.dtype(t)
        return dt

    def _fits_f32(self) -> bool:
        return self._info["fits_f32"]

    def __reduce__(self):
        return (_from_spec, (self._spec, self._name))


def _from_spec(spec: tuple, name: Optional[str] = None) -> Format:
    kind = spec[0]
    if kind == "float":
        _, e, m, bias, inf, nan, sub = spec
        f: Format = FloatFormat(e, m, bias=bias, inf=inf, nan=nan, subnormals=sub)
    elif kind == "posit":
        f = PositFormat(spec[1], es=spec[2])
    elif kind == "int":
        f = IntFormat(spec[1], signed=spec[2])
    else:  # pragma: no cover - specs are made here
        raise ValueError(f"fmt: unknown format kind {kind!r}")
    if name is not None:
        object.__setattr__(f, "_name", name)
    return f


class FloatFormat(Format):
    """A binary float with ``exp_bits`` exponent and ``man_bits`` mantissa bits.

    ``nan``: ``"ieee"`` (all-ones exponent reserved: NaN, and inf when ``inf``),
    ``"fn"`` (only S.111..1 is NaN, no inf, as OCP E4M3), ``"fnuz"`` (only 0x80..
    is NaN, no -0, no inf), ``None`` (every encoding finite). ``inf`` only applies
    to ``"ieee"``; with ``inf=False`` the whole top binade is NaN.
    ``bias`` defaults to ``2**(exp_bits-1)-1``, plus one for fnuz.
    """

    __slots__ = ()

    def __init__(self, exp_bits: int, man_bits: int, *, bias: Optional[int] = None, inf: bool = True,
                 nan: Optional[str] = "ieee", subnormals: bool = True) -> None:
        exp_bits = _int_arg(exp_bits, "exp_bits")
        man_bits = _int_arg(man_bits, "man_bits")
        if not 1 <= exp_bits <= 11:
            raise ValueError(f"exp_bits: must be in 1..11, got {exp_bits}")
        if not 0 <= man_bits <= 52:
            raise ValueError(f"man_bits: must be in 0..52, got {man_bits}")
        if bias is not None:
            bias = _int_arg(bias, "bias")
            if abs(bias) > 1 << 20:
                raise ValueError(f"bias: {bias} is outside any float64-representable range")
        if nan not in _NAN_POLICIES:
            raise ValueError(f"nan: must be one of 'ieee', 'fn', 'fnuz', None; got {nan!r}")
        inf = boolean(inf, "inf") and nan == "ieee"
        subnormals = boolean(subnormals, "subnormals")
        self._init(("float", exp_bits, man_bits, bias, inf, nan, bool(subnormals)))
        # Store the resolved bias so equal formats compare equal.
        object.__setattr__(self, "_spec", ("float", exp_bits, man_bits, self._info["bias"], inf, nan, bool(subnormals)))

    @property
    def exp_bits(self) -> int:
        return self._spec[1]

    @property
    def man_bits(self) -> int:
        return self._spec[2]

    @property
    def bias(self) -> int:
        return self._spec[3]

    @property
    def inf(self) -> bool:
        return self._spec[4]

    @property
    def nan(self) -> Optional[str]:
        return self._spec[5]

    @property
    def subnormals(self) -> bool:
        return self._spec[6]

    def replace(self, **changes: Any) -> "FloatFormat":
        """A copy with some parameters changed (``bias`` is recomputed
        when ``exp_bits`` or ``nan`` change, unless given; otherwise it is kept)."""
        kw = dict(bias=None if "nan" in changes or "exp_bits" in changes else self.bias, inf=self.inf or self.nan != "ieee",
                  nan=self.nan, subnormals=self.subnormals)
        args = dict(exp_bits=self.exp_bits, man_bits=self.man_bits)
        for k, v in changes.items():
            if k in args:
                args[k] = v
            elif k in kw:
                kw[k] = v
            else:
                raise TypeError(f"replace: unknown parameter {k!r}")
        return FloatFormat(args["exp_bits"], args["man_bits"], **kw)

    def __repr__(self) -> str:
        if self._name:
            return f"lowp.format({self._name!r})"
        e, m, bias, inf, nan, sub = self._spec[1:]
        parts = [str(e), str(m)]
        default_bias = (1 << (e - 1)) - 1 + (nan == "fnuz")
        if bias != default_bias:
            parts.append(f"bias={bias}")
        if nan != "ieee":
            parts.append(f"nan={nan!r}")
        elif not inf:
            parts.append("inf=False")
        if not sub:
            parts.append("subnormals=False")
        return f"FloatFormat({', '.join(parts)})"


class PositFormat(Format):
    """A posit <nbits, es>: 2022 Posit Standard for es = 2. 2 <= nbits <= 32, 0 <= es <= 4."""

    __slots__ = ()

    def __init__(self, nbits: int, es: int = 2) -> None:
        nbits = _int_arg(nbits, "nbits")
        es = _int_arg(es, "es")
        if not 2 <= nbits <= 32:
            raise ValueError(f"nbits: must be in 2..32, got {nbits}")
        if not 0 <= es <= 4:
            raise ValueError(f"es: must be in 0..4, got {es}")
        self._init(("posit", nbits, es))

    @property
    def nbits(self) -> int:
        return self._spec[1]

    @property
    def es(self) -> int:
        return self._spec[2]

    def __repr__(self) -> str:
        if self._name:
            return f"lowp.format({self._name!r})"
        return f"PositFormat({self.nbits}, es={self.es})"


class IntFormat(Format):
    """A ``bits``-bit integer (two's complement when ``signed``)."""

    __slots__ = ()

    def __init__(self, bits: int = 8, signed: bool = True) -> None:
        bits = _int_arg(bits, "bits")
        if not 2 <= bits <= 32:
            raise ValueError(f"bits: must be in 2..32, got {bits}")
        self._init(("int", bits, boolean(signed, "signed")))

    @property
    def signed(self) -> bool:
        return self._spec[2]

    @property
    def min(self) -> float:
        return self._info["min"]

    def __repr__(self) -> str:
        if self._name:
            return f"lowp.format({self._name!r})"
        return f"IntFormat({self.bits}, signed={self.signed})"


def _has_nan(f: Format) -> bool:
    """Does ``f`` have an encoding for NaN (a posit's NaR counts)? An IEEE-style float
    without mantissa bits has none: its top exponent holds only the infinities."""
    if isinstance(f, FloatFormat):
        return f.nan is not None and not (f.nan == "ieee" and f.inf and f.man_bits == 0)
    return isinstance(f, PositFormat)


def _named(name: str, f: Format) -> Format:
    object.__setattr__(f, "_name", name)
    return f


# Canonical names (as ml_dtypes / numpy spell them) and their formats.
_NAMED: dict[str, Format] = {
    "bfloat16": _named("bfloat16", FloatFormat(8, 7)),
    "float16": _named("float16", FloatFormat(5, 10)),
    "float32": _named("float32", FloatFormat(8, 23)),
    "float64": _named("float64", FloatFormat(11, 52)),
    "float8_e5m2": _named("float8_e5m2", FloatFormat(5, 2)),
    "float8_e4m3fn": _named("float8_e4m3fn", FloatFormat(4, 3, nan="fn")),
    "float8_e4m3": _named("float8_e4m3", FloatFormat(4, 3)),
    "float8_e4m3fnuz": _named("float8_e4m3fnuz", FloatFormat(4, 3, nan="fnuz")),
    "float8_e5m2fnuz": _named("float8_e5m2fnuz", FloatFormat(5, 2, nan="fnuz")),
    "posit8": _named("posit8", PositFormat(8, 2)),
    "posit16": _named("posit16", PositFormat(16, 2)),
    "posit32": _named("posit32", PositFormat(32, 2)),
    "int8": _named("int8", IntFormat(8, True)),
    # ml_dtypes' other floats (their dtypes are ml_dtypes'; lowp registers none).
    "float8_e3m4": _named("float8_e3m4", FloatFormat(3, 4)),
    "float8_e4m3b11fnuz": _named("float8_e4m3b11fnuz", FloatFormat(4, 3, bias=11, nan="fnuz")),
    "float6_e2m3fn": _named("float6_e2m3fn", FloatFormat(2, 3, nan=None)),
    "float6_e3m2fn": _named("float6_e3m2fn", FloatFormat(3, 2, nan=None)),
    "float4_e2m1fn": _named("float4_e2m1fn", FloatFormat(2, 1, nan=None)),
    # ml_dtypes' narrow integers (one byte each, the value's two's complement in the low bits).
    "int4": _named("int4", IntFormat(4, True)),
    "uint4": _named("uint4", IntFormat(4, False)),
    "int2": _named("int2", IntFormat(2, True)),
    "uint2": _named("uint2", IntFormat(2, False)),
}

_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "f16": "float16",
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "fp64": "float64",
    "f64": "float64",
    "double": "float64",
    "e5m2": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
    "e4m3fn": "float8_e4m3fn",
    "fp8_e4m3fn": "float8_e4m3fn",
    "e4m3": "float8_e4m3",
    "fp8_e4m3": "float8_e4m3",
    "e4m3fnuz": "float8_e4m3fnuz",
    "fp8_e4m3fnuz": "float8_e4m3fnuz",
    "e5m2fnuz": "float8_e5m2fnuz",
    "fp8_e5m2fnuz": "float8_e5m2fnuz",
    "p8": "posit8",
    "p16": "posit16",
    "p32": "posit32",
    "i8": "int8",
    "e3m4": "float8_e3m4",
    "fp8_e3m4": "float8_e3m4",
    "e4m3b11fnuz": "float8_e4m3b11fnuz",
    "e2m3fn": "float6_e2m3fn",
    "fp6_e2m3fn": "float6_e2m3fn",
    "e3m2fn": "float6_e3m2fn",
    "fp6_e3m2fn": "float6_e3m2fn",
    "e2m1fn": "float4_e2m1fn",
    "fp4_e2m1fn": "float4_e2m1fn",
}

# Named formats whose numpy dtype is lowp's own (registered by the native module).
DTYPE_NAMES = ("bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
               "posit8", "posit16", "posit32")

_BY_SPEC: dict[tuple, Format] = {f._spec: f for f in _NAMED.values()}

# spec -> numpy dtype that stores it. numpy's own types first; lowp's dtypes
# (and ml_dtypes', where lowp has none) are added by the package at import.
_dtype_registry: dict[tuple, np.dtype] = {
    _NAMED["float16"]._spec: np.dtype(np.float16),
    _NAMED["float32"]._spec: np.dtype(np.float32),
    _NAMED["float64"]._spec: np.dtype(np.float64),
    _NAMED["int8"]._spec: np.dtype(np.int8),
}


def _code_format(dt: np.dtype) -> Optional[Format]:
    """The format of a low-precision dtype stored as codes (lowp's or ml_dtypes' of a
    named format), else None."""
    f = _NAMED.get(dt.name)
    if (f is None or dt.name in ("float16", "float32", "float64", "int8") or dt.kind not in "fV"
            or dt.itemsize != f.storage_dtype.itemsize):
        return None
    return f


def named_formats() -> dict[str, Format]:
    """The named formats, by canonical name."""
    return dict(_NAMED)


def _canonical(f: Format) -> Format:
    """The named instance equal to ``f``, if any (so names show in reprs)."""
    return _BY_SPEC.get(f._spec, f)


def format(x: Any) -> Format:  # noqa: A001 - the public name of the API
    """A :class:`Format` from a format, a name (``"bf16"``, ``"e4m3fn"``, ``"posit16"``,
    ``"int8"``...) or a dtype (lowp, ml_dtypes or numpy)."""
    if isinstance(x, Format):
        return x
    if x is None:  # np.dtype(None) would silently mean float64
        raise TypeError("fmt: expected a Format, a format name or a dtype, got None")
    if isinstance(x, str):
        key = x.strip().lower()
        key = _ALIASES.get(key, key)
        if key in _NAMED:
            return _NAMED[key]
        try:
            dt = np.dtype(x)
        except (TypeError, ValueError):  # (numpy raises ValueError for names with commas)
            dt = None
        if dt is not None and dt.name in _NAMED:
            return _NAMED[dt.name]
        if dt is not None:  # a numpy dtype's name, but not a format: an unsupported dtype
            raise TypeError(f"fmt: dtype {dt} has no lowp format; accepted dtypes: {', '.join(sorted(_NAMED))}")
        raise ValueError(f"fmt: unknown format name {x!r}; accepted: {', '.join(sorted(_NAMED) + sorted(_ALIASES))}")
    try:
        dt = np.dtype(x)
    except TypeError:
        raise TypeError(f"fmt: expected a Format, a format name or a dtype, got {x!r}") from None
    name = dt.name
    if name in _NAMED and dt.kind in "fiV" and dt.itemsize * 8 >= _NAMED[name].bits:
        return _NAMED[name]
    raise TypeError(f"fmt: dtype {dt} has no lowp format; accepted dtypes: {', '.join(sorted(_NAMED))}")


class finfo:  # noqa: N801 - mirrors numpy.finfo
    """Machine limits of a low-precision format, mirroring ``numpy.finfo``.

    ``precision`` and ``resolution`` follow numpy (decimal digits);
    ``Format.precision`` is in bits. The limits (``max``, ``min``, ``eps``, ``epsneg``,
    ``tiny``, ``smallest_normal``, ``smallest_subnormal``, ``resolution``) are scalars
    of the format's dtype (of the dtype given, for an ml_dtypes dtype), as numpy's and
    ml_dtypes' are, or Python floats for a format without one.
    """

    def __init__(self, dtype_or_format: Any) -> None:
        try:  # Complex types: their components' limits, as numpy.finfo gives.
            dt = np.dtype(dtype_or_format) if not isinstance(dtype_or_format, Format) else None
        except TypeError:
            dt = None
        if dt is not None and dt.kind == "c" and dt.itemsize in (8, 16):
            dtype_or_format = np.dtype(f"f{dt.itemsize // 2}")
        f = format(dtype_or_format)
        if isinstance(f, IntFormat):
            raise TypeError(f"finfo: {f!r} is an integer format; use numpy.iinfo (ml_dtypes.iinfo for ml_dtypes' "
                            f"narrow integers)")
        self.format = f
        # The dtype given, if it stores the format (ml_dtypes' own: its limits stay its scalars).
        given = dtype_or_format.newbyteorder("=") if isinstance(dtype_or_format, np.dtype) else None
        if given is None and isinstance(dtype_or_format, type) and not issubclass(dtype_or_format, Format):
            given = np.dtype(dtype_or_format)
        self.dtype = given if given is not None and _code_format(given) == f else f.dtype
        self.bits = f.bits
        self.max = f.max
        self.min = -f.max
        self.eps = f.eps
        self.tiny = self.smallest_normal = f.min_normal
        self.smallest_subnormal = f.min_subnormal
        self.maxexp = f.emax + 1
        self.minexp = f.emin
        self.machep = int(round(math.log2(f.eps)))
        if isinstance(f, FloatFormat):
            self.nmant = f.man_bits
            self.nexp = f.exp_bits
            self.iexp = f.exp_bits
            # The gap below 1 (half the one above, unless 1 is the smallest normal or subnormal).
            from ._convert import nextafter_scalar, round as _round1

            one = 1.0 <= f.max and float(_round1(np.array([1.0]), f)[0]) == 1.0
            self.epsneg = 1.0 - nextafter_scalar(1.0, -math.inf, f) if one else math.ldexp(1.0, -(f.man_bits + 1))
        else:
            self.nmant = f.precision - 1
            self.nexp = f.es  # type: ignore[attr-defined]
            self.iexp = f.es  # type: ignore[attr-defined]
            # Gap below 1 is half the gap above (or equal at the regime edge).
            from ._convert import nextafter_scalar

            self.epsneg = 1.0 - nextafter_scalar(1.0, -math.inf, f)
        self.negep = int(round(math.log2(self.epsneg)))
        # Decimal digits as numpy computes them, but at least 1 for formats of 8 bits or
        # more, as ml_dtypes reports for its 8-bit floats (its 4- and 6-bit floats have 0);
        # the resolution is 10**-precision rounded into the format (fewer digits when
        # 10**-precision would round to 0 in a format of tiny range).
        from ._convert import round as _round

        def _resolution(p: int) -> float:
            return float(_round(np.array([10.0**-p]), f, saturate=True)[0])

        self.precision = max(int(-math.log10(self.eps)), 1 if f.bits >= 8 else 0)
        self.resolution = _resolution(self.precision)
        while self.resolution == 0 and self.precision > 0:
            self.precision -= 1
            self.resolution = _resolution(self.precision)
        if self.dtype is not None:
            # Scalars of the type, as numpy.finfo and ml_dtypes.finfo give (exact: every
            # limit is a value of the format).
            t = self.dtype.type
            for name in ("max", "min", "eps", "epsneg", "tiny", "smallest_normal", "smallest_subnormal", "resolution"):
                setattr(self, name, t(getattr(self, name)))

    def __eq__(self, other: Any) -> bool:
        # (Equal for the same format and dtype, as numpy's cached finfo objects are.)
        if not isinstance(other, finfo):
            return NotImplemented
        return self.format == other.format and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash((self.format, self.dtype))

    def __repr__(self) -> str:
        return (f"lowp.finfo(resolution={float(self.resolution):g}, min={float(self.min):g}, max={float(self.max):g}, "
                f"eps={float(self.eps):g}, bits={self.bits}, format={self.format!r})")

    __str__ = __repr__
