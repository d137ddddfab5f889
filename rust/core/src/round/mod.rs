//! Rounding modes, the shared "round the magnitude up?" decision, and the
//! counter-based random generator behind stochastic rounding.
//!
//! Every format (float, posit, int) reduces rounding to the same question: the
//! exact value lies between the truncated code `k` and `k + 1`, with a
//! remainder that is a fraction of one unit; should the result be `k + 1`?
//! [`round_up`] answers it once for all formats.

mod rng;

pub use rng::{Rng, SeedKey, StepRand};
#[cfg(target_arch = "x86_64")]
pub(crate) use rng::{mix32_x8, weyl_x8};

use std::fmt;
use std::str::FromStr;

/// The rounding modes of lowp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// To nearest, ties to even (IEEE default).
    NearestEven,
    /// To nearest, ties away from zero.
    NearestAway,
    /// Toward zero (truncation).
    TowardZero,
    /// Toward +infinity.
    Up,
    /// Toward -infinity.
    Down,
    /// To odd ("jamming"): an inexact result takes whichever neighbour has an odd code.
    Odd,
    /// Stochastic: up with probability equal to the remainder's share of one unit.
    Stochastic,
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::NearestEven,
        Mode::NearestAway,
        Mode::TowardZero,
        Mode::Up,
        Mode::Down,
        Mode::Odd,
        Mode::Stochastic,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::NearestEven => "nearest_even",
            Mode::NearestAway => "nearest_away",
            Mode::TowardZero => "toward_zero",
            Mode::Up => "up",
            Mode::Down => "down",
            Mode::Odd => "odd",
            Mode::Stochastic => "stochastic",
        }
    }

    /// What an out-of-range finite value becomes: `true` means the format's
    /// overflow value (inf, or NaN when there is no inf), `false` means the
    /// largest finite value of the same sign.
    #[inline(always)]
    pub fn overflows_to_inf(self, negative: bool) -> bool {
        match self {
            Mode::NearestEven | Mode::NearestAway | Mode::Stochastic => true,
            Mode::TowardZero | Mode::Odd => false,
            Mode::Up => !negative,
            Mode::Down => negative,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Mode::ALL.iter().copied().find(|m| m.name() == s).ok_or_else(|| {
            crate::Error::value(format!(
                "rounding: unknown mode {s:?}; accepted: {}",
                Mode::ALL.map(|m| format!("{:?}", m.name())).join(", ")
            ))
        })
    }
}

/// Options of one rounding call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundOpts {
    pub mode: Mode,
    /// Out-of-range values (and infinities) become the largest finite value.
    pub saturate: bool,
    /// Random bits per stochastic decision, 1..=64.
    pub rbits: u32,
    /// Key of the random stream (stochastic mode only).
    pub key: SeedKey,
}

impl RoundOpts {
    pub fn new(mode: Mode) -> Self {
        RoundOpts { mode, saturate: false, rbits: 64, key: SeedKey::default() }
    }
}

/// The remainder of an inexact value, as a 64-bit binary fraction of one unit
/// in the last place, plus a sticky bit for anything below 2^-64 of a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rem {
    pub frac: u64,
    pub sticky: bool,
}

impl Rem {
    pub const ZERO: Rem = Rem { frac: 0, sticky: false };

    /// The low `s` bits of `m` as a fraction of `2^s` (any `s >= 0`).
    #[inline(always)]
    pub fn low_bits(m: u128, s: u32) -> Rem {
        if s == 0 {
            return Rem::ZERO;
        }
        let r = if s >= 128 { m } else { m & ((1u128 << s) - 1) };
        if s <= 64 {
            // r < 2^s: align its top bit to bit 63.
            Rem { frac: (r << (64 - s)) as u64, sticky: false }
        } else {
            let cut = s - 64;
            let frac = if cut >= 128 { 0 } else { (r >> cut) as u64 };
            let lost = if cut >= 128 { r } else { r & ((1u128 << cut) - 1) };
            Rem { frac, sticky: lost != 0 }
        }
    }

    #[inline(always)]
    pub fn is_inexact(self) -> bool {
        self.frac != 0 || self.sticky
    }
}

const HALF: u64 = 1 << 63;

/// Should the magnitude `k` (truncated) become `k + 1`?
///
/// `negative` is the sign of the value; `k_odd` the parity of the truncated code;
/// `rand` holds `rbits` uniformly random bits (stochastic mode only).
#[inline(always)]
pub fn round_up(mode: Mode, negative: bool, k_odd: bool, rem: Rem, rand: u64, rbits: u32) -> bool {
    match mode {
        Mode::NearestEven => rem.frac > HALF || (rem.frac == HALF && (rem.sticky || k_odd)),
        Mode::NearestAway => rem.frac >= HALF,
        Mode::TowardZero => false,
        Mode::Up => !negative && rem.is_inexact(),
        Mode::Down => negative && rem.is_inexact(),
        Mode::Odd => !k_odd && rem.is_inexact(),
        // The top `rbits` bits of the remainder, against as many random bits:
        // P(up) = floor(frac * 2^rbits) / 2^rbits, exact when the remainder has
        // no more than `rbits` significant bits.
        Mode::Stochastic => rand < (rem.frac >> (64 - rbits)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_modes() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
        }
        assert!("nearest".parse::<Mode>().is_err());
    }

    #[test]
    fn rem_alignment() {
        assert_eq!(Rem::low_bits(0b11, 2), Rem { frac: 3 << 62, sticky: false });
        assert_eq!(Rem::low_bits(1, 100), Rem { frac: 0, sticky: true });
        assert_eq!(Rem::low_bits(1 << 36, 100), Rem { frac: 1, sticky: false });
        assert_eq!(Rem::low_bits(5, 0), Rem::ZERO);
    }

    #[test]
    fn decisions() {
        let half = Rem { frac: HALF, sticky: false };
        assert!(!round_up(Mode::NearestEven, false, false, half, 0, 64));
        assert!(round_up(Mode::NearestEven, false, true, half, 0, 64));
        assert!(round_up(Mode::NearestEven, false, false, Rem { frac: HALF, sticky: true }, 0, 64));
        assert!(round_up(Mode::NearestAway, false, false, half, 0, 64));
        assert!(round_up(Mode::Up, false, false, Rem { frac: 0, sticky: true }, 0, 64));
        assert!(!round_up(Mode::Up, true, false, half, 0, 64));
        assert!(round_up(Mode::Down, true, false, half, 0, 64));
        assert!(round_up(Mode::Odd, false, false, half, 0, 64));
        assert!(!round_up(Mode::Odd, false, true, half, 0, 64));
        assert!(!round_up(Mode::Odd, false, false, Rem::ZERO, 0, 64));
        // Stochastic with 1 bit: remainder 1/2 -> up iff the bit is 0.
        assert!(round_up(Mode::Stochastic, false, false, half, 0, 1));
        assert!(!round_up(Mode::Stochastic, false, false, half, 1, 1));
    }
}
