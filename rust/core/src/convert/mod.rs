//! Array kernels: encode (round into a format, return codes), decode (codes to
//! f32/f64), and round (values to values), over slices, in parallel.
//!
//! Paths, chosen once per call by [`isa`]:
//! - `Scalar`: the reference. Every element goes through the generic engine
//!   ([`Format::encode`] on f64), which is correct for every format and mode.
//! - `Sse2` / `Avx2`: for f32 and f64 input into IEEE-like formats of up to
//!   32 bits with subnormals, branch-free lanes (`fast`); on AVX2, intrinsics
//!   kernels for f32 (`avx2`: every mode, plus bf16 nearest-even and stochastic
//!   by an add-and-shift, float16 through F16C, and a cheaper nearest-even for
//!   the fp8 family), and decoding of bf16 (shift), float16 (F16C) and small
//!   formats (arithmetic); otherwise decoding of 8- and 16-bit formats through
//!   a lookup table. Outputs of [`STREAM_MIN_BYTES`] or more are written with
//!   streaming stores on AVX2.
//!
//! The fast paths are tested bit-for-bit against the reference (NaN included:
//! decoding yields the quiet NaN of the code's sign, without payload), and
//! stochastic rounding draws its bits from `(seed, element index)` on every
//! path, so results never depend on the path or the thread count.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod fast;

use std::any::TypeId;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::format::Format;
use crate::parallel::zip_chunks;
use crate::round::{Mode, RoundOpts, Rng};
use crate::{Error, Result};

/// Instruction-set paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Scalar = 1,
    Sse2 = 2,
    Avx2 = 3,
    /// AVX2 kernels, and AVX-512 ones where lowp has them: the float32 GEMM's
    /// micro-kernel (AVX-512F) and the int8 GEMM's (AVX-512BW, VNNI when present).
    Avx512 = 4,
}

impl Isa {
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Sse2 => "sse2",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    fn from_u8(v: u8) -> Option<Isa> {
        match v {
            1 => Some(Isa::Scalar),
            2 => Some(Isa::Sse2),
            3 => Some(Isa::Avx2),
            4 => Some(Isa::Avx512),
            _ => None,
        }
    }

    pub fn parse(s: &str) -> Result<Isa> {
        match s {
            "scalar" => Ok(Isa::Scalar),
            "sse2" => Ok(Isa::Sse2),
            "avx2" => Ok(Isa::Avx2),
            "avx512" => Ok(Isa::Avx512),
            _ => Err(Error::value(format!("isa: unknown {s:?}; accepted: \"scalar\", \"sse2\", \"avx2\", \"avx512\""))),
        }
    }
}

/// The best path this CPU supports.
pub fn detected_isa() -> Isa {
    static DETECTED: OnceLock<Isa> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2")
                && std::is_x86_feature_detected!("fma")
                && std::is_x86_feature_detected!("f16c")
            {
                return if std::is_x86_feature_detected!("avx512f") { Isa::Avx512 } else { Isa::Avx2 };
            }
        }
        Isa::Sse2
    })
}

static FORCED: AtomicU8 = AtomicU8::new(0);

/// The path kernels use now, for kernels with no AVX-512 version: [`isa_level`]
/// at most [`Isa::Avx2`].
pub fn isa() -> Isa {
    isa_level().min(Isa::Avx2)
}

/// The path the CPU and the settings allow now: `LOWP_ISA` (scalar, sse2,
/// avx2, avx512) or [`set_isa`] may lower it; it never exceeds what the CPU
/// supports. Kernels with an AVX-512 version use it at [`Isa::Avx512`].
pub fn isa_level() -> Isa {
    if let Some(i) = Isa::from_u8(FORCED.load(Ordering::Relaxed)) {
        return i;
    }
    static ENV: OnceLock<Option<Isa>> = OnceLock::new();
    let env = *ENV.get_or_init(|| std::env::var("LOWP_ISA").ok().and_then(|s| Isa::parse(s.trim()).ok()));
    match env {
        Some(i) => i.min(detected_isa()),
        None => detected_isa(),
    }
}

/// Force a path (`None` returns to the default). Errors if the CPU lacks it.
pub fn set_isa(i: Option<Isa>) -> Result<()> {
    match i {
        Some(i) if i > detected_isa() => Err(Error::value(format!(
            "isa: {:?} is not supported by this CPU (best: {:?})",
            i.name(),
            detected_isa().name()
        ))),
        Some(i) => {
            FORCED.store(i as u8, Ordering::Relaxed);
            Ok(())
        }
        None => {
            FORCED.store(0, Ordering::Relaxed);
            Ok(())
        }
    }
}

/// Unsigned storage of one encoding.
pub trait Code: Copy + Send + Sync + Default + 'static {
    const BYTES: usize;
    fn from_u64(v: u64) -> Self;
    /// Truncating conversion from a 32-bit code.
    fn from_u32(v: u32) -> Self;
    fn to_u64(self) -> u64;
}

macro_rules! impl_code {
    ($($t:ty),*) => {$(
        impl Code for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn from_u64(v: u64) -> Self { v as $t }
            #[inline(always)]
            fn from_u32(v: u32) -> Self { v as $t }
            #[inline(always)]
            fn to_u64(self) -> u64 { self as u64 }
        }
    )*};
}
impl_code!(u8, u16, u32, u64);

/// Real input/output element types.
pub trait Real: Copy + Send + Sync + Default + 'static {
    /// Random bits per stochastic decision that make probabilities exact at
    /// this type's resolution (for values in the target's normal range).
    const DEFAULT_RBITS: u32;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

impl Real for f32 {
    const DEFAULT_RBITS: u32 = 32;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Real for f64 {
    const DEFAULT_RBITS: u32 = 64;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
}

/// Below this many elements a call stays on the calling thread.
pub const MIN_CHUNK: usize = 1 << 16;

/// Outputs of at least this many bytes are written with streaming stores on
/// the AVX2 path: they would not stay in cache anyway, and streaming saves
/// reading the (often freshly mapped) destination before writing it.
pub const STREAM_MIN_BYTES: usize = 8 << 20;

/// Validate options against a format and the storage width.
pub fn check(fmt: &Format, opts: &RoundOpts, code_bytes: usize) -> Result<()> {
    if !(1..=64).contains(&opts.rbits) {
        return Err(Error::value(format!("rbits: must be in 1..=64, got {}", opts.rbits)));
    }
    if code_bytes < fmt.storage_bytes() {
        return Err(Error::type_(format!(
            "out: a {}-bit format needs at least {}-byte codes, got {code_bytes}",
            fmt.bits(),
            fmt.storage_bytes()
        )));
    }
    Ok(())
}

/// What a kernel saw that the caller may want to report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// A NaN went into a format that has no NaN (it was encoded as 0).
    pub nan_unrepresentable: bool,
}

#[inline(always)]
fn reference_encode_one<S: Real>(fmt: &Format, x: S, opts: &RoundOpts, rng: &Rng, i: u64) -> u64 {
    let rand = if opts.mode == Mode::Stochastic { rng.bits(i, opts.rbits) } else { 0 };
    fmt.encode(x.to_f64(), opts, rand)
}

/// Round `src` into `fmt`, writing codes. `index0` is the index of `src[0]` in
/// the whole array (it keys stochastic rounding).
pub fn encode<S: Real, C: Code>(fmt: &Format, src: &[S], dst: &mut [C], opts: &RoundOpts, index0: u64) -> Result<Report> {
    check(fmt, opts, C::BYTES)?;
    if src.len() != dst.len() {
        return Err(Error::value(format!("out: length {} does not match x's {}", dst.len(), src.len())));
    }
    let rng = Rng::new(opts.key);
    let path = isa();
    let mut fast = fast::EncodePlan::new::<S>(fmt, opts, path);
    if let Some(plan) = &mut fast {
        plan.nt = dst.len() * C::BYTES >= STREAM_MIN_BYTES;
    }
    let fast64 = fast::EncodePlan64::new::<S>(fmt, opts, path);
    let posit = fast::PositPlan::new::<S>(fmt, opts, path);
    zip_chunks(src, dst, MIN_CHUNK, |start, s, d| {
        let i0 = index0 + start as u64;
        if let Some(plan) = &fast {
            // SAFETY: S is f32 whenever a plan exists (EncodePlan::new checks).
            let s32 = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len()) };
            plan.run(s32, d, i0);
        } else if let Some(plan) = &posit {
            // SAFETY: S is f32 whenever a plan exists (PositPlan::new checks).
            let s32 = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len()) };
            plan.run(s32, d, i0);
        } else if let Some(plan) = &fast64 {
            // SAFETY: S is f64 whenever a plan exists (EncodePlan64::new checks).
            let s64 = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f64, s.len()) };
            plan.run(s64, d, i0);
        } else {
            for (j, (x, y)) in s.iter().zip(d.iter_mut()).enumerate() {
                *y = C::from_u64(reference_encode_one(fmt, *x, opts, &rng, i0 + j as u64));
            }
        }
    });
    let mut report = Report::default();
    if !fmt.has_nan() {
        report.nan_unrepresentable = src.iter().any(|x| x.to_f64().is_nan());
    }
    Ok(report)
}

/// Decode codes to values (exact when the format fits in `D`, else rounded to nearest even).
pub fn decode<C: Code, D: Real>(fmt: &Format, src: &[C], dst: &mut [D]) -> Result<()> {
    if src.len() != dst.len() {
        return Err(Error::value(format!("out: length {} does not match bits' {}", dst.len(), src.len())));
    }
    let path = isa();
    #[cfg(target_arch = "x86_64")]
    if path == Isa::Avx2 && TypeId::of::<D>() == TypeId::of::<f32>() && C::BYTES <= 2 {
        if let Some(plan) = fast::DecodePlan::new(fmt) {
            // SAFETY: D is f32 (checked above).
            let d32 = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut f32, dst.len()) };
            let nt = std::mem::size_of_val(d32) >= STREAM_MIN_BYTES;
            zip_chunks(src, d32, MIN_CHUNK, |_, s, d| match &plan {
                // SAFETY (all three): the Avx2 path is only chosen when the CPU has AVX2, FMA and F16C.
                fast::DecodePlan::Bf16 => unsafe { avx2::decode_bf16(s, d, nt) },
                fast::DecodePlan::F16 => unsafe { avx2::decode_f16(s, d, nt) },
                fast::DecodePlan::Lanes(p) => unsafe { avx2::decode(p, s, d, nt) },
            });
            return Ok(());
        }
    }
    if path >= Isa::Sse2 && *fmt == Format::Float(crate::format::named::BFLOAT16) && TypeId::of::<D>() == TypeId::of::<f32>() {
        // SAFETY: D is f32 (checked above).
        let d32 = unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut f32, dst.len()) };
        let src: &[C] = src;
        zip_chunks(src, d32, MIN_CHUNK, |_, s, d| fast::decode_bf16(s, d));
    } else if path >= Isa::Sse2 && fmt.bits() <= 16 && src.len() >= 1024 {
        let lut = fast::decode_table::<D>(fmt);
        zip_chunks(src, dst, MIN_CHUNK, |_, s, d| fast::decode_lut(&lut, s, d, path));
    } else {
        zip_chunks(src, dst, MIN_CHUNK, |_, s, d| {
            for (c, y) in s.iter().zip(d.iter_mut()) {
                *y = D::from_f64(fmt.decode(c.to_u64()));
            }
        });
    }
    Ok(())
}

/// Round values to values of `fmt` (`decode(encode(x))`), in the input's type.
pub fn round<S: Real>(fmt: &Format, src: &[S], dst: &mut [S], opts: &RoundOpts, index0: u64) -> Result<Report> {
    check(fmt, opts, 8)?;
    if src.len() != dst.len() {
        return Err(Error::value(format!("out: length {} does not match x's {}", dst.len(), src.len())));
    }
    let rng = Rng::new(opts.key);
    let path = isa();
    // The lanes decode into f32: only formats whose largest value is an f32
    // (wider ones take the engine, whose decoding overflows to infinity).
    let wide = matches!(fmt, Format::Float(f) if f.max_value() > f32::MAX as f64);
    let mut fast = if wide { None } else { fast::EncodePlan::new::<S>(fmt, opts, path) };
    if let Some(plan) = &mut fast {
        plan.nt = std::mem::size_of_val(dst) >= STREAM_MIN_BYTES;
    }
    let fast64 = fast::EncodePlan64::new::<S>(fmt, opts, path);
    // Posits of up to 16 bits: the fast encoder, then a decoding table.
    let posit = if fmt.bits() <= 16 { fast::PositPlan::new::<S>(fmt, opts, path) } else { None };
    let lut = posit.as_ref().map(|_| fast::decode_table::<S>(fmt));
    zip_chunks(src, dst, MIN_CHUNK, |start, s, d| {
        let i0 = index0 + start as u64;
        if let (Some(plan), Some(lut)) = (&posit, &lut) {
            // SAFETY: S is f32 whenever a plan exists (PositPlan::new checks).
            let s32 = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len()) };
            let mut codes = [0u16; 1024];
            for (b, (sb, db)) in s32.chunks(1024).zip(d.chunks_mut(1024)).enumerate() {
                let c = &mut codes[..sb.len()];
                plan.run(sb, c, i0 + (b * 1024) as u64);
                for (y, &k) in db.iter_mut().zip(c.iter()) {
                    *y = lut[k as usize];
                }
            }
        } else if let Some(plan) = &fast {
            // SAFETY: S is f32 whenever a plan exists (EncodePlan::new checks).
            let s32 = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f32, s.len()) };
            let d32 = unsafe { std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut f32, d.len()) };
            plan.run_round(s32, d32, i0);
        } else if let Some(plan) = &fast64 {
            // SAFETY: S is f64 whenever a plan exists (EncodePlan64::new checks).
            let s64 = unsafe { std::slice::from_raw_parts(s.as_ptr() as *const f64, s.len()) };
            let d64 = unsafe { std::slice::from_raw_parts_mut(d.as_mut_ptr() as *mut f64, d.len()) };
            plan.run_round(s64, d64, i0);
        } else {
            for (j, (x, y)) in s.iter().zip(d.iter_mut()).enumerate() {
                let c = reference_encode_one(fmt, *x, opts, &rng, i0 + j as u64);
                *y = S::from_f64(fmt.decode(c));
            }
        }
    });
    let mut report = Report::default();
    if !fmt.has_nan() {
        report.nan_unrepresentable = src.iter().any(|x| x.to_f64().is_nan());
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
