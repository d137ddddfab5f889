//! round / encode / decode, format facts, threads and instruction-set paths.

use lowp_core::convert::{self, Isa};
use lowp_core::format::Format;
use lowp_core::round::{Mode, RoundOpts, SeedKey};
use numpy::{PyArrayDescrMethods, PyReadonlyArrayDyn, PyReadwriteArrayDyn, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::{detach, IntoPy};
use crate::spec::Spec;

/// `FromPyObject` for an enum of arrays, one variant per element type: the
/// variant the array's dtype names, extracted once (each failed extraction of a
/// derived enum builds an error message, microseconds apiece).
macro_rules! by_dtype {
    ($(#[$m:meta])* $name:ident, $arr:ident, $what:literal, $($t:ty => $v:ident),*) => {
        $(#[$m])*
        pub enum $name<'py> {
            $($v($arr<'py, $t>),)*
        }

        impl<'a, 'py> FromPyObject<'a, 'py> for $name<'py> {
            type Error = PyErr;
            fn extract(ob: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
                if let Ok(arr) = ob.cast::<PyUntypedArray>() {
                    let dt = arr.dtype();
                    $(if dt.is_equiv_to(&numpy::dtype::<$t>(ob.py())) {
                        return Ok($name::$v(ob.extract()?));
                    })*
                }
                Err(PyTypeError::new_err(concat!("expected ", $what)))
            }
        }
    };
}

by_dtype!(
    /// A float input array (C-contiguous; the Python layer makes it so).
    InReal, PyReadonlyArrayDyn, "a float32 or float64 array", f32 => F32, f64 => F64
);
by_dtype!(OutReal, PyReadwriteArrayDyn, "a float32 or float64 array", f32 => F32, f64 => F64);
by_dtype!(InCode, PyReadonlyArrayDyn, "a uint8/16/32/64 array", u8 => U8, u16 => U16, u32 => U32, u64 => U64);
by_dtype!(OutCode, PyReadwriteArrayDyn, "a uint8/16/32/64 array", u8 => U8, u16 => U16, u32 => U32, u64 => U64);

fn contiguous<'a, T>(r: Result<&'a [T], numpy::AsSliceError>, arg: &str) -> PyResult<&'a [T]> {
    r.map_err(|_| PyValueError::new_err(format!("{arg}: must be C-contiguous and aligned")))
}

fn contiguous_mut<'a, T>(r: Result<&'a mut [T], numpy::AsSliceError>, arg: &str) -> PyResult<&'a mut [T]> {
    r.map_err(|_| PyValueError::new_err(format!("{arg}: must be C-contiguous and aligned")))
}

fn opts(rounding: &str, saturate: bool, seed: u64, rbits: u32) -> PyResult<RoundOpts> {
    let mode: Mode = rounding.parse().py_err()?;
    Ok(RoundOpts { mode, saturate, rbits, key: SeedKey::from_seed(seed) })
}

/// Round `x` into `fmt` and write the codes to `out` (same length).
/// Returns True when a NaN met a format without NaN (encoded as 0).
#[pyfunction]
#[pyo3(signature = (x, fmt, out, rounding, saturate, seed, rbits, index0=0))]
#[allow(clippy::too_many_arguments)]
fn encode_into(py: Python<'_>, x: InReal<'_>, fmt: Spec, mut out: OutCode<'_>, rounding: &str, saturate: bool, seed: u64, rbits: u32, index0: u64) -> PyResult<bool> {
    let o = opts(rounding, saturate, seed, rbits)?;
    let f = fmt.0;
    macro_rules! go {
        ($x:expr, $d:expr) => {{
            let s = contiguous($x.as_slice(), "x")?;
            let d = contiguous_mut($d.as_slice_mut(), "out")?;
            detach(py, || convert::encode(&f, s, d, &o, index0)).py_err()?
        }};
    }
    let rep = match (&x, &mut out) {
        (InReal::F32(x), OutCode::U8(d)) => go!(x, d),
        (InReal::F32(x), OutCode::U16(d)) => go!(x, d),
        (InReal::F32(x), OutCode::U32(d)) => go!(x, d),
        (InReal::F32(x), OutCode::U64(d)) => go!(x, d),
        (InReal::F64(x), OutCode::U8(d)) => go!(x, d),
        (InReal::F64(x), OutCode::U16(d)) => go!(x, d),
        (InReal::F64(x), OutCode::U32(d)) => go!(x, d),
        (InReal::F64(x), OutCode::U64(d)) => go!(x, d),
    };
    Ok(rep.nan_unrepresentable)
}

/// Decode `bits` into `out` (float32 or float64, same length).
#[pyfunction]
fn decode_into(py: Python<'_>, bits: InCode<'_>, fmt: Spec, mut out: OutReal<'_>) -> PyResult<()> {
    let f = fmt.0;
    macro_rules! go {
        ($x:expr, $d:expr) => {{
            let s = contiguous($x.as_slice(), "bits")?;
            let d = contiguous_mut($d.as_slice_mut(), "out")?;
            detach(py, || convert::decode(&f, s, d)).py_err()?
        }};
    }
    match (&bits, &mut out) {
        (InCode::U8(x), OutReal::F32(d)) => go!(x, d),
        (InCode::U16(x), OutReal::F32(d)) => go!(x, d),
        (InCode::U32(x), OutReal::F32(d)) => go!(x, d),
        (InCode::U64(x), OutReal::F32(d)) => go!(x, d),
        (InCode::U8(x), OutReal::F64(d)) => go!(x, d),
        (InCode::U16(x), OutReal::F64(d)) => go!(x, d),
        (InCode::U32(x), OutReal::F64(d)) => go!(x, d),
        (InCode::U64(x), OutReal::F64(d)) => go!(x, d),
    }
    Ok(())
}

/// Round `x` to values of `fmt`, into `out` of x's dtype.
#[pyfunction]
#[pyo3(signature = (x, fmt, out, rounding, saturate, seed, rbits, index0=0))]
#[allow(clippy::too_many_arguments)]
fn round_into(py: Python<'_>, x: InReal<'_>, fmt: Spec, mut out: OutReal<'_>, rounding: &str, saturate: bool, seed: u64, rbits: u32, index0: u64) -> PyResult<bool> {
    let o = opts(rounding, saturate, seed, rbits)?;
    let f = fmt.0;
    macro_rules! go {
        ($x:expr, $d:expr) => {{
            let s = contiguous($x.as_slice(), "x")?;
            let d = contiguous_mut($d.as_slice_mut(), "out")?;
            detach(py, || convert::round(&f, s, d, &o, index0)).py_err()?
        }};
    }
    let rep = match (&x, &mut out) {
        (InReal::F32(x), OutReal::F32(d)) => go!(x, d),
        (InReal::F64(x), OutReal::F64(d)) => go!(x, d),
        _ => return Err(PyTypeError::new_err("out: must have x's dtype")),
    };
    Ok(rep.nan_unrepresentable)
}

/// Facts of a format (validates the spec).
#[pyfunction]
fn format_info<'py>(py: Python<'py>, fmt: Spec) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let f = fmt.0;
    d.set_item("bits", f.bits())?;
    d.set_item("storage_bytes", f.storage_bytes())?;
    d.set_item("fits_f32", f.fits_f32())?;
    match f {
        Format::Float(x) => {
            d.set_item("bias", x.bias)?;
            d.set_item("max", x.max_value())?;
            d.set_item("min_normal", x.min_normal())?;
            d.set_item("min_subnormal", x.min_subnormal())?;
            d.set_item("eps", x.eps())?;
            d.set_item("precision", x.man_bits + 1)?;
            d.set_item("emax", x.emax())?;
            d.set_item("emin", x.emin())?;
            d.set_item("max_code", x.max_code())?;
            d.set_item("inf", x.inf)?;
        }
        Format::Posit(p) => {
            d.set_item("max", p.max_value())?;
            d.set_item("min_normal", p.min_value())?;
            d.set_item("min_subnormal", p.min_value())?;
            d.set_item("eps", p.eps())?;
            // Significand bits at 1 (hidden bit included).
            d.set_item("precision", (p.nbits as i32 - 2 - p.es as i32).max(1))?;
            d.set_item("emax", p.max_scale())?;
            d.set_item("emin", -p.max_scale())?;
            d.set_item("max_code", p.max_code())?;
        }
        Format::Int(i) => {
            d.set_item("max", i.max_int() as f64)?;
            d.set_item("min", i.min_int() as f64)?;
            d.set_item("min_normal", 1.0)?;
            d.set_item("min_subnormal", 1.0)?;
            d.set_item("eps", 1.0)?;
            d.set_item("precision", i.bits - u32::from(i.signed))?;
            d.set_item("emax", (i.bits - 1 - u32::from(i.signed)) as i32)?;
            d.set_item("emin", 0)?;
        }
    }
    Ok(d)
}

/// Set the number of threads lowp's kernels use (1 or more; the default is the
/// number of cores, or `LOWP_NUM_THREADS`).
#[pyfunction]
fn set_num_threads(n: i64) -> PyResult<()> {
    // Every pool thread is started at once: a typo such as 10**9 must not try to start them all.
    const MAX_THREADS: i64 = lowp_core::parallel::MAX_THREADS as i64;
    if !(1..=MAX_THREADS).contains(&n) {
        return Err(PyValueError::new_err(format!("n: the number of threads must be in 1..={MAX_THREADS}, got {n}")));
    }
    lowp_core::parallel::set_num_threads(n as usize).py_err()
}

/// The number of threads lowp's kernels use.
#[pyfunction]
fn get_num_threads() -> usize {
    lowp_core::parallel::num_threads()
}

/// The instruction-set level in use ("scalar", "sse2", "avx2" or "avx512"; at
/// "avx512" the kernels without an AVX-512 version run their AVX2 one).
#[pyfunction]
fn get_isa() -> &'static str {
    convert::isa_level().name()
}

/// Force a path (None: the best the CPU has, or LOWP_ISA).
#[pyfunction]
#[pyo3(signature = (name=None))]
fn set_isa(name: Option<&str>) -> PyResult<()> {
    let i = name.map(Isa::parse).transpose().py_err()?;
    convert::set_isa(i).py_err()
}

/// Before `os.fork()` (registered with `os.register_at_fork`): hold the thread
/// pool's lock across the fork.
#[pyfunction]
fn _fork_prepare() {
    lowp_core::parallel::before_fork()
}

/// After `os.fork()` in the parent: release the lock.
#[pyfunction]
fn _fork_parent() {
    lowp_core::parallel::after_fork(false)
}

/// After `os.fork()` in the child: release the lock and leave the parent's
/// workers (which the child does not have) behind; the next kernel starts a pool.
#[pyfunction]
fn _fork_child() {
    lowp_core::parallel::after_fork(true)
}

#[pyfunction]
fn detected_isa() -> &'static str {
    convert::detected_isa().name()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_into, m)?)?;
    m.add_function(wrap_pyfunction!(decode_into, m)?)?;
    m.add_function(wrap_pyfunction!(round_into, m)?)?;
    m.add_function(wrap_pyfunction!(format_info, m)?)?;
    m.add_function(wrap_pyfunction!(set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(get_isa, m)?)?;
    m.add_function(wrap_pyfunction!(set_isa, m)?)?;
    m.add_function(wrap_pyfunction!(detected_isa, m)?)?;
    m.add_function(wrap_pyfunction!(_fork_prepare, m)?)?;
    m.add_function(wrap_pyfunction!(_fork_parent, m)?)?;
    m.add_function(wrap_pyfunction!(_fork_child, m)?)?;
    Ok(())
}
