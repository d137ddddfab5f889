#![allow(clippy::needless_range_loop)] // index loops over parallel buffers read clearer here
//! Casts between the lowp dtypes and every numpy bool/int/uint/float/complex
//! dtype, and among the lowp dtypes.
//!
//! Every cast rounds once, to nearest even (under [`lowp_core::fpenv::Clean`],
//! whatever the caller's flush-to-zero): values go through their exact
//! f64 (or f32) value into the conversion kernels of `lowp_core::convert`
//! (f32 and f64 sources use them directly, so `astype` runs at kernel speed).
//! Overflow follows the target: inf where it has one, else NaN (fn, fnuz),
//! and posits saturate at maxpos as the posit standard says.
//!
//! numpy calls legacy cast functions on contiguous, aligned buffers; they
//! need no Python, so numpy may release the GIL around them.
//!
//! Safe casts (for promotion) are registered where every value converts
//! exactly, which is checked on every encoding of the narrower types.

use std::any::TypeId;
use std::ffi::{c_int, c_void};

use lowp_core::convert::{self, Code};
use lowp_core::format::{named, Format, IntFormat};
use lowp_core::round::{Mode, RoundOpts};
use numpy::npyffi::{npy_intp, PyArray_Descr, NPY_SCALARKIND, NPY_TYPES, PY_ARRAY_API};
use pyo3::prelude::*;

use super::kernels::{dec_block64, enc_block64, BLOCK};
use super::{check, descr, load, store, type_num, N, TYPES};

/// A numpy element type.
pub trait NpElem: Copy + 'static {
    const NUMS: &'static [NPY_TYPES];
    /// Its values as a format, when every one of them is a value of it (for safe-cast checks).
    const FMT: Option<Format>;
    /// Every f64 is one of its values (so every lowp value: a safe cast into it).
    const HOLDS_F64: bool = false;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

/// An integer below 2^64 in magnitude as an f64 rounded to odd: the nearest
/// f64 with its last bit set when it is not exact. Every lowp type has at
/// most 51 bits of precision, so rounding this f64 once more gives the
/// integer's correct rounding (where `v as f64` would round twice).
#[inline]
pub fn int_to_f64_odd(v: i128) -> f64 {
    let f = v as f64;
    // f is at most 2^64 here: as i128 exactly.
    let diff = v - f as i128;
    let bits = f.to_bits();
    if diff == 0 || bits & 1 == 1 {
        return f;
    }
    // One unit toward v: +1 on the bits grows |f|, -1 shrinks it (f != 0 as v != f).
    f64::from_bits(if (diff > 0) == (f > 0.0) { bits + 1 } else { bits - 1 })
}

macro_rules! int_elem {
    ($t:ty, $bits:expr, $signed:expr, $($num:ident),+) => {
        impl NpElem for $t {
            const NUMS: &'static [NPY_TYPES] = &[$(NPY_TYPES::$num),+];
            const FMT: Option<Format> = if $bits <= 16 { Some(Format::Int(IntFormat { bits: $bits, signed: $signed })) } else { None };
            #[inline(always)]
            fn to_f64(self) -> f64 { if $bits > 53 { int_to_f64_odd(self as i128) } else { self as f64 } }
            // Out-of-range values saturate, NaN gives 0 (numpy leaves these undefined).
            #[inline(always)]
            fn from_f64(v: f64) -> Self { v as $t }
        }
    };
}
int_elem!(i8, 8, true, NPY_BYTE);
int_elem!(u8, 8, false, NPY_UBYTE);
int_elem!(i16, 16, true, NPY_SHORT);
int_elem!(u16, 16, false, NPY_USHORT);
int_elem!(i32, 32, true, NPY_INT);
int_elem!(u32, 32, false, NPY_UINT);
int_elem!(i64, 64, true, NPY_LONG, NPY_LONGLONG);
int_elem!(u64, 64, false, NPY_ULONG, NPY_ULONGLONG);

/// numpy's bool (one byte, 0 or 1).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct NpBool(u8);
impl NpElem for NpBool {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_BOOL];
    const FMT: Option<Format> = Some(Format::Int(IntFormat { bits: 2, signed: false }));
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    fn from_f64(v: f64) -> Self {
        NpBool((v != 0.0) as u8)
    }
}

impl NpElem for half::f16 {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_HALF];
    const FMT: Option<Format> = Some(Format::Float(named::FLOAT16));
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    // One rounding from f64 by the format engine (half's f64 path rounds through f32).
    fn from_f64(v: f64) -> Self {
        half::f16::from_bits(named::FLOAT16.encode(v, &rne(), 0) as u16)
    }
}

impl NpElem for f32 {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_FLOAT];
    const FMT: Option<Format> = Some(Format::Float(named::FLOAT32));
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl NpElem for f64 {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_DOUBLE];
    const FMT: Option<Format> = Some(Format::Float(named::FLOAT64));
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// numpy complex: the real part converts, the imaginary part is dropped on the way in.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct C64([f32; 2]);
#[derive(Clone, Copy)]
#[repr(C)]
pub struct C128([f64; 2]);
impl NpElem for C64 {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_CFLOAT];
    const FMT: Option<Format> = Some(Format::Float(named::FLOAT32));
    fn to_f64(self) -> f64 {
        self.0[0] as f64
    }
    fn from_f64(v: f64) -> Self {
        C64([v as f32, 0.0])
    }
}
impl NpElem for C128 {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_CDOUBLE];
    const FMT: Option<Format> = Some(Format::Float(named::FLOAT64));
    fn to_f64(self) -> f64 {
        self.0[0]
    }
    fn from_f64(v: f64) -> Self {
        C128([v, 0.0])
    }
}

/// numpy's longdouble where it is the x87 80-bit extended format (x86-64 outside
/// Windows, 16 bytes a value): a 64-bit significand with its integer bit, then
/// the sign and a 15-bit exponent of bias 16383.
#[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
#[derive(Clone, Copy)]
#[repr(C, align(16))]
pub struct LongDouble {
    mant: u64,
    se: u16,
    pad: [u16; 3],
}

#[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
impl NpElem for LongDouble {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_LONGDOUBLE];
    // (Not all of its values are values of a lowp format: no safe casts from it.)
    const FMT: Option<Format> = None;
    const HOLDS_F64: bool = true;
    /// The value rounded to odd at f64's 53 bits (or at its subnormal unit), so that
    /// one more rounding into a lowp format (at most 51 bits) rounds the value
    /// once; beyond f64's range, f64's largest value (which every lowp format
    /// overflows as the value does: an infinity, NaN or the largest posit).
    fn to_f64(self) -> f64 {
        let (m, neg, e) = (self.mant, self.se & 0x8000 != 0, (self.se & 0x7fff) as i32);
        let sign = if neg { 1u64 << 63 } else { 0 };
        if e == 0x7fff || (e != 0 && m >> 63 == 0) {
            // Infinities (integer bit alone), NaNs and the invalid encodings
            // (which the x87 reads as NaNs); a NaN keeps its payload's top bits.
            if m << 1 == 0 && e == 0x7fff {
                return f64::from_bits(sign | 0x7ff0_0000_0000_0000);
            }
            return f64::from_bits(sign | 0x7ff8_0000_0000_0000 | (m << 1 >> 12));
        }
        if m == 0 {
            return f64::from_bits(sign);
        }
        // value = m * 2^(e' - 16383 - 63), e' = max(e, 1) (denormals have e = 0).
        let exp = e.max(1) - 16383;
        let lz = m.leading_zeros() as i32;
        let (m, exp) = (m << lz, exp - lz); // normalized: 1.xxx * 2^exp
        if exp > 1023 {
            return f64::from_bits(sign | f64::MAX.to_bits());
        }
        // Bits below f64's unit: 11 for a normal result, more below 2^-1022.
        let cut = if exp >= -1022 { 11 } else { (11 + (-1022 - exp)).min(64) as u32 };
        let kept = if cut >= 64 { 0 } else { m >> cut };
        let sticky = u64::from(cut >= 64 || m << (64 - cut) != 0);
        let bits = if exp >= -1022 { (((exp + 1023) as u64) << 52) | (kept & ((1 << 52) - 1)) } else { kept };
        f64::from_bits(sign | bits | sticky)
    }
    /// Exactly (every f64 is a value of it).
    fn from_f64(v: f64) -> Self {
        let b = v.to_bits();
        let se_sign = ((b >> 63) as u16) << 15;
        let (e, f) = (((b >> 52) & 0x7ff) as i32, b & ((1 << 52) - 1));
        let (mant, e) = match e {
            0x7ff if f == 0 => (1 << 63, 0x7fff),
            0x7ff => ((1 << 63) | (1 << 62) | (f << 11), 0x7fff),
            0 if f == 0 => (0, 0),
            0 => {
                // Subnormal: f * 2^-1074, its top bit at p.
                let p = 63 - f.leading_zeros() as i32;
                (f << (63 - p), p - 1074 + 16383)
            }
            _ => ((1 << 63) | (f << 11), e - 1023 + 16383),
        };
        LongDouble { mant, se: se_sign | e as u16, pad: [0; 3] }
    }
}

/// numpy's clongdouble: the real part converts, the imaginary part is dropped on the way in.
#[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
#[derive(Clone, Copy)]
#[repr(C)]
pub struct CLongDouble([LongDouble; 2]);

#[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
impl NpElem for CLongDouble {
    const NUMS: &'static [NPY_TYPES] = &[NPY_TYPES::NPY_CLONGDOUBLE];
    const FMT: Option<Format> = None;
    const HOLDS_F64: bool = true;
    fn to_f64(self) -> f64 {
        self.0[0].to_f64()
    }
    fn from_f64(v: f64) -> Self {
        CLongDouble([LongDouble::from_f64(v), LongDouble::from_f64(0.0)])
    }
}

fn rne() -> RoundOpts {
    RoundOpts::new(Mode::NearestEven)
}

/// Encode `src` into `n` codes of type `t` at `dst`.
///
/// # Safety
/// `dst` holds `src.len()` aligned elements of type `t`.
unsafe fn encode_into<S: convert::Real>(t: usize, src: &[S], dst: *mut c_void) {
    let f = &TYPES[t].fmt;
    let n = src.len();
    if let Format::Posit(p) = f {
        if p.es == 2 && is::<S, f32>() {
            // The core's posit kernel (vectorized from f32); same results as posit2_encode.
            // SAFETY: S is f32 (checked above); the caller guarantees n aligned codes.
            unsafe {
                let s32 = std::slice::from_raw_parts(src.as_ptr() as *const f32, n);
                match TYPES[t].size {
                    1 => posit_kernel(f, s32, std::slice::from_raw_parts_mut(dst as *mut u8, n)),
                    2 => posit_kernel(f, s32, std::slice::from_raw_parts_mut(dst as *mut u16, n)),
                    _ => posit_kernel(f, s32, std::slice::from_raw_parts_mut(dst as *mut u32, n)),
                }
            }
            return;
        }
        if p.es == 2 && p.nbits <= 16 && is::<S, f64>() {
            // SAFETY: S is f64 (checked above).
            let s64 = unsafe { std::slice::from_raw_parts(src.as_ptr() as *const f64, n) };
            let size = TYPES[t].size;
            let mut buf = vec![0f32; n.min(F64_BLOCK)];
            let mut i = 0;
            while i < n {
                let m = F64_BLOCK.min(n - i);
                for (x, y) in s64[i..i + m].iter().zip(buf.iter_mut()) {
                    *y = posit16_via_f32(*x);
                }
                // SAFETY: the caller guarantees n aligned codes of `size` bytes; [i, i + m) lies inside.
                unsafe {
                    let d = (dst as *mut u8).add(i * size);
                    match size {
                        1 => posit_kernel(f, &buf[..m], std::slice::from_raw_parts_mut(d, m)),
                        _ => posit_kernel(f, &buf[..m], std::slice::from_raw_parts_mut(d as *mut u16, m)),
                    }
                }
                i += m;
            }
            return;
        }
        if p.es == 2 && p.nbits == 32 && is::<S, f64>() {
            // SAFETY: S is f64 (checked above); the caller guarantees n aligned u32 codes.
            let (s64, d) = unsafe { (std::slice::from_raw_parts(src.as_ptr() as *const f64, n), std::slice::from_raw_parts_mut(dst as *mut u32, n)) };
            for (x, y) in s64.iter().zip(d.iter_mut()) {
                *y = posit32_encode(*x);
            }
            return;
        }
        if p.es == 2 {
            let size = TYPES[t].size;
            // posit2_encode's float compares raise invalid on signaling NaNs (which become NaR).
            with_fp_flags_kept(|| {
                for (i, v) in src.iter().enumerate() {
                    // SAFETY: the caller guarantees n elements of `size` bytes.
                    unsafe { store((dst as *mut u8).add(i * size), size, super::kernels::posit2_encode(p.nbits, v.to_f64())) };
                }
            });
            return;
        }
    }
    // SAFETY: the caller guarantees n aligned elements of the type's width.
    unsafe {
        // Cannot fail: valid options and a storage width that fits the format.
        let _ = match TYPES[t].size {
            1 => convert::encode(f, src, std::slice::from_raw_parts_mut(dst as *mut u8, n), &rne(), 0),
            2 => convert::encode(f, src, std::slice::from_raw_parts_mut(dst as *mut u16, n), &rne(), 0),
            _ => convert::encode(f, src, std::slice::from_raw_parts_mut(dst as *mut u32, n), &rne(), 0),
        };
    }
}

/// Casts between float32 and lowp types of at least this many elements run
/// threaded kernels.
const PAR_MIN: usize = 1 << 16;

/// f64 elements converted per block on the way into posit<n<=16,2>.
const F64_BLOCK: usize = 1 << 14;

/// An f64 as an f32 that rounds to the same posit<n<=16,2> (nearest even):
/// rounded to odd (24 bits keep the sticky information for the <= 12
/// significant bits of these posits), with magnitudes beyond the posit range
/// clamped to 2^+-60 (still beyond maxpos 2^56 / below minpos 2^-56). Integer
/// steps only: no branch on the data's rounding, no floating-point flag.
#[inline(always)]
pub(super) fn posit16_via_f32(x: f64) -> f32 {
    const INF: u64 = 0x7FF0_0000_0000_0000;
    let b = x.to_bits();
    let mag = b & !(1u64 << 63); // |x| as bits (ordered like the magnitudes)
    let sign = (b >> 32) as u32 & 0x8000_0000;
    if mag == 0 || mag >= INF {
        // Zeros and infinities keep their sign; NaN (tested on the bits) becomes NaR.
        return if mag > INF { f32::NAN } else { f32::from_bits(sign | if mag == 0 { 0 } else { 0x7F80_0000 }) };
    }
    let m = mag.clamp((1023 - 60) << 52, (1023 + 60) << 52); // 2^-60 ..= 2^60: f32 normals
    let e = (m >> 52) as u32 - 1023 + 127; // rebias the exponent
    let hi = (m >> 29) as u32 & 0x7F_FFFF; // top 23 fraction bits (truncation toward zero)
    let sticky = (m & ((1 << 29) - 1) != 0) as u32; // inexact: set the last bit (round to odd)
    f32::from_bits(sign | (e << 23) | hi | sticky)
}

/// Round an f64 to posit<32,2>, nearest even on the encoding (the posit
/// standard: no underflow to 0, saturation at maxpos, NaN and infinities to
/// NaR); kernels::posit2_encode's steps in 64-bit integers, after rounding the
/// f64 fraction to odd at 29 bits (posit32 keeps at most 27, so a guard bit and
/// the sticky bit survive). Tested on the bits only: raises no FP flag.
#[inline(always)]
fn posit32_encode(x: f64) -> u32 {
    const NAR: u32 = 1 << 31;
    let b = x.to_bits();
    let mag = b & !(1u64 << 63);
    if mag == 0 {
        return 0;
    }
    if mag >= 0x7FF0_0000_0000_0000 {
        return NAR; // NaN and infinities
    }
    let ef = (mag >> 52) as i32;
    const MAX_SCALE: i32 = 120; // (32 - 2) * 4
    let scale = ef - 1023;
    let code = if ef == 0 || scale < -MAX_SCALE {
        1 // f64 subnormals and everything below minpos: minpos
    } else if scale >= MAX_SCALE {
        NAR - 1 // maxpos, or beyond it: saturate
    } else {
        let frac = mag & ((1u64 << 52) - 1);
        // Top 29 fraction bits, the last one ORed with whether any lower bit is set (round to odd).
        let f29 = (frac >> 23) | (frac & ((1 << 23) - 1) != 0) as u64;
        let k = scale >> 2; // regime value: floor(scale / 4), -30..=29
        let e = (scale & 3) as u64; // exponent bits
        // Regime: k+1 ones then a zero (k >= 0), or -k zeros then a one; 2..=31 bits.
        let (r, rlen) = if k >= 0 { (((1u64 << (k + 1)) - 1) << 1, (k + 2) as u32) } else { (1u64, (1 - k) as u32) };
        let body = (r << 31) | (e << 29) | f29; // rlen + 31 <= 62 bits
        let shift = rlen; // body length minus the 31 bits kept: >= 2, so the odd bit lies below the guard bit
        let mut m = body >> shift;
        let rem = body & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        if rem > half || (rem == half && m & 1 == 1) {
            m += 1;
        }
        // Rounding never reaches NaR nor 0 (maxpos and minpos bound it).
        m.clamp(1, (NAR - 1) as u64) as u32
    };
    if b >> 63 != 0 {
        code.wrapping_neg()
    } else {
        code
    }
}

/// The core's f32 -> posit kernel, nearest even, leaving the caller's
/// floating-point status flags as they were.
fn posit_kernel<C: Code>(f: &Format, src: &[f32], dst: &mut [C]) {
    with_fp_flags_kept(|| {
        // Cannot fail: valid options and a storage width that fits the format.
        let _ = convert::encode(f, src, dst, &rne(), 0);
    })
}

/// Run `body` and restore the SSE status flags (invalid, denormal, divide,
/// overflow, underflow, inexact) it may have raised on this thread: the
/// vectorized kernels compare and convert NaN, infinite and huge lanes, whose
/// flags numpy would report as warnings after the cast although the cast
/// itself is exact by the posit standard.
#[inline]
pub(super) fn with_fp_flags_kept<R>(body: impl FnOnce() -> R) -> R {
    use super::kernels::{fp_status, set_fp_status};
    let before = fp_status();
    let r = body();
    // The current control bits (rounding, masks, FTZ/DAZ), the status bits (low 6)
    // as they were before the call.
    set_fp_status((fp_status() & !0x3F) | (before & 0x3F));
    r
}

/// Decode `n` codes of type `t` at `src` into `dst` (f32 or f64).
///
/// # Safety
/// `src` holds `dst.len()` aligned elements of type `t`.
unsafe fn decode_from<D: convert::Real>(t: usize, src: *const c_void, dst: &mut [D]) {
    let f = &TYPES[t].fmt;
    let n = dst.len();
    if let Format::Posit(p) = f {
        if p.es == 2 && p.nbits > 16 {
            // SAFETY: the caller guarantees n aligned u32 codes.
            let s = unsafe { std::slice::from_raw_parts(src as *const u32, n) };
            // Exact in f64; D::from_f64 rounds once (posit32's range lies inside f32's normals).
            for (c, y) in s.iter().zip(dst.iter_mut()) {
                *y = D::from_f64(super::kernels::posit2_decode(p.nbits, *c));
            }
            return;
        }
    }
    fn go<C: Code, D: convert::Real>(f: &Format, s: &[C], d: &mut [D]) {
        let _ = convert::decode(f, s, d);
    }
    // SAFETY: the caller guarantees n aligned elements of the type's width.
    unsafe {
        match TYPES[t].size {
            1 => go(f, std::slice::from_raw_parts(src as *const u8, n), dst),
            2 => go(f, std::slice::from_raw_parts(src as *const u16, n), dst),
            _ => go(f, std::slice::from_raw_parts(src as *const u32, n), dst),
        }
    }
}

/// f32 -> f64 as the hardware does (NaN payload kept, quiet bit set), without
/// raising the invalid flag on signaling NaNs (numpy would warn).
#[inline(always)]
fn widen(x: f32) -> f64 {
    let b = x.to_bits() as u64;
    // NaN test on the bits (a float compare would raise invalid on a signaling NaN).
    if b & 0x7FFF_FFFF <= 0x7F80_0000 {
        return x as f64;
    }
    // sign, all-ones exponent, quiet bit, then the 23-bit payload at the top of the 52-bit field.
    f64::from_bits(((b & 0x8000_0000) << 32) | 0x7FF8_0000_0000_0000 | ((b & 0x7F_FFFF) << 29))
}

fn is<A: 'static, B: 'static>() -> bool {
    TypeId::of::<A>() == TypeId::of::<B>()
}

/// lowp type T -> numpy element E.
unsafe extern "C" fn cast_from<const T: usize, E: NpElem>(from: *mut c_void, to: *mut c_void, n: npy_intp, _fa: *mut c_void, _ta: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    let n = n.max(0) as usize;
    // SAFETY: numpy passes n contiguous aligned elements on each side.
    unsafe {
        if T == super::kernels::BF16 && (is::<E, f32>() || is::<E, f64>()) {
            // bf16 is the top half of an f32: a shift, which keeps NaN payloads
            // (as ml_dtypes does) on every instruction-set path.
            let s = from as *const u16;
            if is::<E, f32>() {
                let (src, dst) = (std::slice::from_raw_parts(s, n), std::slice::from_raw_parts_mut(to as *mut u32, n));
                // Threads over large arrays (the chunks fault their fresh pages in parallel too).
                lowp_core::parallel::zip_chunks(src, dst, PAR_MIN, |_, s, d| {
                    for (c, y) in s.iter().zip(d.iter_mut()) {
                        *y = (*c as u32) << 16;
                    }
                });
            } else {
                let d = to as *mut f64;
                for i in 0..n {
                    d.add(i).write(widen(f32::from_bits((s.add(i).read() as u32) << 16)));
                }
            }
            return;
        }
        if is::<E, f32>() {
            return decode_from(T, from, std::slice::from_raw_parts_mut(to as *mut f32, n));
        }
        if is::<E, f64>() {
            return decode_from(T, from, std::slice::from_raw_parts_mut(to as *mut f64, n));
        }
        let size = TYPES[T].size;
        let (s, d) = (from as *const u8, to as *mut E);
        let mut codes = [0u32; BLOCK];
        let mut vals = [0f64; BLOCK];
        let mut i = 0;
        while i < n {
            let m = BLOCK.min(n - i);
            for j in 0..m {
                codes[j] = load(s.add((i + j) * size), size);
            }
            dec_block64(T, &codes[..m], &mut vals[..m]);
            for j in 0..m {
                d.add(i + j).write(E::from_f64(vals[j]));
            }
            i += m;
        }
    }
}

/// numpy's `ComplexWarning` class (a reference kept for the life of the process).
static COMPLEX_WARNING: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// numpy element E -> lowp type T.
unsafe extern "C" fn cast_to<const T: usize, E: NpElem>(from: *mut c_void, to: *mut c_void, n: npy_intp, _fa: *mut c_void, _ta: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    let n = n.max(0) as usize;
    #[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
    let complex = is::<E, C64>() || is::<E, C128>() || is::<E, CLongDouble>();
    #[cfg(not(all(target_arch = "x86_64", not(target_os = "windows"))))]
    let complex = is::<E, C64>() || is::<E, C128>();
    if complex && n > 0 {
        // As numpy's complex -> float casts: a warning. Where warnings are errors, numpy
        // would not see one raised here (it checks only casts of dtypes flagged as needing
        // the Python API, which would keep the GIL in every loop): it goes to
        // sys.unraisablehook instead, and the cast completes.
        // (numpy may run the cast with the GIL released, inside a ufunc's iteration.)
        if let Some(&w) = COMPLEX_WARNING.get() {
            // SAFETY: the GIL is taken (or re-entered) for the warning; a live warning class.
            unsafe {
                let gil = pyo3::ffi::PyGILState_Ensure();
                let w = w as *mut pyo3::ffi::PyObject;
                if pyo3::ffi::PyErr_WarnEx(w, c"Casting complex values to real discards the imaginary part".as_ptr(), 1) < 0 {
                    pyo3::ffi::PyErr_WriteUnraisable(w);
                }
                pyo3::ffi::PyGILState_Release(gil);
            }
        }
    }
    // SAFETY: numpy passes n contiguous aligned elements on each side.
    unsafe {
        if is::<E, f32>() && n >= PAR_MIN && !(super::kernels::is_posit(T) && TYPES[T].size == 1) {
            // Large arrays: the core's vectorized, threaded kernels (the same
            // results; for posit8 the table below is faster); the flags they
            // raise on this thread are dropped, as numpy would report them.
            return with_fp_flags_kept(|| encode_into(T, std::slice::from_raw_parts(from as *const f32, n), to));
        }
        if is::<E, f32>() {
            if T == super::kernels::BF16 {
                let (s, d) = (from as *const u32, to as *mut u16);
                for i in 0..n {
                    d.add(i).write(super::kernels::f32_to_bf16(s.add(i).read()));
                }
                return;
            }
            if TYPES[T].size == 1 {
                let tab = super::kernels::odd_table(T);
                let (s, d) = (from as *const u32, to as *mut u8);
                for i in 0..n {
                    d.add(i).write(tab[super::kernels::bf16_odd(s.add(i).read())]);
                }
                return;
            }
            return encode_into(T, std::slice::from_raw_parts(from as *const f32, n), to);
        }
        if is::<E, f64>() {
            if TYPES[T].size == 1 {
                let tab = super::kernels::odd_table(T);
                let (s, d) = (from as *const f64, to as *mut u8);
                // The narrowing to f32 raises underflow (and inexact) on values below f32's
                // normals, which numpy would then report; the cast reports none, as casts
                // from f32 sources do not: the caller's flags are kept.
                return with_fp_flags_kept(|| {
                    for i in 0..n {
                        let v = s.add(i).read();
                        // Finite values beyond f32 stay finite (f32::MAX is odd and overflows every 8-bit type).
                        let y = if v.abs() > f32::MAX as f64 && v.abs() != f64::INFINITY {
                            // (no `v as f32` here: it would raise the overflow flag numpy reports)
                            if v.is_sign_negative() { -f32::MAX } else { f32::MAX }
                        } else {
                            super::kernels::f64_to_f32_odd(v)
                        };
                        d.add(i).write(tab[super::kernels::bf16_odd(y.to_bits())]);
                    }
                });
            }
            return encode_into(T, std::slice::from_raw_parts(from as *const f64, n), to);
        }
        let size = TYPES[T].size;
        let s = from as *const E;
        let mut vals = [0f64; BLOCK];
        let mut i = 0;
        while i < n {
            let m = BLOCK.min(n - i);
            for j in 0..m {
                vals[j] = s.add(i + j).read().to_f64();
            }
            encode_into(T, &vals[..m], (to as *mut u8).add(i * size) as *mut c_void);
            i += m;
        }
    }
}

/// The element size of the array numpy passes a legacy cast (its source or target),
/// or None with a Python error set.
///
/// # Safety
/// The GIL is held; `arr` is null or an array.
unsafe fn itemsize_of(py: Python<'_>, arr: *mut c_void) -> Option<usize> {
    if arr.is_null() {
        // SAFETY: the GIL is held.
        unsafe { pyo3::ffi::PyErr_SetString(pyo3::ffi::PyExc_TypeError, c"lowp: a string cast without its array".as_ptr()) };
        return None;
    }
    // SAFETY: a live array (borrowed).
    let a = unsafe { Bound::from_borrowed_ptr(py, arr as *mut pyo3::ffi::PyObject) };
    match a.getattr("itemsize").and_then(|v| v.extract::<usize>()) {
        Ok(v) => Some(v),
        Err(e) => {
            e.restore(py);
            None
        }
    }
}

/// `body(py, width)` of a cast between a lowp type and numpy's strings, `width` the
/// string array's itemsize: with the GIL (numpy holds it for casts of strings; taken
/// again here all the same), and not over an error an earlier call left pending.
///
/// # Safety
/// `arr` is null or the string side's array that numpy passes a legacy cast.
unsafe fn string_cast(arr: *mut c_void, body: impl FnOnce(Python<'_>, usize)) {
    // Attached through pyo3 (not only the interpreter's GIL state): objects it drops
    // here, such as a failed parse's exception, are released at once rather than
    // queued for a later attach.
    Python::attach(|py| {
        // SAFETY: attached; arr per the contract.
        unsafe {
            if pyo3::ffi::PyErr_Occurred().is_null() {
                if let Some(width) = itemsize_of(py, arr) {
                    body(py, width);
                }
            }
        }
    })
}

/// numpy's str_ (`WIDE`: UCS4) or bytes_ strings -> lowp type T: each parsed as the
/// scalar type parses a string (its exact decimal value rounded once); a string that
/// is no number raises ValueError (numpy checks casts from strings for errors).
unsafe extern "C" fn cast_from_str<const T: usize, const WIDE: bool>(from: *mut c_void, to: *mut c_void, n: npy_intp, fa: *mut c_void, _ta: *mut c_void) {
    let n = n.max(0) as usize;
    let size = TYPES[T].size;
    // SAFETY: n elements of the array's itemsize from `from`, n codes to `to`.
    unsafe {
        string_cast(fa, |py, width| {
            for i in 0..n {
                let p = (from as *const u8).add(i * width);
                let text: String = if WIDE {
                    (0..width / 4)
                        .map(|k| u32::from_ne_bytes(std::ptr::read_unaligned(p.add(4 * k) as *const [u8; 4])))
                        .take_while(|&c| c != 0)
                        .map(|c| char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER))
                        .collect()
                } else {
                    (0..width).map(|k| p.add(k).read()).take_while(|&b| b != 0).map(char::from).collect()
                };
                let obj = pyo3::types::PyString::new(py, &text);
                match super::scalar::convert(py, T, obj.as_any()) {
                    Ok(c) => store((to as *mut u8).add(i * size), size, c),
                    Err(e) => {
                        e.restore(py);
                        break;
                    }
                }
            }
        })
    }
}

/// lowp type T -> numpy's str_ (`WIDE`) or bytes_: each value as the scalar type prints
/// it (the shortest digits that give it back). A string longer than the target raises
/// ValueError rather than being cut: numpy sizes an unsized target (`astype(str)`) of a
/// user dtype at one character.
unsafe extern "C" fn cast_to_str<const T: usize, const WIDE: bool>(from: *mut c_void, to: *mut c_void, n: npy_intp, _fa: *mut c_void, ta: *mut c_void) {
    let n = n.max(0) as usize;
    let size = TYPES[T].size;
    // SAFETY: n codes from `from`, n strings of the array's itemsize to `to`.
    unsafe {
        string_cast(ta, |py, width| {
            let chars = if WIDE { width / 4 } else { width };
            for i in 0..n {
                let text = super::scalar::repr_string(T, load((from as *const u8).add(i * size), size));
                if text.chars().count() > chars {
                    let (kind, name) = (if WIDE { "U" } else { "S" }, TYPES[T].name);
                    let msg = format!(
                        "{name} -> string: {text:?} needs {} characters, the target holds {chars}; cast to '{kind}16' \
                         or longer (numpy gives astype(str) of a user dtype one character)",
                        text.chars().count()
                    );
                    pyo3::exceptions::PyValueError::new_err(msg).restore(py);
                    break;
                }
                let q = (to as *mut u8).add(i * width);
                std::ptr::write_bytes(q, 0, width);
                if WIDE {
                    for (k, ch) in text.chars().take(chars).enumerate() {
                        std::ptr::write_unaligned(q.add(4 * k) as *mut [u8; 4], (ch as u32).to_ne_bytes());
                    }
                } else {
                    for (k, b) in text.bytes().take(chars).enumerate() {
                        q.add(k).write(b);
                    }
                }
            }
        })
    }
}

/// Casts both ways between lowp type T and numpy's strings.
fn with_strings<const T: usize>(py: Python<'_>) -> PyResult<()> {
    let me = descr(py, T);
    let (u, s) = (builtin(py, NPY_TYPES::NPY_UNICODE), builtin(py, NPY_TYPES::NPY_STRING));
    cast_func(py, u, type_num(T), Some(cast_from_str::<T, true>))?;
    cast_func(py, s, type_num(T), Some(cast_from_str::<T, false>))?;
    cast_func(py, me, NPY_TYPES::NPY_UNICODE as c_int, Some(cast_to_str::<T, true>))?;
    cast_func(py, me, NPY_TYPES::NPY_STRING as c_int, Some(cast_to_str::<T, false>))?;
    Ok(())
}

/// The loop of a cast through exact values: `n` codes of `ss` bytes at `from`, a
/// block at a time, decoded by `dec` into float64 and encoded by `enc` into codes of
/// `ds` bytes at `to`.
///
/// # Safety
/// `n` contiguous elements of `ss` bytes at `from` and of `ds` bytes at `to`.
unsafe fn cast_blocks(
    from: *mut c_void,
    to: *mut c_void,
    n: npy_intp,
    (ss, ds): (usize, usize),
    dec: impl Fn(&[u32], &mut [f64]),
    enc: impl Fn(&[f64], &mut [u32]),
) {
    let n = n.max(0) as usize;
    let (s, d) = (from as *const u8, to as *mut u8);
    let mut codes = [0u32; BLOCK];
    let mut vals = [0f64; BLOCK];
    let mut i = 0;
    while i < n {
        let m = BLOCK.min(n - i);
        // SAFETY: per the function contract.
        unsafe {
            for j in 0..m {
                codes[j] = load(s.add((i + j) * ss), ss);
            }
            dec(&codes[..m], &mut vals[..m]);
            enc(&vals[..m], &mut codes[..m]);
            for j in 0..m {
                store(d.add((i + j) * ds), ds, codes[j]);
            }
        }
        i += m;
    }
}

/// lowp type T -> lowp type U, through the exact value.
unsafe extern "C" fn cast_lowp<const T: usize, const U: usize>(from: *mut c_void, to: *mut c_void, n: npy_intp, _fa: *mut c_void, _ta: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: numpy passes n contiguous elements of each type.
    unsafe { cast_blocks(from, to, n, (TYPES[T].size, TYPES[U].size), |c, v| dec_block64(T, c, v), |v, c| enc_block64(U, v, c)) }
}

/// Same encodings on both sides: a copy.
unsafe extern "C" fn cast_bits<const SIZE: usize>(from: *mut c_void, to: *mut c_void, n: npy_intp, _fa: *mut c_void, _ta: *mut c_void) {
    // SAFETY: numpy passes n elements of SIZE bytes on each side.
    unsafe { std::ptr::copy(from as *const u8, to as *mut u8, n.max(0) as usize * SIZE) }
}

/// Is every value of `src` (at most 16 bits) exactly a value of `dst`?
pub(super) fn all_exact(src: &Format, dst: &Format) -> bool {
    if src == dst || *dst == Format::Float(named::FLOAT64) {
        // Every lowp format's values are f64 values (decoding is exact).
        return true;
    }
    if src.bits() > 16 {
        return false;
    }
    let o = rne();
    (0..1u64 << src.bits()).all(|c| {
        let v = src.decode(c);
        if v.is_nan() {
            return dst.has_nan();
        }
        // Value equality (a -0 into a format without -0 counts as exact).
        dst.decode(dst.encode(v, &o, 0)) == v
    })
}

fn can_cast(py: Python<'_>, from: *mut PyArray_Descr, to: c_int) -> PyResult<()> {
    // SAFETY: from is a live descriptor, to a registered type number.
    let rc = unsafe { PY_ARRAY_API.PyArray_RegisterCanCast(py, from, to, NPY_SCALARKIND::NPY_NOSCALAR) };
    check(py, rc, "PyArray_RegisterCanCast")
}

fn cast_func(py: Python<'_>, from: *mut PyArray_Descr, to: c_int, f: numpy::npyffi::PyArray_VectorUnaryFunc) -> PyResult<()> {
    // SAFETY: from is a live descriptor, to a registered type number, f a cast function.
    let rc = unsafe { PY_ARRAY_API.PyArray_RegisterCastFunc(py, from, to, f) };
    check(py, rc, "PyArray_RegisterCastFunc")
}

fn builtin(py: Python<'_>, num: NPY_TYPES) -> *mut PyArray_Descr {
    // SAFETY: num is a builtin type number.
    unsafe { PY_ARRAY_API.PyArray_DescrFromType(py, num as c_int) }
}

fn with_numpy<const T: usize, E: NpElem>(py: Python<'_>) -> PyResult<()> {
    let me = descr(py, T);
    let tn = type_num(T);
    let fmt = TYPES[T].fmt;
    for &num in E::NUMS {
        let other = builtin(py, num);
        cast_func(py, me, num as c_int, Some(cast_from::<T, E>))?;
        cast_func(py, other, tn, Some(cast_to::<T, E>))?;
        if E::HOLDS_F64 {
            can_cast(py, me, num as c_int)?;
        }
        if let Some(ef) = E::FMT {
            if all_exact(&fmt, &ef) {
                can_cast(py, me, num as c_int)?;
            }
            // int8 and uint8 into the 8-bit types count as safe although
            // fp8 and posit8 do not hold all of them (ml_dtypes does the
            // same): numpy finds the type of a Python integer operand through
            // them, so `x * 2` keeps x's 8-bit type instead of widening.
            let byte_int = matches!(ef, Format::Int(_)) && ef.bits() == 8 && TYPES[T].size == 1;
            if all_exact(&ef, &fmt) || byte_int {
                can_cast(py, other, tn)?;
            }
        }
    }
    Ok(())
}

fn with_lowp<const T: usize, const U: usize>(py: Python<'_>) -> PyResult<()> {
    if T == U {
        return Ok(());
    }
    let me = descr(py, T);
    cast_func(py, me, type_num(U), Some(cast_lowp::<T, U>))?;
    if all_exact(&TYPES[T].fmt, &TYPES[U].fmt) {
        can_cast(py, me, type_num(U))?;
    }
    Ok(())
}

/// Casts between lowp type `T` and numpy's types (longdouble's where `x87`).
fn register_type<const T: usize>(py: Python<'_>, x87: bool) -> PyResult<()> {
    with_numpy::<T, NpBool>(py)?;
    with_numpy::<T, i8>(py)?;
    with_numpy::<T, u8>(py)?;
    with_numpy::<T, i16>(py)?;
    with_numpy::<T, u16>(py)?;
    with_numpy::<T, i32>(py)?;
    with_numpy::<T, u32>(py)?;
    with_numpy::<T, i64>(py)?;
    with_numpy::<T, u64>(py)?;
    with_numpy::<T, half::f16>(py)?;
    with_numpy::<T, f32>(py)?;
    with_numpy::<T, f64>(py)?;
    with_numpy::<T, C64>(py)?;
    with_numpy::<T, C128>(py)?;
    with_strings::<T>(py)?;
    #[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
    if x87 {
        with_numpy::<T, LongDouble>(py)?;
        with_numpy::<T, CLongDouble>(py)?;
    }
    #[cfg(not(all(target_arch = "x86_64", not(target_os = "windows"))))]
    let _ = x87;
    Ok(())
}

fn register_lowp<const T: usize>(py: Python<'_>) -> PyResult<()> {
    with_lowp::<T, 0>(py)?;
    with_lowp::<T, 1>(py)?;
    with_lowp::<T, 2>(py)?;
    with_lowp::<T, 3>(py)?;
    with_lowp::<T, 4>(py)?;
    with_lowp::<T, 5>(py)?;
    with_lowp::<T, 6>(py)?;
    with_lowp::<T, 7>(py)?;
    with_lowp::<T, 8>(py)?;
    Ok(())
}

/// Is numpy's longdouble the x87 extended format of [`LongDouble`] (16 bytes, 64
/// significand bits)?
#[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
fn longdouble_is_x87(py: Python<'_>) -> PyResult<bool> {
    let np = py.import("numpy")?;
    let ld = np.getattr("longdouble")?;
    let size: usize = np.call_method1("dtype", (&ld,))?.getattr("itemsize")?.extract()?;
    let nmant: usize = np.call_method1("finfo", (&ld,))?.getattr("nmant")?.extract()?;
    Ok(size == 16 && nmant == 63)
}

pub fn register_all(py: Python<'_>) -> PyResult<()> {
    const _: () = assert!(N == 9);
    let warning = py.import("numpy.exceptions")?.getattr("ComplexWarning")?;
    let _ = COMPLEX_WARNING.set(warning.into_ptr() as usize);
    #[cfg(all(target_arch = "x86_64", not(target_os = "windows")))]
    let x87 = longdouble_is_x87(py)?;
    #[cfg(not(all(target_arch = "x86_64", not(target_os = "windows"))))]
    let x87 = false;
    register_type::<0>(py, x87)?;
    register_type::<1>(py, x87)?;
    register_type::<2>(py, x87)?;
    register_type::<3>(py, x87)?;
    register_type::<4>(py, x87)?;
    register_type::<5>(py, x87)?;
    register_type::<6>(py, x87)?;
    register_type::<7>(py, x87)?;
    register_type::<8>(py, x87)?;
    register_lowp::<0>(py)?;
    register_lowp::<1>(py)?;
    register_lowp::<2>(py)?;
    register_lowp::<3>(py)?;
    register_lowp::<4>(py)?;
    register_lowp::<5>(py)?;
    register_lowp::<6>(py)?;
    register_lowp::<7>(py)?;
    register_lowp::<8>(py)?;
    for t in 0..N {
        let me = descr(py, t);
        for u in (0..N).filter(|&u| u != t) {
            let to = descr(py, u);
            settle(py, me, Some(b'S'), to, Some(b'a'));
            // SAFETY: a new reference, released.
            unsafe { pyo3::ffi::Py_DECREF(to as *mut pyo3::ffi::PyObject) };
        }
        // Into numpy's floating and complex types: "same_kind" too (float16 out=);
        // from complex types: unsafe, as into numpy's floats (the imaginary part
        // would be dropped).
        for num in [NPY_TYPES::NPY_HALF, NPY_TYPES::NPY_FLOAT, NPY_TYPES::NPY_DOUBLE, NPY_TYPES::NPY_LONGDOUBLE, NPY_TYPES::NPY_CFLOAT, NPY_TYPES::NPY_CDOUBLE, NPY_TYPES::NPY_CLONGDOUBLE] {
            let other = builtin(py, num);
            settle(py, me, Some(b'b'), other, None);
            if matches!(num, NPY_TYPES::NPY_CFLOAT | NPY_TYPES::NPY_CDOUBLE | NPY_TYPES::NPY_CLONGDOUBLE) {
                settle(py, other, None, me, Some(b'f'));
            }
            // SAFETY: a new reference, released.
            unsafe { pyo3::ffi::Py_DECREF(other as *mut pyo3::ffi::PyObject) };
        }
        // SAFETY: a new reference, released.
        unsafe { pyo3::ffi::Py_DECREF(me as *mut pyo3::ffi::PyObject) };
    }
    Ok(())
}

/// Have numpy settle the safety of the registered cast `from` -> `to` now (it
/// does so when a cast is first looked up, from the registered safe casts and
/// the dtypes' kinds), with lowp descriptors' kinds set to `from_kind` and
/// `to_kind` meanwhile (None: a descriptor left as it is), then restored.
///
/// numpy takes two user dtypes of one size and one kind for equivalent types,
/// castable safely both ways (float8_e4m3fn and float8_e5m2, bfloat16 and
/// posit16), and a cast from one kind to a kind of higher or equal rank for
/// "same_kind". So the kinds differ while the cast is settled, and rank in
/// that order: safe is then what `all_exact` found, and every cast among the
/// lowp types (and between them and ml_dtypes') is at least "same_kind", as
/// between numpy's floats (`x += y` across them rounds into x's type).
fn settle(py: Python<'_>, from: *mut PyArray_Descr, from_kind: Option<u8>, to: *mut PyArray_Descr, to_kind: Option<u8>) {
    // SAFETY: live descriptors; their kinds are plain char fields, and lowp's
    // own (the ones given a kind) are only read by numpy under the GIL held here.
    unsafe {
        let (k0, k1) = ((*from).fields.kind, (*to).fields.kind);
        if let Some(k) = from_kind {
            (*from).fields.kind = k as std::ffi::c_char;
        }
        if let Some(k) = to_kind {
            (*to).fields.kind = k as std::ffi::c_char;
        }
        PY_ARRAY_API.PyArray_CanCastTypeTo(py, from, to, numpy::npyffi::NPY_CASTING::NPY_SAFE_CASTING);
        (*from).fields.kind = k0;
        (*to).fields.kind = k1;
    }
}

/// The cast function of lowp type `t` into lowp type `u` ([`cast_lowp`]).
fn lowp_cast_fn(t: usize, u: usize) -> numpy::npyffi::PyArray_VectorUnaryFunc {
    type F = unsafe extern "C" fn(*mut c_void, *mut c_void, npy_intp, *mut c_void, *mut c_void);
    macro_rules! row {
        ($t:literal) => {
            [
                cast_lowp::<$t, 0> as F,
                cast_lowp::<$t, 1> as F,
                cast_lowp::<$t, 2> as F,
                cast_lowp::<$t, 3> as F,
                cast_lowp::<$t, 4> as F,
                cast_lowp::<$t, 5> as F,
                cast_lowp::<$t, 6> as F,
                cast_lowp::<$t, 7> as F,
                cast_lowp::<$t, 8> as F,
            ]
        };
    }
    const _: () = assert!(N == 9);
    let table: [[F; N]; N] = [row!(0), row!(1), row!(2), row!(3), row!(4), row!(5), row!(6), row!(7), row!(8)];
    Some(table[t][u])
}

/// Casts both ways between every lowp type other than `u` and `other`, a dtype
/// with the encodings of lowp type `u` (ml_dtypes' type of the same name):
/// through the exact value, rounded once; safe where exact, as among the lowp
/// types (their kinds differ from `other`'s while numpy settles the safety).
pub fn register_cross(py: Python<'_>, u: usize, other: *mut PyArray_Descr, other_num: c_int) -> PyResult<()> {
    // SAFETY: a live descriptor.
    let other_kind = unsafe { (*other).fields.kind } as u8;
    for t in (0..N).filter(|&t| t != u) {
        let me = descr(py, t);
        let done: PyResult<()> = (|| {
            cast_func(py, me, other_num, lowp_cast_fn(t, u))?;
            cast_func(py, other, type_num(t), lowp_cast_fn(u, t))?;
            if all_exact(&TYPES[t].fmt, &TYPES[u].fmt) {
                can_cast(py, me, other_num)?;
            }
            if all_exact(&TYPES[u].fmt, &TYPES[t].fmt) {
                can_cast(py, other, type_num(t))?;
            }
            // Kinds of the lowest and the highest rank, other than `other`'s.
            settle(py, me, Some(if other_kind == b'b' { b'u' } else { b'b' }), other, None);
            settle(py, other, None, me, Some(if other_kind == b'O' { b'V' } else { b'O' }));
            Ok(())
        })();
        // SAFETY: a new reference, released.
        unsafe { pyo3::ffi::Py_DECREF(me as *mut pyo3::ffi::PyObject) };
        done?;
    }
    Ok(())
}

/// Slots for ml_dtypes' floats that lowp knows as formats but registers no dtype of
/// its own for (float8_e3m4, float8_e4m3b11fnuz, float6_e2m3fn, float6_e3m2fn,
/// float4_e2m1fn): their formats, set once when ml_dtypes is linked.
pub const EXTRAS: usize = 5;
static EXTRA: [std::sync::OnceLock<Format>; EXTRAS] = [const { std::sync::OnceLock::new() }; EXTRAS];

/// The format of extra slot `x` (registered before its casts are).
fn extra(x: usize) -> &'static Format {
    EXTRA[x].get().expect("an extra format is set before its casts are registered")
}

/// Extra slot X's codes (one byte each; a sub-byte code in the low bits) -> lowp type
/// T, through the exact value, rounded once. A byte with bits set above a sub-byte
/// code's sign bit reads as ml_dtypes reads it: negative, with the magnitude of its
/// bits below the sign bit.
unsafe extern "C" fn cast_extra_to<const X: usize, const T: usize>(from: *mut c_void, to: *mut c_void, n: npy_intp, _fa: *mut c_void, _ta: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    let f = extra(X);
    let sign = 1u64 << (f.bits() - 1);
    let code = move |c: u64| if c >= sign { sign | (c & (sign - 1)) } else { c };
    let dec = |c: &[u32], v: &mut [f64]| c.iter().zip(v).for_each(|(c, v)| *v = f.decode(code(*c as u64)));
    // SAFETY: numpy passes n contiguous one-byte codes and n elements of type T.
    unsafe { cast_blocks(from, to, n, (1, TYPES[T].size), dec, |v, c| enc_block64(T, v, c)) }
}

/// lowp type T -> extra slot X's codes, rounded once to nearest even. NaN into a
/// format without NaN gives a zero of the other sign than the NaN's (a positive NaN
/// gives -0), as ml_dtypes' own casts do.
unsafe extern "C" fn cast_to_extra<const T: usize, const X: usize>(from: *mut c_void, to: *mut c_void, n: npy_intp, _fa: *mut c_void, _ta: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    let f = extra(X);
    let (nan_code, o) = (1u64 << (f.bits() - 1), rne()); // (-0's code)
    let enc = |v: &[f64], c: &mut [u32]| {
        for (v, c) in v.iter().zip(c) {
            *c = match v.is_nan() && !f.has_nan() {
                true if v.is_sign_negative() => 0,
                true => nan_code as u32,
                false => f.encode(*v, &o, 0) as u32,
            };
        }
    };
    // SAFETY: numpy passes n contiguous elements of type T and n one-byte codes.
    unsafe { cast_blocks(from, to, n, (TYPES[T].size, 1), |c, v| dec_block64(T, c, v), enc) }
}

type CastFn = unsafe extern "C" fn(*mut c_void, *mut c_void, npy_intp, *mut c_void, *mut c_void);

/// The casts of extra slot `x` into lowp type `t` and back.
fn extra_cast_fns(x: usize, t: usize) -> (CastFn, CastFn) {
    macro_rules! row {
        ($x:literal) => {
            [
                (cast_extra_to::<$x, 0> as CastFn, cast_to_extra::<0, $x> as CastFn),
                (cast_extra_to::<$x, 1>, cast_to_extra::<1, $x>),
                (cast_extra_to::<$x, 2>, cast_to_extra::<2, $x>),
                (cast_extra_to::<$x, 3>, cast_to_extra::<3, $x>),
                (cast_extra_to::<$x, 4>, cast_to_extra::<4, $x>),
                (cast_extra_to::<$x, 5>, cast_to_extra::<5, $x>),
                (cast_extra_to::<$x, 6>, cast_to_extra::<6, $x>),
                (cast_extra_to::<$x, 7>, cast_to_extra::<7, $x>),
                (cast_extra_to::<$x, 8>, cast_to_extra::<8, $x>),
            ]
        };
    }
    const _: () = assert!(N == 9 && EXTRAS == 5);
    let table: [[(CastFn, CastFn); N]; EXTRAS] = [row!(0), row!(1), row!(2), row!(3), row!(4)];
    table[x][t]
}

/// Casts both ways between every lowp type and `other`, a one-byte dtype holding
/// the codes of format `f` that no lowp dtype has (ml_dtypes' float8_e3m4 and its
/// other floats in extra slot `x`): through the exact value, rounded once; safe
/// where exact, as [`register_cross`].
pub fn register_extra(py: Python<'_>, x: usize, f: Format, other: *mut PyArray_Descr, other_num: c_int) -> PyResult<()> {
    if x >= EXTRAS || f.storage_bytes() != 1 || f.bits() < 2 {
        return Err(pyo3::exceptions::PyValueError::new_err("slot: an extra format is one of 5 slots of at most 8 bits"));
    }
    if *EXTRA[x].get_or_init(|| f) != f {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("slot: {x} already holds another format")));
    }
    // SAFETY: a live descriptor.
    let other_kind = unsafe { (*other).fields.kind } as u8;
    for t in 0..N {
        let me = descr(py, t);
        let (into, back) = extra_cast_fns(x, t);
        let done: PyResult<()> = (|| {
            cast_func(py, other, type_num(t), Some(into))?;
            cast_func(py, me, other_num, Some(back))?;
            if all_exact(&TYPES[t].fmt, &f) {
                can_cast(py, me, other_num)?;
            }
            if all_exact(&f, &TYPES[t].fmt) {
                can_cast(py, other, type_num(t))?;
            }
            settle(py, me, Some(if other_kind == b'b' { b'u' } else { b'b' }), other, None);
            settle(py, other, None, me, Some(if other_kind == b'O' { b'V' } else { b'O' }));
            Ok(())
        })();
        // SAFETY: a new reference, released.
        unsafe { pyo3::ffi::Py_DECREF(me as *mut pyo3::ffi::PyObject) };
        done?;
    }
    Ok(())
}

/// Bit-copy casts both ways between lowp type `t` and a dtype with the same encodings.
pub fn register_bitcopy(py: Python<'_>, t: usize, other: *mut PyArray_Descr, other_num: c_int) -> PyResult<()> {
    let f: numpy::npyffi::PyArray_VectorUnaryFunc = match TYPES[t].size {
        1 => Some(cast_bits::<1>),
        2 => Some(cast_bits::<2>),
        _ => Some(cast_bits::<4>),
    };
    let me = descr(py, t);
    cast_func(py, me, other_num, f)?;
    cast_func(py, other, type_num(t), f)?;
    can_cast(py, me, other_num)?;
    can_cast(py, other, type_num(t))?;
    Ok(())
}
