"""The numpy dtypes of lowp: scalar types registered by the native module.

``bfloat16``, the five fp8 types and ``posit8/16/32`` are numpy scalar types
(subclasses of ``numpy.generic``) with registered dtypes, casts and ufunc loops.

Living beside ml_dtypes: lowp never writes into ``numpy.sctypeDict``, so
ml_dtypes' names stay its own. When ml_dtypes is imported (before or after
lowp), casts between each ml_dtypes dtype and the lowp dtype of the same name
are registered as bit copies, so ``astype`` between them is exact both ways, and
casts between it and lowp's other dtypes round once to nearest even (safe where
every value converts exactly, as among lowp's own dtypes).

What numpy does not allow for user dtypes (as for ml_dtypes' too):

- ``np.save`` writes legacy user dtypes as raw bytes (``|V1``, ``|V2``, ``|V4``);
  ``np.load(f).view(lowp.bfloat16)`` restores the array bit for bit.
- ``np.finfo`` only takes numpy's own inexact types; ``lowp.finfo`` covers these.
- Posit NaR reads as NaN (``float``, comparisons, ``isnan``), so ``NaR == NaR`` is False.
"""

from __future__ import annotations

import copyreg
import sys
from typing import Any

import numpy as np

from . import _lowp
from ._convert import _register_dtype
from ._formats import _NAMED, DTYPE_NAMES

__all__ = [
    "bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "posit8", "posit16", "posit32", "DTYPE_NAMES",
]



bfloat16 = _lowp.bfloat16
float8_e5m2 = _lowp.float8_e5m2
float8_e4m3fn = _lowp.float8_e4m3fn
float8_e4m3 = _lowp.float8_e4m3
float8_e4m3fnuz = _lowp.float8_e4m3fnuz
float8_e5m2fnuz = _lowp.float8_e5m2fnuz
posit8 = _lowp.posit8
posit16 = _lowp.posit16
posit32 = _lowp.posit32

for _name in DTYPE_NAMES:
    _register_dtype(_NAMED[_name]._spec, np.dtype(getattr(_lowp, _name)))


# Python's float protocol beyond what numpy.generic gives (as numpy's float16 has it):
# every value is a float64 exactly, so the float's answers are exact.
def _round(self: Any, ndigits: Any = None) -> Any:
    """``round(x)``: the nearest int (ties to even); ``round(x, n)``: x rounded to n
    decimal digits, then into x's type."""
    if ndigits is None:
        return round(float(self))
    return type(self)(round(float(self), ndigits))


def _as_integer_ratio(self: Any) -> tuple[int, int]:
    """The value as a ratio of two ints, the denominator positive and smallest."""
    return float(self).as_integer_ratio()


def _is_integer(self: Any) -> bool:
    """Is the value an integer?"""
    return float(self).is_integer()


def _dtype_of(name: str, swapped: bool) -> np.dtype:
    """The dtype of lowp type ``name``, in the other byte order when ``swapped``
    (what pickles and deep copies of these dtypes rebuild)."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"name: unknown lowp dtype {name!r}")
    d = np.dtype(getattr(_lowp, name))
    return d.newbyteorder("S") if swapped else d


def _reduce_dtype(d: np.dtype) -> tuple[Any, tuple[str, bool]]:
    # numpy's own reduction of a legacy user dtype rebuilds it through the shared
    # dtype instance and then sets the pickled byte order on that instance: a
    # pickled or deep-copied '>' array would turn every later array of the type
    # big-endian. This one builds a new dtype for the other byte order instead.
    return _dtype_of, (d.type.__name__, not d.isnative)


for _name in DTYPE_NAMES:
    _t = getattr(_lowp, _name)
    copyreg.pickle(type(np.dtype(_t)), _reduce_dtype)
    _t.__round__ = _round
    _t.as_integer_ratio = _as_integer_ratio
    _t.is_integer = _is_integer


def _register_float32_pairs(others: list[np.dtype]) -> None:
    """An fp8 type beside float16, another fp8 type (or ml_dtypes' narrow ints, in
    ``others``) has float32 as its np.result_type (as in ml_dtypes), while numpy's loop
    search would run float16's loops, which overflow on an e4m3 x e5m2 product: the
    ufuncs of two inputs, ``@`` and the vector products run float32's."""
    ours = [np.dtype(getattr(_lowp, name)) for name in DTYPE_NAMES]
    f16, f32 = np.dtype(np.float16), np.dtype(np.float32)
    pairs = []
    for x in ours:
        for y in ours + [f16] + others:
            for a, b in ((x, y), (y, x)):
                try:
                    common = np.result_type(a, b)
                except TypeError:
                    continue
                if a != b and common == f32 and np.can_cast(a, f16) and np.can_cast(b, f16):
                    pairs.append((type(a), type(b), type(f32)))
    more = [getattr(np, n) for n in ("matmul", "vecdot", "matvec", "vecmat") if hasattr(np, n)]
    _lowp._register_common(pairs, more)


_register_float32_pairs([])


_ML_INT_NAMES = ("int1", "uint1", "int2", "uint2", "int4", "uint4")
_ML_EXTRA_NAMES = ("float8_e3m4", "float8_e4m3b11fnuz", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")


def _link_ml_dtypes(ml: Any) -> None:
    """Register bit-copy casts between ml_dtypes' dtypes and lowp's of the same name, and
    rounding casts (once, to nearest even) between them and lowp's other dtypes."""
    for name in DTYPE_NAMES:
        t = getattr(ml, name, None)
        if t is not None:
            _lowp._register_equivalent(name, np.dtype(t))
    for name in DTYPE_NAMES:
        t = getattr(ml, name, None)
        if t is not None:
            _lowp._register_cross(name, np.dtype(t))
    # ml_dtypes' floats that are lowp formats without a lowp dtype: rounding casts too.
    from ._formats import format as _format

    for slot, name in enumerate(_ML_EXTRA_NAMES):
        t = getattr(ml, name, None)
        if t is not None:
            _lowp._register_extra(slot, _format(name)._spec, np.dtype(t))
    # Mixed with lowp's types, ufuncs run in np.result_type's type where that is
    # ml_dtypes' (numpy's loop search would run lowp's same-named type, or float32).
    ours = [np.dtype(getattr(_lowp, name)) for name in DTYPE_NAMES]
    theirs = [np.dtype(getattr(ml, name)) for name in DTYPE_NAMES + _ML_EXTRA_NAMES if hasattr(ml, name)]
    pairs = []
    for x in ours:
        for y in theirs:
            for a, b in ((x, y), (y, x)):
                try:
                    common = np.result_type(a, b)
                except TypeError:
                    continue
                if common == y and common.type is y.type:
                    pairs.append((type(a), type(b), type(y)))
    _lowp._register_common(pairs)
    # ml_dtypes' narrow ints beside an fp8 type: float32, as beside float16.
    _register_float32_pairs([np.dtype(getattr(ml, n)) for n in _ML_INT_NAMES if hasattr(ml, n)])


class _MlDtypesHook:
    """Import hook: links ml_dtypes' dtypes once ml_dtypes finishes importing.

    Every spec it hands out (also to ``importlib.util.find_spec``, whose spec is then
    dropped) is the one the other finders give, with a loader that links the module after
    running it; the hook leaves ``sys.meta_path`` once a module is linked."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "ml_dtypes":
            return None
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_and_link(module: Any) -> None:
            exec_module(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
                _link_ml_dtypes(module)

        loader.exec_module = exec_and_link  # type: ignore[method-assign]
        return spec


if "ml_dtypes" in sys.modules:
    _link_ml_dtypes(sys.modules["ml_dtypes"])
else:
    sys.meta_path.insert(0, _MlDtypesHook())
