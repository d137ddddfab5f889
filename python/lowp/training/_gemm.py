"""The one GEMM every layer of :class:`lowp.training.MLP` runs through, forward and backward.

It calls ``lowp.matmul`` with the config's accumulator, chunk size and rounding. When
``lowp.matmul`` is not available or raises NotImplementedError for a combination of
options (or ``backend="numpy"`` is asked for), a NumPy emulation of the same arithmetic
is used instead:

- ``accumulate="float32"`` to nearest even: NumPy's float32 matmul (BLAS, float32
  accumulation, in BLAS's order of additions); in any other rounding, as a format below;
- ``accumulate="float64"``: NumPy's float64 matmul, rounded once to float32;
- ``accumulate=<Format>`` (or ``"float32"`` with a chunk or another rounding): the products are added one at a time, each sum rounded into
  the format (``acc = round(acc + a[:, k] * b[k, :])``); with ``chunk=C`` every run of C
  products is accumulated separately and its total added into a second accumulator of
  ``chunk_accumulate``. Products are exact in float64 and each sum is formed in float64
  before its single rounding, which is exact unless the two terms are more than about
  2**29 apart in magnitude (then the float64 sum is rounded twice).

The emulation is slow (one vector operation per product column) but is the reference
the fast path is checked against.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import numpy as np

from .. import _convert
from .._formats import Format, format as _format

__all__ = ["gemm", "matmul_available", "BACKENDS"]

BACKENDS = ("auto", "lowp", "numpy")

_NUMPY_RNE: dict = {_format("float16"): np.float16, _format("float32"): np.float32, "float32": np.float32}


def matmul_available() -> bool:
    """Whether the package provides ``lowp.matmul``."""
    import lowp

    return callable(getattr(lowp, "matmul", None))


def gemm(a: np.ndarray, b: np.ndarray, *, accumulate: Union[str, Format] = "float32", chunk: Optional[int] = None,
         chunk_accumulate: Union[None, str, Format] = None, rounding: str = "nearest_even", seed: Any = None,
         backend: str = "auto") -> np.ndarray:
    """``a @ b`` (2-D float32 arrays holding already-rounded values) as float32, with the
    given accumulator. See the module docs for the backends."""
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"b: shape {b.shape} does not match a's shape {a.shape} for a matrix product")
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    use_lowp = backend == "lowp" or (backend == "auto" and matmul_available())
    if use_lowp:
        import lowp

        try:
            return np.asarray(lowp.matmul(a, b, accumulate=accumulate, chunk=chunk,  # type: ignore[attr-defined]
                                          chunk_accumulate=chunk_accumulate, rounding=rounding, seed=seed,
                                          out_dtype=np.float32), dtype=np.float32)
        except NotImplementedError:
            if backend == "lowp":
                raise
            # A combination lowp.matmul does not offer: emulate it (see the module docs).
    return _gemm_numpy(a, b, accumulate, chunk, chunk_accumulate, rounding, seed)


def _gemm_numpy(a: np.ndarray, b: np.ndarray, accumulate: Union[str, Format], chunk: Optional[int],
                chunk_accumulate: Union[None, str, Format], rounding: str, seed: Any) -> np.ndarray:
    if accumulate == "float64" and chunk is None:
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    if accumulate == "float32" and chunk is None and rounding == "nearest_even":
        return np.matmul(a.astype(np.float32, copy=False), b.astype(np.float32, copy=False))
    m, k = a.shape
    n = b.shape[1]
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    rng = np.random.default_rng(seed) if rounding == "stochastic" else None
    outer = chunk_accumulate if chunk_accumulate is not None else accumulate

    def rnd(x: np.ndarray, fmt: Union[str, Format]) -> np.ndarray:
        if fmt == "float64":
            return x
        if rounding == "nearest_even" and fmt in _NUMPY_RNE:
            # NumPy's float64 -> float16/float32 casts round once to nearest even (with
            # subnormals and overflow to inf), the same result as lowp.round and faster.
            return x.astype(_NUMPY_RNE[fmt]).astype(np.float64)
        s = int(rng.integers(0, 2**63)) if rng is not None else None
        return _convert.round(x, fmt, rounding, seed=s)

    total = np.zeros((m, n))
    acc = np.zeros((m, n))
    run = 0
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf and inf - inf are results here
        for j in range(k):
            acc = rnd(acc + np.multiply.outer(a64[:, j], b64[j, :]), accumulate)
            run += 1
            if chunk is not None and (run == chunk or j == k - 1):
                total = rnd(total + acc, outer)
                acc = np.zeros((m, n))
                run = 0
    res = total if chunk is not None else acc
    return res.astype(np.float32)
