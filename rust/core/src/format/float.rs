//! Generic IEEE-like binary floats: sign, `exp_bits` exponent, `man_bits`
//! mantissa, any bias, four NaN/inf policies, subnormals on or off.
//!
//! One engine rounds an f64 into any such format under any mode; named formats
//! (bf16, fp16, the fp8 family) are constants of [`FloatFormat`].

use crate::round::{round_up, Rem, RoundOpts};
use crate::{Error, Result};

/// Which encodings are NaN and infinity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NanPolicy {
    /// The all-ones exponent is reserved: nonzero mantissa is NaN, zero mantissa
    /// is +-inf (or NaN too when the format has no inf).
    Ieee,
    /// Only S.111..1 is NaN; no inf; the rest of the top binade is finite (OCP E4M3).
    Fn,
    /// Only 100..0 (negative zero's encoding) is NaN; no -0, no inf.
    Fnuz,
    /// Every encoding is a finite number.
    None,
}

impl NanPolicy {
    pub fn name(self) -> Option<&'static str> {
        match self {
            NanPolicy::Ieee => Some("ieee"),
            NanPolicy::Fn => Some("fn"),
            NanPolicy::Fnuz => Some("fnuz"),
            NanPolicy::None => None,
        }
    }
}

/// A binary floating-point format. Construct with [`FloatFormat::new`], which validates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FloatFormat {
    pub exp_bits: u32,
    pub man_bits: u32,
    pub bias: i32,
    pub inf: bool,
    pub nan: NanPolicy,
    pub subnormals: bool,
}

impl FloatFormat {
    /// Validates and builds a format. `bias: None` means `2^(exp_bits-1) - 1`,
    /// plus one for `Fnuz`. `inf` only matters for the `Ieee` policy.
    pub fn new(exp_bits: u32, man_bits: u32, bias: Option<i32>, inf: bool, nan: NanPolicy, subnormals: bool) -> Result<Self> {
        if !(1..=11).contains(&exp_bits) {
            return Err(Error::value(format!("exp_bits: must be in 1..=11, got {exp_bits}")));
        }
        if man_bits > 52 {
            return Err(Error::value(format!("man_bits: must be in 0..=52, got {man_bits}")));
        }
        if nan == NanPolicy::Ieee && exp_bits < 2 {
            return Err(Error::value("exp_bits: nan='ieee' reserves the top binade and needs exp_bits >= 2"));
        }
        if nan == NanPolicy::Fnuz && exp_bits + man_bits == 0 {
            return Err(Error::value("man_bits: a fnuz format needs at least one magnitude bit"));
        }
        let default_bias = (1i32 << (exp_bits - 1)) - 1 + i32::from(nan == NanPolicy::Fnuz);
        let bias = bias.unwrap_or(default_bias);
        let f = FloatFormat { exp_bits, man_bits, bias, inf: inf && nan == NanPolicy::Ieee, nan, subnormals };
        // The whole format must be exactly representable in f64.
        let (emax, emin) = (f.emax(), f.emin());
        if emax > 1023 || emin - (man_bits as i32) < -1074 || (!subnormals && emin < -1022) {
            return Err(Error::value(format!(
                "bias: {bias} puts the format's exponent range [{emin}, {emax}] outside float64's"
            )));
        }
        if f.max_code() == 0 {
            return Err(Error::value("exp_bits/man_bits: the format has no positive finite value"));
        }
        Ok(f)
    }

    /// Total bits, sign included.
    #[inline(always)]
    pub fn bits(&self) -> u32 {
        1 + self.exp_bits + self.man_bits
    }

    #[inline(always)]
    pub fn sign_bit(&self) -> u64 {
        1u64 << (self.exp_bits + self.man_bits)
    }

    /// Mask of the magnitude (exponent and mantissa) bits.
    #[inline(always)]
    pub fn mag_mask(&self) -> u64 {
        self.sign_bit() - 1
    }

    /// Exponent of the smallest normal number, `1 - bias`.
    #[inline(always)]
    pub fn emin(&self) -> i32 {
        1 - self.bias
    }

    /// Exponent of the largest finite number.
    pub fn emax(&self) -> i32 {
        (self.max_code() >> self.man_bits) as i32 - self.bias
    }

    /// Magnitude code of the largest finite value.
    #[inline(always)]
    pub fn max_code(&self) -> u64 {
        let all = self.mag_mask();
        match self.nan {
            // Everything below the all-ones exponent.
            NanPolicy::Ieee => ((all >> self.man_bits) << self.man_bits).wrapping_sub(1),
            NanPolicy::Fn => all - 1,
            NanPolicy::Fnuz | NanPolicy::None => all,
        }
    }

    /// Does any encoding hold NaN? (Not with the ieee policy, inf and no mantissa
    /// bits: the top binade's only code is inf.)
    pub fn has_nan(&self) -> bool {
        match self.nan {
            NanPolicy::None => false,
            NanPolicy::Ieee => !(self.inf && self.man_bits == 0),
            _ => true,
        }
    }

    pub fn has_neg_zero(&self) -> bool {
        self.nan != NanPolicy::Fnuz
    }

    /// The quiet-NaN code with the given sign (fnuz has a single NaN).
    #[inline(always)]
    pub fn nan_code(&self, negative: bool) -> u64 {
        let s = if negative { self.sign_bit() } else { 0 };
        match self.nan {
            NanPolicy::Ieee => {
                let top = (self.mag_mask() >> self.man_bits) << self.man_bits;
                let quiet = if self.man_bits == 0 { 0 } else { 1u64 << (self.man_bits - 1) };
                s | top | quiet
            }
            NanPolicy::Fn => s | self.mag_mask(),
            NanPolicy::Fnuz => self.sign_bit(),
            NanPolicy::None => 0,
        }
    }

    /// Code of +-inf, or of what stands for it (NaN, or max when there is no NaN).
    #[inline(always)]
    pub fn inf_code(&self, negative: bool) -> u64 {
        if self.inf {
            let top = (self.mag_mask() >> self.man_bits) << self.man_bits;
            top | if negative { self.sign_bit() } else { 0 }
        } else if self.has_nan() {
            self.nan_code(negative)
        } else {
            self.apply_sign(self.max_code(), negative)
        }
    }

    /// Attach the sign to a magnitude code (fnuz has no negative zero).
    #[inline(always)]
    pub fn apply_sign(&self, mag: u64, negative: bool) -> u64 {
        if negative && (mag != 0 || self.has_neg_zero()) {
            mag | self.sign_bit()
        } else {
            mag
        }
    }

    /// Is `code` a NaN encoding?
    pub fn is_nan_code(&self, code: u64) -> bool {
        let mag = code & self.mag_mask();
        match self.nan {
            NanPolicy::Ieee => {
                let top = (self.mag_mask() >> self.man_bits) << self.man_bits;
                mag & top == top && (mag & !top != 0 || !self.inf)
            }
            NanPolicy::Fn => mag == self.mag_mask(),
            NanPolicy::Fnuz => code & (self.sign_bit() | self.mag_mask()) == self.sign_bit(),
            NanPolicy::None => false,
        }
    }

    /// Decode a code (upper bits beyond `bits()` are ignored) to f64, exactly.
    pub fn decode(&self, code: u64) -> f64 {
        let negative = code & self.sign_bit() != 0;
        let mag = code & self.mag_mask();
        if self.is_nan_code(code) {
            return if negative { -f64::NAN } else { f64::NAN };
        }
        let m = self.man_bits;
        let bexp = (mag >> m) as i32;
        let frac = mag & ((1u64 << m) - 1);
        let v = if self.nan == NanPolicy::Ieee && self.inf && (mag >> m) << m == (self.mag_mask() >> m) << m {
            f64::INFINITY
        } else if bexp == 0 {
            // Without subnormals the codes of the zero exponent are zeros (round and
            // encode never make the others; their values would lie below min_normal,
            // which is then the smallest positive value).
            if self.subnormals {
                ldexp(frac as f64, self.emin() - m as i32)
            } else {
                0.0
            }
        } else {
            ldexp(((1u64 << m) | frac) as f64, bexp - self.bias - m as i32)
        };
        // (fnuz formats have no -0: the flushed codes of a negative sign are +0 too.)
        if negative && !(v == 0.0 && self.nan == NanPolicy::Fnuz) {
            -v
        } else {
            v
        }
    }

    /// Round `x` into the format and return the code. `rand` carries `opts.rbits`
    /// random bits (stochastic mode). NaN in a format without NaN encodes as 0;
    /// callers that must report it check `x.is_nan()` themselves.
    #[inline]
    pub fn encode(&self, x: f64, opts: &RoundOpts, rand: u64) -> u64 {
        let negative = x.is_sign_negative();
        let a = x.abs();
        if a.is_nan() {
            return self.nan_code(negative);
        }
        if a.is_infinite() {
            return if opts.saturate { self.apply_sign(self.max_code(), negative) } else { self.inf_code(negative) };
        }
        if a == 0.0 {
            return self.apply_sign(0, negative);
        }
        // a = mant * 2^e2 with mant a 53-bit (or smaller, subnormal) integer.
        let bits = a.to_bits();
        let ef = (bits >> 52) as i32;
        let (mant, e2) = if ef == 0 { (bits, -1074) } else { ((bits & ((1 << 52) - 1)) | (1 << 52), ef - 1075) };
        let top = 63 - mant.leading_zeros() as i32;
        let e_a = e2 + top; // floor(log2 a)
        let m = self.man_bits as i32;
        let emin = self.emin();
        let emax = self.emax();
        let ovf = |f: &Self| {
            if opts.saturate || !opts.mode.overflows_to_inf(negative) {
                f.apply_sign(f.max_code(), negative)
            } else {
                f.inf_code(negative)
            }
        };
        if e_a > emax {
            return ovf(self);
        }
        // The unit of the result: 2^q. Below the normal range the unit is fixed
        // (subnormals), or, without subnormals, the gap [0, min_normal] is one unit.
        let (q, base) = if e_a >= emin {
            (e_a - m, ((e_a - emin) as u64) << m)
        } else if self.subnormals {
            (emin - m, 0)
        } else {
            (emin, 0)
        };
        let s = q - e2; // bits of mant below the unit
        let (k, rem) = if s <= 0 {
            ((mant as u128) << (-s) as u32, Rem::ZERO)
        } else {
            let s = s as u32;
            let k = if s >= 128 { 0 } else { (mant as u128) >> s };
            (k, Rem::low_bits(mant as u128, s))
        };
        let k = k as u64;
        // Ties to even / to odd look at the truncated code's last bit: that is k's
        // parity when man_bits > 0 (base is a multiple of 2^m), the exponent's when
        // man_bits == 0 (k is then always 1 in the normal range).
        let code_odd = (base + k) & 1 == 1;
        let up = round_up(opts.mode, negative, code_odd, rem, rand, opts.rbits);
        let kk = k + up as u64;
        let mag = if e_a < emin && !self.subnormals {
            // 0 or min normal.
            kk << m
        } else {
            base + kk
        };
        if mag > self.max_code() {
            return ovf(self);
        }
        self.apply_sign(mag, negative)
    }

    /// Largest finite value.
    pub fn max_value(&self) -> f64 {
        self.decode(self.max_code())
    }

    /// Smallest positive normal value.
    pub fn min_normal(&self) -> f64 {
        ldexp(1.0, self.emin())
    }

    /// Smallest positive value (the min normal when subnormals are off).
    pub fn min_subnormal(&self) -> f64 {
        if self.subnormals && self.man_bits > 0 {
            ldexp(1.0, self.emin() - self.man_bits as i32)
        } else {
            self.min_normal()
        }
    }

    /// Gap between 1 and the next larger value.
    pub fn eps(&self) -> f64 {
        ldexp(1.0, -(self.man_bits as i32))
    }
}

/// `f * 2^e`, exact whenever `f` is an integer >= 1 and the result is a
/// representable f64 (the intermediate step stays in the normal range).
pub fn ldexp(f: f64, e: i32) -> f64 {
    let mut f = f;
    let mut e = e;
    while e > 1000 {
        f *= pow2(1000);
        e -= 1000;
    }
    while e < -1000 {
        f *= pow2(-1000);
        e += 1000;
    }
    f * pow2(e)
}

/// 2^e for -1022 <= e <= 1023 as an exact f64 (built from its bits).
#[inline]
pub fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}
