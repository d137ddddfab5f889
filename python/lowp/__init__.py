"""lowp: low-precision numerics for NumPy (bf16, fp8, posits, int8) with a Rust core."""

from __future__ import annotations

import os as _os

from . import _lowp, _memory
from ._convert import ROUNDING_MODES, cast, decode, encode, round
from ._memory import buffer_cache_info, set_buffer_cache, set_num_threads
from ._gemm import empty, matmul, padded_ld, qmatmul, sum
from ._dtypes import (bfloat16, float8_e4m3, float8_e4m3fn, float8_e4m3fnuz, float8_e5m2, float8_e5m2fnuz, posit8,
                      posit16, posit32)
from ._formats import FloatFormat, Format, IntFormat, PositFormat, finfo, format, named_formats
from ._quant import QuantizedArray, quantize
from ._ulp import nextafter, ulp

__version__ = "0.1.0"

_memory._check_env()

# A child of os.fork() (multiprocessing's "fork" start method) does not have the
# parent's worker threads: it starts its own pool on first use.
# (Once per process: the native module outlives a reload of the package.)
if hasattr(_os, "register_at_fork") and not getattr(_lowp, "_fork_hooks", False):
    _os.register_at_fork(before=_lowp._fork_prepare, after_in_parent=_lowp._fork_parent,
                         after_in_child=_lowp._fork_child)
    _lowp._fork_hooks = True

get_num_threads = _lowp.get_num_threads


__all__ = [
    "Format", "FloatFormat", "PositFormat", "IntFormat", "format", "finfo", "named_formats",
    "round", "cast", "encode", "decode", "ROUNDING_MODES",
    "quantize", "QuantizedArray",
    "set_num_threads", "get_num_threads", "set_buffer_cache", "buffer_cache_info",
    "matmul", "qmatmul", "sum", "padded_ld", "empty",
    "ulp", "nextafter",
    "bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e4m3", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "posit8", "posit16", "posit32",
]

from . import sparse  # noqa: E402
from . import testing, training  # noqa: E402
