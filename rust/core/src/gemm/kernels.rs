//! Micro-kernels and the packing routines that feed them.
//!
//! A kernel computes an `MR x NR` tile of C from one packed A strip (`kc` steps
//! of `MR` values) and one packed B strip (`kc` steps of `NR` values). Packing
//! decodes every input format to the kernel's element type, so one f32 kernel
//! serves bf16, fp16, fp8, posit8/16, int8 and f32 inputs alike.

use super::{Dec, Operand};
use crate::format::{named, Format};

/// A micro-kernel, its packed element type, output type and block sizes.
pub(crate) trait Kernel: Sync {
    /// Element of the packed strips.
    type P: Copy + Default + Send + Sync;
    /// Element of C.
    type C: Copy + Default + Send + Sync + std::ops::Add<Output = Self::C>;
    const MR: usize;
    const NR: usize;
    /// Rows of A packed at once (a multiple of MR; the A block lives in L2).
    const MC: usize;
    /// Depth of one packed block (one A and one B strip together live in L1).
    const KC: usize;
    /// Columns of B packed at once (a multiple of NR; the B block lives in L3).
    const NC: usize;

    /// Elements of one packed strip of `w` lines and depth `kc`.
    fn strip_len(w: usize, kc: usize) -> usize {
        w * kc
    }

    /// Pack `nv <= w` lines (rows of A, or columns of B) of depth `kc`: element
    /// (line l, depth p) is at element offset `base + l*sl + p*sk` of `op`.
    /// Lines `nv..w` are zero.
    ///
    /// # Safety
    /// All those elements must lie inside `op`.
    unsafe fn pack(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [Self::P]);

    /// How [`Kernel::run_direct`] can read B's rows in place (without packing
    /// them), for a B whose rows are contiguous: `Some(code)` ([`DIRECT_BF16`],
    /// [`DIRECT_F16`]), or `None`.
    fn direct(&self, _b: &Operand) -> Option<u8> {
        None
    }

    /// [`Kernel::run`] on B's rows read in place: the `NR` values of step p at `b +
    /// p * bstride` bytes, decoded as `code` says ([`Kernel::direct`]); the same
    /// bits as packing them first.
    ///
    /// # Safety
    /// As [`Kernel::run`], with `NR` values of B readable at each of the `kc` rows.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_direct(&self, _code: u8, _kc: usize, _a: *const Self::P, _b: *const u8, _bstride: isize, _c: *mut Self::C, _rs: isize, _cs: isize, _mr: usize, _nr: usize, _accumulate: bool) {
        unreachable!("direct() returned None")
    }

    /// How [`Kernel::run_a_rows`] can read A's rows in place (without packing
    /// them), for an A whose rows are contiguous: `Some(code)` ([`A_ROWS_SAME`]:
    /// stored as the packed element type; [`A_ROWS_BF16`], [`A_ROWS_F16`]: bf16 or fp16 codes into f32),
    /// or `None`.
    fn a_rows(&self, _a: &Operand) -> Option<u8> {
        None
    }

    /// [`Kernel::run`] on `MR` rows of A read in place at byte address `a`,
    /// `lda` elements apart, decoded as `code` says (`mr` = `MR`;
    /// [`Kernel::a_rows`]): the same bits as packing them first.
    ///
    /// # Safety
    /// As [`Kernel::run`], with `kc` elements readable in each of the `MR` rows at `a`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_a_rows(&self, _code: u8, _kc: usize, _a: *const u8, _lda: isize, _b: *const Self::P, _c: *mut Self::C, _rs: isize, _cs: isize, _mr: usize, _nr: usize, _accumulate: bool) {
        unreachable!("a_rows() returned None")
    }

    /// `C[tile] (+)= A_strip * B_strip`, writing only the top-left `mr x nr`.
    ///
    /// # Safety
    /// `a`, `b` point at packed strips of depth `kc`; `c` with strides `rs`,
    /// `cs` addresses a writable `mr x nr` tile.
    #[allow(clippy::too_many_arguments)]
    unsafe fn run(&self, kc: usize, a: *const Self::P, b: *const Self::P, c: *mut Self::C, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool);
}

/// f32 / f64 element of the real kernels.
pub(crate) trait Real: Copy + Default + PartialEq + Send + Sync + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {
    fn from_f32(x: f32) -> Self;
    fn from_f64(x: f64) -> Self;
    fn madd(self, b: Self, c: Self) -> Self;
    /// The default quiet NaN (positive, only the quiet bit in its payload).
    const NAN: Self;
    /// The value, or [`Real::NAN`] in place of any NaN.
    #[inline(always)]
    #[allow(clippy::eq_op)]
    fn quiet(self) -> Self {
        if self != self {
            Self::NAN
        } else {
            self
        }
    }
}

/// Does the compilation target fuse multiply-adds in hardware (aarch64; x86-64
/// only when built for it, which lowp never is: its AVX2 kernels enable FMA per
/// function)? Without it `mul_add` is a call of libm's `fma`.
const HW_FMA: bool = cfg!(any(target_arch = "aarch64", target_feature = "fma"));

impl Real for f32 {
    const NAN: Self = f32::NAN;
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    /// `self * b + c` rounded once, as an FMA (the portable kernels then give the
    /// AVX2 kernels' bits). Without FMA hardware: the product is exact in f64, the sum
    /// is rounded to odd there (two-sum), and rounding that into f32 (29 bits fewer)
    /// rounds the exact value once; branch-free, so that it vectorizes. (Calling
    /// libm's `fmaf` per element ran three times as slow again.)
    #[inline(always)]
    fn madd(self, b: Self, c: Self) -> Self {
        if HW_FMA {
            return self.mul_add(b, c);
        }
        let p = self as f64 * b as f64;
        let cd = c as f64;
        let s = p + cd;
        let bv = s - p;
        let err = (p - (s - bv)) + (cd - bv);
        // Inexact (err nonzero; NaN only from infinite operands, where s is not
        // finite): s truncated (one step down in magnitude where the exact value lies
        // below |s|), then its last bit set.
        let inexact = err != 0.0 && s.is_finite();
        let below = inexact && (err < 0.0) != (s < 0.0);
        f64::from_bits(s.to_bits().wrapping_sub(below as u64) | inexact as u64) as f32
    }
}

impl Real for f64 {
    const NAN: Self = f64::NAN;
    #[inline(always)]
    fn from_f32(x: f32) -> Self {
        x as f64
    }
    #[inline(always)]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline(always)]
    fn madd(self, b: Self, c: Self) -> Self {
        self.mul_add(b, c)
    }
}

/// The packing loop for one element getter: `dst[p*w + l] = get(base + l*sl + p*sk)`.
/// Reads run along whichever of the two strides is 1.
///
/// # Safety
/// `get` must be valid at every offset visited.
#[inline(always)]
unsafe fn pack_lines<T: Copy + Default>(get: impl Fn(isize) -> T, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [T]) {
    assert!(dst.len() >= w * kc && nv <= w);
    let d = dst.as_mut_ptr();
    // SAFETY: indices p*w + l < kc*w <= dst.len(); offsets are valid per the contract.
    unsafe {
        if sk == 1 && sl != 1 && matches!(w, 6 | 8 | 12 | 16 | 32) {
            // Lines along the depth: decode a block of each line with contiguous
            // (vectorizable) reads, then interleave them. Six lines: A row-major
            // (twelve for the AVX-512 tile); sixteen: the emulated paths' strips of a B whose columns are
            // contiguous; eight: their f64 tiles'; 32: the vector products'
            // strips of such a B.
            pack_across_w(&EachOf(get), w, base, sl, nv, kc, d);
            return;
        } else if sk == 1 && sl != 1 {
            for l in 0..nv {
                let row = base + l as isize * sl;
                for p in 0..kc {
                    *d.add(p * w + l) = get(row + p as isize);
                }
            }
        } else if sl == 1 && nv == w && (w == 16 || w == 8) {
            // Whole strips of contiguous lines (a row-major B's): a decode-copy of a
            // fixed width per step, which compiles to straight vector code.
            for p in 0..kc {
                let row = base + p as isize * sk;
                let dp = d.add(p * w);
                if w == 16 {
                    for l in 0..16 {
                        *dp.add(l) = get(row + l as isize);
                    }
                } else {
                    for l in 0..8 {
                        *dp.add(l) = get(row + l as isize);
                    }
                }
            }
        } else {
            for p in 0..kc {
                let row = base + p as isize * sk;
                let dp = d.add(p * w);
                if sl == 1 {
                    // Contiguous lines: a plain (vectorizable) decode-copy.
                    for l in 0..nv {
                        *dp.add(l) = get(row + l as isize);
                    }
                } else {
                    for l in 0..nv {
                        *dp.add(l) = get(row + l as isize * sl);
                    }
                }
            }
        }
        if nv < w {
            for p in 0..kc {
                for l in nv..w {
                    *d.add(p * w + l) = T::default();
                }
            }
        }
    }
}

/// Depth steps of [`pack_across`]'s blocks.
const PBLK: usize = 64;

/// `f(l0, q0)` for the `n x n` squares of a block of `w` lines by PBLK steps.
#[inline(always)]
fn squares(w: usize, n: usize, mut f: impl FnMut(usize, usize)) {
    for l0 in (0..w).step_by(n) {
        for q0 in (0..PBLK).step_by(n) {
            f(l0, q0)
        }
    }
}

/// `d[q*w + l] = t[l*PBLK + q]` for l < w (a multiple of 8) and q < PBLK:
/// [`pack_across`]'s interleave of a block of 4-byte values, in 8 x 8
/// transposes ([`transpose8`]: moves and shuffles, every bit pattern kept).
///
/// # Safety
/// The CPU must support avx2; `t` holds `w * PBLK` values and `d` room for as many.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn interleave32_avx2(t: *const f32, w: usize, d: *mut f32) {
    use std::arch::x86_64::*;
    squares(w, 8, |l0, q0| {
        // SAFETY: the offsets stay inside t and d per the contract.
        unsafe {
            let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(t.add((l0 + i) * PBLK + q0)));
            // Column j of the 8 x 8 block (lines l0.., step q0 + j).
            let c = transpose8(r);
            for (j, v) in c.into_iter().enumerate() {
                _mm256_storeu_ps(d.add((q0 + j) * w + l0), v);
            }
        }
    })
}

/// The 4 x 4 transpose of `v` (row r, lane q) in registers: `out[q][r] = v[r][q]`.
///
/// # Safety
/// The CPU must support avx.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn transpose4_pd(v: [std::arch::x86_64::__m256d; 4]) -> [std::arch::x86_64::__m256d; 4] {
    use std::arch::x86_64::*;
    // SAFETY: avx per the caller.
    unsafe {
        let (t0, t1) = (_mm256_unpacklo_pd(v[0], v[1]), _mm256_unpackhi_pd(v[0], v[1]));
        let (t2, t3) = (_mm256_unpacklo_pd(v[2], v[3]), _mm256_unpackhi_pd(v[2], v[3]));
        [
            _mm256_permute2f128_pd::<0x20>(t0, t2),
            _mm256_permute2f128_pd::<0x20>(t1, t3),
            _mm256_permute2f128_pd::<0x31>(t0, t2),
            _mm256_permute2f128_pd::<0x31>(t1, t3),
        ]
    }
}

/// [`interleave32_avx2`] for 8-byte values, `w` a multiple of 4, in 4 x 4 transposes.
///
/// # Safety
/// As [`interleave32_avx2`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn interleave64_avx2(t: *const f64, w: usize, d: *mut f64) {
    use std::arch::x86_64::*;
    squares(w, 4, |l0, q0| {
        // SAFETY: the offsets stay inside t and d per the contract.
        unsafe {
            let r: [__m256d; 4] = std::array::from_fn(|i| _mm256_loadu_pd(t.add((l0 + i) * PBLK + q0)));
            let c = transpose4_pd([r[0], r[1], r[2], r[3]]);
            for (j, v) in c.into_iter().enumerate() {
                _mm256_storeu_pd(d.add((q0 + j) * w + l0), v);
            }
        }
    })
}

/// [`interleave32_avx2`] for six lines (the f32 kernel's A strips of a
/// row-major A): per 8 steps, the 4 x 4 transposes inside the halves of lines
/// 0..4 and the pairs of lines 4 and 5, stored as 16 and 8 bytes per step
/// (nothing written past the block).
///
/// # Safety
/// As [`interleave32_avx2`], with `w` = 6.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn interleave32x6_avx2(t: *const f32, d: *mut f32) {
    use std::arch::x86_64::*;
    for q0 in (0..PBLK).step_by(8) {
        // SAFETY: the offsets stay inside t (6 * PBLK values) and d (PBLK * 6).
        unsafe {
            let r: [__m256; 6] = std::array::from_fn(|i| _mm256_loadu_ps(t.add(i * PBLK + q0)));
            // u[j]: lines 0..4 at step j (low half) and j + 4 (high half).
            let u = transpose4_halves([r[0], r[1], r[2], r[3]]);
            // Lines 4 and 5: steps 0, 1 | 4, 5 and 2, 3 | 6, 7.
            let (p0, p1) = (_mm256_castps_pd(_mm256_unpacklo_ps(r[4], r[5])), _mm256_castps_pd(_mm256_unpackhi_ps(r[4], r[5])));
            let pairs = [_mm256_castpd256_pd128(p0), _mm256_castpd256_pd128(p1), _mm256_extractf128_pd::<1>(p0), _mm256_extractf128_pd::<1>(p1)];
            for j in 0..8 {
                let quad = if j < 4 { _mm256_castps256_ps128(u[j]) } else { _mm256_extractf128_ps::<1>(u[j - 4]) };
                let dq = d.add((q0 + j) * 6);
                _mm_storeu_ps(dq, quad);
                let pr = pairs[j / 2];
                if j % 2 == 0 {
                    _mm_storel_pd(dq.add(4) as *mut f64, pr);
                } else {
                    _mm_storeh_pd(dq.add(4) as *mut f64, pr);
                }
            }
        }
    }
}

/// [`interleave64_avx2`] for six lines (the f64 kernel's A strips of a
/// row-major A): per 4 steps, the 4 x 4 transpose of lines 0..4 and the pairs
/// of lines 4 and 5, stored as 32 and 16 bytes per step.
///
/// # Safety
/// As [`interleave64_avx2`], with `w` = 6.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn interleave64x6_avx2(t: *const f64, d: *mut f64) {
    use std::arch::x86_64::*;
    for q0 in (0..PBLK).step_by(4) {
        // SAFETY: the offsets stay inside t (6 * PBLK values) and d (PBLK * 6).
        unsafe {
            let r: [__m256d; 6] = std::array::from_fn(|i| _mm256_loadu_pd(t.add(i * PBLK + q0)));
            let c = transpose4_pd([r[0], r[1], r[2], r[3]]);
            // Lines 4 and 5: steps 0 | 2 and 1 | 3.
            let (lo, hi) = (_mm256_unpacklo_pd(r[4], r[5]), _mm256_unpackhi_pd(r[4], r[5]));
            let pairs = [_mm256_castpd256_pd128(lo), _mm256_castpd256_pd128(hi), _mm256_extractf128_pd::<1>(lo), _mm256_extractf128_pd::<1>(hi)];
            for j in 0..4 {
                let dq = d.add((q0 + j) * 6);
                _mm256_storeu_pd(dq, c[j]);
                _mm_storeu_pd(dq.add(4), pairs[j]);
            }
        }
    }
}

/// Where [`pack_across`] reads its lines: a run of values at consecutive offsets.
trait Runs<T> {
    /// `out[q]` = the value at offset `row + q`, for every q < `out.len()`.
    ///
    /// # Safety
    /// Those offsets must be valid for the source.
    unsafe fn run(&self, row: isize, out: &mut [std::mem::MaybeUninit<T>]);
}

/// [`Runs`] from an element getter, one value at a time.
struct EachOf<F>(F);

impl<T, F: Fn(isize) -> T> Runs<T> for EachOf<F> {
    #[inline(always)]
    unsafe fn run(&self, row: isize, out: &mut [std::mem::MaybeUninit<T>]) {
        for (q, x) in out.iter_mut().enumerate() {
            x.write((self.0)(row + q as isize));
        }
    }
}

/// [`Runs`] of 8-bit or float16 codes at `p`, decoded 8 at a time by
/// `decode8(codes) -> (values, special)` (the low 8 or 16 bytes of `codes`
/// loaded from the run; `special` nonzero where a lane needs the scalar
/// decoding), the rest and the special lanes by `one(offset)`, which
/// decodes (and quiets) exactly as [`pack_real`]'s element getter does.
#[cfg(target_arch = "x86_64")]
struct CodeRuns<D, O> {
    p: *const u8,
    /// Bytes per code: 1 or 2.
    bytes: isize,
    decode8: D,
    one: O,
}

#[cfg(target_arch = "x86_64")]
impl<T: Real, D, O> Runs<T> for CodeRuns<D, O>
where
    D: Fn(std::arch::x86_64::__m128i) -> (std::arch::x86_64::__m256, i32),
    O: Fn(isize) -> T,
{
    /// Needs avx2 (and what `decode8` needs) in the caller.
    #[inline(always)]
    unsafe fn run(&self, row: isize, out: &mut [std::mem::MaybeUninit<T>]) {
        use std::arch::x86_64::*;
        let n = out.len();
        let o = out.as_mut_ptr() as *mut T;
        let mut q = 0;
        // SAFETY: codes row..row + n are readable per the caller; out holds n values.
        unsafe {
            while q + 8 <= n {
                let at = self.p.offset((row + q as isize) * self.bytes);
                let raw = if self.bytes == 1 { _mm_loadl_epi64(at as *const __m128i) } else { _mm_loadu_si128(at as *const __m128i) };
                let (v, special) = (self.decode8)(raw);
                if std::mem::size_of::<T>() == 4 {
                    _mm256_storeu_ps(o.add(q) as *mut f32, v);
                } else {
                    _mm256_storeu_pd(o.add(q) as *mut f64, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
                    _mm256_storeu_pd((o.add(q) as *mut f64).add(4), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)));
                }
                if special != 0 {
                    for i in q..q + 8 {
                        *o.add(i) = (self.one)(row + i as isize);
                    }
                }
                q += 8;
            }
            for i in q..n {
                *o.add(i) = (self.one)(row + i as isize);
            }
        }
    }
}

/// [`pack_real`] of `w` (6, 8, 12, 16 or 32) lines along the depth (`sk` = 1) of
/// float16 codes or of float8_e5m2, float8_e4m3fn and [`Place8`] formats:
/// [`pack_across`] with each line's codes decoded 8 at a time (float16 by
/// `vcvtph2ps`, the float8 codes as [`fp8x8_avx2`] and [`Place8::decode8`]
/// decode them), NaN codes and the last few of a run one at a time as
/// [`pack_real`] decodes them (`vcvtph2ps` would quiet a signaling NaN, and
/// the float8 decodings read NaN codes as numbers). A row-major A strip of
/// these formats went through one table lookup or conversion a value. Returns
/// false, having done nothing, for other operands and widths.
///
/// # Safety
/// As [`pack_real`] with `sk` = 1; the CPU must support avx2, fma and f16c.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_across_codes<T: Real, const Q: bool>(op: &Operand, base: isize, sl: isize, nv: usize, w: usize, kc: usize, d: *mut T) -> bool {
    use std::arch::x86_64::*;
    let p = op.ptr;
    let q = quiet_if::<T, Q>;
    macro_rules! across {
        ($bytes:expr, $decode8:expr, $one:expr) => {{
            let runs = CodeRuns { p, bytes: $bytes, decode8: $decode8, one: $one };
            // SAFETY: forwarded contract (d holds kc * w values).
            unsafe { pack_across_w(&runs, w, base, sl, nv, kc, d) }
        }};
    }
    if !matches!(w, 6 | 8 | 12 | 16 | 32) {
        return false;
    }
    // SAFETY (the decoders): avx2 and f16c are this function's; the offsets are
    // the caller's.
    match &op.dec {
        Dec::F16 => across!(
            2,
            |x: __m128i| (_mm256_cvtph_ps(x), _mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(x, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00)))),
            |o: isize| unsafe { q(T::from_f32(super::f16_to_f32(*(p as *const u16).offset(o)))) }
        ),
        Dec::Lut8(t) if fp8_kind(op.format()).is_some() => {
            let t = t.as_ptr();
            let one = |o: isize| unsafe { q(T::from_f32(*t.add(*p.offset(o) as usize))) };
            // NaN codes: magnitude above 0x7c (e5m2) or 0x7e (e4m3fn).
            let nan = |x: __m128i, lo: i16| _mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(x, _mm_set1_epi16(0x7f)), _mm_set1_epi16(lo)));
            if fp8_kind(op.format()) == Some(FP8_E5M2) {
                across!(1, |x: __m128i| {
                    let (v, c) = unsafe { fp8x8_of::<false>(x) };
                    (v, nan(c, 0x7c))
                }, one)
            } else {
                across!(1, |x: __m128i| {
                    let (v, c) = unsafe { fp8x8_of::<true>(x) };
                    (v, nan(c, 0x7e))
                }, one)
            }
        }
        Dec::Lut8(_) => {
            let Some(p8) = place8(&op.dec, op.format()) else { return false };
            let lut = p8.lut.as_ptr();
            across!(
                1,
                |x: __m128i| unsafe { (p8.decode8(x), _mm_movemask_epi8(p8.specials8(x))) },
                |o: isize| unsafe { q(T::from_f32(*lut.add(*p.offset(o) as usize))) }
            )
        }
        _ => return false,
    }
    true
}

/// [`pack_across`] for `w` lines, 6, 8, 12, 16 or 32 (32 for any other).
///
/// # Safety
/// As [`pack_across`].
#[inline(always)]
unsafe fn pack_across_w<T: Copy + Default, R: Runs<T>>(runs: &R, w: usize, base: isize, sl: isize, nv: usize, kc: usize, d: *mut T) {
    // SAFETY: forwarded contract.
    unsafe {
        match w {
            6 => pack_across::<T, 6, R>(runs, base, sl, nv, kc, d),
            8 => pack_across::<T, 8, R>(runs, base, sl, nv, kc, d),
            12 => pack_across::<T, 12, R>(runs, base, sl, nv, kc, d),
            16 => pack_across::<T, 16, R>(runs, base, sl, nv, kc, d),
            _ => pack_across::<T, 32, R>(runs, base, sl, nv, kc, d),
        }
    }
}

/// [`pack_lines`] of `W` lines along the depth (`sk` = 1): a block of each
/// line decoded with contiguous (vectorizable) reads, then the lines
/// interleaved, `d[p*W + l]`, zeros in lines `nv..W`; whole blocks of 6, 8 or
/// 16 lines of 4-byte values, or of 4, 6 or 8 of 8-byte values, in AVX2
/// transposes where the SIMD paths are on.
///
/// # Safety
/// `d` holds `kc * W` values; the offsets are valid per [`pack_lines`]' contract.
#[inline(always)]
unsafe fn pack_across<T: Copy + Default, const W: usize, R: Runs<T>>(runs: &R, base: isize, sl: isize, nv: usize, kc: usize, d: *mut T) {
    // Not zeroed first (a call on a small product would spend more on that
    // than on its values): each block writes the first pn values of every
    // line before they are read.
    let mut tmp = [[std::mem::MaybeUninit::<T>::uninit(); PBLK]; W];
    for p0 in (0..kc).step_by(PBLK) {
        let pn = PBLK.min(kc - p0);
        for (l, t) in tmp.iter_mut().enumerate() {
            if l < nv {
                // SAFETY: the line's values p0..p0 + pn are valid offsets per the caller.
                unsafe { runs.run(base + l as isize * sl + p0 as isize, &mut t[..pn]) };
            } else {
                t[..pn].fill(std::mem::MaybeUninit::new(T::default()));
            }
        }
        #[cfg(target_arch = "x86_64")]
        if pn == PBLK && super::simd() {
            let (t, dp) = (tmp.as_ptr() as *const u8, unsafe { d.add(p0 * W) } as *mut u8);
            if std::mem::size_of::<T>() == 4 && W == 6 {
                // SAFETY: as below, for six lines.
                unsafe { interleave32x6_avx2(t as *const f32, dp as *mut f32) };
                continue;
            }
            if std::mem::size_of::<T>() == 8 && W == 6 {
                // SAFETY: as below, for six lines of 8-byte values.
                unsafe { interleave64x6_avx2(t as *const f64, dp as *mut f64) };
                continue;
            }
            if std::mem::size_of::<T>() == 4 && W.is_multiple_of(8) {
                // SAFETY: avx2 (simd); every line's PBLK values were written above, and
                // the block's PBLK * W values of d lie inside it (p0 + PBLK <= kc).
                unsafe { interleave32_avx2(t as *const f32, W, dp as *mut f32) };
                continue;
            }
            if std::mem::size_of::<T>() == 8 && W.is_multiple_of(4) {
                // SAFETY: as above, for 8-byte values.
                unsafe { interleave64_avx2(t as *const f64, W, dp as *mut f64) };
                continue;
            }
        }
        for q in 0..pn {
            // SAFETY: (p0 + q) * W + l < kc * W, inside d per the caller.
            let dq = unsafe { d.add((p0 + q) * W) };
            for (l, t) in tmp.iter().enumerate() {
                // SAFETY: written above (q < pn); dq + l inside d.
                unsafe { *dq.add(l) = t[q].assume_init() };
            }
        }
    }
}

/// `x`, quieted ([`Real::quiet`]) when `Q`.
#[inline(always)]
fn quiet_if<T: Real, const Q: bool>(x: T) -> T {
    if Q {
        x.quiet()
    } else {
        x
    }
}

/// Pack into f32/f64, decoding the operand's storage; with `Q`, every NaN
/// packed as [`Real::NAN`] ([`pack_real_any`]).
///
/// # Safety
/// As [`Kernel::pack`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pack_real<T: Real, const Q: bool>(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [T]) {
    let p = op.ptr;
    let q = quiet_if::<T, Q>;
    // Lines along the depth of float16 or float8 codes: decoded 8 at a time.
    #[cfg(target_arch = "x86_64")]
    if sk == 1 && sl != 1 && matches!(op.dec, Dec::F16 | Dec::Lut8(_)) && super::simd() {
        assert!(dst.len() >= w * kc && nv <= w);
        // SAFETY: forwarded contract; simd() implies avx2, fma and f16c.
        if unsafe { pack_across_codes::<T, Q>(op, base, sl, nv, w, kc, dst.as_mut_ptr()) } {
            return;
        }
    }
    // SAFETY (all arms): offsets are inside the operand per the caller's contract.
    unsafe {
        match &op.dec {
            Dec::F32 => pack_lines(|o| q(T::from_f32(*(p as *const f32).offset(o))), base, sl, sk, nv, w, kc, dst),
            Dec::F64 => pack_lines(|o| q(T::from_f64(*(p as *const f64).offset(o))), base, sl, sk, nv, w, kc, dst),
            Dec::I8 => pack_lines(|o| T::from_f32(*(p as *const i8).offset(o) as f32), base, sl, sk, nv, w, kc, dst),
            // bf16 is the upper half of an f32.
            Dec::Bf16 => pack_lines(|o| q(T::from_f32(f32::from_bits((*(p as *const u16).offset(o) as u32) << 16))), base, sl, sk, nv, w, kc, dst),
            Dec::F16 => pack_lines(|o| q(T::from_f32(super::f16_to_f32(*(p as *const u16).offset(o)))), base, sl, sk, nv, w, kc, dst),
            // (NaR decodes to the default NaN.)
            #[cfg(target_arch = "x86_64")]
            &Dec::Posit16(es) if super::simd() && (sl == 1 || sk == 1) => pack_posit16_avx2(p as *const u16, es, base, sl, sk, nv, w, kc, dst),
            &Dec::Posit16(es) => pack_lines(|o| q(T::from_f32(super::posit16_to_f32(*(p as *const u16).offset(o), es))), base, sl, sk, nv, w, kc, dst),
            #[cfg(target_arch = "x86_64")]
            Dec::Lut8(t) if sl == 1 && super::simd() && fp8_kind(op.format()).is_some() => {
                let d = dst.as_mut_ptr();
                assert!(dst.len() >= w * kc && nv <= w);
                if fp8_kind(op.format()) == Some(FP8_E5M2) {
                    pack_fp8_avx2::<T, Q, FP8_E5M2>(p.offset(base), t, sk, nv, w, kc, d)
                } else {
                    pack_fp8_avx2::<T, Q, FP8_E4M3FN>(p.offset(base), t, sk, nv, w, kc, d)
                }
            }
            #[cfg(target_arch = "x86_64")]
            Dec::Lut8(_) if sl == 1 && super::simd() && place8(&op.dec, op.format()).is_some() => {
                assert!(dst.len() >= w * kc && nv <= w);
                let p8 = place8(&op.dec, op.format()).expect("checked");
                pack_place8_avx2::<T, Q>(p.offset(base), &p8, sk, nv, w, kc, dst.as_mut_ptr())
            }
            Dec::Lut8(t) => {
                let t = t.as_ptr();
                pack_lines(|o| q(T::from_f32(*t.add(*p.offset(o) as usize))), base, sl, sk, nv, w, kc, dst)
            }
            Dec::Lut16(t) => {
                let t = t.as_ptr();
                pack_lines(|o| q(T::from_f32(*t.add(*(p as *const u16).offset(o) as usize))), base, sl, sk, nv, w, kc, dst)
            }
            Dec::Fmt(..) => {
                let d = &op.dec;
                pack_lines(|o| q(T::from_f64(super::dec_f64(d, p, o))), base, sl, sk, nv, w, kc, dst)
            }
        }
    }
}

/// The float8 formats [`pack_fp8_avx2`] decodes arithmetically.
pub(super) const FP8_E5M2: u8 = 1;
pub(super) const FP8_E4M3FN: u8 = 2;

/// Which of [`pack_fp8_avx2`]'s formats `fmt` (an operand's) is, if any.
pub(super) fn fp8_kind(fmt: Option<Format>) -> Option<u8> {
    match fmt {
        Some(Format::Float(f)) if f == named::FLOAT8_E5M2 => Some(FP8_E5M2),
        Some(Format::Float(f)) if f == named::FLOAT8_E4M3FN => Some(FP8_E4M3FN),
        _ => None,
    }
}

/// Eight float8_e5m2 (or, with `E4M3`, float8_e4m3fn) codes at `p` as f32
/// lanes, and the codes widened to 16-bit lanes. An e5m2 code is the top byte
/// of the float16 of its value; an e4m3fn code's magnitude moved up 7 bits
/// (its sign to bit 15) is the float16 of its value times 2^-8 (exponent bias
/// 15 for 7, subnormals included), scaled back exactly. The NaN codes of
/// e4m3fn (0x7f, 0xff) decode as numbers.
///
/// # Safety
/// The CPU must support avx2 and f16c; eight codes at `p` readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn fp8x8_avx2<const E4M3: bool>(p: *const u8) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m128i) {
    use std::arch::x86_64::*;
    // SAFETY: per the caller.
    unsafe { fp8x8_of::<E4M3>(_mm_loadl_epi64(p as *const __m128i)) }
}

/// [`fp8x8_avx2`] of the eight codes in the low bytes of `raw`.
///
/// # Safety
/// The CPU must support avx2 and f16c.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn fp8x8_of<const E4M3: bool>(raw: std::arch::x86_64::__m128i) -> (std::arch::x86_64::__m256, std::arch::x86_64::__m128i) {
    use std::arch::x86_64::*;
    // SAFETY: per the caller.
    unsafe {
        let x = _mm_cvtepu8_epi16(raw);
        if E4M3 {
            let m7 = _mm_set1_epi16(0x7f);
            let h = _mm_or_si128(_mm_slli_epi16::<8>(_mm_andnot_si128(m7, x)), _mm_slli_epi16::<7>(_mm_and_si128(m7, x)));
            (_mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0)), x)
        } else {
            (_mm256_cvtph_ps(_mm_slli_epi16::<8>(x)), x)
        }
    }
}

/// [`pack_real`] of float8_e5m2 (`F` = [`FP8_E5M2`]) or float8_e4m3fn codes
/// whose lines are contiguous: `dst[p*w + l]` = the value of code `src[p*sk +
/// l]` (zeros for l in nv..w), decoded 8 at a time through float16
/// ([`fp8x8_avx2`]). The lanes of NaN codes (e5m2: exponent all ones and a mantissa; e4m3fn: 0x7f,
/// 0xff) then take the table's value `t[code]`, quieted with `Q`, as the
/// scalar decode gives them.
///
/// # Safety
/// The CPU must support avx2 and f16c; the codes `src[p*sk + l]` (p < kc, l <
/// nv) readable; `dst` holds `kc * w` values; `t` holds 256.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_fp8_avx2<T: Real, const Q: bool, const F: u8>(src: *const u8, t: &[f32], sk: isize, nv: usize, w: usize, kc: usize, dst: *mut T) {
    use std::arch::x86_64::*;
    assert!(t.len() == 256 && (std::mem::size_of::<T>() == 4 || std::mem::size_of::<T>() == 8));
    // SAFETY: the reads and writes stay inside the caller's bounds; the CPU features are its contract.
    unsafe {
        let scalar = |c: u8| quiet_if::<T, Q>(T::from_f32(t[c as usize]));
        let (m7, nan_lo) = (_mm_set1_epi16(0x7f), _mm_set1_epi16(if F == FP8_E5M2 { 0x7c } else { 0x7e }));
        for p in 0..kc {
            let row = src.offset(p as isize * sk);
            let dp = dst.add(p * w);
            let mut l = 0;
            while l + 8 <= nv {
                let (v, x) = if F == FP8_E4M3FN { fp8x8_avx2::<true>(row.add(l)) } else { fp8x8_avx2::<false>(row.add(l)) };
                if std::mem::size_of::<T>() == 4 {
                    _mm256_storeu_ps(dp.add(l) as *mut f32, v);
                } else {
                    _mm256_storeu_pd(dp.add(l) as *mut f64, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
                    _mm256_storeu_pd((dp.add(l) as *mut f64).add(4), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)));
                }
                // NaN codes: magnitude above 0x7c (e5m2) or 0x7e (e4m3fn).
                let nan = _mm_cmpgt_epi16(_mm_and_si128(x, m7), nan_lo);
                if _mm_movemask_epi8(nan) != 0 {
                    for i in l..l + 8 {
                        *dp.add(i) = scalar(*row.add(i));
                    }
                }
                l += 8;
            }
            for i in l..nv {
                *dp.add(i) = scalar(*row.add(i));
            }
            for i in nv..w {
                *dp.add(i) = T::default();
            }
        }
    }
}

/// [`pack_real`] of the codes of an 8-bit float format that [`Place8`] decodes,
/// whose lines are contiguous, as [`pack_fp8_avx2`]: 8 at a time, the lanes of
/// special codes then taking the table's value, quieted with `Q`.
///
/// # Safety
/// As [`pack_fp8_avx2`], with `p8` the codes' decoding.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_place8_avx2<T: Real, const Q: bool>(src: *const u8, p8: &Place8, sk: isize, nv: usize, w: usize, kc: usize, dst: *mut T) {
    use std::arch::x86_64::*;
    assert!(p8.lut.len() == 256 && (std::mem::size_of::<T>() == 4 || std::mem::size_of::<T>() == 8));
    // SAFETY: the reads and writes stay inside the caller's bounds; the CPU features are its contract.
    unsafe {
        let scalar = |c: u8| quiet_if::<T, Q>(T::from_f32(p8.lut[c as usize]));
        for p in 0..kc {
            let row = src.offset(p as isize * sk);
            let dp = dst.add(p * w);
            let mut l = 0;
            while l + 8 <= nv {
                let raw = _mm_loadl_epi64(row.add(l) as *const __m128i);
                let v = p8.decode8(raw);
                if std::mem::size_of::<T>() == 4 {
                    _mm256_storeu_ps(dp.add(l) as *mut f32, v);
                } else {
                    _mm256_storeu_pd(dp.add(l) as *mut f64, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
                    _mm256_storeu_pd((dp.add(l) as *mut f64).add(4), _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)));
                }
                if _mm_movemask_epi8(p8.specials8(raw)) != 0 {
                    for i in l..l + 8 {
                        *dp.add(i) = scalar(*row.add(i));
                    }
                }
                l += 8;
            }
            for i in l..nv {
                *dp.add(i) = scalar(*row.add(i));
            }
            for i in nv..w {
                *dp.add(i) = T::default();
            }
        }
    }
}

/// [`super::posit16_to_f32`] on 8 codes (16-bit lanes): the same steps, with
/// the magnitude taken in 16 bits, the run length read off an exact i32 -> f32
/// conversion, and the exponent bits and fraction after the regime shifted
/// into place in one variable shift.
///
/// # Safety
/// The CPU must support avx2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn posit16_x8(c: std::arch::x86_64::__m128i, es: u32) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: avx2 per the caller.
    unsafe {
        let zero = _mm256_setzero_si256();
        // |code| as 16-bit two's complement, widened: the body (NaR, 0x8000, stays 0x8000).
        let x = _mm256_cvtepu16_epi32(_mm_abs_epi16(c));
        let sign = _mm256_and_si256(_mm256_cvtepi16_epi32(c), _mm256_set1_epi32(i32::MIN));
        // -first: the regime's first bit (bit 14) spread over the lane.
        let nf = _mm256_srai_epi32::<31>(_mm256_slli_epi32::<17>(x));
        // A run of ones is a run of zeros of the complement. For a run of m, 2z + 1
        // has its leading one at bit 15 - m (z = 0: m = 15), so its f32 exponent
        // field is 142 - m.
        let z = _mm256_and_si256(_mm256_xor_si256(x, nf), _mm256_set1_epi32(0x7fff));
        let z2 = _mm256_or_si256(_mm256_add_epi32(z, z), _mm256_set1_epi32(1));
        let ez = _mm256_srli_epi32::<23>(_mm256_castps_si256(_mm256_cvtepi32_ps(z2)));
        // k = m - 1 after a run of ones, -m after a run of zeros: d = -m, k = d ^ -first.
        let k = _mm256_xor_si256(_mm256_sub_epi32(ez, _mm256_set1_epi32(142)), nf);
        // The bits after the regime's end, body << (m + 1) (15 bits), moved up by 8 + es:
        // the exponent bits land on the f32 exponent's last bits, the fraction below.
        let sh = _mm256_sub_epi32(_mm256_set1_epi32(151 + es as i32), ez);
        let rest = _mm256_and_si256(_mm256_sllv_epi32(x, sh), _mm256_set1_epi32(0x7fff << (8 + es)));
        // Exponent field (k << es) + 127, plus the exponent bits added in from `rest`.
        let ex = _mm256_sll_epi32(k, _mm_cvtsi32_si128(23 + es as i32));
        let bits = _mm256_or_si256(_mm256_add_epi32(_mm256_add_epi32(ex, _mm256_set1_epi32(127 << 23)), rest), sign);
        // Zero (x = 0) and NaR (x = 0x8000).
        let v = _mm256_andnot_si256(_mm256_cmpeq_epi32(x, zero), bits);
        let nar = _mm256_cmpeq_epi32(x, _mm256_set1_epi32(0x8000));
        _mm256_castsi256_ps(_mm256_blendv_epi8(v, _mm256_set1_epi32(0x7fc0_0000), nar))
    }
}

/// Decode `n` contiguous posit<16, es> codes from `src` into `out`.
///
/// # Safety
/// The CPU must support avx2; `src` holds `n` readable codes, `out` `n` writable values.
#[cfg(all(test, target_arch = "x86_64"))]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn posit16_run_avx2(src: *const u16, n: usize, es: u32, out: *mut f32) {
    // SAFETY: forwarded contract.
    unsafe { posit16_run(src, n, es, out) }
}

/// The avx2 decode of `n` contiguous posit<16, es> codes from `src` into
/// `out`, inlined into its caller (which enables avx2), so that short runs pay
/// no call and no set-up of constants.
///
/// # Safety
/// The CPU must support avx2; `src` holds `n` readable codes, `out` `n` writable values.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn posit16_run(src: *const u16, n: usize, es: u32, out: *mut f32) {
    use std::arch::x86_64::*;
    // SAFETY: i + 8 <= n for the vector loads and stores; the tail stays below n.
    unsafe {
        let mut i = 0;
        while i + 8 <= n {
            _mm256_storeu_ps(out.add(i), posit16_x8(_mm_loadu_si128(src.add(i) as *const __m128i), es));
            i += 8;
        }
        for j in i..n {
            *out.add(j) = super::posit16_to_f32(*src.add(j), es);
        }
    }
}

/// [`pack_real`] of posit<16, es> codes when the lines (`sl == 1`) or the
/// depth (`sk == 1`) are contiguous: runs of codes decoded 8 at a time.
///
/// # Safety
/// The CPU must support avx2; as [`Kernel::pack`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_posit16_avx2<T: Real>(src: *const u16, es: u32, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [T]) {
    use std::arch::x86_64::*;
    assert!(dst.len() >= w * kc && nv <= w && es <= 3);
    const RUN: usize = 64;
    let mut tmp = [0f32; RUN];
    let d = dst.as_mut_ptr();
    // SAFETY: the runs read lie inside the operand (caller); indices p*w + l < kc*w.
    unsafe {
        if sl == 1 {
            for p in 0..kc {
                let row = src.offset(base + p as isize * sk);
                if std::mem::size_of::<T>() == 4 {
                    // T is f32: decode straight into the strip. (Through `tmp`, the
                    // copy's wide loads would wait on the decoder's narrower stores.)
                    posit16_run(row, nv, es, d.add(p * w) as *mut f32);
                    for l in nv..w {
                        *d.add(p * w + l) = T::default();
                    }
                    continue;
                }
                for l0 in (0..nv).step_by(RUN) {
                    let len = RUN.min(nv - l0);
                    posit16_run(row.add(l0), len, es, tmp.as_mut_ptr());
                    for (l, &v) in tmp[..len].iter().enumerate() {
                        *d.add(p * w + l0 + l) = T::from_f32(v);
                    }
                }
                for l in nv..w {
                    *d.add(p * w + l) = T::default();
                }
            }
        } else if std::mem::size_of::<T>() == 4 && w == 6 {
            // T is f32, six lines along the depth (A row-major): 8 depths of every
            // line decoded at once, transposed in registers, and each depth's six
            // values stored as 8 (the two extra lanes are rewritten by the next
            // depth's store; the last depth of the strip stores its six alone).
            let d = d as *mut f32;
            let mut p0 = 0;
            while p0 + 8 <= kc {
                let mut v = [_mm256_setzero_ps(); 8];
                for (l, x) in v.iter_mut().enumerate().take(nv) {
                    *x = posit16_x8(_mm_loadu_si128(src.offset(base + l as isize * sl + p0 as isize) as *const __m128i), es);
                }
                let r = transpose8(v);
                for (q, rq) in r.iter().enumerate() {
                    let dq = d.add((p0 + q) * 6);
                    if (p0 + q + 1) * 6 + 2 <= dst.len() {
                        _mm256_storeu_ps(dq, *rq);
                    } else {
                        let mut t = [0f32; 8];
                        _mm256_storeu_ps(t.as_mut_ptr(), *rq);
                        std::ptr::copy_nonoverlapping(t.as_ptr(), dq, 6);
                    }
                }
                p0 += 8;
            }
            for p in p0..kc {
                for l in 0..6 {
                    *d.add(p * 6 + l) = if l < nv { super::posit16_to_f32(*src.offset(base + l as isize * sl + p as isize), es) } else { 0.0 };
                }
            }
        } else {
            for l in 0..w {
                if l >= nv {
                    for p in 0..kc {
                        *d.add(p * w + l) = T::default();
                    }
                    continue;
                }
                let line = src.offset(base + l as isize * sl);
                for p0 in (0..kc).step_by(RUN) {
                    let len = RUN.min(kc - p0);
                    posit16_run(line.add(p0), len, es, tmp.as_mut_ptr());
                    for (q, &v) in tmp[..len].iter().enumerate() {
                        *d.add((p0 + q) * w + l) = T::from_f32(v);
                    }
                }
            }
        }
    }
}

/// The 4 x 4 transposes inside the two 128-bit halves of `v` (row r, lane q of
/// each half): `out[q]` holds lane q of rows 0..4 in each half.
///
/// # Safety
/// The CPU must support avx.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose4_halves(v: [std::arch::x86_64::__m256; 4]) -> [std::arch::x86_64::__m256; 4] {
    use std::arch::x86_64::*;
    // SAFETY: avx per the caller.
    unsafe {
        let t0 = _mm256_unpacklo_ps(v[0], v[1]);
        let t1 = _mm256_unpackhi_ps(v[0], v[1]);
        let t2 = _mm256_unpacklo_ps(v[2], v[3]);
        let t3 = _mm256_unpackhi_ps(v[2], v[3]);
        [_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xee>(t0, t2), _mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xee>(t1, t3)]
    }
}

/// The 8 x 8 transpose of `v` (row r, lane q) in registers: `out[q][r] = v[r][q]`:
/// the 4 x 4 transposes inside the halves of rows 0..4 and 4..8, then the halves
/// exchanged.
///
/// # Safety
/// The CPU must support avx.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn transpose8(v: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    // SAFETY: avx per the caller.
    unsafe {
        let u = transpose4_halves([v[0], v[1], v[2], v[3]]);
        let w = transpose4_halves([v[4], v[5], v[6], v[7]]);
        [
            _mm256_permute2f128_ps::<0x20>(u[0], w[0]),
            _mm256_permute2f128_ps::<0x20>(u[1], w[1]),
            _mm256_permute2f128_ps::<0x20>(u[2], w[2]),
            _mm256_permute2f128_ps::<0x20>(u[3], w[3]),
            _mm256_permute2f128_ps::<0x31>(u[0], w[0]),
            _mm256_permute2f128_ps::<0x31>(u[1], w[1]),
            _mm256_permute2f128_ps::<0x31>(u[2], w[2]),
            _mm256_permute2f128_ps::<0x31>(u[3], w[3]),
        ]
    }
}

/// Steps `j..j + 8` of the 8 columns `cols` (stored as `C`), transposed: `out[q]`
/// holds step `j + q` of column l in lane l, as `transpose8` of [`code_load8`]'s
/// columns. float32 and bf16 columns skip the transpose's lane-crossing stage:
/// columns l and l + 4 are loaded into the two 128-bit halves of one register
/// (a load and a broadcast load, blended), so that two 4 x 4 transposes inside
/// the halves finish it; bf16's dwords are two codes each, the even step
/// shifted up, the odd one masked, both before the transposes. Zen 3 shuffles
/// (and shifts) on two of its four vector pipes: this is 16 shuffles for 8
/// float32 columns instead of 24, and 20 for bf16 instead of 40 (24 and 8
/// widening loads and shifts); the blends and masks run on any pipe. (One row
/// times a bf16 `w.T` of 4096^2 went from 2.36 to 2.17 ms, 4 rows from 3.8 to
/// 3.4; float32 4 rows from 3.9 to 3.5.)
///
/// # Safety
/// The CPU must support avx2 and f16c; elements `j..j + 8` of each column must be
/// readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn cols_t8<const C: u8>(cols: &[*const u8; 8], j: usize, nan: &mut std::arch::x86_64::__m128i, p8: &Place8) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    // SAFETY: the reads are the caller's; avx2 per the caller.
    unsafe {
        // The 128 bits at byte `off` of columns l (low half) and l + 4 (high half);
        // four such rows (row l: four steps of columns l and l + 4) transposed in
        // their halves give four steps of the 8 columns.
        // (Macros: closures do not take the caller's target features.)
        macro_rules! pair {
            ($l:expr, $off:expr) => {{
                let lo = _mm256_castsi128_si256(_mm_loadu_si128(cols[$l].add($off) as *const __m128i));
                let hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(cols[$l + 4].add($off) as *const __m128i));
                _mm256_castsi256_ps(_mm256_blend_epi32::<0xf0>(lo, hi))
            }};
        }
        match C {
            ROW_F32 => {
                let a = transpose4_halves([pair!(0, 4 * j), pair!(1, 4 * j), pair!(2, 4 * j), pair!(3, 4 * j)]);
                let b = transpose4_halves([pair!(0, 4 * j + 16), pair!(1, 4 * j + 16), pair!(2, 4 * j + 16), pair!(3, 4 * j + 16)]);
                [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
            }
            ROW_BF16 => {
                // Dword d of a half: steps 2d (low 16 bits) and 2d + 1.
                macro_rules! even {
                    ($w:expr) => {
                        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_castps_si256($w)))
                    };
                }
                macro_rules! odd {
                    ($w:expr) => {
                        _mm256_and_ps($w, _mm256_castsi256_ps(_mm256_set1_epi32(0xffff_0000_u32 as i32)))
                    };
                }
                let w = [pair!(0, 2 * j), pair!(1, 2 * j), pair!(2, 2 * j), pair!(3, 2 * j)];
                let even = transpose4_halves([even!(w[0]), even!(w[1]), even!(w[2]), even!(w[3])]);
                let odd = transpose4_halves([odd!(w[0]), odd!(w[1]), odd!(w[2]), odd!(w[3])]);
                [even[0], odd[0], even[1], odd[1], even[2], odd[2], even[3], odd[3]]
            }
            _ => transpose8(std::array::from_fn(|l| code_load8::<C>(cols[l], j, nan, p8))),
        }
    }
}

/// Write an `MR x NR` register tile (stored row-major in `t`) to C.
///
/// # Safety
/// As [`Kernel::run`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn store_tile<T: Copy + std::ops::Add<Output = T>>(t: &[T], nr_full: usize, c: *mut T, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: the caller guarantees the mr x nr tile of c is writable.
    unsafe {
        for i in 0..mr {
            for j in 0..nr {
                let q = c.offset(i as isize * rs + j as isize * cs);
                let v = t[i * nr_full + j];
                *q = if accumulate { *q + v } else { v };
            }
        }
    }
}

/// Portable kernel body; `FMA` selects fused multiply-adds (only worth it
/// where the wrapper enables the `fma` feature).
///
/// # Safety
/// As [`Kernel::run`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn real_body<T: Real, const MR: usize, const NR: usize, const FMA: bool>(
    kc: usize,
    a: *const T,
    b: *const T,
    c: *mut T,
    rs: isize,
    cs: isize,
    mr: usize,
    nr: usize,
    accumulate: bool,
) {
    let mut r = [[T::default(); NR]; MR];
    // SAFETY: a and b hold kc*MR and kc*NR packed values.
    unsafe {
        for p in 0..kc {
            let ap = a.add(p * MR);
            let bp = b.add(p * NR);
            for (i, ri) in r.iter_mut().enumerate() {
                let ai = *ap.add(i);
                for (j, rij) in ri.iter_mut().enumerate() {
                    *rij = if FMA { ai.madd(*bp.add(j), *rij) } else { *rij + ai * *bp.add(j) };
                }
            }
        }
        let flat: &[T] = std::slice::from_raw_parts(r.as_ptr() as *const T, MR * NR);
        store_tile(flat, NR, c, rs, cs, mr, nr, accumulate);
    }
}

/// [`pack_real`] compiled with AVX2 enabled (wider decode loops).
///
/// # Safety
/// As [`Kernel::pack`]; the CPU must support avx2 and fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_real_avx2<T: Real>(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [T]) {
    // SAFETY: forwarded contract.
    unsafe { pack_real::<T, false>(op, base, sl, sk, nv, w, kc, dst) }
}

/// [`pack_real`] with every NaN packed as the default quiet NaN ([`Real::quiet`]),
/// compiled with AVX2 ([`pack_quiet_avx2`]) where the CPU has it and the SIMD
/// paths are on. The emulated accumulation packs its operands so: its kernels
/// round bit patterns by integer adds below a unit, which would carry through
/// the payload of a NaN read from the inputs (all ones, say) into its sign, or
/// clear it to an infinity; the default NaN, and the NaNs arithmetic makes of
/// it and of invalid operations, have room below their top bits.
///
/// # Safety
/// As [`pack_real`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pack_real_any<T: Real>(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if super::simd() {
        // SAFETY: forwarded contract; simd() implies avx2 and fma were detected.
        return unsafe { pack_quiet_avx2(op, base, sl, sk, nv, w, kc, dst) };
    }
    // SAFETY: forwarded contract.
    unsafe { pack_quiet(op, base, sl, sk, nv, w, kc, dst) }
}

/// [`pack_quiet`] compiled with AVX2 enabled.
///
/// # Safety
/// As [`pack_real`]; the CPU must support avx2 and fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_quiet_avx2<T: Real>(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [T]) {
    // SAFETY: forwarded contract.
    unsafe { pack_quiet(op, base, sl, sk, nv, w, kc, dst) }
}

/// [`pack_real`], its values quieted ([`Real::quiet`]) as they are decoded.
///
/// # Safety
/// As [`pack_real`].
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_quiet<T: Real>(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [T]) {
    // SAFETY: forwarded contract.
    unsafe { pack_real::<T, true>(op, base, sl, sk, nv, w, kc, dst) };
}

macro_rules! real_kernel {
    ($name:ident, $t:ty, $mr:expr, $nr:expr, $mc:expr, $kc:expr, $nc:expr, avx2, $($run:item)*) => {
        pub(crate) struct $name;
        impl Kernel for $name {
            type P = $t;
            type C = $t;
            const MR: usize = $mr;
            const NR: usize = $nr;
            const MC: usize = $mc;
            const KC: usize = $kc;
            const NC: usize = $nc;
            unsafe fn pack(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [$t]) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: forwarded contract; this kernel is only selected with avx2+fma.
                unsafe { pack_real_avx2(op, base, sl, sk, nv, w, kc, dst) }
                #[cfg(not(target_arch = "x86_64"))]
                // SAFETY: forwarded contract.
                unsafe { pack_real::<$t, false>(op, base, sl, sk, nv, w, kc, dst) }
            }
            $($run)*
        }
    };
    ($name:ident, $t:ty, $mr:expr, $nr:expr, $mc:expr, $kc:expr, $nc:expr, $run:item) => {
        pub(crate) struct $name;
        impl Kernel for $name {
            type P = $t;
            type C = $t;
            const MR: usize = $mr;
            const NR: usize = $nr;
            const MC: usize = $mc;
            const KC: usize = $kc;
            const NC: usize = $nc;
            unsafe fn pack(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [$t]) {
                // SAFETY: forwarded contract.
                unsafe { pack_real::<$t, false>(op, base, sl, sk, nv, w, kc, dst) }
            }
            $run
        }
    };
}

// Zen 3 blocking (BLIS): f32 MC/KC/NC = 144/256/4080 with a 6x16 tile.
real_kernel!(F32Avx2, f32, 6, 16, 144, 256, 4080, avx2,
    unsafe fn run(&self, kc: usize, a: *const f32, b: *const f32, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this kernel is only selected when avx2 and fma were detected.
        unsafe { f32_6x16_avx2(kc, a, b, c, rs, cs, mr, nr, accumulate) }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: forwarded contract.
        unsafe { real_body::<f32, 6, 16, true>(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
    fn a_rows(&self, a: &Operand) -> Option<u8> {
        match a.dec {
            _ if a.cs != 1 || !cfg!(target_arch = "x86_64") => None,
            Dec::F32 => Some(A_ROWS_SAME),
            Dec::Bf16 => Some(A_ROWS_BF16),
            Dec::F16 => Some(A_ROWS_F16),
            _ => None,
        }
    }
    unsafe fn run_a_rows(&self, code: u8, kc: usize, a: *const u8, lda: isize, b: *const f32, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        assert_eq!(mr, 6, "whole strips of A in place");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this kernel is only selected when avx2 and fma were detected.
        unsafe {
            match code {
                A_ROWS_SAME => f32_6x16_rows_avx2::<A_ROWS_SAME>(kc, a, lda, b, c, rs, cs, nr, accumulate),
                A_ROWS_BF16 => f32_6x16_rows_avx2::<A_ROWS_BF16>(kc, a, lda, b, c, rs, cs, nr, accumulate),
                A_ROWS_F16 => f32_6x16_rows_f16_avx2(kc, a, lda, b, c, rs, cs, nr, accumulate),
                _ => unreachable!("a code of a_rows()"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (code, kc, a, lda, b, c, rs, cs, nr, accumulate);
    }
    fn direct(&self, b: &Operand) -> Option<u8> {
        // (float32 rows read in place ran slower than packed ones: 8 x 1024 x 1024
        // 0.38 against 0.26 ms, rows of 4 KiB each a page of their own.)
        match b.dec {
            _ if b.cs != 1 || !cfg!(target_arch = "x86_64") => None,
            Dec::Bf16 => Some(DIRECT_BF16),
            Dec::F16 => Some(DIRECT_F16),
            _ => None,
        }
    }
    unsafe fn run_direct(&self, code: u8, kc: usize, a: *const f32, b: *const u8, bstride: isize, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this kernel is only selected when avx2 and fma were detected.
        unsafe {
            match code {
                DIRECT_BF16 => f32_direct_avx2::<DIRECT_BF16>(kc, a, b, bstride, c, rs, cs, mr, nr, accumulate),
                DIRECT_F16 => f32_direct_avx2::<DIRECT_F16>(kc, a, b, bstride, c, rs, cs, mr, nr, accumulate),
                _ => unreachable!("a code of direct()"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (code, kc, a, b, bstride, c, rs, cs, mr, nr, accumulate);
    }
);

// AVX-512F: a 12x32 tile, 24 zmm accumulators; one B strip (256 x 32 values,
// 32 KiB) stays in a 48 KiB L1 while the A strips stream past it (NC: a
// multiple of 32). KC stays 256, so every element of C sees the same depth
// blocks and the same chain of FMAs as on the AVX2 and portable kernels: the
// same values on every CPU (which NaN's payload a NaN result carries, A's or
// B's, may differ between kernels).
real_kernel!(F32Avx512, f32, F32_512_MR, 32, 144, 256, 4064, avx2,
    unsafe fn run(&self, kc: usize, a: *const f32, b: *const f32, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this kernel is only selected when avx512f, avx2 and fma were detected.
        unsafe { f32_12x32_avx512(kc, a, b, c, rs, cs, mr, nr, accumulate) }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: forwarded contract.
        unsafe { real_body::<f32, F32_512_MR, 32, true>(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
);

/// Rows of [`F32Avx512`]'s tile.
pub(crate) const F32_512_MR: usize = 12;

real_kernel!(F32Portable, f32, 6, 16, 144, 256, 4080,
    unsafe fn run(&self, kc: usize, a: *const f32, b: *const f32, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        // SAFETY: forwarded contract.
        unsafe { real_body::<f32, 6, 16, true>(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
);

// f64: a 6x8 tile is again 12 ymm accumulators; half the columns per byte of L1.
real_kernel!(F64Avx2, f64, 6, 8, 72, 256, 4080, avx2,
    unsafe fn run(&self, kc: usize, a: *const f64, b: *const f64, c: *mut f64, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this kernel is only selected when avx2 and fma were detected.
        unsafe { f64_6x8_avx2(kc, a, b, c, rs, cs, mr, nr, accumulate) }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: forwarded contract.
        unsafe { real_body::<f64, 6, 8, HW_FMA>(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
    fn a_rows(&self, a: &Operand) -> Option<u8> {
        (cfg!(target_arch = "x86_64") && a.cs == 1 && matches!(a.dec, Dec::F64)).then_some(A_ROWS_SAME)
    }
    unsafe fn run_a_rows(&self, code: u8, kc: usize, a: *const u8, lda: isize, b: *const f64, c: *mut f64, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        assert!(mr == 6 && code == A_ROWS_SAME, "whole strips of float64 A in place");
        #[cfg(target_arch = "x86_64")]
        // SAFETY: this kernel is only selected when avx2 and fma were detected.
        unsafe { f64_6x8_rows_avx2(kc, a as *const f64, lda, b, c, rs, cs, nr, accumulate) }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (kc, a, lda, b, c, rs, cs, nr, accumulate);
    }
);

real_kernel!(F64Portable, f64, 6, 8, 72, 256, 4080,
    unsafe fn run(&self, kc: usize, a: *const f64, b: *const f64, c: *mut f64, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        // SAFETY: forwarded contract.
        unsafe { real_body::<f64, 6, 8, HW_FMA>(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
);

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn f64_6x8_avx2(kc: usize, a: *const f64, b: *const f64, c: *mut f64, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: forwarded contract (packed strips).
    unsafe { f64_tile_avx2::<false>(kc, a, 0, b, c, rs, cs, mr, nr, accumulate) }
}

/// The 6x8 f64 tile of [`f64_6x8_avx2`]: 12 ymm accumulators, two B loads
/// and six broadcasts per step, as [`f32_tile_avx2`]; each element the FMAs of
/// [`real_body`] in its order. A's packed strip, or with `AR` six rows of A in
/// place, `lda` elements apart (`mr` = 6).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn f64_tile_avx2<const AR: bool>(kc: usize, a: *const f64, lda: isize, b: *const f64, c: *mut f64, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    use std::arch::x86_64::*;
    debug_assert!(mr <= 6 && (!AR || mr == 6));
    let (ai, ap_step) = if AR { (lda, 1) } else { (1, 6) };
    // SAFETY: a holds kc*6 packed values (or six rows of kc), b kc*8; the tile of c is writable.
    unsafe {
        if accumulate && cs == 1 {
            prefetch_tile(c as *const u8, rs * 8, mr, 64);
        }
        let mut r0 = [_mm256_setzero_pd(); 6];
        let mut r1 = [_mm256_setzero_pd(); 6];
        let (mut ap, mut bp, mut p) = (a, b, 0);
        macro_rules! step {
            ($off:expr) => {{
                let b0 = _mm256_loadu_pd(bp.add(8 * $off));
                let b1 = _mm256_loadu_pd(bp.add(8 * $off + 4));
                for i in 0..6 {
                    let x = _mm256_broadcast_sd(&*ap.offset(ap_step * $off + i as isize * ai));
                    r0[i] = _mm256_fmadd_pd(x, b0, r0[i]);
                    r1[i] = _mm256_fmadd_pd(x, b1, r1[i]);
                }
            }};
        }
        while p + 4 <= kc {
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(64) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(72) as *const i8);
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            ap = ap.offset(4 * ap_step);
            bp = bp.add(32);
            p += 4;
        }
        while p < kc {
            step!(0);
            ap = ap.offset(ap_step);
            bp = bp.add(8);
            p += 1;
        }
        if mr == 6 && nr == 8 && cs == 1 {
            for i in 0..6 {
                let q = c.offset(i as isize * rs);
                let (mut v0, mut v1) = (r0[i], r1[i]);
                if accumulate {
                    // (C first, as store_tile adds: the same NaN where both are.)
                    v0 = _mm256_add_pd(_mm256_loadu_pd(q), v0);
                    v1 = _mm256_add_pd(_mm256_loadu_pd(q.add(4)), v1);
                }
                _mm256_storeu_pd(q, v0);
                _mm256_storeu_pd(q.add(4), v1);
            }
        } else {
            let mut t = [0f64; 48];
            for i in 0..6 {
                _mm256_storeu_pd(t.as_mut_ptr().add(8 * i), r0[i]);
                _mm256_storeu_pd(t.as_mut_ptr().add(8 * i + 4), r1[i]);
            }
            store_tile(&t, 8, c, rs, cs, mr, nr, accumulate);
        }
    }
}

/// [`f64_6x8_avx2`] on six rows of A in place, `lda` elements apart
/// ([`Kernel::run_a_rows`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn f64_6x8_rows_avx2(kc: usize, a: *const f64, lda: isize, b: *const f64, c: *mut f64, rs: isize, cs: isize, nr: usize, accumulate: bool) {
    // SAFETY: forwarded contract (six rows of kc values; packed B strips).
    unsafe { f64_tile_avx2::<true>(kc, a, lda, b, c, rs, cs, 6, nr, accumulate) }
}

/// B's rows read in place by [`Kernel::run_direct`]: bf16 codes (the upper
/// halves of float32 values), or fp16 codes (`vcvtph2ps`: exact, a signaling
/// NaN quieted, which the FMA it meets would quiet too, so the same bits as the
/// packed codes).
pub(crate) const DIRECT_BF16: u8 = 1;

/// A's rows read in place by [`Kernel::run_a_rows`]: stored as the packed
/// element type, or as bf16 codes (each broadcast and moved up 16 bits: its
/// f32 value, as the packing decodes it).
pub(crate) const A_ROWS_SAME: u8 = 1;
pub(crate) const A_ROWS_BF16: u8 = 2;
/// A's rows read in place as fp16 codes, each broadcast and converted by
/// `vcvtph2ps` (exact; a signaling NaN quieted, as the FMA it meets quiets the
/// packed one: the same bits).
pub(crate) const A_ROWS_F16: u8 = 3;
pub(crate) const DIRECT_F16: u8 = 2;

/// Eight codes at `p` as f32 lanes: bf16 codes (`F16` false), each the top half
/// of its float32 pattern (a NaN keeps its payload), or fp16 codes by
/// `vcvtph2ps` (exact; a signaling NaN quieted). Inlined into callers that
/// enable avx2 and f16c.
///
/// # Safety
/// The CPU must support avx2 and f16c; eight codes at `p` must be readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn codes8_avx2<const F16: bool>(p: *const u16) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: per the caller.
    unsafe {
        let w = _mm_loadu_si128(p as *const __m128i);
        if F16 {
            _mm256_cvtph_ps(w)
        } else {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(w)))
        }
    }
}

/// Fetch the rows of a C tile early (at power-of-two strides they may share L1
/// sets): `rows` rows of `bytes` bytes at `c`, `rs` bytes apart, every cache line
/// of each (its first and last bytes included, wherever the row starts). A hint:
/// nothing is read.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_tile(c: *const u8, rs: isize, rows: usize, bytes: usize) {
    use std::arch::x86_64::*;
    for i in 0..rows {
        let q = c.wrapping_offset(i as isize * rs) as *const i8;
        for o in (0..bytes).step_by(64).chain([bytes - 4]) {
            // SAFETY: a prefetch never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(q.wrapping_add(o)) };
        }
    }
}

/// The 6x16 f32 tile: 12 ymm accumulators, two B loads and six broadcasts per
/// step (enough independent FMAs to cover their latency on two FMA pipes).
/// A last strip of at most 2 or 4 rows (a product of few rows: 8 = 6 + 2)
/// computes only those ([`f32_rows_avx2`]): the same FMAs on the same values
/// for every row it stores, so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_6x16_avx2(kc: usize, a: *const f32, b: *const f32, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: per the caller (packed strips: 64 bytes a step).
    unsafe { f32_rows_avx2::<0>(kc, a, b as *const u8, 64, c, rs, cs, mr, nr, accumulate) }
}

/// [`f32_6x16_avx2`] on six rows of A in place, `lda` elements apart, stored
/// as `A` says ([`A_ROWS_SAME`], [`A_ROWS_BF16`]; [`Kernel::run_a_rows`]): the
/// same FMAs on the same values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_6x16_rows_avx2<const A: u8>(kc: usize, a: *const u8, lda: isize, b: *const f32, c: *mut f32, rs: isize, cs: isize, nr: usize, accumulate: bool) {
    // SAFETY: per the caller (kc values in each of six rows; packed B strips).
    unsafe { f32_tile_avx2::<6, 0, A>(kc, a, lda, b as *const u8, 64, c, rs, cs, 6, nr, accumulate) }
}

/// [`f32_6x16_rows_avx2`] of fp16 rows ([`A_ROWS_F16`]), with f16c.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_6x16_rows_f16_avx2(kc: usize, a: *const u8, lda: isize, b: *const f32, c: *mut f32, rs: isize, cs: isize, nr: usize, accumulate: bool) {
    // SAFETY: per the caller (kc values in each of six rows; packed B strips).
    unsafe { f32_tile_avx2::<6, 0, A_ROWS_F16>(kc, a, lda, b as *const u8, 64, c, rs, cs, 6, nr, accumulate) }
}

/// [`f32_6x16_avx2`] on B's rows in place ([`Kernel::run_direct`]), `bstride` bytes apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_direct_avx2<const D: u8>(kc: usize, a: *const f32, b: *const u8, bstride: isize, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: per the caller.
    unsafe { f32_rows_avx2::<D>(kc, a, b, bstride, c, rs, cs, mr, nr, accumulate) }
}

/// [`f32_tile_avx2`] with as few rows as cover `mr`: 2, 4 or 6.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_rows_avx2<const D: u8>(kc: usize, a: *const f32, b: *const u8, bstride: isize, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: per the caller; each variant reads the first R rows of the strip.
    unsafe {
        match mr {
            0..=2 => f32_tile_avx2::<2, D, 0>(kc, a as *const u8, 0, b, bstride, c, rs, cs, mr, nr, accumulate),
            3..=4 => f32_tile_avx2::<4, D, 0>(kc, a as *const u8, 0, b, bstride, c, rs, cs, mr, nr, accumulate),
            _ => f32_tile_avx2::<6, D, 0>(kc, a as *const u8, 0, b, bstride, c, rs, cs, mr, nr, accumulate),
        }
    }
}

/// The first `R` rows (2, 4 or 6, at least `mr`) of [`f32_6x16_avx2`]'s tile, on
/// A's packed strip (6 rows a step, `A` = 0) or R rows of A in place at byte
/// address `a` (`lda` elements apart, each contiguous; `mr` = R), stored as `A`
/// says ([`A_ROWS_SAME`]: float32; [`A_ROWS_BF16`]; [`A_ROWS_F16`], with f16c), and B's 16 values of step p at
/// `b + p * bstride` bytes: packed float32 (`D` = 0, `bstride` 64), or a B's
/// bf16 or fp16 rows in place ([`DIRECT_BF16`], [`DIRECT_F16`]; the CPU then
/// has f16c).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_tile_avx2<const R: usize, const D: u8, const A: u8>(kc: usize, a: *const u8, lda: isize, b: *const u8, bstride: isize, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    use std::arch::x86_64::*;
    debug_assert!(mr <= R && R <= 6 && (A == 0 || mr == R));
    // Element (row i, step p) of A, in bytes: packed, 6 a step; in place, rows lda apart.
    let size = if A == A_ROWS_BF16 || A == A_ROWS_F16 { 2 } else { 4 };
    let (ai, ap_step) = if A != 0 { (lda * size, size) } else { (4, 24) };
    // One element of A at `q` as 8 f32 lanes.
    // SAFETY (both): q is an element of A per the caller; avx2 per the caller.
    let bcast = |q: *const u8| -> __m256 {
        if A == A_ROWS_BF16 {
            unsafe { _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_set1_epi16(*(q as *const i16)))) }
        } else if A == A_ROWS_F16 {
            // (f16c: the caller's, with this code.)
            unsafe { _mm256_cvtph_ps(_mm_set1_epi16(*(q as *const i16))) }
        } else {
            unsafe { _mm256_broadcast_ss(&*(q as *const f32)) }
        }
    };
    // (Packed strips: a constant stride.)
    let bstride = if D == 0 { 64 } else { bstride };
    // SAFETY: a holds kc*6 packed values and each of the kc rows of b 16 values;
    // the tile of c is writable.
    unsafe {
        // Fetch the C tile early (its rows may share L1 sets at power-of-two strides).
        if accumulate && cs == 1 {
            prefetch_tile(c as *const u8, rs * 4, mr, 64);
        }
        let load = |p: *const u8| -> (__m256, __m256) {
            let q = p as *const u16;
            if D == DIRECT_BF16 {
                (codes8_avx2::<false>(q), codes8_avx2::<false>(q.wrapping_add(8)))
            } else if D == DIRECT_F16 {
                (codes8_avx2::<true>(q), codes8_avx2::<true>(q.wrapping_add(8)))
            } else {
                (_mm256_loadu_ps(p as *const f32), _mm256_loadu_ps((p as *const f32).add(8)))
            }
        };
        let mut r0 = [_mm256_setzero_ps(); R];
        let mut r1 = [_mm256_setzero_ps(); R];
        let mut ap = a;
        let mut bp = b;
        let mut p = 0;
        macro_rules! step {
            ($off:expr) => {{
                let (b0, b1) = load(bp.wrapping_offset($off * bstride));
                for i in 0..R {
                    let ai = bcast(ap.offset(ap_step * $off + i as isize * ai));
                    r0[i] = _mm256_fmadd_ps(ai, b0, r0[i]);
                    r1[i] = _mm256_fmadd_ps(ai, b1, r1[i]);
                }
            }};
        }
        while p + 4 <= kc {
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_offset(8 * bstride) as *const i8);
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            ap = ap.offset(4 * ap_step);
            // (Wrapping: past the last step B's rows in place may end.)
            bp = bp.wrapping_offset(4 * bstride);
            p += 4;
        }
        while p < kc {
            step!(0);
            ap = ap.offset(ap_step);
            bp = bp.wrapping_offset(bstride);
            p += 1;
        }
        if mr == R && nr == 16 && cs == 1 {
            for i in 0..R {
                let q = c.offset(i as isize * rs);
                let (mut v0, mut v1) = (r0[i], r1[i]);
                if accumulate {
                    v0 = _mm256_add_ps(v0, _mm256_loadu_ps(q));
                    v1 = _mm256_add_ps(v1, _mm256_loadu_ps(q.add(8)));
                }
                _mm256_storeu_ps(q, v0);
                _mm256_storeu_ps(q.add(8), v1);
            }
        } else {
            let mut t = [0f32; 96];
            for i in 0..R {
                _mm256_storeu_ps(t.as_mut_ptr().add(16 * i), r0[i]);
                _mm256_storeu_ps(t.as_mut_ptr().add(16 * i + 8), r1[i]);
            }
            store_tile(&t, 16, c, rs, cs, mr, nr, accumulate);
        }
    }
}

/// [`F32Avx512`]'s tile with as few rows as cover `mr`: 4, 8 or 12.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_12x32_avx512(kc: usize, a: *const f32, b: *const f32, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: per the caller; each variant reads the first R rows of the strip.
    unsafe {
        match mr {
            0..=4 => f32_tile_avx512::<4>(kc, a, b, c, rs, cs, mr, nr, accumulate),
            5..=8 => f32_tile_avx512::<8>(kc, a, b, c, rs, cs, mr, nr, accumulate),
            _ => f32_tile_avx512::<F32_512_MR>(kc, a, b, c, rs, cs, mr, nr, accumulate),
        }
    }
}

/// The first `R` rows (at least `mr`) of [`F32Avx512`]'s tile: A's packed
/// strip ([`F32_512_MR`] values a step, one broadcast each) times B's (32
/// values a step, two zmm loads), one FMA chain per element from zero over
/// the `kc` steps as [`real_body`] computes it, then added to C with
/// `accumulate`. Columns past `nr` are masked off (never read or written)
/// when C's rows are contiguous; otherwise the tile goes through [`store_tile`].
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn f32_tile_avx512<const R: usize>(kc: usize, a: *const f32, b: *const f32, c: *mut f32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    use std::arch::x86_64::*;
    debug_assert!(mr <= R && R <= F32_512_MR && nr <= 32);
    const STEP: usize = F32_512_MR;
    // SAFETY: a holds kc*STEP packed values and b kc*32; the tile of c is writable.
    unsafe {
        // Fetch the C tile early (its rows may share L1 sets at power-of-two strides).
        if accumulate && cs == 1 {
            prefetch_tile(c as *const u8, rs * 4, mr, 128);
        }
        let mut r0 = [_mm512_setzero_ps(); R];
        let mut r1 = [_mm512_setzero_ps(); R];
        let (mut ap, mut bp) = (a, b);
        macro_rules! step {
            ($off:expr) => {{
                let b0 = _mm512_loadu_ps(bp.add($off * 32));
                let b1 = _mm512_loadu_ps(bp.add($off * 32 + 16));
                for i in 0..R {
                    let ai = _mm512_set1_ps(*ap.add($off * STEP + i));
                    r0[i] = _mm512_fmadd_ps(ai, b0, r0[i]);
                    r1[i] = _mm512_fmadd_ps(ai, b1, r1[i]);
                }
            }};
        }
        let mut p = 0;
        while p + 4 <= kc {
            step!(0);
            step!(1);
            step!(2);
            step!(3);
            ap = ap.add(4 * STEP);
            bp = bp.add(4 * 32);
            p += 4;
        }
        while p < kc {
            step!(0);
            ap = ap.add(STEP);
            bp = bp.add(32);
            p += 1;
        }
        if cs == 1 {
            let bits = if nr >= 32 { u32::MAX } else { (1u32 << nr) - 1 };
            let (m0, m1) = (bits as __mmask16, (bits >> 16) as __mmask16);
            for i in 0..mr {
                let q = c.offset(i as isize * rs);
                let (mut v0, mut v1) = (r0[i], r1[i]);
                // (Wrapping: with nr <= 16 the second half may lie past C's end, masked off.)
                let q1 = q.wrapping_add(16);
                if accumulate {
                    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, q));
                    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, q1));
                }
                _mm512_mask_storeu_ps(q, m0, v0);
                _mm512_mask_storeu_ps(q1, m1, v1);
            }
        } else {
            let mut t = [0f32; 32 * F32_512_MR];
            for i in 0..R {
                _mm512_storeu_ps(t.as_mut_ptr().add(32 * i), r0[i]);
                _mm512_storeu_ps(t.as_mut_ptr().add(32 * i + 16), r1[i]);
            }
            store_tile(&t, 32, c, rs, cs, mr, nr, accumulate);
        }
    }
}

// ---------------------------------------------------------------- int8 ----

/// int8 packing: values widened to i16 and interleaved in pairs of depth,
/// `dst[(p/2)*2w + 2l + p%2]`, so that one 32-bit lane holds `(x[p], x[p+1])`
/// of one line, as `vpmaddwd` wants. An odd depth is padded with a zero.
///
/// # Safety
/// As [`Kernel::pack`].
unsafe fn pack_i8(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [i16]) {
    let kp = kc.div_ceil(2);
    assert!(dst.len() >= 2 * w * kp && nv <= w);
    let src = op.ptr as *const i8;
    let d = dst.as_mut_ptr();
    // SAFETY: offsets are inside the operand (caller) and indices < 2*w*kp.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        if sl == 1 && w == 16 && nv == 16 && super::simd() {
            // Lines contiguous (B row-major, a full strip): 16 values of a depth per load.
            pack_i8_16_avx2(src, base, sk, kc, d);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if sk == 1 && sl != 1 && w == 16 && nv == 16 && super::simd() {
            // Depth contiguous (B as w.T), a full strip: 8 values of 16 lines per step.
            pack_i8_lines16_avx2(src, base, sl, kc, d);
            return;
        }
        if sk == 1 && sl != 1 {
            // Depth contiguous (A row-major): each line's pairs read in order.
            for l in 0..w {
                if l >= nv {
                    for q in 0..kp {
                        *d.add(q * 2 * w + 2 * l) = 0;
                        *d.add(q * 2 * w + 2 * l + 1) = 0;
                    }
                    continue;
                }
                let row = src.offset(base + l as isize * sl);
                for q in 0..kp {
                    let p = 2 * q;
                    *d.add(q * 2 * w + 2 * l) = *row.add(p) as i16;
                    *d.add(q * 2 * w + 2 * l + 1) = if p + 1 < kc { *row.add(p + 1) as i16 } else { 0 };
                }
            }
            return;
        }
        for q in 0..kp {
            let dq = d.add(q * 2 * w);
            for h in 0..2 {
                let p = 2 * q + h;
                if p < kc {
                    let row = base + p as isize * sk;
                    for l in 0..nv {
                        *dq.add(2 * l + h) = *src.offset(row + l as isize * sl) as i16;
                    }
                    for l in nv..w {
                        *dq.add(2 * l + h) = 0;
                    }
                } else {
                    for l in 0..w {
                        *dq.add(2 * l + h) = 0;
                    }
                }
            }
        }
    }
}

macro_rules! i8_kernel {
    ($name:ident, $run:item) => {
        pub(crate) struct $name;
        impl Kernel for $name {
            type P = i16;
            type C = i32;
            const MR: usize = 6;
            const NR: usize = 16;
            const MC: usize = 144;
            const KC: usize = 512;
            const NC: usize = 4080;
            fn strip_len(w: usize, kc: usize) -> usize {
                w * 2 * kc.div_ceil(2)
            }
            unsafe fn pack(op: &Operand, base: isize, sl: isize, sk: isize, nv: usize, w: usize, kc: usize, dst: &mut [i16]) {
                // SAFETY: forwarded contract.
                unsafe { pack_i8(op, base, sl, sk, nv, w, kc, dst) }
            }
            $run
        }
    };
}

/// [`pack_i8`] of 16 contiguous lines (`sl = 1`, all inside the operand):
/// each depth's 16 values widened with one `vpmovsxbw`, interleaved with the
/// next depth's.
///
/// # Safety
/// The CPU must support avx2; as [`pack_i8`], with `dst` holding `32 * ceil(kc/2)` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pack_i8_16_avx2(src: *const i8, base: isize, sk: isize, kc: usize, d: *mut i16) {
    use std::arch::x86_64::*;
    // SAFETY: rows base + p*sk (p < kc) hold 16 readable values; dst per the contract.
    unsafe {
        let row = |p: usize| _mm256_cvtepi8_epi16(_mm_loadu_si128(src.offset(base + p as isize * sk) as *const __m128i));
        for q in 0..kc.div_ceil(2) {
            let x0 = row(2 * q);
            let x1 = if 2 * q + 1 < kc { row(2 * q + 1) } else { _mm256_setzero_si256() };
            // Pairs (x0[l], x1[l]): lines 0-3 and 8-11, then 4-7 and 12-15.
            let (lo, hi) = (_mm256_unpacklo_epi16(x0, x1), _mm256_unpackhi_epi16(x0, x1));
            _mm256_storeu_si256(d.add(32 * q) as *mut __m256i, _mm256_permute2x128_si256::<0x20>(lo, hi));
            _mm256_storeu_si256(d.add(32 * q + 16) as *mut __m256i, _mm256_permute2x128_si256::<0x31>(lo, hi));
        }
    }
}

/// [`pack_i8`] of 16 lines whose depth is contiguous (`sk = 1`; B as the
/// transposed view of a row-major matrix), all inside the operand: four pairs
/// of depth of every line per step (8 bytes each), the pairs of 16 lines
/// gathered by a transpose of 16-bit words (three rounds of unpacks), each
/// depth pair's 16 then widened with two `vpmovsxbw`. The last depths (fewer
/// than 8, an odd one paired with a zero) go one at a time.
///
/// # Safety
/// The CPU must support avx2; as [`pack_i8`], with `dst` holding `32 * ceil(kc/2)` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn pack_i8_lines16_avx2(src: *const i8, base: isize, sl: isize, kc: usize, d: *mut i16) {
    use std::arch::x86_64::*;
    // SAFETY: lines base + l*sl (l < 16) hold kc readable values; dst per the contract.
    unsafe {
        let line = |l: usize| src.offset(base + l as isize * sl);
        let steps = kc / 8;
        for s8 in 0..steps {
            let p = 8 * s8;
            let mut v = [_mm_setzero_si128(); 16];
            for (l, x) in v.iter_mut().enumerate() {
                *x = _mm_loadl_epi64(line(l).add(p) as *const __m128i);
            }
            // Words (pairs of depth) of lines 2i, 2i + 1 alternating, pairs 0..4.
            // (Loops, not closures: those do not take the target features.)
            let mut a = [_mm_setzero_si128(); 8];
            for (i, x) in a.iter_mut().enumerate() {
                *x = _mm_unpacklo_epi16(v[2 * i], v[2 * i + 1]);
            }
            // Four lines' words: pairs 0 and 1, then 2 and 3.
            let (mut lo, mut hi) = ([_mm_setzero_si128(); 4], [_mm_setzero_si128(); 4]);
            for j in 0..4 {
                lo[j] = _mm_unpacklo_epi32(a[2 * j], a[2 * j + 1]);
                hi[j] = _mm_unpackhi_epi32(a[2 * j], a[2 * j + 1]);
            }
            // Pair q of lines 0-7 and 8-15.
            let pairs = [
                (_mm_unpacklo_epi64(lo[0], lo[1]), _mm_unpacklo_epi64(lo[2], lo[3])),
                (_mm_unpackhi_epi64(lo[0], lo[1]), _mm_unpackhi_epi64(lo[2], lo[3])),
                (_mm_unpacklo_epi64(hi[0], hi[1]), _mm_unpacklo_epi64(hi[2], hi[3])),
                (_mm_unpackhi_epi64(hi[0], hi[1]), _mm_unpackhi_epi64(hi[2], hi[3])),
            ];
            for (q, (x0, x1)) in pairs.into_iter().enumerate() {
                let dq = d.add((4 * s8 + q) * 32);
                _mm256_storeu_si256(dq as *mut __m256i, _mm256_cvtepi8_epi16(x0));
                _mm256_storeu_si256(dq.add(16) as *mut __m256i, _mm256_cvtepi8_epi16(x1));
            }
        }
        for q in 4 * steps..kc.div_ceil(2) {
            let p = 2 * q;
            for l in 0..16 {
                *d.add(q * 32 + 2 * l) = *line(l).add(p) as i16;
                *d.add(q * 32 + 2 * l + 1) = if p + 1 < kc { *line(l).add(p + 1) as i16 } else { 0 };
            }
        }
    }
}

i8_kernel!(I8Avx2,
    unsafe fn run(&self, kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only selected when avx2 was detected.
        unsafe { i8_6x16_avx2(kc, a, b, c, rs, cs, mr, nr, accumulate) }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: forwarded contract.
        unsafe { i8_body(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
);

// AVX-512BW: the same 6x16 tile and packing, one zmm a row (16 i32 sums), with
// VNNI's fused multiply-add of pairs where the CPU has it.
i8_kernel!(I8Avx512,
    unsafe fn run(&self, kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: only selected when avx512f, avx512bw and avx2 were detected (and
        // the VNNI variant when avx512vnni was).
        unsafe {
            if super::vnni() {
                i8_6x16_vnni(kc, a, b, c, rs, cs, mr, nr, accumulate)
            } else {
                i8_6x16_avx512(kc, a, b, c, rs, cs, mr, nr, accumulate)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: forwarded contract.
        unsafe { i8_body(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
);

i8_kernel!(I8Portable,
    unsafe fn run(&self, kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
        // SAFETY: forwarded contract.
        unsafe { i8_body(kc, a, b, c, rs, cs, mr, nr, accumulate) }
    }
);

/// Portable int8 tile: exact i32 sums of i16 products (wrapping like numpy).
///
/// # Safety
/// As [`Kernel::run`].
#[allow(clippy::too_many_arguments)]
unsafe fn i8_body(kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    let mut r = [[0i32; 16]; 6];
    // SAFETY: packed strips of depth kc (pairs), tile writable.
    unsafe {
        for q in 0..kc.div_ceil(2) {
            let ap = a.add(q * 12);
            let bp = b.add(q * 32);
            for (i, ri) in r.iter_mut().enumerate() {
                let (a0, a1) = (*ap.add(2 * i) as i32, *ap.add(2 * i + 1) as i32);
                for (j, rij) in ri.iter_mut().enumerate() {
                    let s = a0 * *bp.add(2 * j) as i32 + a1 * *bp.add(2 * j + 1) as i32;
                    *rij = rij.wrapping_add(s);
                }
            }
        }
        let flat: &[i32] = std::slice::from_raw_parts(r.as_ptr() as *const i32, 96);
        store_tile_wrapping(flat, c, rs, cs, mr, nr, accumulate);
    }
}

/// # Safety
/// The `mr x nr` tile of c is writable.
#[inline(always)]
unsafe fn store_tile_wrapping(t: &[i32], c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: the caller's contract.
    unsafe {
        for i in 0..mr {
            for j in 0..nr {
                let q = c.offset(i as isize * rs + j as isize * cs);
                let v = t[i * 16 + j];
                *q = if accumulate { (*q).wrapping_add(v) } else { v };
            }
        }
    }
}

/// The 6x16 int8 tile, exact over the full range: values are widened to i16
/// when packing and `vpmaddwd` sums pairs of i16 products into i32 lanes
/// (|x*y| <= 2^14, so a pair never overflows; `vpmaddubsw` would saturate).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn i8_6x16_avx2(kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    use std::arch::x86_64::*;
    // SAFETY: packed strips of depth kc (pairs): a holds 12 and b 32 i16 per pair.
    unsafe {
        let mut r0 = [_mm256_setzero_si256(); 6];
        let mut r1 = [_mm256_setzero_si256(); 6];
        let kp = kc.div_ceil(2);
        let mut ap = a as *const i32;
        let mut bp = b as *const __m256i;
        for _ in 0..kp {
            let b0 = _mm256_loadu_si256(bp);
            let b1 = _mm256_loadu_si256(bp.add(1));
            for i in 0..6 {
                // Both i16 of row i's depth pair, in every 32-bit lane.
                let ai = _mm256_set1_epi32(std::ptr::read_unaligned(ap.add(i)));
                r0[i] = _mm256_add_epi32(r0[i], _mm256_madd_epi16(ai, b0));
                r1[i] = _mm256_add_epi32(r1[i], _mm256_madd_epi16(ai, b1));
            }
            ap = ap.add(6);
            bp = bp.add(2);
        }
        if mr == 6 && nr == 16 && cs == 1 {
            for i in 0..6 {
                let q = c.offset(i as isize * rs) as *mut __m256i;
                let (mut v0, mut v1) = (r0[i], r1[i]);
                if accumulate {
                    v0 = _mm256_add_epi32(v0, _mm256_loadu_si256(q));
                    v1 = _mm256_add_epi32(v1, _mm256_loadu_si256(q.add(1)));
                }
                _mm256_storeu_si256(q, v0);
                _mm256_storeu_si256(q.add(1), v1);
            }
        } else {
            let mut t = [0i32; 96];
            for i in 0..6 {
                _mm256_storeu_si256(t.as_mut_ptr().add(16 * i) as *mut __m256i, r0[i]);
                _mm256_storeu_si256(t.as_mut_ptr().add(16 * i + 8) as *mut __m256i, r1[i]);
            }
            store_tile_wrapping(&t, c, rs, cs, mr, nr, accumulate);
        }
    }
}

/// [`i8_6x16_avx2`] with one zmm a row: `vpmaddwd` on 16 depth pairs of the
/// row's 16 columns, added into two sets of accumulators (even and odd pairs, so
/// that the adds of one do not wait on the other's), summed at the end. Exact
/// (wrapping) i32 sums in any order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn i8_6x16_avx512(kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: forwarded contract.
    unsafe { i8_tile_avx512::<false>(kc, a, b, c, rs, cs, mr, nr, accumulate) }
}

/// [`i8_6x16_avx512`] with VNNI: `vpdpwssd` multiplies and adds the pairs in one
/// instruction.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn i8_6x16_vnni(kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    // SAFETY: forwarded contract.
    unsafe { i8_tile_avx512::<true>(kc, a, b, c, rs, cs, mr, nr, accumulate) }
}

/// The body of [`i8_6x16_avx512`] (`VNNI`: [`i8_6x16_vnni`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn i8_tile_avx512<const VNNI: bool>(kc: usize, a: *const i16, b: *const i16, c: *mut i32, rs: isize, cs: isize, mr: usize, nr: usize, accumulate: bool) {
    use std::arch::x86_64::*;
    // SAFETY: packed strips of depth kc (pairs): a holds 12 and b 32 i16 per pair.
    unsafe {
        let mut r0 = [_mm512_setzero_si512(); 6];
        let mut r1 = [_mm512_setzero_si512(); 6];
        let kp = kc.div_ceil(2);
        let mut ap = a as *const i32;
        let mut bp = b as *const __m512i;
        // Row i's sums += (both i16 of its depth pair, in every lane) . (B's pairs).
        let madd = |r: __m512i, ai: __m512i, bv: __m512i| -> __m512i {
            if VNNI {
                _mm512_dpwssd_epi32(r, ai, bv)
            } else {
                _mm512_add_epi32(r, _mm512_madd_epi16(ai, bv))
            }
        };
        let mut q = 0;
        while q + 2 <= kp {
            let b0 = _mm512_loadu_si512(bp);
            let b1 = _mm512_loadu_si512(bp.add(1));
            for i in 0..6 {
                r0[i] = madd(r0[i], _mm512_set1_epi32(std::ptr::read_unaligned(ap.add(i))), b0);
                r1[i] = madd(r1[i], _mm512_set1_epi32(std::ptr::read_unaligned(ap.add(6 + i))), b1);
            }
            ap = ap.add(12);
            bp = bp.add(2);
            q += 2;
        }
        if q < kp {
            let b0 = _mm512_loadu_si512(bp);
            for (i, r) in r0.iter_mut().enumerate() {
                *r = madd(*r, _mm512_set1_epi32(std::ptr::read_unaligned(ap.add(i))), b0);
            }
        }
        let mut t = [0i32; 96];
        for i in 0..6 {
            let v = _mm512_add_epi32(r0[i], r1[i]);
            if mr == 6 && nr == 16 && cs == 1 {
                let q = c.offset(i as isize * rs) as *mut __m512i;
                let v = if accumulate { _mm512_add_epi32(v, _mm512_loadu_si512(q)) } else { v };
                _mm512_storeu_si512(q, v);
            } else {
                _mm512_storeu_si512(t.as_mut_ptr().add(16 * i) as *mut __m512i, v);
            }
        }
        if !(mr == 6 && nr == 16 && cs == 1) {
            store_tile_wrapping(&t, c, rs, cs, mr, nr, accumulate);
        }
    }
}

// ------------------------------------------------------- small products ----

/// `C = A B` for a small product on f32 values decoded whole, without strips:
/// `a` holds A row-major (`m x k`, row stride `k`), `b` holds B row-major with
/// row stride `nb` (a multiple of 8, the columns from `n` on zero). Tiles of
/// 4 rows x 16 columns (or 8 rows x 8 columns where 8 columns are left), each
/// element summed from zero by one FMA a step in depth order: the sums of
/// [`f32_6x16_avx2`] over one depth block, bit for bit. The last row tile
/// repeats its last row (computed, not stored).
///
/// # Safety
/// The CPU must support avx2 and fma; `a` holds `m*k` values, `b` `k*nb`;
/// `c` addresses a writable `m x n` matrix; `n <= nb`, `nb % 8 == 0`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn small_f32_avx2(m: usize, n: usize, k: usize, a: *const f32, b: *const f32, nb: usize, c: super::OutMat<f32>) {
    // SAFETY: forwarded contract.
    unsafe {
        let mut j0 = 0;
        while j0 < n {
            if nb - j0 >= 16 {
                small_cols::<4, 2>(m, n, k, a, b, nb, j0, c);
                j0 += 16;
            } else {
                small_cols::<8, 1>(m, n, k, a, b, nb, j0, c);
                j0 += 8;
            }
        }
    }
}

/// The tiles of [`small_f32_avx2`] over columns `j0..j0 + 8*NV` (those below `n`
/// stored): `MR` rows at a time, `NV` vectors of 8 columns.
///
/// # Safety
/// As [`small_f32_avx2`], with `j0 + 8*NV <= nb`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn small_cols<const MR: usize, const NV: usize>(m: usize, n: usize, k: usize, a: *const f32, b: *const f32, nb: usize, j0: usize, c: super::OutMat<f32>) {
    use std::arch::x86_64::*;
    // SAFETY: rows are clamped below m and columns stay below nb, so every load is
    // inside a and b; stores go to rows below m and columns below n.
    unsafe {
        let cols = (n - j0).min(8 * NV);
        let mut i0 = 0;
        while i0 < m {
            let rows: [*const f32; MR] = std::array::from_fn(|r| a.add((i0 + r).min(m - 1) * k));
            let mut acc = [[_mm256_setzero_ps(); NV]; MR];
            let mut bp = b.add(j0);
            for p in 0..k {
                let bv: [__m256; NV] = std::array::from_fn(|v| _mm256_loadu_ps(bp.add(8 * v)));
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*rows[r].add(p));
                    for v in 0..NV {
                        acc_r[v] = _mm256_fmadd_ps(av, bv[v], acc_r[v]);
                    }
                }
                bp = bp.add(nb);
            }
            for (r, acc_r) in acc.iter().enumerate().take(m - i0) {
                let q = c.at(i0 + r, j0);
                if c.cs == 1 && cols == 8 * NV {
                    for (v, x) in acc_r.iter().enumerate() {
                        _mm256_storeu_ps(q.add(8 * v), *x);
                    }
                } else {
                    let mut t = [0f32; 16];
                    for (v, x) in acc_r.iter().enumerate() {
                        _mm256_storeu_ps(t.as_mut_ptr().add(8 * v), *x);
                    }
                    store_tile(&t, 16, q, 0, c.cs, 1, cols, false);
                }
            }
            i0 += MR;
        }
    }
}

/// One strip of [`super::driver::gemv_f32`]: `t[j] = sum_kk a[kk] * b[kk*32 + j]`
/// for the 32 columns of the strip, each sum from zero by one FMA a step in
/// order, as [`f32_6x16_avx2`] sums one depth block.
///
/// # Safety
/// The CPU must support avx2 and fma; `b` holds `a.len() * 32` values, `t` 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn gemv_strip_avx2(a: &[f32], b: &[f32], t: &mut [f32]) {
    use std::arch::x86_64::*;
    assert!(b.len() >= a.len() * 32 && t.len() >= 32);
    // SAFETY: loads inside b, stores inside t (asserted).
    unsafe {
        let mut r = [_mm256_setzero_ps(); 4];
        let mut bp = b.as_ptr();
        for &x in a {
            let av = _mm256_set1_ps(x);
            for (v, rv) in r.iter_mut().enumerate() {
                *rv = _mm256_fmadd_ps(av, _mm256_loadu_ps(bp.add(8 * v)), *rv);
            }
            bp = bp.add(32);
        }
        for (v, rv) in r.iter().enumerate() {
            _mm256_storeu_ps(t.as_mut_ptr().add(8 * v), *rv);
        }
    }
}

/// The row codes [`gemv_block_avx2`] decodes in registers: f32, bf16, fp16,
/// float8_e5m2 (the top byte of an fp16), and float8_e4m3fn placed as an fp16
/// of 4 exponent bits, which is its value times 2^-8 ([`E4M3FN_SCALE`]: the
/// caller multiplies A by 2^8 instead, which leaves every product as it was).
/// Its NaN codes read as 1.875 there; the kernels report meeting one.
pub(super) const ROW_F32: u8 = 0;
pub(super) const ROW_BF16: u8 = 1;
pub(super) const ROW_F16: u8 = 2;
pub(super) const ROW_E5M2: u8 = 3;
pub(super) const ROW_E4M3FN: u8 = 4;
/// [`ROW_E4M3FN`] where the caller found no NaN code ([`specials_free`]): no flag kept.
pub(super) const ROW_E4M3FN_CLEAN: u8 = 5;
/// Any other 8-bit float format with subnormals whose values are f32 values
/// ([`Place8`]): its code placed in an fp16 or f32 pattern and scaled. Its special
/// codes (NaN, infinities) read as numbers there; the kernels report meeting one.
pub(super) const ROW_FP8: u8 = 6;
/// [`ROW_FP8`] where the caller found no special code ([`specials_free`]): no flag kept.
pub(super) const ROW_FP8_CLEAN: u8 = 7;

/// The decoding of [`ROW_FP8`] codes of an 8-bit float format (1 sign, `e`
/// exponent and `m = 7 - e` mantissa bits, bias `b`, subnormals): the code
/// sign-extended and moved up so that its exponent field lands on that of a
/// wider float, masked to its sign and magnitude bits, is that float's
/// pattern of the value times 2^(b - bias of the wider float), subnormals
/// included (both scale their mantissa from their smallest exponent,
/// 2^(1 - bias) each); times 2^(bias - b) it is the value, exactly where
/// every value of the format is an f32. The wider float is float16 (`half`,
/// converted by `vcvtph2ps`, its subnormals to f32 normals) for up to 4
/// exponent bits, or 5 with IEEE infinities and NaNs (float16's own top
/// binade); else f32 itself (float8_e5m2fnuz: its largest binade is finite),
/// whose subnormal patterns, of the codes of exponent 0, slow the
/// multiplication down (float8_e4m3fnuz so decoded took 1.3x as long on
/// normal-distributed values).
#[derive(Clone, Copy)]
pub(super) struct Place8<'a> {
    half: bool,
    shift: u32,
    mask: u32,
    scale: f32,
    /// The special codes (NaN, infinities): `code & smask == sval`.
    smask: u8,
    sval: u8,
    /// Every code's value (the operand's table), for single elements.
    lut: &'a [f32],
}

impl Place8<'_> {
    /// No format's (for the other row codes).
    pub(super) const NONE: Place8<'static> = Place8 { half: false, shift: 0, mask: 0, scale: 1.0, smask: 0, sval: 0xff, lut: &[] };

    /// The special codes, `(smask, sval)`: `code & smask == sval`.
    pub(super) fn specials(&self) -> (u8, u8) {
        (self.smask, self.sval)
    }

    /// The 8 codes in the low bytes of `raw` as f32 lanes (the specials read as numbers).
    ///
    /// # Safety
    /// The CPU must support avx2 and f16c.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn decode8(&self, raw: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: avx2 and f16c per the caller.
        unsafe {
            let shift = _mm_cvtsi32_si128(self.shift as i32);
            let v = if self.half {
                _mm256_cvtph_ps(_mm_and_si128(_mm_sll_epi16(_mm_cvtepi8_epi16(raw), shift), _mm_set1_epi16(self.mask as i16)))
            } else {
                _mm256_castsi256_ps(_mm256_and_si256(_mm256_sll_epi32(_mm256_cvtepi8_epi32(raw), shift), _mm256_set1_epi32(self.mask as i32)))
            };
            _mm256_mul_ps(v, _mm256_set1_ps(self.scale))
        }
    }

    /// The bytes of `raw` that are special codes, set (the 8 bytes above 8 codes
    /// loaded alone are zeros, never special: `sval != 0`).
    ///
    /// # Safety
    /// The CPU must support avx2.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn specials8(&self, raw: std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i {
        use std::arch::x86_64::*;
        // SAFETY: sse2 (avx2 per the caller).
        unsafe { _mm_cmpeq_epi8(_mm_and_si128(raw, _mm_set1_epi8(self.smask as i8)), _mm_set1_epi8(self.sval as i8)) }
    }
}

/// [`Place8`] of an operand decoded through its table (`d`), where its format
/// `fmt` is an 8-bit float with subnormals other than float8_e5m2 and
/// float8_e4m3fn (their own row codes) whose values are all f32 values, and
/// whose scale is an f32 normal.
pub(super) fn place8(d: &Dec, fmt: Option<Format>) -> Option<Place8<'_>> {
    use crate::format::NanPolicy;
    let (Dec::Lut8(lut), Some(Format::Float(f))) = (d, fmt) else { return None };
    let (e, m, b) = (f.exp_bits, f.man_bits, f.bias);
    if f.bits() != 8 || !f.subnormals || fp8_kind(fmt).is_some() || !Format::Float(f).fits_f32() {
        return None;
    }
    let half = e <= 4 || e == 5 && f.nan == NanPolicy::Ieee;
    let (shift, top, bias) = if half { (10 - m, 15, 15) } else { (23 - m, 31, 127) };
    if !(-126..=127).contains(&(bias - b)) {
        return None;
    }
    let (smask, sval) = match f.nan {
        NanPolicy::Ieee => ((((1u32 << e) - 1) << m) as u8, (((1u32 << e) - 1) << m) as u8),
        NanPolicy::Fn => (0x7f, 0x7f),
        NanPolicy::Fnuz => (0xff, 0x80),
        NanPolicy::None => (0, 0xff),
    };
    let scale = f32::from_bits(((bias - b + 127) as u32) << 23);
    Some(Place8 { half, shift, mask: 1 << top | 0x7f << shift, scale, smask, sval, lut })
}

/// [`Place8`]'s decoding of one code (the specials read as numbers).
#[cfg(test)]
pub(super) fn place8_one(p: &Place8, c: u8) -> f32 {
    let x = ((c as i8 as i32) << p.shift) as u32 & p.mask;
    if p.half {
        super::f16_to_f32(x as u16) * p.scale
    } else {
        f32::from_bits(x) * p.scale
    }
}

/// `$go::<C>` with the const `C` set to the row code `$code`.
macro_rules! by_row_code {
    ($code:expr, $go:ident($($arg:expr),*)) => {
        by_row_code!($code, $go::<>($($arg),*))
    };
    ($code:expr, $go:ident::<$($g:literal),*>($($arg:expr),*)) => {
        match $code {
            ROW_F32 => $go::<$($g,)* ROW_F32>($($arg),*),
            ROW_BF16 => $go::<$($g,)* ROW_BF16>($($arg),*),
            ROW_F16 => $go::<$($g,)* ROW_F16>($($arg),*),
            ROW_E5M2 => $go::<$($g,)* ROW_E5M2>($($arg),*),
            ROW_E4M3FN => $go::<$($g,)* ROW_E4M3FN>($($arg),*),
            ROW_E4M3FN_CLEAN => $go::<$($g,)* ROW_E4M3FN_CLEAN>($($arg),*),
            ROW_FP8 => $go::<$($g,)* ROW_FP8>($($arg),*),
            _ => $go::<$($g,)* ROW_FP8_CLEAN>($($arg),*),
        }
    };
}

/// [`gemv_block_avx2`] for the row code `code`.
///
/// # Safety
/// As [`gemv_block_avx2`].
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemv_block(code: u8, p8: &Place8, a: &[f32], lda: usize, m: usize, kc: usize, b: *const u8, rs: isize, nw: usize, t: &mut [f32], ldt: usize) -> bool {
    // SAFETY: forwarded contract.
    unsafe { by_row_code!(code, gemv_block_avx2(p8, a, lda, m, kc, b, rs, nw, t, ldt)) }
}

/// What [`ROW_E4M3FN`]'s decoding leaves out of the value.
pub(super) const E4M3FN_SCALE: f32 = 256.0;

/// How [`gemv_block_avx2`] reads elements of this decoding (of format `fmt`), if it can.
pub(super) fn row_code(d: &Dec, fmt: Option<Format>) -> Option<u8> {
    match (d, fmt) {
        (Dec::F32, _) => Some(ROW_F32),
        (Dec::Bf16, _) => Some(ROW_BF16),
        (Dec::F16, _) => Some(ROW_F16),
        (Dec::Lut8(_), fmt) => fp8_kind(fmt).map(|k| if k == FP8_E5M2 { ROW_E5M2 } else { ROW_E4M3FN }).or_else(|| place8(d, fmt).map(|_| ROW_FP8)),
        _ => None,
    }
}

/// No special code `c` (`c & smask == sval`: float8_e4m3fn's NaNs 0x7f and 0xff
/// with 0x7f and 0x7f, [`Place8::specials`]) among `lines` runs of `len` bytes,
/// run l starting `l * stride` bytes after `p`: 32 bytes at a time.
///
/// # Safety
/// The CPU must support avx2; the bytes must be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn specials_free(p: *const u8, lines: usize, stride: isize, len: usize, (smask, sval): (u8, u8)) -> bool {
    use std::arch::x86_64::*;
    let full = len / 32 * 32;
    // SAFETY: the runs are readable (the caller's contract).
    unsafe {
        let (vm, vv) = (_mm256_set1_epi8(smask as i8), _mm256_set1_epi8(sval as i8));
        let mut hit = _mm256_setzero_si256();
        for l in 0..lines {
            let q = p.wrapping_offset(l as isize * stride);
            for j in (0..full).step_by(32) {
                let v = _mm256_loadu_si256(q.add(j) as *const __m256i);
                hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(_mm256_and_si256(v, vm), vv));
            }
            if (full..len).any(|j| *q.add(j) & smask == sval) {
                return false;
            }
        }
        _mm256_testz_si256(hit, hit) == 1
    }
}

/// 8 contiguous elements from element `j` of `p`, stored as `C` (a
/// [`row_code`]; [`ROW_FP8`]'s decoded by `p8`), as f32; for [`ROW_E4M3FN`]
/// the values times 2^-8, and the lanes of `nan` set where a code is a NaN
/// (bytes of it, for [`ROW_FP8`]'s special codes).
///
/// # Safety
/// The CPU must support avx2 and f16c; the 8 elements must be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
unsafe fn code_load8<const C: u8>(p: *const u8, j: usize, nan: &mut std::arch::x86_64::__m128i, p8: &Place8) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // SAFETY: the elements are readable (the caller's contract).
    unsafe {
        match C {
            ROW_F32 => _mm256_loadu_ps((p as *const f32).add(j)),
            ROW_BF16 => codes8_avx2::<false>((p as *const u16).add(j)),
            ROW_F16 => codes8_avx2::<true>((p as *const u16).add(j)),
            ROW_E5M2 => fp8x8_avx2::<false>(p.add(j)).0,
            ROW_FP8 | ROW_FP8_CLEAN => {
                let raw = _mm_loadl_epi64(p.add(j) as *const __m128i);
                if C == ROW_FP8 {
                    *nan = _mm_or_si128(*nan, p8.specials8(raw));
                }
                p8.decode8(raw)
            }
            _ => {
                // The bytes sign-extended (a NaN code, low 7 bits set, is then all
                // ones with bits 7..15 set), moved up 7 bits: the sign at bits 15 and
                // 14 (cleared), the exponent at 13..10, the mantissa at 9..7.
                let x = _mm_cvtepi8_epi16(_mm_loadl_epi64(p.add(j) as *const __m128i));
                if C == ROW_E4M3FN {
                    let all = _mm_set1_epi16(-1);
                    *nan = _mm_or_si128(*nan, _mm_cmpeq_epi16(_mm_or_si128(x, _mm_set1_epi16(0xff80_u16 as i16)), all));
                }
                _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16::<7>(x), _mm_set1_epi16(0xbfff_u16 as i16)))
            }
        }
    }
}

/// Element `j` of `p`, stored as `C`, as f32 ([`code_load8`]'s one at a time;
/// an e4m3fn NaN code is a NaN; [`ROW_FP8`]'s from its table, specials too).
///
/// # Safety
/// The element must be readable.
#[inline(always)]
unsafe fn code_one<const C: u8>(p: *const u8, j: usize, p8: &Place8) -> f32 {
    // SAFETY: the element is readable (the caller's contract).
    unsafe {
        match C {
            ROW_F32 => *(p as *const f32).add(j),
            ROW_BF16 => f32::from_bits((*(p as *const u16).add(j) as u32) << 16),
            ROW_F16 => super::f16_to_f32(*(p as *const u16).add(j)),
            ROW_E5M2 => super::f16_to_f32((*p.add(j) as u16) << 8),
            ROW_FP8 | ROW_FP8_CLEAN => p8.lut[*p.add(j) as usize],
            _ => {
                let x = *p.add(j);
                if x & 0x7f == 0x7f {
                    f32::NAN
                } else {
                    super::f16_to_f32((((x as i8 as i16) << 7) as u16) & 0xbfff)
                }
            }
        }
    }
}

/// Columns from which the row streaming of one row of A (float32's, and
/// [`super::f64v`]'s) reads eight rows of B at a time instead of four (eight
/// streams). At 1 thread, 1 x 4096 x 4096 with four took 1.16x as long in
/// float32, 1.28x in bf16, 1 x 4096 x 11008 1.07x and 1.21x; with pieces of
/// 1024 columns (2048^2 at 2 threads), eight took 1.13x as long.
pub(super) const EIGHT_ROWS_MIN: usize = 2048;

/// A depth block of [`super::driver::gemv_f32`]'s row streaming, for `m`
/// rows of A: `t[r * ldt + j] = sum_kk a[r * lda + kk] * row_kk[j]` for `r < m`,
/// `kk < kc`, `j < nw`, each from zero by one FMA a step in order, where row kk
/// of B starts `kk * rs` bytes after `b` and holds `nw` contiguous elements
/// stored as `C` (a [`row_code`]; [`ROW_E4M3FN`]'s values read times 2^-8, so
/// A's are to be given times 2^8). Four rows of B at a time (four streams read
/// side by side; eight for one row of A and at least [`EIGHT_ROWS_MIN`] columns), 16 columns
/// of them decoded once for all the rows of A.
/// Returns false, `t` then void, where an e4m3fn NaN code was read in a vector.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; the rows' first nw elements must
/// be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemv_block_avx2<const C: u8>(p8: &Place8, a: &[f32], lda: usize, m: usize, kc: usize, b: *const u8, rs: isize, nw: usize, t: &mut [f32], ldt: usize) -> bool {
    use std::arch::x86_64::*;
    assert!(C <= ROW_FP8_CLEAN && m >= 1 && kc <= lda && nw <= ldt && a.len() >= (m - 1) * lda + kc && t.len() >= (m - 1) * ldt + nw);
    for r in 0..m {
        t[r * ldt..r * ldt + nw].fill(0.0);
    }
    let full = nw / 8 * 8;
    // SAFETY: the rows' first nw elements are readable (the caller's contract);
    // the loads of A and the loads and stores of t stay inside them (asserted).
    unsafe {
        let mut nan = _mm_setzero_si128();
        let mut load = |p: *const u8, j: usize| code_load8::<C>(p, j, &mut nan, p8);
        let one = |p: *const u8, j: usize| code_one::<C>(p, j, p8);
        // Steps kk..kk + $q (rows of B: four at a time, the last ones one at a
        // time), 16 columns at a time: their values decoded once, then for each
        // row of A its sums of those columns loaded, the FMAs in step order, the
        // sums stored (each sum's FMAs in the same order as one row at a time).
        macro_rules! steps {
            ($kk:expr, $q:literal) => {
                let rows: [*const u8; $q] = std::array::from_fn(|s| b.wrapping_offset(($kk + s) as isize * rs));
                let mut j = 0;
                while j + 16 <= full {
                    let b0: [__m256; $q] = std::array::from_fn(|s| load(rows[s], j));
                    let b1: [__m256; $q] = std::array::from_fn(|s| load(rows[s], j + 8));
                    for r in 0..m {
                        let (ar, tp) = (&a[r * lda + $kk..r * lda + $kk + $q], t.as_mut_ptr().add(r * ldt));
                        let mut v0 = _mm256_loadu_ps(tp.add(j));
                        let mut v1 = _mm256_loadu_ps(tp.add(j + 8));
                        for s in 0..$q {
                            let av = _mm256_set1_ps(ar[s]);
                            v0 = _mm256_fmadd_ps(av, b0[s], v0);
                            v1 = _mm256_fmadd_ps(av, b1[s], v1);
                        }
                        _mm256_storeu_ps(tp.add(j), v0);
                        _mm256_storeu_ps(tp.add(j + 8), v1);
                    }
                    j += 16;
                }
                while j < full {
                    let b0: [__m256; $q] = std::array::from_fn(|s| load(rows[s], j));
                    for r in 0..m {
                        let (ar, tp) = (&a[r * lda + $kk..r * lda + $kk + $q], t.as_mut_ptr().add(r * ldt));
                        let mut v = _mm256_loadu_ps(tp.add(j));
                        for s in 0..$q {
                            v = _mm256_fmadd_ps(_mm256_set1_ps(ar[s]), b0[s], v);
                        }
                        _mm256_storeu_ps(tp.add(j), v);
                    }
                    j += 8;
                }
                for r in 0..m {
                    let (ar, tp) = (&a[r * lda + $kk..r * lda + $kk + $q], t.as_mut_ptr().add(r * ldt));
                    for jj in full..nw {
                        let mut v = *tp.add(jj);
                        for (s, &x) in ar.iter().enumerate() {
                            v = x.mul_add(one(rows[s], jj), v);
                        }
                        *tp.add(jj) = v;
                    }
                }
            };
        }
        // One row of A: each vector of sums loaded once, the rows' values decoded
        // into its FMAs (the loop above holds them across the rows: for one, about
        // 15% slower).
        macro_rules! steps_one {
            ($kk:expr, $q:literal) => {
                let rows: [*const u8; $q] = std::array::from_fn(|s| b.wrapping_offset(($kk + s) as isize * rs));
                let (ar, tp) = (&a[$kk..$kk + $q], t.as_mut_ptr());
                let av: [__m256; $q] = std::array::from_fn(|s| _mm256_set1_ps(ar[s]));
                let mut j = 0;
                while j + 16 <= full {
                    let mut v0 = _mm256_loadu_ps(tp.add(j));
                    let mut v1 = _mm256_loadu_ps(tp.add(j + 8));
                    for s in 0..$q {
                        v0 = _mm256_fmadd_ps(av[s], load(rows[s], j), v0);
                        v1 = _mm256_fmadd_ps(av[s], load(rows[s], j + 8), v1);
                    }
                    _mm256_storeu_ps(tp.add(j), v0);
                    _mm256_storeu_ps(tp.add(j + 8), v1);
                    j += 16;
                }
                while j < full {
                    let mut v = _mm256_loadu_ps(tp.add(j));
                    for s in 0..$q {
                        v = _mm256_fmadd_ps(av[s], load(rows[s], j), v);
                    }
                    _mm256_storeu_ps(tp.add(j), v);
                    j += 8;
                }
                for jj in full..nw {
                    let mut v = *tp.add(jj);
                    for (s, &x) in ar.iter().enumerate() {
                        v = x.mul_add(one(rows[s], jj), v);
                    }
                    *tp.add(jj) = v;
                }
            };
        }
        let quads = kc / 4 * 4;
        if m == 1 && nw >= EIGHT_ROWS_MIN {
            let octs = kc / 8 * 8;
            for kk in (0..octs).step_by(8) {
                steps_one!(kk, 8);
            }
            for kk in octs..kc {
                steps_one!(kk, 1);
            }
        } else if m == 1 {
            for kk in (0..quads).step_by(4) {
                steps_one!(kk, 4);
            }
            for kk in quads..kc {
                steps_one!(kk, 1);
            }
        } else {
            for kk in (0..quads).step_by(4) {
                steps!(kk, 4);
            }
            for kk in quads..kc {
                steps!(kk, 1);
            }
        }
        _mm_testz_si128(nan, nan) == 1
    }
}

/// [`gemv_cols_avx2`] for the row code `code`, `rows` rows of A, `groups` groups of 8 columns
/// and the second group `skew` steps behind.
///
/// # Safety
/// As [`gemv_cols_avx2`].
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemv_cols(code: u8, p8: &Place8, rows: usize, groups: usize, skew: usize, x: &[f32], lda: usize, b: *const u8, cs: isize, nc: usize, kc: usize, t: &mut [f32], ldt: usize) -> bool {
    macro_rules! go {
        ($r:literal, $g:literal) => {
            // SAFETY: forwarded contract.
            unsafe { by_row_code!(code, gemv_cols_avx2::<$r, $g>(p8, x, lda, b, cs, nc, kc, skew, t, ldt)) }
        };
    }
    match (rows, groups) {
        (1, 1) => go!(1, 1),
        (1, 2) => go!(1, 2),
        (2, 1) => go!(2, 1),
        (3, 1) => go!(3, 1),
        (4, 1) => go!(4, 1),
        (5, 1) => go!(5, 1),
        (6, 1) => go!(6, 1),
        (7, 1) => go!(7, 1),
        (8, 1) => go!(8, 1),
        _ => panic!("gemv_cols: {rows} rows of A in {groups} groups of columns; 1 to 8 rows in one group, or one row in two, are taken"),
    }
}

/// A depth block of [`super::driver::gemv_f32`]'s column dots: `t[r * ldt +
/// l] = sum_kk x[r * lda + kk] * col_l[kk]` for the `R` rows r of A and the `nc
/// <= 8 * G` columns l whose `kc` elements are contiguous, column l starting
/// `l * cs` bytes after `b`, stored as `C` (as [`gemv_block_avx2`]'s rows;
/// [`ROW_E4M3FN`]'s values, read times 2^-8, multiplied back by 2^8 once
/// transposed, where the rows take A's values times 2^8: one multiplication
/// per 8 values, not A's block scaled for every group); each sum from zero by one FMA a step in
/// order, as the loop nest sums a depth block. 8 steps of 8 columns are loaded
/// and transposed in registers (lanes are columns: [`cols_t8`]), once for all
/// the rows, the groups' in turn. The rows, and the `G` groups of 8 columns,
/// are the independent chains of FMAs: one row in one group is bound by its
/// chain (8 FMAs a block of 64 elements). The second group may run `skew`
/// steps behind the first (a multiple of 8): where the columns are a multiple
/// of 2 KiB apart, its lines then lie in other L1 sets than the first group's.
/// The last steps go one column at a time. Returns false, `t` then void, where
/// an e4m3fn NaN code was read in a vector.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; the columns' first `kc` elements
/// must be readable, and `x` must hold them for every row; `1 <= nc <= 8 * G`;
/// `t` must hold `R` rows of `ldt >= 8 * G`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemv_cols_avx2<const R: usize, const G: usize, const C: u8>(p8: &Place8, x: &[f32], lda: usize, b: *const u8, cs: isize, nc: usize, kc: usize, skew: usize, t: &mut [f32], ldt: usize) -> bool {
    use std::arch::x86_64::*;
    assert!((1..=2).contains(&G) && (1..=8 * G).contains(&nc) && ldt >= 8 * G && t.len() >= (R - 1) * ldt + 8 * G);
    assert!(C <= ROW_FP8_CLEAN && x.len() >= (R - 1) * lda + kc && skew.is_multiple_of(8) && (skew == 0 || G == 2));
    // e4m3fn's values, read times 2^-8, taken back up (exactly) here.
    let e4m3 = C == ROW_E4M3FN || C == ROW_E4M3FN_CLEAN;
    // SAFETY: columns l < nc (the last one standing in for the missing ones),
    // elements below kc, are readable per the contract; x's reads and t's
    // stores inside them (asserted).
    unsafe {
        let cols: [[*const u8; 8]; G] = std::array::from_fn(|g| std::array::from_fn(|l| b.wrapping_offset((8 * g + l).min(nc - 1) as isize * cs)));
        let mut acc = [[_mm256_setzero_ps(); G]; R];
        let mut nan = _mm_setzero_si128();
        let xp = x.as_ptr();
        // 8 steps from `$j` of group `$g`, for every row. (A macro: as a
        // closure, not always inlined, it kept the sums in memory.)
        macro_rules! piece {
            ($g:expr, $j:expr) => {
                let w = cols_t8::<C>(&cols[$g], $j, &mut nan, p8);
                let w = if e4m3 { w.map(|v| _mm256_mul_ps(v, _mm256_set1_ps(E4M3FN_SCALE))) } else { w };
                for (r, ar) in acc.iter_mut().enumerate() {
                    let xr = xp.add(r * lda + $j);
                    for (q, wq) in w.iter().enumerate() {
                        ar[$g] = _mm256_fmadd_ps(_mm256_set1_ps(*xr.add(q)), *wq, ar[$g]);
                    }
                }
            };
        }
        let full = kc / 8 * 8;
        // The second group `skew` steps behind the first.
        for j in (0..full + skew).step_by(8) {
            if j < full {
                piece!(0, j);
            }
            if G > 1 && j >= skew && j - skew < full {
                piece!(1, j - skew);
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            let tp = t.as_mut_ptr().add(r * ldt);
            for (g, v) in ar.iter().enumerate() {
                _mm256_storeu_ps(tp.add(8 * g), *v);
            }
            for (l, &col) in cols.iter().flatten().enumerate().take(nc) {
                for q in full..kc {
                    let v = if e4m3 { code_one::<C>(col, q, p8) * E4M3FN_SCALE } else { code_one::<C>(col, q, p8) };
                    *tp.add(l) = (*xp.add(r * lda + q)).mul_add(v, *tp.add(l));
                }
            }
        }
        _mm_testz_si128(nan, nan) == 1
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The AVX-512 int8 tiles, with and without VNNI (where the CPU has them), give the
    /// portable tile's wrapped i32 sums on packed strips of full-range values, odd and
    /// even depths, whole and partial tiles, contiguous and strided C, with and
    /// without accumulation.
    #[test]
    fn int8_avx512_tiles_match_the_portable_tile() {
        if !(std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw")) {
            return;
        }
        let vnni = std::is_x86_feature_detected!("avx512vnni");
        let mut x = 12345u32;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for kc in [1usize, 2, 3, 7, 64, 511, 512] {
            let kp = kc.div_ceil(2);
            // Packed as pack_i8 lays out pairs (an odd depth's last pair padded with 0).
            let mut a: Vec<i16> = (0..12 * kp).map(|_| (next() % 256) as i16 - 128).collect();
            let mut b: Vec<i16> = (0..32 * kp).map(|_| (next() % 256) as i16 - 128).collect();
            if kc % 2 == 1 {
                for l in 0..6 {
                    a[(kp - 1) * 12 + 2 * l + 1] = 0;
                }
                for l in 0..16 {
                    b[(kp - 1) * 32 + 2 * l + 1] = 0;
                }
            }
            if kc == 512 {
                a.iter_mut().for_each(|v| *v = -128);
                b.iter_mut().for_each(|v| *v = -128);
            }
            for (mr, nr, cs) in [(6, 16, 1isize), (5, 16, 1), (6, 3, 1), (6, 16, 20)] {
                for accumulate in [false, true] {
                    let init: Vec<i32> = (0..400).map(|_| next() as i32).collect();
                    let mut want = init.clone();
                    let rs = if cs == 1 { 20 } else { 1 };
                    // SAFETY: strips of depth kc; the tile lies inside the 400 elements.
                    unsafe { i8_body(kc, a.as_ptr(), b.as_ptr(), want.as_mut_ptr(), rs, cs, mr, nr, accumulate) };
                    let mut got = init.clone();
                    // SAFETY: as above; avx512f and avx512bw were detected.
                    unsafe { i8_6x16_avx512(kc, a.as_ptr(), b.as_ptr(), got.as_mut_ptr(), rs, cs, mr, nr, accumulate) };
                    assert_eq!(got, want, "kc {kc} {mr}x{nr} cs {cs} accumulate {accumulate}");
                    if vnni {
                        let mut got = init.clone();
                        // SAFETY: as above; avx512vnni was detected.
                        unsafe { i8_6x16_vnni(kc, a.as_ptr(), b.as_ptr(), got.as_mut_ptr(), rs, cs, mr, nr, accumulate) };
                        assert_eq!(got, want, "vnni kc {kc} {mr}x{nr} cs {cs} accumulate {accumulate}");
                    }
                }
            }
        }
    }
}
