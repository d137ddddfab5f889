//! Number formats: generic floats, posits and integers behind one enum.

mod float;
mod int;
mod posit;

pub use float::{ldexp, FloatFormat, NanPolicy};
pub use int::IntFormat;
pub use posit::PositFormat;

use crate::round::RoundOpts;

/// Any lowp format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Float(FloatFormat),
    Posit(PositFormat),
    Int(IntFormat),
}

impl Format {
    /// Total bits of one encoding.
    pub fn bits(&self) -> u32 {
        match self {
            Format::Float(f) => f.bits(),
            Format::Posit(p) => p.bits(),
            Format::Int(i) => i.bits,
        }
    }

    /// Bytes of the unsigned integer that stores one encoding (1, 2, 4 or 8).
    pub fn storage_bytes(&self) -> usize {
        match self.bits() {
            0..=8 => 1,
            9..=16 => 2,
            17..=32 => 4,
            _ => 8,
        }
    }

    #[inline]
    pub fn encode(&self, x: f64, opts: &RoundOpts, rand: u64) -> u64 {
        match self {
            Format::Float(f) => f.encode(x, opts, rand),
            Format::Posit(p) => p.encode(x, opts, rand),
            Format::Int(i) => i.encode(x, opts, rand),
        }
    }

    #[inline]
    pub fn decode(&self, code: u64) -> f64 {
        match self {
            Format::Float(f) => f.decode(code),
            Format::Posit(p) => p.decode(code),
            Format::Int(i) => i.decode(code),
        }
    }

    /// Can the format hold a NaN?
    pub fn has_nan(&self) -> bool {
        match self {
            Format::Float(f) => f.has_nan(),
            Format::Posit(_) => true,
            Format::Int(_) => false,
        }
    }

    /// Is every value of the format exactly an f32 (so f32 results are exact)?
    pub fn fits_f32(&self) -> bool {
        match self {
            Format::Float(f) => {
                f.man_bits <= 23 && f.emax() <= 127 && f.emin() - f.man_bits as i32 >= -149
            }
            Format::Posit(p) => p.max_scale() <= 126 && (p.nbits as i32 - 3 - p.es as i32) <= 23,
            Format::Int(i) => i.bits <= 24,
        }
    }
}

/// The named formats (encodings identical to the ml_dtypes types of the same name).
pub mod named {
    use super::*;

    const fn fl(e: u32, m: u32, bias: i32, inf: bool, nan: NanPolicy) -> FloatFormat {
        FloatFormat { exp_bits: e, man_bits: m, bias, inf, nan, subnormals: true }
    }
    pub const BFLOAT16: FloatFormat = fl(8, 7, 127, true, NanPolicy::Ieee);
    pub const FLOAT16: FloatFormat = fl(5, 10, 15, true, NanPolicy::Ieee);
    pub const FLOAT32: FloatFormat = fl(8, 23, 127, true, NanPolicy::Ieee);
    pub const FLOAT64: FloatFormat = fl(11, 52, 1023, true, NanPolicy::Ieee);
    pub const FLOAT8_E5M2: FloatFormat = fl(5, 2, 15, true, NanPolicy::Ieee);
    pub const FLOAT8_E4M3FN: FloatFormat = fl(4, 3, 7, false, NanPolicy::Fn);
    pub const FLOAT8_E4M3: FloatFormat = fl(4, 3, 7, true, NanPolicy::Ieee);
    pub const FLOAT8_E4M3FNUZ: FloatFormat = fl(4, 3, 8, false, NanPolicy::Fnuz);
    pub const FLOAT8_E5M2FNUZ: FloatFormat = fl(5, 2, 16, false, NanPolicy::Fnuz);
    pub const POSIT8: PositFormat = PositFormat { nbits: 8, es: 2 };
    pub const POSIT16: PositFormat = PositFormat { nbits: 16, es: 2 };
    pub const POSIT32: PositFormat = PositFormat { nbits: 32, es: 2 };
    pub const INT8: IntFormat = IntFormat { bits: 8, signed: true };
}

#[cfg(test)]
mod tests {
    use super::named::*;
    use super::*;
    use crate::round::{Mode, RoundOpts};

    fn rne() -> RoundOpts {
        RoundOpts::new(Mode::NearestEven)
    }

    #[test]
    fn standard_maxima() {
        assert_eq!(FLOAT16.max_value(), 65504.0);
        assert_eq!(FLOAT8_E5M2.max_value(), 57344.0);
        assert_eq!(FLOAT8_E4M3.max_value(), 240.0);
        assert_eq!(FLOAT8_E4M3FN.max_value(), 448.0);
        assert_eq!(FLOAT8_E4M3FNUZ.max_value(), 240.0);
        assert_eq!(FLOAT8_E5M2FNUZ.max_value(), 57344.0);
        let hfp8 = FloatFormat::new(4, 3, Some(11), true, NanPolicy::Ieee, true).unwrap();
        assert_eq!(hfp8.max_value(), 15.0);
        assert_eq!(BFLOAT16.max_value(), (2.0 - 2f64.powi(-7)) * 2f64.powi(127));
        assert_eq!(FLOAT32.max_value(), f32::MAX as f64);
        assert_eq!(FLOAT64.max_value(), f64::MAX);
        assert_eq!(FLOAT64.min_subnormal(), f64::from_bits(1));
    }

    #[test]
    fn f32_and_f64_are_identities() {
        let xs = [1.0f64, -0.0, std::f64::consts::PI, 1e-40, 1e-310, 1e300, f64::MIN_POSITIVE];
        for x in xs {
            let c = FLOAT64.encode(x, &rne(), 0);
            assert_eq!(c, x.to_bits());
            assert_eq!(FLOAT64.decode(c).to_bits(), x.to_bits());
            let c = FLOAT32.encode(x, &rne(), 0);
            assert_eq!(c as u32, (x as f32).to_bits(), "{x}");
        }
    }

    #[test]
    fn adversarial_double_rounding() {
        // 1 + 2^-8 + 2^-30 rounds up in bf16; via f32 it would first become 1 + 2^-8 (a tie) and then 1.0.
        let x = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
        assert_eq!(BFLOAT16.decode(BFLOAT16.encode(x, &rne(), 0)), 1.0078125);
    }

    #[test]
    fn overflow_and_saturation() {
        let f = FLOAT8_E4M3FN;
        assert_eq!(f.encode(464.0, &rne(), 0), 0x7e);
        assert_eq!(f.encode(465.0, &rne(), 0), 0x7f);
        assert_eq!(f.encode(-1e9, &rne(), 0), 0xff);
        let mut sat = rne();
        sat.saturate = true;
        assert_eq!(f.encode(1e9, &sat, 0), 0x7e);
        assert_eq!(f.encode(f64::INFINITY, &sat, 0), 0x7e);
        assert_eq!(FLOAT8_E5M2.encode(1e9, &RoundOpts::new(Mode::TowardZero), 0), 0x7b);
        assert_eq!(FLOAT8_E5M2.encode(1e9, &RoundOpts::new(Mode::Up), 0), 0x7c);
        assert_eq!(FLOAT8_E5M2.encode(-1e9, &RoundOpts::new(Mode::Up), 0), 0xfb);
        assert_eq!(FLOAT8_E4M3FNUZ.encode(-0.0, &rne(), 0), 0);
        assert_eq!(FLOAT8_E4M3FNUZ.encode(f64::NAN, &rne(), 0), 0x80);
    }

    #[test]
    fn every_code_round_trips() {
        for f in [BFLOAT16, FLOAT16, FLOAT8_E5M2, FLOAT8_E4M3FN, FLOAT8_E4M3, FLOAT8_E4M3FNUZ, FLOAT8_E5M2FNUZ] {
            for c in 0..(1u64 << f.bits()) {
                let v = f.decode(c);
                let back = f.encode(v, &rne(), 0);
                if v.is_nan() {
                    assert!(f.is_nan_code(back));
                } else {
                    assert_eq!(back, c, "{f:?} code {c:#x}");
                }
            }
        }
        for p in [POSIT8, POSIT16, PositFormat::new(10, 0).unwrap(), PositFormat::new(12, 4).unwrap()] {
            for c in 0..(1u64 << p.bits()) {
                let v = p.decode(c);
                assert_eq!(p.encode(v, &rne(), 0), c, "{p:?} code {c:#x} value {v}");
            }
        }
    }

    #[test]
    fn posit_facts() {
        assert_eq!(POSIT8.max_value(), 2f64.powi(24));
        assert_eq!(POSIT16.max_value(), 2f64.powi(56));
        assert_eq!(POSIT32.max_value(), 2f64.powi(120));
        assert_eq!(POSIT32.min_value(), 2f64.powi(-120));
        assert_eq!(POSIT16.encode(1.0, &rne(), 0), 0x4000);
        assert_eq!(POSIT16.encode(-1.0, &rne(), 0), 0xc000);
        assert_eq!(POSIT8.encode(1e-30, &rne(), 0), 1);
        assert_eq!(POSIT8.encode(1e30, &rne(), 0), 0x7f);
        assert_eq!(POSIT8.encode(f64::NAN, &rne(), 0), 0x80);
        assert!(POSIT8.decode(0x80).is_nan());
        let mut sat = rne();
        sat.saturate = true;
        assert_eq!(POSIT8.encode(f64::INFINITY, &sat, 0), 0x7f);
        assert_eq!(POSIT8.encode(f64::NEG_INFINITY, &sat, 0), 0x81);
        assert_eq!(POSIT8.encode(f64::NAN, &sat, 0), 0x80);
        assert_eq!(POSIT8.encode(f64::INFINITY, &rne(), 0), 0x80);
        // <2, es> is {0, 1, NaR, -1}: 1 is maxpos, eps is the gap below it.
        assert_eq!(PositFormat::new(2, 0).unwrap().eps(), 1.0);
        assert_eq!(PositFormat::new(3, 0).unwrap().eps(), 1.0);
        assert_eq!(POSIT16.eps(), 2f64.powi(-11));
    }

    #[test]
    fn ties_to_even_code_without_mantissa() {
        // E4M0 (fn): 12 is the tie between 8 (code 0x0a) and 16 (code 0x0b): even code -> 8.
        let f = FloatFormat::new(4, 0, None, true, NanPolicy::Fn, true).unwrap();
        assert_eq!(f.decode(f.encode(12.0, &rne(), 0)), 8.0);
        assert_eq!(f.decode(f.encode(24.0, &rne(), 0)), 32.0);
        assert_eq!(f.decode(f.encode(12.0, &RoundOpts::new(Mode::Odd), 0)), 16.0);
        assert_eq!(f.decode(f.encode(-12.0, &RoundOpts::new(Mode::NearestAway), 0)), -16.0);
    }

    #[test]
    fn ieee_without_mantissa_has_no_nan() {
        let f = FloatFormat::new(3, 0, None, true, NanPolicy::Ieee, true).unwrap();
        assert!(!f.has_nan());
        assert!(!Format::Float(f).has_nan());
        assert_eq!(f.decode(f.encode(f64::INFINITY, &rne(), 0)), f64::INFINITY);
        assert!(!(0..16).any(|c| f.decode(c).is_nan()));
        let g = FloatFormat::new(3, 0, None, false, NanPolicy::Ieee, true).unwrap();
        assert!(g.has_nan() && g.decode(g.encode(f64::NAN, &rne(), 0)).is_nan());
    }

    #[test]
    fn int_rounding() {
        let i = INT8;
        assert_eq!(i.round_int(2.5, &rne(), 0), 2);
        assert_eq!(i.round_int(3.5, &rne(), 0), 4);
        assert_eq!(i.round_int(-2.5, &RoundOpts::new(Mode::NearestAway), 0), -3);
        assert_eq!(i.round_int(-2.5, &RoundOpts::new(Mode::Down), 0), -3);
        assert_eq!(i.round_int(1000.0, &rne(), 0), 127);
        assert_eq!(i.round_int(-1000.0, &rne(), 0), -128);
        assert_eq!(i.encode(-1.0, &rne(), 0), 0xff);
        assert_eq!(i.decode(0x80), -128.0);
    }

    #[test]
    fn validation() {
        assert!(FloatFormat::new(0, 3, None, true, NanPolicy::Ieee, true).is_err());
        assert!(FloatFormat::new(4, 60, None, true, NanPolicy::Ieee, true).is_err());
        assert!(FloatFormat::new(8, 3, Some(-2000), true, NanPolicy::Ieee, true).is_err());
        assert!(PositFormat::new(16, 5).is_err());
        assert!(PositFormat::new(33, 2).is_err());
        assert_eq!(FloatFormat::new(4, 3, None, true, NanPolicy::Fnuz, true).unwrap().bias, 8);
    }
}
