"""Result checks of the benchmarks: a timed product that is wrong fails the run, so
that a broken kernel cannot look fast."""

import numpy as np


def exact_product(a, b) -> tuple:
    """``(a @ b, |a| @ |b|)`` in float64 (exact for the benches' sizes and values but for
    float64's own rounding, far below float32's)."""
    a64 = np.asarray(a).astype(np.float64)
    b64 = np.asarray(b).astype(np.float64)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def check_product(got, exact: tuple, k: int, what: str, slack: float = 0.0) -> None:
    """Fail unless ``got`` lies within the float32 accumulation bound of ``exact`` (from
    :func:`exact_product`) for sums of ``k`` products, ``gamma_k |a| |b|``, plus ``slack``
    times the exact value (a result rounded into a narrower type)."""
    ref, mag = exact
    gamma = k * 2.0**-24 / (1 - k * 2.0**-24)
    bad = np.abs(np.asarray(got).astype(np.float64) - ref) > gamma * mag + slack * np.abs(ref)
    if bad.any():
        raise AssertionError(f"{what}, shape {np.shape(got)}: {int(bad.sum())} values outside the float32 "
                             f"accumulation bound")
