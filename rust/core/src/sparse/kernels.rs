//! The sparse x dense kernels.
//!
//! Two loop shapes serve every format:
//! - *gather* (`A @ B` for row-compressed structures): each output row is a sum
//!   of scaled rows of `B`, kept in registers (up to 64 columns = 8 AVX2
//!   accumulators at a time) and written once. Rows are split into chunks of
//!   about equal nonzero count; a row is always computed by one thread in one
//!   order, so results do not depend on the thread count.
//! - *scatter* (`A.T @ B`, COO): each nonzero adds a scaled row of `B` into a
//!   row of the output. Work is cut into a number of chunks fixed by the
//!   problem size; each chunk adds into its own buffer and the buffers are
//!   summed in chunk order, so results do not depend on the thread count either.
//!
//! Structures describe themselves through [`Gather`] / [`Scatter`] and the
//! drivers are generic over them; values decode through [`Val`].

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Dense, Idx, Index, Values};
use crate::convert::{isa, Isa};
use crate::parallel::{num_threads, pool};
use crate::{Error, Result};

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

// ---------------------------------------------------------------- values

/// Stored values, decoded to f32 one at a time.
pub(crate) trait Val: Sync + Send + Copy {
    /// Address of value `p` (for prefetching; `p` may lie past the end).
    fn addr(self, p: usize) -> *const i8;
    /// # Safety
    /// `p` is below the number of stored values.
    unsafe fn at(self, p: usize) -> f32;
    /// Values `p .. p + 8` as one vector.
    /// # Safety
    /// `p + 8` is at most the number of values; AVX2 is available.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn at8(self, p: usize) -> __m256 {
        // SAFETY: forwarded from the caller.
        unsafe {
            _mm256_setr_ps(self.at(p), self.at(p + 1), self.at(p + 2), self.at(p + 3), self.at(p + 4), self.at(p + 5), self.at(p + 6), self.at(p + 7))
        }
    }
    /// Whether [`Val::at16`] returns lanes `p + [0..4, 8..12]` and `p + [4..8, 12..16]`
    /// (instead of `p + 0..8` and `p + 8..16`).
    const INTERLEAVED16: bool = false;
    /// Values `p .. p + 16` as two vectors (lane order: [`Val::INTERLEAVED16`]).
    /// # Safety
    /// `p + 16` is at most the number of values; AVX2 is available.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn at16(self, p: usize) -> (__m256, __m256) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.at8(p), self.at8(p + 8)) }
    }
    /// Value `p` broadcast to a vector.
    /// # Safety
    /// `p` is below the number of values; AVX2 is available.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn bcast(self, p: usize) -> __m256 {
        // SAFETY: forwarded from the caller.
        unsafe { _mm256_set1_ps(self.at(p)) }
    }
    /// Values `p` and `p + 1`, each broadcast to a vector.
    /// # Safety
    /// `p + 1` is below the number of values; AVX is available.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn bcast2(self, p: usize) -> (__m256, __m256) {
        // SAFETY: forwarded from the caller.
        unsafe { (_mm256_set1_ps(self.at(p)), _mm256_set1_ps(self.at(p + 1))) }
    }
}

#[derive(Clone, Copy)]
struct VF32<'a>(&'a [f32]);
#[derive(Clone, Copy)]
struct VBf16<'a>(&'a [u16]);
#[derive(Clone, Copy)]
struct VTab8<'a>(&'a [u8], &'a [f32; 256]);
#[derive(Clone, Copy)]
struct VTab16<'a>(&'a [u16], &'a [f32; 65536]);

impl Val for VF32<'_> {
    #[inline(always)]
    fn addr(self, p: usize) -> *const i8 {
        self.0.as_ptr().wrapping_add(p).cast()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn at8(self, p: usize) -> __m256 {
        // SAFETY: p + 8 <= len (caller).
        unsafe { _mm256_loadu_ps(self.0.as_ptr().add(p)) }
    }
    #[inline(always)]
    unsafe fn at(self, p: usize) -> f32 {
        // SAFETY: the caller guarantees p < len.
        unsafe { *self.0.get_unchecked(p) }
    }
}
impl Val for VBf16<'_> {
    const INTERLEAVED16: bool = true;
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn bcast(self, p: usize) -> __m256 {
        // SAFETY: p < len (caller): the code broadcast to every 16-bit lane; clearing the low
        // half of each 32-bit lane leaves the code shifted into the top half.
        unsafe {
            let w = _mm256_set1_epi16(self.0.as_ptr().add(p).read() as i16);
            _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536)))
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn at16(self, p: usize) -> (__m256, __m256) {
        // SAFETY: p + 16 <= len (caller): one 32-byte load. Interleaving zeros below each code
        // (within each 128-bit lane) puts codes 0-3 and 8-11, then 4-7 and 12-15, in the top
        // halves of f32 lanes.
        unsafe {
            let w = _mm256_loadu_si256(self.0.as_ptr().add(p).cast());
            let z = _mm256_setzero_si256();
            (_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, w)), _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, w)))
        }
    }
    #[inline(always)]
    fn addr(self, p: usize) -> *const i8 {
        self.0.as_ptr().wrapping_add(p).cast()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn bcast2(self, p: usize) -> (__m256, __m256) {
        // SAFETY: p + 1 < len (caller): one 4-byte load holds both codes (p in the low half).
        unsafe {
            let w = _mm256_set1_epi32(self.0.as_ptr().add(p).cast::<i32>().read_unaligned());
            // Code p shifted into the top half; code p + 1 already there, low half cleared.
            (_mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536))))
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn at8(self, p: usize) -> __m256 {
        // SAFETY: p + 8 <= len (caller): one 16-byte load; widen and shift each code into
        // the top half of an f32.
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(self.0.as_ptr().add(p).cast())), 16)) }
    }
    #[inline(always)]
    unsafe fn at(self, p: usize) -> f32 {
        // bf16 is the top half of an f32: shift the code into place.
        // SAFETY: the caller guarantees p < len.
        f32::from_bits((unsafe { *self.0.get_unchecked(p) } as u32) << 16)
    }
}
impl Val for VTab8<'_> {
    #[inline(always)]
    fn addr(self, p: usize) -> *const i8 {
        self.0.as_ptr().wrapping_add(p).cast()
    }
    #[inline(always)]
    unsafe fn at(self, p: usize) -> f32 {
        // SAFETY: p < len by the caller; a u8 code always indexes the 256-entry table.
        unsafe { *self.1.get_unchecked(*self.0.get_unchecked(p) as usize) }
    }
}
impl Val for VTab16<'_> {
    #[inline(always)]
    fn addr(self, p: usize) -> *const i8 {
        self.0.as_ptr().wrapping_add(p).cast()
    }
    #[inline(always)]
    unsafe fn at(self, p: usize) -> f32 {
        // SAFETY: p < len by the caller; a u16 code always indexes the 65536-entry table.
        unsafe { *self.1.get_unchecked(*self.0.get_unchecked(p) as usize) }
    }
}

/// Call `$body` with `$v` bound to the typed values.
macro_rules! with_vals {
    ($vals:expr, $v:ident, $body:expr) => {
        match $vals {
            Values::F32(x) => {
                let $v = VF32(x);
                $body
            }
            Values::Bf16(x) => {
                let $v = VBf16(x);
                $body
            }
            Values::Tab8(x, t) => {
                let $v = VTab8(x, t.try_into().map_err(|_| Error::value("table: need 256 entries"))?);
                $body
            }
            Values::Tab16(x, t) => {
                let $v = VTab16(x, t.try_into().map_err(|_| Error::value("table: need 65536 entries"))?);
                $body
            }
        }
    };
}

/// Call `$body` with `$a`, `$b` bound to two index slices of one type.
macro_rules! with_idx2 {
    ($x:expr, $y:expr, $a:ident, $b:ident, $body:expr) => {
        match ($x, $y) {
            (Index::I32($a), Index::I32($b)) => $body,
            (Index::I64($a), Index::I64($b)) => $body,
            _ => return Err(Error::type_("indices, indptr: must share one integer type (int32 or int64)")),
        }
    };
}

// ---------------------------------------------------------------- structures

/// A row-compressed structure read by output row.
pub(crate) trait Gather: Sync {
    /// Units of work (a CSR row, a BSR block row).
    fn units(&self) -> usize;
    /// Output rows per unit.
    fn rows_per_unit(&self) -> usize;
    /// How rows may be grouped into register tiles.
    fn tiling(&self) -> Tiling {
        Tiling::None
    }
    /// A matrix-vector kernel of the structure's own for rows `u0..u1`, on every path.
    fn spmv(&self, _u0: usize, _u1: usize, _x: &[f32], _out: &mut [f32]) -> Option<bool> {
        None
    }
    /// A kernel of the structure's own for rows `u0..u1` (None: the generic ones).
    /// # Safety
    /// AVX2 and FMA are available.
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_chunk(&self, _u0: usize, _u1: usize, _b: Dense<'_>, _out: &mut [f32]) -> Option<bool> {
        None
    }
    /// Nonzeros before unit `u` (non-decreasing in `u`; `u <= units`).
    fn cost(&self, u: usize) -> usize;
    /// Positions of unit `u` (the same for each of its rows), in bounds.
    fn range(&self, u: usize) -> (usize, usize);
    /// Value and input row at position `p` of row `r` of unit `u`; an invalid
    /// index gives `usize::MAX`.
    /// # Safety
    /// `p` lies in `range(u)` and `r < rows_per_unit()`.
    unsafe fn at(&self, u: usize, r: usize, p: usize) -> (f32, usize);
    /// [`Gather::at`] with the value broadcast to a vector.
    /// # Safety
    /// As for [`Gather::at`]; AVX2 is available.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn at_bcast(&self, u: usize, r: usize, p: usize) -> (__m256, usize) {
        // SAFETY: forwarded from the caller.
        unsafe {
            let (v, j) = self.at(u, r, p);
            (_mm256_set1_ps(v), j)
        }
    }
}

/// Register tiling a structure allows (besides one row at a time).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tiling {
    None,
    /// One row per unit, each `per_row` positions long starting at `u * per_row`:
    /// consecutive rows can be walked in lockstep (N:M).
    Uniform(usize),
    /// The rows of a unit share their input rows position by position (BSR):
    /// one load of a B row serves every row of the tile.
    SharedCols,
}

/// A structure read nonzero by nonzero, adding into arbitrary output rows.
pub(crate) trait Scatter: Sync {
    fn units(&self) -> usize;
    fn cost(&self, u: usize) -> usize;
    fn range(&self, u: usize) -> (usize, usize);
    /// Value, output row, input row at position `p` of unit `u` (unchecked rows).
    /// # Safety
    /// `p` lies in `range(u)`.
    unsafe fn at(&self, u: usize, p: usize) -> (f32, usize, usize);
    /// The error for an index found out of range, given the output and input row counts.
    fn index_error(&self, n_out: usize, n_in: usize) -> Error {
        let _ = (n_out, n_in);
        bad_index()
    }
}

struct Csr<'a, V, I> {
    v: V,
    ptr: &'a [I],
    idx: &'a [I],
}

impl<V: Val, I: Idx> Gather for Csr<'_, V, I> {
    fn units(&self) -> usize {
        self.ptr.len() - 1
    }
    fn rows_per_unit(&self) -> usize {
        1
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_chunk(&self, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32]) -> Option<bool> {
        if b.cols != 1 {
            return None;
        }
        let idx = I::as_i32(self.idx)?;
        // SAFETY: forwarded from the caller (AVX2 available).
        Some(unsafe { csr_spmv_i32(self, idx, u0, u1, b.data, out) })
    }
    #[inline(always)]
    fn cost(&self, u: usize) -> usize {
        self.ptr[u].u()
    }
    #[inline(always)]
    fn range(&self, u: usize) -> (usize, usize) {
        // SAFETY: u < units, so u + 1 < ptr.len().
        unsafe { (self.ptr.get_unchecked(u).u(), self.ptr.get_unchecked(u + 1).u()) }
    }
    #[inline(always)]
    unsafe fn at(&self, _u: usize, _r: usize, p: usize) -> (f32, usize) {
        // SAFETY: p < ptr[last] == idx.len() == number of values (checked before the call).
        unsafe { (self.v.at(p), self.idx.get_unchecked(p).u()) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn at_bcast(&self, _u: usize, _r: usize, p: usize) -> (__m256, usize) {
        // SAFETY: as for at.
        unsafe { (self.v.bcast(p), self.idx.get_unchecked(p).u()) }
    }
}

/// CSR rows scattered into the output by column: `A.T @ B`.
impl<V: Val, I: Idx> Scatter for Csr<'_, V, I> {
    fn units(&self) -> usize {
        self.ptr.len() - 1
    }
    #[inline(always)]
    fn cost(&self, u: usize) -> usize {
        self.ptr[u].u()
    }
    #[inline(always)]
    fn range(&self, u: usize) -> (usize, usize) {
        <Self as Gather>::range(self, u)
    }
    #[inline(always)]
    unsafe fn at(&self, u: usize, p: usize) -> (f32, usize, usize) {
        // SAFETY: as for Gather::at.
        unsafe { (self.v.at(p), self.idx.get_unchecked(p).u(), u) }
    }
}

struct Coo<'a, V, I> {
    v: V,
    out: &'a [I],
    inp: &'a [I],
    /// Whether `out` holds the columns (`A.T @ B`), so that errors name the right array.
    transposed: bool,
}

impl<V: Val, I: Idx> Scatter for Coo<'_, V, I> {
    fn units(&self) -> usize {
        self.out.len()
    }
    #[inline(always)]
    fn cost(&self, u: usize) -> usize {
        u
    }
    #[inline(always)]
    fn range(&self, u: usize) -> (usize, usize) {
        (u, u + 1)
    }
    #[inline(always)]
    unsafe fn at(&self, _u: usize, p: usize) -> (f32, usize, usize) {
        // SAFETY: p < units == len of out, inp and values (checked before the call).
        unsafe { (self.v.at(p), self.out.get_unchecked(p).u(), self.inp.get_unchecked(p).u()) }
    }
    /// Names `row` or `col` (a COO has no `indices`), checking `row` first.
    fn index_error(&self, n_out: usize, n_in: usize) -> Error {
        let (out, inp) = ((self.out, n_out), (self.inp, n_in));
        let (row, col) = if self.transposed { (inp, out) } else { (out, inp) };
        for (name, (idx, bound)) in [("row", row), ("col", col)] {
            if let Some(pos) = idx.iter().position(|&x| x.u() >= bound) {
                return Error::value(format!("{name}: entry {pos} is out of range [0, {bound})"));
            }
        }
        // Rewritten by another thread since the kernel read it.
        bad_index()
    }
}

/// BSR with blocks `br x bc`; `BC` > 0 fixes `bc` at compile time.
struct Bsr<'a, V, I, const BC: usize> {
    v: V,
    ptr: &'a [I],
    idx: &'a [I],
    br: usize,
    bc_rt: usize,
    /// Block columns.
    nbc: usize,
}

impl<V, I, const BC: usize> Bsr<'_, V, I, BC> {
    #[inline(always)]
    fn bc(&self) -> usize {
        if BC > 0 {
            BC
        } else {
            self.bc_rt
        }
    }
}

impl<V: Val, I: Idx, const BC: usize> Gather for Bsr<'_, V, I, BC> {
    fn units(&self) -> usize {
        self.ptr.len() - 1
    }
    fn rows_per_unit(&self) -> usize {
        self.br
    }
    fn tiling(&self) -> Tiling {
        Tiling::SharedCols
    }
    #[cfg(target_arch = "x86_64")]
    unsafe fn avx2_chunk(&self, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32]) -> Option<bool> {
        if b.cols != 1 {
            return None;
        }
        // SAFETY: forwarded from the caller (AVX2 available).
        match (BC, self.br) {
            (8, 8) => Some(unsafe { bsr8_spmv(self, u0, u1, b.data, out) }),
            (4, 4) => Some(unsafe { bsr4_spmv(self, u0, u1, b.data, out) }),
            _ => None,
        }
    }
    fn spmv(&self, u0: usize, u1: usize, x: &[f32], out: &mut [f32]) -> Option<bool> {
        let (br, bc) = (self.br, self.bc());
        if br > 16 {
            return None;
        }
        let mut ok = true;
        for u in u0..u1 {
            // One partial sum per row of the block row; each block reads its slice of x once.
            let mut acc = [0f32; 16];
            // SAFETY: u < units, so u + 1 < ptr.len(); ptr was checked (non-decreasing, last = blocks).
            let (s, e) = unsafe { (self.ptr.get_unchecked(u).u(), self.ptr.get_unchecked(u + 1).u()) };
            for blk in s..e {
                // SAFETY: blk < ptr[last] == idx.len().
                let j = unsafe { self.idx.get_unchecked(blk).u() };
                let Some(xs) = (if j < self.nbc { x.get(j * bc..j * bc + bc) } else { None }) else {
                    ok = false;
                    continue;
                };
                for (r, a) in acc.iter_mut().take(br).enumerate() {
                    let base = (blk * br + r) * bc;
                    let mut t = 0f32;
                    for (c, &xv) in xs.iter().enumerate() {
                        // SAFETY: base + c < (blk + 1) * br * bc <= number of values.
                        t += unsafe { self.v.at(base + c) } * xv;
                    }
                    *a += t;
                }
            }
            out[(u - u0) * br..(u - u0 + 1) * br].copy_from_slice(&acc[..br]);
        }
        Some(ok)
    }
    #[inline(always)]
    fn cost(&self, u: usize) -> usize {
        self.ptr[u].u() * self.br * self.bc()
    }
    #[inline(always)]
    fn range(&self, u: usize) -> (usize, usize) {
        let bc = self.bc();
        // SAFETY: u < units, so u + 1 < ptr.len().
        unsafe { (self.ptr.get_unchecked(u).u() * bc, self.ptr.get_unchecked(u + 1).u() * bc) }
    }
    #[inline(always)]
    unsafe fn at(&self, _u: usize, r: usize, p: usize) -> (f32, usize) {
        let bc = self.bc();
        let (blk, c) = (p / bc, p % bc);
        // SAFETY: p / bc < ptr[last] == idx.len() == values / (br * bc), and r < br.
        unsafe {
            let j = self.idx.get_unchecked(blk).u();
            let col = if j < self.nbc { j * bc + c } else { usize::MAX };
            (self.v.at((blk * self.br + r) * bc + c), col)
        }
    }
}

/// BSR block rows scattered by block column: `A.T @ B`.
impl<V: Val, I: Idx, const BC: usize> Scatter for Bsr<'_, V, I, BC> {
    fn units(&self) -> usize {
        self.ptr.len() - 1
    }
    #[inline(always)]
    fn cost(&self, u: usize) -> usize {
        self.ptr[u].u() * self.br * self.bc()
    }
    #[inline(always)]
    fn range(&self, u: usize) -> (usize, usize) {
        let s = self.br * self.bc();
        // SAFETY: u < units, so u + 1 < ptr.len().
        unsafe { (self.ptr.get_unchecked(u).u() * s, self.ptr.get_unchecked(u + 1).u() * s) }
    }
    #[inline(always)]
    unsafe fn at(&self, u: usize, p: usize) -> (f32, usize, usize) {
        let bc = self.bc();
        let s = self.br * bc;
        let (blk, rem) = (p / s, p % s);
        let (r, c) = (rem / bc, rem % bc);
        // SAFETY: p < values.len() == idx.len() * s; blk < idx.len().
        unsafe {
            let j = self.idx.get_unchecked(blk).u();
            let col = if j < self.nbc { j * bc + c } else { usize::MAX };
            (self.v.at(p), col, u * self.br + r)
        }
    }
}

/// N:M rows; `N`, `M` > 0 fix the pattern at compile time.
struct Nm<'a, V, const N: usize, const M: usize> {
    v: V,
    idx: &'a [u8],
    n_rt: usize,
    m_rt: usize,
    bits: usize,
    /// Stored values per row.
    per_row: usize,
    rows: usize,
}

impl<V, const N: usize, const M: usize> Nm<'_, V, N, M> {
    #[inline(always)]
    fn n(&self) -> usize {
        if N > 0 {
            N
        } else {
            self.n_rt
        }
    }
    #[inline(always)]
    fn m(&self) -> usize {
        if M > 0 {
            M
        } else {
            self.m_rt
        }
    }
    /// Column of slot `p` of row `u`, or usize::MAX for a position outside its group.
    #[inline(always)]
    unsafe fn col(&self, u: usize, p: usize) -> usize {
        let bits = if M == 4 { 2 } else { self.bits };
        let bit = p * bits;
        // SAFETY: p < rows * per_row and idx holds ceil(that * bits / 8) bytes.
        let byte = unsafe { *self.idx.get_unchecked(bit >> 3) };
        // bits divides 8, so a field never straddles bytes: shift it down and mask.
        let pos = ((byte >> (bit & 7)) as usize) & ((1 << bits) - 1);
        if pos >= self.m() {
            return usize::MAX;
        }
        (p - u * self.per_row) / self.n() * self.m() + pos
    }
}

impl<V: Val, const N: usize, const M: usize> Gather for Nm<'_, V, N, M> {
    fn units(&self) -> usize {
        self.rows
    }
    fn rows_per_unit(&self) -> usize {
        1
    }
    fn tiling(&self) -> Tiling {
        Tiling::Uniform(self.per_row)
    }
    #[inline(always)]
    fn cost(&self, u: usize) -> usize {
        u * self.per_row
    }
    #[inline(always)]
    fn range(&self, u: usize) -> (usize, usize) {
        (u * self.per_row, (u + 1) * self.per_row)
    }
    #[inline(always)]
    unsafe fn at(&self, u: usize, _r: usize, p: usize) -> (f32, usize) {
        // SAFETY: p < rows * per_row == number of values (checked before the call).
        unsafe { (self.v.at(p), self.col(u, p)) }
    }
}

impl<V: Val, const N: usize, const M: usize> Scatter for Nm<'_, V, N, M> {
    fn units(&self) -> usize {
        self.rows
    }
    #[inline(always)]
    fn cost(&self, u: usize) -> usize {
        u * self.per_row
    }
    #[inline(always)]
    fn range(&self, u: usize) -> (usize, usize) {
        (u * self.per_row, (u + 1) * self.per_row)
    }
    #[inline(always)]
    unsafe fn at(&self, u: usize, p: usize) -> (f32, usize, usize) {
        // SAFETY: as for Gather::at.
        unsafe { (self.v.at(p), self.col(u, p), u) }
    }
}

// ---------------------------------------------------------------- gather driver

fn bad_index() -> Error {
    Error::value("indices: an index is out of range (negative or past the matrix shape)")
}

/// First unit whose weighted cost reaches `target` (weight: nonzeros plus one per row).
fn split_point<G: Gather>(g: &G, target: usize) -> usize {
    let rpu = g.rows_per_unit();
    let (mut lo, mut hi) = (0usize, g.units());
    while lo < hi {
        let mid = (lo + hi) / 2;
        if g.cost(mid) + mid * rpu < target {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn gather<G: Gather>(g: &G, b: Dense<'_>, out: &mut [f32]) -> Result<()> {
    let k = b.cols;
    let units = g.units();
    if units == 0 || k == 0 {
        return Ok(());
    }
    // Wide operands go through contiguous column panels of B: rows of a wide B are a
    // power-of-two-ish stride apart and a panel of them would alias into a few cache sets.
    let panel = if matches!(g.tiling(), Tiling::Uniform(_)) { 32 } else { 64 };
    if k > panel && isa() == Isa::Avx2 {
        let rows_out = out.len() / k;
        let mut pb = Vec::new();
        let mut po = Vec::new();
        let mut c0 = 0;
        while c0 < k {
            let w = (k - c0).min(panel);
            let bp = pack_cols(b, c0, w, w, &mut pb);
            po.clear();
            po.resize(rows_out * w, 0.0);
            gather_all(g, Dense { data: bp, rows: b.rows, cols: w }, &mut po)?;
            for (o, p) in out.chunks_exact_mut(k).zip(po.chunks_exact(w)) {
                o[c0..c0 + w].copy_from_slice(p);
            }
            c0 += w;
        }
        return Ok(());
    }
    if k >= 8 && k.is_multiple_of(8) && isa() == Isa::Avx2 && b.data.as_ptr().align_offset(64) != 0 {
        // Rows of B 32-byte aligned (k is a multiple of 8): a copy from a 64-byte boundary
        // (NumPy's buffers often start 16 bytes off one, splitting every other load).
        let mut pb = Vec::new();
        let bp = pack_cols(b, 0, k, k, &mut pb);
        return gather_all(g, Dense { data: bp, rows: b.rows, cols: k }, out);
    }
    gather_all(g, b, out)
}

fn gather_all<G: Gather>(g: &G, b: Dense<'_>, out: &mut [f32]) -> Result<()> {
    let k = b.cols;
    let units = g.units();
    let rpu = g.rows_per_unit();
    if b.rows == 0 {
        // No input rows: any stored entry has a bad index; otherwise the product is zero.
        out.fill(0.0);
        return if g.cost(units) == 0 { Ok(()) } else { Err(bad_index()) };
    }
    let total = g.cost(units) + units * rpu;
    // Chunk count from the problem size alone (about 64k multiply-adds each).
    let nch = ((total * k) >> 16).clamp(1, 256).min(units);
    let mut bounds: Vec<usize> = (0..=nch).map(|c| if c == nch { units } else { split_point(g, total * c / nch) }).collect();
    if matches!(g.tiling(), Tiling::Uniform(_)) {
        // Whole row tiles per chunk (tiles are 3 or 4 rows).
        for x in bounds.iter_mut().take(nch) {
            *x -= *x % 12;
        }
    }
    bounds.dedup();
    let mut pieces: Vec<(usize, usize, &mut [f32])> = Vec::with_capacity(bounds.len());
    let mut rest = out;
    for w in bounds.windows(2) {
        let (a, r) = rest.split_at_mut((w[1] - w[0]) * rpu * k);
        pieces.push((w[0], w[1], a));
        rest = r;
    }
    let ok = AtomicBool::new(true);
    let path = isa();
    let run = |(u0, u1, o): (usize, usize, &mut [f32])| {
        if !gather_chunk(g, u0, u1, b, o, path) {
            ok.store(false, Ordering::Relaxed);
        }
    };
    if pieces.len() == 1 || num_threads() == 1 {
        pieces.into_iter().for_each(run);
    } else {
        crate::parallel::for_each_piece(pieces, &run);
    }
    if ok.load(Ordering::Relaxed) {
        Ok(())
    } else {
        Err(bad_index())
    }
}

fn gather_chunk<G: Gather>(g: &G, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32], path: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    if path == Isa::Avx2 {
        // SAFETY: Avx2 is only selected when the CPU has AVX2 and FMA.
        if let Some(ok) = unsafe { g.avx2_chunk(u0, u1, b, out) } {
            return ok;
        }
    }
    if b.cols == 1 {
        if let Some(ok) = g.spmv(u0, u1, b.data, out) {
            return ok;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if path == Isa::Avx2 {
        // SAFETY: Avx2 is only selected when the CPU has AVX2 and FMA.
        return unsafe { gather_avx2(g, u0, u1, b, out) };
    }
    let _ = path;
    gather_scalar(g, u0, u1, b, out, 0)
}

/// Columns `c0..` of the chunk, eight at a time, in plain Rust (also the AVX2 tail).
#[inline(always)]
fn gather_scalar<G: Gather>(g: &G, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32], c0: usize) -> bool {
    let (k, n_in, rpu) = (b.cols, b.rows, g.rows_per_unit());
    let mut ok = true;
    if k == 1 {
        let x = b.data;
        for u in u0..u1 {
            let (s, e) = g.range(u);
            for r in 0..rpu {
                // Four partial sums hide the add latency.
                let (mut a0, mut a1, mut a2, mut a3) = (0f32, 0f32, 0f32, 0f32);
                let mut p = s;
                while p + 4 <= e {
                    // SAFETY: p .. p + 4 lie inside the unit's range.
                    let ((v0, j0), (v1, j1), (v2, j2), (v3, j3)) = unsafe { (g.at(u, r, p), g.at(u, r, p + 1), g.at(u, r, p + 2), g.at(u, r, p + 3)) };
                    if j0.max(j1).max(j2).max(j3) >= n_in {
                        ok = false;
                    } else {
                        // SAFETY: every j is below n_in == x.len() (k == 1).
                        unsafe {
                            a0 += v0 * *x.get_unchecked(j0);
                            a1 += v1 * *x.get_unchecked(j1);
                            a2 += v2 * *x.get_unchecked(j2);
                            a3 += v3 * *x.get_unchecked(j3);
                        }
                    }
                    p += 4;
                }
                while p < e {
                    // SAFETY: p lies inside the unit's range.
                    let (v, j) = unsafe { g.at(u, r, p) };
                    match x.get(j) {
                        Some(&xv) => a0 += v * xv,
                        None => ok = false,
                    }
                    p += 1;
                }
                out[(u - u0) * rpu + r] = (a0 + a1) + (a2 + a3);
            }
        }
        return ok;
    }
    let mut c = c0;
    while c < k {
        let w = (k - c).min(8);
        for u in u0..u1 {
            let (s, e) = g.range(u);
            for r in 0..rpu {
                let mut acc = [0f32; 8];
                for p in s..e {
                    // SAFETY: s <= p < e is inside the unit's range.
                    let (v, j) = unsafe { g.at(u, r, p) };
                    if j >= n_in {
                        ok = false;
                        continue;
                    }
                    let row = &b.data[j * k + c..j * k + c + w];
                    for (a, &x) in acc.iter_mut().zip(row) {
                        *a += v * x;
                    }
                }
                let o = ((u - u0) * rpu + r) * k + c;
                out[o..o + w].copy_from_slice(&acc[..w]);
            }
        }
        c += w;
    }
    ok
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gather_avx2<G: Gather>(g: &G, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32]) -> bool {
    let k = b.cols;
    // SAFETY: the caller checked AVX2.
    if let Some(ok) = unsafe { g.avx2_chunk(u0, u1, b, out) } {
        return ok;
    }
    if k < 8 {
        return gather_scalar(g, u0, u1, b, out, 0);
    }
    let mut ok = true;
    let mut c = 0;
    match g.tiling() {
        Tiling::Uniform(per_row) if g.rows_per_unit() == 1 => {
            // Three rows x 32 columns (12 accumulators) walk their positions in lockstep:
            // an N:M group's rows of B stay in L1 for all three.
            while c + 32 <= k {
                let mut u = u0;
                while u + 3 <= u1 {
                    // SAFETY: rows u..u+3 are in the chunk, c + 32 <= k, AVX2 checked by the caller.
                    ok &= unsafe { lockstep_tile::<G, 3, 4>(g, u0, u, per_row, b, out, c) };
                    u += 3;
                }
                // SAFETY: as above, one row at a time.
                ok &= unsafe { gather_cols::<G, 4>(g, u0, u, u1, b, out, c) };
                c += 32;
            }
        }
        Tiling::SharedCols => {
            // Four rows of a block row share each load of B (24 columns: 12 accumulators).
            let rpu = g.rows_per_unit();
            for u in u0..u1 {
                let mut cc = 0;
                while cc < k & !7 {
                    let w = if k - cc >= 16 { 16 } else { 8 };
                    let mut r = 0;
                    while r < rpu {
                        // SAFETY: rows r.. of unit u are in the chunk; cc + w <= k; AVX2 checked.
                        unsafe {
                            let step = match (rpu - r, w) {
                                (4.., 24) => shared_tile::<G, 4, 3>(g, u0, u, r, b, out, cc, &mut ok),
                                (4.., 16) => shared_tile::<G, 4, 2>(g, u0, u, r, b, out, cc, &mut ok),
                                (4.., _) => shared_tile::<G, 4, 1>(g, u0, u, r, b, out, cc, &mut ok),
                                (2..=3, 24) => shared_tile::<G, 2, 3>(g, u0, u, r, b, out, cc, &mut ok),
                                (2..=3, 16) => shared_tile::<G, 2, 2>(g, u0, u, r, b, out, cc, &mut ok),
                                (2..=3, _) => shared_tile::<G, 2, 1>(g, u0, u, r, b, out, cc, &mut ok),
                                (_, 24) => shared_tile::<G, 1, 3>(g, u0, u, r, b, out, cc, &mut ok),
                                (_, 16) => shared_tile::<G, 1, 2>(g, u0, u, r, b, out, cc, &mut ok),
                                _ => shared_tile::<G, 1, 1>(g, u0, u, r, b, out, cc, &mut ok),
                            };
                            r += step;
                        }
                    }
                    cc += w;
                }
            }
            c = k & !7;
        }
        _ => {}
    }
    // SAFETY (all calls below): c + 8 * NV <= k, and the AVX2 path was checked by the caller.
    while c + 64 <= k {
        ok &= unsafe { gather_cols::<G, 8>(g, u0, u0, u1, b, out, c) };
        c += 64;
    }
    if c + 32 <= k {
        ok &= unsafe { gather_cols::<G, 4>(g, u0, u0, u1, b, out, c) };
        c += 32;
    }
    if c + 16 <= k {
        ok &= unsafe { gather_cols::<G, 2>(g, u0, u0, u1, b, out, c) };
        c += 16;
    }
    if c + 8 <= k {
        ok &= unsafe { gather_cols::<G, 1>(g, u0, u0, u1, b, out, c) };
        c += 8;
    }
    if c < k {
        ok &= gather_scalar(g, u0, u1, b, out, c);
    }
    ok
}

/// Columns `c0 .. c0 + 8 * NV` of the chunk's rows, accumulated in registers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn gather_cols<G: Gather, const NV: usize>(g: &G, base: usize, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32], c0: usize) -> bool {
    let (k, n_in, rpu) = (b.cols, b.rows, g.rows_per_unit());
    let mut ok = true;
    let bp = b.data.as_ptr();
    let op = out.as_mut_ptr();
    for u in u0..u1 {
        let (s, e) = g.range(u);
        for r in 0..rpu {
            // SAFETY: AVX2 is enabled by the caller; j < n_in and c0 + 8 * NV <= k keep the
            // loads inside b; the output row lies inside this chunk's slice.
            unsafe {
                let mut acc = [_mm256_setzero_ps(); NV];
                for p in s..e {
                    let (vb, j) = g.at_bcast(u, r, p);
                    // Branch-free check (keeps the accumulators in registers): a bad
                    // index reads row 0 (n_in > 0 here) and fails the call.
                    let bad = j >= n_in;
                    ok &= !bad;
                    let j = if bad { 0 } else { j };
                    let row = bp.add(j * k + c0);
                    for (t, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row.add(8 * t)), *a);
                    }
                }
                let o = op.add(((u - base) * rpu + r) * k + c0);
                for (t, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(o.add(8 * t), *a);
                }
            }
        }
    }
    ok
}

/// Rows `u .. u + R`, columns `c0 .. c0 + 8 * NV`, walking the rows' positions in lockstep.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn lockstep_tile<G: Gather, const R: usize, const NV: usize>(g: &G, base: usize, u: usize, per_row: usize, b: Dense<'_>, out: &mut [f32], c0: usize) -> bool {
    let (k, n_in) = (b.cols, b.rows);
    let mut ok = true;
    let bp = b.data.as_ptr();
    // SAFETY: positions u'*per_row + q (q < per_row) lie in row u''s range; j < n_in and
    // c0 + 8 * NV <= k keep loads inside b; output rows u..u+R are in this chunk.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); NV]; R];
        for q in 0..per_row {
            for (r, ar) in acc.iter_mut().enumerate() {
                let (v, j) = g.at(u + r, 0, (u + r) * per_row + q);
                let bad = j >= n_in;
                ok &= !bad;
                let j = if bad { 0 } else { j };
                let vb = _mm256_set1_ps(v);
                let row = bp.add(j * k + c0);
                for (t, a) in ar.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row.add(8 * t)), *a);
                }
            }
        }
        let op = out.as_mut_ptr();
        for (r, ar) in acc.iter().enumerate() {
            let o = op.add((u + r - base) * k + c0);
            for (t, a) in ar.iter().enumerate() {
                _mm256_storeu_ps(o.add(8 * t), *a);
            }
        }
    }
    ok
}

/// Rows `r0 .. r0 + R` of unit `u`, columns `c0 .. c0 + 8 * NV`: the rows share their input
/// row at each position, so each load of B feeds R multiply-adds. Returns R.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn shared_tile<G: Gather, const R: usize, const NV: usize>(g: &G, base: usize, u: usize, r0: usize, b: Dense<'_>, out: &mut [f32], c0: usize, ok: &mut bool) -> usize {
    let (k, n_in, rpu) = (b.cols, b.rows, g.rows_per_unit());
    let bp = b.data.as_ptr();
    let (s, e) = g.range(u);
    // SAFETY: p in the unit's range, r0 + R <= rows per unit; j < n_in and c0 + 8 * NV <= k
    // keep loads inside b; the output rows belong to this chunk.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); NV]; R];
        for p in s..e {
            let (_, j) = g.at(u, r0, p);
            let bad = j >= n_in;
            *ok &= !bad;
            let j = if bad { 0 } else { j };
            let row = bp.add(j * k + c0);
            let mut xs = [_mm256_setzero_ps(); NV];
            for (t, x) in xs.iter_mut().enumerate() {
                *x = _mm256_loadu_ps(row.add(8 * t));
            }
            for (r, ar) in acc.iter_mut().enumerate() {
                let vb = _mm256_set1_ps(g.at(u, r0 + r, p).0);
                for (a, x) in ar.iter_mut().zip(&xs) {
                    *a = _mm256_fmadd_ps(vb, *x, *a);
                }
            }
        }
        let op = out.as_mut_ptr();
        for (r, ar) in acc.iter().enumerate() {
            let o = op.add(((u - base) * rpu + r0 + r) * k + c0);
            for (t, a) in ar.iter().enumerate() {
                _mm256_storeu_ps(o.add(8 * t), *a);
            }
        }
    }
    R
}

/// Groups of four input rows per 2:4 panel (64 rows of B: 16 KiB at 64 columns).
const NM_PG: usize = 16;
/// Columns per 2:4 panel, also the row stride of the panel buffer.
const NM_PW: usize = 64;

/// Rows of A per block walking the depth panels.
const NM_RB: usize = 32;

/// Columns `c .. c + w` of `b` copied into rows `stride` apart (`w <= stride`, the rest of each
/// row zero), starting on a 64-byte boundary inside `buf`.
fn pack_cols<'a>(b: Dense<'_>, c: usize, w: usize, stride: usize, buf: &'a mut Vec<f32>) -> &'a [f32] {
    buf.clear();
    buf.resize(b.rows * stride + 16, 0.0);
    // Floats to skip to the next 64-byte boundary (the buffer is 4-byte aligned).
    let skip = (buf.as_ptr().align_offset(64)).min(16);
    let dst = &mut buf[skip..skip + b.rows * stride];
    for (d, src) in dst.chunks_exact_mut(stride).zip(b.data.chunks_exact(b.cols)) {
        d[..w].copy_from_slice(&src[c..c + w]);
    }
    dst
}

/// 32 bits of the packed 2-bit positions starting at slot `p` (even): the 4-bit fields
/// of 8 consecutive groups, the first in the low bits. Bits past the array read as 0.
#[inline(always)]
fn nm_bits32(idx: &[u8], p: usize) -> u32 {
    // Slot p's field starts at bit 2p: byte p / 4, shift 0 or 4 (p is even).
    let (byte, sh) = (p >> 2, (p & 3) * 2);
    let w = match idx.get(byte..byte + 8) {
        Some(s) => u64::from_le_bytes(s.try_into().unwrap_or([0; 8])),
        None => idx[byte.min(idx.len())..].iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64),
    };
    (w >> sh) as u32
}

/// 2:4 `A @ B` on the AVX2 path (`N`, `M` are 2, 4): rows in a few equal chunks, each chunk walking B in
/// L1-resident panels (64 input rows x up to 64 columns, copied and zero-padded), every
/// row's panel columns held in registers across the panel's 16 groups and added into
/// the output between panels. Each row sums its groups in order, as the other paths do.
#[cfg(target_arch = "x86_64")]
fn nm24_avx2<V: Val, const N: usize, const M: usize>(g: &Nm<'_, V, N, M>, b: Dense<'_>, out: &mut [f32]) -> Result<()> {
    let (rows, k) = (g.rows, b.cols);
    if rows == 0 || k == 0 {
        return Ok(());
    }
    if g.per_row == 0 {
        out.fill(0.0);
        return Ok(());
    }
    let th = num_threads();
    // Chunks: two per thread (B's panels are copied once per chunk), from 64 rows up.
    let nch = if th == 1 { 1 } else { (2 * th).min(rows.div_ceil(64)).max(1) };
    let per = rows.div_ceil(nch);
    let ok = AtomicBool::new(true);
    let run = |(c, o): (usize, &mut [f32])| {
        let u0 = c * per;
        let u1 = (u0 + per).min(rows);
        // SAFETY: isa() is Avx2 only when the CPU has AVX2 and FMA (checked by the caller).
        if !unsafe { nm24_panel_chunk(g, u0, u1, b, o) } {
            ok.store(false, Ordering::Relaxed);
        }
    };
    if nch == 1 {
        run((0, out));
    } else {
        crate::parallel::for_each_piece(out.chunks_mut(per * k).enumerate().collect(), &run);
    }
    if ok.load(Ordering::Relaxed) {
        Ok(())
    } else {
        Err(bad_index())
    }
}

/// Rows `u0..u1` of a 2:4 product, into `out` (those rows only).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn nm24_panel_chunk<V: Val, const N: usize, const M: usize>(g: &Nm<'_, V, N, M>, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32]) -> bool {
    let (k, n_in) = (b.cols, b.rows);
    let groups = g.per_row / 2;
    // Only a partial last group can point past the matrix: check its two positions per row.
    if n_in % 4 != 0 {
        let gi = groups - 1;
        for u in u0..u1 {
            let p = u * g.per_row + 2 * gi;
            // Slot p's 2-bit field and the next one share a byte (p is even).
            let nib = (g.idx[p >> 2] >> ((p & 3) * 2)) as usize & 0xF;
            if 4 * gi + (nib & 3) >= n_in || 4 * gi + (nib >> 2) >= n_in {
                return false;
            }
        }
    }
    let mut packed: Vec<f32> = Vec::new();
    let mut c = 0;
    while c + 8 <= k {
        let w = if k - c >= 64 {
            64
        } else if k - c >= 32 {
            32
        } else if k - c >= 16 {
            16
        } else {
            8
        };
        // Columns c..c+w of B copied into rows NM_PW apart, 64-byte aligned: rows of a wide B
        // lie a large stride apart (a panel of them would alias in L1), and a B from NumPy is
        // often 16 bytes off a cache line, which splits every other 32-byte load.
        let pb = pack_cols(b, c, w, NM_PW, &mut packed);
        // Blocks of NM_RB rows walk the depth panels: a panel stays in L1 for the block,
        // and the block's rows of A are read a panel's slice at a time.
        let mut ub = u0;
        while ub < u1 {
            let ue = (ub + NM_RB).min(u1);
            let mut g0 = 0;
            while g0 < groups {
                let ng = (groups - g0).min(NM_PG);
                // SAFETY: AVX2 is enabled here; rows ub..ue and columns c..c+w lie in out; a
                // position reads pb row 4 * group + q, below n_in (full groups end before n_in,
                // the partial last group was checked above), columns < w <= NM_PW.
                unsafe {
                    let pp = pb.as_ptr().add(4 * g0 * NM_PW);
                    match w {
                        64 => nm24_rows::<V, N, M, 8>(g, ub, ue, u0, g0, ng, pp, out, k, c),
                        32 => nm24_rows::<V, N, M, 4>(g, ub, ue, u0, g0, ng, pp, out, k, c),
                        16 => nm24_rows::<V, N, M, 2>(g, ub, ue, u0, g0, ng, pp, out, k, c),
                        _ => nm24_rows::<V, N, M, 1>(g, ub, ue, u0, g0, ng, pp, out, k, c),
                    }
                }
                g0 += ng;
            }
            ub = ue;
        }
        c += w;
    }
    if c < k {
        return gather_scalar(g, u0, u1, b, out, c);
    }
    true
}

/// One 2:4 group: values at slots `p`, `p + 1`; positions in the low 4 bits of `nib`
/// pick rows of the group's four panel rows at `rows`.
/// # Safety
/// AVX2 and FMA available; slot `p + 1` exists; `rows` has 4 rows of `NM_PW` floats.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn nm24_group<V: Val, const NV: usize>(v: V, acc: &mut [__m256; NV], acc2: &mut [__m256; NV], p: usize, rows: *const f32, nib: u32) {
    // SAFETY: see the function's contract; 8 * NV <= NM_PW.
    unsafe {
        let (v0, v1) = v.bcast2(p);
        let r0 = rows.add((nib & 3) as usize * NM_PW);
        let r1 = rows.add(((nib >> 2) & 3) as usize * NM_PW);
        for (t, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(v0, _mm256_loadu_ps(r0.add(8 * t)), *a);
        }
        // Narrow tiles add the second value into their own accumulators: twice the
        // independent chains (fewer than eight would leave the FMA units waiting).
        let second = if NV < 8 { acc2 } else { acc };
        for (t, a) in second.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(v1, _mm256_loadu_ps(r1.add(8 * t)), *a);
        }
    }
}

/// Groups `g0 .. g0 + ng` of rows `u0..u1` (`out` starts at row `base`), columns
/// `c .. c + 8 * NV`, from the panel (group `g0` at its row 0; rows `NM_PW` apart): one
/// row at a time with its columns in registers.
/// # Safety
/// AVX2 and FMA available; `c + 8 * NV <= k`; `out` holds rows `base..u1`; every position
/// read lies in the panel.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn nm24_rows<V: Val, const N: usize, const M: usize, const NV: usize>(g: &Nm<'_, V, N, M>, u0: usize, u1: usize, base: usize, g0: usize, ng: usize, pp: *const f32, out: &mut [f32], k: usize, c: usize) {
    let op = out.as_mut_ptr();
    // SAFETY: see the function's contract; slots p0 + 2 * gl + {0, 1} (gl < ng) belong to
    // row u, so they index the values and (through nm_bits32) the packed positions.
    unsafe {
        for u in u0..u1 {
            let o = op.add((u - base) * k + c);
            let mut acc = [_mm256_setzero_ps(); NV];
            if g0 > 0 {
                for (t, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_loadu_ps(o.add(8 * t));
                }
            }
            let mut acc2 = [_mm256_setzero_ps(); NV];
            let p0 = u * g.per_row + 2 * g0;
            // The row's values and positions for the next panel, needed after the rest of the
            // block: rows of A lie far apart, so no hardware stream covers them.
            let next = p0 + 2 * NM_PG;
            _mm_prefetch::<_MM_HINT_T0>(g.v.addr(next));
            _mm_prefetch::<_MM_HINT_T0>(g.v.addr(next + NM_PG));
            _mm_prefetch::<_MM_HINT_T0>(g.v.addr(next + 2 * NM_PG - 1));
            _mm_prefetch::<_MM_HINT_T0>(g.idx.as_ptr().wrapping_add(next >> 2).cast());
            let mut gl = 0;
            while gl + 8 <= ng {
                let x = nm_bits32(g.idx, p0 + 2 * gl);
                for t in 0..8 {
                    nm24_group(g.v, &mut acc, &mut acc2, p0 + 2 * (gl + t), pp.add(4 * (gl + t) * NM_PW), x >> (4 * t));
                }
                gl += 8;
            }
            if gl < ng {
                let x = nm_bits32(g.idx, p0 + 2 * gl);
                for t in 0..ng - gl {
                    nm24_group(g.v, &mut acc, &mut acc2, p0 + 2 * (gl + t), pp.add(4 * (gl + t) * NM_PW), x >> (4 * t));
                }
            }
            for (t, a) in acc.iter().enumerate() {
                let a = if NV < 8 { _mm256_add_ps(*a, acc2[t]) } else { *a };
                _mm256_storeu_ps(o.add(8 * t), a);
            }
        }
    }
}

/// `x[ip[i]]`.
/// # Safety
/// `ip.add(i)` is readable and holds an index in `0..x.len()` for the `x` at `xp`.
#[inline(always)]
unsafe fn x_at(xp: *const f32, ip: *const i32, i: usize) -> f32 {
    // SAFETY: see the function's contract.
    unsafe { *xp.add(*ip.add(i) as usize) }
}

/// SpMV of 8x8 BSR block rows `u0..u1`: one accumulator per row of the block row, each
/// block's slice of `x` loaded once, the eight sums reduced together at the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn bsr8_spmv<V: Val, I: Idx, const BC: usize>(g: &Bsr<'_, V, I, BC>, u0: usize, u1: usize, x: &[f32], out: &mut [f32]) -> bool {
    let mut ok = true;
    // SAFETY: u < units, so ptr[u + 1] exists; blocks blk < ptr[last] == idx.len() hold 64
    // values each; j < nbc keeps j * 8 + 8 <= nbc * 8 == x.len(); out holds 8 rows per unit.
    unsafe {
        for u in u0..u1 {
            let (s, e) = (g.ptr.get_unchecked(u).u(), g.ptr.get_unchecked(u + 1).u());
            let mut acc = [_mm256_setzero_ps(); 8];
            for blk in s..e {
                let j = g.idx.get_unchecked(blk).u();
                if j >= g.nbc {
                    ok = false;
                    continue;
                }
                let xv = _mm256_loadu_ps(x.as_ptr().add(j * 8));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(g.v.at8((blk * 8 + r) * 8), xv, *a);
                }
            }
            // Pairwise horizontal adds: lanes 0-3 of s0123 hold half sums of rows 0-3 (low
            // 128 bits) and the other halves (high 128 bits); likewise rows 4-7.
            let s01 = _mm256_hadd_ps(acc[0], acc[1]);
            let s23 = _mm256_hadd_ps(acc[2], acc[3]);
            let s45 = _mm256_hadd_ps(acc[4], acc[5]);
            let s67 = _mm256_hadd_ps(acc[6], acc[7]);
            let s0123 = _mm256_hadd_ps(s01, s23);
            let s4567 = _mm256_hadd_ps(s45, s67);
            let lo = _mm256_permute2f128_ps::<0x20>(s0123, s4567);
            let hi = _mm256_permute2f128_ps::<0x31>(s0123, s4567);
            _mm256_storeu_ps(out.as_mut_ptr().add((u - u0) * 8), _mm256_add_ps(lo, hi));
        }
    }
    ok
}

/// SpMV of 4x4 BSR block rows `u0..u1`: each block's 16 values are two vectors
/// (rows 0-1 and 2-3) against its 4 values of x, repeated in both halves;
/// partial sums per block row are reduced at the end.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn bsr4_spmv<V: Val, I: Idx, const BC: usize>(g: &Bsr<'_, V, I, BC>, u0: usize, u1: usize, x: &[f32], out: &mut [f32]) -> bool {
    let mut ok = true;
    // SAFETY: u < units, so ptr[u + 1] exists; blocks blk < ptr[last] == idx.len() hold 16
    // values each; j < nbc keeps j * 4 + 4 <= nbc * 4 == x.len(); out holds 4 rows per unit.
    unsafe {
        for u in u0..u1 {
            let (s, e) = (g.ptr.get_unchecked(u).u(), g.ptr.get_unchecked(u + 1).u());
            // Two accumulators each for rows 0-1 and 2-3 (alternate blocks), for latency.
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut blk = s;
            while blk < e {
                for h in 0..2 {
                    if blk + h >= e {
                        break;
                    }
                    let b = blk + h;
                    let j = g.idx.get_unchecked(b).u();
                    if j >= g.nbc {
                        ok = false;
                        continue;
                    }
                    let xv = _mm256_broadcast_ps(&*(x.as_ptr().add(j * 4) as *const __m128));
                    let (v01, v23) = (g.v.at8(b * 16), g.v.at8(b * 16 + 8));
                    acc[2 * h] = _mm256_fmadd_ps(v01, xv, acc[2 * h]);
                    acc[2 * h + 1] = _mm256_fmadd_ps(v23, xv, acc[2 * h + 1]);
                }
                blk += 2;
            }
            // Lanes: [r0 c0..c3 | r1 c0..c3] and [r2 .. | r3 ..]; hadd twice leaves row sums.
            let a01 = _mm256_add_ps(acc[0], acc[2]);
            let a23 = _mm256_add_ps(acc[1], acc[3]);
            let h = _mm256_hadd_ps(a01, a23); // [r0 c01, r0 c23, r2 c01, r2 c23 | r1.., r1.., r3.., r3..]
            let h = _mm256_hadd_ps(h, h); // [r0, r2, r0, r2 | r1, r3, r1, r3]
            let lo = _mm256_castps256_ps128(h);
            let hi = _mm256_extractf128_ps::<1>(h);
            // [r0, r1, r2, r3]
            let rows = _mm_unpacklo_ps(lo, hi);
            _mm_storeu_ps(out.as_mut_ptr().add((u - u0) * 4), rows);
        }
    }
    ok
}

/// Nonzeros between a CSR SpMV's reads and its prefetches.
const SPMV_AHEAD: usize = 256;

/// SpMV rows `u0..u1` of a CSR matrix with int32 indices: eight nonzeros at a time,
/// indices checked in-register (eight with a bad one are skipped and fail the call).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn csr_spmv_i32<V: Val, I: Idx>(g: &Csr<'_, V, I>, idx: &[i32], u0: usize, u1: usize, x: &[f32], out: &mut [f32]) -> bool {
    // Largest valid index, as i32 (every non-negative i32 is valid past i32::MAX columns).
    let lim = (x.len().min(i32::MAX as usize + 1) - 1) as i32;
    let mut ok = true;
    let xp = x.as_ptr();
    // SAFETY: p + 8 (or 16) <= e <= idx.len() == values; x is read only at indices checked to
    // lie in [0, lim], lim < x.len(). (The loads read each index again after the check:
    // another thread writing the caller's array in between could send one out of bounds.
    // Clamping each index there cost 15-25% of a float32 SpMV, using the checked
    // registers through a stack copy as much.)
    unsafe {
        let vlim = _mm256_set1_epi32(lim);
        let zero = _mm256_setzero_si256();
        for u in u0..u1 {
            let (s, e) = <Csr<'_, V, I> as Gather>::range(g, u);
            let mut acc = _mm256_setzero_ps();
            let mut acc2 = _mm256_setzero_ps();
            let mut p = s;
            while p + 16 <= e {
                _mm_prefetch::<_MM_HINT_T0>(idx.as_ptr().wrapping_add(p + SPMV_AHEAD).cast());
                _mm_prefetch::<_MM_HINT_T0>(g.v.addr(p + SPMV_AHEAD));
                let iv = _mm256_loadu_si256(idx.as_ptr().add(p).cast());
                let iw = _mm256_loadu_si256(idx.as_ptr().add(p + 8).cast());
                let bad = _mm256_or_si256(
                    _mm256_or_si256(_mm256_cmpgt_epi32(iv, vlim), _mm256_cmpgt_epi32(zero, iv)),
                    _mm256_or_si256(_mm256_cmpgt_epi32(iw, vlim), _mm256_cmpgt_epi32(zero, iw)),
                );
                if _mm256_testz_si256(bad, bad) == 0 {
                    ok = false;
                    p += 16;
                    continue;
                }
                // Sixteen values as two vectors, in the lane order the value type decodes
                // cheapest; x is assembled in the same order.
                let (va, vb) = g.v.at16(p);
                let ip = idx.as_ptr().add(p);
                let (a, b) = if V::INTERLEAVED16 { ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]) } else { ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14, 15]) };
                let xa = _mm256_set_m128(
                    _mm_setr_ps(x_at(xp, ip, a[4]), x_at(xp, ip, a[5]), x_at(xp, ip, a[6]), x_at(xp, ip, a[7])),
                    _mm_setr_ps(x_at(xp, ip, a[0]), x_at(xp, ip, a[1]), x_at(xp, ip, a[2]), x_at(xp, ip, a[3])),
                );
                let xb = _mm256_set_m128(
                    _mm_setr_ps(x_at(xp, ip, b[4]), x_at(xp, ip, b[5]), x_at(xp, ip, b[6]), x_at(xp, ip, b[7])),
                    _mm_setr_ps(x_at(xp, ip, b[0]), x_at(xp, ip, b[1]), x_at(xp, ip, b[2]), x_at(xp, ip, b[3])),
                );
                acc = _mm256_fmadd_ps(va, xa, acc);
                acc2 = _mm256_fmadd_ps(vb, xb, acc2);
                p += 16;
            }
            acc = _mm256_add_ps(acc, acc2);
            while p + 8 <= e {
                // Both streams fetched ahead (the kernel is bound by memory latency on big
                // matrices); a prefetch past the arrays is harmless.
                _mm_prefetch::<_MM_HINT_T0>(idx.as_ptr().wrapping_add(p + SPMV_AHEAD).cast());
                _mm_prefetch::<_MM_HINT_T0>(g.v.addr(p + SPMV_AHEAD));
                let iv = _mm256_loadu_si256(idx.as_ptr().add(p).cast());
                // Lanes above lim or below zero are bad: the call fails, skip their loads.
                let bad = _mm256_or_si256(_mm256_cmpgt_epi32(iv, vlim), _mm256_cmpgt_epi32(zero, iv));
                if _mm256_testz_si256(bad, bad) == 0 {
                    ok = false;
                    p += 8;
                    continue;
                }
                // x gathered by eight scalar loads (faster than vgatherdps on current cores).
                let ip = idx.as_ptr().add(p);
                let xl = _mm_setr_ps(x_at(xp, ip, 0), x_at(xp, ip, 1), x_at(xp, ip, 2), x_at(xp, ip, 3));
                let xh = _mm_setr_ps(x_at(xp, ip, 4), x_at(xp, ip, 5), x_at(xp, ip, 6), x_at(xp, ip, 7));
                acc = _mm256_fmadd_ps(g.v.at8(p), _mm256_set_m128(xh, xl), acc);
                p += 8;
            }
            // Horizontal sum: fold halves, then pairs.
            let h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
            let mut sum = _mm_cvtss_f32(h);
            while p < e {
                let j = idx[p];
                match usize::try_from(j).ok().and_then(|j| x.get(j)) {
                    Some(&xv) => sum += g.v.at(p) * xv,
                    None => ok = false,
                }
                p += 1;
            }
            *out.get_unchecked_mut(u - u0) = sum;
        }
    }
    ok
}

// ---------------------------------------------------------------- scatter driver

fn scatter<S: Scatter>(s: &S, b: Dense<'_>, out: &mut [f32]) -> Result<()> {
    let k = b.cols;
    out.fill(0.0);
    let units = s.units();
    if units == 0 || k == 0 {
        return Ok(());
    }
    let n_out = out.len() / k;
    let total = s.cost(units) + units;
    // Chunks (each with its own output buffer) from the problem size alone.
    let mut nch = ((total * k) >> 18).clamp(1, 8).min(units);
    while nch > 1 && (nch - 1) * out.len() > (1 << 26) {
        nch -= 1;
    }
    let split = |target: usize| {
        let (mut lo, mut hi) = (0usize, units);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if s.cost(mid) + mid < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    };
    let bounds: Vec<usize> = (0..=nch).map(|c| if c == nch { units } else { split(total * c / nch) }).collect();
    let path = isa();
    let ok = AtomicBool::new(true);
    let run = |c: usize, dst: &mut [f32]| {
        if !scatter_chunk(s, bounds[c], bounds[c + 1], b, dst, n_out, path) {
            ok.store(false, Ordering::Relaxed);
        }
    };
    if nch == 1 {
        run(0, out);
    } else {
        let mut bufs: Vec<Vec<f32>> = (1..nch).map(|_| Vec::new()).collect();
        {
            use rayon::prelude::*;
            let (o0, bs) = (&mut *out, &mut bufs);
            let mut work = || {
                rayon::join(
                    || run(0, o0),
                    || {
                        bs.par_iter_mut().enumerate().for_each(|(i, buf)| {
                            *buf = vec![0.0; n_out * k];
                            run(i + 1, buf)
                        })
                    },
                )
            };
            if num_threads() == 1 {
                work();
            } else {
                pool().install(work);
            }
        }
        // Sum the buffers in chunk order (element-wise independent, so any split is exact).
        let add = |o: &mut [f32], start: usize| {
            for buf in &bufs {
                let len = o.len();
                for (a, &x) in o.iter_mut().zip(&buf[start..start + len]) {
                    *a += x;
                }
            }
        };
        crate::parallel::zip_chunks(&vec![(); out.len()], out, 1 << 14, |start, _, o| add(o, start));
    }
    if ok.load(Ordering::Relaxed) {
        Ok(())
    } else {
        Err(s.index_error(n_out, b.rows))
    }
}

fn scatter_chunk<S: Scatter>(s: &S, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32], n_out: usize, path: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    if path == Isa::Avx2 && b.cols >= 8 {
        // SAFETY: Avx2 is only selected when the CPU has AVX2 and FMA.
        return unsafe { scatter_avx2(s, u0, u1, b, out, n_out) };
    }
    let _ = path;
    scatter_scalar(s, u0, u1, b, out, n_out)
}

#[inline(always)]
fn scatter_scalar<S: Scatter>(s: &S, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32], n_out: usize) -> bool {
    let (k, n_in) = (b.cols, b.rows);
    let mut ok = true;
    for u in u0..u1 {
        let (ps, pe) = s.range(u);
        for p in ps..pe {
            // SAFETY: p is inside the unit's range.
            let (v, o, i) = unsafe { s.at(u, p) };
            if o >= n_out || i >= n_in {
                ok = false;
                continue;
            }
            let src = &b.data[i * k..i * k + k];
            for (a, &x) in out[o * k..o * k + k].iter_mut().zip(src) {
                *a += v * x;
            }
        }
    }
    ok
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn scatter_avx2<S: Scatter>(s: &S, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32], n_out: usize) -> bool {
    let (k, n_in) = (b.cols, b.rows);
    let mut ok = true;
    let bp = b.data.as_ptr();
    let op = out.as_mut_ptr();
    for u in u0..u1 {
        let (ps, pe) = s.range(u);
        for p in ps..pe {
            // SAFETY: p is inside the unit's range; o < n_out and i < n_in keep every
            // access inside out (n_out x k) and b (n_in x k); AVX2 is enabled by the caller.
            unsafe {
                let (v, o, i) = s.at(u, p);
                if o >= n_out || i >= n_in {
                    ok = false;
                    continue;
                }
                let vb = _mm256_set1_ps(v);
                let (src, dst) = (bp.add(i * k), op.add(o * k));
                let mut c = 0;
                while c + 8 <= k {
                    _mm256_storeu_ps(dst.add(c), _mm256_fmadd_ps(vb, _mm256_loadu_ps(src.add(c)), _mm256_loadu_ps(dst.add(c))));
                    c += 8;
                }
                while c < k {
                    *dst.add(c) += v * *src.add(c);
                    c += 1;
                }
            }
        }
    }
    ok
}

// ---------------------------------------------------------------- entry points

pub(crate) fn csr(vals: Values<'_>, indptr: Index<'_>, indices: Index<'_>, _shape: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    with_idx2!(indptr, indices, ptr, idx, {
        with_vals!(vals, v, {
            let s = Csr { v, ptr, idx };
            if transpose {
                scatter(&s, b, out)
            } else {
                gather(&s, b, out)
            }
        })
    })
}

pub(crate) fn coo(vals: Values<'_>, row: Index<'_>, col: Index<'_>, _shape: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    with_idx2!(row, col, r, c, {
        with_vals!(vals, v, {
            let s = if transpose { Coo { v, out: c, inp: r, transposed: true } } else { Coo { v, out: r, inp: c, transposed: false } };
            scatter(&s, b, out)
        })
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn bsr(vals: Values<'_>, indptr: Index<'_>, indices: Index<'_>, shape: (usize, usize), block: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    let (br, bc) = block;
    let nbc = shape.1 / bc;
    macro_rules! go {
        ($bc:literal) => {
            with_idx2!(indptr, indices, ptr, idx, {
                with_vals!(vals, v, {
                    let s = Bsr::<_, _, $bc> { v, ptr, idx, br, bc_rt: bc, nbc };
                    if transpose {
                        scatter(&s, b, out)
                    } else {
                        gather(&s, b, out)
                    }
                })
            })
        };
    }
    match bc {
        4 => go!(4),
        8 => go!(8),
        _ => go!(0),
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn nm(vals: Values<'_>, idx: &[u8], n: usize, m: usize, shape: (usize, usize), b: Dense<'_>, out: &mut [f32], transpose: bool) -> Result<()> {
    let per_row = shape.1.div_ceil(m) * n;
    let bits = super::nm_index_bits(m) as usize;
    macro_rules! go {
        ($n:literal, $m:literal) => {
            with_vals!(vals, v, {
                let s = Nm::<_, $n, $m> { v, idx, n_rt: n, m_rt: m, bits, per_row, rows: shape.0 };
                #[cfg(target_arch = "x86_64")]
                if $n == 2 && $m == 4 && !transpose && b.cols >= 8 && isa() == Isa::Avx2 {
                    return nm24_avx2(&s, b, out);
                }
                if transpose {
                    scatter(&s, b, out)
                } else {
                    gather(&s, b, out)
                }
            })
        };
    }
    match (n, m) {
        (2, 4) => go!(2, 4),
        (1, 4) => go!(1, 4),
        _ => go!(0, 0),
    }
}
