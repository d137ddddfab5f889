//! Posits <n, es> (2022 Posit Standard when es = 2): one zero, one NaR
//! (`100..0`), two's-complement negation, rounding on the encoding's bit string,
//! never rounding a nonzero to zero nor overflowing to NaR.

use super::float::ldexp;
use crate::round::{round_up, Mode, Rem, RoundOpts};
use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PositFormat {
    pub nbits: u32,
    pub es: u32,
}

impl PositFormat {
    pub fn new(nbits: u32, es: u32) -> Result<Self> {
        if !(2..=32).contains(&nbits) {
            return Err(Error::value(format!("nbits: must be in 2..=32, got {nbits}")));
        }
        if es > 4 {
            return Err(Error::value(format!("es: must be in 0..=4, got {es}")));
        }
        Ok(PositFormat { nbits, es })
    }

    #[inline(always)]
    pub fn bits(&self) -> u32 {
        self.nbits
    }

    #[inline(always)]
    pub fn nar(&self) -> u64 {
        1u64 << (self.nbits - 1)
    }

    #[inline(always)]
    fn mask(&self) -> u64 {
        (1u64 << self.nbits) - 1
    }

    /// Largest positive code, `011..1`.
    #[inline(always)]
    pub fn max_code(&self) -> u64 {
        self.nar() - 1
    }

    /// log2 of maxpos: (n - 2) * 2^es.
    pub fn max_scale(&self) -> i32 {
        ((self.nbits as i32) - 2) << self.es
    }

    /// Decode to f64 (exact: at most 2^±480 and 28 significant bits).
    pub fn decode(&self, code: u64) -> f64 {
        let n = self.nbits;
        let code = code & self.mask();
        if code == 0 {
            return 0.0;
        }
        if code == self.nar() {
            return f64::NAN;
        }
        let negative = code & self.nar() != 0;
        // Magnitude by two's complement.
        let mag = if negative { code.wrapping_neg() & self.mask() } else { code };
        // Bits after the sign, left-aligned in a u64: bit 63 is the first regime bit.
        let body = mag << (64 - (n - 1));
        let first = body >> 63;
        let run = if first == 1 { body.leading_ones() } else { body.leading_zeros() }.min(n - 1);
        let k: i32 = if first == 1 { run as i32 - 1 } else { -(run as i32) };
        // Skip the regime and its terminating bit (absent when the regime fills the word).
        let used = (run + 1).min(n - 1);
        let rest = if used >= 64 { 0 } else { body << used };
        let avail = n - 1 - used; // bits left for exponent and fraction
        let es = self.es;
        let e = if es == 0 { 0 } else { (rest >> (64 - es)) as i32 }; // missing bits read as 0
        let fbits = avail.saturating_sub(es);
        let frac = if fbits == 0 { 0 } else { (rest << es) >> (64 - fbits) };
        let scale = (k << es) + e;
        let v = ldexp(((1u64 << fbits) | frac) as f64, scale - fbits as i32);
        if negative {
            -v
        } else {
            v
        }
    }

    /// Stochastic rounding of a magnitude `a = mant * 2^(e_a - f)` (`mant` of `f + 1`
    /// bits) whose cut bits include exponent bits, where `kc` is the kept magnitude code
    /// (`1 <= kc < max_code`): the neighbours `kc` and `kc + 1` are powers of two
    /// (no fraction bits are kept), which the remainder of the bit string does not
    /// split linearly (in posit8, 2^22 lies a fifth of the way from 2^20 to 2^24, a
    /// half by the bits). Up with probability `floor(frac * 2^rbits) / 2^rbits`,
    /// `frac` the exact share of the way from one to the other ([`linear_frac`]),
    /// as the remainder's share of a unit is elsewhere.
    pub(crate) fn stochastic_up(&self, kc: u64, mant: u64, e_a: i32, f: i32, rand: u64, rbits: u32) -> bool {
        let scale = |c: u64| ((self.decode(c).to_bits() >> 52) as i32) - 1023;
        let frac = linear_frac(mant, e_a, f, scale(kc), scale(kc + 1));
        rand < (frac >> (64 - rbits))
    }

    /// Round `x` into the format (bit-string rounding of the standard for the
    /// nearest modes; the other modes pick between the same two neighbours, stochastic
    /// rounding with the probabilities of their distances: `stochastic_up`).
    pub fn encode(&self, x: f64, opts: &RoundOpts, rand: u64) -> u64 {
        if x.is_nan() || (x.is_infinite() && !opts.saturate) {
            return self.nar();
        }
        if x.is_infinite() {
            // saturate: infinities become +-maxpos like every out-of-range value
            let m = self.max_code();
            return if x < 0.0 { m.wrapping_neg() & self.mask() } else { m };
        }
        if x == 0.0 {
            return 0;
        }
        let negative = x < 0.0;
        let a = x.abs();
        let bits = a.to_bits();
        let ef = (bits >> 52) as i32;
        // Normalize to mant in [2^52, 2^53): a = mant * 2^(e_a - 52).
        let (mant, e_a) = if ef == 0 {
            let f = bits & ((1 << 52) - 1);
            let top = 63 - f.leading_zeros() as i32;
            (f << (52 - top), top - 1074)
        } else {
            ((bits & ((1 << 52) - 1)) | (1 << 52), ef - 1023)
        };
        let n = self.nbits;
        let es = self.es;
        let maxscale = self.max_scale();
        let mag = if e_a >= maxscale {
            self.max_code()
        } else if e_a < -maxscale {
            1 // minpos: never round a nonzero to zero
        } else {
            let k = e_a >> es; // regime (floor division)
            let e = (e_a - (k << es)) as u128;
            // Build regime | exponent | 52 fraction bits as one bit string.
            let (reg, reglen) = if k >= 0 {
                // k+1 ones then a zero
                (((1u128 << (k + 1)) - 1) << 1, (k + 2) as u32)
            } else {
                (1u128, (-k + 1) as u32)
            };
            let frac = (mant & ((1 << 52) - 1)) as u128;
            let len = reglen + es + 52;
            let s = (((reg << es) | e) << 52) | frac;
            let keep = n - 1;
            let (kc, rem) = if len <= keep {
                (s << (keep - len), Rem::ZERO)
            } else {
                let cut = len - keep;
                (s >> cut, Rem::low_bits(s, cut))
            };
            let kc = kc as u64;
            let up = if opts.mode == Mode::Stochastic && len > keep && len - keep > 52 && kc >= 1 && kc < self.max_code() {
                self.stochastic_up(kc, mant, e_a, 52, rand, opts.rbits)
            } else {
                round_up(opts.mode, negative, kc & 1 == 1, rem, rand, opts.rbits)
            };
            (kc + up as u64).clamp(1, self.max_code())
        };
        if negative {
            mag.wrapping_neg() & self.mask()
        } else {
            mag
        }
    }

    pub fn max_value(&self) -> f64 {
        self.decode(self.max_code())
    }

    pub fn min_value(&self) -> f64 {
        self.decode(1)
    }

    /// Gap between 1 and the next posit (the gap below 1 when 1 is maxpos, as in <2, es>).
    pub fn eps(&self) -> f64 {
        let one = self.encode(1.0, &RoundOpts::new(crate::Mode::NearestEven), 0);
        if one == self.max_code() {
            return 1.0 - self.decode(one - 1);
        }
        self.decode(one + 1) - 1.0
    }
}

/// `floor((a - 2^e_lo) / (2^e_hi - 2^e_lo) * 2^64)` for `a = mant * 2^(e_a - f)` with
/// `2^e_lo <= a < 2^e_hi`, exactly: in units of a's last bit, `a - lo` is `n = mant -
/// 2^b` (`b = e_lo - e_a + f`) and `hi - lo` is `2^b * (2^m - 1)` (`m = e_hi - e_lo`),
/// so the share is `n * 2^(64 - b) / (2^m - 1)`, an integer division of at most 64 +
/// m bits. (Neighbours of a posit with no fraction bits lie at most 2^(2^es) apart,
/// m <= 16, and `b` lies from f - 16 to f.)
pub(crate) fn linear_frac(mant: u64, e_a: i32, f: i32, e_lo: i32, e_hi: i32) -> u64 {
    let b = e_lo - e_a + f;
    let m = e_hi - e_lo;
    assert!((0..=f).contains(&b) && (1..=48).contains(&m) && f <= 52, "linear_frac: neighbours around the value");
    let n = (mant - (1u64 << b)) as u128;
    ((n << (64 - b)) / ((1u128 << m) - 1)) as u64
}


#[cfg(test)]
mod tests {
    use super::*;

    /// Stochastic rounding's count of rounding up over every random word of `rbits`
    /// bits (the word placed as the encoders read it: `rand` below 2^rbits).
    fn ups(f: &PositFormat, x: f64, rbits: u32) -> u64 {
        let mut o = RoundOpts::new(Mode::Stochastic);
        o.rbits = rbits;
        let lo = f.encode(x, &RoundOpts::new(Mode::TowardZero), 0);
        (0..1u64 << rbits).filter(|&r| f.encode(x, &o, r) != lo).count() as u64
    }

    #[test]
    fn stochastic_probabilities_are_the_distances() {
        let p8 = PositFormat::new(8, 2).unwrap();
        // 2^22 lies a fifth of the way from 2^20 to 2^24 (exponent bits cut): 51 of 256.
        assert_eq!(p8.decode(p8.encode(2f64.powi(22), &RoundOpts::new(Mode::TowardZero), 0)), 2f64.powi(20));
        assert_eq!(ups(&p8, 2f64.powi(22), 8), 51);
        assert_eq!(ups(&p8, -(2f64.powi(22)), 8), 51);
        // 3 * 2^20: two fifteenths (2 of 15 of the way): floor(2/15 * 256) = 34.
        assert_eq!(ups(&p8, 3.0 * 2f64.powi(20), 8), 34);
        // Below 1: 2^-22 between 2^-24 and 2^-20: (2^-22 - 2^-24) / (2^-20 - 2^-24) = 1/5.
        assert_eq!(ups(&p8, 2f64.powi(-22), 8), 51);
        // Fraction bits cut: 1.3 between 1.25 and 1.375 is 0.4 of the way: floor(0.4 * 256) = 102,
        // as the bit string's remainder says.
        assert_eq!(ups(&p8, 1.3, 8), 102);
        // Values of the format never move.
        assert_eq!(ups(&p8, 2f64.powi(20), 8), 0);
        // The exact share in 64 bits: 2^64 / 5, truncated.
        assert_eq!(linear_frac(1 << 52, 22, 52, 20, 24), ((1u128 << 64) / 5) as u64);
        assert_eq!(linear_frac(1 << 23, 22, 23, 20, 24), ((1u128 << 64) / 5) as u64);
        assert_eq!(linear_frac((1 << 52) | 1, 0, 52, 0, 1), 1 << 12);
    }
}
