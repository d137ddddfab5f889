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
    /// # Safety
    /// `p` is below the number of stored values.
    unsafe fn at(self, p: usize) -> f32;
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
    unsafe fn at(self, p: usize) -> f32 {
        // SAFETY: the caller guarantees p < len.
        unsafe { *self.0.get_unchecked(p) }
    }
}
impl Val for VBf16<'_> {
    #[inline(always)]
    unsafe fn at(self, p: usize) -> f32 {
        // bf16 is the top half of an f32: shift the code into place.
        // SAFETY: the caller guarantees p < len.
        f32::from_bits((unsafe { *self.0.get_unchecked(p) } as u32) << 16)
    }
}
impl Val for VTab8<'_> {
    #[inline(always)]
    unsafe fn at(self, p: usize) -> f32 {
        // SAFETY: p < len by the caller; a u8 code always indexes the 256-entry table.
        unsafe { *self.1.get_unchecked(*self.0.get_unchecked(p) as usize) }
    }
}
impl Val for VTab16<'_> {
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
    /// Nonzeros before unit `u` (non-decreasing in `u`; `u <= units`).
    fn cost(&self, u: usize) -> usize;
    /// Positions of unit `u` (the same for each of its rows), in bounds.
    fn range(&self, u: usize) -> (usize, usize);
    /// Value and input row at position `p` of row `r` of unit `u`; an invalid
    /// index gives `usize::MAX`.
    /// # Safety
    /// `p` lies in `range(u)` and `r < rows_per_unit()`.
    unsafe fn at(&self, u: usize, r: usize, p: usize) -> (f32, usize);
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
    let rpu = g.rows_per_unit();
    if units == 0 || k == 0 {
        return Ok(());
    }
    let total = g.cost(units) + units * rpu;
    // Chunk count from the problem size alone (about 64k multiply-adds each).
    let nch = ((total * k) >> 16).clamp(1, 256).min(units);
    let mut bounds: Vec<usize> = (0..=nch).map(|c| if c == nch { units } else { split_point(g, total * c / nch) }).collect();
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
        use rayon::prelude::*;
        pool().install(|| pieces.into_par_iter().for_each(run));
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
        for u in u0..u1 {
            let (s, e) = g.range(u);
            for r in 0..rpu {
                // Four partial sums hide the add latency.
                let mut acc = [0f32; 4];
                let mut p = s;
                while p < e {
                    let lane = (p - s) & 3;
                    // SAFETY: s <= p < e is inside the unit's range.
                    let (v, j) = unsafe { g.at(u, r, p) };
                    match b.data.get(j) {
                        Some(&x) => acc[lane] += v * x,
                        None => ok = false,
                    }
                    p += 1;
                }
                out[(u - u0) * rpu + r] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
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
    if k < 8 {
        return gather_scalar(g, u0, u1, b, out, 0);
    }
    let mut ok = true;
    let mut c = 0;
    // SAFETY (all calls below): c + 8 * NV <= k, and the AVX2 path was checked by the caller.
    while c + 64 <= k {
        ok &= unsafe { gather_cols::<G, 8>(g, u0, u1, b, out, c) };
        c += 64;
    }
    if c + 32 <= k {
        ok &= unsafe { gather_cols::<G, 4>(g, u0, u1, b, out, c) };
        c += 32;
    }
    if c + 16 <= k {
        ok &= unsafe { gather_cols::<G, 2>(g, u0, u1, b, out, c) };
        c += 16;
    }
    if c + 8 <= k {
        ok &= unsafe { gather_cols::<G, 1>(g, u0, u1, b, out, c) };
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
unsafe fn gather_cols<G: Gather, const NV: usize>(g: &G, u0: usize, u1: usize, b: Dense<'_>, out: &mut [f32], c0: usize) -> bool {
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
                    let (v, j) = g.at(u, r, p);
                    if j >= n_in {
                        ok = false;
                        continue;
                    }
                    let vb = _mm256_set1_ps(v);
                    let row = bp.add(j * k + c0);
                    for (t, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(vb, _mm256_loadu_ps(row.add(8 * t)), *a);
                    }
                }
                let o = op.add(((u - u0) * rpu + r) * k + c0);
                for (t, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(o.add(8 * t), *a);
                }
            }
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
        Err(bad_index())
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
            let s = if transpose { Coo { v, out: c, inp: r } } else { Coo { v, out: r, inp: c } };
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
