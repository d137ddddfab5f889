//! The Goto/BLIS loop nest, generic over a [`Kernel`]:
//!
//! ```text
//! for jc in 0..n step NC            // B block of NC columns (L3)
//!   for pc in 0..k step KC          //   depth block; pack B[pc.., jc..] into KC x NR strips
//!     parallel for (ic, part)       //   A block of MC rows (L2), packed per task into MR x KC strips
//!       for jr in part step NR      //     B strip (L1)
//!         for ir in 0..MC step MR   //       micro-kernel: MR x NR tile of C
//! ```
//!
//! Threads split the (ic block x column part) tasks of each depth block. Every
//! element of C sees the same sequence of depth blocks and the same kernel
//! whatever the thread count, so results do not depend on it.

use rayon::prelude::*;

use super::kernels::Kernel;
use super::{padded_ld, OutMat, Operand};
use crate::parallel;

/// Rows of B packed per band (even, so int8 depth pairs stay whole).
const PB: usize = 16;

thread_local! {
    /// Per-thread A packing buffer, reused across tasks and calls.
    static APACK: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Run `f` on a 64-byte aligned scratch slice of `len` elements of `P` (contents unspecified).
fn with_apack<P: Copy, R>(len: usize, f: impl FnOnce(&mut [P]) -> R) -> R {
    APACK.with(|cell| {
        let mut v = cell.borrow_mut();
        let words = (len * std::mem::size_of::<P>()).div_ceil(8) + 8;
        if v.len() < words {
            v.resize(words, 0);
        }
        let addr = v.as_mut_ptr() as usize;
        let off = (64 - addr % 64) % 64;
        // SAFETY: the buffer holds len*size_of::<P>() bytes past the aligned start
        // (8 spare words cover the alignment); P is a plain number type with
        // alignment <= 8 for which any bit pattern is valid.
        let s = unsafe { std::slice::from_raw_parts_mut((addr + off) as *mut P, len) };
        f(s)
    })
}

/// A buffer of `len` elements starting on a 64-byte boundary.
struct Aligned<T> {
    buf: Vec<T>,
    off: usize,
    len: usize,
}

impl<T: Copy + Default> Aligned<T> {
    fn new(len: usize) -> Self {
        let sz = std::mem::size_of::<T>().max(1);
        let extra = 64 / sz;
        let buf = vec![T::default(); len + extra];
        let addr = buf.as_ptr() as usize;
        let off = ((64 - addr % 64) % 64) / sz;
        Aligned { buf, off, len }
    }
    fn slice(&self) -> &[T] {
        &self.buf[self.off..self.off + self.len]
    }
    fn slice_mut(&mut self) -> &mut [T] {
        &mut self.buf[self.off..self.off + self.len]
    }
}

/// Stride between packed strips: the strip length, padded so that consecutive
/// strips do not start on L1-aliasing boundaries (same rule as `padded_ld`).
fn strip_stride<K: Kernel>(w: usize, kc: usize) -> usize {
    padded_ld(K::strip_len(w, kc), std::mem::size_of::<K::P>()).expect("packed element sizes divide 64")
}

pub(crate) fn gemm<K: Kernel>(kern: &K, a: &Operand, b: &Operand, c: OutMat<K::C>) {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: (i, j) is inside C (OutMat contract).
                unsafe { *c.at(i, j) = K::C::default() };
            }
        }
        return;
    }
    let threads = parallel::num_threads();
    let (mr, nr) = (K::MR, K::NR);
    let kc_max = K::KC.min(k);
    let nc_max = K::NC.min(n.div_ceil(nr) * nr);
    let sa = strip_stride::<K>(mr, kc_max);
    let sb = strip_stride::<K>(nr, kc_max);

    // Row blocks: at least one per thread when m allows it, each a multiple of MR.
    let mut mb = m.div_ceil(K::MC);
    if threads > 1 {
        mb = mb.div_ceil(threads) * threads;
    }
    mb = mb.min(m.div_ceil(mr)).max(1);
    let mc = m.div_ceil(mb).div_ceil(mr) * mr;
    let mb = m.div_ceil(mc);

    let mut bpack = Aligned::<K::P>::new(nc_max.div_ceil(nr) * sb);
    let body = |bpack: &mut Aligned<K::P>| {
        for jc in (0..n).step_by(K::NC) {
            let nc = K::NC.min(n - jc);
            let nstrips = nc.div_ceil(nr);
            // Column parts per row block, so that small-m problems still use every thread.
            let parts = if mb >= threads { 1 } else { threads.div_ceil(mb).min(nstrips) };
            for pc in (0..k).step_by(K::KC) {
                let kc = K::KC.min(k - pc);
                // Pack B[pc..pc+kc, jc..jc+nc] into KC x NR strips, a band of PB rows
                // at a time across all strips of a thread's share, so that the rows of
                // B are read as a few sequential streams.
                let bs = &mut bpack.slice_mut()[..nstrips * sb];
                let nparts_b = if threads > 1 && nstrips > 1 { threads.min(nstrips) } else { 1 };
                let per = nstrips.div_ceil(nparts_b);
                let pack_b = |part: usize, dst: &mut [K::P]| {
                    let s0 = part * per;
                    let ns = dst.len().div_ceil(sb);
                    for p0 in (0..kc).step_by(PB) {
                        let pk = PB.min(kc - p0);
                        let off = K::strip_len(nr, p0);
                        for s in 0..ns {
                            let j0 = jc + (s0 + s) * nr;
                            let nv = nr.min(n - j0);
                            let base = (pc + p0) as isize * b.rs + j0 as isize * b.cs;
                            let d = &mut dst[s * sb + off..s * sb + off + K::strip_len(nr, pk)];
                            // SAFETY: rows pc+p0..pc+p0+pk and columns j0..j0+nv are inside b.
                            unsafe { K::pack(b, base, b.cs, b.rs, nv, nr, pk, d) };
                        }
                    }
                };
                if nparts_b > 1 {
                    bs.par_chunks_mut(per * sb).enumerate().for_each(|(t, d)| pack_b(t, d));
                } else {
                    pack_b(0, bs);
                }
                let bs: &[K::P] = &bpack.slice()[..nstrips * sb];
                let task = |t: usize| {
                    let (ib, part) = (t / parts, t % parts);
                    let ic = ib * mc;
                    let mcb = mc.min(m - ic);
                    let (s0, s1) = (nstrips * part / parts, nstrips * (part + 1) / parts);
                    if s0 == s1 {
                        return;
                    }
                    let astrips = mcb.div_ceil(mr);
                    with_apack::<K::P, ()>(astrips * sa, |apack| {
                        for (s, d) in apack.chunks_mut(sa).enumerate() {
                            let i0 = ic + s * mr;
                            let nv = mr.min(m - i0);
                            let base = i0 as isize * a.rs + pc as isize * a.cs;
                            // SAFETY: rows i0..i0+nv and depth pc..pc+kc are inside a.
                            unsafe { K::pack(a, base, a.rs, a.cs, nv, mr, kc, d) };
                        }
                        let ap = apack.as_ptr();
                        for js in s0..s1 {
                            let j0 = jc + js * nr;
                            let nrv = nr.min(n - j0);
                            for is in 0..astrips {
                                let i0 = ic + is * mr;
                                let mrv = mr.min(m - i0);
                                // SAFETY: packed strips hold kc steps; the tile (i0, j0) of
                                // size mrv x nrv is inside C and only this task writes it.
                                unsafe {
                                    let cp = c.at(i0, j0);
                                    kern.run(kc, ap.add(is * sa), bs.as_ptr().add(js * sb), cp, c.rs, c.cs, mrv, nrv, pc > 0);
                                }
                            }
                        }
                    });
                };
                let ntasks = mb * parts;
                if threads > 1 && ntasks > 1 {
                    (0..ntasks).into_par_iter().for_each(task);
                } else {
                    (0..ntasks).for_each(task);
                }
            }
        }
    };
    if threads > 1 {
        parallel::pool().install(|| body(&mut bpack));
    } else {
        body(&mut bpack);
    }
}
