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
//! formats) `x < np.inf` or `np.clip(x, 0, np.inf)` would meet NaN. A second
//! promoter runs the fp8 types beside Python floats in float32 (their common
//! type with float16, see `common_dtype`); posits keep numpy's promotion (the
//! smallest numpy float holding them).

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
        let (nin, nout) = arity(ufunc);
        let ours = DTYPES.get().map(|d| d.as_slice()).unwrap_or(&[]);
        let lowp = (0..nin).map(|i| *op_dtypes.add(i)).find(|&d| ours.contains(&(d as usize)));
        let Some(lowp) = lowp else {
            // (Registered only for signatures holding a lowp type: cannot happen.)
            ffi::PyErr_SetString(ffi::PyExc_TypeError, c"lowp: promoter called without a lowp operand".as_ptr());
            return -1;
        };
        set_new(op_dtypes, signature, new_op_dtypes, nin, nout, lowp, true);
        0
    }
}

/// A ufunc's numbers of inputs and outputs.
///
/// # Safety
/// `ufunc` is a numpy ufunc.
unsafe fn arity(ufunc: *mut ffi::PyObject) -> (usize, usize) {
    // SAFETY: see the function contract.
    let uf = unsafe { &*(ufunc as *mut PyUFuncObject) };
    (uf.fields.nin as usize, uf.fields.nout as usize)
}

/// A promoter's answer into `new_op_dtypes` (new references): the inputs `input`
/// (the signature's DTypes where it fixes them, if `fixed_inputs`), the outputs as
/// the signature fixes them, else as given.
///
/// # Safety
/// As [`promote_py_scalars`]; `input` is a DType class.
unsafe fn set_new(
    op_dtypes: *const *mut ffi::PyObject,
    signature: *const *mut ffi::PyObject,
    new_op_dtypes: *mut *mut ffi::PyObject,
    nin: usize,
    nout: usize,
    input: *mut ffi::PyObject,
    fixed_inputs: bool,
) {
    // SAFETY: see the function contract.
    unsafe {
        for i in 0..nin + nout {
            let fixed = *signature.add(i);
            let d = match (i < nin, fixed.is_null()) {
                (true, false) if fixed_inputs => fixed,
                (true, _) => input,
                (false, false) => fixed,
                (false, true) => *op_dtypes.add(i),
            };
            ffi::Py_XINCREF(d);
            *new_op_dtypes.add(i) = d;
        }
    }
}

/// numpy's `PyUFunc_AddPromoter(ufunc, DType_tuple, promoter)`.
type AddPromoter = unsafe extern "C" fn(*mut ffi::PyObject, *mut ffi::PyObject, *mut ffi::PyObject) -> c_int;

/// A promoter (numpy's `PyArrayMethod_PromoterFunction`).
type Promoter = unsafe extern "C" fn(*mut ffi::PyObject, *const *mut ffi::PyObject, *const *mut ffi::PyObject, *mut *mut ffi::PyObject) -> c_int;

/// Registers one promoter function on ufuncs, for tuples of input DTypes.
struct Registrar<'py> {
    add: AddPromoter,
    capsule: Bound<'py, PyAny>,
}

impl<'py> Registrar<'py> {
    /// For `f`, where numpy's C API has `PyUFunc_AddPromoter` (2.0 and later).
    fn new(py: Python<'py>, f: Promoter) -> PyResult<Option<Self>> {
        // SAFETY: a plain query of numpy's C API.
        if unsafe { PY_ARRAY_API.PyArray_GetNDArrayCFeatureVersion(py) } < NPY_2_0_API_VERSION {
            return Ok(None);
        }
        let add = api_entry(py, "_UFUNC_API", UFUNC_ADD_PROMOTER)?;
        if add.is_null() {
            return Ok(None);
        }
        // SAFETY: slot 44 of the ufunc API (feature version 2.0 and later) is that
        // function; the capsule holds a promoter under the name numpy requires.
        unsafe {
            let capsule = ffi::PyCapsule_New(f as *mut c_void, c"numpy._ufunc_promoter".as_ptr(), None);
            Ok(Some(Registrar { add: std::mem::transmute::<*mut c_void, AddPromoter>(add), capsule: Bound::from_owned_ptr_or_err(py, capsule)? }))
        }
    }

    /// The promoter on `uf` for the input DTypes `inputs` (outputs: any).
    fn add(&self, uf: &Bound<'py, PyAny>, mut inputs: Vec<Bound<'py, PyAny>>) -> PyResult<()> {
        let py = uf.py();
        let nout: usize = uf.getattr("nout")?.extract()?;
        inputs.extend((0..nout).map(|_| py.None().into_bound(py)));
        let tuple = PyTuple::new(py, inputs)?;
        // SAFETY: a ufunc, a tuple of nin + nout DTypes or None, a promoter capsule.
        if unsafe { (self.add)(uf.as_ptr(), tuple.as_ptr(), self.capsule.as_ptr()) } < 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(())
    }
}

/// The distinct ufuncs of two inputs that [`register_all`] was given.
static PAIR_UFUNCS: OnceLock<Vec<Py<PyAny>>> = OnceLock::new();

/// Pairs of DTypes, in order, whose common DType numpy's legacy loop search would not
/// run ([`register_common`]), with that DType: `[first, second, common]`.
static COMMON: std::sync::Mutex<Vec<[usize; 3]>> = std::sync::Mutex::new(Vec::new());

/// The promoter of [`register_common`]'s pairs: both inputs become their common
/// DType, whatever a signature fixes (numpy caches a promotion by the operands'
/// DTypes alone, so an answer that followed the signature would be reused without
/// it; a signature fixing another input type then finds no loop, as for numpy's own
/// `np.add(float32, float64, signature=(float32, None, None))`); outputs as
/// [`set_new`] gives them.
///
/// # Safety
/// As [`promote_py_scalars`].
unsafe extern "C" fn promote_to_common(
    ufunc: *mut ffi::PyObject,
    op_dtypes: *const *mut ffi::PyObject,
    signature: *const *mut ffi::PyObject,
    new_op_dtypes: *mut *mut ffi::PyObject,
) -> c_int {
    // SAFETY: see the function contract.
    unsafe {
        let (nin, nout) = arity(ufunc);
        let (a, b) = (*op_dtypes as usize, *op_dtypes.add(1) as usize);
        let common = COMMON.lock().ok().and_then(|t| t.iter().find(|e| e[0] == a && e[1] == b).map(|e| e[2]));
        let Some(common) = common.filter(|_| nin == 2) else {
            // (Registered only for the pairs in the table: cannot happen.)
            ffi::PyErr_SetString(ffi::PyExc_TypeError, c"lowp: promoter called for a pair it was not registered for".as_ptr());
            return -1;
        };
        set_new(op_dtypes, signature, new_op_dtypes, nin, nout, common as *mut ffi::PyObject, false);
        0
    }
}

/// Make the two-input ufuncs run in `np.result_type`'s type for each `(first, second,
/// common)` DType classes given (ml_dtypes' types beside lowp's whose common type is
/// ml_dtypes' one: numpy's legacy loop search ran lowp's loop for same-named pairs, and
/// float32's for ml_dtypes' bfloat16 beside lowp's fp8 and posit8 types).
/// `more` are further ufuncs of two inputs to register them on (the matrix products).
#[pyfunction]
#[pyo3(name = "_register_common", signature = (pairs, more = Vec::new()))]
pub fn register_common(py: Python<'_>, pairs: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>, Bound<'_, PyAny>)>, more: Vec<Bound<'_, PyAny>>) -> PyResult<()> {
    let (Some(reg), Some(ufuncs)) = (Registrar::new(py, promote_to_common)?, PAIR_UFUNCS.get()) else {
        return Ok(());
    };
    for (a, b, c) in &pairs {
        // (Registered dtypes' classes live as long as numpy: the table holds their addresses.)
        let key = [a.as_ptr() as usize, b.as_ptr() as usize, c.as_ptr() as usize];
        {
            let mut table = COMMON.lock().map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("lowp: promoter table poisoned"))?;
            if table.iter().any(|e| e[..2] == key[..2]) {
                continue;
            }
            table.push(key);
        }
        for uf in ufuncs.iter().map(|u| u.bind(py)).chain(more.iter()) {
            reg.add(uf, vec![a.clone(), b.clone()])?;
        }
    }
    Ok(())
}

/// Register the promoters, for the types named in the module docs, on every
/// ufunc with loops of two or three lowp inputs. Without numpy's 2.0 C API (or
/// if its tables do not look as expected) nothing is registered and Python
/// floats promote as before.
pub fn register_all(py: Python<'_>, ufuncs: &[(&str, usize)]) -> PyResult<()> {
    let Some(reg) = Registrar::new(py, promote_py_scalars)? else {
        return Ok(());
    };
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
    let _ = PY_SCALAR_DTYPES.set((py_long as usize, py_float as usize));
    let np = py.import("numpy")?;
    let f32_dtype = np.getattr("dtypes")?.getattr("Float32DType")?;
    let f64_dtype = np.getattr("dtypes")?.getattr("Float64DType")?;
    let _ = FLOAT_DTYPES.set((f32_dtype.unbind(), f64_dtype.unbind()));
    let reg32 = Registrar::new(py, promote_to_float::<false>)?;
    // SAFETY: the DType classes live as long as numpy.
    let (pf, pl) = unsafe { (Bound::from_borrowed_ptr(py, py_float), Bound::from_borrowed_ptr(py, py_long)) };
    let mut seen: Vec<Py<PyAny>> = Vec::new();
    let mut pairs: Vec<Py<PyAny>> = Vec::new();
    for &(name, nin) in ufuncs {
        let uf = np.getattr("_core")?.getattr("umath")?.getattr(name)?;
        // (`divide` and `true_divide` are one ufunc.)
        if seen.iter().any(|u| u.is(&uf)) {
            continue;
        }
        seen.push(uf.clone().unbind());
        if nin == 2 {
            pairs.push(uf.clone().unbind());
        }
        for (t, &cls) in dtypes.iter().enumerate() {
            let reg = match (weak(t), &reg32) {
                (true, _) => &reg,
                (false, Some(r)) if in_float16(t) => r,
                _ => continue,
            };
            // SAFETY: as above.
            let lowp = unsafe { Bound::from_borrowed_ptr(py, cls as *mut ffi::PyObject) };
            // Every mix of the lowp type, Python ints and Python floats with at least one
            // of each of the lowp type and a float (ints alone already promote to it).
            for code in 0..3usize.pow(nin as u32) {
                let kinds: Vec<usize> = (0..nin).map(|i| code / 3usize.pow(i as u32) % 3).collect();
                if !kinds.contains(&0) || !kinds.contains(&2) {
                    continue;
                }
                reg.add(&uf, kinds.iter().map(|&k| [&lowp, &pl, &pf][k].clone()).collect())?;
            }
        }
    }
    let _ = PAIR_UFUNCS.set(pairs);
    if let Some(r) = &reg32 {
        register_clip_mixes(py, r, &pl, &pf, dtypes)?;
    }
    register_int_comparisons(py, &pl, dtypes)
}

/// `np.clip` of an fp8 type beside another fp8 type or float16 (and anything as its
/// third operand) runs in float32, as the ufuncs of two such operands do (the pairs'
/// common type); numpy's loop search would run float16's loop. (An fp8 type beside
/// Python scalars alone is registered with the other Python-float mixes.)
fn register_clip_mixes(py: Python<'_>, reg: &Registrar<'_>, pl: &Bound<'_, PyAny>, pf: &Bound<'_, PyAny>, dtypes: [usize; N]) -> PyResult<()> {
    let clip = py.import("numpy")?.getattr("_core")?.getattr("umath")?.getattr("clip")?;
    let f16 = py.import("numpy")?.getattr("dtypes")?.getattr("Float16DType")?;
    // SAFETY: the DType classes live as long as numpy.
    let fp8: Vec<Bound<'_, PyAny>> = (0..N).filter(|&t| in_float16(t)).map(|t| unsafe { Bound::from_borrowed_ptr(py, dtypes[t] as *mut ffi::PyObject) }).collect();
    let typed: Vec<Bound<'_, PyAny>> = fp8.iter().cloned().chain([f16]).collect();
    let any: Vec<Bound<'_, PyAny>> = typed.iter().cloned().chain([pl.clone(), pf.clone()]).collect();
    for x in &any {
        for y in &any {
            for z in &any {
                let ops = [x, y, z];
                let kinds: Vec<&Bound<'_, PyAny>> = ops.iter().copied().filter(|o| typed.iter().any(|t| t.is(*o))).collect();
                let distinct = kinds.iter().any(|k| !k.is(kinds[0]));
                let has_fp8 = ops.iter().any(|o| fp8.iter().any(|t| t.is(*o)));
                if has_fp8 && distinct {
                    reg.add(&clip, vec![x.clone(), y.clone(), z.clone()])?;
                }
            }
        }
    }
    Ok(())
}

/// numpy's float32 and float64 DType classes (set with [`DTYPES`]).
static FLOAT_DTYPES: OnceLock<(Py<PyAny>, Py<PyAny>)> = OnceLock::new();

/// A promoter making both inputs float32 (`WIDE` false: Python floats beside the
/// fp8 types) or float64 (Python ints in comparisons), whatever a signature fixes
/// (as [`promote_to_common`]); outputs as [`set_new`] gives them.
///
/// # Safety
/// As [`promote_py_scalars`].
unsafe extern "C" fn promote_to_float<const WIDE: bool>(
    ufunc: *mut ffi::PyObject,
    op_dtypes: *const *mut ffi::PyObject,
    signature: *const *mut ffi::PyObject,
    new_op_dtypes: *mut *mut ffi::PyObject,
) -> c_int {
    // SAFETY: see the function contract.
    unsafe {
        let (nin, nout) = arity(ufunc);
        let Some((f32_dtype, f64_dtype)) = FLOAT_DTYPES.get() else {
            // (Set before the promoters are registered: cannot happen.)
            ffi::PyErr_SetString(ffi::PyExc_TypeError, c"lowp: promoter called before its set-up".as_ptr());
            return -1;
        };
        let to = if WIDE { f64_dtype } else { f32_dtype };
        set_new(op_dtypes, signature, new_op_dtypes, nin, nout, to.as_ptr(), false);
        0
    }
}

/// Comparisons of a type without infinities (posits, the fn and fnuz fp8 types)
/// with a Python int run in float64. numpy stores the int in the array's type, where
/// one beyond the range became NaN (fn, fnuz: `x < 1000` was False) or the largest
/// posit (`posit16(2**56) == 2**60` was True, and `hash` disagreed); numpy's own
/// integer types compare such ints by value, its floats through infinity. float64
/// holds every value of these types, and the ints exactly up to 2**53.
fn register_int_comparisons(py: Python<'_>, py_long: &Bound<'_, PyAny>, dtypes: [usize; N]) -> PyResult<()> {
    let Some(reg) = Registrar::new(py, promote_to_float::<true>)? else {
        return Ok(());
    };
    let umath = py.import("numpy")?.getattr("_core")?.getattr("umath")?;
    for name in ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"] {
        let uf = umath.getattr(name)?;
        for (t, &cls) in dtypes.iter().enumerate() {
            if has_inf(t) {
                continue;
            }
            // SAFETY: the DType classes live as long as numpy.
            let lowp = unsafe { Bound::from_borrowed_ptr(py, cls as *mut ffi::PyObject) };
            reg.add(&uf, vec![lowp.clone(), py_long.clone()])?;
            reg.add(&uf, vec![py_long.clone(), lowp])?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Common DTypes (`np.result_type`, `np.concatenate`, `np.where`, `np.stack`).
//
// numpy gives a legacy user dtype a common-DType function that only looks for a
// safe cast one way or the other, so a lowp type beside int16, float16 or a lowp
// type neither holds (float8_e4m3fn and float8_e5m2) had no common type: numpy
// raised DTypePromotionError where its own float16 gives float32. The function
// below keeps those answers and adds numpy's search for floats: the smallest of
// float16, float32, float64, longdouble (then the complex types) that both cast
// into safely (`bfloat16` with int16 or float16: float32; with int32: float64).
// Python floats and ints beside bfloat16 give bfloat16, as in its ufuncs.
//
// numpy 2 keeps the function in the DType's slot table, which it does not export
// (`NPY_DType_Slots`: common_dtype is its fourth entry in numpy 2.0 to 2.5). It is
// replaced only on those versions and only when the class's public fields read
// back as the registered type (its type number and descriptor), so the layout is
// the one expected; otherwise numpy's function stays.

/// The public fields of numpy's `PyArray_DTypeMeta` after its `PyHeapTypeObject`.
#[repr(C)]
struct DTypeMetaFields {
    singleton: *mut ffi::PyObject,
    type_num: c_int,
    scalar_type: *mut ffi::PyTypeObject,
    flags: u64,
    dt_slots: *mut *mut c_void,
    reserved: [*mut c_void; 3],
}

/// `NPY_DT_LEGACY`: a DType with a type number (numpy's and legacy user types).
const NPY_DT_LEGACY: u64 = 1;
/// `NPY_DT_NUMERIC` (numpy's `dtype_api.h`): `type(dtype)._is_numeric`.
const NPY_DT_NUMERIC: u64 = 1 << 3;
/// The entry of `common_dtype` in `NPY_DType_Slots`.
const COMMON_DTYPE_SLOT: usize = 3;
/// Feature versions with that layout: numpy 2.0 (0x12) to 2.5 (0x16).
const NPY_2_5_API_VERSION: u32 = 0x16;

/// The size of Python's heap type object (`type.__basicsize__`).
static HEAP_TYPE_SIZE: OnceLock<usize> = OnceLock::new();

/// The public fields of a DType class.
///
/// # Safety
/// `cls` is a numpy DType class (an instance of `numpy._DTypeMeta`).
unsafe fn fields(cls: *mut ffi::PyObject) -> *mut DTypeMetaFields {
    let offset = *HEAP_TYPE_SIZE.get().expect("set before the function is installed");
    // SAFETY: the fields follow the heap type object (numpy's `PyArray_DTypeMeta`).
    unsafe { (cls as *mut u8).add(offset) as *mut DTypeMetaFields }
}

/// A new reference to the DType class of numpy type number `num`, or null with
/// an exception.
///
/// # Safety
/// The GIL is held.
unsafe fn dtype_of(py: Python<'_>, num: c_int) -> *mut ffi::PyObject {
    // SAFETY: the descriptor of a type number; its type is its DType class.
    unsafe {
        let d = PY_ARRAY_API.PyArray_DescrFromType(py, num) as *mut ffi::PyObject;
        if d.is_null() {
            return d;
        }
        let cls = ffi::Py_TYPE(d) as *mut ffi::PyObject;
        ffi::Py_INCREF(cls);
        ffi::Py_DECREF(d);
        cls
    }
}

/// numpy's types tried in order when neither type casts safely into the other
/// (float16 skipped, see [`common_dtype`]).
const FLOAT_LADDER: [c_int; 7] = [
    numpy::npyffi::NPY_TYPES::NPY_HALF as c_int,
    numpy::npyffi::NPY_TYPES::NPY_FLOAT as c_int,
    numpy::npyffi::NPY_TYPES::NPY_DOUBLE as c_int,
    numpy::npyffi::NPY_TYPES::NPY_LONGDOUBLE as c_int,
    numpy::npyffi::NPY_TYPES::NPY_CFLOAT as c_int,
    numpy::npyffi::NPY_TYPES::NPY_CDOUBLE as c_int,
    numpy::npyffi::NPY_TYPES::NPY_CLONGDOUBLE as c_int,
];

/// The abstract DTypes of Python's int and float (set with [`DTYPES`]).
static PY_SCALAR_DTYPES: OnceLock<(usize, usize)> = OnceLock::new();

/// The common DType of lowp type `cls` and `other` (numpy's `common_dtype` slot):
/// a new reference, `NotImplemented` to let `other` decide, or null with an error.
///
/// # Safety
/// numpy's contract: two DType classes, the GIL held.
unsafe extern "C" fn common_dtype(cls: *mut ffi::PyObject, other: *mut ffi::PyObject) -> *mut ffi::PyObject {
    // SAFETY: see the function contract; the fields are read as checked at registration.
    unsafe {
        let py = Python::assume_attached();
        let not_implemented = || {
            let p = ffi::Py_NotImplemented();
            ffi::Py_INCREF(p);
            p
        };
        let ours = DTYPES.get().map(|d| d.as_slice()).unwrap_or(&[]);
        if cls == other {
            ffi::Py_INCREF(cls);
            return cls;
        }
        if (*fields(other)).flags & NPY_DT_LEGACY == 0 {
            // Python's int and float beside bfloat16 keep it (see the ufunc promoters);
            // other new-style DTypes decide for themselves.
            if let (Some(&(pl, pf)), Some(t)) = (PY_SCALAR_DTYPES.get(), ours.iter().position(|&d| d == cls as usize)) {
                if (other as usize == pl || other as usize == pf) && weak(t) {
                    ffi::Py_INCREF(cls);
                    return cls;
                }
            }
            return not_implemented();
        }
        let (a, b) = ((*fields(cls)).type_num, (*fields(other)).type_num);
        // Between two lowp types the one of the higher type number decides, as numpy's did.
        if ours.contains(&(other as usize)) && a < b {
            return not_implemented();
        }
        let safe = |from: c_int, to: c_int| PY_ARRAY_API.PyArray_CanCastSafely(py, from, to) != 0;
        // float16 is never the answer: an fp8 type beside float16 or another fp8 type
        // gives float32, as in ml_dtypes (float16 would overflow where a float32 holds
        // an e4m3 x e5m2 product, 448 * 57344, and `@` of such a pair ran numpy's float16
        // matmul).
        let half = numpy::npyffi::NPY_TYPES::NPY_HALF as c_int;
        if safe(a, b) && b != half {
            ffi::Py_INCREF(other);
            return other;
        }
        if safe(b, a) {
            ffi::Py_INCREF(cls);
            return cls;
        }
        for &t in FLOAT_LADDER.iter().filter(|&&t| t != half) {
            if safe(a, t) && safe(b, t) {
                return dtype_of(py, t);
            }
        }
        not_implemented()
    }
}

/// Whether float16 holds every value of lowp type `t` (the fp8 types).
fn in_float16(t: usize) -> bool {
    super::casts::all_exact(&TYPES[t].fmt, &Format::Float(lowp_core::format::named::FLOAT16))
}

/// Whether lowp type `t` has infinities.
fn has_inf(t: usize) -> bool {
    matches!(&TYPES[t].fmt, Format::Float(f) if f.inf)
}

/// Whether Python floats beside lowp type `t` keep it (see the module docs).
fn weak(t: usize) -> bool {
    has_inf(t) && !in_float16(t)
}

/// Mark every lowp DType numeric (`NPY_DT_NUMERIC`, a public flag: numpy's testing
/// functions then compare NaNs as its own floats') on numpy 2.0 and later, and install
/// `common_dtype` where numpy's layout is the one known (see above). Returns whether
/// the common DType was installed.
pub fn register_dtype_classes(py: Python<'_>) -> PyResult<bool> {
    // SAFETY: a plain query of numpy's C API.
    let feature = unsafe { PY_ARRAY_API.PyArray_GetNDArrayCFeatureVersion(py) };
    if feature < NPY_2_0_API_VERSION {
        return Ok(false);
    }
    let Some(dtypes) = DTYPES.get() else { return Ok(false) };
    // The DType metaclass's instances are the heap type plus the fields above.
    let heap: usize = py.get_type::<pyo3::types::PyType>().getattr("__basicsize__")?.extract()?;
    let meta_size: usize = py.import("numpy")?.getattr("dtypes")?.getattr("Float32DType")?.get_type().getattr("__basicsize__")?.extract()?;
    if meta_size != heap + std::mem::size_of::<DTypeMetaFields>() {
        return Ok(false);
    }
    let _ = HEAP_TYPE_SIZE.set(heap);
    let mut slots = Vec::with_capacity(N);
    for (t, &cls) in dtypes.iter().enumerate() {
        // SAFETY: a lowp DType class, whose size was checked: its fields are readable.
        let f = unsafe { &*fields(cls as *mut ffi::PyObject) };
        // SAFETY: the type's registered descriptor (a new reference, released).
        let singleton_ok = unsafe {
            let d = PY_ARRAY_API.PyArray_DescrFromType(py, type_num(t)) as *mut ffi::PyObject;
            let ok = d == f.singleton;
            ffi::Py_XDECREF(d);
            ok
        };
        if f.type_num != type_num(t) || !singleton_ok || f.flags & NPY_DT_LEGACY == 0 || f.dt_slots.is_null() {
            return Ok(false);
        }
        // Every lowp type has numpy's one function for legacy user types.
        // SAFETY: the slot table of a numpy 2.0 - 2.5 DType holds common_dtype at this
        // entry (read only on those versions).
        slots.push(if feature <= NPY_2_5_API_VERSION { unsafe { *f.dt_slots.add(COMMON_DTYPE_SLOT) } } else { std::ptr::null_mut() });
    }
    for &cls in dtypes {
        // SAFETY: as checked above: the public flags of a DType class.
        unsafe { (*fields(cls as *mut ffi::PyObject)).flags |= NPY_DT_NUMERIC };
    }
    if !slots.iter().all(|&p| !p.is_null() && p == slots[0]) {
        return Ok(false);
    }
    for &cls in dtypes {
        // SAFETY: as checked above.
        unsafe { *(*fields(cls as *mut ffi::PyObject)).dt_slots.add(COMMON_DTYPE_SLOT) = common_dtype as *mut c_void };
    }
    Ok(true)
}
