"""Exact-rational reference rounding (``fractions.Fraction``) for floats and posits.

Written from the format definitions, independently of the core:

* A float format is a grid of consecutive multiples of a unit ``2**q`` per binade
  (``q = e - man_bits`` in binade ``e``; the subnormal unit ``emin - man_bits``; without
  subnormals the range below the smallest normal is the two-point grid ``{0, 2**emin}``).
  ``x`` lies between ``k * 2**q`` and ``(k + 1) * 2**q``; the mode picks one, ties to
  even look at the parity of ``k``; rounding happens with an unbounded exponent and
  the result overflows when it exceeds the largest finite value.
* Overflow of a finite value: nearest modes go to inf (NaN when the format has no
  inf, the largest finite value when it has neither); toward_zero and odd go to the
  largest finite value; up/down go to inf on their side and to +-max on the other.
  ``saturate`` clamps every overflow, infinite inputs included, to +-max.
* A posit is rounded on its bit string: the exact value's infinite encoding
  (regime, exponent, fraction) is cut to ``nbits - 1`` bits and rounded to nearest,
  ties to an even bit string; a nonzero never becomes 0 and a finite value never NaR.
"""

from __future__ import annotations

import math
from fractions import Fraction

MODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd")


class FloatSpec:
    """The parameters of a float format, with values derived from the definitions."""

    def __init__(self, exp_bits, man_bits, bias=None, inf=True, nan="ieee", subnormals=True):
        self.e, self.m = exp_bits, man_bits
        if bias is None:
            bias = 2 ** (exp_bits - 1) - 1 + (nan == "fnuz")
        self.bias = bias
        self.nan = nan
        self.inf = inf and nan == "ieee"
        self.subnormals = subnormals
        self.emin = 1 - bias
        top_exp = 2**exp_bits - 1
        full_man = 2**man_bits - 1
        # (biased exponent, mantissa) of the largest finite magnitude
        if nan == "ieee":
            be, bm = top_exp - 1, full_man
        elif nan == "fn":
            be, bm = (top_exp, full_man - 1) if man_bits > 0 else (top_exp - 1, 0)
        else:  # fnuz, None: every magnitude code is finite
            be, bm = top_exp, full_man
        self.max = self._value(be, bm)
        # ieee with inf and no mantissa bits: the top binade's only code is inf, no NaN
        self.has_nan = nan is not None and not (nan == "ieee" and self.inf and man_bits == 0)
        self.has_neg_zero = nan != "fnuz"

    def _value(self, be, bm):
        if be == 0:
            return Fraction(bm, 2**self.m) * Fraction(2) ** self.emin
        return (1 + Fraction(bm, 2**self.m)) * Fraction(2) ** (be - self.bias)

    @classmethod
    def of(cls, fmt):
        return cls(fmt.exp_bits, fmt.man_bits, fmt.bias, fmt.inf, fmt.nan, fmt.subnormals)


def _floor_log2(a: Fraction) -> int:
    """floor(log2(a)) for a positive rational, exactly."""
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    if Fraction(2) ** (e + 1) <= a:
        e += 1
    return e


def _pow2(e: int) -> Fraction:
    return Fraction(2) ** e


def _decide(mode: str, negative: bool, odd: int, r: Fraction) -> bool:
    """Round the magnitude ``k + r`` (0 <= r < 1) up to ``k + 1``? ``odd``: the truncated code's last bit."""
    if r == 0:
        return False
    if mode == "nearest_even":
        return r > Fraction(1, 2) or (r == Fraction(1, 2) and odd == 1)
    if mode == "nearest_away":
        return r >= Fraction(1, 2)
    if mode == "toward_zero":
        return False
    if mode == "up":
        return not negative
    if mode == "down":
        return negative
    if mode == "odd":
        return odd == 0
    raise ValueError(mode)


def _overflow_to_inf(mode: str, negative: bool) -> bool:
    if mode in ("nearest_even", "nearest_away", "stochastic"):
        return True
    if mode in ("toward_zero", "odd"):
        return False
    if mode == "up":
        return not negative
    return negative  # down


def neighbours(x: float, s: FloatSpec):
    """(lo, hi) magnitudes of the grid points around |x| (finite, nonzero), and k's parity."""
    a = Fraction(abs(x))
    # floor(log2 |x|), exactly (x a float, an int of any size or a Fraction, which a
    # float would round: to the next binade, or to zero far below float64's range)
    if isinstance(x, Fraction):
        e = a.numerator.bit_length() - a.denominator.bit_length()
        if _pow2(e) > a:
            e -= 1
    else:
        e = abs(x).bit_length() - 1 if isinstance(x, int) else math.frexp(abs(x))[1] - 1
    if e >= s.emin:
        q = e - s.m
    elif s.subnormals:
        q = s.emin - s.m
    else:
        q = s.emin
    k = math.floor(a / _pow2(q))
    # Ties to even and round to odd look at the last bit of the truncated value's code:
    # k's when man_bits > 0; with man_bits == 0, k is 1 and the code is the biased exponent.
    if s.m == 0 and e >= s.emin:
        parity = e + s.bias
    else:
        parity = k
    return k, a / _pow2(q) - k, q, parity % 2


def round_float(x: float, s: FloatSpec, mode: str, saturate: bool = False, _nb=None) -> float:
    """x rounded into the format, as a Python float (NaN, +-inf, signed zeros kept).
    ``_nb`` may carry ``neighbours(x, s)`` when rounding one x in several modes."""
    if math.isnan(x):
        if not s.has_nan:
            raise ValueError("NaN has no encoding")
        return math.nan
    negative = math.copysign(1.0, x) < 0
    sign = -1.0 if negative else 1.0

    def over():
        if saturate or not _overflow_to_inf(mode, negative):
            return sign * float(s.max)
        if s.inf:
            return sign * math.inf
        if s.has_nan:
            return math.nan
        return sign * float(s.max)

    if math.isinf(x):
        if saturate:
            return sign * float(s.max)
        if s.inf:
            return x
        return math.nan if s.has_nan else sign * float(s.max)
    if x == 0:
        return -0.0 if negative and s.has_neg_zero else 0.0
    k, r, q, odd = _nb if _nb is not None else neighbours(x, s)
    k += _decide(mode, negative, odd, r)
    v = k * _pow2(q)
    if v > s.max:
        return over()
    if v == 0:
        return -0.0 if negative and s.has_neg_zero else 0.0
    return sign * float(v)


# ---------------------------------------------------------------------------- posits


def posit_decode(code: int, n: int, es: int) -> Fraction | None:
    """Exact value of a posit<n, es> code (None for NaR)."""
    mask = (1 << n) - 1
    code &= mask
    if code == 0:
        return Fraction(0)
    if code == 1 << (n - 1):
        return None
    negative = code >> (n - 1) == 1
    if negative:
        code = (-code) & mask
    bits = [(code >> i) & 1 for i in range(n - 2, -1, -1)]  # after the sign, MSB first
    first = bits[0]
    run = 0
    while run < len(bits) and bits[run] == first:
        run += 1
    k = run - 1 if first == 1 else -run
    rest = bits[run + 1:]
    e_bits = (rest[:es] + [0] * es)[:es]
    e = int("".join(map(str, e_bits)), 2) if es else 0
    f_bits = rest[es:]
    f = Fraction(int("".join(map(str, f_bits)), 2), 2 ** len(f_bits)) if f_bits else Fraction(0)
    v = (1 + f) * _pow2(k * 2**es + e)
    return -v if negative else v


def posit_round(x: float, n: int, es: int) -> int:
    """The posit<n, es> code of x rounded to nearest under the 2022 standard: the exact
    value's encoding (as a long bit string) is cut to n - 1 bits after the sign and
    rounded to nearest, ties to the even string; then clamped to [minpos, maxpos]."""
    if math.isnan(x) or math.isinf(x):
        return 1 << (n - 1)
    if x == 0:
        return 0
    negative = x < 0
    a = Fraction(abs(x))
    scale = _floor_log2(a)
    k, e = divmod(scale, 2**es)
    frac = a / _pow2(scale) - 1  # in [0, 1)
    # The infinite bit string: regime, exponent, fraction, as an integer over 2**L.
    regime = "1" * (k + 1) + "0" if k >= 0 else "0" * (-k) + "1"
    head = regime + format(e, f"0{es}b") if es else regime
    # A float64 significand has 52 bits after the point: 64 fraction bits hold it exactly.
    fbits = 64
    fint = frac * 2**fbits
    assert fint.denominator == 1
    whole = (int(head, 2) << fbits) | int(fint)
    length = len(head) + fbits
    keep = n - 1
    if length <= keep:
        mag = whole << (keep - length)
    else:
        cut = length - keep
        mag = whole >> cut
        rem = whole & ((1 << cut) - 1)
        half = 1 << (cut - 1)
        if rem > half or (rem == half and mag & 1):
            mag += 1
    maxpos = (1 << (n - 1)) - 1
    mag = min(max(mag, 1), maxpos)
    return (-mag) & ((1 << n) - 1) if negative else mag


def round_float_modes(x: float, s: FloatSpec, modes=MODES, saturates=(False, True)) -> dict:
    """{(mode, saturate): round_float(x, s, mode, saturate)}, sharing the exact work."""
    if not math.isfinite(x) or x == 0:
        return {(m, sat): round_float(x, s, m, sat) for m in modes for sat in saturates}
    negative = x < 0
    sign = -1.0 if negative else 1.0
    k, r, q, odd = neighbours(x, s)
    unit = _pow2(q)
    cand = {}
    for up in (False, True):
        v = (k + up) * unit
        if v > s.max:
            cand[up] = None
        elif v == 0:
            cand[up] = -0.0 if negative and s.has_neg_zero else 0.0
        else:
            cand[up] = sign * float(v)
    out = {}
    for m in modes:
        c = cand[_decide(m, negative, odd, r)]
        for sat in saturates:
            out[(m, sat)] = c if c is not None else round_float(x, s, m, sat, (k, r, q, odd))
    return out
