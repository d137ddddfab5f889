//! matmul (f32 / f64 / int8 paths), emulated accumulation, sums, padded_ld.
//!
//! Arrays arrive 2-D (or 3-D: a batch of products of one shape) with any
//! strides (negative and zero too); low-precision inputs arrive as views of
//! their codes (uint8/16/32) plus the format spec. The Python package decides
//! the path, allocates `out` and checks overlaps.

use lowp_core::gemm::{self, AccumSpec, Operand, OutMat, Storage};
use lowp_core::round::{Mode, RoundOpts, SeedKey};
use numpy::ndarray::{Dimension, Ix2, Ix3};
use numpy::{PyArrayDescrMethods, PyReadonlyArray, PyReadonlyArray2, PyReadwriteArray, PyReadwriteArray2, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::{detach, IntoPy};
use crate::spec::Spec;

/// A borrowed input array of dimension `D` (a matrix, or a batch of them).
pub enum InMat<'py, D: Dimension = Ix2> {
    F32(PyReadonlyArray<'py, f32, D>),
    F64(PyReadonlyArray<'py, f64, D>),
    I8(PyReadonlyArray<'py, i8, D>),
    U8(PyReadonlyArray<'py, u8, D>),
    U16(PyReadonlyArray<'py, u16, D>),
    U32(PyReadonlyArray<'py, u32, D>),
}

/// A borrowed output array of dimension `D`.
pub enum OutArr<'py, D: Dimension = Ix2> {
    F32(PyReadwriteArray<'py, f32, D>),
    F64(PyReadwriteArray<'py, f64, D>),
    I32(PyReadwriteArray<'py, i32, D>),
}

/// Borrow `x` as the variant its dtype names (one extraction, no trial and error).
fn in_mat<'py, D: Dimension>(x: &Bound<'py, PyAny>, arg: &str) -> PyResult<InMat<'py, D>> {
    let arr = x.cast::<PyUntypedArray>().map_err(|_| PyTypeError::new_err(format!("{arg}: expected a numpy array")))?;
    let nd = D::NDIM.unwrap_or(2);
    if arr.ndim() != nd {
        return Err(PyValueError::new_err(format!("{arg}: expected a {nd}-D array, got {} dimensions", arr.ndim())));
    }
    let dt = arr.dtype();
    let py = x.py();
    macro_rules! pick {
        ($($t:ty => $v:ident),*) => {
            $(if dt.is_equiv_to(&numpy::dtype::<$t>(py)) {
                return Ok(InMat::$v(x.extract()?));
            })*
        };
    }
    pick!(f32 => F32, f64 => F64, i8 => I8, u8 => U8, u16 => U16, u32 => U32);
    Err(PyTypeError::new_err(format!("{arg}: unsupported array dtype for the kernels")))
}

fn out_arr<'py, D: Dimension>(x: &Bound<'py, PyAny>) -> PyResult<OutArr<'py, D>> {
    let arr = x.cast::<PyUntypedArray>().map_err(|_| PyTypeError::new_err("out: expected a numpy array"))?;
    let nd = D::NDIM.unwrap_or(2);
    if arr.ndim() != nd {
        return Err(PyValueError::new_err(format!("out: expected a {nd}-D array, got {} dimensions", arr.ndim())));
    }
    let dt = arr.dtype();
    let py = x.py();
    macro_rules! pick {
        ($($t:ty => $v:ident),*) => {
            $(if dt.is_equiv_to(&numpy::dtype::<$t>(py)) {
                return Ok(OutArr::$v(x.extract()?));
            })*
        };
    }
    pick!(f32 => F32, f64 => F64, i32 => I32);
    Err(PyTypeError::new_err("out: must be float32, float64 or int32"))
}

/// A view of a borrowed input matrix, or of the first matrix of a batch (not empty).
fn operand<D: Dimension>(x: &InMat<'_, D>, fmt: Option<&Spec>, arg: &str) -> PyResult<Operand> {
    let f = fmt.map(|s| s.0);
    macro_rules! view {
        ($a:expr, $st:expr) => {{
            let v = $a.as_array();
            let (sh, s) = (v.shape(), v.strides());
            let d = sh.len();
            assert!(d == 2 || sh[0] > 0, "{arg}: an empty batch has no matrix");
            // SAFETY: the view covers exactly the elements of the (first matrix of
            // the) borrowed array, which stays borrowed (alive, unmodified) for this call.
            unsafe { Operand::from_raw(v.as_ptr() as *const u8, $st, f, sh[d - 2], sh[d - 1], s[d - 2], s[d - 1], arg) }.py_err()
        }};
    }
    match x {
        InMat::F32(a) => view!(a, Storage::F32),
        InMat::F64(a) => view!(a, Storage::F64),
        InMat::I8(a) => view!(a, Storage::I8),
        InMat::U8(a) => view!(a, Storage::U8),
        InMat::U16(a) => view!(a, Storage::U16),
        InMat::U32(a) => view!(a, Storage::U32),
    }
}

/// The output matrix, or the first matrix of a batch (not empty).
fn out_mat<T: numpy::Element, D: Dimension>(o: &mut PyReadwriteArray<'_, T, D>) -> OutMat<T> {
    let mut v = o.as_array_mut();
    let (sh, s) = (v.shape().to_vec(), v.strides().to_vec());
    let d = sh.len();
    assert!(d == 2 || sh[0] > 0, "out: an empty batch has no matrix");
    // SAFETY: the array is mutably borrowed for this call; the Python layer
    // passes arrays whose elements do not overlap (no zero strides).
    unsafe { OutMat::from_raw(v.as_mut_ptr(), sh[d - 2], sh[d - 1], s[d - 2], s[d - 1]) }
}

/// `out = a @ b`: float32 out -> f32 accumulation, float64 -> f64, int32 -> exact int8.
/// With 3-D arrays, a batch: `out[i] = a[i] @ b[i]` ([`matmul_batch`]).
#[pyfunction]
#[pyo3(signature = (a, a_fmt, b, b_fmt, out))]
fn matmul_into<'py>(py: Python<'py>, a: Bound<'py, PyAny>, a_fmt: Option<Spec>, b: Bound<'py, PyAny>, b_fmt: Option<Spec>, out: Bound<'py, PyAny>) -> PyResult<()> {
    if is_batch(&out) {
        return matmul_batch(py, &a, a_fmt.as_ref(), &b, b_fmt.as_ref(), &out);
    }
    let (a, b, mut out) = (in_mat::<Ix2>(&a, "a")?, in_mat::<Ix2>(&b, "b")?, out_arr::<Ix2>(&out)?);
    let oa = operand(&a, a_fmt.as_ref(), "a")?;
    let ob = operand(&b, b_fmt.as_ref(), "b")?;
    match &mut out {
        OutArr::F32(o) => {
            let c = out_mat(o);
            detach(py, || gemm::matmul_f32(&oa, &ob, c)).py_err()
        }
        OutArr::F64(o) => {
            let c = out_mat(o);
            detach(py, || gemm::matmul_f64(&oa, &ob, c)).py_err()
        }
        OutArr::I32(o) => {
            let c = out_mat(o);
            detach(py, || gemm::matmul_i8(&oa, &ob, c)).py_err()
        }
    }
}

/// Length and element stride of the first axis of each of a batch's arrays
/// (`a`, `b`, `out`, already borrowed as 3-D arrays; zero strides broadcast),
/// the lengths equal.
fn batch_axis(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>, out: &Bound<'_, PyAny>) -> PyResult<(usize, [isize; 3])> {
    let axis = [a, b, out].map(|x| {
        let arr = x.cast::<PyUntypedArray>().expect("borrowed as an array");
        (arr.shape()[0], arr.strides()[0] / arr.dtype().itemsize() as isize)
    });
    let count = axis[2].0;
    for ((n, _), arg) in axis[..2].iter().zip(["a", "b"]) {
        if *n != count {
            return Err(PyValueError::new_err(format!("{arg}: a batch of {n} matrices, but out has {count}")));
        }
    }
    Ok((count, axis.map(|(_, s)| s)))
}

/// Is `out` a batch of matrices (3-D)?
fn is_batch(out: &Bound<'_, PyAny>) -> bool {
    out.cast::<PyUntypedArray>().is_ok_and(|x| x.ndim() == 3)
}

/// `one(a[i], b[i], out[i])` for every matrix i of a batch (3-D arrays), small
/// products one per thread at a time ([`gemm::for_batch`]).
#[allow(clippy::too_many_arguments)]
fn run_batch<'py, T: numpy::Element>(
    py: Python<'py>,
    a: &InMat<'py, Ix3>,
    a_fmt: Option<&Spec>,
    b: &InMat<'py, Ix3>,
    b_fmt: Option<&Spec>,
    o: &mut PyReadwriteArray<'py, T, Ix3>,
    (count, [sa, sb, so]): (usize, [isize; 3]),
    one: impl Fn(usize, &Operand, &Operand, OutMat<T>) -> lowp_core::Result<()> + Sync,
) -> PyResult<()> {
    if count == 0 {
        return Ok(());
    }
    let (a0, b0, c0) = (operand(a, a_fmt, "a")?, operand(b, b_fmt, "b")?, out_mat(o));
    let madds = a0.rows * a0.cols * b0.cols;
    detach(py, || {
        gemm::for_batch(count, madds, &|j| {
            let i = j as isize;
            // SAFETY: matrix i of each array starts i strides of its first axis on
            // (i < count, the arrays' common batch length): a view inside the array.
            let (x, y) = unsafe { (a0.shifted(i * sa), b0.shifted(i * sb)) };
            one(j, &x, &y, OutMat { ptr: c0.at(0, 0).wrapping_offset(i * so), ..c0 })
        })
    })
    .py_err()
}

/// [`matmul_into`] for a batch (3-D arrays): `out[i] = a[i] @ b[i]` for each i.
fn matmul_batch<'py>(py: Python<'py>, a: &Bound<'py, PyAny>, a_fmt: Option<&Spec>, b: &Bound<'py, PyAny>, b_fmt: Option<&Spec>, out: &Bound<'py, PyAny>) -> PyResult<()> {
    let (am, bm, mut om) = (in_mat::<Ix3>(a, "a")?, in_mat::<Ix3>(b, "b")?, out_arr::<Ix3>(out)?);
    let axis = batch_axis(a, b, out)?;
    match &mut om {
        OutArr::F32(o) => run_batch(py, &am, a_fmt, &bm, b_fmt, o, axis, |_, x, y, c| gemm::matmul_f32(x, y, c)),
        OutArr::F64(o) => run_batch(py, &am, a_fmt, &bm, b_fmt, o, axis, |_, x, y, c| gemm::matmul_f64(x, y, c)),
        OutArr::I32(o) => run_batch(py, &am, a_fmt, &bm, b_fmt, o, axis, |_, x, y, c| gemm::matmul_i8(x, y, c)),
    }
}

fn accum_spec(acc: Spec, chunk: Option<usize>, chunk_acc: Option<Spec>, rounding: &str, seed: u64, rbits: u32) -> PyResult<AccumSpec> {
    let mode: Mode = rounding.parse().py_err()?;
    if !(1..=64).contains(&rbits) {
        return Err(PyValueError::new_err(format!("rbits: must be in 1..64, got {rbits}")));
    }
    let opts = RoundOpts { mode, saturate: false, rbits, key: SeedKey::from_seed(seed) };
    let chunk = match chunk {
        Some(0) => return Err(PyValueError::new_err("chunk: must be a positive integer, got 0")),
        Some(c) => Some((c, chunk_acc.map(|s| s.0).unwrap_or(acc.0))),
        None => None,
    };
    Ok(AccumSpec { fmt: acc.0, chunk, opts })
}

/// The output of an emulated product: float64, or float32 (accumulator formats inside float32).
fn emu_out(out: &mut OutArr<'_>) -> PyResult<gemm::EmuOut> {
    match out {
        OutArr::F64(o) => Ok(out_mat(o).into()),
        OutArr::F32(o) => Ok(out_mat(o).into()),
        OutArr::I32(_) => Err(PyTypeError::new_err("out: emulated accumulation writes float64 or float32, got int32")),
    }
}

/// The seed of matrix `j` of a stack: the seed itself for the first, then the
/// seed xor an avalanche of `j` (every matrix draws its own stochastic bits).
fn stack_seed(seed: u64, j: u64) -> u64 {
    if j == 0 {
        return seed;
    }
    let mut z = j.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x5851_F42D_4C95_7F2D;
    z = (z ^ (z >> 32)).wrapping_mul(0xDABA_0B6E_B09B_D5E5);
    z = (z ^ (z >> 29)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    seed ^ z ^ (z >> 32)
}

/// `out = a @ b` (float64 or float32 out) with every add rounded into `acc`; with
/// 3-D arrays, a batch ([`matmul_emulated_batch`]) whose matrix i is matrix
/// `stack0 + i` of the whole stack (its stochastic bits: [`stack_seed`]).
#[pyfunction]
#[pyo3(signature = (a, a_fmt, b, b_fmt, out, acc, chunk, chunk_acc, rounding, seed, rbits, stack0=0))]
#[allow(clippy::too_many_arguments)]
fn matmul_emulated_into<'py>(
    py: Python<'py>,
    a: Bound<'py, PyAny>,
    a_fmt: Option<Spec>,
    b: Bound<'py, PyAny>,
    b_fmt: Option<Spec>,
    out: Bound<'py, PyAny>,
    acc: Spec,
    chunk: Option<usize>,
    chunk_acc: Option<Spec>,
    rounding: &str,
    seed: u64,
    rbits: u32,
    stack0: u64,
) -> PyResult<()> {
    let spec = accum_spec(acc, chunk, chunk_acc, rounding, seed, rbits)?;
    if is_batch(&out) {
        return matmul_emulated_batch(py, &a, a_fmt.as_ref(), &b, b_fmt.as_ref(), &out, &spec, seed, stack0);
    }
    let (a, b, mut out) = (in_mat::<Ix2>(&a, "a")?, in_mat::<Ix2>(&b, "b")?, out_arr::<Ix2>(&out)?);
    let oa = operand(&a, a_fmt.as_ref(), "a")?;
    let ob = operand(&b, b_fmt.as_ref(), "b")?;
    let c = emu_out(&mut out)?;
    detach(py, || gemm::matmul_emulated(&oa, &ob, c, &spec)).py_err()
}

/// [`matmul_emulated_into`] for a batch (3-D arrays): every product with the same
/// spec, matrix i with the seed of matrix `stack0 + i` of the stack.
#[allow(clippy::too_many_arguments)]
fn matmul_emulated_batch<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    a_fmt: Option<&Spec>,
    b: &Bound<'py, PyAny>,
    b_fmt: Option<&Spec>,
    out: &Bound<'py, PyAny>,
    spec: &AccumSpec,
    seed: u64,
    stack0: u64,
) -> PyResult<()> {
    let (am, bm, mut om) = (in_mat::<Ix3>(a, "a")?, in_mat::<Ix3>(b, "b")?, out_arr::<Ix3>(out)?);
    let axis = batch_axis(a, b, out)?;
    let spec_of = |i: usize| {
        let mut s = *spec;
        s.opts.key = SeedKey::from_seed(stack_seed(seed, stack0.wrapping_add(i as u64)));
        s
    };
    match &mut om {
        OutArr::F64(o) => run_batch(py, &am, a_fmt, &bm, b_fmt, o, axis, |i, x, y, c: OutMat<f64>| gemm::matmul_emulated(x, y, gemm::EmuOut::from(c), &spec_of(i))),
        OutArr::F32(o) => run_batch(py, &am, a_fmt, &bm, b_fmt, o, axis, |i, x, y, c: OutMat<f32>| gemm::matmul_emulated(x, y, gemm::EmuOut::from(c), &spec_of(i))),
        OutArr::I32(_) => Err(PyTypeError::new_err("out: emulated accumulation writes float64 or float32, got int32")),
    }
}

/// Column sums of `x` (k x m) into `out` (1 x m, float64 or float32), every add rounded into `acc`.
#[pyfunction]
#[pyo3(signature = (x, x_fmt, out, acc, chunk, chunk_acc, rounding, seed, rbits))]
#[allow(clippy::too_many_arguments)]
fn sum_into<'py>(
    py: Python<'py>,
    x: Bound<'py, PyAny>,
    x_fmt: Option<Spec>,
    out: Bound<'py, PyAny>,
    acc: Spec,
    chunk: Option<usize>,
    chunk_acc: Option<Spec>,
    rounding: &str,
    seed: u64,
    rbits: u32,
) -> PyResult<()> {
    let spec = accum_spec(acc, chunk, chunk_acc, rounding, seed, rbits)?;
    let (x, mut out) = (in_mat::<Ix2>(&x, "x")?, out_arr::<Ix2>(&out)?);
    let ox = operand(&x, x_fmt.as_ref(), "x")?;
    let c = emu_out(&mut out)?;
    detach(py, || gemm::sum_emulated(&ox, c, &spec)).py_err()
}

/// Cache-friendly leading dimension (elements) for rows of `n` elements.
#[pyfunction]
fn padded_ld(n: usize, itemsize: usize) -> PyResult<usize> {
    gemm::padded_ld(n, itemsize).py_err()
}

/// The unpacked reference kernel of the leading-dimension experiment (C-ordered
/// rows with padding allowed: strides are taken from the arrays).
#[pyfunction]
fn matmul_unpacked_f32(py: Python<'_>, a: PyReadonlyArray2<'_, f32>, b: PyReadonlyArray2<'_, f32>, mut out: PyReadwriteArray2<'_, f32>) -> PyResult<()> {
    let (av, bv) = (a.as_array(), b.as_array());
    let mut cv = out.as_array_mut();
    let (m, k) = av.dim();
    let n = bv.dim().1;
    if bv.dim().0 != k || cv.dim() != (m, n) {
        return Err(PyValueError::new_err("b, out: shapes do not match"));
    }
    let ok = |s: &[isize]| s[1] == 1 && s[0] >= 0;
    if !ok(av.strides()) || !ok(bv.strides()) || !ok(cv.strides()) {
        return Err(PyValueError::new_err("a, b, out: rows must be contiguous"));
    }
    let (lda, ldb, ldc) = (av.strides()[0] as usize, bv.strides()[0] as usize, cv.strides()[0] as usize);
    let span = |r: usize, c: usize, ld: usize| if r == 0 || c == 0 { 0 } else { (r - 1) * ld + c };
    // SAFETY: the borrowed arrays cover these spans (rows contiguous, non-negative strides).
    let (sa, sb, sc) = unsafe {
        (
            std::slice::from_raw_parts(av.as_ptr(), span(m, k, lda)),
            std::slice::from_raw_parts(bv.as_ptr(), span(k, n, ldb)),
            std::slice::from_raw_parts_mut(cv.as_mut_ptr(), span(m, n, ldc)),
        )
    };
    detach(py, || gemm::matmul_unpacked_f32(sa, lda, sb, ldb, sc, ldc, m, n, k)).py_err()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(matmul_into, m)?)?;
    m.add_function(wrap_pyfunction!(matmul_emulated_into, m)?)?;
    m.add_function(wrap_pyfunction!(sum_into, m)?)?;
    m.add_function(wrap_pyfunction!(padded_ld, m)?)?;
    m.add_function(wrap_pyfunction!(matmul_unpacked_f32, m)?)?;
    Ok(())
}
