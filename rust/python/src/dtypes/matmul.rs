//! `np.matmul` (and so `a @ b`) on lowp dtypes: a loop of numpy's matmul
//! gufunc, `(m,n),(n,p)->(m,p)`, that runs lowp's GEMM (inputs decoded while
//! packing, float32 accumulation; float64 for formats wider than float32) and
//! rounds each result once, to nearest even, into the dtype — what
//! `lowp.matmul(a, b, out_dtype=a.dtype)` returns.

use std::ffi::{c_char, c_int, c_void};

use lowp_core::convert;
use lowp_core::gemm::{self, Operand, OutMat, Storage};
use lowp_core::round::{Mode, RoundOpts};
use numpy::npyffi::{npy_intp, PyUFuncObject, PY_UFUNC_API};
use pyo3::prelude::*;

use super::{store, type_num, N, TYPES};

fn storage(size: usize) -> Storage {
    match size {
        1 => Storage::U8,
        2 => Storage::U16,
        _ => Storage::U32,
    }
}

/// Gather a strided `rows x cols` block of `size`-byte codes into aligned,
/// contiguous memory (for views whose byte strides are not whole elements).
///
/// # Safety
/// Every element `p + i*rs + j*cs` (bytes) must be readable.
unsafe fn gather(p: *const u8, rows: usize, cols: usize, rs: isize, cs: isize, size: usize) -> Vec<u32> {
    let mut v = vec![0u32; rows * cols];
    let dst = v.as_mut_ptr() as *mut u8;
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: the source is readable by the contract; the destination holds rows*cols u32.
            unsafe {
                std::ptr::copy_nonoverlapping(p.offset(i as isize * rs + j as isize * cs), dst.add((i * cols + j) * size), size);
            }
        }
    }
    v
}

/// An operand over numpy's strided block, or over a gathered copy (kept in `keep`).
///
/// # Safety
/// As [`gather`]; the returned operand borrows `p` or `keep`.
#[allow(clippy::too_many_arguments)]
unsafe fn operand(p: *const u8, rows: usize, cols: usize, rs: isize, cs: isize, t: usize, keep: &mut Vec<u32>) -> lowp_core::Result<Operand> {
    let size = TYPES[t].size as isize;
    let fmt = Some(TYPES[t].fmt);
    let st = storage(size as usize);
    if rs % size == 0 && cs % size == 0 && (p as usize).is_multiple_of(size as usize) {
        // SAFETY: whole-element strides and alignment; readable by the contract.
        return unsafe { Operand::from_raw(p, st, fmt, rows, cols, rs / size, cs / size, "a") };
    }
    // SAFETY: readable by the contract.
    *keep = unsafe { gather(p, rows, cols, rs, cs, size as usize) };
    // SAFETY: `keep` holds rows*cols contiguous codes, aligned (u32 backing).
    unsafe { Operand::from_raw(keep.as_ptr() as *const u8, st, fmt, rows, cols, cols as isize, 1, "a") }
}

/// Write the format's NaN (NaR for posits; 0 where there is none) into an output block.
///
/// # Safety
/// Every element `o + i*rs + j*cs` (bytes) must be writable.
unsafe fn fill_nan(o: *mut u8, m: usize, p: usize, rs: isize, cs: isize, t: usize) {
    let c = (TYPES[t].fmt.encode(f64::NAN, &RoundOpts::new(Mode::NearestEven), 0) as u32).to_le_bytes();
    for i in 0..m {
        for j in 0..p {
            // SAFETY: writable by the contract.
            unsafe { std::ptr::copy_nonoverlapping(c.as_ptr(), o.offset(i as isize * rs + j as isize * cs), TYPES[t].size) };
        }
    }
}

/// # Safety
/// numpy's gufunc loop contract for `(m,n),(n,p)->(m,p)`: `dims` = [count, m, n, p],
/// `steps` = [3 outer strides, a's (m, n), b's (n, p), out's (m, p)] in bytes;
/// `data` is the type index (as a pointer-sized integer).
unsafe extern "C" fn loop_matmul(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    // SAFETY: see the function contract.
    unsafe {
        let t = data as usize;
        let (count, m, n, p) = (*dims as usize, *dims.add(1) as usize, *dims.add(2) as usize, *dims.add(3) as usize);
        let st: [isize; 9] = std::array::from_fn(|i| *steps.add(i));
        // (Addresses as integers: the closure runs on the pool's threads.)
        let (a0, b0, o0) = (*args as usize, *args.add(1) as usize, *args.add(2) as usize);
        // A stack runs as lowp.matmul runs one: small products one per thread at a
        // time, larger ones each over every thread; each matrix the same either way
        // (and in the floating-point environment lowp.matmul's run in).
        let _fp = lowp_core::fpenv::Clean::enter();
        let _ = gemm::for_batch(count, m * n * p, &|k| {
            let k = k as isize;
            let (a, b, o) = ((a0 as *const u8).offset(k * st[0]), (b0 as *const u8).offset(k * st[1]), (o0 as *mut u8).offset(k * st[2]));
            one_matmul(t, a, b, o, (m, n, p), &st[3..]);
            Ok(())
        });
    }
}

thread_local! {
    /// Accumulators (float32 or float64) and codes of one block of a product
    /// (at most [`BLOCK_ELEMS`] each), kept per thread.
    static SCRATCH: std::cell::RefCell<(Vec<f32>, Vec<f64>, Vec<u32>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new(), Vec::new())) };
}

/// Elements of C a product computes at a time (16 MiB of float32 sums): larger
/// outputs go in blocks of rows (of columns where one row is more), so the
/// scratch a thread keeps stays this size (a 2^14 x 2^14 fp8 output kept 2 GiB
/// of sums and codes) while B is packed once per block (a few percent of a
/// product this large). It is kept between products: freeing it after each
/// one made 1024 x 32 x 1024 products 2-2.6x slower, fresh pages faulted in.
const BLOCK_ELEMS: usize = 1 << 22;

/// One matrix of [`loop_matmul`]: `o = a @ b`, accumulated in float32 (float64
/// for formats wider than float32) and rounded once into the type; `s` holds
/// a's (m, n), b's (n, p) and o's (m, p) byte strides.
///
/// # Safety
/// The three blocks are readable (a, b) and writable (o) at those strides.
unsafe fn one_matmul(t: usize, a: *const u8, b: *const u8, o: *mut u8, (m, n, p): (usize, usize, usize), s: &[isize]) {
    let info = &TYPES[t];
    let wide = !info.fmt.fits_f32();
    let opts = RoundOpts::new(Mode::NearestEven);
    let (mut ka, mut kb) = (Vec::new(), Vec::new());
    // SAFETY: per the contract.
    unsafe {
        let oa = operand(a, m, n, s[0], s[1], t, &mut ka);
        let ob = operand(b, n, p, s[2], s[3], t, &mut kb);
        // numpy has checked the shapes and the views are valid, so neither the
        // operands nor the GEMM can fail; should one ever, the block is NaN, not stale.
        let (Ok(oa), Ok(ob)) = (oa, ob) else {
            return fill_nan(o, m, p, s[4], s[5], t);
        };
        // Blocks of rb rows and cb columns of C.
        let cb = p.min(BLOCK_ELEMS);
        let rb = m.min((BLOCK_ELEMS / cb.max(1)).max(1));
        // One block: accumulate into a contiguous buffer, then round once into codes.
        let block = |(acc32, acc64, codes): &mut (Vec<f32>, Vec<f64>, Vec<u32>), i0: usize, j0: usize| {
            let (r, w) = (rb.min(m - i0), cb.min(p - j0));
            let (sa, sb) = (oa.block(i0, 0, r, n), ob.block(0, j0, n, w));
            codes.resize(r * w, 0);
            let ok = if wide {
                acc64.resize(r * w, 0.0);
                let c = OutMat::from_raw(acc64.as_mut_ptr(), r, w, w as isize, 1);
                gemm::matmul_f64(&sa, &sb, c).is_ok() && convert::encode(&info.fmt, &acc64[..r * w], &mut codes[..r * w], &opts, 0).is_ok()
            } else {
                acc32.resize(r * w, 0.0);
                let c = OutMat::from_raw(acc32.as_mut_ptr(), r, w, w as isize, 1);
                gemm::matmul_f32(&sa, &sb, c).is_ok() && convert::encode(&info.fmt, &acc32[..r * w], &mut codes[..r * w], &opts, 0).is_ok()
            };
            if ok {
                for i in 0..r {
                    for j in 0..w {
                        let dst = o.offset((i0 + i) as isize * s[4] + (j0 + j) as isize * s[5]);
                        store(dst, info.size, codes[i * w + j]);
                    }
                }
            }
            ok
        };
        let work = |bufs: &mut (Vec<f32>, Vec<f64>, Vec<u32>)| {
            let mut ok = true;
            for i0 in (0..m).step_by(rb.max(1)) {
                for j0 in (0..p).step_by(cb.max(1)) {
                    ok &= block(bufs, i0, j0);
                }
            }
            ok
        };
        // (Fresh buffers should a product ever run inside another on this thread.)
        let ok = SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut bufs) => work(&mut bufs),
            Err(_) => work(&mut Default::default()),
        });
        if !ok {
            fill_nan(o, m, p, s[4], s[5], t);
        }
    }
}

/// The dot product of `n` codes of type `t` at `a` (byte stride `sa`) and `b`
/// (`sb`): the products summed in float64, as `np.dot` of two vectors does,
/// rounded once to nearest even into the type.
///
/// # Safety
/// Both ranges must be readable.
unsafe fn dot(t: usize, a: *const u8, sa: isize, b: *const u8, sb: isize, n: usize) -> u32 {
    // SAFETY: readable by the contract.
    super::kernels::enc_reporting(t, unsafe { super::kernels::dot_f64(t, a, sa, b, sb, n) })
}

/// `np.vecdot`, `(n),(n)->()`: one dot product per outer element.
///
/// # Safety
/// numpy's gufunc loop contract: `dims` = [count, n], `steps` = [3 outer strides,
/// x's n, y's n]; `data` is the type index.
unsafe extern "C" fn loop_vecdot(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    // SAFETY: see the function contract.
    unsafe {
        let t = data as usize;
        let (count, n) = (*dims as usize, *dims.add(1) as usize);
        let s = |i: usize| *steps.add(i);
        let (a, b, o) = (*args as *const u8, *args.add(1) as *const u8, *args.add(2) as *mut u8);
        for k in 0..count as isize {
            let c = dot(t, a.offset(k * s(0)), s(3), b.offset(k * s(1)), s(4), n);
            store(o.offset(k * s(2)), TYPES[t].size, c);
        }
    }
}

/// `np.matvec`, `(m,n),(n)->(m)`, and `np.vecmat`, `(n),(n,m)->(m)`
/// (`data` = type index * 2 + 1 for vecmat): one dot product per output element.
///
/// # Safety
/// numpy's gufunc loop contract: matvec's `dims` = [count, m, n] and `steps` =
/// [3 outer, A's m, A's n, x's n, out's m]; vecmat's `dims` = [count, n, m] and
/// `steps` = [3 outer, x's n, A's n, A's m, out's m].
unsafe extern "C" fn loop_matvec(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    // SAFETY: see the function contract.
    unsafe {
        let (t, vecmat) = (data as usize / 2, data as usize % 2 == 1);
        let count = *dims as usize;
        let s = |i: usize| *steps.add(i);
        let (a0, b0, o0) = (*args as *const u8, *args.add(1) as *const u8, *args.add(2) as *mut u8);
        // Per output element j: the matrix's j-th row (matvec) or column (vecmat).
        let (m, n, mat_j, mat_n, vec_n, out_j) = if vecmat {
            (*dims.add(2) as usize, *dims.add(1) as usize, s(5), s(4), s(3), s(6))
        } else {
            (*dims.add(1) as usize, *dims.add(2) as usize, s(3), s(4), s(5), s(6))
        };
        let (mat0, vec0) = if vecmat { (b0, a0) } else { (a0, b0) };
        let (mat_k, vec_k) = if vecmat { (s(1), s(0)) } else { (s(0), s(1)) };
        for k in 0..count as isize {
            let (mat, v, o) = (mat0.offset(k * mat_k), vec0.offset(k * vec_k), o0.offset(k * s(2)));
            for j in 0..m as isize {
                let c = dot(t, mat.offset(j * mat_j), mat_n, v, vec_n, n);
                store(o.offset(j * out_j), TYPES[t].size, c);
            }
        }
    }
}

pub fn register_all(py: Python<'_>) -> PyResult<()> {
    let mm = py.import("numpy")?.getattr("matmul")?;
    for (t, ty) in TYPES.iter().enumerate().take(N) {
        let tn = type_num(t);
        let mut types: [c_int; 3] = [tn, tn, tn];
        // SAFETY: `mm` is numpy's matmul gufunc; `types` has nin + nout entries
        // (numpy copies it); the data pointer is a plain index, never dereferenced.
        let rc = unsafe {
            PY_UFUNC_API.PyUFunc_RegisterLoopForType(
                py,
                mm.as_ptr() as *mut PyUFuncObject,
                tn,
                Some(loop_matmul),
                types.as_mut_ptr(),
                t as *mut c_void,
            )
        };
        if rc < 0 {
            return Err(PyErr::take(py).unwrap_or_else(|| {
                pyo3::exceptions::PyRuntimeError::new_err(format!("registering matmul for {}", ty.name))
            }));
        }
    }
    // The vector products of numpy >= 2.2 (vecdot since 2.0), where present.
    let np = py.import("numpy")?;
    for (name, f, vecmat) in [("vecdot", loop_vecdot as LoopFn, false), ("matvec", loop_matvec, false), ("vecmat", loop_matvec, true)] {
        let Ok(uf) = np.getattr(name) else { continue };
        for (t, ty) in TYPES.iter().enumerate().take(N) {
            let tn = type_num(t);
            let mut types: [c_int; 3] = [tn, tn, tn];
            let data = if name == "vecdot" { t } else { t * 2 + vecmat as usize };
            // SAFETY: as for matmul: a gufunc of two inputs and one output, a plain index as data.
            let rc = unsafe { PY_UFUNC_API.PyUFunc_RegisterLoopForType(py, uf.as_ptr() as *mut PyUFuncObject, tn, Some(f), types.as_mut_ptr(), data as *mut c_void) };
            if rc < 0 {
                return Err(PyErr::take(py).unwrap_or_else(|| pyo3::exceptions::PyRuntimeError::new_err(format!("registering {name} for {}", ty.name))));
            }
        }
    }
    Ok(())
}

type LoopFn = unsafe extern "C" fn(*mut *mut c_char, *mut npy_intp, *mut npy_intp, *mut c_void);
