//! int8 products of few rows and matrix-vector products, without the loop
//! nest's packing: B is read once, in place, and each int32 sum is exact
//! (wrapping past 2^31 as the loop nest's does), so that any order of the
//! adds gives the loop nest's result.
//!
//! - B's columns contiguous (`x @ w.T` with w row-major, and a row-major A
//!   times a vector, run transposed): dot products along the depth, 16 values
//!   of a column widened to i16 with one `vpmovsxbw` and multiplied by the
//!   rows of A (widened once, into a buffer) with `vpmaddwd`, whose pairs of
//!   products never overflow (|x*y| <= 2^14); the lanes summed at the end.
//! - B's rows contiguous (`x @ w`): four rows of B at a time, 16 columns of
//!   each widened and interleaved into pairs of depth for `vpmaddwd` against
//!   A's pairs broadcast, the sums of a chunk of columns in an L1 buffer.
//!
//! Against the loop nest, which packs B widened to i16 (twice its bytes)
//! before reading it, at 1 thread: 1 x 4096 x 4096 from 3.3 ms (B row-major)
//! and 7.7 ms (w.T) to 0.45 and 0.37; 4096 x 4096 x 1 from 8.3 to 0.37 ms;
//! 8 x 4096 x 4096 from 4.8 and 8.8 ms to 2.5 and 3.3.

use super::{driver::gemv_split, OutMat, Operand, Storage};

/// Rows of A the int8 vector paths take, at most.
pub(super) const ROWS: usize = 8;

/// Columns of C a chunk of the row streaming sums in its buffer, over all the
/// rows of A (64 KiB of i32 sums, in L2; each row's sums padded off multiples
/// of 4 KiB, which would share their L1 sets): each row of B read in pieces of
/// `CHUNK / m` columns, each a stream for the prefetchers. (At 4096, 1 x 4096
/// x 11008 took 1.35x as long at 1 thread, 4 x 4096 x 4096 1.5x, 8 x 4096 x
/// 4096 1.3x; at 16384 without the padding, 8 rows took 1.3x as long.)
const CHUNK: usize = 16384;

/// `c = a @ b` for int8 operands by the vector paths, where they take the
/// shape: one column of B (run transposed), or at most [`ROWS`] rows of A, with
/// B's rows or its columns contiguous. Returns false, having done nothing,
/// for other shapes. Splits the columns of C over the threads as the float
/// vector paths do ([`gemv_split`]).
///
/// # Safety
/// The CPU must support avx2; the operands and `c` as for the loop nest.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn gemv_i8(a: &Operand, b: &Operand, c: OutMat<i32>) -> bool {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 || k == 0 || a.storage != Storage::I8 || b.storage != Storage::I8 {
        return false;
    }
    // 9 to 16 columns of B against more rows of A: two products of at most ROWS
    // columns, each run transposed below (A read twice, where the loop nest would
    // widen and pack all of it: 4096 x 4096 x 16 took 8.5 ms, 12 columns as long).
    if n > ROWS && n <= 2 * ROWS && m > 2 * ROWS && (a.rs == 1 || a.cs == 1) {
        use super::driver::{cols_of, sub_out};
        // SAFETY: the halves of B and C are views inside them; forwarded contract.
        return unsafe { gemv_i8(a, &cols_of(b, 0, ROWS), sub_out(c, 0, m, 0, ROWS)) && gemv_i8(a, &cols_of(b, ROWS, n), sub_out(c, 0, m, ROWS, n)) };
    }
    // One column of B, or a few against more rows of A whose rows or columns are
    // contiguous: the transposed product, few rows of its A.
    let t = n == 1 && m > 1 || n <= ROWS && m > ROWS && (a.rs == 1 || a.cs == 1);
    let (a, b, c) = if t { (b.t(), a.t(), c.t()) } else { (a.clone(), b.clone(), c) };
    let (m, n) = (a.rows, b.cols);
    if m > ROWS || !(b.rs == 1 || b.cs == 1) {
        return false;
    }
    // A's rows widened to i16, row r at r * kp, zeros past k.
    let kp = k.div_ceil(16) * 16;
    let mut x = vec![0i16; m * kp];
    let ap = a.ptr as *const i8;
    for r in 0..m {
        for (kk, v) in x[r * kp..r * kp + k].iter_mut().enumerate() {
            // SAFETY: element (r, kk) of a.
            *v = unsafe { *ap.offset(r as isize * a.rs + kk as isize * a.cs) } as i16;
        }
    }
    let bp = codes(&b);
    if b.rs == 1 {
        // Column dots, in units of one kernel's columns.
        let width = cols_width(m);
        let units = n.div_ceil(width);
        let run = |u0: usize, u1: usize| {
            let bp = codes(&b);
            let mut t = [0i32; 16];
            for u in u0..u1 {
                let (j0, w) = (u * width, width.min(n - u * width));
                // SAFETY: columns j0..j0+w of b, k elements each (rs = 1); avx2 per the caller.
                unsafe { cols(m, &x, kp, k, bp.offset(j0 as isize * b.cs), b.cs, w, &mut t) };
                for r in 0..m {
                    for l in 0..w {
                        // SAFETY: (r, j0 + l) is inside c.
                        unsafe { *c.at(r, j0 + l) = t[r * width + l] };
                    }
                }
            }
        };
        gemv_split(units, m * n * k, &run);
    } else {
        // Row streaming: strips of 16 columns split over the threads, each part in
        // chunks whose sums stay in L1; the last columns (n % 16) one at a time.
        let strips = n / 16;
        let chunk = (CHUNK / m / 16).max(1);
        let run = |s0: usize, s1: usize| {
            let bp = codes(&b);
            let ldt = super::padded_ld(16 * chunk, 4).expect("i32 sums");
            let mut t = vec![0i32; m * ldt];
            for q0 in (s0..s1).step_by(chunk) {
                let w = 16 * (chunk.min(s1 - q0));
                // SAFETY: rows 0..k of b, columns 16*q0.. 16*q0 + w; avx2 per the caller.
                unsafe { rows(m, &x, kp, k, bp.offset(16 * q0 as isize), b.rs, w, &mut t, ldt) };
                for r in 0..m {
                    for (p, &v) in t[r * ldt..r * ldt + w].iter().enumerate() {
                        // SAFETY: (r, column) is inside c.
                        unsafe { *c.at(r, 16 * q0 + p / 16 * 16 + ROWS_LANE[p % 16]) = v };
                    }
                }
            }
        };
        gemv_split(strips, m * n * k, &run);
        for j in 16 * strips..n {
            for r in 0..m {
                let mut s = 0i32;
                for (kk, &v) in x[r * kp..r * kp + k].iter().enumerate() {
                    // SAFETY: element (kk, j) of b.
                    s = s.wrapping_add(v as i32 * unsafe { *bp.offset(kk as isize * b.rs + j as isize) } as i32);
                }
                // SAFETY: (r, j) is inside c.
                unsafe { *c.at(r, j) = s };
            }
        }
    }
    true
}

/// The int8 elements of `b` (taken whole by the closures that call this, an
/// operand being Sync where its pointer alone is not).
fn codes(b: &Operand) -> *const i8 {
    b.ptr as *const i8
}

/// Columns of C a unit of the column dots takes for `m` rows of A (at most 16
/// sums in all, in registers with the widened column and A's rows read from L1).
fn cols_width(m: usize) -> usize {
    match m {
        1 => 8,
        2 => 4,
        3 | 4 => 3,
        5 | 6 => 2,
        _ => 1,
    }
}

/// [`cols_avx2`] for `m` rows of A in units of [`cols_width`]`(m)` columns.
///
/// # Safety
/// As [`cols_avx2`].
#[cfg(target_arch = "x86_64")]
unsafe fn cols(m: usize, x: &[i16], kp: usize, k: usize, b: *const i8, cs: isize, nc: usize, t: &mut [i32; 16]) {
    macro_rules! go {
        ($r:literal, $c:literal) => {{
            // (The caller reads t in units of cols_width(m).)
            assert_eq!($c, cols_width(m));
            // SAFETY: forwarded contract.
            unsafe { cols_avx2::<$r, $c>(x, kp, k, b, cs, nc, t) }
        }};
    }
    match m {
        1 => go!(1, 8),
        2 => go!(2, 4),
        3 => go!(3, 3),
        4 => go!(4, 3),
        5 => go!(5, 2),
        6 => go!(6, 2),
        7 => go!(7, 1),
        8 => go!(8, 1),
        _ => unreachable!("1 to {ROWS} rows"),
    }
}

/// The column dots of `R` rows of A (widened, `x[r * kp..][..k]`, zeros up to
/// `kp`, a multiple of 16) and the `nc <= C` int8 columns of `k` contiguous
/// elements starting `cs` apart from `b`: `t[r * C + l] = sum_kk x[r, kk] *
/// col_l[kk]`, exact in i32 (wrapping). Each step takes 16 elements of every
/// column: one `vpmovsxbw`, then a `vpmaddwd` and an add for each row; the
/// last `k % 16` go one at a time.
///
/// # Safety
/// The CPU must support avx2; the columns' first `k` elements must be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn cols_avx2<const R: usize, const C: usize>(x: &[i16], kp: usize, k: usize, b: *const i8, cs: isize, nc: usize, t: &mut [i32; 16]) {
    use std::arch::x86_64::*;
    assert!(R * C <= 16 && (1..=C).contains(&nc) && kp.is_multiple_of(16) && kp >= k && x.len() >= R * kp);
    // SAFETY: columns l < nc (the last one standing in for the missing ones),
    // elements below k, are readable per the contract; x's reads inside it (asserted).
    unsafe {
        let mut col = [b; C];
        for (l, p) in col.iter_mut().enumerate() {
            *p = b.wrapping_offset(l.min(nc - 1) as isize * cs);
        }
        let xp = x.as_ptr();
        let mut acc = [[_mm256_setzero_si256(); C]; R];
        let full = k / 16 * 16;
        for kk in (0..full).step_by(16) {
            for l in 0..C {
                let w = _mm256_cvtepi8_epi16(_mm_loadu_si128(col[l].add(kk) as *const __m128i));
                for (r, ar) in acc.iter_mut().enumerate() {
                    let xr = _mm256_loadu_si256(xp.add(r * kp + kk) as *const __m256i);
                    ar[l] = _mm256_add_epi32(ar[l], _mm256_madd_epi16(xr, w));
                }
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            for (l, v) in ar.iter().enumerate() {
                // The 8 lanes' sum.
                let h = _mm_add_epi32(_mm256_castsi256_si128(*v), _mm256_extracti128_si256::<1>(*v));
                let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0x4e>(h));
                let h = _mm_add_epi32(h, _mm_shuffle_epi32::<0xb1>(h));
                let mut s = _mm_cvtsi128_si32(h);
                for kk in full..k {
                    s = s.wrapping_add(*xp.add(r * kp + kk) as i32 * *col[l].add(kk) as i32);
                }
                t[r * C + l] = s;
            }
        }
    }
}

/// The column of C held by lane `p` of a strip of [`rows_avx2`]'s sums: the
/// low and high halves of `vpunpck{l,h}wd` take columns 0-3 and 8-11, then 4-7
/// and 12-15.
const ROWS_LANE: [usize; 16] = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15];

/// [`rows_avx2`] for `m` rows of A.
///
/// # Safety
/// As [`rows_avx2`].
#[cfg(target_arch = "x86_64")]
unsafe fn rows(m: usize, x: &[i16], kp: usize, k: usize, b: *const i8, rs: isize, w: usize, t: &mut [i32], ldt: usize) {
    macro_rules! go {
        ($r:literal) => {
            // SAFETY: forwarded contract.
            unsafe { rows_avx2::<$r>(x, kp, k, b, rs, w, t, ldt) }
        };
    }
    match m {
        1 => go!(1),
        2 => go!(2),
        3 => go!(3),
        4 => go!(4),
        5 => go!(5),
        6 => go!(6),
        7 => go!(7),
        8 => go!(8),
        _ => unreachable!("1 to {ROWS} rows"),
    }
}

/// The row streaming of `R` rows of A (widened, `x[r * kp..][..k]`, zeros up
/// to `kp`) over `w` (a multiple of 16) int8 columns of B, its `k` rows `rs`
/// apart from `b`, each row's `w` values contiguous: `t[r * w..][..w]` gets
/// row r's sums, each strip of 16 in the lane order [`ROWS_LANE`]. Four rows
/// of B at a time, 16 columns of each widened with `vpmovsxbw`, two rows
/// interleaved into pairs of depth for `vpmaddwd` against A's pair (both
/// products of a pair summed exactly in i32), the sums read from and written
/// back to `t` once per four rows.
///
/// # Safety
/// The CPU must support avx2; the `w` values of each of the `k` rows must be readable.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rows_avx2<const R: usize>(x: &[i16], kp: usize, k: usize, b: *const i8, rs: isize, w: usize, t: &mut [i32], ldt: usize) {
    use std::arch::x86_64::*;
    assert!(w.is_multiple_of(16) && ldt >= w && t.len() >= (R - 1) * ldt + w && kp >= k && x.len() >= R * kp);
    // SAFETY: rows below k, columns below w of b are readable per the contract;
    // x's and t's accesses inside them (asserted).
    unsafe {
        for r in 0..R {
            t[r * ldt..r * ldt + w].fill(0);
        }
        let (xp, tp) = (x.as_ptr(), t.as_mut_ptr());
        // A's pair (kk, kk + 1) of row r as one i32 (zero past k: x holds zeros to kp,
        // or k is even).
        let pair = |r: usize, kk: usize| {
            let lo = *xp.add(r * kp + kk) as u16 as u32;
            let hi = if kk + 1 < k { *xp.add(r * kp + kk + 1) as u16 as u32 } else { 0 };
            (lo | hi << 16) as i32
        };
        // Rows kk and kk + 1 of B (a zero row past k), 16 columns from s, widened and
        // interleaved: columns 0-3 and 8-11 in pairs, then 4-7 and 12-15.
        macro_rules! pairs {
            ($kk:expr, $s:expr) => {{
                let r0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.offset($kk as isize * rs).add($s) as *const __m128i));
                let r1 = if $kk + 1 < k { _mm256_cvtepi8_epi16(_mm_loadu_si128(b.offset(($kk + 1) as isize * rs).add($s) as *const __m128i)) } else { _mm256_setzero_si256() };
                (_mm256_unpacklo_epi16(r0, r1), _mm256_unpackhi_epi16(r0, r1))
            }};
        }
        for kk in (0..k).step_by(4) {
            let two = kk + 2 < k;
            let mut x0 = [0i32; R];
            let mut x1 = [0i32; R];
            for r in 0..R {
                x0[r] = pair(r, kk);
                x1[r] = if two { pair(r, kk + 2) } else { 0 };
            }
            for s in (0..w).step_by(16) {
                let (l0, h0) = pairs!(kk, s);
                let (l1, h1) = if two { pairs!(kk + 2, s) } else { (_mm256_setzero_si256(), _mm256_setzero_si256()) };
                for r in 0..R {
                    let (a0, a1) = (_mm256_set1_epi32(x0[r]), _mm256_set1_epi32(x1[r]));
                    let q = tp.add(r * ldt + s) as *mut __m256i;
                    let lo = _mm256_add_epi32(_mm256_madd_epi16(l0, a0), _mm256_madd_epi16(l1, a1));
                    let hi = _mm256_add_epi32(_mm256_madd_epi16(h0, a0), _mm256_madd_epi16(h1, a1));
                    _mm256_storeu_si256(q, _mm256_add_epi32(_mm256_loadu_si256(q), lo));
                    _mm256_storeu_si256(q.add(1), _mm256_add_epi32(_mm256_loadu_si256(q.add(1)), hi));
                }
            }
        }
    }
}
