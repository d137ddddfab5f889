"""Matrix multiplication, reductions and padded allocations.

``matmul`` decodes any low-precision input (bf16, fp16, fp8, posits, or their
ml_dtypes / lowp dtypes) to float32 while packing, so no float32 copy of the
inputs is ever made; float64 and posit32 inputs accumulate in float64; int8 x
int8 accumulates exactly in int32. ``accumulate=<format>`` emulates a
low-precision accumulator: every add is the exact sum rounded once.

The ``@`` operator of lowp's dtypes is ``matmul(a, b, out_dtype=np.result_type(a, b))``:
the float32 accumulators rounded once into the operands' common dtype.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Union

import numpy as np

from . import _lowp
from ._args import boolean
from ._convert import (_NO_FORMAT, SeedLike, _array_arg, _check_rounding, _distinct, _keeps_generator_on_error,
                       _mul_to_odd, _native, _refuse_masked, _refuse_overlapping, _seed_word, _sub_byte_codes, encode)
from ._formats import FloatFormat, Format, IntFormat, _NAMED, _code_format, _has_nan, format as _format
from ._memory import result_empty
from ._quant import QuantizedArray

__all__ = ["matmul", "qmatmul", "sum", "padded_ld", "empty"]

_F32 = _NAMED["float32"]
_F64 = _NAMED["float64"]
_I8 = _NAMED["int8"]

_ACCEPTED = ("float16, float32, float64, int8, and the low-precision dtypes of lowp and ml_dtypes "
             "(bfloat16, float8_e5m2/e4m3fn/e4m3/e4m3fnuz/e5m2fnuz/e3m4/e4m3b11fnuz, float6_e2m3fn/e3m2fn, "
             "float4_e2m1fn, posit8/16/32, int4/uint4/int2/uint2)" + _NO_FORMAT)


def _as_array(x: Any, arg: str) -> np.ndarray:
    if isinstance(x, QuantizedArray):
        raise TypeError(f"{arg}: got a QuantizedArray; use lowp.qmatmul or .dequantize()")
    return _array_arg(x, arg)


#: (storage dtype, format spec, format) of each input dtype seen, by dtype: the
#: lookup by name is a few microseconds, as much as a whole small product.
_OPERANDS: dict = {}


def _operand(x: np.ndarray, arg: str) -> tuple[np.ndarray, Optional[tuple], Format]:
    """(array the core reads, format spec for code storages or None, format of the values)."""
    x = _native(x)
    dt = x.dtype
    hit = _OPERANDS.get(dt)
    if hit is None:
        hit = _operand_of(dt, arg)
        if len(_OPERANDS) >= 256:
            _OPERANDS.clear()
        _OPERANDS[dt] = hit
    sd, spec, f = hit
    if sd is None:
        return x, spec, f
    return _sub_byte_codes(x.view(sd), f, dt, arg), spec, f


def _operand_of(dt: np.dtype, arg: str) -> tuple[Optional[np.dtype], Optional[tuple], Format]:
    """(storage dtype to view as or None, spec or None, format) of input dtype ``dt``."""
    if dt == np.float32:
        return None, None, _F32
    if dt == np.float64:
        return None, None, _F64
    if dt == np.int8:
        return None, None, _I8
    f = _NAMED["float16"] if dt == np.float16 else _code_format(dt)
    if f is None or f.storage_dtype.itemsize != dt.itemsize:
        raise TypeError(f"{arg}: unsupported dtype {dt}; accepted: {_ACCEPTED}")
    return f.storage_dtype, f._spec, f


def _parse_accumulate(accumulate: Any, arg: str = "accumulate", int32: bool = True) -> Union[str, Format]:
    if isinstance(accumulate, str) and accumulate == "float32":
        return _F32
    if isinstance(accumulate, str) and accumulate.strip().lower() == "int32":
        return "int32"
    try:
        f = _format(accumulate)
    except (TypeError, ValueError) as e:
        names = '"float32", "float64", "int32"' if int32 else '"float32", "float64"'
        raise type(e)(f"{arg}: expected {names} or a format (a Format, a name such as \"bf16\" or a dtype), "
                      f"got {accumulate!r}") from None
    return f


def _any(x: np.ndarray, pred: Any) -> bool:
    """Is ``pred`` (an elementwise numpy predicate such as ``np.isnan``, which has loops
    for numpy's, lowp's and ml_dtypes' floats) true anywhere in ``x``? Without a wider
    copy: broadcast axes (stride 0) are looked at once, and large arrays a block at a time."""
    if x.dtype.kind in "iub" or x.size == 0:
        return False
    x = _distinct(x)
    if x.size <= 1 << 22 or x.ndim == 0:
        return bool(pred(x).any())
    x = x.reshape(-1) if x.ndim == 1 or x.flags.c_contiguous else x
    step = max(1, (1 << 22) // max(1, x[0].size if x.ndim > 1 else 1))
    return any(bool(pred(x[i:i + step]).any()) for i in range(0, x.shape[0], step))


def _nan_product(a: np.ndarray, b: np.ndarray) -> bool:
    """Is some product of ``a @ b`` NaN: a NaN input, or an infinity meeting a zero
    (1-D operands as numpy's matmul promotes them; stacks broadcast)?"""
    x, y = a, b
    if _any(x, np.isnan) or _any(y, np.isnan):
        return True
    xinf, yinf = _any(x, np.isinf), _any(y, np.isinf)
    if not (xinf or yinf):
        return False
    x2 = x[np.newaxis, :] if x.ndim == 1 else x
    y2 = y[:, np.newaxis] if y.ndim == 1 else y
    # Along the depth k: an infinity in A's column k and a zero in B's row k, or the reverse.
    inf_a, zero_a = np.isinf(x2).any(axis=-2), (x2 == 0).any(axis=-2)
    inf_b, zero_b = np.isinf(y2).any(axis=-1), (y2 == 0).any(axis=-1)
    return bool((inf_a & zero_b | zero_a & inf_b).any())


def _totals_may_be_lost(acc: Any, cacc: Any, chunk: Optional[int]) -> Optional[str]:
    """Can the chunk totals have no value in the format they are added into (``cacc``,
    or ``acc`` itself), one without NaN: a total in ``acc`` that is NaN (an overflow
    without infinities, inf - inf) or totals that are infinities of both signs? The
    error to raise if a float64 run of the totals finds one (naming that format), or
    None."""
    if chunk is None:
        return None
    c, arg = (cacc, "chunk_accumulate") if cacc is not None else (acc, "accumulate")
    if _has_nan(c) or not (_has_nan(acc) or _inf_without_nan(acc)):
        return None
    return (f"{arg}: {c!r} has no NaN, and a chunk's total in {acc!r} is NaN, or the totals include "
            f"infinities of both signs (an overflow or inf - inf inside a chunk)")


def _inf_without_nan(f: Any) -> bool:
    """A format with infinities but no NaN (IEEE-style without mantissa bits), where an
    infinite product meeting an infinite sum of the other sign has no value."""
    return isinstance(f, FloatFormat) and f.inf and not _has_nan(f)


_INF_NO_NAN = ("{arg}: {f!r} has infinities but no NaN, so inf - inf has no value in it, and {what} "
               "contains infinities; use a format with NaN or without infinities")

def _parse_chunk(chunk: Any) -> Optional[int]:
    if chunk is None:
        return None
    if isinstance(chunk, (bool, np.bool_)) or not isinstance(chunk, (int, np.integer)):
        raise TypeError(f"chunk: expected None or a positive int, got {type(chunk).__name__}")
    if int(chunk) <= 0:
        raise ValueError(f"chunk: must be a positive integer, got {chunk}")
    # (Beyond any depth a product can have, every chunk length runs the same.)
    return min(int(chunk), 2**62)


def _rbits_arg(rbits: Any) -> int:
    if rbits is None:
        return 32
    if isinstance(rbits, (bool, np.bool_)) or not isinstance(rbits, (int, np.integer)):
        raise TypeError(f"rbits: expected None or an int, got {type(rbits).__name__}")
    if not 1 <= int(rbits) <= 64:
        raise ValueError(f"rbits: must be in 1..64, got {rbits}")
    return int(rbits)


def _target_dtype(dt: Any, arg: str) -> np.dtype:
    if dt is None:
        # (numpy reads None as float64; here a dtype must be named.)
        raise TypeError(f"{arg}: expected a dtype, got None; accepted: float32, float64, int32, float16 and the "
                        f"low-precision dtypes")
    if isinstance(dt, Format) and dt.dtype is None:
        raise TypeError(f"{arg}: {dt!r} has no numpy dtype (only the named formats and those registered "
                        f"as dtypes do); accepted: float32, float64, int32, float16 and the low-precision dtypes")
    try:
        d = np.dtype(dt)
    except TypeError:
        try:
            d = _format(dt).dtype
        except (TypeError, ValueError):
            d = None
        if d is None:
            raise TypeError(f"{arg}: {dt!r} is not a dtype; accepted: float32, float64, int32, float16 "
                            f"and the low-precision dtypes") from None
    return d


def _convert_into(res: np.ndarray, dst: np.ndarray, arg: str) -> None:
    """Round ``res`` (float32/float64/int32) once into ``dst``'s dtype and store it there."""
    dt = dst.dtype
    if dt == res.dtype:
        dst[...] = res
        return
    if not dt.isnative:
        # Rounded into the native type, then byte-swapped by numpy's copy.
        tmp = np.empty(dst.shape, dt.newbyteorder("="))
        _convert_into(res, tmp, arg)
        dst[...] = tmp
        return
    if dt.kind == "f" and dt.itemsize in (4, 8) or dt == np.float16:
        dst[...] = res.astype(dt)  # one IEEE rounding (float64 -> float16 rounds once)
        return
    hit = _OPERANDS.get(dt)
    try:
        f = None if dt.kind in "iu" else hit[2] if hit is not None and hit[1] is not None else _format(dt)
    except (TypeError, ValueError):
        raise TypeError(f"{arg}: unsupported output dtype {dt}; accepted: float32, float64, float16, the "
                        f"low-precision dtypes, and integers (numpy's and ml_dtypes', for int8 products)") from None
    if f is None or isinstance(f, IntFormat):
        # numpy's integers and ml_dtypes' narrow ones: the exact sums, where they fit.
        if res.dtype.kind not in "iu":
            raise TypeError(f"{arg}: integer output dtype {dt} needs an integer result (int8 x int8 products with "
                            f"lowp.matmul); this result is {res.dtype} (accepted: float32, float64, float16 and the "
                            f"low-precision dtypes)")
        lo, hi = (np.iinfo(dt).min, np.iinfo(dt).max) if f is None else (int(f.min), int(f.max))
        if res.size and (res.min() < lo or res.max() > hi):
            raise ValueError(f"{arg}: the result's values (from {res.min()} to {res.max()}) do not fit {dt} "
                             f"({lo} to {hi})")
        dst[...] = res.astype(dt)
        return
    src = res if res.dtype.kind == "f" else res.astype(np.float64)
    sd = f.storage_dtype
    if dst.flags.c_contiguous and dst.flags.aligned and src.flags.c_contiguous and sd.itemsize == dt.itemsize:
        # Straight into the result's codes (``res`` is always a separate temporary).
        if _lowp.encode_into(src.reshape(-1), f._spec, dst.view(sd).reshape(-1), "nearest_even", False, 0, 64):
            raise ValueError(f"{arg}: the result has NaN, which {f!r} cannot represent")
        return
    try:
        dst[...] = encode(np.ascontiguousarray(src), f).view(dt)
    except ValueError:
        raise ValueError(f"{arg}: the result has NaN, which {f!r} cannot represent") from None


def _check_out(out: Any, shape: tuple) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out: expected a numpy array, got {type(out).__name__}")
    _refuse_masked(out, "out")
    if out.shape != shape:
        raise ValueError(f"out: shape {out.shape} does not match the result shape {shape}")
    if not out.flags.writeable:
        raise ValueError("out: must be writeable")
    _refuse_overlapping(out)
    return out


def _same_values(d: np.dtype, target: np.dtype) -> bool:
    """Does dtype ``d`` hold the values of ``target`` alike: the same dtype in either byte
    order, or the lowp and ml_dtypes dtypes of one format?"""
    if d.newbyteorder("=") == target.newbyteorder("="):
        return True
    f = _code_format(d)
    return f is not None and f == _code_format(target) and d.itemsize == target.itemsize


def _broadcast_batch(s: tuple, t: tuple) -> Optional[tuple]:
    """The broadcast of two shapes, or None (np.broadcast_shapes stops at 32 dimensions,
    where numpy 2's arrays and np.matmul take 64)."""
    n = max(len(s), len(t))
    s, t = (1,) * (n - len(s)) + tuple(s), (1,) * (n - len(t)) + tuple(t)
    out = []
    for x, y in zip(s, t):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


@_keeps_generator_on_error
def matmul(a: Any, b: Any, *, accumulate: Any = "float32", chunk: Optional[int] = None,
           chunk_accumulate: Any = None, rounding: str = "nearest_even", seed: SeedLike = None,
           out: Optional[np.ndarray] = None, out_dtype: Any = None, rbits: Optional[int] = None) -> np.ndarray:
    """Matrix product of ``a`` and ``b`` (numpy ``matmul`` shapes: 1-D, 2-D, stacks).

    Inputs: float16/32/64, int8, or any lowp / ml_dtypes low-precision dtype, any strides
    (int8 beside a float type multiplies by its values, as numpy's int8 @ float32).

    accumulate: ``"float32"`` (default; float64 or posit32 inputs accumulate in float64,
        int8 x int8 accumulates exactly in int32; deeper than 2**17 - 1, depth blocks
        of 2**17 - 1 are added in int64, and an int32 result that cannot hold the exact
        sums raises ValueError (pass ``out_dtype=np.int64``),
        ``"float64"``, ``"int32"`` (int8 inputs),
        or any format: then every add is ``acc = round(acc + a*b)``, the exact sum rounded
        once into the format with ``rounding`` (products are exact; float64 and posit32
        inputs, whose products float64 does not hold, are added exactly in integers, about
        100x slower: every deterministic mode exact, stochastic decisions made from the
        remainder down to float64's last bit and a sticky bit). The float32 and float64
        paths to nearest-even without ``chunk`` are BLAS-style: each depth block of a few
        hundred steps is summed from zero and then added to the total, so a sum may differ
        by rounding errors from the same adds made one by one in order. Any other
        ``rounding``, or a ``chunk`` (``chunk`` = the depth is one run), emulates the adds
        in order. The float32 path's adds are fused
        multiply-adds (exact products) on every CPU: without FMA hardware they are
        emulated exactly, giving the same bits as the AVX2 kernels (float64 products
        are rounded there). Accumulators start at +0, and
        an exact zero sum is +0 in every rounding mode (IEEE 754 makes it -0 rounding
        down).
    chunk: runs of ``chunk`` products accumulate in ``accumulate``; each run's total is
        added (rounded the same way) into an accumulator of format ``chunk_accumulate``
        (default: ``accumulate``).
    seed, rbits: stochastic rounding (rbits default 32). The k-th product's add into
        element (i, j) draws the top ``rbits`` bits of a word of (row i, step k) xor a word of
        (column j, step k), so the result is the same at any thread count, and rows do not
        depend on the rows after them (``matmul(a[:r], b)`` is the first ``r`` rows of
        ``matmul(a, b)``; without ``chunk``, columns likewise). The matrices of a stack
        draw independent bits: matrix j (counted over the broadcast batch dimensions, in
        C order) with a key derived from the seed and j, the first with the seed's own
        (``matmul(a[0], b)`` is the first of ``matmul(a, b)``). Every element's bits are
        uniform and independent from step
        to step, and any three elements' are independent of each other (four elements on the
        corners of a rectangle have words whose xor is zero). Chunk totals draw theirs keyed
        by (element, step). An add rounds up when the
        ``rbits`` random bits are below the top ``rbits`` bits of the exact sum's remainder
        under the unit. With ``rbits`` at most the bits a float32 sum keeps below the
        accumulator's unit (``23 - man``: 13 for float16, 16 for bfloat16, 14 for
        FloatFormat(6, 9)), fp8, bf16 and fp16 inputs run about twice as fast (not into
        formats of 5 or fewer mantissa bits, such as float8_e5m2).
    out_dtype: dtype of the result; default the accumulator's type (float32, float64,
        int32; emulated accumulation: float32 when the formats fit in it). Other dtypes
        (float16, bfloat16, fp8 ...) receive the accumulators rounded once (nearest even).
    out: array to write the result to (any strides).
    """
    a = _as_array(a, "a")
    b = _as_array(b, "b")
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"{'a' if a.ndim == 0 else 'b'}: matmul needs arrays of at least 1 dimension")
    av, aspec, fa = _operand(a, "a")
    bv, bspec, fb = _operand(b, "b")
    acc = _parse_accumulate(accumulate)
    chunk = _parse_chunk(chunk)
    rounding = _check_rounding(rounding)
    rbits_v = _rbits_arg(rbits)
    cacc: Optional[Format] = None
    if chunk_accumulate is not None:
        if chunk is None:
            raise ValueError("chunk_accumulate: only meaningful together with chunk")
        c2 = _parse_accumulate(chunk_accumulate, "chunk_accumulate", int32=False)
        if isinstance(c2, str):
            raise ValueError("chunk_accumulate: expected a float format, got \"int32\"")
        cacc = c2

    # Shapes (numpy matmul rules).
    a2 = av[np.newaxis, :] if av.ndim == 1 else av
    b2 = bv[:, np.newaxis] if bv.ndim == 1 else bv
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"b: shape mismatch: a has shape {a.shape} and b has shape {b.shape} "
                         f"(a.shape[-1] must equal b.shape[-2])")
    if a2.ndim == 2 and b2.ndim == 2:
        batch: tuple = ()
    else:
        batch = _broadcast_batch(a2.shape[:-2], b2.shape[:-2])
        if batch is None:
            raise ValueError(f"b: batch dimensions of a {a.shape} and b {b.shape} do not broadcast")
    m, n = a2.shape[-2], b2.shape[-1]
    shape = tuple(batch) + (() if a.ndim == 1 else (m,)) + (() if b.ndim == 1 else (n,))

    # The path.
    # int8 beside a float: its values as they are (every format holds them exactly or
    # rounds them as it rounds any value), as numpy's int8 @ float32 is float32.
    both_i8 = fa == _I8 and fb == _I8
    emulated = False
    if acc == "int32":
        if not both_i8:
            raise TypeError(f"accumulate: \"int32\" needs both inputs int8, got {a.dtype} and {b.dtype}")
        if cacc is not None:
            raise ValueError("chunk_accumulate: \"int32\" accumulation is exact (chunking changes nothing); "
                             "use accumulate=lowp.IntFormat(32) to add chunk totals into another format")
        natural, path = np.dtype(np.int32), "i32"
    elif acc == _F32 and chunk is None and rounding == "nearest_even":
        if both_i8:
            natural, path = np.dtype(np.int32), "i32"
        elif fa._fits_f32() and fb._fits_f32():
            natural, path = np.dtype(np.float32), "f32"
        else:
            natural, path = np.dtype(np.float64), "f64"
    elif acc == _F64 and chunk is None and rounding == "nearest_even":
        natural, path = np.dtype(np.float64), "f64"
    else:
        if isinstance(acc, str):
            raise TypeError("accumulate: chunk and rounding modes need a float format accumulator")
        emulated = True
        for f, arg in ((acc, "accumulate"), (cacc, "chunk_accumulate")):
            if f is not None and not _has_nan(f) and _nan_product(a, b):
                raise ValueError(f"{arg}: {f!r} has no NaN, and a product of a and b is NaN "
                                 f"(a NaN input, or an infinity times zero)")
            if _inf_without_nan(f) and (_any(a, np.isinf) or _any(b, np.isinf)):
                raise ValueError(_INF_NO_NAN.format(arg=arg, f=f, what="a or b"))
        fits = acc._fits_f32() and (cacc is None or cacc._fits_f32())
        natural, path = np.dtype(np.float32 if fits else np.float64), "emu"
    seed_w = _seed_word(seed, rounding if emulated else "nearest_even")  # (checked on every path)

    if out_dtype is not None:
        target = _target_dtype(out_dtype, "out_dtype")
        if out is not None and isinstance(out, np.ndarray):
            if not _same_values(out.dtype, target):
                raise TypeError(f"out: dtype {out.dtype} does not match out_dtype {target!r}")
            target = out.dtype
    else:
        target = out.dtype if isinstance(out, np.ndarray) else natural
    if out is not None:
        out = _check_out(out, shape)
        result = out
    else:
        result = result_empty(tuple(shape), target, _SCRATCH_MIN)

    k = a2.shape[-1]
    if path == "i32" and k > _INT32_DEPTH and m * n > 0:
        # int32 sums could wrap past 2^31: depth blocks whose int32 sums are exact,
        # added in int64 (an int32 result that does not hold them raises).
        def part(k0: int) -> np.ndarray:
            sa = a[..., k0:k0 + _INT32_DEPTH]
            sb = b[k0:k0 + _INT32_DEPTH] if b.ndim == 1 else b[..., k0:k0 + _INT32_DEPTH, :]
            return np.asarray(matmul(sa, sb, accumulate="int32"), np.int64)
        total = part(0)
        for k0 in range(_INT32_DEPTH, k, _INT32_DEPTH):
            total += part(k0)
        if target == np.int32 and total.size and not (-2**31 <= total.min() and total.max() < 2**31):
            arg = "out" if out is not None and out_dtype is None else "out_dtype"
            raise ValueError(f"{arg}: the exact int8 sums (from {total.min()} to {total.max()}, depth {k}) do not "
                             f"fit int32; pass out_dtype=np.int64 (or float64)")
        _convert_into(total, result, "out" if out is not None and out_dtype is None else "out_dtype")
        return result[()] if out is None and result.ndim == 0 else result

    # Emulated products are written as float64, or straight as float32 when the
    # accumulators fit in it (their values are then exact in float32).
    direct = (target == natural and result.flags.aligned
              and not np.may_share_memory(result, a) and not np.may_share_memory(result, b))
    core_dtype = natural
    if direct:
        res_core = result
    else:
        # A temporary: from the buffer cache when large, so that repeated products do
        # not fault in and zero fresh pages on the calling thread.
        res_core = result_empty(tuple(shape), core_dtype, _SCRATCH_MIN)
    # 2-D views of the result.
    if a.ndim == 1 and b.ndim == 1:
        r2 = res_core.reshape(1, 1)
    elif a.ndim == 1:
        r2 = res_core[..., np.newaxis, :]
    elif b.ndim == 1:
        r2 = res_core[..., np.newaxis]
    else:
        r2 = res_core
    # Broadcast batches.
    ab = np.broadcast_to(a2, tuple(batch) + a2.shape[-2:]) if batch else a2
    bb = np.broadcast_to(b2, tuple(batch) + b2.shape[-2:]) if batch else b2
    if m * n > 0:
        # A stack goes to the kernels a last batch axis at a time, in one call each
        # (small products there run one per thread); leading batch axes loop here.
        def run(dst: np.ndarray, cspec: Any) -> None:
            for q, idx in enumerate(np.ndindex(*batch[:-1]) if len(batch) > 1 else ((),)):
                x, y, o = ab[idx], bb[idx], dst[idx]  # 3-D: a batch axis; 2-D without one
                if path == "emu":
                    # (Matrix q * batch[-1] + i of the stack draws its own stochastic bits.)
                    _lowp.matmul_emulated_into(x, aspec, y, bspec, o, acc._spec, chunk, cspec, rounding, seed_w,
                                               rbits_v, q * batch[-1] if batch else 0)
                else:
                    _lowp.matmul_into(x, aspec, y, bspec, o)

        run(r2, cacc._spec if cacc is not None else None)
        lost = _totals_may_be_lost(acc, cacc, chunk) if path == "emu" else None
        if lost is not None:
            # The same chunks again with float64 totals, which keep a NaN total (and
            # make one of infinities of both signs).
            shadow = np.empty(r2.shape, np.float64)
            run(shadow, _F64._spec)
            if _any(shadow, np.isnan):
                raise ValueError(lost)
    if not direct:
        if path == "emu" and target == natural:
            result[...] = res_core  # exact: the values are in the accumulator format
        else:
            _convert_into(res_core, result, "out" if out is not None and out_dtype is None else "out_dtype")
    if out is None and result.ndim == 0:
        return result[()]
    return result


#: Results and temporaries of at least this many bytes come from the buffer cache
#: (lowp._memory): a fresh array costs a page fault and a page zeroing per page, a
#: tenth of a millisecond per megabyte, comparable with a 512^3 product on two threads.
#: The cache hands out blocks of whole 2 MiB pages, reused for requests of at least
#: half a block: smaller arrays come from numpy's allocator.
_SCRATCH_MIN = 1 << 20


def _scale_vec(p: Any, axis: Optional[int], ndim: int, want_axis: int, size: int, arg: str) -> Optional[np.ndarray]:
    """Per-tensor (scalar) or per-`want_axis` parameters as a float64 vector; None when they do not factor."""
    p = np.asarray(p, dtype=np.float64)
    if axis is None or p.ndim == 0 or p.size == 1:
        return np.full(size, float(p.reshape(-1)[0]) if p.size else 0.0)
    ax = axis % ndim
    if ax != want_axis:
        return None
    if p.size != size:
        raise ValueError(f"{arg}: {p.size} parameters along axis {axis} do not match size {size}")
    return p.reshape(-1)


# Rows of A the int8 products read B in place for (with B's rows or columns
# contiguous), at most.
_INT8_VECTOR_ROWS = 8


#: The longest depth whose int8 x int8 sums int32 always holds: 2^31 - 1 >= k * 2^14.
_INT32_DEPTH = (2**31 - 1) >> 14


def qmatmul(qa: QuantizedArray, qb: QuantizedArray, *, out_dtype: Any = np.float32) -> np.ndarray:
    """Product of two int8 ``QuantizedArray`` matrices: exact int32 accumulation of the
    values, then scales and zero points applied (per tensor, per row of ``qa``
    (``axis=0``), per column of ``qb`` (``axis=1``)):

    ``C[i, j] = sa[i] * sb[j] * sum_k (qa[i, k] - za[i]) * (qb[k, j] - zb[j])``.

    Quantization along the inner dimension does not factor out of the sum; those
    operands are dequantized to float64 (exactly) and multiplied with float64
    accumulation, then rounded into ``out_dtype``: the exact result's rounding unless
    the float64 sum has rounded (terms far apart in size, or cancelling).
    ``out_dtype``: float32 (also for None), float64, float16 or a low-precision dtype.
    """
    for q, arg in ((qa, "qa"), (qb, "qb")):
        if not isinstance(q, QuantizedArray):
            raise TypeError(f"{arg}: expected a lowp.QuantizedArray, got {type(q).__name__}")
        if q.values.dtype != np.int8:
            raise TypeError(f"{arg}: values must be int8, got {q.values.dtype}")
        if q.values.ndim != 2:
            raise ValueError(f"{arg}: expected a 2-D QuantizedArray, got shape {q.values.shape}")
    target = _target_dtype(np.float32 if out_dtype is None else out_dtype, "out_dtype")
    A, B = qa.values, qb.values
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"qb: shape mismatch: qa has shape {A.shape} and qb has shape {B.shape}")
    m, k = A.shape
    n = B.shape[1]
    sa = _scale_vec(qa.scale, qa.axis, 2, 0, m, "qa.scale")
    za = _scale_vec(qa.zero_point, qa.axis, 2, 0, m, "qa.zero_point")
    sb = _scale_vec(qb.scale, qb.axis, 2, 1, n, "qb.scale")
    zb = _scale_vec(qb.zero_point, qb.axis, 2, 1, n, "qb.zero_point")
    res = np.empty((m, n), dtype=target)
    if sa is None or za is None or sb is None or zb is None:
        r = matmul(qa._dequantize64(), qb._dequantize64())
        _convert_into(r, res, "out_dtype")
        return res
    # Sums of B's columns and A's rows for the zero points, by the same exact int32
    # products (a row or column of ones; exact below 2^24 values of 128): B's with A's
    # rows where those stay few enough for the vector paths (B read once, in place).
    zpa, zpb = bool(np.any(za != 0)), bool(np.any(zb != 0))
    exact_sums = k < 2**24
    if zpa and k <= _INT32_DEPTH and m < _INT8_VECTOR_ROWS:
        both = matmul(np.concatenate([A, np.ones((1, k), np.int8)]), B)
        s, col_b = both[:m].astype(np.float64), both[m].astype(np.float64)
    else:
        # Exact int32 sums, over depth blocks that int32 holds (then exact in float64).
        s = matmul(A[:, :_INT32_DEPTH], B[:_INT32_DEPTH]).astype(np.float64)
        for k0 in range(_INT32_DEPTH, k, _INT32_DEPTH):
            s += matmul(A[:, k0:k0 + _INT32_DEPTH], B[k0:k0 + _INT32_DEPTH])
        if zpa:
            col_b = (matmul(np.ones((1, k), np.int8), B)[0] if exact_sums else B.sum(axis=0, dtype=np.int64)).astype(np.float64)
    if zpa:
        s -= za[:, None] * col_b[None, :]
    if zpb:
        row_a = matmul(A, np.ones((k, 1), np.int8))[:, 0] if exact_sums else A.sum(axis=1, dtype=np.int64)
        s -= zb[None, :] * row_a.astype(np.float64)[:, None]
        if zpa:
            s += k * za[:, None] * zb[None, :]
    # sa * sb is exact in float64 (float32 scales); the product with the exact integer
    # sums is rounded to odd unless float64 is the result, so the result rounds once.
    scale = sa[:, None] * sb[None, :]
    wide = res.dtype.kind == "f" and res.dtype.itemsize >= 8  # float64 (either byte order), longdouble
    s = s * scale if wide else _mul_to_odd(s, scale)
    _convert_into(s, res, "out_dtype")
    return res


@_keeps_generator_on_error
def sum(x: Any, axis: Any = None, *, accumulate: Any = "float32", chunk: Optional[int] = None,  # noqa: A001
        chunk_accumulate: Any = None, rounding: str = "nearest_even", seed: SeedLike = None,
        rbits: Optional[int] = None) -> Any:
    """Sum of ``x`` along ``axis`` (None: all elements), adding in index order with every
    add rounded into ``accumulate`` (``"float32"``, ``"float64"`` or any format) with
    ``rounding``; ``chunk`` as in :func:`matmul`. Returns float32 when the accumulator
    fits in it (else float64); a numpy scalar when ``axis`` is None. The accumulator
    starts at +0, and an exact zero sum is +0 in every rounding mode. Integer values enter
    the sums exactly (64-bit ones up to 2**53 in magnitude); each add is still rounded into
    ``accumulate`` (float32 rounds sums beyond 2**24; ``"float64"`` holds every sum of
    integers up to 2**53).

    A bfloat16 accumulator stalls once the sum outgrows the addends
    (``sum(ones(4096, bf16), accumulate="bf16") == 256``); float32 or chunked
    accumulation does not.
    """
    x = _as_array(x, "x")
    if x.dtype.kind in "iub" and x.dtype != np.int8:
        # Widened without copying broadcast axes: the distinct values only.
        d = _distinct(x)
        if x.dtype.itemsize == 8 and d.size and not (-2**53 <= int(d.min()) and int(d.max()) <= 2**53):
            raise ValueError(f"x: {x.dtype} values beyond 2**53 in magnitude have no exact float64 value "
                             f"(the sums add exact values); convert them first")
        x = np.broadcast_to(d.astype(np.float64), x.shape)
    xv, spec, fx = _operand(x, "x")
    acc = _parse_accumulate(accumulate, int32=False)
    if isinstance(acc, str):
        raise TypeError("accumulate: \"int32\" is not a float format; use a format or \"float32\"/\"float64\"")
    chunk = _parse_chunk(chunk)
    rounding = _check_rounding(rounding)
    rbits_v = _rbits_arg(rbits)
    cacc = None
    if chunk_accumulate is not None:
        if chunk is None:
            raise ValueError("chunk_accumulate: only meaningful together with chunk")
        cacc = _parse_accumulate(chunk_accumulate, "chunk_accumulate", int32=False)
        if isinstance(cacc, str):
            raise ValueError("chunk_accumulate: expected a float format, got \"int32\"")
    for f, arg in ((acc, "accumulate"), (cacc, "chunk_accumulate")):
        if f is not None and not _has_nan(f) and _any(x, np.isnan):
            raise ValueError(f"{arg}: {f!r} has no NaN, and x contains NaN")
        if _inf_without_nan(f) and _any(x, np.isinf):
            raise ValueError(_INF_NO_NAN.format(arg=arg, f=f, what="x"))
    if axis is None:
        axes = tuple(range(xv.ndim))
    else:
        ax = axis if isinstance(axis, tuple) else (axis,)
        for a_ in ax:
            if isinstance(a_, (bool, np.bool_)) or not isinstance(a_, (int, np.integer)):
                raise TypeError(f"axis: expected None, an int or a tuple of ints, got {axis!r}")
            if not -xv.ndim <= int(a_) < xv.ndim:
                # (numpy's AxisError, a ValueError and an IndexError, as numpy.sum raises.)
                raise np.exceptions.AxisError(int(a_), xv.ndim, "axis")
        axes = tuple(sorted(int(a_) % xv.ndim for a_ in ax))  # a set of axes: added in index order
        if len(set(axes)) != len(axes):
            raise ValueError(f"axis: repeated axis in {axis!r}")
    rest = tuple(i for i in range(xv.ndim) if i not in axes)
    order = axes + rest
    moved = xv if order == tuple(range(xv.ndim)) else xv.transpose(order)
    kdim = math.prod(xv.shape[i] for i in axes)
    rshape = tuple(xv.shape[i] for i in rest)
    mdim = math.prod(rshape)
    x2 = moved.reshape(kdim, mdim)
    fits = acc._fits_f32() and (cacc is None or cacc._fits_f32())
    res = np.zeros((1, mdim), dtype=np.float32 if fits else np.float64)
    seed_w = _seed_word(seed, rounding)
    if mdim > 0:
        _lowp.sum_into(x2, spec, res, acc._spec, chunk, cacc._spec if cacc is not None else None,
                       rounding, seed_w, rbits_v)
        lost = _totals_may_be_lost(acc, cacc, chunk)
        if lost is not None:
            # The same chunks again with float64 totals, which keep a NaN total (and
            # make one of infinities of both signs).
            shadow = np.zeros((1, mdim), np.float64)
            _lowp.sum_into(x2, spec, shadow, acc._spec, chunk, _F64._spec, rounding, seed_w, rbits_v)
            if _any(shadow, np.isnan):
                raise ValueError(lost)
    r = res.reshape(rshape)
    return r[()] if r.ndim == 0 else r


def _numeric_dtype(dtype: Any) -> np.dtype:
    """``dtype`` of :func:`padded_ld` and :func:`empty`: numbers only (bools, integers,
    floats, complex, the low-precision dtypes)."""
    d = _target_dtype(dtype, "dtype")
    if d.hasobject or d.kind not in "biufcV" or d.type is np.void:  # (raw bytes and records: no numbers)
        raise TypeError(f"dtype: expected a numeric dtype, got {d}")
    return d


def padded_ld(n: int, dtype: Any) -> int:
    """A cache-friendly leading dimension (in elements) for rows of ``n`` elements:
    ``n`` rounded up to whole 64-byte cache lines, plus one more line when the row
    would be a multiple of 1024 bytes. On a 32 KiB 8-way L1 (4 KiB per way) a
    4096-byte row stride sends every row of a column to one set, so walking a
    column of 1024 float32 rows thrashes; 1040 (and 1008) spread them."""
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n: expected an int, got {type(n).__name__}")
    if not 0 <= n < 2**62:
        raise ValueError(f"n: must be in 0..2**62 - 1, got {n}")
    d = _numeric_dtype(dtype)
    if d.itemsize == 0 or 64 % d.itemsize:
        raise TypeError(f"dtype: {d} has an itemsize of {d.itemsize} bytes; padded rows need one that divides "
                        f"the 64-byte cache line (1, 2, 4, 8, 16, 32 or 64)")
    return int(_lowp.padded_ld(int(n), d.itemsize))


def empty(shape: Any, dtype: Any = np.float32, *, padded: bool = True) -> np.ndarray:
    """An uninitialised array whose rows (last axis) start 64-byte aligned at a
    stride of ``padded_ld(shape[-1], dtype)`` elements; a view of a larger buffer.
    ``padded=False`` is ``numpy.empty``."""
    d = _numeric_dtype(dtype)
    boolean(padded, "padded")
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (int(shape),)
    if isinstance(shape, np.ndarray) and shape.ndim == 1 and shape.dtype.kind in "iu" or isinstance(shape, range):
        shape = tuple(int(s) for s in shape)
    try:
        if not isinstance(shape, (tuple, list)) or not all(isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)) for s in shape):
            raise TypeError
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape: expected an int or a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"shape: negative dimensions are not allowed, got {shape}")
    if not padded or len(shape) == 0 or 0 in shape:
        # (No elements, no rows to pad.)
        try:
            return np.empty(shape, dtype=d)
        except ValueError as e:
            raise ValueError(f"shape: {shape} is too large ({e})") from None
    n = shape[-1]
    rows = math.prod(shape[:-1])
    # (numpy refuses shapes whose nonzero dimensions' product is past its range even
    # when another dimension is 0.)
    if n >= 2**62 or max(rows, 1) * (n + 64) * d.itemsize >= 2**63:
        raise ValueError(f"shape: {shape} is too large")
    ld = padded_ld(n, d)
    nbytes = rows * ld * d.itemsize
    raw = np.empty(nbytes + 64, dtype=np.uint8)
    off = (-raw.ctypes.data) % 64
    try:
        base = raw[off:off + nbytes].view(d).reshape(shape[:-1] + (ld,))
    except ValueError as e:
        raise ValueError(f"shape: {shape} is too large ({e})") from None
    return base[..., :n]
