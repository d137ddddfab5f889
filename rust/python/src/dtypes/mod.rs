//! NumPy dtypes of the named formats: bfloat16, the five fp8 types and
//! posit8/16/32.
//!
//! A type is metadata ([`TypeInfo`]: name, format, item size, doc); one
//! generic registration ([`register`]) makes, for each, a scalar type (a
//! subclass of `numpy.generic` whose instances hold the code right after the
//! object header, where numpy looks for a scalar's value), a legacy dtype
//! (`PyArray_RegisterDataType` from a `PyArray_DescrProto` with its
//! `PyArray_ArrFuncs`), casts to and from every numpy number type and between
//! the lowp types ([`casts`]), and ufunc loops from one flat table over four
//! strided-loop helpers ([`ufuncs`]).
//!
//! Functions numpy calls are generic over the type's index (`const T`), so
//! each type gets its own entry points from one body.
//!
//! Names are not put into `numpy.sctypeDict`: ml_dtypes puts its own there
//! (`bfloat16` ...) and both libraries must coexist in either import order.

mod casts;
pub mod kernels;
mod matmul;
mod promote;
mod scalar;
mod ufuncs;

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use lowp_core::format::{named, Format};
use numpy::npyffi::{npy_intp, PyArray_ArrFuncs, PyArray_Descr, PyArray_DescrProto, PY_ARRAY_API};
use pyo3::exceptions::PyRuntimeError;
use pyo3::ffi;
use numpy::PyArrayDescrMethods;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use kernels::{dec, enc};

/// What defines one dtype.
pub struct TypeInfo {
    pub name: &'static str,
    pub fmt: Format,
    /// Bytes per element (the storage width of the format).
    pub size: usize,
    /// numpy's one-character type code (not unique among user types; unused for lookup;
    /// none of numpy's own, which `np.vectorize` would turn into that type).
    pub tchar: u8,
    pub doc: &'static str,
}

pub const N: usize = 9;

/// The types; bfloat16 first (`kernels::BF16`).
pub static TYPES: [TypeInfo; N] = [
    TypeInfo { name: "bfloat16", fmt: Format::Float(named::BFLOAT16), size: 2, tchar: b'E', doc: "bfloat16: 8 exponent bits, 7 mantissa bits, IEEE-style inf and NaN." },
    TypeInfo { name: "float8_e5m2", fmt: Format::Float(named::FLOAT8_E5M2), size: 1, tchar: b'5', doc: "float8_e5m2: 5 exponent bits, 2 mantissa bits, IEEE-style inf and NaN (OCP E5M2)." },
    TypeInfo { name: "float8_e4m3fn", fmt: Format::Float(named::FLOAT8_E4M3FN), size: 1, tchar: b'4', doc: "float8_e4m3fn: 4 exponent bits, 3 mantissa bits, no inf, NaN only at S.1111.111, max 448 (OCP E4M3)." },
    TypeInfo { name: "float8_e4m3", fmt: Format::Float(named::FLOAT8_E4M3), size: 1, tchar: b'7', doc: "float8_e4m3: 4 exponent bits, 3 mantissa bits, IEEE-style inf and NaN, max 240." },
    TypeInfo { name: "float8_e4m3fnuz", fmt: Format::Float(named::FLOAT8_E4M3FNUZ), size: 1, tchar: b'K', doc: "float8_e4m3fnuz: 4 exponent bits, 3 mantissa bits, bias 8, no inf, no -0, NaN at 0x80." },
    TypeInfo { name: "float8_e5m2fnuz", fmt: Format::Float(named::FLOAT8_E5M2FNUZ), size: 1, tchar: b'C', doc: "float8_e5m2fnuz: 5 exponent bits, 2 mantissa bits, bias 16, no inf, no -0, NaN at 0x80." },
    TypeInfo { name: "posit8", fmt: Format::Posit(named::POSIT8), size: 1, tchar: b'8', doc: "posit8: 8-bit posit with es=2 (2022 Posit Standard); NaR reads as NaN." },
    TypeInfo { name: "posit16", fmt: Format::Posit(named::POSIT16), size: 2, tchar: b'9', doc: "posit16: 16-bit posit with es=2 (2022 Posit Standard); NaR reads as NaN." },
    TypeInfo { name: "posit32", fmt: Format::Posit(named::POSIT32), size: 4, tchar: b'0', doc: "posit32: 32-bit posit with es=2 (2022 Posit Standard); NaR reads as NaN." },
];

static TYPE_OBJ: [AtomicPtr<ffi::PyTypeObject>; N] = [const { AtomicPtr::new(std::ptr::null_mut()) }; N];
static TYPE_NUM: [AtomicI32; N] = [const { AtomicI32::new(-1) }; N];

pub fn type_obj(t: usize) -> *mut ffi::PyTypeObject {
    TYPE_OBJ[t].load(Ordering::Acquire)
}

pub fn type_num(t: usize) -> c_int {
    TYPE_NUM[t].load(Ordering::Acquire)
}

/// Read one code of `size` bytes (any alignment).
///
/// # Safety
/// `p` points to `size` readable bytes.
#[inline(always)]
pub unsafe fn load(p: *const u8, size: usize) -> u32 {
    // SAFETY: the caller guarantees `size` readable bytes at `p`.
    unsafe {
        match size {
            1 => *p as u32,
            2 => (p as *const u16).read_unaligned() as u32,
            _ => (p as *const u32).read_unaligned(),
        }
    }
}

/// Write one code of `size` bytes (any alignment).
///
/// # Safety
/// `p` points to `size` writable bytes.
#[inline(always)]
pub unsafe fn store(p: *mut u8, size: usize, c: u32) {
    // SAFETY: the caller guarantees `size` writable bytes at `p`.
    unsafe {
        match size {
            1 => *p = c as u8,
            2 => (p as *mut u16).write_unaligned(c as u16),
            _ => (p as *mut u32).write_unaligned(c),
        }
    }
}

// ---------------------------------------------------------------- ArrFuncs

/// The element as a Python float, its exact value (`.item()`, `.tolist()`,
/// object casts; indexing builds the lowp scalar through `copyswap`), as for
/// numpy's own floating types and ml_dtypes'.
unsafe extern "C" fn getitem<const T: usize>(data: *mut c_void, arr: *mut c_void) -> *mut ffi::PyObject {
    // SAFETY: numpy passes a pointer to one element of this dtype, and its array.
    let c = unsafe { load_as(data as *const u8, TYPES[T].size, arr) };
    // SAFETY: called with the GIL held; returns a new reference or NULL with an error set.
    unsafe { ffi::PyFloat_FromDouble(dec(T, c)) }
}

unsafe extern "C" fn setitem<const T: usize>(item: *mut ffi::PyObject, data: *mut c_void, arr: *mut c_void) -> c_int {
    // SAFETY: called with the GIL held and a valid object.
    match unsafe { scalar::object_to_code(T, item) } {
        Some(c) => {
            let size = TYPES[T].size;
            // SAFETY: numpy passes a pointer to one writable element, and its array.
            let c = if unsafe { byte_swapped(arr) } { swapped(c, size) } else { c };
            // SAFETY: as above.
            unsafe { store(data as *mut u8, size, c) };
            0
        }
        None => -1,
    }
}

/// Does `arr` (an array, or numpy's stand-in holding only a descriptor; may be
/// null) store its elements in the other byte order? `ndarray.item()`,
/// `tolist()`, element assignment and `fill` reach getitem/setitem with the
/// array's own bytes, and so do `nonzero` (np.nonzero, count_nonzero); everything
/// else is swapped by numpy beforehand.
///
/// # Safety
/// `arr` is null or points to an array object whose descriptor is set.
unsafe fn byte_swapped(arr: *mut c_void) -> bool {
    if arr.is_null() {
        return false;
    }
    // SAFETY: per the contract.
    unsafe {
        let d = (*(arr as *mut numpy::npyffi::PyArrayObject)).fields.descr;
        if d.is_null() {
            return false;
        }
        let bo = (*d).fields.byteorder as u8;
        if cfg!(target_endian = "little") { bo == b'>' } else { bo == b'<' }
    }
}

/// [`load`] of an element of `arr`, in native order.
///
/// # Safety
/// As [`load`] and [`byte_swapped`].
unsafe fn load_as(p: *const u8, size: usize, arr: *mut c_void) -> u32 {
    // SAFETY: per the contract.
    unsafe {
        let c = load(p, size);
        if byte_swapped(arr) { swapped(c, size) } else { c }
    }
}

/// A code of `size` bytes with its bytes in the other order.
fn swapped(c: u32, size: usize) -> u32 {
    c.swap_bytes() >> (32 - 8 * size)
}

unsafe fn swap_bytes(p: *mut u8, size: usize) {
    // SAFETY: the caller guarantees `size` bytes at `p`.
    unsafe { std::slice::from_raw_parts_mut(p, size).reverse() }
}

unsafe extern "C" fn copyswapn<const T: usize>(
    dst: *mut c_void,
    dstride: npy_intp,
    src: *mut c_void,
    sstride: npy_intp,
    n: npy_intp,
    swap: c_int,
    _arr: *mut c_void,
) {
    let size = TYPES[T].size;
    let d = dst as *mut u8;
    if src.is_null() {
        // No source: swap the destination's elements in place (ndarray.byteswap).
        if swap != 0 {
            for i in 0..n {
                // SAFETY: numpy passes n writable elements at the given stride.
                unsafe { swap_bytes(d.offset(i * dstride), size) };
            }
        }
        return;
    }
    let s = src as *const u8;
    for i in 0..n {
        // SAFETY: numpy passes n elements at the given strides.
        unsafe {
            let dp = d.offset(i * dstride);
            std::ptr::copy(s.offset(i * sstride), dp, size);
            if swap != 0 {
                swap_bytes(dp, size);
            }
        }
    }
}

unsafe extern "C" fn copyswap<const T: usize>(dst: *mut c_void, src: *mut c_void, swap: c_int, _arr: *mut c_void) {
    let size = TYPES[T].size;
    if src.is_null() {
        if swap != 0 {
            // SAFETY: numpy passes one writable element.
            unsafe { swap_bytes(dst as *mut u8, size) };
        }
        return;
    }
    // SAFETY: numpy passes one element at each pointer.
    unsafe {
        std::ptr::copy(src as *const u8, dst as *mut u8, size);
        if swap != 0 {
            swap_bytes(dst as *mut u8, size);
        }
    }
}

/// Total order for sorting: NaN (and NaR) last.
fn order(a: f64, b: f64) -> c_int {
    if a < b {
        -1
    } else if a > b {
        1
    } else if a == b {
        0
    } else {
        match (a.is_nan(), b.is_nan()) {
            (true, false) => 1,
            (false, true) => -1,
            _ => 0,
        }
    }
}

unsafe extern "C" fn compare<const T: usize>(a: *const c_void, b: *const c_void, _arr: *mut c_void) -> c_int {
    let size = TYPES[T].size;
    // SAFETY: numpy passes one element at each pointer.
    let (x, y) = unsafe { (load(a as *const u8, size), load(b as *const u8, size)) };
    order(dec(T, x), dec(T, y))
}

unsafe fn arg_best<const T: usize>(data: *mut c_void, n: npy_intp, out: *mut npy_intp, want_max: bool) -> c_int {
    let size = TYPES[T].size;
    let p = data as *const u8;
    let mut best = 0isize;
    let mut bv = f64::NAN;
    for i in 0..n {
        // SAFETY: numpy passes n contiguous elements.
        let v = dec(T, unsafe { load(p.offset(i * size as isize), size) });
        if v.is_nan() {
            // numpy: the first NaN wins.
            best = i;
            break;
        }
        if i == 0 || (want_max && v > bv) || (!want_max && v < bv) {
            bv = v;
            best = i;
        }
    }
    // SAFETY: numpy passes a valid output pointer.
    unsafe { *out = best as npy_intp };
    0
}

unsafe extern "C" fn argmax<const T: usize>(data: *mut c_void, n: npy_intp, out: *mut npy_intp, _arr: *mut c_void) -> c_int {
    // SAFETY: forwarded from numpy.
    unsafe { arg_best::<T>(data, n, out, true) }
}

unsafe extern "C" fn argmin<const T: usize>(data: *mut c_void, n: npy_intp, out: *mut npy_intp, _arr: *mut c_void) -> c_int {
    // SAFETY: forwarded from numpy.
    unsafe { arg_best::<T>(data, n, out, false) }
}

unsafe extern "C" fn nonzero<const T: usize>(data: *mut c_void, arr: *mut c_void) -> u8 {
    // SAFETY: numpy passes one element of its array (in that array's byte order).
    let v = dec(T, unsafe { load_as(data as *const u8, TYPES[T].size, arr) });
    (v != 0.0) as u8
}

/// `arange`-style fill: element i = start + i * (second - start), rounded.
unsafe extern "C" fn fill<const T: usize>(buffer: *mut c_void, n: npy_intp, _arr: *mut c_void) -> c_int {
    let size = TYPES[T].size;
    let p = buffer as *mut u8;
    if n < 2 {
        return 0;
    }
    // SAFETY: numpy passes n contiguous elements, the first two set.
    unsafe {
        let start = dec(T, load(p, size));
        let delta = dec(T, load(p.add(size), size)) - start;
        for i in 2..n as usize {
            store(p.add(i * size), size, enc(T, start + i as f64 * delta));
        }
    }
    0
}

/// Dot product accumulated in f64, rounded once into the type.
unsafe extern "C" fn dotfunc<const T: usize>(
    ip1: *mut c_void,
    is1: npy_intp,
    ip2: *mut c_void,
    is2: npy_intp,
    op: *mut c_void,
    n: npy_intp,
    _arr: *mut c_void,
) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: numpy passes n elements at the given strides.
    let acc = unsafe { kernels::dot_f64(T, ip1 as *const u8, is1, ip2 as *const u8, is2, n.max(0) as usize) };
    // SAFETY: numpy passes one writable output element.
    unsafe { store(op as *mut u8, TYPES[T].size, kernels::enc_reporting(T, acc)) };
}

fn arrfuncs<const T: usize>(py: Python<'_>) -> *mut PyArray_ArrFuncs {
    // SAFETY: PyArray_ArrFuncs is plain data (pointers and Options); all-zero is valid,
    // and PyArray_InitArrFuncs fills the defaults.
    let f: &'static mut PyArray_ArrFuncs = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    // SAFETY: f is a valid ArrFuncs.
    unsafe { PY_ARRAY_API.PyArray_InitArrFuncs(py, f) };
    f.getitem = Some(getitem::<T>);
    f.setitem = Some(setitem::<T>);
    f.copyswapn = Some(copyswapn::<T>);
    f.copyswap = Some(copyswap::<T>);
    f.compare = Some(compare::<T>);
    f.argmax = Some(argmax::<T>);
    f.argmin = Some(argmin::<T>);
    f.nonzero = Some(nonzero::<T>);
    f.fill = Some(fill::<T>);
    f.dotfunc = Some(dotfunc::<T>);
    f
}

// ---------------------------------------------------------------- registration

fn register_one<const T: usize>(py: Python<'_>, m: &Bound<'_, PyModule>) -> PyResult<()> {
    let ti = &TYPES[T];
    let np = py.import("numpy")?;
    let tp = scalar::make_type(py, T, &np.getattr("generic")?)?;
    TYPE_OBJ[T].store(tp, Ordering::Release);

    let descr_type = np.getattr("dtype")?;
    // SAFETY: a zeroed DescrProto is valid plain data; we fill the fields numpy reads.
    let proto: &'static mut PyArray_DescrProto = Box::leak(Box::new(unsafe { std::mem::zeroed() }));
    // SAFETY: ob_base is a PyObject header; numpy reads only its type (and the
    // refcount is set so the object looks alive).
    unsafe {
        let ob = &mut proto.ob_base as *mut ffi::PyObject;
        (ob as *mut isize).write(1); // ob_refcnt (first word of the header)
        (*ob).ob_type = descr_type.as_ptr() as *mut ffi::PyTypeObject;
    }
    proto.typeobj = tp;
    proto.kind = b'V' as c_char;
    proto.type_ = ti.tchar as c_char;
    // One byte has no byte order ('|', as int8's).
    proto.byteorder = if ti.size == 1 { b'|' } else { b'=' } as c_char;
    proto.flags = 0x40; // NPY_USE_SETITEM: numpy calls setitem for every assignment
    proto.type_num = 0;
    proto.elsize = ti.size as c_int;
    proto.alignment = ti.size as c_int;
    proto.f = arrfuncs::<T>(py);
    // SAFETY: proto is a fully initialised, 'static DescrProto.
    let num = unsafe { PY_ARRAY_API.PyArray_RegisterDataType(py, proto) };
    if num < 0 {
        return Err(PyErr::take(py).unwrap_or_else(|| PyRuntimeError::new_err(format!("registering dtype {} failed", ti.name))));
    }
    TYPE_NUM[T].store(num, Ordering::Release);
    // SAFETY: tp is a live type object (kept alive by the module attribute below).
    let tpo = unsafe { Bound::from_borrowed_ptr(py, tp as *mut ffi::PyObject) };
    m.add(ti.name, tpo)?;
    Ok(())
}

/// The registered dtype of type `t` (new reference).
pub fn descr(py: Python<'_>, t: usize) -> *mut PyArray_Descr {
    // SAFETY: the type number is registered.
    unsafe { PY_ARRAY_API.PyArray_DescrFromType(py, type_num(t)) }
}

fn check(py: Python<'_>, rc: c_int, what: &str) -> PyResult<()> {
    if rc < 0 {
        Err(PyErr::take(py).unwrap_or_else(|| PyRuntimeError::new_err(format!("{what} failed"))))
    } else {
        Ok(())
    }
}

/// The lowp type named `name` and `other`, a dtype of the same itemsize (the
/// arguments of the two registrations below), or None when `other` is that
/// lowp dtype itself.
fn same_encodings<'py>(name: &str, other: Bound<'py, PyAny>) -> PyResult<Option<(usize, Bound<'py, numpy::PyArrayDescr>)>> {
    let Some(t) = TYPES.iter().position(|ti| ti.name == name) else {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("name: unknown lowp dtype {name:?}")));
    };
    let other = other.cast_into::<numpy::PyArrayDescr>().map_err(|_| pyo3::exceptions::PyTypeError::new_err("other: expected a numpy dtype"))?;
    if other.itemsize() != TYPES[t].size {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("other: itemsize {} differs from {name}'s", other.itemsize())));
    }
    Ok((other.num() != type_num(t)).then_some((t, other)))
}

/// Register casts between lowp type `t` and another dtype holding the same
/// encodings (ml_dtypes' type of the same name): bit copies, safe both ways.
#[pyfunction]
fn _register_equivalent(py: Python<'_>, name: &str, other: Bound<'_, PyAny>) -> PyResult<bool> {
    let Some((t, other)) = same_encodings(name, other)? else { return Ok(false) };
    casts::register_bitcopy(py, t, other.as_ptr() as *mut PyArray_Descr, other.num())?;
    Ok(true)
}

/// Register casts between every other lowp type and `other`, a dtype holding
/// the encodings of the lowp type `name` (ml_dtypes' type of that name).
#[pyfunction]
fn _register_cross(py: Python<'_>, name: &str, other: Bound<'_, PyAny>) -> PyResult<()> {
    let Some((u, other)) = same_encodings(name, other)? else { return Ok(()) };
    casts::register_cross(py, u, other.as_ptr() as *mut PyArray_Descr, other.num())
}

/// Register casts between every lowp type and `other`, a one-byte dtype of format
/// `fmt` that has no lowp dtype (ml_dtypes' float8_e3m4, float8_e4m3b11fnuz and its
/// float6 and float4 types), in extra slot `slot`.
#[pyfunction]
fn _register_extra(py: Python<'_>, slot: usize, fmt: crate::spec::Spec, other: Bound<'_, PyAny>) -> PyResult<()> {
    let other = other.cast_into::<numpy::PyArrayDescr>().map_err(|_| pyo3::exceptions::PyTypeError::new_err("other: expected a numpy dtype"))?;
    if other.itemsize() != 1 {
        return Err(pyo3::exceptions::PyValueError::new_err(format!("other: itemsize {} is not 1", other.itemsize())));
    }
    casts::register_extra(py, slot, fmt.0, other.as_ptr() as *mut PyArray_Descr, other.num())
}

/// Type numbers of the registered dtypes, by name.
#[pyfunction]
fn _dtype_numbers(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(py, TYPES.iter().enumerate().map(|(t, ti)| (ti.name, type_num(t))))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    register_one::<0>(py, m)?;
    register_one::<1>(py, m)?;
    register_one::<2>(py, m)?;
    register_one::<3>(py, m)?;
    register_one::<4>(py, m)?;
    register_one::<5>(py, m)?;
    register_one::<6>(py, m)?;
    register_one::<7>(py, m)?;
    register_one::<8>(py, m)?;
    casts::register_all(py)?;
    ufuncs::register_all(py)?;
    matmul::register_all(py)?;
    promote::register_dtype_classes(py)?;
    m.add_function(wrap_pyfunction!(_register_equivalent, m)?)?;
    m.add_function(wrap_pyfunction!(_register_cross, m)?)?;
    m.add_function(wrap_pyfunction!(_register_extra, m)?)?;
    m.add_function(wrap_pyfunction!(_dtype_numbers, m)?)?;
    m.add_function(wrap_pyfunction!(promote::register_common, m)?)?;
    Ok(())
}
