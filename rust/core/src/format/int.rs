//! Two's-complement and unsigned integers (int8 first of all): rounding to the
//! nearest representable integer under any mode, saturating at the range ends.
//! Scales and zero points are applied by the quantization kernels.

use crate::round::{round_up, Rem, RoundOpts};
use crate::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IntFormat {
    pub bits: u32,
    pub signed: bool,
}

impl IntFormat {
    pub fn new(bits: u32, signed: bool) -> Result<Self> {
        if !(2..=32).contains(&bits) {
            return Err(Error::value(format!("bits: must be in 2..=32, got {bits}")));
        }
        Ok(IntFormat { bits, signed })
    }

    pub fn min_int(&self) -> i64 {
        if self.signed {
            -(1i64 << (self.bits - 1))
        } else {
            0
        }
    }

    pub fn max_int(&self) -> i64 {
        if self.signed {
            (1i64 << (self.bits - 1)) - 1
        } else {
            (1i64 << self.bits) - 1
        }
    }

    /// Round to an integer with the mode and clamp to the range (NaN gives 0).
    #[inline]
    pub fn round_int(&self, x: f64, opts: &RoundOpts, rand: u64) -> i64 {
        if x.is_nan() {
            return 0;
        }
        let (lo, hi) = (self.min_int(), self.max_int());
        if x >= hi as f64 {
            return hi;
        }
        if x <= lo as f64 {
            return lo;
        }
        // |x| < 2^32 here, so the integer part and the fraction are exact.
        let negative = x < 0.0;
        let a = x.abs();
        let k = a.trunc();
        let f = a - k; // exact
        let rem = if f == 0.0 {
            Rem::ZERO
        } else {
            // f in (0, 1) with at most 53 significant bits: as a 2^-64 fixed point
            // plus a sticky bit for what falls below.
            let scaled = f * 18446744073709551616.0; // 2^64, exact
            let fr = scaled.trunc();
            Rem { frac: fr as u64, sticky: scaled != fr }
        };
        let k = k as i64;
        let kk = k + round_up(opts.mode, negative, k & 1 == 1, rem, rand, opts.rbits) as i64;
        (if negative { -kk } else { kk }).clamp(lo, hi)
    }

    /// The integer's code: its two's-complement bits in `bits` bits.
    #[inline]
    pub fn encode(&self, x: f64, opts: &RoundOpts, rand: u64) -> u64 {
        (self.round_int(x, opts, rand) as u64) & ((1u64 << self.bits) - 1)
    }

    #[inline]
    pub fn decode(&self, code: u64) -> f64 {
        let code = code & ((1u64 << self.bits) - 1);
        if self.signed && code >> (self.bits - 1) == 1 {
            (code as i64 - (1i64 << self.bits)) as f64
        } else {
            code as f64
        }
    }
}
