//! Fast paths for small IEEE-like float formats, and their plans.
//!
//! - f32 input: [`encode_lane`] / [`decode_lane`] are branch-free, select-only
//!   32-bit lanes. The baseline (SSE2) build autovectorizes them; on AVX2 the
//!   kernels of `avx2.rs` compute the same lanes with intrinsics (8 at a time),
//!   with cheaper special kernels where a plan allows ([`Kind`]).
//! - f64 input: [`encode_lane64`] / [`decode_lane64`], the same lanes in 64-bit
//!   arithmetic (correct rounding from f64, every mode and `rbits`), one body
//!   compiled for the baseline and for AVX2 (4 lanes, variable 64-bit shifts).
//! - Decoding of formats up to 16 bits: a cached table, or arithmetic.
//!
//! Each lane computes exactly what the reference engine computes; the
//! random bits come from the same counter-based generator, keyed by the
//! element index.

use std::any::TypeId;
use std::sync::{Arc, OnceLock};

use super::{Code, Isa, Real};
use crate::format::{FloatFormat, Format, NanPolicy};
use crate::round::{Mode, RoundOpts, Rng};
use crate::tables::TableCache;

/// Constants of one (format, options) pair, for the lane function.
#[derive(Clone, Copy, Debug)]
pub(super) struct Params {
    /// Mantissa bits of the target.
    pub(super) m: u32,
    /// 23 - m: how far an f32 mantissa shifts to the target's unit (normal range).
    pub(super) base_sh: i32,
    /// f32 biased exponent of the target's smallest normal (>= 1).
    pub(super) tmin_ef: i32,
    pub(super) max_code: u32,
    pub(super) sign_shift: u32,
    pub(super) mag_mask: u32,
    pub(super) fnuz: bool,
    /// [positive, negative] results for NaN, inf and overflowing finite inputs.
    pub(super) nan_p: u32,
    pub(super) nan_n: u32,
    pub(super) inf_p: u32,
    pub(super) inf_n: u32,
    pub(super) ovf_p: u32,
    pub(super) ovf_n: u32,
    /// The sign bit of a code.
    pub(super) sign_bit: u32,
    /// Sign mask applied to a zero magnitude (0 for fnuz, which has no -0).
    pub(super) zero_sign_mask: u32,
    pub(super) rbits: u32,
    pub(super) rng: Rng,
    // Decoding back to f32 (round path).
    pub(super) rebias: u32,
    pub(super) sub_scale: f32,
    /// Magnitude codes below this decode as subnormals by a multiply: 2^m,
    /// or 0 when the target's subnormals are f32's (bias 127), whose bits the
    /// normal formula already gives.
    pub(super) sub_below: u32,
    /// Magnitude code of inf (u32::MAX if none).
    pub(super) inf_mag: u32,
}

/// Which loop runs a plan on the AVX2 path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// The generic lane for any mode and format.
    Generic,
    /// bfloat16, nearest-even, no saturation: one add and a shift.
    Bf16Ne,
    /// bfloat16, stochastic, no saturation: add the complemented random bits, shift.
    Bf16Sr,
    /// Nearest-even into a format whose subnormals lie in f32's normal range
    /// and whose overflow value is also its infinity value (the fp8 family).
    Near,
    /// Stochastic into the same formats as `Near`: add-and-shift outside the
    /// subnormal range.
    StochShift,
    /// float16 without saturation in a mode the F16C instruction has
    /// (nearest-even, toward zero, up, down).
    F16c,
}

pub(super) struct EncodePlan {
    p: Params,
    mode: Mode,
    path: Isa,
    kind: Kind,
    /// Streaming (non-temporal) stores on the AVX2 path.
    pub(super) nt: bool,
}

pub(super) const NE: u8 = 0;
pub(super) const NA: u8 = 1;
pub(super) const RZ: u8 = 2;
pub(super) const UP: u8 = 3;
pub(super) const DN: u8 = 4;
pub(super) const ODD: u8 = 5;
pub(super) const SR: u8 = 6;

impl Params {
    /// The constants of the fast lanes, when they apply: a float format with
    /// subnormals, at most 22 mantissa bits and a normal range inside f32's.
    pub(super) fn new(f: &FloatFormat, opts: &RoundOpts) -> Option<Params> {
        let tmin_ef = f.emin() + 127;
        // (Smallest normal inside f32's normal range: a larger f32 exponent field
        // would overflow the kernels' shifted limits.)
        if !f.subnormals || f.man_bits > 22 || f.bits() > 32 || !(1..=254).contains(&tmin_ef) {
            return None;
        }
        let ovf = |neg: bool| {
            if opts.saturate || !opts.mode.overflows_to_inf(neg) {
                f.apply_sign(f.max_code(), neg)
            } else {
                f.inf_code(neg)
            }
        };
        let inf = |neg: bool| if opts.saturate { f.apply_sign(f.max_code(), neg) } else { f.inf_code(neg) };
        let inf_mag = if f.inf { (f.inf_code(false) & f.mag_mask()) as u32 } else { u32::MAX };
        Some(Params {
            m: f.man_bits,
            base_sh: 23 - f.man_bits as i32,
            tmin_ef,
            max_code: f.max_code() as u32,
            sign_shift: f.exp_bits + f.man_bits,
            mag_mask: f.mag_mask() as u32,
            fnuz: f.nan == NanPolicy::Fnuz,
            nan_p: f.nan_code(false) as u32,
            nan_n: f.nan_code(true) as u32,
            inf_p: inf(false) as u32,
            inf_n: inf(true) as u32,
            ovf_p: ovf(false) as u32,
            ovf_n: ovf(true) as u32,
            sign_bit: f.sign_bit() as u32,
            zero_sign_mask: if f.nan == NanPolicy::Fnuz { 0 } else { u32::MAX },
            rbits: opts.rbits,
            rng: Rng::new(opts.key),
            rebias: ((127 - f.bias) as u32) << 23,
            sub_scale: crate::format::ldexp(1.0, f.emin() - f.man_bits as i32) as f32,
            sub_below: if tmin_ef == 1 { 0 } else { 1 << f.man_bits },
            inf_mag,
        })
    }
}

/// Decoding plan of a format on the AVX2 path, into f32.
pub(super) enum DecodePlan {
    /// bfloat16: a shift.
    Bf16,
    /// float16: F16C.
    F16,
    /// Any format of the fast lanes whose values are all f32 values: arithmetic.
    Lanes(Params),
}

impl DecodePlan {
    pub(super) fn new(fmt: &Format) -> Option<DecodePlan> {
        let Format::Float(f) = fmt else { return None };
        if *f == crate::format::named::BFLOAT16 {
            return Some(DecodePlan::Bf16);
        }
        if *f == crate::format::named::FLOAT16 {
            return Some(DecodePlan::F16);
        }
        if !fmt.fits_f32() || f.bits() > 16 {
            return None;
        }
        Params::new(f, &RoundOpts::new(Mode::NearestEven)).map(DecodePlan::Lanes)
    }
}

impl EncodePlan {
    /// A plan when the fast path applies: f32 input, a float format with
    /// subnormals, at most 22 mantissa bits and a normal range inside f32's.
    pub(super) fn new<S: Real>(fmt: &Format, opts: &RoundOpts, path: Isa) -> Option<Self> {
        if path == Isa::Scalar || TypeId::of::<S>() != TypeId::of::<f32>() {
            return None;
        }
        let Format::Float(f) = fmt else { return None };
        // Without mantissa bits a code's parity is its exponent's, which the
        // lanes do not track: such formats take the reference engine.
        if f.man_bits == 0 || (opts.mode == Mode::Stochastic && opts.rbits > 32) {
            return None;
        }
        let p = Params::new(f, opts)?;
        let plain = !opts.saturate;
        let kind = if plain && opts.mode == Mode::NearestEven && *f == crate::format::named::BFLOAT16 {
            Kind::Bf16Ne
        } else if plain && opts.mode == Mode::Stochastic && *f == crate::format::named::BFLOAT16 {
            Kind::Bf16Sr
        } else if plain
            && *f == crate::format::named::FLOAT16
            && matches!(opts.mode, Mode::NearestEven | Mode::TowardZero | Mode::Up | Mode::Down)
        {
            Kind::F16c
        } else if opts.mode == Mode::NearestEven && near_applies(f, &p) {
            Kind::Near
        } else if opts.mode == Mode::Stochastic && near_applies(f, &p) {
            Kind::StochShift
        } else {
            Kind::Generic
        };
        Some(EncodePlan { p, mode: opts.mode, path, kind, nt: false })
    }

    /// The loop this plan runs on the AVX2 path.
    #[cfg(test)]
    pub(super) fn kind(&self) -> Kind {
        self.kind
    }

    pub(super) fn run<C: Code>(&self, src: &[f32], dst: &mut [C], i0: u64) {
        for_index_blocks(src.len(), i0, |a, b, i| {
            let (s, d) = (&src[a..b], &mut dst[a..b]);
            match self.path {
                // SAFETY: Avx2 is only chosen when the CPU has AVX2, FMA and F16C.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { super::avx2::encode(&self.p, self.mode, self.kind, s, d, i, self.nt) },
                _ => encode_dispatch(&self.p, self.mode, s, d, i),
            }
        });
    }

    pub(super) fn run_round(&self, src: &[f32], dst: &mut [f32], i0: u64) {
        for_index_blocks(src.len(), i0, |a, b, i| {
            let (s, d) = (&src[a..b], &mut dst[a..b]);
            match self.path {
                // SAFETY: Avx2 is only chosen when the CPU has AVX2, FMA and F16C.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { super::avx2::round(&self.p, self.mode, self.kind, s, d, i, self.nt) },
                _ => round_dispatch(&self.p, self.mode, s, d, i),
            }
        });
    }
}

/// Can [`Kind::Near`] encode into `f` (nearest-even)? Its subnormal scale
/// 2^(m - emin) must be a normal f32, its subnormal range inside f32's normal
/// range, and an infinite input, which it treats as an overflow, must encode
/// as overflows do.
fn near_applies(f: &FloatFormat, p: &Params) -> bool {
    let scale_exp = p.m as i32 + 127 - p.tmin_ef;
    let inf_code = ((256 - p.tmin_ef) as u64) << p.m;
    p.tmin_ef >= 2 && (-126..=127).contains(&scale_exp) && inf_code > f.max_code() && p.inf_p == p.ovf_p && p.inf_n == p.ovf_n
}

/// Split `[i0, i0 + len)` where the upper 32 bits of the index change, so
/// the loops can hoist the generator's high word.
fn for_index_blocks(len: usize, i0: u64, mut f: impl FnMut(usize, usize, u64)) {
    let mut a = 0usize;
    while a < len {
        let i = i0 + a as u64;
        let room = (1u64 << 32) - (i & 0xffff_ffff);
        let b = (a as u64 + room).min(len as u64) as usize;
        f(a, b, i);
        a = b;
    }
}

macro_rules! by_mode {
    ($mode:expr, $f:ident::<$($t:ty,)?>($($arg:expr),*)) => {
        match $mode {
            Mode::NearestEven => $f::<$($t,)? NE>($($arg),*),
            Mode::NearestAway => $f::<$($t,)? NA>($($arg),*),
            Mode::TowardZero => $f::<$($t,)? RZ>($($arg),*),
            Mode::Up => $f::<$($t,)? UP>($($arg),*),
            Mode::Down => $f::<$($t,)? DN>($($arg),*),
            Mode::Odd => $f::<$($t,)? ODD>($($arg),*),
            Mode::Stochastic => $f::<$($t,)? SR>($($arg),*),
        }
    };
}

#[inline(always)]
fn encode_dispatch<C: Code>(p: &Params, mode: Mode, src: &[f32], dst: &mut [C], i0: u64) {
    by_mode!(mode, encode_loop::<C,>(p, src, dst, i0))
}

#[inline(always)]
fn round_dispatch(p: &Params, mode: Mode, src: &[f32], dst: &mut [f32], i0: u64) {
    by_mode!(mode, round_loop::<>(p, src, dst, i0))
}

#[inline(always)]
fn encode_loop<C: Code, const MODE: u8>(p: &Params, src: &[f32], dst: &mut [C], i0: u64) {
    let hi = p.rng.hi_word(i0);
    let lo0 = i0 as u32;
    for (j, (x, y)) in src.iter().zip(dst.iter_mut()).enumerate() {
        let rand = if MODE == SR { p.rng.word0(lo0.wrapping_add(j as u32), hi) } else { 0 };
        *y = C::from_u32(encode_lane::<MODE>(p, x.to_bits(), rand));
    }
}

#[inline(always)]
fn round_loop<const MODE: u8>(p: &Params, src: &[f32], dst: &mut [f32], i0: u64) {
    let hi = p.rng.hi_word(i0);
    let lo0 = i0 as u32;
    for (j, (x, y)) in src.iter().zip(dst.iter_mut()).enumerate() {
        let rand = if MODE == SR { p.rng.word0(lo0.wrapping_add(j as u32), hi) } else { 0 };
        *y = f32::from_bits(decode_lane(p, encode_lane::<MODE>(p, x.to_bits(), rand)));
    }
}

const HALF: u32 = 1 << 31;

/// One f32 (as bits) to one code of the target; `rand` is the element's
/// 32-bit random word (stochastic mode only). Written with 32-bit integer
/// operations and selects only, so it vectorizes lane by lane.
#[inline(always)]
pub(super) fn encode_lane<const MODE: u8>(p: &Params, x: u32, rand: u32) -> u32 {
    // All ones when the sign bit is set (arithmetic shift copies it).
    let neg_m = ((x as i32) >> 31) as u32;
    let a = x & 0x7fff_ffff;
    let ef = (a >> 23) as i32;
    // f32 subnormals have exponent field 0 but scale like field 1, without the hidden bit.
    let ef1 = ef.max(1);
    let mant = (a & 0x7f_ffff) | if ef != 0 { 0x80_0000 } else { 0 };
    // Bits of mant below the target's unit: more when the result is subnormal.
    let sh = (p.base_sh + (p.tmin_ef - ef1).max(0)) as u32;
    let k = mant >> sh.min(31);
    // The remainder as a fraction of one unit in 32 bits (truncated beyond).
    let frac = if sh <= 32 { mant << (32u32.wrapping_sub(sh) & 31) } else { mant >> (sh - 32).min(31) };
    let inexact = if sh < 32 { frac != 0 } else { mant != 0 };
    let k_odd = k & 1 == 1;
    let neg = neg_m != 0;
    let up = match MODE {
        NE => frac > HALF || (frac == HALF && k_odd),
        NA => frac >= HALF,
        RZ => false,
        UP => inexact && !neg,
        DN => inexact && neg,
        ODD => inexact && !k_odd,
        _ => (rand >> (32 - p.rbits)) < (frac >> (32 - p.rbits)),
    };
    // Exponent steps above the target's smallest normal, in units of 2^m codes.
    let base = ((ef1 - p.tmin_ef).max(0) as u32) << p.m;
    let code = base + k + up as u32;
    // Sign-dependent constants: pick the negative one where neg_m is all ones.
    let pick = |pos: u32, negv: u32| pos ^ (neg_m & (pos ^ negv));
    let signed = code | (neg_m & p.sign_bit & if code == 0 { p.zero_sign_mask } else { u32::MAX });
    if a > 0x7f80_0000 {
        pick(p.nan_p, p.nan_n)
    } else if a == 0x7f80_0000 {
        pick(p.inf_p, p.inf_n)
    } else if code > p.max_code {
        pick(p.ovf_p, p.ovf_n)
    } else {
        signed
    }
}

/// A code of the target back to f32 bits (the format fits in f32 here).
#[inline(always)]
pub(super) fn decode_lane(p: &Params, code: u32) -> u32 {
    let sign = (code >> p.sign_shift) & 1;
    let mag = code & p.mag_mask;
    let normal = (mag << (23 - p.m)).wrapping_add(p.rebias);
    // Subnormal codes: the integer times the unit (exact). Other lanes multiply
    // 0, so no lane makes an f32 subnormal it does not need (those are slow).
    let is_sub = mag < p.sub_below;
    let sub = (((if is_sub { mag } else { 0 }) as f32) * p.sub_scale).to_bits();
    let fin = if is_sub { sub } else { normal };
    let bits = if p.fnuz && code == 1 << p.sign_shift {
        0x7fc0_0000
    } else if mag > p.max_code {
        if mag == p.inf_mag {
            0x7f80_0000
        } else {
            0x7fc0_0000
        }
    } else {
        fin
    };
    bits | (sign << 31)
}

/// Decoding table of a format of at most 16 bits, shared across calls (the
/// recent ones kept, within [`crate::tables::LIMIT`] bytes).
pub(super) fn decode_table<D: Real>(fmt: &Format) -> Arc<Vec<D>> {
    static CACHE: OnceLock<TableCache<(Format, TypeId)>> = OnceLock::new();
    let n = 1usize << fmt.bits();
    CACHE.get_or_init(Default::default).get((*fmt, TypeId::of::<D>()), || (0..n as u64).map(|c| D::from_f64(fmt.decode(c))).collect())
}

pub(super) fn decode_lut<C: Code, D: Real>(lut: &[D], src: &[C], dst: &mut [D], path: Isa) {
    let mask = lut.len() - 1;
    match path {
        // SAFETY: Avx2 is only chosen when the CPU has AVX2.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { lut_avx2(lut, mask, src, dst) },
        _ => lut_body(lut, mask, src, dst),
    }
}

/// bf16 is the top half of an f32: decoding is a shift.
#[inline(always)]
pub(super) fn decode_bf16<C: Code>(src: &[C], dst: &mut [f32]) {
    for (c, y) in src.iter().zip(dst.iter_mut()) {
        let b = (c.to_u64() as u32) << 16;
        // NaN becomes the quiet NaN of its sign without payload, as the reference decodes it.
        *y = f32::from_bits(if b & 0x7fff_ffff > 0x7f80_0000 { (b & 0x8000_0000) | 0x7fc0_0000 } else { b });
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn lut_avx2<C: Code, D: Real>(lut: &[D], mask: usize, src: &[C], dst: &mut [D]) {
    lut_body(lut, mask, src, dst)
}

#[inline(always)]
fn lut_body<C: Code, D: Real>(lut: &[D], mask: usize, src: &[C], dst: &mut [D]) {
    for (c, y) in src.iter().zip(dst.iter_mut()) {
        *y = lut[c.to_u64() as usize & mask];
    }
}

/// Constants of the f64-input lanes (one format, one set of options).
#[derive(Clone, Copy, Debug)]
pub(super) struct Params64 {
    m: u32,
    /// 52 - m: how far an f64 mantissa shifts to the target's unit (normal range).
    base_sh: i64,
    /// f64 biased exponent of the target's smallest normal (>= 1).
    tmin_ef: i64,
    /// tmin_ef + base_sh.
    tmin_sh: i64,
    max_code: u64,
    sign_shift: u32,
    sign_bit: u64,
    mag_mask: u64,
    fnuz: bool,
    nan_p: u64,
    nan_n: u64,
    inf_p: u64,
    inf_n: u64,
    ovf_p: u64,
    ovf_n: u64,
    rbits: u32,
    rng: Rng,
    /// The generator's high word is its low word under the keys (a1, b1).
    rng1: Rng,
    rebias: u64,
    sub_scale: f64,
    inf_mag: u64,
}

/// The fast path for f64 input: every mode and rbits, formats of at most 32
/// bits with subnormals. Correct rounding from f64 (never through f32).
pub(super) struct EncodePlan64 {
    p: Params64,
    mode: Mode,
    path: Isa,
}

impl EncodePlan64 {
    pub(super) fn new<S: Real>(fmt: &Format, opts: &RoundOpts, path: Isa) -> Option<Self> {
        if path == Isa::Scalar || TypeId::of::<S>() != TypeId::of::<f64>() {
            return None;
        }
        let Format::Float(f) = fmt else { return None };
        let tmin_ef = (f.emin() + 1023) as i64;
        // man_bits == 0: a code's parity is its exponent's (see EncodePlan::new).
        if !f.subnormals || f.man_bits == 0 || f.man_bits > 51 || f.bits() > 32 || tmin_ef < 1 {
            return None;
        }
        let ovf = |neg: bool| {
            if opts.saturate || !opts.mode.overflows_to_inf(neg) {
                f.apply_sign(f.max_code(), neg)
            } else {
                f.inf_code(neg)
            }
        };
        let inf = |neg: bool| if opts.saturate { f.apply_sign(f.max_code(), neg) } else { f.inf_code(neg) };
        let base_sh = 52 - f.man_bits as i64;
        let p = Params64 {
            m: f.man_bits,
            base_sh,
            tmin_ef,
            tmin_sh: tmin_ef + base_sh,
            max_code: f.max_code(),
            sign_shift: f.exp_bits + f.man_bits,
            sign_bit: f.sign_bit(),
            mag_mask: f.mag_mask(),
            fnuz: f.nan == NanPolicy::Fnuz,
            nan_p: f.nan_code(false),
            nan_n: f.nan_code(true),
            inf_p: inf(false),
            inf_n: inf(true),
            ovf_p: ovf(false),
            ovf_n: ovf(true),
            rbits: opts.rbits,
            rng: Rng::new(opts.key),
            rng1: Rng::new(crate::round::SeedKey { a0: opts.key.a1, b0: opts.key.b1, ..opts.key }),
            rebias: ((1023 - f.bias) as u64) << 52,
            sub_scale: crate::format::ldexp(1.0, f.emin() - f.man_bits as i32),
            inf_mag: if f.inf { f.inf_code(false) & f.mag_mask() } else { u64::MAX },
        };
        Some(EncodePlan64 { p, mode: opts.mode, path })
    }

    pub(super) fn run<C: Code>(&self, src: &[f64], dst: &mut [C], i0: u64) {
        for_index_blocks(src.len(), i0, |a, b, i| {
            let (s, d) = (&src[a..b], &mut dst[a..b]);
            match self.path {
                // SAFETY: Avx2 is only chosen when the CPU has AVX2, FMA and F16C.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { encode64_avx2(&self.p, self.mode, s, d, i) },
                _ => by_mode!(self.mode, encode64_loop::<C,>(&self.p, s, d, i)),
            }
        });
    }

    pub(super) fn run_round(&self, src: &[f64], dst: &mut [f64], i0: u64) {
        for_index_blocks(src.len(), i0, |a, b, i| {
            let (s, d) = (&src[a..b], &mut dst[a..b]);
            match self.path {
                // SAFETY: Avx2 is only chosen when the CPU has AVX2, FMA and F16C.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { round64_avx2(&self.p, self.mode, s, d, i) },
                _ => by_mode!(self.mode, round64_loop::<>(&self.p, s, d, i)),
            }
        });
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn encode64_avx2<C: Code>(p: &Params64, mode: Mode, src: &[f64], dst: &mut [C], i0: u64) {
    by_mode!(mode, encode64_loop::<C,>(p, src, dst, i0))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn round64_avx2(p: &Params64, mode: Mode, src: &[f64], dst: &mut [f64], i0: u64) {
    by_mode!(mode, round64_loop::<>(p, src, dst, i0))
}

/// `rbits` random bits of element (lo, hi): the generator's words, as
/// [`Rng::bits`] combines them.
#[inline(always)]
fn rand64(p: &Params64, lo: u32, hi: u32) -> u64 {
    let w0 = p.rng.word0(lo, hi);
    let w1 = p.rng1.word0(lo, hi);
    if p.rbits <= 32 {
        (w0 >> (32 - p.rbits)) as u64
    } else {
        (((w1 as u64) << 32) | w0 as u64) >> (64 - p.rbits)
    }
}

#[inline(always)]
fn encode64_loop<C: Code, const MODE: u8>(p: &Params64, src: &[f64], dst: &mut [C], i0: u64) {
    let hi = p.rng.hi_word(i0);
    let lo0 = i0 as u32;
    for (j, (x, y)) in src.iter().zip(dst.iter_mut()).enumerate() {
        let rand = if MODE == SR { rand64(p, lo0.wrapping_add(j as u32), hi) } else { 0 };
        *y = C::from_u32(encode_lane64::<MODE>(p, x.to_bits(), rand) as u32);
    }
}

#[inline(always)]
fn round64_loop<const MODE: u8>(p: &Params64, src: &[f64], dst: &mut [f64], i0: u64) {
    let hi = p.rng.hi_word(i0);
    let lo0 = i0 as u32;
    for (j, (x, y)) in src.iter().zip(dst.iter_mut()).enumerate() {
        let rand = if MODE == SR { rand64(p, lo0.wrapping_add(j as u32), hi) } else { 0 };
        *y = f64::from_bits(decode_lane64(p, encode_lane64::<MODE>(p, x.to_bits(), rand)));
    }
}

const HALF64: u64 = 1 << 63;

/// One f64 (as bits) to one code: [`encode_lane`] in 64-bit arithmetic.
/// The remainder keeps 64 bits; lower bits only matter as a sticky bit,
/// which no decision needs here (below 2^-64 of a unit the remainder is
/// under one half, and stochastic rounding reads at most 64 bits).
#[inline(always)]
pub(super) fn encode_lane64<const MODE: u8>(p: &Params64, x: u64, rand: u64) -> u64 {
    // All ones when the sign bit is set.
    let neg_m = ((x as i64) >> 63) as u64;
    let a = x & !HALF64;
    let ef = (a >> 52) as i64;
    // f64 subnormals scale like exponent field 1.
    let ef1 = ef.max(1);
    // Remove the exponent, keep the hidden bit (bit 52).
    let mant = a - (((ef1 - 1) as u64) << 52);
    // Bits of mant below the target's unit (>= 1).
    let sh = (p.tmin_sh - ef1).max(p.base_sh) as u64;
    let k = mant >> sh.min(63);
    // The remainder as a 64-bit fraction of one unit (truncated beyond).
    let frac = if sh <= 64 { mant << (64u64.wrapping_sub(sh) & 63) } else { mant >> (sh - 64).min(63) };
    // mant < 2^53: for sh >= 54, k is 0 and so is k << 63.
    let inexact = (k << sh.min(63)) != mant;
    let k_odd = k & 1 == 1;
    let neg = neg_m != 0;
    let up = match MODE {
        NE => frac > HALF64 || (frac == HALF64 && k_odd),
        NA => frac >= HALF64,
        RZ => false,
        UP => inexact && !neg,
        DN => inexact && neg,
        ODD => inexact && !k_odd,
        _ => rand < (frac >> (64 - p.rbits)),
    };
    let base = ((ef1 - p.tmin_ef).max(0) as u64) << p.m;
    let code = base + k + up as u64;
    // Sign-dependent constants: the negative one where neg_m is all ones.
    let pick = |pos: u64, negv: u64| pos ^ (neg_m & (pos ^ negv));
    let keep_sign = code != 0 || !p.fnuz;
    let signed = code | (neg_m & p.sign_bit & if keep_sign { u64::MAX } else { 0 });
    if a > 0x7ff0_0000_0000_0000 {
        pick(p.nan_p, p.nan_n)
    } else if a == 0x7ff0_0000_0000_0000 {
        pick(p.inf_p, p.inf_n)
    } else if code > p.max_code {
        pick(p.ovf_p, p.ovf_n)
    } else {
        signed
    }
}

/// A code back to f64 bits (exact: the format fits in f64).
#[inline(always)]
pub(super) fn decode_lane64(p: &Params64, code: u64) -> u64 {
    let sign = (code >> p.sign_shift) & 1;
    let mag = code & p.mag_mask;
    let normal = (mag << (52 - p.m)).wrapping_add(p.rebias);
    // mag < 2^m <= 2^51 as an f64, exactly: 2^52 + mag has mag as its mantissa.
    let magf = f64::from_bits(0x4330_0000_0000_0000 | mag) - 4_503_599_627_370_496.0;
    let sub = (magf * p.sub_scale).to_bits();
    let fin = if mag >> p.m == 0 { sub } else { normal };
    let bits = if p.fnuz && code == p.sign_bit {
        0x7ff8_0000_0000_0000
    } else if mag > p.max_code {
        if mag == p.inf_mag {
            0x7ff0_0000_0000_0000
        } else {
            0x7ff8_0000_0000_0000
        }
    } else {
        fin
    };
    bits | (sign << 63)
}

/// Constants of the posit lanes (f32 input).
#[derive(Clone, Copy, Debug)]
pub(super) struct PositParams {
    n: u32,
    es: u32,
    maxscale: i32,
    max_code: u64,
    mask: u64,
    nar: u64,
    /// Saturating: infinities become maxpos of their sign instead of NaR.
    sat: bool,
    rbits: u32,
    rng: Rng,
    /// The generator's high word is its low word under the keys (a1, b1).
    rng1: Rng,
}

/// The fast path for f32 input into posits whose range lies inside f32's
/// normal range (max scale below 126: every f32 subnormal rounds to minpos,
/// so no lane needs normalizing). Every mode and rbits.
pub(super) struct PositPlan {
    p: PositParams,
    mode: Mode,
    path: Isa,
}

impl PositPlan {
    pub(super) fn new<S: Real>(fmt: &Format, opts: &RoundOpts, path: Isa) -> Option<Self> {
        if path == Isa::Scalar || TypeId::of::<S>() != TypeId::of::<f32>() {
            return None;
        }
        let Format::Posit(f) = fmt else { return None };
        if f.max_scale() >= 126 {
            return None;
        }
        let p = PositParams {
            n: f.nbits,
            es: f.es,
            maxscale: f.max_scale(),
            max_code: f.max_code(),
            mask: (1u64 << f.nbits) - 1,
            nar: f.nar(),
            sat: opts.saturate,
            rbits: opts.rbits,
            rng: Rng::new(opts.key),
            rng1: Rng::new(crate::round::SeedKey { a0: opts.key.a1, b0: opts.key.b1, ..opts.key }),
        };
        Some(PositPlan { p, mode: opts.mode, path })
    }

    pub(super) fn run<C: Code>(&self, src: &[f32], dst: &mut [C], i0: u64) {
        for_index_blocks(src.len(), i0, |a, b, i| {
            let (s, d) = (&src[a..b], &mut dst[a..b]);
            match self.path {
                // SAFETY: Avx2 is only chosen when the CPU has AVX2, FMA and F16C.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { posit_avx2(&self.p, self.mode, s, d, i) },
                _ => by_mode!(self.mode, posit_loop::<C,>(&self.p, s, d, i)),
            }
        });
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn posit_avx2<C: Code>(p: &PositParams, mode: Mode, src: &[f32], dst: &mut [C], i0: u64) {
    by_mode!(mode, posit_loop::<C,>(p, src, dst, i0))
}

#[inline(always)]
fn posit_loop<C: Code, const MODE: u8>(p: &PositParams, src: &[f32], dst: &mut [C], i0: u64) {
    let hi = p.rng.hi_word(i0);
    let lo0 = i0 as u32;
    for (j, (x, y)) in src.iter().zip(dst.iter_mut()).enumerate() {
        let rand = if MODE == SR {
            let lo = lo0.wrapping_add(j as u32);
            let w0 = p.rng.word0(lo, hi);
            let w1 = p.rng1.word0(lo, hi);
            // The generator's bits: the top of word0, or word1:word0 beyond 32 bits.
            if p.rbits <= 32 {
                (w0 >> (32 - p.rbits)) as u64
            } else {
                (((w1 as u64) << 32) | w0 as u64) >> (64 - p.rbits)
            }
        } else {
            0
        };
        *y = C::from_u32(posit_lane::<MODE>(p, x.to_bits(), rand) as u32);
    }
}

/// One f32 (as bits) to one posit code, as the reference engine rounds it:
/// build regime | exponent | fraction as one bit string, cut it to n - 1
/// bits, decide on the cut bits. Shift counts are masked so that lanes out
/// of range compute garbage that the final selects discard.
#[inline(always)]
pub(super) fn posit_lane<const MODE: u8>(p: &PositParams, x: u32, rand: u64) -> u64 {
    let neg = x >> 31 != 0;
    let a = x & 0x7fff_ffff;
    let e_a = (a >> 23) as i32 - 127;
    let frac = (a & 0x7f_ffff) as u64;
    // Regime k (floor division by 2^es) and the exponent bits below it.
    let k = e_a >> p.es;
    let e = (e_a - (k << p.es)) as u64;
    // k >= 0: k + 1 ones then a zero; k < 0: -k zeros then a one.
    let reg = if k >= 0 { ((1u64 << ((k + 1) & 63) as u32) - 1) << 1 } else { 1 };
    let reglen = if k >= 0 { k + 2 } else { 1 - k } as u32;
    let s = (((reg << p.es) | e) << 23) | frac;
    let len = reglen + p.es + 23;
    let keep = p.n - 1;
    let cut = len.wrapping_sub(keep);
    // The kept bits, and the cut bits as a 64-bit fraction (cut < 64 in range).
    let (kc, fr) = if len <= keep { (s << ((keep - len) & 63), 0) } else { (s >> (cut & 63), s << (64u32.wrapping_sub(cut) & 63)) };
    let inexact = fr != 0;
    let k_odd = kc & 1 == 1;
    let up = match MODE {
        NE => fr > HALF64 || (fr == HALF64 && k_odd),
        NA => fr >= HALF64,
        RZ => false,
        UP => inexact && !neg,
        DN => inexact && neg,
        ODD => inexact && !k_odd,
        // (Exponent bits cut: the neighbours' distances, as the reference decides.)
        // (Only lanes in range: the others' bits are garbage, discarded below.)
        _ if len > keep && cut > 23 && kc >= 1 && kc < p.max_code && (-p.maxscale..p.maxscale).contains(&e_a) && a != 0 => {
            crate::format::PositFormat { nbits: p.n, es: p.es }
                .stochastic_up(kc, frac | 1 << 23, e_a, 23, rand, p.rbits)
        }
        _ => rand < (fr >> (64 - p.rbits)),
    };
    let mag = (kc + up as u64).clamp(1, p.max_code);
    // Beyond maxpos: maxpos; below minpos (f32 subnormals included): minpos.
    let mag = if e_a >= p.maxscale {
        p.max_code
    } else if e_a < -p.maxscale {
        1
    } else {
        mag
    };
    // Negative: two's complement of the magnitude.
    let code = if neg { mag.wrapping_neg() & p.mask } else { mag };
    // (An infinity's lane holds maxpos of its sign, e_a being past maxscale.)
    if a > 0x7f80_0000 || a == 0x7f80_0000 && !p.sat {
        p.nar
    } else if a == 0 {
        0
    } else {
        code
    }
}
