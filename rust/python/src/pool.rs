//! A bounded cache of large result buffers.
//!
//! A fresh multi-megabyte result costs a page fault and a page zeroing per
//! page on its first write, which for a conversion kernel is as much time as
//! the conversion itself. Results made here keep their memory in a `Buffer`
//! object (the array's base); when the array dies the memory goes back to a
//! small cache and the next result of a similar size reuses it, already
//! mapped. The cache holds at most `limit` bytes (`set_buffer_cache`) in at
//! most `MAX_BLOCKS` blocks; 0 turns it off and frees what it holds.

use std::alloc::{alloc, dealloc, Layout};
use std::ffi::c_void;
use std::sync::Mutex;

use numpy::npyffi::{npy_intp, NpyTypes, PyArrayObject, NPY_ARRAY_CARRAY, PY_ARRAY_API};
use numpy::{PyArrayDescr, PyArrayDescrMethods};
use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// Blocks are huge-page aligned and sized in huge pages.
const ALIGN: usize = 1 << 21;
/// Blocks kept at most.
const MAX_BLOCKS: usize = 8;
/// Cache limit until `set_buffer_cache` changes it.
const DEFAULT_LIMIT: usize = 1 << 30;

struct Block {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: a Block is the only owner of its allocation; nothing else aliases it.
unsafe impl Send for Block {}
// SAFETY: a Block is never used through a shared reference (only moved, then freed).
unsafe impl Sync for Block {}

impl Block {
    fn layout(cap: usize) -> Layout {
        // cap is a nonzero multiple of ALIGN (a power of two): always a valid layout.
        Layout::from_size_align(cap, ALIGN).expect("block layout")
    }

    fn new(need: usize) -> PyResult<Block> {
        let cap = need
            .max(1)
            .checked_next_multiple_of(ALIGN)
            .filter(|&c| c <= isize::MAX as usize - ALIGN)
            .ok_or_else(|| PyValueError::new_err(format!("shape: {need} bytes is too large")))?;
        // SAFETY: the layout has a nonzero size.
        let ptr = unsafe { alloc(Block::layout(cap)) };
        if ptr.is_null() {
            return Err(PyMemoryError::new_err(format!("cannot allocate {cap} bytes")));
        }
        #[cfg(target_os = "linux")]
        // SAFETY: [ptr, ptr + cap) is our own allocation and ptr is page aligned; the
        // advice only lets the kernel back it with huge pages (fewer faults).
        unsafe {
            libc::madvise(ptr as *mut libc::c_void, cap, libc::MADV_HUGEPAGE);
        }
        Ok(Block { ptr, cap })
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: ptr came from `alloc` with this very layout and is freed once.
        unsafe { dealloc(self.ptr, Block::layout(self.cap)) }
    }
}

struct Cache {
    /// Free blocks, oldest first.
    free: Vec<Block>,
    bytes: usize,
    limit: usize,
}

impl Cache {
    /// Take out the oldest blocks until `room` more bytes fit under the limit and
    /// fewer than `max_blocks` blocks remain; the caller frees them outside the lock.
    fn evict(&mut self, room: usize, max_blocks: usize) -> Vec<Block> {
        let mut out = Vec::new();
        while !self.free.is_empty() && (self.bytes + room > self.limit || self.free.len() >= max_blocks) {
            let old = self.free.remove(0);
            self.bytes -= old.cap;
            out.push(old);
        }
        out
    }
}

static CACHE: Mutex<Cache> = Mutex::new(Cache { free: Vec::new(), bytes: 0, limit: DEFAULT_LIMIT });

fn cache() -> std::sync::MutexGuard<'static, Cache> {
    // The cache stays consistent even if a holder panicked (it only moves Blocks).
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A cached block of at least `need` bytes that wastes at most half of itself.
fn take(need: usize) -> Option<Block> {
    let mut c = cache();
    let i = (0..c.free.len()).filter(|&i| c.free[i].cap >= need && c.free[i].cap / 2 <= need).min_by_key(|&i| c.free[i].cap)?;
    let b = c.free.remove(i);
    c.bytes -= b.cap;
    Some(b)
}

/// Return a block to the cache, or free it when it does not fit.
fn give(b: Block) {
    let mut evicted = Vec::new();
    {
        let mut c = cache();
        if b.cap > c.limit {
            evicted.push(b);
        } else {
            evicted = c.evict(b.cap, MAX_BLOCKS);
            c.bytes += b.cap;
            c.free.push(b);
        }
    }
    drop(evicted); // freed outside the lock
}

/// The memory of one result array (its `base`); dropping it returns the memory to the cache.
#[pyclass(module = "lowp._lowp", frozen)]
pub struct Buffer {
    block: Option<Block>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if let Some(b) = self.block.take() {
            give(b);
        }
    }
}

#[pymethods]
impl Buffer {
    /// Bytes held.
    #[getter]
    fn nbytes(&self) -> usize {
        self.block.as_ref().map_or(0, |b| b.cap)
    }
}

/// An uninitialized C-contiguous array of `shape` and `dtype` whose memory
/// comes from the cache (or a new block).
#[pyfunction]
fn cached_empty<'py>(py: Python<'py>, shape: Vec<usize>, dtype: Bound<'py, PyArrayDescr>) -> PyResult<Bound<'py, PyAny>> {
    if dtype.has_object() {
        return Err(PyTypeError::new_err("dtype: object dtypes are not accepted; accepted: numeric dtypes"));
    }
    // (numpy refuses more dimensions than it supports: 32 before numpy 2, 64 since.)
    let item = dtype.itemsize();
    let need = shape
        .iter()
        .try_fold(item, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize / 2)
        .ok_or_else(|| PyValueError::new_err(format!("shape: {shape:?} of {item}-byte items is too large")))?;
    let block = match take(need) {
        Some(b) => b,
        None => Block::new(need)?,
    };
    let ptr = block.ptr;
    let buf = Bound::new(py, Buffer { block: Some(block) })?;
    // The result's base is a byte array over the whole block whose base is the
    // Buffer: numpy lets an array's WRITEABLE flag be set again only when its
    // base is a writeable array or exports a writeable buffer, which a class of
    // this (abi3) module cannot.
    let bytes = wrap(py, numpy::dtype::<u8>(py), &[need as npy_intp], ptr, buf.into_any())?; // (need <= isize::MAX / 2)
    let dims: Vec<npy_intp> = shape.iter().map(|&d| d as npy_intp).collect();
    wrap(py, dtype, &dims, ptr, bytes)
}

/// A new C-contiguous, writeable array of `dims` and `dtype` over the memory at
/// `ptr`, with `base` as its base (which keeps that memory alive).
fn wrap<'py>(
    py: Python<'py>,
    dtype: Bound<'py, PyArrayDescr>,
    dims: &[npy_intp],
    ptr: *mut u8,
    base: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut dims = dims.to_vec();
    // SAFETY: NewFromDescr steals the new descriptor reference made by into_dtype_ptr;
    // dims has nd entries; the data pointer is aligned, writeable, at least as long
    // as the array's bytes and lives as long as `base`, which becomes its base below.
    let arr = unsafe {
        PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            numpy::npyffi::get_type_object(py, NpyTypes::PyArray_Type),
            dtype.into_dtype_ptr(),
            dims.len() as std::ffi::c_int,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            ptr as *mut c_void,
            NPY_ARRAY_CARRAY,
            std::ptr::null_mut(),
        )
    };
    if arr.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: arr is a new reference owned here.
    let arr = unsafe { Bound::from_owned_ptr(py, arr) };
    // SAFETY: arr is an ndarray without a base; SetBaseObject steals the reference
    // to base (also on failure).
    let rc = unsafe { PY_ARRAY_API.PyArray_SetBaseObject(py, arr.as_ptr() as *mut PyArrayObject, base.into_ptr()) };
    if rc < 0 {
        return Err(PyErr::fetch(py));
    }
    Ok(arr)
}

/// Set the cache limit in bytes (0: no cache) and return the previous one.
#[pyfunction]
fn set_buffer_cache(limit: usize) -> usize {
    let (old, evicted) = {
        let mut c = cache();
        let old = c.limit;
        c.limit = limit;
        (old, c.evict(0, usize::MAX))
    };
    drop(evicted); // freed outside the lock
    old
}

/// (blocks cached, bytes cached, limit).
#[pyfunction]
fn buffer_cache_info() -> (usize, usize, usize) {
    let c = cache();
    (c.free.len(), c.bytes, c.limit)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Buffer>()?;
    m.add_function(wrap_pyfunction!(cached_empty, m)?)?;
    m.add_function(wrap_pyfunction!(set_buffer_cache, m)?)?;
    m.add_function(wrap_pyfunction!(buffer_cache_info, m)?)?;
    Ok(())
}
