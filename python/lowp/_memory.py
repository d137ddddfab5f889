"""Result arrays of the conversion functions, with a bounded cache of their memory.

A fresh multi-megabyte array costs a page fault and a page zeroing for every page it
writes first, which is as long as a conversion kernel takes to fill it. lowp's large
results keep their memory in a ``lowp._lowp.Buffer`` (the base of the array's ``base``, a
byte array over it); when the array is freed its memory goes to a small cache (at most 8
blocks, 1 GiB by default) and the next result of a similar size reuses it. ``set_buffer_cache(0)`` turns this off and
frees what the cache holds.
"""

from __future__ import annotations

import math
import operator
import os
import warnings
from typing import Any

import numpy as np

from . import _lowp

__all__ = ["set_num_threads", "set_buffer_cache", "buffer_cache_info", "result_empty"]

#: Results smaller than this come from numpy's allocator.
MIN_BYTES = 1 << 22


def result_empty(shape: tuple, dtype: Any, min_bytes: int = MIN_BYTES) -> np.ndarray:
    """An uninitialized C-contiguous array; those of ``min_bytes`` or more take their
    memory from the cache."""
    dt = np.dtype(dtype)
    if dt.hasobject or math.prod(shape) * dt.itemsize < min_bytes:
        return np.empty(shape, dt)
    return _lowp.cached_empty(list(shape), dt)


#: Most threads the core's pool takes (its MAX_THREADS).
_MAX_THREADS = 1024


def _check_env() -> None:
    """Warn about a ``LOWP_NUM_THREADS`` or ``LOWP_ISA`` that the core ignores (it then
    uses every core, and the best instruction set the CPU has)."""
    v = os.environ.get("LOWP_NUM_THREADS")
    if v is not None:
        try:
            ok = 1 <= int(v.strip()) <= _MAX_THREADS
        except ValueError:
            ok = False
        if not ok:
            warnings.warn(f"LOWP_NUM_THREADS={v!r} is ignored: expected an integer in 1..{_MAX_THREADS}",
                          RuntimeWarning, stacklevel=3)
    v = os.environ.get("LOWP_ISA")
    if v is not None and v.strip() not in ("scalar", "sse2", "avx2", "avx512"):
        warnings.warn(f"LOWP_ISA={v!r} is ignored: expected \"scalar\", \"sse2\", \"avx2\" or \"avx512\"",
                      RuntimeWarning, stacklevel=3)


def _index(v: Any, arg: str, what: str) -> int:
    """``v`` as a Python int: ints and objects with ``__index__`` (numpy integers), not bools."""
    if not isinstance(v, (bool, np.bool_)):
        try:
            return operator.index(v)
        except TypeError:
            pass
    raise TypeError(f"{arg}: expected {what}, got {type(v).__name__}")


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (1 to 1024, ``_MAX_THREADS``) for the parallel kernels."""
    n = _index(n, "n", f"an int (the number of threads, 1..={_MAX_THREADS})")
    if not 0 < n <= 1 << 62:
        # (Beyond what the core's integer takes; it checks the rest.)
        raise ValueError(f"n: the number of threads must be in 1..={_MAX_THREADS}, got {n}")
    _lowp.set_num_threads(n)


def set_buffer_cache(nbytes: int) -> int:
    """Keep at most ``nbytes`` of freed result memory for reuse (0: none); returns the old limit."""
    nbytes = _index(nbytes, "nbytes", "an int")
    if nbytes < 0:
        raise ValueError(f"nbytes: must be >= 0, got {nbytes}")
    # (Larger limits than memory can hold all mean "no limit".)
    return int(_lowp.set_buffer_cache(min(int(nbytes), 2**62)))


def buffer_cache_info() -> dict:
    """What the cache holds now: ``{"blocks": ..., "bytes": ..., "limit": ...}``."""
    blocks, nbytes, limit = _lowp.buffer_cache_info()
    return {"blocks": blocks, "bytes": nbytes, "limit": limit}
