"""Result checks of the benchmarks: a timed product that is wrong fails the run, so
that a broken kernel cannot look fast."""

import numpy as np


def exact_product(a, b) -> tuple:
    """``(a @ b, |a| @ |b|)`` in float64 (exact for the benches' sizes and values but for
    float64's own rounding, far below float32's)."""
    a64 = np.asarray(a).astype(np.float64)
    b64 = np.asarray(b).astype(np.float64)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def check_product(got, exact: tuple, k: int, what: str, slack: float = 0.0, unit: float = 2.0**-24) -> None:
    """Fail unless ``got`` lies within the accumulation bound of ``exact`` (from
    :func:`exact_product`) for sums of ``k`` products, ``gamma_k |a| |b|`` with the unit
    roundoff ``unit`` (float32's by default), plus ``slack`` times the exact value (a
    result rounded into a narrower type). For float64 sums pass twice float64's unit:
    the reference itself is a float64 sum."""
    ref, mag = exact
    gamma = k * unit / (1 - k * unit)
    bad = np.abs(np.asarray(got).astype(np.float64) - ref) > gamma * mag + slack * np.abs(ref)
    if bad.any():
        raise AssertionError(f"{what}, shape {np.shape(got)}: {int(bad.sum())} values outside the "
                             f"accumulation bound")
