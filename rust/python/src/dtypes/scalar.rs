//! The scalar types: subclasses of `numpy.generic` holding one code.
//!
//! Layout: the object header, then the code in the type's storage width.
//! numpy finds a legacy user scalar's value right after the header (rounded
//! up to the dtype's alignment), which is where it is kept, so numpy's own
//! scalar machinery (`__reduce__`, `PyArray_Scalar`, arithmetic through
//! 0-d arrays) works on it. Arithmetic and comparisons are numpy.generic's
//! (they run the ufunc loops of this module); conversions, repr, hash and
//! construction are defined here.

use std::ffi::{c_int, c_void, CString};

use pyo3::exceptions::{PyOverflowError, PyTypeError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyString, PyTuple, PyType};

use super::kernels::{dec, enc};
use super::{load, store, type_obj, N, TYPES};

/// Byte offset of the code in a scalar object.
const VALUE_OFFSET: usize = std::mem::size_of::<ffi::PyObject>();

/// Index of the lowp scalar type of `ob` (subclasses included), if any.
///
/// # Safety
/// `ob` is a live object; GIL held.
pub unsafe fn scalar_index(ob: *mut ffi::PyObject) -> Option<usize> {
    // SAFETY: ob is live.
    let tp = unsafe { ffi::Py_TYPE(ob) };
    (0..N).find(|&t| tp == type_obj(t)).or_else(|| {
        (0..N).find(|&t| {
            let base = type_obj(t);
            // SAFETY: both are live type objects.
            !base.is_null() && unsafe { ffi::PyType_IsSubtype(tp, base) } != 0
        })
    })
}

unsafe fn type_index(tp: *mut ffi::PyTypeObject) -> Option<usize> {
    (0..N).find(|&t| {
        let base = type_obj(t);
        // SAFETY: both are live type objects.
        !base.is_null() && (tp == base || unsafe { ffi::PyType_IsSubtype(tp, base) } != 0)
    })
}

/// The code held by a lowp scalar of type index `t`.
///
/// # Safety
/// `ob` is a live scalar of type `t`.
pub unsafe fn scalar_code(ob: *mut ffi::PyObject, t: usize) -> u32 {
    // SAFETY: the scalar's storage follows its header.
    unsafe { load((ob as *const u8).add(VALUE_OFFSET), TYPES[t].size) }
}

unsafe fn alloc(tp: *mut ffi::PyTypeObject, t: usize, c: u32) -> *mut ffi::PyObject {
    // SAFETY: tp is a live lowp scalar type (or a subclass); GIL held.
    unsafe {
        let ob = ffi::PyType_GenericAlloc(tp, 0);
        if !ob.is_null() {
            store((ob as *mut u8).add(VALUE_OFFSET), TYPES[t].size, c);
        }
        ob
    }
}

fn type_name(ob: &Bound<'_, PyAny>) -> String {
    ob.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// Convert a Python object into a code of type `t`, rounding to nearest even.
/// On failure a Python error is set and None returned.
///
/// # Safety
/// GIL held; `ob` live.
pub unsafe fn object_to_code(t: usize, ob: *mut ffi::PyObject) -> Option<u32> {
    // Attached through pyo3 (not assumed), so that the references the
    // conversion drops, intermediate errors included, are released here and
    // not deferred to the next call into the module.
    Python::attach(|py| {
        // SAFETY: ob is a live borrowed reference.
        let obj = unsafe { Bound::from_borrowed_ptr(py, ob) };
        match convert(py, t, &obj) {
            Ok(c) => Some(c),
            Err(e) => {
                e.restore(py);
                None
            }
        }
    })
}

/// The float64 `f` nearest to the exact number `x` (an int or a Fraction, which
/// compare with floats exactly), made to stand for x in one more rounding:
/// rounded to odd (its last bit set where it is inexact); for an x beyond
/// float64's range the largest finite float64 of its sign, and for a nonzero x
/// below it the smallest subnormal (every lowp type rounds these as it rounds x:
/// at most 51 bits of precision, a narrower range).
fn sticky(x: &Bound<'_, PyAny>, f: f64) -> PyResult<f64> {
    if f.is_infinite() {
        return Ok(f64::MAX.copysign(f));
    }
    if f.is_nan() {
        return Ok(f);
    }
    if f == 0.0 {
        // Below float64's range: its smallest subnormal of x's sign stands for it
        // (posits never round a nonzero to zero; floats round both to zero).
        let below = x.lt(0.0)?;
        return Ok(if below || x.gt(0.0)? { f64::from_bits(1).copysign(if below { -1.0 } else { 1.0 }) } else { f });
    }
    let bits = f.to_bits();
    if bits & 1 == 1 {
        return Ok(f);
    }
    let above = x.gt(f)?;
    if !above && !x.lt(f)? {
        return Ok(f);
    }
    // One unit toward x: +1 on the bits grows |f|, -1 shrinks it.
    Ok(f64::from_bits(if above == (f > 0.0) { bits + 1 } else { bits - 1 }))
}

pub(super) fn convert(py: Python<'_>, t: usize, obj: &Bound<'_, PyAny>) -> PyResult<u32> {
    // SAFETY: obj is live.
    if let Some(s) = unsafe { scalar_index(obj.as_ptr()) } {
        // SAFETY: obj is a scalar of type s.
        let c = unsafe { scalar_code(obj.as_ptr(), s) };
        return Ok(if s == t { c } else { enc(t, dec(s, c)) });
    }
    let name = TYPES[t].name;
    if obj.is_instance_of::<PyFloat>() {
        return Ok(enc(t, obj.extract::<f64>()?));
    }
    let ndarray = py.import("numpy")?.getattr("ndarray")?;
    if obj.is_instance(&ndarray)? {
        // A 0-d array is its element; anything larger is no single value (as numpy
        // says of its own dtypes, rather than failing on __index__ below).
        if obj.getattr("ndim")?.extract::<usize>()? == 0 {
            // (An object array may hold itself, or a cycle of 0-d arrays: unwrapped in a
            // loop, refused when it meets the first array again or nests past any use.)
            let mut item = obj.get_item(())?;
            for _ in 0..10_000 {
                if !(item.is_instance(&ndarray)? && item.getattr("ndim")?.extract::<usize>()? == 0) {
                    return convert(py, t, &item);
                }
                if item.is(obj) {
                    break;
                }
                item = item.get_item(())?;
            }
            return Err(pyo3::exceptions::PyRecursionError::new_err(format!("{name}: a 0-d object array holding itself (or 0-d arrays nested past 10000 levels)")));
        }
        return Err(pyo3::exceptions::PyValueError::new_err("setting an array element with a sequence."));
    }
    if obj.is_instance_of::<pyo3::types::PyList>() || obj.is_instance_of::<PyTuple>() {
        return Err(pyo3::exceptions::PyValueError::new_err("setting an array element with a sequence."));
    }
    // Integers (Python's, numpy's and anything with __index__): exactly.
    let int = if obj.is_instance_of::<pyo3::types::PyInt>() {
        Some(obj.clone())
    } else if !obj.is_instance_of::<PyString>() && obj.hasattr("__index__")? {
        // SAFETY: obj is live; PyNumber_Index returns a new reference or NULL with an error set.
        let i = unsafe { ffi::PyNumber_Index(obj.as_ptr()) };
        if i.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: i is a new reference to an int.
        Some(unsafe { Bound::from_owned_ptr(py, i) })
    } else {
        None
    };
    if let Some(i) = int {
        let f = match i.extract::<f64>() {
            Ok(v) => v,
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => {
                if i.lt(0)? {
                    f64::NEG_INFINITY
                } else {
                    f64::INFINITY
                }
            }
            Err(e) => Err(e)?,
        };
        return Ok(enc(t, sticky(&i, f)?));
    }
    if obj.is_instance_of::<PyString>() {
        let s: String = obj.extract()?;
        let f = match py.get_type::<PyFloat>().call1((s.trim(),)) {
            Ok(f) => f.extract::<f64>()?,
            Err(_) => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "{name}: could not convert string {s:?} to a number"
                )))
            }
        };
        // A decimal with more digits than a float64 holds: its exact value decides. Past
        // float64's range (a zero or infinite f) a Decimal says on which side of zero it
        // lies without expanding the exponent, which a Fraction would (1e9999999: minutes).
        let exact = if f.is_finite() && f != 0.0 {
            py.import("fractions")?.getattr("Fraction")?.call1((s.trim(),)).ok()
        } else {
            match py.import("decimal")?.getattr("Decimal")?.call1((s.trim(),)) {
                Ok(d) if d.call_method0("is_finite")?.is_truthy()? => Some(d),
                Ok(_) => None,
                // An exponent beyond even Decimal's range (1e-10**19): the digits before
                // it say whether the number is zero; one that is not lies past float64's
                // range on f's side, and stands in as its smallest or largest float64
                // (posits round those to minpos or maxpos, never to 0 or NaR).
                Err(_) => {
                    let digits = s.trim().split(['e', 'E']).next().unwrap_or("");
                    if digits.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
                        let g = if f == 0.0 { f64::from_bits(1) } else { f64::MAX };
                        return Ok(enc(t, g.copysign(f)));
                    }
                    None
                }
            }
        };
        return Ok(enc(t, if let Some(q) = exact { sticky(&q, f)? } else { f }));
    }
    let np = py.import("numpy")?;
    if obj.is_instance(&np.getattr("complexfloating")?)? {
        // numpy's complex scalars (np.complex128 is a Python complex too): the real part,
        // with numpy's warning, as numpy's own floats take them (a longdouble real part
        // then rounds once).
        let warning = np.getattr("exceptions")?.getattr("ComplexWarning")?;
        PyErr::warn(py, &warning, c"Casting complex values to real discards the imaginary part", 1)?;
        return convert(py, t, &obj.getattr("real")?);
    }
    if obj.is_instance_of::<pyo3::types::PyComplex>() {
        return Err(PyTypeError::new_err(format!(
            "{name}: cannot convert complex to {name}; take .real first (accepted: real numbers and numeric strings)"
        )));
    }
    // SAFETY: obj is live; PyNumber_Float returns a new reference or NULL with an error set.
    let f = unsafe { ffi::PyNumber_Float(obj.as_ptr()) };
    if f.is_null() {
        let e = PyErr::fetch(py);
        if e.is_instance_of::<PyOverflowError>(py) && obj.hasattr("__lt__")? {
            // A number past float64's range (a Fraction of huge terms): the largest float64
            // of its sign stands for it, as for such ints (inf, or the largest posit).
            if let (Ok(neg), Ok(pos)) = (obj.lt(0), obj.gt(0)) {
                if neg || pos {
                    return Ok(enc(t, f64::MAX.copysign(if neg { -1.0 } else { 1.0 })));
                }
            }
        }
        if e.is_instance_of::<PyTypeError>(py) {
            return Err(PyTypeError::new_err(format!(
                "{name}: cannot convert {} to {name}; accepted: real numbers and numeric strings",
                type_name(obj)
            )));
        }
        return Err(e);
    }
    // SAFETY: f is a new reference to a float.
    let f = unsafe { Bound::from_owned_ptr(py, f) }.extract::<f64>()?;
    // numpy's longdouble (wider than float64, compared with it exactly): rounded to
    // odd, so that the rounding into the type is the one rounding of its value.
    // SAFETY: numpy's API table is loaded (the module registered its dtypes); obj is live.
    let longdouble = unsafe {
        let tp = numpy::npyffi::get_type_object(py, numpy::npyffi::NpyTypes::PyLongDoubleArrType_Type);
        ffi::PyObject_TypeCheck(obj.as_ptr(), tp) != 0
    };
    if longdouble && !(f.is_infinite() && obj.eq(f)?) {
        return Ok(enc(t, sticky(obj, f)?));
    }
    // Fractions and Decimals: their exact values, as for strings (a float64 first would
    // round twice), compared in place where past float64's range.
    let exact = py.import("fractions")?.getattr("Fraction")?;
    let decimal = py.import("decimal")?.getattr("Decimal")?;
    if (obj.is_instance(&exact)? || obj.is_instance(&decimal)?) && !f.is_nan() && !(f.is_infinite() && obj.eq(f)?) {
        let q = if f.is_finite() && f != 0.0 { exact.call1((obj,))? } else { obj.clone() };
        return Ok(enc(t, sticky(&q, f)?));
    }
    Ok(enc(t, f))
}

/// The shortest decimal that rounds back to the same code: its digits in
/// Rust's exponent form (`1.03e3`), and its value as an f64 whose Python repr
/// prints exactly those digits (None for zeros, infinities and NaN).
fn shortest(t: usize, c: u32) -> Option<(String, f64)> {
    let v = dec(t, c);
    if !v.is_finite() || v == 0.0 {
        return None;
    }
    for digits in 1..=17 {
        // The decimals of `digits` digits nearest v and on either side of it: where the
        // spacing changes (at a power of two) the one nearest v may round to the
        // neighbour of the narrower side while the one beyond it comes back
        // (float8_e4m3fn's 0.125 is 0.13, not 0.12). The closest that comes back wins.
        let s = format!("{:.*e}", digits - 1, v);
        let (m, e) = s.split_once('e')?;
        let mi: i64 = m.chars().filter(char::is_ascii_digit).collect::<String>().parse().ok()?;
        let scale = e.parse::<i32>().ok()? - (digits as i32 - 1);
        let sign = if v < 0.0 { "-" } else { "" };
        let mut best: Option<(String, f64)> = None;
        // (The spacing changes only at powers of two: elsewhere the nearest decides.)
        let pow2 = v.to_bits() & ((1u64 << 52) - 1) == 0;
        let sides = if pow2 { 3 } else { 1 };
        for cand in [mi, mi - 1, mi + 1].into_iter().take(sides).filter(|&q| q > 0) {
            let digs = cand.to_string();
            let kept = digs.trim_end_matches('0');
            let exp = scale + digs.len() as i32 - 1;
            let text = if kept.len() > 1 { format!("{sign}{}.{}e{exp}", &kept[..1], &kept[1..]) } else { format!("{sign}{kept}e{exp}") };
            let Ok(p) = text.parse::<f64>() else { continue };
            if enc(t, p) == c && best.as_ref().is_none_or(|(_, q)| (p - v).abs() < (q - v).abs()) {
                best = Some((text, p));
            }
        }
        if best.is_some() {
            return best;
        }
    }
    Some((format!("{v:e}"), v))
}

/// The scalar's repr and str, as numpy prints its floats: the shortest digits
/// that round back to the value, positional from 1e-4 to below 1e16 unless
/// that would append zeros the value does not have, else scientific with at
/// least two exponent digits. Integers below 1e6 whose shortest digits would
/// need those zeros print exactly instead (64 and 1024 in float8_e5m2, whose
/// shortest digits are 6e1 and 1e3, are `64.0` and `1024.0`; numpy's rule
/// alone would print `6e+01`).
pub fn repr_string(t: usize, c: u32) -> String {
    let v = dec(t, c);
    let Some((s, p)) = shortest(t, c) else {
        return if v.is_nan() {
            "nan".into()
        } else if v.is_infinite() {
            (if v < 0.0 { "-inf" } else { "inf" }).into()
        } else if v.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    };
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits = mant.bytes().filter(u8::is_ascii_digit).count() as i32;
    let a = v.abs();
    let padded = exp >= digits && p != v;
    if padded && a < 1e6 && v.fract() == 0.0 {
        return format!("{}.0", v as i64);
    }
    if (1e-4..1e16).contains(&a) && !padded {
        // Python's repr of p: those digits, positional.
        return format!("{}", PyFloatRepr(p));
    }
    format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

/// Python's float repr (shortest round-trip digits, positional with `.0`).
struct PyFloatRepr(f64);

impl std::fmt::Display for PyFloatRepr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Rust's Display of an f64 prints its shortest round-trip digits
        // positionally, as Python's repr does in this range; Python adds ".0"
        // to integers.
        let s = format!("{}", self.0);
        if s.contains('.') {
            f.write_str(&s)
        } else {
            write!(f, "{s}.0")
        }
    }
}

/// Run a slot's body attached through pyo3 (numpy and CPython call slots
/// attached already; the guard makes pyo3 release dropped references at once
/// instead of deferring them), turning errors and panics into a set exception.
fn guard<F: FnOnce(Python<'_>) -> PyResult<*mut ffi::PyObject>>(f: F) -> *mut ffi::PyObject {
    Python::attach(|py| match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(py))) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            e.restore(py);
            std::ptr::null_mut()
        }
        Err(_) => {
            pyo3::exceptions::PySystemError::new_err("lowp: internal error in a scalar slot").restore(py);
            std::ptr::null_mut()
        }
    })
}

unsafe fn self_value(ob: *mut ffi::PyObject) -> (usize, u32) {
    // SAFETY: slots of lowp scalar types only receive lowp scalars as self.
    unsafe {
        let t = scalar_index(ob).expect("a lowp scalar");
        (t, scalar_code(ob, t))
    }
}

unsafe extern "C" fn tp_repr(ob: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guard(|py| {
        // SAFETY: ob is a lowp scalar.
        let (t, c) = unsafe { self_value(ob) };
        Ok(pyo3::types::PyString::new(py, &repr_string(t, c)).into_ptr())
    })
}

unsafe extern "C" fn tp_hash(ob: *mut ffi::PyObject) -> ffi::Py_hash_t {
    Python::attach(|py| {
        // SAFETY: ob is a lowp scalar.
        let (t, c) = unsafe { self_value(ob) };
        let v = dec(t, c);
        if v.is_nan() {
            // As Python's and numpy's NaN: the object's identity (the hash of a
            // temporary float would change from call to call).
            let y = (ob as usize).rotate_right(4) as ffi::Py_hash_t;
            return if y == -1 { -2 } else { y };
        }
        match PyFloat::new(py, v).hash() {
            Ok(h) => h as ffi::Py_hash_t,
            Err(e) => {
                e.restore(py);
                -1
            }
        }
    })
}

/// numpy.generic's rich comparison (through 0-d arrays and the ufunc loops).
/// Defining `tp_hash` stops CPython inheriting it, so it is forwarded here.
unsafe extern "C" fn tp_richcompare(a: *mut ffi::PyObject, b: *mut ffi::PyObject, op: c_int) -> *mut ffi::PyObject {
    let base = GENERIC.load(std::sync::atomic::Ordering::Acquire);
    // SAFETY: base is numpy.generic (a live static type) whose slot has this signature.
    unsafe {
        let f = ffi::PyType_GetSlot(base, ffi::Py_tp_richcompare);
        if f.is_null() {
            return ffi::Py_NewRef(ffi::Py_NotImplemented());
        }
        let f: ffi::richcmpfunc = std::mem::transmute(f);
        let r = f(a, b, op);
        // `==` and `!=` with what numpy cannot compare (a string, say): no
        // answer, so Python falls back to identity (False, True) as for
        // numpy's own scalars; the ordering operators keep the TypeError.
        if r.is_null() && (op == ffi::Py_EQ || op == ffi::Py_NE) && ffi::PyErr_ExceptionMatches(ffi::PyExc_TypeError) != 0 {
            ffi::PyErr_Clear();
            return ffi::Py_NewRef(ffi::Py_NotImplemented());
        }
        r
    }
}

static GENERIC: std::sync::atomic::AtomicPtr<ffi::PyTypeObject> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());

unsafe extern "C" fn nb_float(ob: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guard(|py| {
        // SAFETY: ob is a lowp scalar.
        let (t, c) = unsafe { self_value(ob) };
        Ok(PyFloat::new(py, dec(t, c)).into_ptr())
    })
}

unsafe extern "C" fn nb_int(ob: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guard(|_py| {
        // SAFETY: ob is a lowp scalar.
        let (t, c) = unsafe { self_value(ob) };
        // SAFETY: PyLong_FromDouble returns a new reference or NULL with an error set.
        let r = unsafe { ffi::PyLong_FromDouble(dec(t, c)) };
        if r.is_null() {
            // SAFETY: GIL held.
            return Err(PyErr::fetch(unsafe { Python::assume_attached() }));
        }
        Ok(r)
    })
}

unsafe extern "C" fn nb_bool(ob: *mut ffi::PyObject) -> c_int {
    // SAFETY: ob is a lowp scalar.
    let (t, c) = unsafe { self_value(ob) };
    (dec(t, c) != 0.0) as c_int
}

/// `format(x, spec)`: as the float of the same value (numpy.generic would
/// format the repr string and reject float specs such as ".3f").
unsafe extern "C" fn format_method(ob: *mut ffi::PyObject, spec: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guard(|py| {
        // SAFETY: ob is a lowp scalar; spec is a borrowed argument.
        let (t, c) = unsafe { self_value(ob) };
        let spec = unsafe { Bound::from_borrowed_ptr(py, spec) };
        let spec: String = spec.extract()?;
        if spec.is_empty() {
            return Ok(pyo3::types::PyString::new(py, &repr_string(t, c)).into_ptr());
        }
        // Without a presentation type or a precision ("^10", "+", ","), Python formats a
        // float by its repr's digits: here the repr's, through the float64 they parse to
        // (the value's own float64 would print all its digits).
        let chars: Vec<char> = spec.chars().collect();
        let align = |i: usize| chars.get(i).is_some_and(|ch| "<>=^".contains(*ch));
        let rest = &chars[if align(1) { 2 } else if align(0) { 1 } else { 0 }..];
        let typed = rest.last().is_some_and(|ch| "eEfFgGn%".contains(*ch));
        let v = if !typed && !rest.contains(&'.') { repr_string(t, c).parse::<f64>().unwrap_or(dec(t, c)) } else { dec(t, c) };
        Ok(PyFloat::new(py, v).call_method1("__format__", (spec,))?.into_ptr())
    })
}

unsafe extern "C" fn tp_new(sub: *mut ffi::PyTypeObject, args: *mut ffi::PyObject, kwds: *mut ffi::PyObject) -> *mut ffi::PyObject {
    guard(|py| {
        // SAFETY: sub is the type being instantiated, a lowp scalar type or subclass.
        let t = unsafe { type_index(sub) }.ok_or_else(|| PyTypeError::new_err("not a lowp scalar type"))?;
        let name = TYPES[t].name;
        // numpy finds a scalar's dtype through the first base of its type's MRO: a
        // subclass whose next base is not a lowp type would be read as another
        // dtype's scalar (object: its bytes taken as a pointer).
        if sub != super::type_obj(t) {
            // SAFETY: sub and the lowp type are live type objects.
            let (sub_type, base) = unsafe {
                (
                    Bound::from_borrowed_ptr(py, sub as *mut ffi::PyObject).cast_into::<PyType>()?,
                    Bound::from_borrowed_ptr(py, super::type_obj(t) as *mut ffi::PyObject).cast_into::<PyType>()?,
                )
            };
            // (A subclass's MRO holds at least itself and the lowp type.)
            let next = sub_type.mro().get_item(1)?.cast_into::<PyType>()?;
            if !next.is_subclass(&base)? {
                return Err(PyTypeError::new_err(format!(
                    "{}: a subclass of {name} must list a {name} type as its first base, got {}",
                    sub_type.getattr("__name__")?,
                    next.getattr("__name__")?
                )));
            }
        }
        // SAFETY: kwds is NULL or a dict.
        if !kwds.is_null() && unsafe { ffi::PyDict_Size(kwds) } != 0 {
            return Err(PyTypeError::new_err(format!("{name}() takes no keyword arguments")));
        }
        // SAFETY: args is a tuple.
        let args = unsafe { Bound::from_borrowed_ptr(py, args) }.cast_into::<PyTuple>()?;
        let c = match args.len() {
            0 => 0,
            1 => {
                let x = args.get_item(0)?;
                let np = py.import("numpy")?;
                let array = x.is_instance(&np.getattr("ndarray")?)? && x.getattr("ndim")?.extract::<usize>()? > 0;
                if array || x.is_instance_of::<pyo3::types::PyList>() || x.is_instance_of::<PyTuple>() {
                    // As numpy's own scalar types: an array argument converts the array
                    // (a 0-d one gives a scalar, below), and a list or tuple builds one.
                    let dt = np.getattr("dtype")?.call1((unsafe { Bound::from_borrowed_ptr(py, sub as *mut ffi::PyObject) },))?;
                    let r = if array { x.call_method1("astype", (dt,))? } else { np.getattr("array")?.call1((x, dt))? };
                    return Ok(r.into_ptr());
                }
                convert(py, t, &x)?
            }
            n => return Err(PyTypeError::new_err(format!("{name}() takes at most 1 argument ({n} given)"))),
        };
        // SAFETY: sub is a lowp scalar type or a subclass.
        let ob = unsafe { alloc(sub, t, c) };
        if ob.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(ob)
    })
}

unsafe extern "C" fn tp_dealloc(ob: *mut ffi::PyObject) {
    // SAFETY: ob is a dying instance of a heap type allocated by PyType_GenericAlloc
    // (non-GC, so PyObject_Free releases it); heap-type instances own a type reference.
    unsafe {
        let tp = ffi::Py_TYPE(ob);
        // The type's own tp_free: a Python subclass is garbage-collected, its
        // memory starting before `ob` (PyObject_GC_Del frees that).
        let free = ffi::PyType_GetSlot(tp, ffi::Py_tp_free);
        if free.is_null() {
            ffi::PyObject_Free(ob as *mut c_void);
        } else {
            let free: ffi::freefunc = std::mem::transmute(free);
            free(ob as *mut c_void);
        }
        ffi::Py_DECREF(tp as *mut ffi::PyObject);
    }
}

/// Create the scalar type of `t`, a subclass of `base` (numpy.generic).
pub fn make_type(py: Python<'_>, t: usize, base: &Bound<'_, PyAny>) -> PyResult<*mut ffi::PyTypeObject> {
    let ti = &TYPES[t];
    GENERIC.store(base.as_ptr() as *mut ffi::PyTypeObject, std::sync::atomic::Ordering::Release);
    let name: &'static CString = Box::leak(Box::new(CString::new(format!("lowp.{}", ti.name)).unwrap()));
    let doc: &'static CString = Box::leak(Box::new(CString::new(ti.doc).unwrap()));
    let slot = |slot: c_int, pfunc: *mut c_void| ffi::PyType_Slot { slot, pfunc };
    let methods: &'static mut [ffi::PyMethodDef] = Box::leak(
        vec![
            ffi::PyMethodDef {
                ml_name: c"__format__".as_ptr(),
                ml_meth: ffi::PyMethodDefPointer { PyCFunction: format_method },
                ml_flags: ffi::METH_O,
                ml_doc: c"Format as the float of the same value.".as_ptr(),
            },
            ffi::PyMethodDef::zeroed(),
        ]
        .into_boxed_slice(),
    );
    let slots: &'static mut [ffi::PyType_Slot] = Box::leak(
        vec![
            slot(ffi::Py_tp_new, tp_new as *mut c_void),
            slot(ffi::Py_tp_repr, tp_repr as *mut c_void),
            slot(ffi::Py_tp_str, tp_repr as *mut c_void),
            slot(ffi::Py_tp_hash, tp_hash as *mut c_void),
            slot(ffi::Py_tp_richcompare, tp_richcompare as *mut c_void),
            slot(ffi::Py_tp_dealloc, tp_dealloc as *mut c_void),
            slot(ffi::Py_tp_alloc, ffi::PyType_GenericAlloc as *mut c_void),
            slot(ffi::Py_tp_free, ffi::PyObject_Free as *mut c_void),
            slot(ffi::Py_nb_float, nb_float as *mut c_void),
            slot(ffi::Py_nb_int, nb_int as *mut c_void),
            slot(ffi::Py_nb_bool, nb_bool as *mut c_void),
            slot(ffi::Py_tp_doc, doc.as_ptr() as *mut c_void),
            slot(ffi::Py_tp_methods, methods.as_mut_ptr() as *mut c_void),
            slot(0, std::ptr::null_mut()),
        ]
        .into_boxed_slice(),
    );
    let spec: &'static mut ffi::PyType_Spec = Box::leak(Box::new(ffi::PyType_Spec {
        name: name.as_ptr(),
        basicsize: (VALUE_OFFSET + 8) as c_int,
        itemsize: 0,
        flags: (ffi::Py_TPFLAGS_DEFAULT | ffi::Py_TPFLAGS_BASETYPE) as _,
        slots: slots.as_mut_ptr(),
    }));
    let bases = PyTuple::new(py, [base])?;
    // SAFETY: spec and its strings/slots are 'static; bases is a tuple of types.
    let tp = unsafe { ffi::PyType_FromSpecWithBases(spec, bases.as_ptr()) };
    if tp.is_null() {
        return Err(PyErr::fetch(py));
    }
    // The type lives for the rest of the process (the module and numpy hold it).
    Ok(tp as *mut ffi::PyTypeObject)
}
