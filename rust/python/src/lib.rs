//! `lowp._lowp`: thin bindings over `lowp-core`. Each function borrows the
//! arrays, releases the GIL, calls the core, and maps errors to Python.
//! Array allocation, dtype coercion and argument defaults live in the Python
//! package; these functions check what they are given all the same.

use pyo3::prelude::*;

mod convert;
mod dtypes;
mod errors;
mod gemm;
mod pool;
mod spec;
mod sparse;

#[pymodule]
fn _lowp(m: &Bound<'_, PyModule>) -> PyResult<()> {
    convert::register(m)?;
    gemm::register(m)?;
    sparse::register(m)?;
    dtypes::register(m)?;
    pool::register(m)?;
    Ok(())
}
