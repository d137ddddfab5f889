//! Python floats beside a bfloat16 array keep bfloat16, as numpy 2 keeps
//! float16 (NEP 50: Python scalars are "weak"): `x * 0.5`, `x == 0.1`,
//! `np.maximum(x, np.nan)` and `np.clip(x, 0.0, 1)` run in x's type.
//!
//! numpy resolves a Python float against a legacy user dtype by trying a
//! common type with float16, then float64, through safe casts; neither casts
//! safely into bfloat16, so the float64 loop used to run and return float32.
//! A ufunc promoter (numpy's `PyUFunc_AddPromoter`, C API 2.0) for every
//! signature that mixes the type with Python floats (and Python ints) maps
//! those operands to it; numpy then stores the Python scalar in that common
//! type (float64, exact) and casts it into the type, rounding once, and runs
//! the type's own loop.
//!
//! Only types with infinities that float16 does not hold (bfloat16): the fp8
//! types cast safely into float16, which numpy would then store the float in
//! (a second rounding), and in types without infinities (posits, fn and fnuz
//! formats) `x < np.inf` or `np.clip(x, 0, np.inf)` would meet NaN. Those
//! keep numpy's promotion (float16 for fp8, float64 for posits).

use std::ffi::{c_int, c_void};
use std::sync::OnceLock;

use numpy::npyffi::{PyUFuncObject, PY_ARRAY_API};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use lowp_core::format::Format;

use super::{type_num, N, TYPES};

/// The DType classes (numpy's `PyArray_DTypeMeta`) of the lowp types.
static DTYPES: OnceLock<[usize; N]> = OnceLock::new();

/// Slots of numpy's C API tables (numpy 2.0 and later).
const UFUNC_ADD_PROMOTER: usize = 44;
const ARRAY_PYLONG_DTYPE: usize = 320 + 35;
const ARRAY_PYFLOAT_DTYPE: usize = 320 + 36;
/// `NPY_2_0_API_VERSION`: the tables above exist from this feature version on.
const NPY_2_0_API_VERSION: u32 = 0x12;

/// An entry of one of numpy's C API tables, read from its capsule.
fn api_entry(py: Python<'_>, capsule: &str, slot: usize) -> PyResult<*mut c_void> {
    let m = py.import("numpy._core._multiarray_umath")?;
    let cap = m.getattr(capsule)?;
    // SAFETY: numpy's API capsules hold a table of pointers (void **) of at least the
    // slots its feature version defines, checked by the caller.
    unsafe {
        let table = ffi::PyCapsule_GetPointer(cap.as_ptr(), std::ptr::null()) as *const *mut c_void;
        if table.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(*table.add(slot))
    }
}

/// The promoter: every input becomes the lowp type among them (the first one
/// when there are several; the signature's DTypes where it fixes them),
/// outputs stay as given.
///
/// # Safety
/// numpy's promoter contract: `op_dtypes`, `signature` and `new_op_dtypes` hold
/// nin + nout entries of `ufunc`; new references go into `new_op_dtypes`.
unsafe extern "C" fn promote_py_scalars(
    ufunc: *mut ffi::PyObject,
    op_dtypes: *const *mut ffi::PyObject,
    signature: *const *mut ffi::PyObject,
    new_op_dtypes: *mut *mut ffi::PyObject,
) -> c_int {
    // SAFETY: see the function contract.
    unsafe {
        let uf = ufunc as *mut PyUFuncObject;
        let (nin, nout) = ((*uf).fields.nin as usize, (*uf).fields.nout as usize);
        let ours = DTYPES.get().map(|d| d.as_slice()).unwrap_or(&[]);
        let lowp = (0..nin).map(|i| *op_dtypes.add(i)).find(|&d| ours.contains(&(d as usize)));
        let Some(lowp) = lowp else {
            // (Registered only for signatures holding a lowp type: cannot happen.)
            ffi::PyErr_SetString(ffi::PyExc_TypeError, c"lowp: promoter called without a lowp operand".as_ptr());
            return -1;
        };
        for i in 0..nin + nout {
            let fixed = *signature.add(i);
            let d = if !fixed.is_null() {
                fixed
            } else if i < nin {
                lowp
            } else {
                *op_dtypes.add(i)
            };
            ffi::Py_XINCREF(d);
            *new_op_dtypes.add(i) = d;
        }
        0
    }
}

/// Register the promoters, for the types named in the module docs, on every
/// ufunc with loops of two or three lowp inputs. Without numpy's 2.0 C API (or
/// if its tables do not look as expected) nothing is registered and Python
/// floats promote as before.
pub fn register_all(py: Python<'_>, ufuncs: &[(&str, usize)]) -> PyResult<()> {
    // SAFETY: a plain query of numpy's C API.
    let feature = unsafe { PY_ARRAY_API.PyArray_GetNDArrayCFeatureVersion(py) };
    if feature < NPY_2_0_API_VERSION {
        return Ok(());
    }
    let py_float = api_entry(py, "_ARRAY_API", ARRAY_PYFLOAT_DTYPE)? as *mut ffi::PyObject;
    let py_long = api_entry(py, "_ARRAY_API", ARRAY_PYLONG_DTYPE)? as *mut ffi::PyObject;
    // The abstract DTypes of Python's float and int are types named after them.
    let named = |p: *mut ffi::PyObject, want: &str| {
        // SAFETY: a non-null entry of the table is an object (checked to be a type).
        !p.is_null()
            && unsafe { ffi::PyType_Check(p) } != 0
            && unsafe { Bound::from_borrowed_ptr(py, p) }.getattr("__name__").and_then(|n| n.extract::<String>()).is_ok_and(|n| n.contains(want))
    };
    if !named(py_float, "PyFloat") || !named(py_long, "PyLong") {
        return Ok(());
    }
    let add = api_entry(py, "_UFUNC_API", UFUNC_ADD_PROMOTER)?;
    if add.is_null() {
        return Ok(());
    }
    // SAFETY: slot 44 of the ufunc API (feature version 2.0 and later) is
    // `int PyUFunc_AddPromoter(PyObject *ufunc, PyObject *DType_tuple, PyObject *promoter)`.
    let add_promoter: unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject, *mut ffi::PyObject) -> c_int =
        unsafe { std::mem::transmute(add) };

    let f16 = Format::Float(lowp_core::format::named::FLOAT16);
    let weak = |t: usize| matches!(&TYPES[t].fmt, Format::Float(f) if f.inf) && !super::casts::all_exact(&TYPES[t].fmt, &f16);
    let mut dtypes = [0usize; N];
    for (t, d) in dtypes.iter_mut().enumerate() {
        // SAFETY: the type is registered; its descriptor's type is its DType class.
        *d = unsafe {
            let descr = PY_ARRAY_API.PyArray_DescrFromType(py, type_num(t)) as *mut ffi::PyObject;
            let cls = ffi::Py_TYPE(descr) as usize;
            ffi::Py_DECREF(descr);
            cls
        };
    }
    let _ = DTYPES.set(dtypes);
    // SAFETY: a capsule of a promoter function, under the name numpy requires.
    let promoter = unsafe {
        let p = ffi::PyCapsule_New(promote_py_scalars as *mut c_void, c"numpy._ufunc_promoter".as_ptr(), None);
        Bound::from_owned_ptr_or_err(py, p)?
    };
    let np = py.import("numpy")?;
    // SAFETY: the DType classes live as long as numpy.
    let (pf, pl) = unsafe { (Bound::from_borrowed_ptr(py, py_float), Bound::from_borrowed_ptr(py, py_long)) };
    let mut seen: Vec<usize> = Vec::new();
    for &(name, nin) in ufuncs {
        let uf = np.getattr("_core")?.getattr("umath")?.getattr(name)?;
        // (`divide` and `true_divide` are one ufunc.)
        if seen.contains(&(uf.as_ptr() as usize)) {
            continue;
        }
        seen.push(uf.as_ptr() as usize);
        let nout: usize = uf.getattr("nout")?.extract()?;
        for (t, &cls) in dtypes.iter().enumerate() {
            if !weak(t) {
                continue;
            }
            // SAFETY: as above.
            let lowp = unsafe { Bound::from_borrowed_ptr(py, cls as *mut ffi::PyObject) };
            // Every mix of the lowp type, Python ints and Python floats with at least one
            // of each of the lowp type and a float (ints alone already promote to it).
            for code in 0..3usize.pow(nin as u32) {
                let kinds: Vec<usize> = (0..nin).map(|i| code / 3usize.pow(i as u32) % 3).collect();
                if !kinds.contains(&0) || !kinds.contains(&2) {
                    continue;
                }
                let mut items: Vec<Bound<'_, PyAny>> = kinds.iter().map(|&k| [&lowp, &pl, &pf][k].clone()).collect();
                items.extend((0..nout).map(|_| py.None().into_bound(py)));
                let tuple = PyTuple::new(py, items)?;
                // SAFETY: a ufunc, a tuple of nin + nout DTypes or None, a promoter capsule.
                let rc = unsafe { add_promoter(uf.as_ptr(), tuple.as_ptr(), promoter.as_ptr()) };
                if rc < 0 {
                    return Err(PyErr::fetch(py));
                }
            }
        }
    }
    Ok(())
}
