//! Format specs as the Python package passes them:
//! `("float", exp_bits, man_bits, bias|None, inf, nan|None, subnormals)`,
//! `("posit", nbits, es)`, `("int", bits, signed)`.

use lowp_core::{FloatFormat, Format, IntFormat, NanPolicy, PositFormat};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::IntoPy;

pub struct Spec(pub Format);

impl<'a, 'py> FromPyObject<'a, 'py> for Spec {
    type Error = PyErr;
    fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let t = ob.cast::<PyTuple>().map_err(|_| PyValueError::new_err("fmt: expected a format spec tuple"))?;
        let kind: String = t.get_item(0)?.extract()?;
        let f = match kind.as_str() {
            "float" => {
                let nan: Option<String> = t.get_item(5)?.extract()?;
                let nan = match nan.as_deref() {
                    Some("ieee") => NanPolicy::Ieee,
                    Some("fn") => NanPolicy::Fn,
                    Some("fnuz") => NanPolicy::Fnuz,
                    None => NanPolicy::None,
                    Some(o) => {
                        return Err(PyValueError::new_err(format!(
                            "nan: unknown policy {o:?}; accepted: \"ieee\", \"fn\", \"fnuz\", None"
                        )))
                    }
                };
                Format::Float(
                    FloatFormat::new(
                        t.get_item(1)?.extract()?,
                        t.get_item(2)?.extract()?,
                        t.get_item(3)?.extract()?,
                        t.get_item(4)?.extract()?,
                        nan,
                        t.get_item(6)?.extract()?,
                    )
                    .py_err()?,
                )
            }
            "posit" => Format::Posit(PositFormat::new(t.get_item(1)?.extract()?, t.get_item(2)?.extract()?).py_err()?),
            "int" => Format::Int(IntFormat::new(t.get_item(1)?.extract()?, t.get_item(2)?.extract()?).py_err()?),
            o => return Err(PyValueError::new_err(format!("fmt: unknown format kind {o:?}"))),
        };
        Ok(Spec(f))
    }
}
