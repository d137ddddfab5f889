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

fn default_threads() -> usize {
    std::env::var("LOWP_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

fn build(n: usize) -> Result<Arc<ThreadPool>> {
    ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("lowp-{i}"))
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
        *w = Some(build(default_threads()).unwrap_or_else(|_| build(1).expect("a one-thread pool")));
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

pub fn num_threads() -> usize {
    pool().current_num_threads()
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
