"""numpy's OpenBLAS thread count, set to match lowp's in the benchmarks."""

import ctypes
import glob
import os

import numpy as np


def openblas_threads():
    """numpy's OpenBLAS thread-count setter (None if not found)."""
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_", "openblas_set_num_threads"):
            f = getattr(lib, name, None)
            if f is not None:
                return f
    return None
