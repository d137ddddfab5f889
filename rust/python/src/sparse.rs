//! Sparse products and index checks (`lowp.sparse` builds on these).

use lowp_core::sparse::{self, Dense, Index, Values};
use numpy::{PyArrayDescrMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

use crate::errors::{detach, IntoPy};

pub enum InVals<'py> {
    F32(PyReadonlyArrayDyn<'py, f32>),
    U8(PyReadonlyArrayDyn<'py, u8>),
    U16(PyReadonlyArrayDyn<'py, u16>),
}

pub enum InIdx<'py> {
    I32(PyReadonlyArrayDyn<'py, i32>),
    I64(PyReadonlyArrayDyn<'py, i64>),
}

/// Borrow `x` as the variant its dtype names: one extraction, no trial and error (a failed
/// extraction formats the dtype's name, which costs more than a small product).
macro_rules! by_dtype {
    ($x:expr, $arg:expr, $accepted:expr, $($t:ty => $v:path),*) => {{
        let x = $x;
        let arr = x.cast::<PyUntypedArray>().map_err(|_| PyTypeError::new_err(format!("{}: expected a numpy array", $arg)))?;
        let dt = arr.dtype();
        let py = x.py();
        $(if dt.is_equiv_to(&numpy::dtype::<$t>(py)) {
            return Ok($v(x.extract()?));
        })*
        Err(PyTypeError::new_err(format!("{}: must be {}", $arg, $accepted)))
    }};
}

fn in_vals<'py>(x: &Bound<'py, PyAny>) -> PyResult<InVals<'py>> {
    by_dtype!(x, "data", "float32, uint8 or uint16 codes", f32 => InVals::F32, u8 => InVals::U8, u16 => InVals::U16)
}

fn in_idx<'py>(x: &Bound<'py, PyAny>, arg: &str) -> PyResult<InIdx<'py>> {
    by_dtype!(x, arg, "int32 or int64", i32 => InIdx::I32, i64 => InIdx::I64)
}

fn slice<'a, T: numpy::Element>(a: &'a PyReadonlyArrayDyn<'_, T>, arg: &str) -> PyResult<&'a [T]> {
    a.as_slice().map_err(|_| PyValueError::new_err(format!("{arg}: must be C-contiguous and aligned")))
}

fn index<'a>(a: &'a InIdx<'_>, arg: &str) -> PyResult<Index<'a>> {
    Ok(match a {
        InIdx::I32(x) => Index::I32(slice(x, arg)?),
        InIdx::I64(x) => Index::I64(slice(x, arg)?),
    })
}

/// Values from the stored array: f32; u16 with `bf16`; u8/u16 codes with a decode table.
fn values<'a>(v: &'a InVals<'_>, table: &'a Option<PyReadonlyArrayDyn<'_, f32>>, bf16: bool) -> PyResult<Values<'a>> {
    let t = match table {
        Some(t) => Some(slice(t, "table")?),
        None => None,
    };
    Ok(match (v, t) {
        (InVals::F32(x), None) => Values::F32(slice(x, "data")?),
        (InVals::U16(x), None) if bf16 => Values::Bf16(slice(x, "data")?),
        (InVals::U8(x), Some(t)) => Values::Tab8(slice(x, "data")?, t),
        (InVals::U16(x), Some(t)) => Values::Tab16(slice(x, "data")?, t),
        _ => return Err(PyValueError::new_err("data: codes need a decode table (or bf16), float32 values none")),
    })
}

struct Io<'a> {
    b: Dense<'a>,
    out: &'a mut [f32],
}

fn io<'a>(x: &'a PyReadonlyArrayDyn<'_, f32>, out: &'a mut PyReadwriteArrayDyn<'_, f32>) -> PyResult<Io<'a>> {
    let sh = x.shape().to_vec();
    if sh.len() != 2 {
        return Err(PyValueError::new_err("x: must be 2-D (rows, columns)"));
    }
    let data = slice(x, "x")?;
    let out = out.as_slice_mut().map_err(|_| PyValueError::new_err("out: must be C-contiguous and aligned"))?;
    Ok(Io { b: Dense { data, rows: sh[0], cols: sh[1] }, out })
}

#[pyfunction]
#[pyo3(signature = (data, table, bf16, indptr, indices, shape, x, out, transpose))]
#[allow(clippy::too_many_arguments)]
fn csr_matmul(py: Python<'_>, data: &Bound<'_, PyAny>, table: Option<PyReadonlyArrayDyn<'_, f32>>, bf16: bool, indptr: &Bound<'_, PyAny>, indices: &Bound<'_, PyAny>, shape: (usize, usize), x: PyReadonlyArrayDyn<'_, f32>, mut out: PyReadwriteArrayDyn<'_, f32>, transpose: bool) -> PyResult<()> {
    let data = in_vals(data)?;
    let v = values(&data, &table, bf16)?;
    let (indptr, indices) = (in_idx(indptr, "indptr")?, in_idx(indices, "indices")?);
    let (p, i) = (index(&indptr, "indptr")?, index(&indices, "indices")?);
    let io = io(&x, &mut out)?;
    detach(py, || sparse::csr_matmul(v, p, i, shape, io.b, io.out, transpose)).py_err()
}

#[pyfunction]
#[pyo3(signature = (data, table, bf16, row, col, shape, x, out, transpose))]
#[allow(clippy::too_many_arguments)]
fn coo_matmul(py: Python<'_>, data: &Bound<'_, PyAny>, table: Option<PyReadonlyArrayDyn<'_, f32>>, bf16: bool, row: &Bound<'_, PyAny>, col: &Bound<'_, PyAny>, shape: (usize, usize), x: PyReadonlyArrayDyn<'_, f32>, mut out: PyReadwriteArrayDyn<'_, f32>, transpose: bool) -> PyResult<()> {
    let data = in_vals(data)?;
    let v = values(&data, &table, bf16)?;
    let (row, col) = (in_idx(row, "row")?, in_idx(col, "col")?);
    let (r, c) = (index(&row, "row")?, index(&col, "col")?);
    let io = io(&x, &mut out)?;
    detach(py, || sparse::coo_matmul(v, r, c, shape, io.b, io.out, transpose)).py_err()
}

#[pyfunction]
#[pyo3(signature = (data, table, bf16, indptr, indices, shape, blocksize, x, out, transpose))]
#[allow(clippy::too_many_arguments)]
fn bsr_matmul(py: Python<'_>, data: &Bound<'_, PyAny>, table: Option<PyReadonlyArrayDyn<'_, f32>>, bf16: bool, indptr: &Bound<'_, PyAny>, indices: &Bound<'_, PyAny>, shape: (usize, usize), blocksize: (usize, usize), x: PyReadonlyArrayDyn<'_, f32>, mut out: PyReadwriteArrayDyn<'_, f32>, transpose: bool) -> PyResult<()> {
    let data = in_vals(data)?;
    let v = values(&data, &table, bf16)?;
    let (indptr, indices) = (in_idx(indptr, "indptr")?, in_idx(indices, "indices")?);
    let (p, i) = (index(&indptr, "indptr")?, index(&indices, "indices")?);
    let io = io(&x, &mut out)?;
    detach(py, || sparse::bsr_matmul(v, p, i, shape, blocksize, io.b, io.out, transpose)).py_err()
}

#[pyfunction]
#[pyo3(signature = (data, table, bf16, indices, n, m, shape, x, out, transpose))]
#[allow(clippy::too_many_arguments)]
fn nm_matmul(py: Python<'_>, data: &Bound<'_, PyAny>, table: Option<PyReadonlyArrayDyn<'_, f32>>, bf16: bool, indices: PyReadonlyArrayDyn<'_, u8>, n: usize, m: usize, shape: (usize, usize), x: PyReadonlyArrayDyn<'_, f32>, mut out: PyReadwriteArrayDyn<'_, f32>, transpose: bool) -> PyResult<()> {
    let data = in_vals(data)?;
    let v = values(&data, &table, bf16)?;
    let ix = slice(&indices, "indices")?;
    let io = io(&x, &mut out)?;
    detach(py, || sparse::nm_matmul(v, ix, n, m, shape, io.b, io.out, transpose)).py_err()
}

/// Validate a compressed structure (`indptr` of `nmajor + 1` entries, `indices`
/// in `0..nminor`). Returns whether it is canonical (sorted, no duplicates).
#[pyfunction]
#[pyo3(signature = (indptr, indices, nmajor, nminor, indptr_name="indptr", indices_name="indices"))]
fn check_compressed(indptr: &Bound<'_, PyAny>, indices: &Bound<'_, PyAny>, nmajor: usize, nminor: usize, indptr_name: &str, indices_name: &str) -> PyResult<bool> {
    let (indptr, indices) = (in_idx(indptr, indptr_name)?, in_idx(indices, indices_name)?);
    let (p, i) = (index(&indptr, indptr_name)?, index(&indices, indices_name)?);
    sparse::check_indptr(p, nmajor, i.len(), indptr_name).py_err()?;
    sparse::check_range(i, nminor, indices_name).py_err()?;
    Ok(sparse::is_canonical(p, i))
}

/// Check that every entry of `idx` lies in `0..bound` (error names `name`).
#[pyfunction]
fn check_range(idx: &Bound<'_, PyAny>, bound: usize, name: &str) -> PyResult<()> {
    let idx = in_idx(idx, name)?;
    sparse::check_range(index(&idx, name)?, bound, name).py_err()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(csr_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(coo_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(bsr_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(nm_matmul, m)?)?;
    m.add_function(wrap_pyfunction!(check_compressed, m)?)?;
    m.add_function(wrap_pyfunction!(check_range, m)?)?;
    Ok(())
}
