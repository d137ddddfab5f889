//! Vector products with f64 accumulation (float64 and posit32 inputs, or
//! `accumulate="float64"`), as the float32 ones ([`super::driver::gemv_f32`]):
//! one row of A times B, A times one column of B (run transposed), or up to
//! [`ROWS`] rows of A with B's rows or columns contiguous, read once, over the
//! units of C's columns of [`gemv_units`]. The loop nest would pack all of B
//! for tiles of 6 rows, 5 of them padding.
//!
//! - B's rows contiguous, stored as f64, f32, bf16 or fp16 ([`code`]):
//!   streamed four rows at a time (eight for one row of A) and decoded in
//!   registers ([`rows_avx2`]).
//! - B's columns so stored and contiguous (`x @ w.T`; a row-major A times a
//!   vector): dotted 8 (or 4) at a time, 8 steps of 4 columns transposed in
//!   registers ([`cols_avx2`]).
//! - Any other B: strip by strip of [`W`] columns, packed as the loop nest
//!   packs them ([`gemv_strips`], [`strip_avx2`]).
//!
//! Each sum is the loop nest's FMAs in its order (a depth block summed from
//! zero, then added to the total): the same bits.

use super::driver::{gemv_strips, gemv_units, gemv_width};
use super::kernels::{F64Avx2, EIGHT_ROWS_MIN};
use super::{Dec, OutMat, Operand};

/// Rows of A taken with B's rows or columns contiguous, at most.
pub(super) const ROWS: usize = 8;

/// Steps each group of the column dots runs behind the one before where
/// columns alias ([`cols_avx2`]).
const SKEW: usize = 16;

/// Columns of a strip where B goes strip by strip (a strip of a depth block: 32 KiB).
const W: usize = 16;

/// B's elements as the kernels read them: f64, f32, bf16 and fp16 codes.
const F64: u8 = 0;
const F32: u8 = 1;
const BF16: u8 = 2;
const F16: u8 = 3;

/// How [`rows_avx2`] and [`cols_avx2`] read elements of this decoding, if they can.
pub(super) fn code(d: &Dec) -> Option<u8> {
    match d {
        Dec::F64 => Some(F64),
        Dec::F32 => Some(F32),
        Dec::Bf16 => Some(BF16),
        Dec::F16 => Some(F16),
        _ => None,
    }
}

/// `$go::<.., D>(..)` with the const `D` set to the code `$code`.
macro_rules! by_code {
    ($code:expr, $go:ident::<$($g:literal),*>($($arg:expr),*)) => {
        match $code {
            F64 => $go::<$($g,)* F64>($($arg),*),
            F32 => $go::<$($g,)* F32>($($arg),*),
            BF16 => $go::<$($g,)* BF16>($($arg),*),
            _ => $go::<$($g,)* F16>($($arg),*),
        }
    };
}

/// `c = a @ b` with f64 accumulation by the vector paths, where they take
/// the shape (see the module); returns false, having done nothing, for others.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; the operands and `c` as for the loop nest.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn gemv_f64(a: &Operand, b: &Operand, c: OutMat<f64>) -> bool {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 || k == 0 {
        return false;
    }
    let (a, b, c) = match (m, n) {
        (1, _) => (a.clone(), b.clone(), c),
        // One column of B: the transposed product, one row of its A.
        (_, 1) => (b.t(), a.t(), c.t()),
        (2..=ROWS, _) if (b.cs == 1 || b.rs == 1) && code(&b.dec).is_some() => (a.clone(), b.clone(), c),
        // A few columns of B against more rows of A: the transposed product, few
        // rows of its A, where A's rows or columns are contiguous.
        (_, 2..=ROWS) if (a.cs == 1 || a.rs == 1) && code(&a.dec).is_some() => (b.t(), a.t(), c.t()),
        _ => return false,
    };
    let (b, m, n) = (&b, a.rows, b.cols);
    let bytes = b.storage.bytes() as isize;
    // Element (pc, j0) of B.
    let at = move |pc: usize, j0: usize| b.ptr.wrapping_offset((pc as isize * b.rs + j0 as isize * b.cs) * bytes);
    let strips = |av: &[f64], lda: usize, pc: usize, kc: usize, j0: usize, w: usize, t: &mut [f64], ldt: usize| {
        // SAFETY: rows pc..pc+kc, columns j0..j0+w of b; the CPU features per the contract.
        unsafe { gemv_strips::<F64Avx2, f64, W>(b, strip_avx2, av, lda, m, pc, kc, j0, w, t, ldt) }
    };
    // SAFETY (all): each block reads rows pc..pc+kc and columns j0..j0+w of b,
    // which lie inside it; the caller guarantees the CPU features.
    unsafe {
        match (b.cs, b.rs, code(&b.dec)) {
            (1, _, Some(d)) => gemv_units::<F64Avx2, f64>(&a, c, n, gemv_width(m, n, k), &|av, lda, pc, kc, j0, w, t, ldt| {
                let rs = b.rs * bytes;
                by_code!(d, rows_avx2::<>(av, lda, m, kc, at(pc, j0), rs, w, t, ldt))
            }),
            (_, 1, Some(d)) => {
                // Groups of 4 columns: two up to 5 rows, one from 6 (the sums of two
                // groups of 6 rows and more spill). For one row, one group (one chain
                // of FMAs) took 1.15x as long from memory and 1.7x from L3; four
                // groups (16 columns read side by side) 1.4x and 1.1x; 4 rows in one
                // group 1.17x, 7 rows in two 1.3x.
                let groups = if m <= 5 { 2 } else { 1 };
                // Columns a multiple of 4 KiB apart: the groups' lines at one step
                // in other L1 sets (4 x 1024 x 1024 with B as w.T took 1.12x as long
                // without, one row times it 1.0-1.02x; with four groups a row,
                // 1024 x 1024 x 1 1.9x).
                let skew = if (b.cs * bytes) % 4096 == 0 { SKEW } else { 0 };
                gemv_units::<F64Avx2, f64>(&a, c, n, 4 * groups, &|av, lda, pc, kc, j0, w, t, ldt| {
                    let (p, cs) = (at(pc, j0), b.cs * bytes);
                    macro_rules! go {
                        ($r:literal, $g:literal) => {
                            by_code!(d, cols_avx2::<$r, $g>(av, lda, p, cs, w, kc, skew, t, ldt))
                        };
                    }
                    match m {
                        1 => go!(1, 2),
                        2 => go!(2, 2),
                        3 => go!(3, 2),
                        4 => go!(4, 2),
                        5 => go!(5, 2),
                        6 => go!(6, 1),
                        7 => go!(7, 1),
                        _ => go!(8, 1),
                    }
                })
            }
            // Rows contiguous in a format without a code (posits, tables): units
            // as wide as the row streaming's, their strips reading neighbouring
            // pieces of the same rows (fetched ahead).
            (1, _, None) => gemv_units::<F64Avx2, f64>(&a, c, n, gemv_width(m, n, k), &strips),
            _ => gemv_units::<F64Avx2, f64>(&a, c, n, W, &strips),
        }
    }
    true
}

/// Elements `j..j + 4` at `p`, stored as `D` ([`code`]), as f64 (exact).
///
/// # Safety
/// The CPU must support avx2 and f16c (the caller enables them); the elements must be readable.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load4<const D: u8>(p: *const u8, j: usize) -> std::arch::x86_64::__m256d {
    use std::arch::x86_64::*;
    // SAFETY: per the caller.
    unsafe {
        match D {
            F64 => _mm256_loadu_pd((p as *const f64).add(j)),
            F32 => _mm256_cvtps_pd(_mm_loadu_ps((p as *const f32).add(j))),
            BF16 => {
                let w = _mm_cvtepu16_epi32(_mm_loadl_epi64((p as *const u16).add(j) as *const __m128i));
                _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32::<16>(w)))
            }
            _ => _mm256_cvtps_pd(_mm_cvtph_ps(_mm_loadl_epi64((p as *const u16).add(j) as *const __m128i))),
        }
    }
}

/// Element `j` at `p`, stored as `D`, as f64 ([`load4`]'s one at a time).
///
/// # Safety
/// The element must be readable.
#[inline(always)]
unsafe fn one<const D: u8>(p: *const u8, j: usize) -> f64 {
    // SAFETY: per the caller.
    unsafe {
        match D {
            F64 => *(p as *const f64).add(j),
            F32 => *(p as *const f32).add(j) as f64,
            BF16 => f32::from_bits((*(p as *const u16).add(j) as u32) << 16) as f64,
            _ => super::f16_to_f32(*(p as *const u16).add(j)) as f64,
        }
    }
}

/// A depth block of the row streaming, for `m` rows of A: `t[r * ldt + j] =
/// sum_kk a[r * lda + kk] * row_kk[j]` for `r < m`, `kk < kc`, `j < nw`, each
/// from zero by one FMA a step in order, where row kk of B starts `kk * rs`
/// bytes after `b` and holds `nw` contiguous elements stored as `D`. Four rows
/// of B at a time (four streams side by side; eight for one row of A and at
/// least [`EIGHT_ROWS_MIN`] columns), 8 columns of them decoded once for all the rows of A.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; the rows' first `nw` elements must be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn rows_avx2<const D: u8>(a: &[f64], lda: usize, m: usize, kc: usize, b: *const u8, rs: isize, nw: usize, t: &mut [f64], ldt: usize) {
    use std::arch::x86_64::*;
    assert!(m >= 1 && kc <= lda && nw <= ldt && a.len() >= (m - 1) * lda + kc && t.len() >= (m - 1) * ldt + nw);
    for r in 0..m {
        t[r * ldt..r * ldt + nw].fill(0.0);
    }
    let full = nw / 4 * 4;
    // SAFETY: the rows' first nw elements are readable (the caller's contract);
    // the loads of A and the loads and stores of t stay inside them (asserted).
    unsafe {
        // Steps kk..kk + $q, 8 columns (then 4) at a time, for every row of A;
        // the last columns one at a time. (A macro: closures do not take the
        // caller's target features.)
        macro_rules! steps {
            ($kk:expr, $q:literal) => {
                let mut rows = [b; $q];
                for (s, row) in rows.iter_mut().enumerate() {
                    *row = b.wrapping_offset(($kk + s) as isize * rs);
                }
                let mut j = 0;
                while j < full {
                    let two = j + 8 <= full;
                    let (mut b0, mut b1) = ([_mm256_setzero_pd(); $q], [_mm256_setzero_pd(); $q]);
                    for s in 0..$q {
                        b0[s] = load4::<D>(rows[s], j);
                        if two {
                            b1[s] = load4::<D>(rows[s], j + 4);
                        }
                    }
                    for r in 0..m {
                        let (ar, tp) = (a.as_ptr().add(r * lda + $kk), t.as_mut_ptr().add(r * ldt + j));
                        let mut v0 = _mm256_loadu_pd(tp);
                        let mut v1 = if two { _mm256_loadu_pd(tp.add(4)) } else { v0 };
                        for s in 0..$q {
                            let av = _mm256_set1_pd(*ar.add(s));
                            v0 = _mm256_fmadd_pd(av, b0[s], v0);
                            if two {
                                v1 = _mm256_fmadd_pd(av, b1[s], v1);
                            }
                        }
                        _mm256_storeu_pd(tp, v0);
                        if two {
                            _mm256_storeu_pd(tp.add(4), v1);
                        }
                    }
                    j += if two { 8 } else { 4 };
                }
                for r in 0..m {
                    let (ar, tp) = (&a[r * lda + $kk..r * lda + $kk + $q], t.as_mut_ptr().add(r * ldt));
                    for jj in full..nw {
                        let mut v = *tp.add(jj);
                        for (s, &x) in ar.iter().enumerate() {
                            v = x.mul_add(one::<D>(rows[s], jj), v);
                        }
                        *tp.add(jj) = v;
                    }
                }
            };
        }
        // Long pieces of one row: eight rows of B at a time (with four, 1 x 4096
        // x 4096 took 1.2x as long at 2 threads, 2048^2 1.3x at 1).
        let (q8, quads) = if m == 1 && nw >= EIGHT_ROWS_MIN { (kc / 8 * 8, kc / 8 * 8) } else { (0, kc / 4 * 4) };
        for kk in (0..q8).step_by(8) {
            steps!(kk, 8);
        }
        for kk in (q8..quads).step_by(4) {
            steps!(kk, 4);
        }
        for kk in quads..kc {
            steps!(kk, 1);
        }
    }
}

/// A depth block of the column dots: `t[r * ldt + l] = sum_kk x[r * lda +
/// kk] * col_l[kk]` for the `R` rows r of A and the `nc <= 4 * G` columns l
/// whose `kc` elements are contiguous, column l starting `l * cs` bytes after
/// `b`, stored as `D`; each sum from zero by one FMA a step in order. 8 steps
/// of each group of 4 columns (a line of f64 values) are loaded and
/// transposed in registers, lanes being columns, once for all the rows; the
/// rows and the `G` groups are the independent chains of FMAs. Group g runs
/// `g * skew` steps behind the first (a multiple of 8). The last steps go one
/// column at a time.
///
/// # Safety
/// The CPU must support avx2, fma and f16c; the columns' first `kc` elements
/// must be readable, and `x` must hold them for every row; `1 <= nc <= 4 * G`;
/// `t` must hold `R` rows of `ldt >= 4 * G`; `skew` a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn cols_avx2<const R: usize, const G: usize, const D: u8>(x: &[f64], lda: usize, b: *const u8, cs: isize, nc: usize, kc: usize, skew: usize, t: &mut [f64], ldt: usize) {
    use std::arch::x86_64::*;
    assert!((1..=4 * G).contains(&nc) && ldt >= 4 * G && t.len() >= (R - 1) * ldt + 4 * G && kc <= lda && x.len() >= (R - 1) * lda + kc && skew.is_multiple_of(8));
    // SAFETY: columns l < nc (the last one standing in for the missing ones),
    // elements below kc, are readable per the contract; x's reads and t's
    // stores inside them (asserted).
    unsafe {
        let mut cols = [[b; 4]; G];
        for (g, group) in cols.iter_mut().enumerate() {
            for (l, col) in group.iter_mut().enumerate() {
                *col = b.wrapping_offset((4 * g + l).min(nc - 1) as isize * cs);
            }
        }
        // Steps j..j + 4 of the 4 columns of `$g`, lane l column l. f64: two
        // steps of columns l (low half) and l + 2 (high half) a register, by a
        // load, a load to both halves and a blend (on any pipe), then unpacked
        // (2 shuffles for 4 steps: Zen 3 shuffles on two of its four pipes).
        // Others: 4 steps of each column decoded, then transposed (8 shuffles).
        macro_rules! steps4 {
            ($g:expr, $j:expr) => {{
                let c = &cols[$g];
                if D == F64 {
                    macro_rules! pair {
                        ($lo:expr, $hi:expr, $d:expr) => {
                            _mm256_blend_pd::<0b1100>(
                                _mm256_castpd128_pd256(_mm_loadu_pd(($lo as *const f64).add($d))),
                                _mm256_broadcast_pd(&*(($hi as *const f64).add($d) as *const __m128d)),
                            )
                        };
                    }
                    let (a0, b0) = (pair!(c[0], c[2], $j), pair!(c[1], c[3], $j));
                    let (a1, b1) = (pair!(c[0], c[2], $j + 2), pair!(c[1], c[3], $j + 2));
                    [_mm256_unpacklo_pd(a0, b0), _mm256_unpackhi_pd(a0, b0), _mm256_unpacklo_pd(a1, b1), _mm256_unpackhi_pd(a1, b1)]
                } else {
                    super::kernels::transpose4_pd([load4::<D>(c[0], $j), load4::<D>(c[1], $j), load4::<D>(c[2], $j), load4::<D>(c[3], $j)])
                }
            }};
        }
        let mut acc = [[_mm256_setzero_pd(); G]; R];
        let xp = x.as_ptr();
        let full = kc / 8 * 8;
        // Steps j..j + 8 of group g, for every row of A.
        macro_rules! piece {
            ($g:expr, $j:expr) => {
                for h in [$j, $j + 4] {
                    let v = steps4!($g, h);
                    for (r, ar) in acc.iter_mut().enumerate() {
                        let xr = xp.add(r * lda + h);
                        let mut s = ar[$g];
                        s = _mm256_fmadd_pd(_mm256_set1_pd(*xr), v[0], s);
                        s = _mm256_fmadd_pd(_mm256_set1_pd(*xr.add(1)), v[1], s);
                        s = _mm256_fmadd_pd(_mm256_set1_pd(*xr.add(2)), v[2], s);
                        ar[$g] = _mm256_fmadd_pd(_mm256_set1_pd(*xr.add(3)), v[3], s);
                    }
                }
            };
        }
        // Group g runs g * skew steps behind the first (where the columns are a
        // multiple of 4 KiB apart, the lines of all of them at one step would
        // fall in one L1 set of 8 ways). Where every group has steps
        // (lag..full), the loop without checks; before and after it, the
        // groups that have.
        let lag = (G - 1) * skew;
        macro_rules! ends {
            ($range:expr) => {
                for j0 in $range.step_by(8) {
                    for g in 0..G {
                        if let Some(j) = j0.checked_sub(g * skew).filter(|&j| j < full) {
                            piece!(g, j);
                        }
                    }
                }
            };
        }
        ends!(0..lag);
        for j0 in (lag..full).step_by(8) {
            for g in 0..G {
                piece!(g, j0 - g * skew);
            }
        }
        ends!(full.max(lag)..full + lag);
        for (r, ar) in acc.iter().enumerate() {
            let tp = t.as_mut_ptr().add(r * ldt);
            for (g, v) in ar.iter().enumerate() {
                _mm256_storeu_pd(tp.add(4 * g), *v);
            }
            for (l, &col) in cols.iter().flatten().enumerate().take(nc) {
                for q in full..kc {
                    *tp.add(l) = (*xp.add(r * lda + q)).mul_add(one::<D>(col, q), *tp.add(l));
                }
            }
        }
    }
}

/// One strip where B goes strip by strip: `t[j] = sum_kk a[kk] * b[kk * W +
/// j]` for the [`W`] columns of the strip, each sum from zero by one FMA a
/// step in order, as the loop nest's f64 tile sums a depth block.
///
/// # Safety
/// The CPU must support avx2 and fma.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn strip_avx2(a: &[f64], b: &[f64], t: &mut [f64]) {
    use std::arch::x86_64::*;
    assert!(b.len() >= a.len() * W && t.len() >= W);
    // SAFETY: loads inside b, stores inside t (asserted).
    unsafe {
        let mut r = [_mm256_setzero_pd(); W / 4];
        let mut bp = b.as_ptr();
        for &x in a {
            let av = _mm256_set1_pd(x);
            for (v, rv) in r.iter_mut().enumerate() {
                *rv = _mm256_fmadd_pd(av, _mm256_loadu_pd(bp.add(4 * v)), *rv);
            }
            bp = bp.add(W);
        }
        for (v, rv) in r.iter().enumerate() {
            _mm256_storeu_pd(t.as_mut_ptr().add(4 * v), *rv);
        }
    }
}
