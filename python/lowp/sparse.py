"""Sparse matrices with low-precision values: CSR, CSC, COO, BSR and N:M structured.

Values are float32, float16, int8 (with a per-matrix ``scale``) or any low-precision
format (bf16, fp8, posits; ml_dtypes/lowp dtypes or a :class:`lowp.Format`). Low-precision
values are stored as their encodings and decoded on the fly inside the Rust kernels, so
``A @ x`` reads 1 or 2 bytes per value. Products accumulate in float32 and return float32.

Index arrays are int32 (int64 when a count exceeds 2**31 - 1, or when given so).
``M.nbytes`` counts values, indices and pointers. ``x @ M`` and ``M.matmul(x,
transpose=True)`` run the transposed product directly, without building the transpose, as
does ``M.T @ x`` for CSR, CSC and COO, whose ``.T`` is a view (BSR's and N:M's ``.T``
build the transposed matrix, as scipy's BSR does).

Conversions keep the values' encodings, so dense -> sparse -> dense, scipy -> lowp ->
scipy and conversions between formats are exact. Duplicate entries (which CSR, CSC and
COO may hold) are kept from CSR to CSC and back and from either to COO, as in scipy. They
are added where the result holds one value a position (COO to CSR or CSC, as in scipy;
BSR, N:M and ``to_dense``): summed in float64, rounded once into the format (int8
saturates). scipy has no float16 or low-precision
dtypes: ``to_scipy`` gives float32 values for those (exactly the same numbers). A matrix
with a ``scale`` (``astype(np.int8, scale=...)``) represents ``stored values * scale``;
``to_scipy`` gives that product in float64.

``M.data`` is a writable view of the stored values (``M.data *= 2`` as in scipy), and
``M.data = values`` stores new values of the same shape, rounded once to nearest even into
the matrix's format; products always use the values stored at the time of the call. For a
format without a numpy dtype (a custom :class:`lowp.FloatFormat` or :class:`lowp.PositFormat`)
``M.data`` is a read-only decoded copy: assign with ``M.data = values``.
"""

from __future__ import annotations

import itertools
import math
import numbers
from typing import Any, Optional

import numpy as np

from . import _lowp
from ._args import boolean
from ._convert import (_NO_FORMAT, _array_arg, _as_float_array, _check_rounding, _div_to_odd, _encode,
                       _native, _seed_word, _sub_byte_codes, decode, encode)
from ._convert import round as _round
from ._formats import Format, format as _format

__all__ = ["CSR", "CSC", "COO", "BSR", "NM", "prune", "prune_nm", "issparse"]

_F32 = np.dtype(np.float32)
_FMT_F32 = _format("float32")
_FMT_BF16 = _format("bfloat16")
_I32_MAX = np.iinfo(np.int32).max
_F32_MAX = float(np.finfo(np.float32).max)


def _contig(x: Any, dtype: Any = None) -> np.ndarray:
    """``np.ascontiguousarray``, copied again where the result is not aligned (a view at
    an odd byte offset), which the core cannot read in place."""
    a = np.ascontiguousarray(x, dtype=dtype)
    return a if a.flags.aligned else a.copy()


# ---------------------------------------------------------------- values

def _target_format(dtype: Any) -> Optional[Format]:
    """The stored format for a requested ``dtype`` (None: float32)."""
    if isinstance(dtype, Format):
        f = dtype
    else:
        try:
            dt = np.dtype(dtype) if not isinstance(dtype, str) else None
        except TypeError:
            raise TypeError(f"dtype: expected a numpy dtype, a format name or a Format, got {dtype!r}") from None
        if dt is not None and dt == np.float64:
            raise TypeError("dtype: float64 values are not stored; accepted: float32, float16, int8, "
                            "and low-precision dtypes or formats (bf16, fp8, posits)")
        try:
            f = _format(dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"dtype: {str(e).split(': ', 1)[-1].split('; ', 1)[0]}; accepted: float32, float16, "
                            "int8, and low-precision dtypes or formats (bf16, fp8, posits)") from None
    if f._spec == _FMT_F32._spec:
        return None
    if f.bits > 32 or (f.bits > 16 and f.storage_dtype.itemsize > 4):
        raise TypeError(f"dtype: {f!r} is wider than 32 bits; accepted formats have at most 32")
    return f


def _source_format(dt: np.dtype, arg: str = "data") -> Optional[Format]:
    """The format already held by an array of dtype ``dt`` (None: store as float32)."""
    if not dt.isnative:
        dt = dt.newbyteorder("=")
    if dt == np.float32 or dt == np.float64 or dt.kind in "bu" or (dt.kind == "i" and dt != np.int8):
        return None
    if dt == np.float16 or dt == np.int8:
        return _format(dt)
    try:
        return _format(dt)
    except (TypeError, ValueError):
        raise TypeError(f"{arg}: unsupported dtype {dt}; accepted: float32/64, float16, int8, integers, "
                        "and the low-precision dtypes of lowp and ml_dtypes" + _NO_FORMAT) from None


def _encode_values(x: np.ndarray, fmt: Optional[Format], rounding: str = "nearest_even", saturate: bool = False,
                   seed: Any = None, name: str = "data") -> np.ndarray:
    """Values ``x`` (any supported dtype) stored in ``fmt``: float32 values or codes.
    Errors name ``name``."""
    x = _native(x)
    src = _source_format(x.dtype)
    # (The same values as they are; saturating changes the infinities among them.)
    if src is not None and fmt is not None and src._spec == fmt._spec and not saturate:
        return _sub_byte_codes(_contig(x).view(fmt.storage_dtype), fmt, x.dtype, "data")
    if fmt is None and not saturate:
        if x.dtype == np.float32:
            return _contig(x)
        if x.dtype == np.float64 and rounding == "nearest_even":
            return x.astype(np.float32)
    if fmt is None:
        # (Integers beyond 2^53 round once from their exact value, not through float64.)
        return _round(x, _FMT_F32, rounding, saturate=saturate, seed=seed).astype(np.float32)
    # (Integers go in as they are: those beyond 2^53 round once from their exact value.)
    xf = x if x.dtype.kind in "iu" else _as_float_array(x, name)
    return _encode(xf, fmt, rounding, saturate=saturate, seed=seed, name=name)


_TABLES: dict = {}


def _table(fmt: Format, scale: float) -> np.ndarray:
    """f32 values of every code of an 8/16-bit format, times ``scale`` (cached)."""
    key = (fmt._spec, scale)
    t = _TABLES.get(key)
    if t is None:
        size = 256 if fmt.storage_dtype.itemsize == 1 else 65536
        t = np.full(size, np.nan, np.float32)
        codes = np.arange(2 ** fmt.bits, dtype=np.uint64).astype(fmt.storage_dtype)
        vals = decode(codes, fmt, np.float64) * scale
        with np.errstate(over="ignore"):  # scaled past float32's range: inf, as in the products
            t[: codes.size] = vals.astype(np.float32)
        if len(_TABLES) > 64:
            _TABLES.clear()
        _TABLES[key] = t
    return t


def _decode_values(v: np.ndarray, fmt: Optional[Format], dtype: Any = np.float64) -> np.ndarray:
    if fmt is None:
        return v.astype(dtype)
    return decode(v, fmt, dtype)


def _as_dense_f32(x: Any, arg: str = "x") -> np.ndarray:
    """The dense operand of a product as a float32 array of at least one dimension."""
    if type(x) is np.ndarray and x.dtype == np.float32 and x.ndim:
        return _contig(x)
    if issparse(x) or _is_scipy_sparse(x):
        raise TypeError(f"{arg}: sparse @ sparse is not supported; convert one operand with .to_dense()")
    a = _as_float_array(x, arg)
    if a.ndim == 0:  # as numpy and scipy: @ takes vectors and matrices only
        raise ValueError(f"{arg}: scalar operands are not allowed with @; expected a 1-D or 2-D array "
                         "(to scale the values: M.data *= s)")
    xa = _native(np.asarray(x))
    if xa.dtype.kind in "iu" and xa.dtype.itemsize == 8:
        # (64-bit integers round once from their exact value, not through float64.)
        return _contig(_round(xa, _FMT_F32).astype(np.float32))
    return _contig(a, dtype=np.float32)


# ---------------------------------------------------------------- indices

def _as_index(a: Any, name: str) -> np.ndarray:
    arr = np.asarray(_array_arg(a, name))
    if arr.ndim != 1:
        raise ValueError(f"{name}: must be 1-D, got shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise ValueError(f"{name}: must hold integers, got dtype {arr.dtype}")
    return arr


def _index_pair(a: np.ndarray, b: np.ndarray, maxval: int) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays as one index dtype: kept when already int32/int64 and equal, else the
    smallest of int32/int64 holding ``maxval``; values out of range fail validation later."""
    if a.dtype == b.dtype and a.dtype in (np.int32, np.int64) and (a.dtype == np.int64 or maxval <= _I32_MAX):
        return _contig(a), _contig(b)
    big = maxval > _I32_MAX
    for arr in (a, b):
        if arr.size and arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
            big = True
        if arr.size and arr.dtype.kind in "iu" and (int(arr.max()) > _I32_MAX or int(arr.min()) < -_I32_MAX - 1):
            big = True
    dt = np.int64 if big else np.int32
    return _contig(a, dtype=dt), _contig(b, dtype=dt)


def _compact_pair(a: np.ndarray, b: np.ndarray, maxval: int) -> tuple[np.ndarray, np.ndarray]:
    """Computed (hence valid) indices as int32 when ``maxval`` fits, else int64."""
    dt = np.int32 if maxval <= _I32_MAX else np.int64
    return _contig(a, dtype=dt), _contig(b, dtype=dt)


def _pair_starts(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For pairs (a[i], b[i]) sorted on a then b: where each distinct pair starts."""
    first = np.ones(a.size, bool)
    first[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return first


def _check_shape(shape: Any, arg: str = "shape") -> tuple[int, int]:
    try:
        dims = [operator_index(s) for s in shape]
    except TypeError:
        raise ValueError(f"{arg}: expected two non-negative ints, got {shape!r}") from None
    if len(dims) != 2:
        raise ValueError(f"{arg}: expected two non-negative ints, got {shape!r}")
    m, n = dims
    if m < 0 or n < 0:
        raise ValueError(f"{arg}: expected two non-negative ints, got {shape!r}")
    if m >= 1 << 63 or n >= 1 << 63:
        raise ValueError(f"{arg}: dimensions must be below 2**63 (int64 indices), got {shape!r}")
    return m, n


def _major(indptr: np.ndarray, dtype: Any) -> np.ndarray:
    """The major index (row of CSR, column of CSC, block row of BSR) of every stored entry."""
    return np.repeat(np.arange(indptr.size - 1, dtype=dtype), np.diff(indptr))


def _check_indptr_size(rows: int, shape: tuple) -> None:
    """A compressed matrix keeps ``rows + 1`` int64 index pointers: beyond what any memory
    holds, a ValueError naming the shape (numpy's own message would name nothing)."""
    if rows >= 1 << 59:
        raise ValueError(f"shape: {shape} needs {rows + 1} index pointers, more than memory can hold")


def _is_shape_arg(arg: Any) -> bool:
    """Whether a constructor's first argument is scipy's empty-matrix form ``(m, n)``."""
    return (isinstance(arg, tuple) and len(arg) == 2
            and all(not isinstance(a, (tuple, list)) and np.ndim(a) == 0 for a in arg))


def _empty_shape(arg: tuple, shape: Any) -> tuple[int, int]:
    """The shape of an empty ``cls((m, n), shape=...)`` matrix."""
    try:
        m, n = (operator_index(s) for s in arg)
    except TypeError:
        m = n = -1
    if m < 0 or n < 0:
        raise ValueError(f"arg: an empty matrix is given as (m, n) with two non-negative ints, got {arg!r}")
    _check_shape((m, n), "arg")  # (the bound)
    if shape is not None and _check_shape(shape) != (m, n):
        raise ValueError(f"shape: {tuple(shape)!r} differs from the shape {(m, n)} given as the first argument")
    return m, n


_FORMS_COO = "(data, (row, col)) or (m, n)"
_FORMS_COMPRESSED = "(data, indices, indptr), (data, (row, col)) or (m, n)"
_FORMS_NM = "(data, positions) or (m, n)"


def _bad_tuple(arg: tuple, forms: str) -> ValueError:
    items = f"{len(arg)} item" + ("" if len(arg) == 1 else "s")
    return ValueError(f"arg: a tuple of {items} is none of the accepted forms {forms}; dense input is given as "
                      "an ndarray or a list")


def _coo_form(arg: tuple, forms: str) -> tuple[Any, tuple[Any, Any]]:
    """``arg`` (a 2-tuple, not ``(m, n)``) as ``(data, (row, col))``; ``(row, col)`` may
    also be a list of two index sequences or an array of shape ``(2, nnz)``, as in scipy."""
    data, ij = arg
    if isinstance(ij, tuple) and len(ij) == 2:
        return data, ij
    if isinstance(ij, (list, np.ndarray)) and len(ij) == 2 and all(np.ndim(a) == 1 for a in ij):
        return data, (ij[0], ij[1])
    raise TypeError(f"arg: a tuple of 2 items is (data, (row, col)) or (m, n), got a second item of type "
                    f"{type(ij).__name__}{f' and length {len(ij)}' if hasattr(ij, '__len__') else ''}; "
                    f"accepted forms: {forms}; dense input is given as an ndarray or a list")


def _empty_coo(shape: tuple[int, int], dtype: Any) -> "COO":
    """An all-zero COO matrix of ``shape`` with values of ``dtype`` (None: float32)."""
    fmt = None if dtype is None else _target_format(dtype)
    v = _encode_values(np.zeros(0, np.float32), fmt)
    idx = np.zeros(0, np.int32)
    return COO._make(v, fmt, 1.0, idx, idx.copy(), shape, True)


def _check_same_shape(shape: Any, got: tuple[int, int]) -> None:
    """``shape=`` given with dense or sparse input must be that input's shape."""
    if shape is not None and _check_shape(shape) != tuple(got):
        raise ValueError(f"shape: {tuple(shape)!r} differs from the input's shape {tuple(got)}")


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of one dtype hold the same bit patterns."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.flags.c_contiguous and b.flags.c_contiguous and a.nbytes % 8 == 0:
        return bool(np.array_equal(a.reshape(-1).view(np.uint64), b.reshape(-1).view(np.uint64)))
    u = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.view(u), b.view(u)))


def operator_index(s: Any) -> int:
    if isinstance(s, (bool, np.bool_)):
        raise TypeError
    import operator
    return operator.index(s)


def _is_scipy_sparse(x: Any) -> bool:
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover
        return False
    return sp.issparse(x)


def issparse(x: Any) -> bool:
    """Whether ``x`` is a lowp sparse matrix."""
    return isinstance(x, _Sparse)


# ---------------------------------------------------------------- base class

class _Sparse:
    """Shared behaviour: values, dtype, products, conversions."""

    __array_ufunc__ = None  # numpy defers `ndarray @ M` to M.__rmatmul__
    format: str = ""

    # No elementwise comparison (scipy's gives sparse boolean matrices): refused rather
    # than comparing identity, as object's == would. Hashing stays by identity.
    def __eq__(self, other: Any) -> Any:
        raise TypeError("==: lowp sparse matrices do not compare elementwise; compare M.to_dense() or "
                        "M.to_scipy() instead")

    def __ne__(self, other: Any) -> Any:
        raise TypeError("!=: lowp sparse matrices do not compare elementwise; compare M.to_dense() or "
                        "M.to_scipy() instead")

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise ValueError("the truth value of a sparse matrix is ambiguous; use M.nnz or M.to_dense().any()")
    _structure_kw: tuple[str, ...] = ()  # keyword arguments of from_dense/from_scipy beside dtype

    _v: np.ndarray
    _fmt: Optional[Format]
    _scale: float
    _shape: tuple[int, int]

    def _set_values(self, v: np.ndarray, fmt: Optional[Format], scale: float) -> None:
        self._v = v
        self._fmt = fmt
        self._scale = float(scale)
        self._kv: Optional[tuple] = None

    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def ndim(self) -> int:
        return 2

    @property
    def dtype(self) -> Any:
        """The values' numpy dtype (float32, float16, int8, bf16, fp8, posit...). A format
        without a registered dtype gives its :class:`lowp.Format`."""
        if self._fmt is None:
            return _F32
        dt = self._fmt.dtype
        return dt if dt is not None else self._fmt

    @property
    def format_of_values(self) -> Optional[Format]:
        """The lowp Format of the values (None for float32)."""
        return self._fmt

    @property
    def scale(self) -> float:
        """Multiplier of the stored values (int8 quantized matrices); 1.0 otherwise."""
        return self._scale

    @property
    def data(self) -> np.ndarray:
        """The stored values as an array of :attr:`dtype` (codes viewed as the dtype): shape
        ``(nnz,)``, ``(nblocks, br, bc)`` for BSR and ``(rows, groups * n)`` for N:M (zeros in
        unused slots). Without a :attr:`scale` of 1 these are the stored values, before the
        scale.

        A writable view for float32, float16, int8 and every format with a numpy dtype, so
        ``M.data *= 2`` and ``M.data[i] = v`` change the matrix. A format without a numpy dtype
        gives a read-only copy of the decoded values (float32, or float64 for formats float32
        cannot hold): in-place writes raise ValueError instead of being lost.

        ``M.data = values`` (an array of the same shape, any real dtype) stores the values,
        rounded once to nearest even into the matrix's format (int8: saturated to
        [-128, 127]), in place: views of the same storage, such as ``M.T`` of a CSR, CSC or
        COO matrix, see them (BSR's and N:M's ``.T`` are copies). A matrix
        whose values are a read-only array it was built from refuses it (ValueError; its
        :meth:`copy` takes it).
        """
        v = self._values_as_dtype(self._v)
        if self._fmt is not None and self._fmt.dtype is None:
            v.flags.writeable = False  # a decoded copy: writes to it would be lost
        return v.reshape(self._data_shape())

    @data.setter
    def data(self, values: Any) -> None:
        shape = self._data_shape()
        if isinstance(values, _Sparse) or _is_scipy_sparse(values):
            raise TypeError(f"data: expected a dense array of shape {shape}, got a sparse matrix")
        arr = np.asarray(_array_arg(values, "data"))
        if arr.shape != shape:
            raise ValueError(f"data: expected an array of shape {shape} (one value per stored entry), "
                             f"got shape {arr.shape}")
        if not self._v.flags.writeable:
            # (A private copy here would leave views of the same storage, such as M.T,
            # with the old values.)
            raise ValueError("data: the matrix stores its values in a read-only array it was built from; "
                             "M = M.copy() gives it its own")
        self._v[...] = _encode_values(arr.reshape(-1), self._fmt)  # (a no-op after `M.data *= s`)

    def _data_shape(self) -> tuple[int, ...]:
        """The shape of :attr:`data`."""
        return (int(self._v.size),)

    def _values_as_dtype(self, v: np.ndarray) -> np.ndarray:
        if self._fmt is None:
            return v
        dt = self._fmt.dtype
        if dt is None:
            return decode(v, self._fmt, np.float32 if self._fmt._fits_f32() else np.float64)
        return v.view(dt)

    @property
    def nnz(self) -> int:
        """Stored values (explicit zeros included)."""
        return int(self._v.size)

    def _index_nbytes(self) -> int:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes of values + indices + pointers."""
        return int(self._v.nbytes) + self._index_nbytes()

    def __repr__(self) -> str:
        return (f"<lowp.sparse.{type(self).__name__} {self._shape[0]}x{self._shape[1]}, dtype={self.dtype}, "
                f"nnz={self.nnz}, nbytes={self.nbytes}>")

    # -- values for the kernels
    def _kernel_values(self) -> tuple:
        """(values, decoding table or None, bf16) for the kernels.

        Unscaled float32 and bf16 values are read in place, other 8/16-bit codes through a
        table of their 256 or 65536 scaled values. 4-byte formats and float32 with a scale
        need a decoded float32 copy: it is kept with a snapshot of the codes it was decoded
        from and decoded again whenever the stored values differ from the snapshot
        (``M.data`` is a writable view), so a product never uses values no longer stored.
        The comparison reads the values once more, far less than decoding them.
        """
        f, v = self._fmt, self._v
        if f is None and self._scale == 1.0:
            return (v, None, False)
        if f is not None and f._spec == _FMT_BF16._spec and self._scale == 1.0:
            return (v, None, True)
        if f is not None and f.storage_dtype.itemsize <= 2:
            return (v, _table(f, self._scale), False)
        kv = self._kv
        if kv is not None and _same_bits(kv[1], v):
            return kv[0]
        snap = v.copy()
        with np.errstate(over="ignore"):  # scaled past float32's range: inf, as in the products
            if f is None:
                dec = snap * np.float32(self._scale)
            else:
                dec = (decode(snap, f, np.float64) * self._scale).astype(np.float32)
        self._kv = ((dec, None, False), snap)
        return self._kv[0]

    def _check_indices(self) -> None:
        """Validate index arrays (they are writable and may have changed since construction)."""

    # -- products
    def _product(self, x2: np.ndarray, transpose: bool) -> np.ndarray:
        raise NotImplementedError

    def matmul(self, x: Any, *, transpose: bool = False) -> np.ndarray:
        """``self @ x`` (or ``self.T @ x``) for a dense vector or matrix ``x``; float32 result.
        ``x`` is read as float32 (a float64 or integer ``x`` is rounded to float32 first)."""
        return self._matmul(x, boolean(transpose, "transpose"))

    def __matmul__(self, x: Any) -> Any:
        if isinstance(x, _Sparse):
            return NotImplemented
        return self._matmul(x, False)

    def __rmatmul__(self, x: Any) -> Any:
        if isinstance(x, _Sparse):
            return NotImplemented
        a = _as_dense_f32(x)
        if a.ndim not in (1, 2):
            raise ValueError(f"x: must be 1-D or 2-D, got shape {a.shape}")
        if a.shape[-1] != self._shape[0]:
            what = f"length {a.shape[0]}" if a.ndim == 1 else f"{a.shape[1]} columns"
            raise ValueError(f"x: has {what} but the matrix has {self._shape[0]} rows")
        if a.ndim == 1:
            return self._matmul(a, True)
        return _contig(self._matmul(_contig(a.T), True).T)

    def rmatmul(self, x: Any) -> np.ndarray:
        """``x @ self`` without building the transpose."""
        return self.__rmatmul__(x)

    def dot(self, x: Any) -> np.ndarray:
        return self.__matmul__(x)

    def _matmul(self, x: Any, transpose: bool) -> np.ndarray:
        a = _as_dense_f32(x)
        m, n = self._shape
        rows_in, rows_out = (m, n) if transpose else (n, m)
        if a.ndim not in (1, 2):
            raise ValueError(f"x: must be 1-D or 2-D, got shape {a.shape}")
        if a.shape[0] != rows_in:
            what = "transposed matrix" if transpose else "matrix"
            raise ValueError(f"x: has {a.shape[0]} rows but the {what} has {rows_in} columns")
        k = 1 if a.ndim == 1 else a.shape[1]
        x2 = a.reshape(rows_in, k)
        out = np.empty((rows_out, k), np.float32)
        if out.size:
            if self._beyond_f32():
                self._product_f64(x2, transpose, out)
            else:
                self._product(x2, transpose, out)
        return out.reshape(rows_out) if a.ndim == 1 else out

    def _beyond_f32(self) -> bool:
        """Do the (scaled) values reach past float32's normal range where float32 does not
        hold them exactly? The kernels read values as float32, which would turn them into
        inf or 0 while the products themselves may fit. (Within that range a value is read
        rounded to float32, as posit32's are: an error within float32 accumulation's.)"""
        f, sc = self._fmt, self._scale
        if sc == 1.0 and (f is None or f._fits_f32()):
            return False  # (float32 values, or values float32 holds: the kernels' own)
        hi, lo = (_F32_MAX, 2.0**-149) if f is None else (f.max, f.min_subnormal)
        return hi * sc > _F32_MAX or lo * sc < 2.0**-126

    def _product_f64(self, x2: np.ndarray, transpose: bool, out: np.ndarray) -> None:
        """``out = self @ x2`` (or ``self.T @ x2``) from the exact values in float64,
        rounded once into float32: for values float32 cannot hold."""
        c = self._to_coo()
        vals = _decode_values(c._v, c._fmt, np.float64) * c._scale
        r, cl = (c._col, c._row) if transpose else (c._row, c._col)
        order = np.argsort(r, kind="stable")
        r, cl, vals = r[order].astype(np.intp), cl[order].astype(np.intp), vals[order]
        out[...] = 0
        if r.size == 0:
            return
        starts = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
        # Each row's products summed in float64 (reduceat), columns in slices of about 32 MB.
        step = max(1, (1 << 22) // r.size)
        with np.errstate(over="ignore", invalid="ignore"):
            for j in range(0, x2.shape[1], step):
                xs = x2[:, j:j + step].astype(np.float64)
                out[r[starts], j:j + step] = np.add.reduceat(vals[:, None] * xs[cl], starts, axis=0)

    # -- conversions
    def _to_coo(self) -> "COO":
        raise NotImplementedError

    def tocoo(self) -> "COO":
        return self._to_coo()

    def tocsr(self) -> "CSR":
        return CSR._from_coo(self._to_coo())

    def tocsc(self) -> "CSC":
        return CSC._from_coo(self._to_coo())

    def tobsr(self, blocksize: Any = None) -> "BSR":
        return BSR._from_coo(self._to_coo(), blocksize)

    def tonm(self, n: int = 2, m: int = 4) -> "NM":
        return NM._from_coo(self._to_coo(), n, m)

    def asformat(self, format: str, **kw: Any) -> "_Sparse":  # noqa: A002 - scipy's name
        conv = {"csr": self.tocsr, "csc": self.tocsc, "coo": self.tocoo, "bsr": self.tobsr, "nm": self.tonm}
        if not isinstance(format, str):
            raise TypeError(f"format: expected a str, one of {', '.join(conv)}; got {type(format).__name__}")
        if format not in conv:
            raise ValueError(f"format: unknown {format!r}; accepted: {', '.join(conv)}")
        return conv[format](**kw)

    def to_dense(self) -> np.ndarray:
        """The stored values as a dense array of :attr:`dtype` (a format without a dtype gives
        float32, or float64 for formats whose values float32 does not hold). With a :attr:`scale` other than 1 the matrix is ``to_dense() * scale``
        (int8 values stay int8, as ``QuantizedArray.values``); ``to_scipy`` applies it."""
        coo = self._to_coo()._summed()
        m, n = self._shape
        if self._fmt is None:
            d = np.zeros((m, n), np.float32)
        else:
            d = np.zeros((m, n), self._fmt.storage_dtype)  # code 0 is +0 in every format
        # (Copies of the index arrays: numpy's indexing reads an index again after its
        # bounds check, so another thread writing the matrix's own could send it astray.)
        d[coo._row.copy(), coo._col.copy()] = coo._v
        return self._values_as_dtype(d.reshape(-1)).reshape(m, n)

    toarray = to_dense

    def to_scipy(self) -> Any:
        """The same matrix as a scipy.sparse array of the same format (csr/csc/coo/bsr; N:M
        gives csr). Values scipy cannot hold (float16, bf16, fp8, posits) become float32
        (float64 for formats wider than float32), exactly. A matrix with a :attr:`scale`
        other than 1 gives float64 values ``stored * scale`` (exact for power-of-two
        scales, else rounded once), whatever the stored dtype."""
        import scipy.sparse as sp
        self._check_indices()
        v = self._scipy_values(self._v)
        r = self._to_scipy(sp, v)
        if not np.shares_memory(v, self._v):
            # Values converted, so the index arrays must not be shared either: scipy sorts
            # and sums them in place (sort_indices, sum_duplicates, spsolve) and would
            # reorder this matrix's indices under its values.
            if r.format == "coo":
                r.coords = tuple(np.array(c) for c in r.coords)
            else:
                r.indices, r.indptr = np.array(r.indices), np.array(r.indptr)
        return r

    def _scipy_values(self, v: np.ndarray) -> np.ndarray:
        if self._scale != 1.0:
            return _decode_values(v, self._fmt, np.float64) * self._scale
        if self._fmt is None:
            return v
        if self._fmt.dtype == np.int8:
            return v.view(np.int8)
        return decode(v, self._fmt, np.float32 if self._fmt._fits_f32() else np.float64)

    def _to_scipy(self, sp: Any, v: np.ndarray) -> Any:
        raise NotImplementedError

    def _with_values(self, v: np.ndarray, fmt: Optional[Format], scale: float, copy: bool = False) -> "_Sparse":
        """The same structure with values ``v``; ``copy``: with copies of the index arrays."""
        raise NotImplementedError

    def astype(self, dtype: Any, rounding: str = "nearest_even", *, saturate: bool = False, seed: Any = None,
               scale: Optional[float] = None) -> "_Sparse":
        """The same structure with values rounded into ``dtype`` (any rounding mode; stochastic
        rounding with ``seed`` is reproducible). ``scale`` (int8): stored = round(value / scale).
        The result shares no array with ``self`` (as scipy's ``astype``), even for the same dtype."""
        _check_rounding(rounding)
        boolean(saturate, "saturate")
        _seed_word(seed, "nearest_even")  # (checked where no rounding draws from it too)
        fmt = _target_format(dtype)
        # Exact values, float32 when they fit (so stochastic rounding draws as lowp.cast does).
        if self._fmt is None:
            vals = self._v
        else:
            vals = decode(self._v, self._fmt, np.float32 if self._fmt._fits_f32() else np.float64)
        if self._scale != 1.0:
            vals = vals.astype(np.float64) * self._scale
        sc = 1.0
        if scale is not None:
            if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, (numbers.Real, np.floating, np.integer)):
                raise TypeError(f"scale: expected a positive finite number, got {type(scale).__name__}")
            try:
                sc = float(scale)
            except OverflowError:  # (an int past float64's range)
                raise ValueError("scale: must be a positive finite number, got an int past float64's range") from None
            if not (math.isfinite(sc) and sc > 0):
                raise ValueError(f"scale: must be a positive finite number, got {scale!r}")
            vals = _div_to_odd(vals, sc)  # (to odd: the rounding into dtype is the exact quotient's, once)
        if fmt is not None and fmt._spec == (self._fmt._spec if self._fmt is not None else None) and sc == self._scale \
                and rounding == "nearest_even" and not saturate:
            return self._with_values(self._v.copy(), fmt, sc, copy=True)
        v = _encode_values(vals, fmt, rounding, saturate, seed)
        if np.shares_memory(v, self._v):  # float32 to float32: the values themselves
            v = v.copy()
        return self._with_values(v, fmt, sc, copy=True)

    def copy(self) -> "_Sparse":
        """A copy of the values and of every index array."""
        return self._with_values(self._v.copy(), self._fmt, self._scale, copy=True)

    @classmethod
    def from_dense(cls, x: Any, dtype: Any = None, **kw: Any) -> "_Sparse":
        """Compress the nonzeros of the 2-D ``x``; ``dtype`` (None: keep x's low-precision dtype,
        float32 otherwise) rounds the values to nearest even. BSR takes ``blocksize`` (a pair
        dividing the shape; default from the shape), NM takes ``n`` and ``m`` (default 2:4)."""
        cls._check_kw(kw)
        coo = COO._from_dense(x, dtype)
        return cls._from_coo(coo, **kw) if cls is not COO else coo

    @classmethod
    def from_scipy(cls, m: Any, /, dtype: Any = None, **kw: Any) -> "_Sparse":
        """From a scipy.sparse matrix or array. float32 (or int8/low-precision ``dtype`` equal to
        the data's) arrays of the same format are shared, not copied. ``blocksize`` (BSR) and
        ``n``, ``m`` (NM) as for :meth:`from_dense`."""
        if not _is_scipy_sparse(m):
            raise TypeError(f"m: expected a scipy.sparse matrix or array, got {type(m).__name__}")
        cls._check_kw(kw)
        _check_scipy(m)
        return cls._from_scipy(_native_scipy(m), dtype, **kw)

    @classmethod
    def _check_kw(cls, kw: dict) -> None:
        """Keyword arguments of a conversion: the structure's own (BSR: blocksize; NM: n, m)."""
        for k in kw:
            if k not in cls._structure_kw:
                accepted = ", ".join(("dtype",) + cls._structure_kw)
                raise TypeError(f"{k}: unexpected keyword argument for {cls.__name__}.from_dense/from_scipy "
                                f"(accepted: {accepted})")

    @classmethod
    def _from_coo(cls, coo: "COO", *a: Any, **kw: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def _from_scipy(cls, m: Any, dtype: Any, **kw: Any) -> Any:
        return cls._from_coo(COO._from_scipy(m, dtype), **kw)

    def _store(self, data: Any, dtype: Any) -> tuple[np.ndarray, Optional[Format], float]:
        """Values for a constructor: (stored array, format, scale)."""
        if isinstance(data, np.ndarray) or not hasattr(data, "dequantize"):
            arr = np.asarray(_array_arg(data, "data"))
            fmt = _source_format(arr.dtype) if dtype is None else _target_format(dtype)
            return _encode_values(arr.reshape(-1), fmt), fmt, 1.0
        raise TypeError("data: expected an array of values")


def _check_scipy(m: Any, name: str = "m") -> None:
    """Validate the index arrays of a scipy matrix before scipy or lowp converts it (they are
    writable, and scipy checks them only when the matrix is built). Errors name ``name``."""
    if len(m.shape) != 2:
        raise ValueError(f"{name}: must be 2-D, got shape {m.shape}")
    _source_format(np.dtype(m.dtype), f"{name}.dtype")
    mm, nn = (int(s) for s in m.shape)
    if m.format == "coo":
        r, c = _as_index(m.coords[0], f"{name}.row"), _as_index(m.coords[1], f"{name}.col")
        _same_length(m.data, r.size, f"{name}.data", "row")
        if c.size != r.size:
            raise ValueError(f"{name}.col: holds {c.size} entries for {r.size} in {name}.row")
        r, c = _index_pair(r, c, max(mm, nn))
        _lowp.check_range(r, mm, f"{name}.row")
        _lowp.check_range(c, nn, f"{name}.col")
    elif m.format in ("csr", "csc", "bsr"):
        br, bc = m.blocksize if m.format == "bsr" else (1, 1)
        nmaj, nmin = (mm // br, nn // bc) if m.format != "csc" else (nn, mm)
        indptr, indices = _as_index(m.indptr, f"{name}.indptr"), _as_index(m.indices, f"{name}.indices")
        if m.format == "bsr":
            d = np.asarray(m.data)
            if d.shape != (indices.size, br, bc):
                raise ValueError(f"{name}.data: expected shape {(indices.size, br, bc)} ({indices.size} blocks of "
                                 f"{br}x{bc}, one per block index), got {d.shape}")
        else:
            _same_length(m.data, indices.size, f"{name}.data", "indices")
        indptr, indices = _index_pair(indptr, indices, max(mm, nn))
        _lowp.check_compressed(indptr, indices, nmaj, nmin, f"{name}.indptr", f"{name}.indices")
    elif m.format == "lil":
        _check_lil(m, name)


def _same_length(data: Any, n: int, name: str, of: str) -> None:
    d = np.asarray(data)
    if d.ndim != 1 or d.size != n:
        raise ValueError(f"{name}: expected {n} values (one per entry of {of}), got shape {d.shape}")


def _check_lil(m: Any, name: str) -> None:
    """The lists of a scipy LIL matrix: one pair a row, of equal lengths, columns in range
    (they are writable, and scipy's own conversion trusts them: an index out of range
    crashes it). Entries that are not integers are refused where they are read."""
    mm, nn = (int(s) for s in m.shape)
    rows, data = m.rows, m.data
    if len(rows) != mm or len(data) != mm:
        raise ValueError(f"{name}.rows, {name}.data: expected {mm} lists each, got {len(rows)} and {len(data)}")
    for i, (r, d) in enumerate(zip(rows, data)):
        if len(d) != len(r):
            raise ValueError(f"{name}.data: row {i} holds {len(d)} values for {len(r)} column indices in {name}.rows")
        if r and not (0 <= min(r) and max(r) < nn):
            raise ValueError(f"{name}.rows: row {i} holds a column index out of range [0, {nn})")


def _lil_coords(m: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, col, values) of a scipy LIL matrix checked by :func:`_check_lil`."""
    mm, nn = (int(s) for s in m.shape)
    lens = np.array([len(r) for r in m.rows], np.int64)
    total = int(lens.sum())
    col = _as_index(np.array(list(itertools.chain.from_iterable(m.rows))) if total else np.zeros(0, np.int64),
                    "m.rows")
    vals = np.array(list(itertools.chain.from_iterable(m.data)) if total else [], dtype=m.dtype)
    if vals.shape != col.shape:  # (written meanwhile)
        raise ValueError(f"m.data: holds {vals.size} values for {col.size} column indices in m.rows")
    col = _index_pair(col, col, nn)[0]
    _lowp.check_range(col, nn, "m.rows")  # (again: written meanwhile)
    row = np.repeat(np.arange(mm, dtype=np.int64), lens)
    return row, col, vals


def _native_scipy(m: Any) -> Any:
    """``m`` with its values in the machine's byte order: scipy holds swapped ones (an
    assignment to ``.data`` makes them) but refuses them in its conversions."""
    if not hasattr(m, "data"):  # (DOK: a dict, whose values scipy converts as they are)
        return m
    d = np.asarray(m.data)
    if d.dtype.isnative:
        return m
    d = d.astype(d.dtype.newbyteorder("="))
    if m.format == "coo":
        return type(m)((d, (m.coords[0], m.coords[1])), shape=m.shape)
    if m.format in ("csr", "csc", "bsr"):
        return type(m)((d, m.indices, m.indptr), shape=m.shape)
    return m  # (the other formats as they are: scipy's conversion refuses their swapped values)


def _quant_input(x: Any) -> Optional[tuple[np.ndarray, float]]:
    """(int8 values, scale) from a per-tensor symmetric QuantizedArray, else None."""
    from ._quant import QuantizedArray
    if not isinstance(x, QuantizedArray):
        return None
    if x.axis is not None or np.any(np.asarray(x.zero_point) != 0) or x.values.dtype != np.int8:
        raise ValueError("x: only per-tensor symmetric int8 QuantizedArrays can be stored sparse")
    return x.values, float(np.asarray(x.scale))


# ---------------------------------------------------------------- COO

class COO(_Sparse):
    """Coordinate format: ``COO((data, (row, col)), shape)``. Duplicates add up in
    products and in :meth:`to_dense`; :meth:`sum_duplicates` gives canonical form
    (sorted by row then column, no duplicates)."""

    format = "coo"

    def __init__(self, arg: Any, shape: Any = None, dtype: Any = None) -> None:
        if isinstance(arg, tuple) and len(arg) != 2:
            raise _bad_tuple(arg, _FORMS_COO)
        if not isinstance(arg, tuple) or _is_shape_arg(arg):
            if isinstance(arg, _Sparse):
                c = arg.tocoo() if dtype is None else arg.astype(dtype).tocoo()
            elif _is_scipy_sparse(arg):
                _check_scipy(arg, "arg")
                c = COO._from_scipy(arg, dtype)
            elif _is_shape_arg(arg):
                c = _empty_coo(_empty_shape(arg, shape), dtype)
            else:
                c = COO._from_dense(arg, dtype)
            _check_same_shape(shape, c._shape)
            self._init(c._v, c._fmt, c._scale, c._row, c._col, c._shape, c._canonical)
            return
        data, (row, col) = _coo_form(arg, _FORMS_COO)
        data = np.asarray(_array_arg(data, "data"))
        if data.ndim != 1:
            raise ValueError(f"data: must be 1-D, got shape {data.shape}")
        row, col = _as_index(row, "row"), _as_index(col, "col")
        if not (row.size == col.size == data.size):
            raise ValueError(f"data, row, col: lengths differ ({data.size}, {row.size}, {col.size})")
        if shape is None:
            shape = (int(row.max()) + 1 if row.size else 0, int(col.max()) + 1 if col.size else 0)
        m, n = _check_shape(shape)
        row, col = _index_pair(row, col, max(m, n, data.size))
        _lowp.check_range(row, m, "row")
        _lowp.check_range(col, n, "col")
        v, fmt, sc = self._store(data, dtype)
        self._init(v, fmt, sc, row, col, (m, n), None)

    def _init(self, v: np.ndarray, fmt: Optional[Format], scale: float, row: np.ndarray, col: np.ndarray,
              shape: tuple[int, int], canonical: Optional[bool]) -> None:
        self._set_values(v, fmt, scale)
        self._row, self._col, self._shape = row, col, shape
        self._canonical = canonical

    @classmethod
    def _make(cls, v: np.ndarray, fmt: Optional[Format], scale: float, row: np.ndarray, col: np.ndarray,
              shape: tuple[int, int], canonical: Optional[bool] = None) -> "COO":
        c = cls.__new__(cls)
        c._init(v, fmt, scale, row, col, shape, canonical)
        return c

    @property
    def row(self) -> np.ndarray:
        return self._row

    @property
    def col(self) -> np.ndarray:
        return self._col

    @property
    def coords(self) -> tuple[np.ndarray, np.ndarray]:
        return self._row, self._col

    def _index_nbytes(self) -> int:
        return int(self._row.nbytes + self._col.nbytes)

    def _with_values(self, v: np.ndarray, fmt: Optional[Format], scale: float, copy: bool = False) -> "COO":
        if copy:
            return COO._make(v, fmt, scale, self._row.copy(), self._col.copy(), self._shape, self._canonical)
        return COO._make(v, fmt, scale, self._row, self._col, self._shape, self._canonical)

    def _check_indices(self) -> None:
        m, n = self._shape
        _lowp.check_range(self._row, m, "row")
        _lowp.check_range(self._col, n, "col")
        # row and col are writable: whether they are canonical is found again when needed.
        self._canonical = None

    def _to_coo(self) -> "COO":
        self._check_indices()
        return self

    @classmethod
    def _from_coo(cls, coo: "COO", *a: Any, **kw: Any) -> "COO":
        return coo

    @property
    def has_canonical_format(self) -> bool:
        """Whether the entries are sorted by (row, col) without duplicates (found from the
        index arrays as they are now)."""
        self._check_indices()
        return self._is_canonical()

    def _is_canonical(self) -> bool:
        if self._canonical is None:
            r, c = self._row, self._col
            self._canonical = bool(np.all((r[1:] > r[:-1]) | ((r[1:] == r[:-1]) & (c[1:] > c[:-1]))))
        return self._canonical

    def sum_duplicates(self) -> "COO":
        """Canonical form: sorted by (row, col), duplicates added (in float64, rounded once
        into the value format)."""
        self._check_indices()
        return self._summed()

    def _summed(self) -> "COO":
        """:meth:`sum_duplicates` of validated index arrays."""
        if self._is_canonical():
            return self
        # (Sorted on the pair: a key row * n + col would wrap past 2^63 elements.)
        order = np.lexsort((self._col, self._row))
        first = _pair_starts(self._row[order], self._col[order])
        starts = np.flatnonzero(first)
        v = self._v[order]
        if starts.size != order.size:
            vals = _decode_values(v, self._fmt)
            sums = np.add.reduceat(vals, starts) if starts.size else vals[:0]
            if self._fmt is None:
                v = sums.astype(np.float32)
            else:
                v = encode(sums, self._fmt, saturate=self._fmt.dtype == np.int8)
        row, col = self._row[order][starts], self._col[order][starts]
        return COO._make(v, self._fmt, self._scale, row, col, self._shape, True)

    def eliminate_zeros(self) -> "COO":
        keep = _decode_values(self._v, self._fmt) != 0
        return COO._make(self._v[keep], self._fmt, self._scale, self._row[keep], self._col[keep], self._shape,
                         self._canonical)

    @property
    def T(self) -> "COO":
        return COO._make(self._v, self._fmt, self._scale, self._col, self._row, self._shape[::-1], None)

    def transpose(self) -> "COO":
        return self.T

    def _product(self, x2: np.ndarray, transpose: bool, out: np.ndarray) -> None:
        d, t, bf = self._kernel_values()
        _lowp.coo_matmul(d, t, bf, self._row, self._col, self._shape, x2, out, transpose)

    def _to_scipy(self, sp: Any, v: np.ndarray) -> Any:
        return sp.coo_array((v, (self._row, self._col)), shape=self._shape)

    @classmethod
    def _from_dense(cls, x: Any, dtype: Any) -> "COO":
        q = _quant_input(x)
        scale = 1.0
        if q is not None:
            x, scale = q
        if isinstance(x, _Sparse) or _is_scipy_sparse(x):
            raise TypeError(f"x: expected a dense array, got the sparse {type(x).__name__}; use from_scipy, "
                            f"asformat or the constructor")
        a = _native(np.asarray(_array_arg(x, "x")))  # (np.matrix: as an array)
        if a.ndim != 2:
            raise ValueError(f"x: must be 2-D, got shape {a.shape}")
        src = _source_format(a.dtype, "x")
        fmt = src if dtype is None else _target_format(dtype)
        if src is not None and fmt is not None and src._spec == fmt._spec:
            codes = _sub_byte_codes(_contig(a).view(fmt.storage_dtype), fmt, a.dtype, "x")
            nz = _decode_values(codes, fmt) != 0
            row, col = np.nonzero(nz)
            v = codes[row, col]
        else:
            af = _as_float_array(a, "x")
            if fmt is None:
                af = af.astype(np.float32) if af.dtype != np.float32 else af
            row, col = np.nonzero(af)
            v = _encode_values((a if a.dtype.kind in "iu" else af)[row, col], fmt, name="x")
            if fmt is not None:  # values that round to zero are not stored
                keep = _decode_values(v, fmt) != 0
                row, col, v = row[keep], col[keep], v[keep]
        m, n = a.shape
        row, col = _compact_pair(row, col, max(m, n, row.size))
        return COO._make(_contig(v), fmt, scale, row, col, (m, n), True)

    @classmethod
    def _from_scipy(cls, m: Any, dtype: Any, **kw: Any) -> "COO":
        """Converted by lowp (scipy's conversions add duplicates in the values' own dtype,
        widen or refuse low-precision ones, and trust index arrays written since the
        matrix was built); DOK and DIA through scipy's ``tocoo``."""
        if m.format in ("csr", "csc", "bsr"):
            return {"csr": CSR, "csc": CSC, "bsr": BSR}[m.format]._from_scipy(m, dtype)._to_coo()
        if m.format == "lil":
            r, cc, data = _lil_coords(m)
            fmt = _source_format(data.dtype) if dtype is None else _target_format(dtype)
            r, cc = _compact_pair(r, cc, max(*m.shape, data.size))
            return COO._make(_encode_values(data, fmt), fmt, 1.0, r, cc, tuple(int(s) for s in m.shape), None)
        c = m if m.format == "coo" else m.tocoo()
        data = np.asarray(c.data)
        fmt = _source_format(data.dtype) if dtype is None else _target_format(dtype)
        r, cc = _as_index(c.coords[0], "m.row"), _as_index(c.coords[1], "m.col")
        if not (r.size == cc.size == data.size):
            raise ValueError(f"m: data, row, col lengths differ ({data.size}, {r.size}, {cc.size})")
        r, cc = _index_pair(r, cc, max(*c.shape, data.size))
        _lowp.check_range(r, int(c.shape[0]), "m.row")
        _lowp.check_range(cc, int(c.shape[1]), "m.col")
        shape = tuple(int(s) for s in c.shape)
        if kw.get("summed"):
            # Canonical, duplicates added in float64 from the values as given (decoded
            # exactly) and rounded once into the format (each rounded first, a sum of
            # them would round twice).
            order = np.lexsort((cc, r))
            starts = np.flatnonzero(_pair_starts(r[order], cc[order]))
            if starts.size != order.size:
                sums = np.add.reduceat(_as_float_array(_native(data)[order]).astype(np.float64), starts)
                v = sums.astype(np.float32) if fmt is None else encode(sums, fmt, saturate=fmt.dtype == np.int8)
                return COO._make(v, fmt, 1.0, r[order][starts], cc[order][starts], shape, True)
        v = _encode_values(data, fmt)
        r, cc = _unshared(v, data, r, cc)
        # (scipy's flag is not trusted: its index arrays are writable. Found when needed.)
        return COO._make(v, fmt, 1.0, r, cc, shape, None)


# ---------------------------------------------------------------- CSR / CSC

class _Compressed(_Sparse):
    _major_axis = 0  # CSR: rows; CSC: columns

    def __init__(self, arg: Any, shape: Any = None, dtype: Any = None) -> None:
        if isinstance(arg, tuple) and len(arg) not in (2, 3):
            raise _bad_tuple(arg, _FORMS_COMPRESSED)
        if not (isinstance(arg, tuple) and len(arg) == 3):
            if isinstance(arg, _Sparse):
                # Duplicates kept, as scipy's csr_array(csc) and M.tocsr() keep them; a COO's
                # added, as scipy's csr_array(coo) and coo.tocsr() add them.
                c = type(self)._from_coo(arg.tocoo() if dtype is None else arg.astype(dtype).tocoo(),
                                         keep_duplicates=not isinstance(arg, COO))
            elif _is_scipy_sparse(arg):
                _check_scipy(arg, "arg")
                c = type(self)._from_scipy(arg, dtype)
            elif isinstance(arg, tuple):  # (m, n) or (data, (row, col))
                if not _is_shape_arg(arg):
                    arg = _coo_form(arg, _FORMS_COMPRESSED)
                c = type(self)._from_coo(COO(arg, shape=shape, dtype=dtype))
            else:
                c = type(self).from_dense(arg, dtype)
            _check_same_shape(shape, c._shape)
            self._copy_from(c)
            return
        data, indices, indptr = arg
        data = np.asarray(_array_arg(data, "data"))
        if data.ndim != 1:
            raise ValueError(f"data: must be 1-D, got shape {data.shape}")
        indices, indptr = _as_index(indices, "indices"), _as_index(indptr, "indptr")
        if indices.size != data.size:
            raise ValueError(f"data, indices: lengths differ ({data.size} and {indices.size})")
        if indptr.size == 0:
            raise ValueError("indptr: must have at least one entry")
        if shape is None:
            nmin = int(indices.max()) + 1 if indices.size else 0
            shape = (indptr.size - 1, nmin) if self._major_axis == 0 else (nmin, indptr.size - 1)
        m, n = _check_shape(shape)
        nmaj, nmin = (m, n) if self._major_axis == 0 else (n, m)
        indptr, indices = _index_pair(indptr, indices, max(m, n, data.size))
        canonical = _lowp.check_compressed(indptr, indices, nmaj, nmin)
        v, fmt, sc = self._store(data, dtype)
        self._init(v, fmt, sc, indices, indptr, (m, n), canonical)

    def _init(self, v: np.ndarray, fmt: Optional[Format], scale: float, indices: np.ndarray, indptr: np.ndarray,
              shape: tuple[int, int], canonical: bool) -> None:
        self._set_values(v, fmt, scale)
        self._indices, self._indptr, self._shape = indices, indptr, shape
        self._canonical = canonical

    def _copy_from(self, o: "_Compressed") -> None:
        self._init(o._v, o._fmt, o._scale, o._indices, o._indptr, o._shape, o._canonical)

    @classmethod
    def _make(cls, v: np.ndarray, fmt: Optional[Format], scale: float, indices: np.ndarray, indptr: np.ndarray,
              shape: tuple[int, int], canonical: bool) -> Any:
        c = cls.__new__(cls)
        c._init(v, fmt, scale, indices, indptr, shape, canonical)
        return c

    @property
    def indices(self) -> np.ndarray:
        return self._indices

    @property
    def indptr(self) -> np.ndarray:
        return self._indptr

    @property
    def has_canonical_format(self) -> bool:
        """Whether every row (CSR) or column (CSC) has sorted indices without duplicates
        (found from the index arrays as they are now)."""
        self._check_indices()
        return bool(self._canonical)

    def _index_nbytes(self) -> int:
        return int(self._indices.nbytes + self._indptr.nbytes)

    def _with_values(self, v: np.ndarray, fmt: Optional[Format], scale: float, copy: bool = False) -> Any:
        if copy:
            return type(self)._make(v, fmt, scale, self._indices.copy(), self._indptr.copy(), self._shape,
                                    self._canonical)
        return type(self)._make(v, fmt, scale, self._indices, self._indptr, self._shape, self._canonical)

    def _check_indices(self) -> None:
        """Validate the index arrays and find again whether they are canonical (sorted, no
        duplicates): they are writable and may have changed since the last check."""
        m, n = self._shape
        nmaj, nmin = (m, n) if self._major_axis == 0 else (n, m)
        self._canonical = bool(_lowp.check_compressed(self._indptr, self._indices, nmaj, nmin))

    def _to_coo(self) -> COO:
        self._check_indices()
        major = _major(self._indptr, self._indices.dtype)
        if self._major_axis == 0:
            return COO._make(self._v, self._fmt, self._scale, major, self._indices, self._shape,
                             True if self._canonical else None)
        return COO._make(self._v, self._fmt, self._scale, self._indices, major, self._shape, None)

    @classmethod
    def _from_coo(cls, coo: COO, *a: Any, keep_duplicates: bool = False, **kw: Any) -> Any:
        """From ``coo``, its duplicates added (as scipy's ``coo.tocsr()``) or, with
        ``keep_duplicates``, kept in their order (as scipy's ``csr.tocsc()``)."""
        c = coo if keep_duplicates else coo._summed()
        m, n = c._shape
        if cls._major_axis == 0 and c._canonical:
            major, minor, nmaj, v = c._row, c._col, m, c._v
        else:
            a_maj, a_min = (c._row, c._col) if cls._major_axis == 0 else (c._col, c._row)
            order = np.lexsort((a_min, a_maj))  # (stable: duplicates keep their order)
            major, minor, nmaj, v = a_maj[order], a_min[order], (m, n)[cls._major_axis], c._v[order]
        _check_indptr_size(nmaj, c._shape)
        counts = np.bincount(major, minlength=nmaj) if major.size else np.zeros(nmaj, np.int64)
        indptr = np.zeros(nmaj + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        dt = minor.dtype if major.size else np.int32
        if indptr[-1] > _I32_MAX:
            dt = np.int64
        return cls._make(_contig(v), c._fmt, c._scale, _contig(minor, dtype=dt),
                         indptr.astype(dt), (m, n), True if c._canonical else None)

    def tocsr(self) -> "CSR":
        return CSR._from_coo(self._to_coo(), keep_duplicates=True)

    def tocsc(self) -> "CSC":
        return CSC._from_coo(self._to_coo(), keep_duplicates=True)

    def sum_duplicates(self) -> Any:
        """Canonical form: sorted indices, duplicates added (in float64, rounded once into
        the value format); ``self`` when already canonical."""
        self._check_indices()
        return self if self._canonical else type(self)._from_coo(self._to_coo())

    @property
    def has_sorted_indices(self) -> bool:
        """Whether the indices of every row (CSR) or column (CSC) are in ascending order
        (duplicates allowed; found from the index arrays as they are now)."""
        self._check_indices()
        if self._canonical:
            return True
        major = _major(self._indptr, self._indices.dtype)
        i = self._indices
        return bool(np.all((major[1:] != major[:-1]) | (i[1:] >= i[:-1])))

    def sorted_indices(self) -> Any:
        """A copy with the indices of every row (CSR) or column (CSC) in ascending order, as
        scipy's: duplicates are kept, in their order (:meth:`sum_duplicates` adds them)."""
        self._check_indices()
        major = _major(self._indptr, self._indices.dtype)
        order = np.lexsort((self._indices, major))
        out = type(self)._make(_contig(self._v[order]), self._fmt, self._scale, _contig(self._indices[order]),
                               self._indptr.copy(), self._shape, False)
        out._check_indices()
        return out


class CSR(_Compressed):
    """Compressed sparse rows: ``CSR((data, indices, indptr), shape)`` as in scipy."""

    format = "csr"
    _major_axis = 0

    @property
    def T(self) -> "CSC":
        return CSC._make(self._v, self._fmt, self._scale, self._indices, self._indptr, self._shape[::-1],
                         self._canonical)

    def transpose(self) -> "CSC":
        return self.T

    def _product(self, x2: np.ndarray, transpose: bool, out: np.ndarray) -> None:
        d, t, bf = self._kernel_values()
        _lowp.csr_matmul(d, t, bf, self._indptr, self._indices, self._shape, x2, out, transpose)

    def _to_scipy(self, sp: Any, v: np.ndarray) -> Any:
        return sp.csr_array((v, self._indices, self._indptr), shape=self._shape)

    def tocsr(self) -> "CSR":
        return self

    @classmethod
    def _from_scipy(cls, m: Any, dtype: Any, **kw: Any) -> Any:
        return _compressed_from_scipy(cls, m, dtype)


class CSC(_Compressed):
    """Compressed sparse columns: ``CSC((data, indices, indptr), shape)`` as in scipy."""

    format = "csc"
    _major_axis = 1

    @property
    def T(self) -> CSR:
        return CSR._make(self._v, self._fmt, self._scale, self._indices, self._indptr, self._shape[::-1],
                         self._canonical)

    def transpose(self) -> CSR:
        return self.T

    def _product(self, x2: np.ndarray, transpose: bool, out: np.ndarray) -> None:
        # A CSC matrix is the CSR structure of its transpose.
        d, t, bf = self._kernel_values()
        _lowp.csr_matmul(d, t, bf, self._indptr, self._indices, self._shape[::-1], x2, out, not transpose)

    def _to_scipy(self, sp: Any, v: np.ndarray) -> Any:
        return sp.csc_array((v, self._indices, self._indptr), shape=self._shape)

    def tocsc(self) -> "CSC":
        return self

    @classmethod
    def _from_scipy(cls, m: Any, dtype: Any, **kw: Any) -> Any:
        return _compressed_from_scipy(cls, m, dtype)


def _unshared(v: np.ndarray, data: np.ndarray, *index: np.ndarray) -> tuple:
    """A scipy matrix's index arrays, copied unless its values are shared too (``v`` a
    view of ``data``): scipy may sort its indices in place, which must not reorder
    this matrix's indices under values it no longer moves with."""
    if np.shares_memory(v, data):
        return index
    return tuple(np.array(i) for i in index)


def _compressed_from_scipy(cls: Any, m: Any, dtype: Any) -> Any:
    if m.format != cls.format:
        # Through COO, as scipy: a COO's duplicates added (in float64, rounded once), the
        # other formats' kept.
        if m.format == "coo":
            return cls._from_coo(COO._from_scipy(m, dtype, summed=True))
        return cls._from_coo(COO._from_scipy(m, dtype), keep_duplicates=True)
    data = np.asarray(m.data)
    fmt = _source_format(data.dtype) if dtype is None else _target_format(dtype)
    v = _encode_values(data, fmt)
    mm, nn = (int(s) for s in m.shape)
    indptr, indices = _index_pair(np.asarray(m.indptr), np.asarray(m.indices), max(mm, nn, data.size))
    indptr, indices = _unshared(v, data, indptr, indices)
    nmaj, nmin = (mm, nn) if cls._major_axis == 0 else (nn, mm)
    canonical = _lowp.check_compressed(indptr, indices, nmaj, nmin)
    return cls._make(v, fmt, 1.0, indices, indptr, (mm, nn), canonical)


# ---------------------------------------------------------------- BSR

def _default_blocksize(shape: tuple[int, int]) -> tuple[int, int]:
    for b in (8, 4, 2):
        if shape[0] % b == 0 and shape[1] % b == 0:
            return (b, b)
    return (1, 1)


def _blocksize_arg(blocksize: Any) -> tuple[int, int]:
    try:
        dims = [operator_index(b) for b in blocksize]
    except TypeError:
        raise ValueError(f"blocksize: expected two positive ints, got {blocksize!r}") from None
    if len(dims) != 2:
        raise ValueError(f"blocksize: expected two positive ints, got {blocksize!r}")
    return dims[0], dims[1]


def _check_blocksize(blocksize: Any, shape: tuple[int, int]) -> tuple[int, int]:
    br, bc = _blocksize_arg(blocksize)
    if br < 1 or bc < 1 or shape[0] % br or shape[1] % bc:
        raise ValueError(f"blocksize: {(br, bc)} must be positive and divide the shape {shape}")
    return br, bc


class BSR(_Sparse):
    """Block sparse rows: ``BSR((data, indices, indptr), shape)`` with ``data`` of shape
    ``(nblocks, br, bc)``; any block shape (4x4 and 8x8 have unrolled kernels)."""

    format = "bsr"
    _structure_kw = ("blocksize",)

    def __init__(self, arg: Any, shape: Any = None, dtype: Any = None, blocksize: Any = None) -> None:
        if isinstance(arg, tuple) and len(arg) not in (2, 3):
            raise _bad_tuple(arg, _FORMS_COMPRESSED)
        if isinstance(arg, _Sparse) or _is_scipy_sparse(arg) or not (isinstance(arg, tuple) and len(arg) == 3):
            if isinstance(arg, _Sparse):
                src = arg if dtype is None else arg.astype(dtype)
                b = BSR._from_coo(src.tocoo(), blocksize)
            elif _is_scipy_sparse(arg):
                _check_scipy(arg, "arg")
                b = BSR._from_scipy(arg, dtype, blocksize=blocksize)
            elif _is_shape_arg(arg):
                b = BSR._from_coo(_empty_coo(_empty_shape(arg, shape), dtype), blocksize)
            elif isinstance(arg, tuple):  # (data, (row, col))
                b = BSR._from_coo(COO(_coo_form(arg, _FORMS_COMPRESSED), shape=shape, dtype=dtype), blocksize)
            else:
                b = BSR.from_dense(arg, dtype, blocksize=blocksize)
            _check_same_shape(shape, b._shape)
            self._copy_from(b)
            return
        data, indices, indptr = arg
        data = np.asarray(_array_arg(data, "data"))
        if data.ndim != 3:
            raise ValueError(f"data: must have shape (nblocks, br, bc), got {data.shape}")
        br, bc = data.shape[1], data.shape[2]
        if blocksize is not None and _blocksize_arg(blocksize) != (br, bc):
            raise ValueError(f"blocksize: {tuple(blocksize)} differs from the blocks of data {(br, bc)}")
        indices, indptr = _as_index(indices, "indices"), _as_index(indptr, "indptr")
        if indices.size != data.shape[0]:
            raise ValueError(f"data, indices: {data.shape[0]} blocks but {indices.size} block indices")
        if indptr.size == 0:
            raise ValueError("indptr: must have at least one entry")
        if shape is None:
            shape = ((indptr.size - 1) * br, (int(indices.max()) + 1 if indices.size else 0) * bc)
        m, n = _check_shape(shape)
        br, bc = _check_blocksize((br, bc), (m, n))
        indptr, indices = _index_pair(indptr, indices, max(m, n, data.size))
        canonical = _lowp.check_compressed(indptr, indices, m // br, n // bc)
        v, fmt, sc = self._store(data, dtype)
        self._init(v, fmt, sc, indices, indptr, (m, n), (br, bc), canonical)

    def _init(self, v: np.ndarray, fmt: Optional[Format], scale: float, indices: np.ndarray, indptr: np.ndarray,
              shape: tuple[int, int], blocksize: tuple[int, int], canonical: bool) -> None:
        self._set_values(v, fmt, scale)
        self._indices, self._indptr, self._shape, self._bs = indices, indptr, shape, blocksize
        self._canonical = canonical

    def _copy_from(self, o: "BSR") -> None:
        self._init(o._v, o._fmt, o._scale, o._indices, o._indptr, o._shape, o._bs, o._canonical)

    @classmethod
    def _make(cls, *a: Any) -> "BSR":
        b = cls.__new__(cls)
        b._init(*a)
        return b

    @property
    def blocksize(self) -> tuple[int, int]:
        return self._bs

    @property
    def indices(self) -> np.ndarray:
        return self._indices

    @property
    def indptr(self) -> np.ndarray:
        return self._indptr

    def _data_shape(self) -> tuple[int, ...]:
        br, bc = self._bs
        return (int(self._v.size) // max(br * bc, 1), br, bc)

    def _index_nbytes(self) -> int:
        return int(self._indices.nbytes + self._indptr.nbytes)

    def _with_values(self, v: np.ndarray, fmt: Optional[Format], scale: float, copy: bool = False) -> "BSR":
        if copy:
            return BSR._make(v, fmt, scale, self._indices.copy(), self._indptr.copy(), self._shape, self._bs,
                             self._canonical)
        return BSR._make(v, fmt, scale, self._indices, self._indptr, self._shape, self._bs, self._canonical)

    def _product(self, x2: np.ndarray, transpose: bool, out: np.ndarray) -> None:
        d, t, bf = self._kernel_values()
        _lowp.bsr_matmul(d, t, bf, self._indptr, self._indices, self._shape, self._bs, x2, out, transpose)

    def _check_indices(self) -> None:
        (m, n), (br, bc) = self._shape, self._bs
        self._canonical = bool(_lowp.check_compressed(self._indptr, self._indices, m // br, n // bc))

    def _blocks_coo(self) -> tuple[np.ndarray, np.ndarray]:
        self._check_indices()
        brow = _major(self._indptr, np.int64)
        return brow, self._indices.astype(np.int64)

    def _to_coo(self) -> COO:
        br, bc = self._bs
        brow, bcol = self._blocks_coo()
        if brow.size == 0:
            # (The index grids below are the block's size, whatever the number of blocks.)
            empty = np.zeros(0, np.int32)
            return COO._make(self._v.reshape(-1).copy(), self._fmt, self._scale, empty, empty.copy(), self._shape, True)
        rr = (brow[:, None, None] * br + np.arange(br)[None, :, None]) + np.zeros((1, 1, bc), np.int64)
        cc = (bcol[:, None, None] * bc + np.arange(bc)[None, None, :]) + np.zeros((1, br, 1), np.int64)
        v = self._v
        m, n = self._shape
        # Every stored value, zeros inside blocks included (as scipy's tocoo keeps them:
        # they are stored entries, and 0 * inf is NaN in a product).
        row, col = _compact_pair(rr.reshape(-1), cc.reshape(-1), max(m, n, v.size))
        # Block order is not (row, col) order: canonical form is recomputed when needed.
        return COO._make(v.reshape(-1).copy(), self._fmt, self._scale, row, col, self._shape, None)

    @classmethod
    def _from_coo(cls, coo: COO, blocksize: Any = None, *a: Any, **kw: Any) -> "BSR":
        c = coo._summed()
        m, n = c._shape
        br, bc = _check_blocksize(_default_blocksize((m, n)) if blocksize is None else blocksize, (m, n))
        nbr, nbc = m // br, n // bc
        r, cl = c._row.astype(np.int64), c._col.astype(np.int64)
        # Blocks in (block row, block column) order, sorted on the pair (a key
        # brow * nbc + bcol would wrap past 2^63 blocks).
        rb, cb = r // br, cl // bc
        order = np.lexsort((cb, rb))
        first = _pair_starts(rb[order], cb[order])
        inv = np.empty(order.size, np.int64)
        inv[order] = np.cumsum(first) - 1
        brow, bcol = rb[order][first], cb[order][first]
        nb = brow.size
        vals = np.zeros((nb, br, bc), c._v.dtype)  # code 0 is zero in every format
        vals[inv, r % br, cl % bc] = c._v
        _check_indptr_size(nbr, c._shape)
        indptr = np.zeros(nbr + 1, np.int64)
        if nb:
            np.cumsum(np.bincount(brow, minlength=nbr), out=indptr[1:])
        dt = np.int32 if max(nb, nbr, nbc) <= _I32_MAX else np.int64
        return BSR._make(vals.reshape(-1), c._fmt, c._scale, bcol.astype(dt), indptr.astype(dt), (m, n), (br, bc),
                         True)

    @property
    def T(self) -> "BSR":
        br, bc = self._bs
        brow, bcol = self._blocks_coo()
        order = np.lexsort((brow, bcol))
        blocks = self._v.reshape(-1, br, bc)[order].transpose(0, 2, 1)
        nbc = self._shape[1] // bc
        indptr = np.zeros(nbc + 1, np.int64)
        if order.size:
            np.cumsum(np.bincount(bcol, minlength=nbc), out=indptr[1:])
        dt = self._indices.dtype
        return BSR._make(_contig(blocks).reshape(-1), self._fmt, self._scale,
                         brow[order].astype(dt), indptr.astype(dt), self._shape[::-1], (bc, br), True)

    def transpose(self) -> "BSR":
        return self.T

    def _to_scipy(self, sp: Any, v: np.ndarray) -> Any:
        return sp.bsr_array((v.reshape(-1, *self._bs), self._indices, self._indptr), shape=self._shape,
                            blocksize=self._bs)

    @classmethod
    def _from_scipy(cls, m: Any, dtype: Any, blocksize: Any = None, **kw: Any) -> "BSR":
        if m.format == "bsr" and (blocksize is None or _blocksize_arg(blocksize) == tuple(m.blocksize)):
            data = np.asarray(m.data)
            fmt = _source_format(data.dtype) if dtype is None else _target_format(dtype)
            v = _encode_values(data.reshape(-1), fmt)
            mm, nn = (int(s) for s in m.shape)
            br, bc = m.blocksize
            if data.shape != (np.asarray(m.indices).size, br, bc):  # (checked before; written meanwhile)
                raise ValueError(f"m.data: expected shape {(np.asarray(m.indices).size, br, bc)}, got {data.shape}")
            indptr, indices = _index_pair(np.asarray(m.indptr), np.asarray(m.indices), max(mm, nn, data.size))
            indptr, indices = _unshared(v, data, indptr, indices)
            canonical = _lowp.check_compressed(indptr, indices, mm // br, nn // bc)
            return BSR._make(v, fmt, 1.0, indices, indptr, (mm, nn), (br, bc), canonical)
        return BSR._from_coo(COO._from_scipy(m, dtype), blocksize)


# ---------------------------------------------------------------- N:M

def _check_nm(n: Any, m: Any) -> tuple[int, int]:
    for name, v in (("n", n), ("m", m)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
            raise TypeError(f"{name}: expected an int, got {type(v).__name__}")
    n, m = int(n), int(m)
    if not 1 <= m <= 256:
        raise ValueError(f"m: must be in 1..256, got {m}")
    if not 1 <= n <= m:
        raise ValueError(f"n: must be in 1..m (m={m}), got {n}")
    return n, m


def _nm_bits(m: int) -> int:
    return 1 if m <= 2 else 2 if m <= 4 else 4 if m <= 16 else 8


def _pack(pos: np.ndarray, bits: int) -> np.ndarray:
    """Pack small ints (< 2**bits, bits dividing 8) least significant first."""
    per = 8 // bits
    p = np.zeros(-(-pos.size // per) * per, np.uint8)
    p[: pos.size] = pos
    p = p.reshape(-1, per).astype(np.uint16)
    shifts = (np.arange(per, dtype=np.uint16) * bits)
    return (p << shifts).sum(axis=1).astype(np.uint8)


def _unpack(b: np.ndarray, bits: int, count: int) -> np.ndarray:
    per = 8 // bits
    shifts = (np.arange(per, dtype=np.uint8) * bits)
    return ((b[:, None] >> shifts) & ((1 << bits) - 1)).reshape(-1)[:count].astype(np.int64)


class NM(_Sparse):
    """N:M structured sparsity along rows: in every group of ``m`` consecutive columns at most
    ``n`` values are nonzero. Stores the ``n`` values of each group and their positions in
    ``ceil(log2 m)``-bit fields (2 bits for 2:4). ``NM((data, positions), shape, n=2, m=4)``
    with data and positions of shape ``(rows, groups * n)``. ``M.T`` is a CSC matrix."""

    format = "nm"
    _structure_kw = ("n", "m")

    def __init__(self, arg: Any, shape: Any = None, dtype: Any = None, n: int = 2, m: int = 4) -> None:
        n, m = _check_nm(n, m)
        if isinstance(arg, tuple) and len(arg) != 2:
            raise _bad_tuple(arg, _FORMS_NM)
        if (isinstance(arg, _Sparse) or _is_scipy_sparse(arg) or not (isinstance(arg, tuple) and len(arg) == 2)
                or _is_shape_arg(arg)):
            if isinstance(arg, _Sparse):
                src = arg if dtype is None else arg.astype(dtype)
                o = NM._from_coo(src.tocoo(), n, m)
            elif _is_scipy_sparse(arg):
                _check_scipy(arg, "arg")
                o = NM._from_scipy(arg, dtype, n=n, m=m)
            elif _is_shape_arg(arg):
                o = NM._from_coo(_empty_coo(_empty_shape(arg, shape), dtype), n, m)
            else:
                o = NM.from_dense(arg, dtype, n=n, m=m)
            _check_same_shape(shape, o._shape)
            self._copy_from(o)
            return
        data, pos = np.asarray(_array_arg(arg[0], "data")), np.asarray(_array_arg(arg[1], "positions"))
        if shape is None:
            raise ValueError("shape: required for NM((data, positions), shape)")
        rows, cols = _check_shape(shape)
        g = -(-cols // m)
        want = (rows, g * n)
        if data.shape != want:
            raise ValueError(f"data: must have shape {want} for shape {(rows, cols)} and {n}:{m}, got {data.shape}")
        if pos.shape != want:
            raise ValueError(f"positions: must have shape {want}, got {pos.shape}")
        if pos.size and pos.dtype.kind not in "iu":
            raise ValueError(f"positions: must hold integers, got dtype {pos.dtype}")
        p64 = pos.astype(np.int64).reshape(rows, g, n)
        width = np.minimum(m, cols - np.arange(g) * m)[None, :, None]
        if p64.size and (np.any(p64 < 0) or np.any(p64 >= width)):
            raise ValueError(f"positions: must lie in [0, m) within each group (and inside the last, partial group)")
        if n > 1 and p64.size:
            # Distinct positions among the nonzero values of a group (zeros may sit anywhere).
            nz = (_as_float_array(data, "data") != 0).reshape(p64.shape)
            s = np.sort(np.where(nz, p64, -1 - np.arange(n)[None, None, :]), axis=2)
            if np.any(s[:, :, 1:] == s[:, :, :-1]):
                raise ValueError("positions: must be distinct within each group")
        v, fmt, sc = self._store(data, dtype)
        self._init(v, fmt, sc, _pack(p64.reshape(-1), _nm_bits(m)), (rows, cols), n, m)

    def _init(self, v: np.ndarray, fmt: Optional[Format], scale: float, idx: np.ndarray, shape: tuple[int, int],
              n: int, m: int) -> None:
        self._set_values(v, fmt, scale)
        self._idx, self._shape, self._n, self._m = idx, shape, n, m

    def _copy_from(self, o: "NM") -> None:
        self._init(o._v, o._fmt, o._scale, o._idx, o._shape, o._n, o._m)

    @classmethod
    def _make(cls, *a: Any) -> "NM":
        o = cls.__new__(cls)
        o._init(*a)
        return o

    @property
    def n(self) -> int:
        return self._n

    @property
    def m(self) -> int:
        return self._m

    def _slots_shape(self) -> tuple[int, int]:
        """``(rows, groups * n)``: the shape of :attr:`data` and :attr:`positions`."""
        rows, cols = self._shape
        return rows, -(-cols // self._m) * self._n

    @property
    def positions(self) -> np.ndarray:
        """Position of each stored value inside its group, shape ``(rows, groups * n)``: a
        read-only copy (the positions are stored packed; build a new matrix to change them)."""
        p = _unpack(self._idx, _nm_bits(self._m), self._v.size).reshape(self._slots_shape())
        p.flags.writeable = False
        return p

    def _data_shape(self) -> tuple[int, ...]:
        return self._slots_shape()

    def _index_nbytes(self) -> int:
        return int(self._idx.nbytes)

    def _with_values(self, v: np.ndarray, fmt: Optional[Format], scale: float, copy: bool = False) -> "NM":
        return NM._make(v, fmt, scale, self._idx.copy() if copy else self._idx, self._shape, self._n, self._m)

    def _product(self, x2: np.ndarray, transpose: bool, out: np.ndarray) -> None:
        d, t, bf = self._kernel_values()
        _lowp.nm_matmul(d, t, bf, self._idx, self._n, self._m, self._shape, x2, out, transpose)
        # The kernels add every slot, unused ones (zeros) too: 0 * inf or 0 * NaN in x
        # there is a NaN the matrix does not have (it stores no value at that place).
        # Rare: such products take the stored values alone.
        if np.isnan(out).any():
            self._to_coo()._product(x2, transpose, out)

    def _to_coo(self) -> COO:
        rows, cols = self._shape
        n, m = self._n, self._m
        g = -(-cols // m)
        pos = _unpack(self._idx, _nm_bits(m), self._v.size)
        slot = np.arange(self._v.size, dtype=np.int64)
        row = slot // max(g * n, 1)
        col = (slot % max(g * n, 1)) // n * m + pos
        keep = _decode_values(self._v, self._fmt) != 0  # unused slots hold zeros
        row, col, v = row[keep], col[keep], self._v[keep]
        order = np.lexsort((col, row))
        r, c = _compact_pair(row[order], col[order], max(rows, cols, v.size))
        # Sorted; without duplicates unless values were written into unused slots (found when needed).
        return COO._make(_contig(v[order]), self._fmt, self._scale, r, c, self._shape, None)

    @classmethod
    def _from_coo(cls, coo: COO, n: int = 2, m: int = 4, *a: Any, **kw: Any) -> "NM":
        n, m = _check_nm(n, m)
        c = coo._summed()
        keep = _decode_values(c._v, c._fmt) != 0
        row, col, v = c._row[keep].astype(np.int64), c._col[keep].astype(np.int64), c._v[keep]
        rows, cols = c._shape
        g = -(-cols // m)
        gkey = row * max(g, 1) + col // m
        # Entries are sorted by (row, col), hence by group: rank within the group.
        first = np.ones(gkey.size, bool)
        first[1:] = gkey[1:] != gkey[:-1]
        start = np.maximum.accumulate(np.where(first, np.arange(gkey.size), 0)) if gkey.size else gkey
        rank = np.arange(gkey.size) - start
        if rank.size and rank.max() >= n:
            bad = int(np.argmax(rank >= n))
            raise ValueError(f"n: row {int(row[bad])}, columns {int(col[bad] // m * m)}..{int(col[bad] // m * m + m - 1)} "
                             f"hold more than n={n} nonzeros of every m={m}; use sparse.prune_nm first")
        slot = gkey * n + rank
        vals = np.zeros(rows * g * n, v.dtype if v.size else c._v.dtype)
        pos = np.zeros(rows * g * n, np.int64)
        vals[slot] = v
        pos[slot] = col % m
        # Unused slots hold zero at position 0 (their position never matters).
        return NM._make(vals, c._fmt, c._scale, _pack(pos, _nm_bits(m)), (rows, cols), n, m)

    @classmethod
    def _from_scipy(cls, mat: Any, dtype: Any, n: int = 2, m: int = 4, **kw: Any) -> "NM":
        return NM._from_coo(COO._from_scipy(mat, dtype), n, m)

    @property
    def T(self) -> CSC:
        return self.tocsr().T

    def transpose(self) -> CSC:
        return self.T

    def tonm(self, n: Optional[int] = None, m: Optional[int] = None) -> "NM":
        if (n is None or n == self._n) and (m is None or m == self._m):
            return self
        return NM._from_coo(self._to_coo(), self._n if n is None else n, self._m if m is None else m)

    def _to_scipy(self, sp: Any, v: np.ndarray) -> Any:
        c = self.tocsr()
        return sp.csr_array((c._scipy_values(c._v), c._indices, c._indptr), shape=self._shape)


# ---------------------------------------------------------------- pruning

def _magnitude(x: np.ndarray) -> np.ndarray:
    """Keys that order ``x``'s entries by magnitude (ties equal), NaN largest."""
    if x.dtype.kind in "iu" and x.dtype.itemsize == 8:
        # (float64 would merge 64-bit magnitudes beyond 2**53: their exact ranks instead.)
        neg = x < 0
        mag = np.where(neg, -(x + 1), x).astype(np.uint64) + neg
        return np.unique(mag.reshape(-1), return_inverse=True)[1].reshape(x.shape).astype(np.float64)
    a = np.abs(_as_float_array(x, "x")).astype(np.float64)
    a[np.isnan(a)] = np.inf  # NaN counts as largest: never pruned before finite values
    return a


def prune(x: Any, sparsity: Any) -> np.ndarray:
    """Zero the ``floor(sparsity * x.size + 0.5)`` entries of smallest magnitude (exactly
    that many: halves round up; among equal magnitudes the lower flat index, in C order,
    goes first). Returns a new C-ordered array of x's dtype."""
    if isinstance(sparsity, (bool, np.bool_)) or not isinstance(sparsity, (numbers.Real, np.floating, np.integer)):
        raise TypeError(f"sparsity: expected a number in [0, 1], got {type(sparsity).__name__}")
    s = float(sparsity)
    if math.isnan(s) or not 0.0 <= s <= 1.0:
        raise ValueError(f"sparsity: must be in [0, 1], got {sparsity!r}")
    a = _array_arg(x, "x")
    out = np.array(a, copy=True, order="C")  # (so that its flat view below is one)
    k = int(math.floor(s * a.size + 0.5))
    if k == 0:
        _magnitude(a.reshape(-1)[:1])  # (x's dtype is checked all the same)
        return out
    order = np.argsort(_magnitude(a.reshape(-1)), kind="stable")
    flat = out.reshape(-1)
    flat[order[:k]] = 0
    return out


def prune_nm(x: Any, n: int = 2, m: int = 4, axis: int = -1) -> np.ndarray:
    """Keep the ``n`` largest-magnitude entries of every ``m`` consecutive ones along ``axis``
    (ties: the lower index is kept); a last partial group keeps at most ``n``."""
    n, m = _check_nm(n, m)
    a = _array_arg(x, "x")
    if a.ndim == 0:
        raise ValueError("x: must have at least one dimension")
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (numbers.Integral, np.integer)):
        raise TypeError(f"axis: expected an int, got {type(axis).__name__}")
    if not -a.ndim <= axis < a.ndim:
        raise ValueError(f"axis: {axis} is out of range for {a.ndim} dimensions")
    out = np.array(a, copy=True)
    mv = np.moveaxis(out, axis, -1)
    # Groups along the last axis of a 2-D view: any number of dimensions.
    mag = np.moveaxis(_magnitude(a), axis, -1)
    length = mag.shape[-1]
    mag = mag.reshape(math.prod(mag.shape[:-1]), length)
    g = -(-length // m)
    pad = g * m - length
    magp = np.concatenate([mag, np.full(mag.shape[:-1] + (pad,), -1.0)], axis=-1) if pad else mag
    magp = magp.reshape(mag.shape[:-1] + (g, m))
    order = np.argsort(-magp, axis=-1, kind="stable")
    drop = np.zeros(magp.shape, bool)
    np.put_along_axis(drop, order[..., n:], True, axis=-1)
    drop = drop.reshape(mag.shape[:-1] + (g * m,))[..., :length]
    mv[drop.reshape(mv.shape)] = 0
    return out
