//! Core errors to Python exceptions.

use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::PyErr;

/// `f` without the GIL, in the floating-point environment the kernels need
/// ([`lowp_core::fpenv::clean`]: whatever the caller's thread set).
pub fn detach<T: Send>(py: pyo3::Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    py.detach(|| lowp_core::fpenv::clean(f))
}

pub fn to_py(e: lowp_core::Error) -> PyErr {
    match e {
        lowp_core::Error::Value(m) => PyValueError::new_err(m),
        lowp_core::Error::Type(m) => PyTypeError::new_err(m),
        lowp_core::Error::Memory(m) => PyMemoryError::new_err(m),
    }
}

pub trait IntoPy<T> {
    fn py_err(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPy<T> for lowp_core::Result<T> {
    fn py_err(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
