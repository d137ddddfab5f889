//! The thread pool every kernel runs on, and chunked parallel loops over it.
//!
//! One global rayon pool, rebuilt by [`set_num_threads`]. Kernels split work
//! into chunks whose boundaries depend only on the problem size, never on the
//! thread count, so results (stochastic rounding included) are identical at
//! any number of threads.

use std::sync::{Arc, RwLock};

use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::{Error, Result};

static POOL: RwLock<Option<Arc<ThreadPool>>> = RwLock::new(None);

/// The most threads a pool may have: every one is started at once, so a typo
/// such as 10**9 must not try to start them all.
pub const MAX_THREADS: usize = 1024;

/// `LOWP_NUM_THREADS` where it is a count from 1 to [`MAX_THREADS`] (the Python
/// package warns about other values), else the machine's.
fn default_threads() -> usize {
    std::env::var("LOWP_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|n| (1..=MAX_THREADS).contains(n))
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

fn build(n: usize) -> Result<Arc<ThreadPool>> {
    ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("lowp-{i}"))
        // (Started from a caller's thread, they would inherit its flush-to-zero.)
        .start_handler(|_| crate::fpenv::set_clean())
        .build()
        .map(Arc::new)
        .map_err(|e| Error::value(format!("n: could not start {n} threads: {e}")))
}

/// The pool kernels run on (created on first use).
pub fn pool() -> Arc<ThreadPool> {
    if let Some(p) = POOL.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return p.clone();
    }
    let mut w = POOL.write().unwrap_or_else(|e| e.into_inner());
    if w.is_none() {
        let n = match NEXT_THREADS.load(std::sync::atomic::Ordering::Relaxed) {
            0 => default_threads(),
            n => n,
        };
        *w = Some(build(n).unwrap_or_else(|_| build(1).expect("a one-thread pool")));
    }
    w.as_ref().unwrap().clone()
}

/// Use `n` threads from now on (`n >= 1`).
pub fn set_num_threads(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::value("n: the number of threads must be >= 1"));
    }
    let p = build(n)?;
    *POOL.write().unwrap_or_else(|e| e.into_inner()) = Some(p);
    Ok(())
}

std::thread_local! {
    /// The pool's lock, held by the thread that forks from [`before_fork`] to the
    /// after-fork call (the child's copy of it then is not held by a thread that
    /// no longer exists).
    static FORK_GUARD: std::cell::RefCell<Option<std::sync::RwLockWriteGuard<'static, Option<Arc<ThreadPool>>>>> =
        const { std::cell::RefCell::new(None) };
}

/// Before `fork()`: take the pool's lock, so that no thread holds it when the
/// process is copied. Must be followed on the same thread by [`after_fork`].
pub fn before_fork() {
    // (Hooks registered twice, say by a reload of the package, call this twice: the
    // lock is not reentrant, so the second call finds it held and does nothing.)
    if FORK_GUARD.with(|f| f.borrow().is_some()) {
        return;
    }
    let g = POOL.write().unwrap_or_else(|e| e.into_inner());
    FORK_GUARD.with(|f| *f.borrow_mut() = Some(g));
}

/// After `fork()`, in the parent (`child` false) or the child: release the
/// lock [`before_fork`] took. In the child the pool's workers did not survive
/// the fork (waiting on them would hang), so its pool is forgotten, neither
/// used nor joined, and the next kernel starts a new one with as many threads;
/// no worker spins for a handoff there either.
pub fn after_fork(child: bool) {
    let Some(mut g) = FORK_GUARD.with(|f| f.borrow_mut().take()) else {
        return;
    };
    if child {
        hot::reset();
        if let Some(old) = g.take() {
            // Built on first use, with the parent's count.
            NEXT_THREADS.store(old.current_num_threads(), std::sync::atomic::Ordering::Relaxed);
            std::mem::forget(old);
        }
    }
}

/// Threads of the pool [`pool`] creates next, where a fork left one behind (0: the default).
static NEXT_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

pub fn num_threads() -> usize {
    if SERIAL.with(|s| s.get()) {
        return 1;
    }
    pool().current_num_threads()
}

std::thread_local! {
    /// Set while this thread runs [`serially`].
    static SERIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f` with every kernel it calls on this thread alone ([`num_threads`]
/// is 1 inside): for work that is already spread over the threads one piece
/// per thread, such as the products of a batch. Kernels compute the same
/// results at any thread count, so this changes no result.
pub fn serially<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SERIAL.with(|s| s.replace(true)));
    f()
}

/// Chunk length for `len` items: fixed by `len` alone, a multiple of 64,
/// at least `min_chunk` (so small inputs stay on the calling thread).
pub fn chunk_len(len: usize, min_chunk: usize) -> usize {
    let target = len.div_ceil(64).max(min_chunk);
    target.div_ceil(64) * 64
}

/// Run `f(start, src_chunk, dst_chunk)` over matching chunks of `src` and `dst`
/// (which have the same length), in parallel on the pool.
pub fn zip_chunks<S: Sync, D: Send>(src: &[S], dst: &mut [D], min_chunk: usize, f: impl Fn(usize, &[S], &mut [D]) + Sync) {
    assert_eq!(src.len(), dst.len());
    let len = src.len();
    if len == 0 {
        return;
    }
    let c = chunk_len(len, min_chunk);
    if c >= len || num_threads() == 1 {
        // Same chunk boundaries as the parallel path: results cannot differ.
        for (i, (s, d)) in src.chunks(c).zip(dst.chunks_mut(c)).enumerate() {
            f(i * c, s, d);
        }
        return;
    }
    use rayon::prelude::*;
    pool().install(|| {
        src.par_chunks(c).zip(dst.par_chunks_mut(c)).enumerate().for_each(|(i, (s, d))| f(i * c, s, d));
    });
}

/// Run `run(piece)` once for every piece, pieces taken in turn by the calling
/// thread and the pool's workers (see [`for_each_item`]).
pub fn for_each_piece<T: Send>(pieces: Vec<T>, run: &(dyn Fn(T) + Sync)) {
    let slots: Vec<std::sync::Mutex<Option<T>>> = pieces.into_iter().map(|p| std::sync::Mutex::new(Some(p))).collect();
    for_each_item(slots.len(), &|i| {
        if let Some(p) = slots[i].lock().unwrap_or_else(|e| e.into_inner()).take() {
            run(p)
        }
    });
}

/// Run `f(i)` for every `i` in `0..n`, items taken in turn by the calling
/// thread and the pool's workers. With two threads and a worker still
/// spinning after an earlier kernel, that worker joins at once (no wake-up);
/// otherwise the pool runs the items and one worker stays hot afterwards.
/// Which thread runs an item never changes what it computes.
pub fn for_each_item(n: usize, f: &(dyn Fn(usize) + Sync)) {
    if n <= 1 || num_threads() == 1 {
        (0..n).for_each(f);
        return;
    }
    let pool = pool();
    let outside = pool.current_thread_index().is_none();
    if outside && pool.current_num_threads() == 2 {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let work = || loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if i >= n {
                break;
            }
            f(i);
        };
        let handed = hot::Handoff::offer(&work);
        if let Some(h) = &handed {
            work();
            h.finish();
            return;
        }
    }
    {
        use rayon::prelude::*;
        pool.install(|| (0..n).into_par_iter().for_each(f));
    }
    if outside {
        pool.spawn(hot::linger);
    }
}

/// Hot handoff: a worker that has just finished its share of a kernel keeps
/// spinning for a short while (as BLAS threads do) instead of going to sleep,
/// and the next kernel hands it a share directly. Waking a sleeping thread
/// can take longer than a whole 512^3 product on a virtual machine.
pub(crate) mod hot {
    use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// How long a worker waits for the next part.
    const LINGER: Duration = Duration::from_millis(2);

    /// A posted part: the closure (on the poster's stack) and its completion.
    pub(crate) struct Job<'a> {
        f: &'a (dyn Fn() + Sync),
        done: AtomicBool,
        panicked: AtomicBool,
    }

    /// Workers spinning now (at most one is kept).
    static SPINNING: AtomicUsize = AtomicUsize::new(0);
    /// The posted job, or null.
    static SLOT: AtomicPtr<Job<'static>> = AtomicPtr::new(std::ptr::null_mut());

    pub(crate) struct Handoff<'a> {
        job: Box<Job<'a>>,
    }

    impl<'a> Handoff<'a> {
        /// Post `f` for a spinning worker; None when none spins.
        pub(crate) fn offer(f: &'a (dyn Fn() + Sync)) -> Option<Handoff<'a>> {
            if SPINNING.load(Ordering::Acquire) == 0 {
                return None;
            }
            let job = Box::new(Job { f, done: AtomicBool::new(false), panicked: AtomicBool::new(false) });
            let p = &*job as *const Job<'a> as *mut Job<'static>;
            SLOT.compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire).ok()?;
            Some(Handoff { job })
        }

        /// Wait until the part is done; run it here if no worker has taken it.
        pub(crate) fn finish(&self) {
            let p = &*self.job as *const Job<'a> as *mut Job<'static>;
            if SLOT.compare_exchange(p, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire).is_ok() {
                // Not taken (the worker stopped spinning first): ours again.
                struct SetDone<'b>(&'b AtomicBool);
                impl Drop for SetDone<'_> {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::Release);
                    }
                }
                let _done = SetDone(&self.job.done);
                (self.job.f)();
                return;
            }
            while !self.job.done.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            if self.job.panicked.load(Ordering::Acquire) {
                panic!("a kernel share panicked on a worker thread");
            }
        }
    }

    impl Drop for Handoff<'_> {
        fn drop(&mut self) {
            // The job must not outlive this frame while a worker may still use it
            // (finish() normally returned already; this covers unwinding from part 0).
            let p = &*self.job as *const Job<'_> as *mut Job<'static>;
            if SLOT.compare_exchange(p, std::ptr::null_mut(), Ordering::AcqRel, Ordering::Acquire).is_err() {
                while !self.job.done.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// In the child of a fork: no worker spins there, and no part is posted.
    pub(crate) fn reset() {
        SPINNING.store(0, Ordering::Release);
        SLOT.store(std::ptr::null_mut(), Ordering::Release);
    }

    /// Spin on this worker for the next posted part, for up to LINGER after the last one.
    pub(crate) fn linger() {
        if SPINNING.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return; // another worker is already waiting
        }
        let mut until = Instant::now() + LINGER;
        let mut n = 0u32;
        loop {
            if take_and_run() {
                until = Instant::now() + LINGER;
                continue;
            }
            std::hint::spin_loop();
            n = n.wrapping_add(1);
            if n.is_multiple_of(256) && Instant::now() >= until {
                break;
            }
        }
        SPINNING.store(0, Ordering::Release);
        // A job posted between the last check and the store above: run it.
        take_and_run();
    }

    /// Run the posted job, if any; whether there was one.
    fn take_and_run() -> bool {
        let p = SLOT.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if p.is_null() {
            return false;
        }
        // SAFETY: a posted job stays alive until its poster saw `done`
        // (Handoff::finish / drop wait for it), and only this swap took it.
        let job = unsafe { &*p };
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (job.f)())).is_ok();
        job.panicked.store(!ok, Ordering::Release);
        job.done.store(true, Ordering::Release);
        true
    }
}

#[cfg(test)]
mod hot_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every item runs exactly once, back to back (hot handoffs), after pauses
    /// (cold starts) and from several threads at once.
    #[test]
    fn every_item_once() {
        let _settings = crate::settings_write();
        let old = super::num_threads();
        super::set_num_threads(2).unwrap();
        let check = |n: usize| {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            super::for_each_item(n, &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        };
        for r in 0..300 {
            check(r % 17);
            if r % 50 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| (0..200).for_each(|r| check(1 + r % 9)));
            }
        });
        super::set_num_threads(old).unwrap();
    }
}
