//! The Goto/BLIS loop nest, generic over a [`Kernel`]:
//!
//! ```text
//! parallel for part of C           // one part per thread: MR-row (or NR-column) strips
//!   for jc in 0..n step NC          //   B block of NC columns (L3)
//!     for pc in 0..k step KC        //     depth block; pack B[pc.., jc..] into KC x NR strips
//!       for ic in 0..m step MC      //       A block of MC rows (L2), packed into MR x KC strips
//!         for jr in 0..NC step NR   //         B strip (L1)
//!           for ir in 0..MC step MR //           micro-kernel: MR x NR tile of C
//! ```
//!
//! Threads split C into equal parts once per call; the worker that computed a
//! part keeps spinning for 2 ms afterwards and takes the next call's part
//! directly (`parallel::hot`), as BLAS threads do. Every element of C sees the
//! same sequence of depth blocks and the same kernel whatever the thread count,
//! so results do not depend on it.
//!
//! When the threads split the rows of C, each needs all of B. Up to
//! `SHARED_B_MAX` bytes of packed B, they pack it once into one buffer kept
//! between calls: each group of strips of each block is packed by whichever
//! thread reaches it first (an atomic claim) and read by the others once it is
//! ready; a thread waits only on a group another thread is packing at that
//! moment. Each thread starts on different groups, so they rarely wait.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::kernels::Kernel;
use super::{padded_ld, OutMat, Operand};
use crate::parallel;

/// Rows of B packed per band (even, so int8 depth pairs stay whole).
const PB: usize = 16;

/// Fewest multiply-adds (m*n*k) worth splitting across threads.
pub(super) const PAR_MIN: usize = 1 << 22;

/// Largest packed B (bytes) that the threads of a row split share; above it
/// each thread packs its own blocks of B.
const SHARED_B_MAX: usize = 32 << 20;

/// Most rows of a product whose row-major B its kernel reads in place
/// ([`Kernel::direct`]): two strips of A at most meet each strip of B, each
/// decoding it again (with more, packing B once costs less).
const DIRECT_M: usize = 12;

/// B strips packed per claim of a shared B (a band-wise packing unit).
const GROUP: usize = 4;
/// Most columns of B in a block whose products read A's rows in place: float32
/// and float64, and bf16 (decoded by the kernel: 4096 x 4096 x 16 1.44x as
/// fast as packed, 64 columns 1.04x, 256 columns 0.91x).
const A_ROWS_COLS: usize = 256;
const A_ROWS_COLS_BF16: usize = 64;
/// fp16 A's limit: one strip of B, each code converted once (4096 x 4096 x 16:
/// 9.1 -> 7.5 ms); with more strips each code is converted again for every one
/// (32 columns 0.95x as fast as packed, 64 0.8x).
const A_ROWS_COLS_F16: usize = 16;
/// The smallest unit of rows (in strips of MR rows) a thread claims with B shared.
const UNIT_MIN: usize = 4;

/// The buffer of the shared packed B, kept between calls (no fresh pages to
/// fault in on every call). A call that finds it taken allocates its own.
static SHARED_B: Mutex<Vec<u64>> = Mutex::new(Vec::new());

thread_local! {
    /// Per-thread packing buffers for A and B, reused across calls (no fresh
    /// pages to fault in, no unmapping, on every call).
    static APACK: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    static BPACK: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A 64-byte aligned slice of `len` elements of `P` (contents unspecified) in
/// `store`, which grows as needed.
fn aligned<P: Copy>(store: &mut Vec<u64>, len: usize) -> &mut [P] {
    let words = (len * std::mem::size_of::<P>()).div_ceil(8) + 8;
    if store.len() < words {
        store.resize(words, 0);
    }
    let addr = store.as_mut_ptr() as usize;
    let off = (64 - addr % 64) % 64;
    // SAFETY: the buffer holds len*size_of::<P>() bytes past the aligned start
    // (8 spare words cover the alignment); P is a plain number type with
    // alignment <= 8 for which any bit pattern is valid.
    unsafe { std::slice::from_raw_parts_mut((addr + off) as *mut P, len) }
}

/// Run `f` on a 64-byte aligned scratch slice of `len` elements of `P` (contents unspecified)
/// taken from the thread-local buffer `key`.
fn with_scratch<P: Copy, R>(
    key: &'static std::thread::LocalKey<std::cell::RefCell<Vec<u64>>>,
    len: usize,
    f: impl FnOnce(&mut [P]) -> R,
) -> R {
    key.with(|cell| f(aligned(&mut cell.borrow_mut(), len)))
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
    let (ms, ns) = (m.div_ceil(mr), n.div_ceil(nr));
    // One part of C per thread, each a whole number of MR rows (or NR columns),
    // differing by at most one strip. Splitting the larger dimension keeps the
    // parts even and the duplicated packing of the other operand small (each
    // thread packs all of B for a row split, all of A for a column split).
    // Each part runs the whole loop nest on its own with its own packing
    // buffers: one fork-join per call, no barrier per depth block.
    let split_m = m >= n && ms >= 2 || ns < 2;
    let strips = if split_m { ms } else { ns };
    // Below about 160^3 multiply-adds waking a second thread costs more than it saves.
    let parts = if threads > 1 && m * n * k >= PAR_MIN { threads.min(strips) } else { 1 };
    if parts <= 1 {
        serial(kern, a, b, c, None);
        return;
    }
    // A row split has every thread use all of B: the threads pack it once,
    // together, into one buffer (each group of strips by whichever thread
    // needs it first), rather than each packing all of it.
    let layout = SharedLayout::new::<K>(n, k);
    let use_shared = split_m && layout.len * std::mem::size_of::<K::P>() <= SHARED_B_MAX;
    let mut cached = if use_shared { SHARED_B.try_lock().ok() } else { None };
    // When another call holds the cached buffer, this call packs into its own.
    let mut own = Vec::new();
    let shared = use_shared.then(|| {
        let buf = match cached.as_mut() {
            Some(g) => &mut **g,
            None => &mut own,
        };
        SharedB::<K::P>::new(layout, buf)
    });
    // With B shared, the threads take the rows of C in units claimed as they go
    // (guided: each a share of what is left, the last ones small), so that a
    // thread slowed down or woken late leaves its rows to the others.
    let next = AtomicUsize::new(0);
    let claim = || {
        let mut s0 = next.load(Ordering::Relaxed);
        loop {
            if s0 >= strips {
                return None;
            }
            let left = strips - s0;
            let take = (left / (2 * parts)).max(UNIT_MIN).min(left);
            match next.compare_exchange_weak(s0, s0 + take, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some((s0, s0 + take)),
                Err(now) => s0 = now,
            }
        }
    };
    let part = |t: usize| {
        if let Some(sh) = shared.as_ref() {
            // Each thread starts on its own groups of strips, so that the first
            // claims of the threads do not collide.
            let g0 = t * layout.groups / parts;
            while let Some((s0, s1)) = claim() {
                let (i0, i1) = (s0 * mr, (s1 * mr).min(m));
                serial(kern, &rows_of(a, i0, i1), b, sub_out(c, i0, i1, 0, n), Some((sh, g0)));
            }
            return;
        }
        let (s0, s1) = (strips * t / parts, strips * (t + 1) / parts);
        if split_m {
            let (i0, i1) = (s0 * mr, (s1 * mr).min(m));
            serial(kern, &rows_of(a, i0, i1), b, sub_out(c, i0, i1, 0, n), None);
        } else {
            let (j0, j1) = (s0 * nr, (s1 * nr).min(n));
            serial(kern, a, &cols_of(b, j0, j1), sub_out(c, 0, m, j0, j1), None);
        }
    };
    // The calling thread computes part 0 while the pool takes the rest: one
    // wake-up of an idle worker overlaps with useful work (install() would add
    // a wake-up of a worker to start and of the caller to finish). Before the
    // scope blocks, the caller waits for the others by yielding, so finishing
    // costs no further wake-up.
    // A worker of the pool itself must not yield-wait: the parts it spawned may
    // sit in its own queue, which only the scope's own wait runs.
    let pool = parallel::pool();
    let spin = pool.current_thread_index().is_none();
    // Part 1 goes to a worker still spinning after the previous call, if one is
    // (no wake-up at all); see `hot`.
    let part1 = || part(1);
    let handed = if spin { crate::parallel::hot::Handoff::offer(&part1) } else { None };
    let left = AtomicUsize::new(parts - 1 - handed.is_some() as usize);
    pool.in_place_scope(|s| {
        for t in (1 + handed.is_some() as usize)..parts {
            let (part, left) = (&part, &left);
            s.spawn(move |_| {
                {
                    // Counts the part as done even if it panics (the scope then re-raises it).
                    let _done = Done(left);
                    part(t);
                }
                if spin && t == 1 {
                    // Outside the scope: this worker takes it up next and waits there
                    // for the next call's part, while this call returns.
                    rayon::spawn(crate::parallel::hot::linger);
                }
            });
        }
        part(0);
        if let Some(h) = &handed {
            h.finish();
        }
        while spin && left.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
    });
}

/// Decrements the count of unfinished parts when dropped.
struct Done<'a>(&'a AtomicUsize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// Rows `i0..i1` of `op` (a view, no copy).
fn rows_of(op: &Operand, i0: usize, i1: usize) -> Operand {
    let bytes = op.storage.bytes() as isize;
    Operand { ptr: op.ptr.wrapping_offset(i0 as isize * op.rs * bytes), rows: i1 - i0, ..op.clone() }
}

/// Columns `j0..j1` of `op` (a view, no copy).
pub(super) fn cols_of(op: &Operand, j0: usize, j1: usize) -> Operand {
    let bytes = op.storage.bytes() as isize;
    Operand { ptr: op.ptr.wrapping_offset(j0 as isize * op.cs * bytes), cols: j1 - j0, ..op.clone() }
}

/// The block `i0..i1` x `j0..j1` of `c`.
pub(super) fn sub_out<T>(c: OutMat<T>, i0: usize, i1: usize, j0: usize, j1: usize) -> OutMat<T> {
    OutMat { ptr: c.at(i0, j0), rows: i1 - i0, cols: j1 - j0, rs: c.rs, cs: c.cs }
}

/// Where the packed blocks of B live: `(jc block, pc block)` at
/// `(jcb * npc + pcb) * nstrips * sb` elements, strip `s` of a block `s * sb`
/// further; claims are per group of [`GROUP`] strips.
#[derive(Clone, Copy)]
struct SharedLayout {
    npc: usize,
    /// Strips of a full jc block.
    nstrips: usize,
    /// Strip stride.
    sb: usize,
    /// Groups of a full jc block.
    groups: usize,
    /// Elements of the whole packed B.
    len: usize,
    /// Claims (one per group of every block).
    claims: usize,
}

impl SharedLayout {
    fn new<K: Kernel>(n: usize, k: usize) -> Self {
        let nstrips = K::NC.min(n.div_ceil(K::NR) * K::NR).div_ceil(K::NR);
        let sb = strip_stride::<K>(K::NR, K::KC.min(k));
        let (njc, npc) = (n.div_ceil(K::NC), k.div_ceil(K::KC));
        let groups = nstrips.div_ceil(GROUP);
        SharedLayout { npc, nstrips, sb, groups, len: njc * npc * nstrips * sb, claims: njc * npc * groups }
    }
}

/// Claim states of a group of B strips.
const FREE: u8 = 0;
const PACKING: u8 = 1;
const READY: u8 = 2;
const FAILED: u8 = 3;

/// All of B, packed once for the threads of a row split.
struct SharedB<P> {
    lay: SharedLayout,
    buf: *mut P,
    state: Box<[AtomicU8]>,
}

// SAFETY: a group's elements are written only by the thread whose claim moved
// its state FREE -> PACKING, and read only after its READY (release/acquire).
unsafe impl<P: Send> Sync for SharedB<P> {}

impl<P: Copy> SharedB<P> {
    /// Over `store` (grown as needed, 64-byte aligned start).
    fn new(lay: SharedLayout, store: &mut Vec<u64>) -> Self {
        let buf = aligned::<P>(store, lay.len).as_mut_ptr();
        SharedB { lay, buf, state: (0..lay.claims).map(|_| AtomicU8::new(FREE)).collect() }
    }

    /// Start of block (jcb, pcb).
    fn block(&self, jcb: usize, pcb: usize) -> *mut P {
        // SAFETY: the offset is inside the lay.len elements of the buffer.
        unsafe { self.buf.add((jcb * self.lay.npc + pcb) * self.lay.nstrips * self.lay.sb) }
    }

    /// Make group `g` of block (jcb, pcb) ready: pack it with `pack` if no
    /// thread has claimed it, else wait for the thread packing it (which is
    /// running, so the wait ends).
    fn ensure(&self, jcb: usize, pcb: usize, g: usize, pack: impl FnOnce()) {
        let st = &self.state[(jcb * self.lay.npc + pcb) * self.lay.groups + g];
        if st.load(Ordering::Acquire) == READY {
            return;
        }
        if st.compare_exchange(FREE, PACKING, Ordering::Acquire, Ordering::Acquire).is_ok() {
            // Marks the group failed if packing panics, so that no thread waits forever.
            struct Fail<'a>(&'a AtomicU8);
            impl Drop for Fail<'_> {
                fn drop(&mut self) {
                    self.0.store(FAILED, Ordering::Release);
                }
            }
            let guard = Fail(st);
            pack();
            std::mem::forget(guard);
            st.store(READY, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        loop {
            match st.load(Ordering::Acquire) {
                READY => return,
                FAILED => panic!("packing a block of B failed on another thread"),
                _ => {}
            }
            spins += 1;
            if spins < 1 << 12 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Pack strips `s0..s1` of the B block at (jc, pc) of depth `kc` into `bs`
/// (the block's start; strip s at `s * sb`). Rows contiguous: a band of PB
/// rows at a time across the strips, the next band prefetched (each line
/// once), so that the rows of B are read as a few sequential streams. Columns
/// contiguous (a transposed view, `x @ w.T`): strip by strip, each of its
/// lines read whole along the depth (the decode's blocks of 64 values and
/// their transposes), the next strip's lines prefetched.
///
/// # Safety
/// `bs` addresses `s1 * sb` writable elements, and no other thread touches
/// strips `s0..s1` meanwhile.
#[allow(clippy::too_many_arguments)]
unsafe fn pack_b<K: Kernel>(b: &Operand, jc: usize, pc: usize, kc: usize, s0: usize, s1: usize, bs: *mut K::P, sb: usize) {
    let (n, nr) = (b.cols, K::NR);
    if b.rs == 1 && b.cs != 1 {
        for s in s0..s1 {
            let j0 = jc + s * nr;
            let nv = nr.min(n - j0);
            let base = pc as isize + j0 as isize * b.cs;
            if s + 1 < s1 {
                prefetch_lines(b, base + nr as isize * b.cs, b.cs, kc, nr.min(n - j0 - nr));
            }
            // SAFETY: strip s of the block lies within the caller's range, which
            // only this thread writes; rows pc..pc+kc and columns j0..j0+nv are inside b.
            unsafe {
                let d = std::slice::from_raw_parts_mut(bs.add(s * sb), K::strip_len(nr, kc));
                K::pack(b, base, b.cs, b.rs, nv, nr, kc, d);
            }
        }
        return;
    }
    // The strips' columns, for the prefetch of a band.
    let (js, jn) = (jc + s0 * nr, (jc + s1 * nr).min(n).saturating_sub(jc + s0 * nr));
    for p0 in (0..kc).step_by(PB) {
        let pk = PB.min(kc - p0);
        let off = K::strip_len(nr, p0);
        if p0 + PB < kc {
            // The next band: its rows are read side by side.
            prefetch_rows(b, (pc + p0 + PB) as isize * b.rs + js as isize * b.cs, b.rs, jn, PB.min(kc - p0 - PB));
        }
        for s in s0..s1 {
            let j0 = jc + s * nr;
            let nv = nr.min(n - j0);
            let base = (pc + p0) as isize * b.rs + j0 as isize * b.cs;
            // SAFETY: strip s of the block lies within the caller's range, which
            // only this thread writes; rows pc+p0..pc+p0+pk and columns j0..j0+nv are inside b.
            unsafe {
                let d = std::slice::from_raw_parts_mut(bs.add(s * sb + off), K::strip_len(nr, pk));
                K::pack(b, base, b.cs, b.rs, nv, nr, pk, d);
            }
        }
    }
}

/// Prefetch `len` elements from element offset `base` on in each of `rows`
/// rows `rs` elements apart, when the elements of a row are contiguous
/// (`op.cs == 1`): the next part of an operand to pack, so that its loads do
/// not wait on the memory. A hint: no effect on results, nothing is read.
#[inline(always)]
pub(super) fn prefetch_rows(op: &Operand, base: isize, rs: isize, len: usize, rows: usize) {
    if op.cs == 1 {
        prefetch_lines(op, base, rs, len, rows);
    }
}

/// Prefetch `len` contiguous elements from element offset `base` on in each of
/// `lines` lines `ls` elements apart (the caller knows the elements of a line
/// are contiguous). A hint, as [`prefetch_rows`].
#[inline(always)]
fn prefetch_lines(op: &Operand, base: isize, ls: isize, len: usize, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    if len > 0 {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = op.storage.bytes() as isize;
        let span = len * bytes as usize;
        for r in 0..lines as isize {
            let p = op.ptr.wrapping_offset((base + r * ls) * bytes);
            let first = p as usize & !63;
            for line in (first..p as usize + span).step_by(64) {
                // SAFETY: a prefetch is a hint; it reads nothing and cannot fault.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (op, base, ls, len, lines);
}

/// The loop nest on one thread, with B packed into this thread's own buffer
/// or, with `shared = Some((b, g0))`, into the shared one (visiting the groups
/// of strips from `g0` on). Every element of C sees the same sequence of
/// depth blocks and the same kernel whichever part of C it lies in, so results
/// do not depend on how C is split across threads.
fn serial<K: Kernel>(kern: &K, a: &Operand, b: &Operand, c: OutMat<K::C>, shared: Option<(&SharedB<K::P>, usize)>) {
    let (m, n, k) = (a.rows, b.cols, a.cols);
    let (mr, nr) = (K::MR, K::NR);
    let kc_max = K::KC.min(k);
    let nc_max = K::NC.min(n.div_ceil(nr) * nr);
    let sa = strip_stride::<K>(mr, kc_max);
    let sb = strip_stride::<K>(nr, kc_max);
    // Row blocks of at most MC rows, of near-equal size, each a multiple of MR.
    let mb = m.div_ceil(K::MC).max(1);
    let mc = m.div_ceil(mb).div_ceil(mr) * mr;

    // A product of few rows reads a row-major B in place (no packing), where the
    // kernel can decode it so: its A strips meet each B strip while it is in L1,
    // and B is read from memory once, not packed and read again. (bf16 x 8 x 4096
    // x 4096, 1 thread: 6.0 -> 5.3 ms; 2 x 4096 x 4096 4.5 -> 2.7.)
    let direct = if shared.is_none() && m <= DIRECT_M { kern.direct(b) } else { None };
    let bbytes = b.storage.bytes() as isize;
    let abytes = a.storage.bytes() as isize;
    let body = |own: Option<&mut [K::P]>| {
        let mut own = own;
        for (jcb, jc) in (0..n).step_by(K::NC).enumerate() {
            let nc = K::NC.min(n - jc);
            let nstrips = nc.div_ceil(nr);
            let groups = nstrips.div_ceil(GROUP);
            // A product of few columns (at most A_ROWS_COLS of B) reads A's
            // rows in place where the kernel can: packing the whole block of A first
            // waited on memory, for few B strips to meet (4096 x 4096 x 16 float32
            // spent 40% of its time packing; in place 1.9x as fast, 64 columns 1.25x,
            // 256 1.03x; float64 16 columns 1.4x; with more columns, as packed or
            // slower: 2048^3 1.05x as long).
            let a_in_place = if direct.is_none() { kern.a_rows(a) } else { None };
            let a_in_place = a_in_place.filter(|&code| {
                use super::kernels::{A_ROWS_BF16, A_ROWS_F16};
                nc <= match code {
                    A_ROWS_F16 => A_ROWS_COLS_F16,
                    A_ROWS_BF16 => A_ROWS_COLS_BF16,
                    _ => A_ROWS_COLS,
                }
            });
            for (pcb, pc) in (0..k).step_by(K::KC).enumerate() {
                let kc = K::KC.min(k - pc);
                let bs: *mut K::P = match (&mut own, shared) {
                    (Some(buf), _) => {
                        // (Read in place: only a last strip of fewer than NR columns is packed.)
                        let s0 = if direct.is_some() { nc / nr } else { 0 };
                        // SAFETY: the thread's own buffer holds nstrips strips.
                        unsafe { pack_b::<K>(b, jc, pc, kc, s0, nstrips, buf.as_mut_ptr(), sb) };
                        buf.as_mut_ptr()
                    }
                    (None, Some((sh, _))) => sh.block(jcb, pcb),
                    (None, None) => unreachable!("a buffer of one kind or the other"),
                };
                let g0 = shared.map_or(0, |(_, g)| g % groups);
                for ic in (0..m).step_by(mc) {
                    let mcb = mc.min(m - ic);
                    let astrips = mcb.div_ceil(mr);
                    with_scratch::<K::P, ()>(&APACK, astrips * sa, |apack| {
                        // Strip `s` of the block: its first row and the offset of its
                        // element at depth pc; the next strip's rows prefetched.
                        let strip_at = |s: usize| {
                            let i0 = ic + s * mr;
                            let base = i0 as isize * a.rs + pc as isize * a.cs;
                            if i0 + mr < m {
                                prefetch_rows(a, base + (mr as isize) * a.rs, a.rs, kc, mr.min(m - i0 - mr));
                            }
                            (i0, base)
                        };
                        // Strip `s` of the block packed into `d`.
                        let pack_a = |s: usize, d: &mut [K::P]| {
                            let (i0, base) = strip_at(s);
                            // SAFETY: rows i0..i0+mr (or up to m) and depth pc..pc+kc are inside a.
                            unsafe { K::pack(a, base, a.rs, a.cs, mr.min(m - i0), mr, kc, d) };
                        };
                        // The `gi`-th group of B strips this thread visits: strips s0..s1,
                        // which a shared B has packed first (by whichever thread came first).
                        let b_group = |gi: usize| {
                            let g = (g0 + gi) % groups;
                            let (s0, s1) = (g * GROUP, ((g + 1) * GROUP).min(nstrips));
                            if let Some((sh, _)) = shared {
                                // SAFETY: the claim gives this thread alone strips s0..s1 of the block.
                                sh.ensure(jcb, pcb, g, || unsafe { pack_b::<K>(b, jc, pc, kc, s0, s1, bs, sb) });
                            }
                            (s0, s1)
                        };
                        // The tile of A strip `is` (packed at `ap`) and B strip `js`.
                        let tile = |ap: *const K::P, is: usize, js: usize| {
                            let (i0, j0) = (ic + is * mr, jc + js * nr);
                            let (mrv, nrv) = (mr.min(m - i0), nr.min(n - j0));
                            // SAFETY: packed strips hold kc steps; the tile (i0, j0) of
                            // size mrv x nrv is inside C and only this thread writes it.
                            unsafe {
                                let cp = c.at(i0, j0);
                                match direct {
                                    Some(code) if nrv == nr => {
                                        let bp = b.ptr.wrapping_offset((pc as isize * b.rs + j0 as isize) * bbytes);
                                        kern.run_direct(code, kc, ap, bp, b.rs * bbytes, cp, c.rs, c.cs, mrv, nrv, pc > 0)
                                    }
                                    _ => kern.run(kc, ap, bs.add(js * sb), cp, c.rs, c.cs, mrv, nrv, pc > 0),
                                }
                            }
                        };
                        if let Some(acode) = a_in_place {
                            // A's whole strips read in place, each met by every B strip
                            // of the block at once, the next strip's rows prefetched
                            // meanwhile; a last strip of fewer rows packed. Every tile
                            // sees the same kernel on the same values as packed.
                            for gi in 0..groups {
                                b_group(gi);
                            }
                            for is in 0..astrips {
                                if ic + is * mr + mr > m {
                                    pack_a(is, &mut apack[..sa]);
                                    for js in 0..nstrips {
                                        tile(apack.as_ptr(), is, js);
                                    }
                                    continue;
                                }
                                let (i0, base) = strip_at(is);
                                let ar = a.ptr.wrapping_offset(base * abytes);
                                for js in 0..nstrips {
                                    let j0 = jc + js * nr;
                                    // SAFETY: rows i0..i0+mr, depth pc..pc+kc of a (row-major,
                                    // a_rows) and the B strip's kc steps; the tile is inside C
                                    // and only this thread writes it.
                                    unsafe { kern.run_a_rows(acode, kc, ar, a.rs, bs.add(js * sb), c.at(i0, j0), c.rs, c.cs, mr, nr.min(n - j0), pc > 0) };
                                }
                            }
                            return;
                        }
                        for (s, d) in apack.chunks_mut(sa).enumerate() {
                            pack_a(s, d);
                        }
                        let ap = apack.as_ptr();
                        for gi in 0..groups {
                            let (s0, s1) = b_group(gi);
                            for js in s0..s1 {
                                for is in 0..astrips {
                                    // SAFETY: strip is lies inside apack.
                                    tile(unsafe { ap.add(is * sa) }, is, js);
                                }
                            }
                        }
                    });
                }
            }
        }
    };
    if shared.is_some() {
        body(None);
    } else {
        with_scratch::<K::P, ()>(&BPACK, nc_max.div_ceil(nr) * sb, |bpack| body(Some(bpack)));
    }
}

/// Most multiply-adds of a product that [`small_f32`] takes.
pub(super) const SMALL_MADDS: usize = 1 << 21;
/// Most values of A or of B (decoded, B's rows padded to 8) that [`small_f32`] takes.
const SMALL_VALS: usize = 1 << 14;

/// `c = a @ b` for a small product (at most [`SMALL_MADDS`] multiply-adds, a
/// depth within one block): A and B decoded whole into this thread's buffers,
/// then [`super::kernels::small_f32_avx2`]'s tiles, without strips. The loop nest's
/// fixed costs (strips padded to whole tiles, partial tiles stored through a
/// scratch tile, the loops themselves) outweigh the products themselves there.
/// Every element is the loop nest's sum, bit for bit. Returns false, having
/// done nothing, for a product it does not take.
///
/// # Safety
/// The CPU must support avx2 and fma.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn small_f32(a: &Operand, b: &Operand, c: OutMat<f32>) -> bool {
    use super::kernels::F32Avx2;
    let (m, n, k) = (a.rows, b.cols, a.cols);
    let nb = n.div_ceil(8) * 8;
    // (The sizes of A and B first: bounded by them, m * n * k cannot overflow.)
    if m == 0 || n == 0 || k == 0 || k > F32Avx2::KC || m * k > SMALL_VALS || k * nb > SMALL_VALS || m * n * k > SMALL_MADDS {
        return false;
    }
    with_scratch::<f32, ()>(&APACK, m * k, |ap| {
        with_scratch::<f32, ()>(&BPACK, k * nb, |bp| {
            // SAFETY: A's rows (k values apart) and B's rows (nb apart, zero
            // padded) are decoded from elements inside the operands; the caller
            // guarantees the CPU features; c is the caller's m x n output.
            unsafe {
                F32Avx2::pack(a, 0, a.cs, a.rs, k, k, m, ap);
                F32Avx2::pack(b, 0, b.cs, b.rs, n, nb, k, bp);
                super::kernels::small_f32_avx2(m, n, k, ap.as_ptr(), bp.as_ptr(), nb, c);
            }
        })
    });
    true
}

/// Multiply-adds from which the vector paths split over the threads: they read
/// their big operand once, so from fewer than the loop nest ([`PAR_MIN`]);
/// 1024 x 1024 x 1 at 2 threads took 0.084 ms against 0.158 on one (bf16
/// 0.062 against 0.115, int8 0.017 against 0.031), the worker handed its part
/// while it spins.
pub(super) const GEMV_PAR_MIN: usize = PAR_MIN / 8;

/// Columns of B packed per strip of [`gemv_f32`] (a strip of a depth block: 32 KiB of f32).
const GEMV_W: usize = 32;

/// Columns of C per chunk where B's rows are contiguous, for one row of A
/// (64 KiB of f32 sums, 128 KiB of f64, in L2; [`gemv_width`]): each row of
/// B read in pieces of that many columns, each piece a stream for the
/// prefetchers. The longer the pieces, the faster: at 1 thread, 1 x 4096 x
/// 11008 took 1.25x as long in float32 at 4096 columns, 1.3x in bf16, 1.15x
/// in float64; 4 x 4096 x 4096 float32 1.2x; at 1024 (4 KiB of a float32
/// row, a page) 1 x 4096 x 4096 took 1.25x as long in float32, 1.3x in
/// bf16, and 2 rows 1.6x and 2.2x.
const GEMV_NW: usize = 16384;

/// `c = a @ b` for a single row of A (a vector-matrix product), a single
/// column of B (then computed as `c^T = b^T @ a^T`), up to [`GEMV_ROWS`]
/// rows of A with B's rows or columns contiguous, or up to as many columns of
/// B against more rows of A with A's rows or columns contiguous (transposed):
/// the loop nest would pack all of B into
/// strips for tiles whose rows (or columns) are mostly padding, or read it strip by strip.
/// Here B is read once, by one of three depth-block kernels over units of C's
/// columns ([`gemv_units`]): rows of B stored as f32, bf16, fp16, float8_e5m2,
/// float8_e4m3fn or another 8-bit float ([`super::kernels::row_code`]) and contiguous, streamed
/// and decoded in registers ([`super::kernels::gemv_block`], chunks of
/// [`GEMV_NW`] columns for one row of A, half as many for two); columns of B
/// so stored and contiguous, dotted 8 (or 16) at a time with every row of A
/// ([`super::kernels::gemv_cols`]; x @ w.T with w's rows the columns); any
/// other B, and blocks those refuse,
/// strip by strip of [`GEMV_W`] columns, each strip packed as the loop nest
/// packs it into a buffer of this thread that stays in L1
/// ([`super::kernels::gemv_strip_avx2`]). Each is the loop nest's FMAs in its
/// order (each depth block summed from zero, then added to the total), so the
/// same bits. Returns false, having done nothing, for other shapes.
///
/// # Safety
/// The CPU must support avx2, fma and f16c.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn gemv_f32(a: &Operand, b: &Operand, c: OutMat<f32>) -> bool {
    use super::kernels::{self, F32Avx2};
    let (m, n, k) = (a.rows, b.cols, a.cols);
    if m == 0 || n == 0 || k == 0 {
        return false;
    }
    // One column of B: the transposed product, one row of its A.
    let (a, b, c) = match (m, n) {
        (1, _) => (a.clone(), b.clone(), c),
        (_, 1) => (b.t(), a.t(), c.t()),
        (2..=GEMV_ROWS, _) if b.cs == 1 && kernels::row_code(&b.dec, b.fmt).is_some_and(|code| m <= gemv_rows(code)) => (a.clone(), b.clone(), c),
        (2..=GEMV_ROWS, _) if b.rs == 1 && kernels::row_code(&b.dec, b.fmt).is_some() => (a.clone(), b.clone(), c),
        // A few columns of B against more rows of A (or an A the arms above do not
        // take): the transposed product, few rows of its A (the loop nest pads B's
        // columns to tiles of 16), where A's rows or columns are contiguous.
        (_, 2..=GEMV_ROWS) if a.rs == 1 && kernels::row_code(&a.dec, a.fmt).is_some_and(|code| n <= gemv_rows(code)) => (b.t(), a.t(), c.t()),
        (_, 2..=GEMV_ROWS) if a.cs == 1 && kernels::row_code(&a.dec, a.fmt).is_some() => (b.t(), a.t(), c.t()),
        _ => return false,
    };
    let (b, bytes, m) = (&b, b.storage.bytes() as isize, a.rows);
    // Element (pc, j0) of B.
    let at = move |pc: usize, j0: usize| b.ptr.wrapping_offset((pc as isize * b.rs + j0 as isize * b.cs) * bytes);
    // SAFETY (all three): each block reads rows pc..pc+kc and columns j0..j0+w of
    // b, which lie inside it; the caller guarantees the CPU features.
    unsafe {
        // A block strip by strip, packed as the loop nest packs it.
        let strips = |av: &[f32], lda: usize, pc: usize, kc: usize, j0: usize, w: usize, t: &mut [f32], ldt: usize| {
            gemv_strips::<F32Avx2, f32, GEMV_W>(b, kernels::gemv_strip_avx2, av, lda, m, pc, kc, j0, w, t, ldt)
        };
        // The row streaming's decoding: e4m3fn's reads its values times 2^-8, and
        // takes A's block times 2^8 (the same products), where that stays finite.
        // (The column dots multiply their transposed values back instead.)
        let code = kernels::row_code(&b.dec, b.fmt);
        let p8 = kernels::place8(&b.dec, b.fmt).unwrap_or(kernels::Place8::NONE);
        let scaled = |av: &[f32], lda: usize, kc: usize, go: &mut dyn FnMut(&[f32], usize) -> bool| {
            if code != Some(kernels::ROW_E4M3FN) {
                return go(av, lda);
            }
            let mut sa = [0f32; GEMV_ROWS * F32Avx2::KC];
            for r in 0..m {
                for (d, &x) in sa[r * kc..(r + 1) * kc].iter_mut().zip(&av[r * lda..r * lda + kc]) {
                    *d = x * kernels::E4M3FN_SCALE;
                    if d.is_infinite() && x.is_finite() {
                        return false;
                    }
                }
            }
            go(&sa[..m * kc], kc)
        };
        // A block goes strip by strip where those cannot take it (or met an
        // e4m3fn NaN code, which they read as 1.875).
        match (b.cs, b.rs, code) {
            (1, _, Some(code)) => gemv_units::<F32Avx2, f32>(&a, c, b.cols, gemv_width(m, b.cols, k), &|av, lda, pc, kc, j0, w, t, ldt| {
                if !scaled(av, lda, kc, &mut |x, ldx| kernels::gemv_block(code, &p8, x, ldx, m, kc, at(pc, j0), b.rs * bytes, w, t, ldt)) {
                    strips(av, lda, pc, kc, j0, w, t, ldt)
                }
            }),
            (_, 1, Some(code)) => {
                // One row of A dots two groups of columns side by side (two chains
                // of FMAs). Where the columns are a multiple of 2 KiB apart, the
                // lines of 16 columns at a depth fall in one or two L1 sets (of 8
                // ways), and with the vector's lines there, the pieces of a line
                // read later missed (2.5x slower, depending on where the vector lay):
                // there the second group runs 64 steps behind, its lines in other
                // sets; float32 keeps one group (in memory two ran 5-10% slower).
                let apart = b.cs * bytes;
                let (groups, skew) = match (m, apart % 2048 == 0, code == kernels::ROW_F32) {
                    (1, false, _) => (2, 0),
                    (1, true, false) => (2, 64),
                    _ => (1, 0),
                };
                // Units of one kernel's columns: each column read whole, from
                // block to block, before the next (long streams for the prefetchers).
                gemv_units::<F32Avx2, f32>(&a, c, b.cols, 8 * groups, &|av, lda, pc, kc, j0, w, t, ldt| {
                    // e4m3fn and other fp8 columns: the block's codes (a few KiB, read
                    // next from L1) scanned first, the check of the decoding then left out.
                    let code = match code {
                        kernels::ROW_E4M3FN if kernels::specials_free(at(pc, j0), w, apart, kc, (0x7f, 0x7f)) => kernels::ROW_E4M3FN_CLEAN,
                        kernels::ROW_FP8 if kernels::specials_free(at(pc, j0), w, apart, kc, p8.specials()) => kernels::ROW_FP8_CLEAN,
                        kernels::ROW_E4M3FN | kernels::ROW_FP8 => return strips(av, lda, pc, kc, j0, w, t, ldt),
                        _ => code,
                    };
                    if !kernels::gemv_cols(code, &p8, m, groups, skew, av, lda, at(pc, j0), apart, w, kc, t, ldt) {
                        strips(av, lda, pc, kc, j0, w, t, ldt)
                    }
                })
            }
            // Rows contiguous, in a format without a row code (table-decoded, posits):
            // strip by strip across units as wide as the row streaming's, the strips of
            // a unit reading neighbouring pieces of the same rows (fetched ahead).
            // (In units of one strip, each strip walked its rows a page apart:
            // 1 x 4096 x 4096 of e4m3fnuz or posit8 took 2.8x as long.)
            (1, _, None) => gemv_units::<F32Avx2, f32>(&a, c, b.cols, gemv_width(m, b.cols, k), &strips),
            _ => gemv_units::<F32Avx2, f32>(&a, c, b.cols, GEMV_W, &strips),
        }
    }
    true
}

/// Rows of A that [`gemv_f32`] takes with B's columns contiguous (4096 x
/// 4096 float32 B at 1 thread: 2 to 6 rows 2.0-2.5x as fast as the loop nest,
/// bf16 and fp16 B 1.6-2.2x, fp8 B 1.8-3.3x; 7 and 8 rows 2.2-2.3x, 1.6-1.9x
/// and 1.7-2.0x), and columns of B against more rows of A (run transposed);
/// with B's rows contiguous, [`gemv_rows`] by B's decoding.
pub(super) const GEMV_ROWS: usize = 8;

/// Rows of A that [`gemv_f32`] takes with B's rows contiguous, stored as `code`
/// ([`super::kernels::row_code`]; at most [`GEMV_ROWS`]): up to 6 of float8 codes, whose decode the
/// streaming shares among the rows (4 x 4096 x 4096 at 1 thread: e5m2 1.9x
/// as fast as the loop nest, which packs B to f32, e4m3fn 1.6x; 1.3-1.5x at
/// 2 threads; 6 rows 1.1-1.4x; 8 as fast), and of float32, which the loop nest
/// packs and reads again (since the rows go in pieces of 4096 columns, 3 and 4
/// rows 1.6-1.7x as fast at 1 thread, 1.4-1.7x at 2; 6 rows 1.15x and
/// 1.1x); 2 of bf16 and fp16 (from 4 rows on, as fast as the loop nest or
/// slower, whose tiles read them in place).
pub(super) fn gemv_rows(code: u8) -> usize {
    use super::kernels::{ROW_E4M3FN, ROW_E5M2, ROW_F32, ROW_FP8};
    if code == ROW_E5M2 || code == ROW_E4M3FN || code == ROW_FP8 || code == ROW_F32 {
        6
    } else {
        2
    }
}

/// Columns of C per unit of a row streaming (of [`gemv_f32`], or of
/// [`super::f64v`]) for `m` rows of A (an m x k x n product): [`GEMV_NW`]
/// for one, fewer for more (the same bytes of sums); where the product splits
/// over the threads, no more than a thread's share of the columns.
pub(super) fn gemv_width(m: usize, n: usize, k: usize) -> usize {
    let w = (GEMV_NW / m).max(GEMV_W) / GEMV_W * GEMV_W;
    w.min(n.div_ceil(gemv_threads(m * n * k)).div_ceil(GEMV_W) * GEMV_W)
}

/// A depth block of a vector path: `(a, lda, pc, kc, j0, w, t, ldt)`, see [`gemv_units`].
pub(super) type GemvBlock<'a, T> = &'a (dyn Fn(&[T], usize, usize, usize, usize, usize, &mut [T], usize) + Sync);

/// Values of A a vector path decodes at a time (1 MiB of f32): A's rows go in
/// depth pieces of whole blocks, so that the buffer stays this size whatever
/// the depth (a 1 x 2^28 product would otherwise decode a GiB of A).
const GEMV_A_MAX: usize = 1 << 18;

/// The loop of a vector path ([`gemv_f32`], [`super::f64v`]) over the `n`
/// columns of C (m x n), in units of `width` (split over the threads as the
/// loop nest splits columns, from [`GEMV_PAR_MIN`] multiply-adds on): A's
/// rows decoded (`K::pack`) into this thread's buffer, whole or, beyond
/// [`GEMV_A_MAX`] values, in depth pieces of whole blocks (`lda` values a row),
/// then for each unit and depth block of `K::KC`, `block(a, lda, pc, kc, j0,
/// w, t, ldt)`, with row r's values of the block at `a[r * lda..][..kc]`,
/// puts the block's sums of columns `j0..j0 + w` of row r into
/// `t[r * ldt..][..w]`, which are stored (the first block) or added to C, as
/// the loop nest's tiles are (each column's blocks in depth order, so the
/// pieces change no bits).
///
/// # Safety
/// `block` must be safe to call for every unit and depth block of the product.
pub(super) unsafe fn gemv_units<K: Kernel<P = T, C = T>, T: Copy + std::ops::Add<Output = T>>(a: &Operand, c: OutMat<T>, n: usize, width: usize, block: GemvBlock<T>) {
    let (m, k) = (a.rows, a.cols);
    let units = n.div_ceil(width);
    // (Sums of at least one strip's width: a block may go strip by strip. Rows
    // of sums a multiple of 4 KiB apart would share their L1 sets: 8 x 4096 x
    // 4096 in float64, 2048 sums a row, took 2x as long.)
    let ldt = padded_ld(width.max(GEMV_W), std::mem::size_of::<T>()).expect("sums of 4 or 8 bytes");
    let lda = if m * k <= GEMV_A_MAX { k } else { (GEMV_A_MAX / m / K::KC).max(1) * K::KC };
    let run = |u0: usize, u1: usize| {
        with_scratch::<T, ()>(&APACK, m * (lda + ldt), |buf| {
            let (av, t) = buf.split_at_mut(m * lda);
            for d0 in (0..k).step_by(lda.max(1)) {
                let dk = lda.min(k - d0);
                // SAFETY: rows 0..m of a, columns d0..d0+dk.
                unsafe { K::pack(a, d0 as isize * a.cs, a.cs, a.rs, dk, lda, m, av) };
                for u in u0..u1 {
                    let (j0, w) = (u * width, width.min(n - u * width));
                    for pc in (d0..d0 + dk).step_by(K::KC) {
                        block(&av[pc - d0..], lda, pc, K::KC.min(d0 + dk - pc), j0, w, t, ldt);
                        // SAFETY: rows 0..m, columns j0..j0+w of c.
                        unsafe { super::kernels::store_tile(t, ldt, c.at(0, j0), c.rs, c.cs, m, w, pc > 0) };
                    }
                }
            }
        })
    };
    gemv_split(units, m * n * k, &run);
}

/// A depth block of a vector path (rows pc..pc + kc, columns j0..j0 + w of
/// `b`), any B, strip by strip of `W <= GEMV_W` columns: each strip packed as
/// the loop nest packs it (`K::pack`) into a buffer of this thread that stays
/// in L1, then summed by `strip` for each of the `m` rows of A (the block's
/// values, `lda` apart in `av`) into its row of `t` (`ldt` apart; `strip(a, bs, t)` puts `sum_kk
/// a[kk] * bs[kk * W + j]` into `t[j]`, the loop nest's FMAs in its order).
/// B's rows contiguous: the next strip's piece of each row is fetched ahead
/// (each row lies on another page, where the prefetchers stop), into L2 (the
/// strip's packed values fill L1).
///
/// # Safety
/// Those rows and columns lie inside `b`; `strip` must be safe to call; `t`
/// holds `m` rows of `ldt` values, `W` from each strip's first column on.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gemv_strips<K: Kernel<P = T>, T: Copy, const W: usize>(b: &Operand, strip: unsafe fn(&[T], &[T], &mut [T]), av: &[T], lda: usize, m: usize, pc: usize, kc: usize, j0: usize, w: usize, t: &mut [T], ldt: usize) {
    let bytes = b.storage.bytes() as isize;
    for s in (0..w).step_by(W) {
        #[cfg(target_arch = "x86_64")]
        if b.cs == 1 && s + W < w {
            for kk in 0..kc {
                // (A prefetch of an address inside b: row pc + kk, column j0 + s + W.)
                let p = b.ptr.wrapping_offset(((pc + kk) as isize * b.rs + (j0 + s + W) as isize) * bytes);
                // SAFETY: a prefetch has no effect on memory.
                unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p as *const i8) };
            }
        }
        with_scratch::<T, ()>(&BPACK, kc * W, |bs| {
            // SAFETY: bs[kk*W + j] = b[pc+kk, j0+s+j], zeros past column w (inside b
            // per the contract); the strip kernel reads kc * W values of bs and writes
            // W of t from column s.
            unsafe {
                K::pack(b, pc as isize * b.rs + (j0 + s) as isize * b.cs, b.cs, b.rs, W.min(w - s), W, kc, bs);
                for r in 0..m {
                    strip(&av[r * lda..r * lda + kc], bs, &mut t[r * ldt + s..]);
                }
            }
        })
    }
}

/// The threads a vector path of `madds` multiply-adds splits over: all of them
/// from [`GEMV_PAR_MIN`] on, else one.
fn gemv_threads(madds: usize) -> usize {
    let threads = crate::parallel::num_threads();
    if threads > 1 && madds >= GEMV_PAR_MIN {
        threads
    } else {
        1
    }
}

/// `run(u0, u1)` over the units `0..units` of a vector path of `madds`
/// multiply-adds: in equal shares over [`gemv_threads`] (at most one a unit),
/// or at once on this thread.
pub(super) fn gemv_split(units: usize, madds: usize, run: &(dyn Fn(usize, usize) + Sync)) {
    let parts = gemv_threads(madds).min(units);
    if parts <= 1 {
        run(0, units);
    } else {
        crate::parallel::for_each_item(parts, &|p| run(units * p / parts, units * (p + 1) / parts));
    }
}
