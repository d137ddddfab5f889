//! Fast paths: f32 into small IEEE-like formats, branch-free, one body
//! compiled twice (baseline and AVX2+FMA+F16C; the AVX2 build vectorizes to
//! 8 lanes with variable shifts), and table-driven decoding.
//!
//! Each lane computes exactly what the reference engine computes; the
//! random bits come from the same counter-based generator.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::{Code, Isa, Real};
use crate::format::{FloatFormat, Format, NanPolicy};
use crate::round::{Mode, RoundOpts, Rng};

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
    /// float16 without saturation in a mode the F16C instruction has
    /// (nearest-even, toward zero, up, down).
    F16c,
}

pub(super) struct EncodePlan {
    p: Params,
    mode: Mode,
    path: Isa,
    kind: Kind,
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
        if !f.subnormals || f.man_bits > 22 || f.bits() > 32 || tmin_ef < 1 {
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
        if opts.mode == Mode::Stochastic && opts.rbits > 32 {
            return None;
        }
        let p = Params::new(f, opts)?;
        let plain = !opts.saturate;
        let kind = if plain && opts.mode == Mode::NearestEven && *f == crate::format::named::BFLOAT16 {
            Kind::Bf16Ne
        } else if plain
            && *f == crate::format::named::FLOAT16
            && matches!(opts.mode, Mode::NearestEven | Mode::TowardZero | Mode::Up | Mode::Down)
        {
            Kind::F16c
        } else {
            Kind::Generic
        };
        Some(EncodePlan { p, mode: opts.mode, path, kind })
    }

    pub(super) fn run<C: Code>(&self, src: &[f32], dst: &mut [C], i0: u64) {
        for_index_blocks(src.len(), i0, |a, b, i| {
            let (s, d) = (&src[a..b], &mut dst[a..b]);
            match self.path {
                // SAFETY: Avx2 is only chosen when the CPU has AVX2, FMA and F16C.
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => unsafe { super::avx2::encode(&self.p, self.mode, self.kind, s, d, i) },
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
                Isa::Avx2 => unsafe { super::avx2::round(&self.p, self.mode, s, d, i) },
                _ => round_dispatch(&self.p, self.mode, s, d, i),
            }
        });
    }
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
    let sub = ((mag as f32) * p.sub_scale).to_bits();
    let fin = if mag >> p.m == 0 { sub } else { normal };
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

/// Decoding table of a format of at most 16 bits, shared across calls.
pub(super) fn decode_table<D: Real>(fmt: &Format) -> Arc<Vec<D>> {
    type Cache = Mutex<HashMap<(Format, TypeId), Arc<dyn Any + Send + Sync>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (*fmt, TypeId::of::<D>());
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        if let Ok(t) = t.clone().downcast::<Vec<D>>() {
            return t;
        }
    }
    let n = 1usize << fmt.bits();
    let t: Arc<Vec<D>> = Arc::new((0..n as u64).map(|c| D::from_f64(fmt.decode(c))).collect());
    cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, t.clone());
    t
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
