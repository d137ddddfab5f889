//! Ufunc loops: one flat table of (numpy ufunc name, operation), four strided
//! loop helpers (binary, unary, predicate, relation) that gather a block of
//! codes, run the block kernel of [`super::kernels`] and scatter the results.
//! The loop's `data` pointer carries (type, operation), so every type shares
//! the same four functions. Every loop runs under [`lowp_core::fpenv::Clean`]
//! (flush-to-zero and the like cleared, as for lowp's functions).

use std::ffi::{c_char, c_int, c_void};

use numpy::npyffi::{npy_intp, PyUFuncObject, NPY_TYPES, PY_UFUNC_API};
use pyo3::prelude::*;

use super::kernels::{self, Bin, Pred, Rel, Un, BLOCK};
use super::{check, load, store, type_num, N, TYPES};

#[derive(Clone, Copy)]
enum Op {
    Bin(Bin),
    Un(Un),
    Pred(Pred),
    Rel(Rel),
}

/// Every ufunc with a loop for every lowp type.
const TABLE: &[(&str, Op)] = &[
    ("add", Op::Bin(Bin::Add)),
    ("subtract", Op::Bin(Bin::Sub)),
    ("multiply", Op::Bin(Bin::Mul)),
    ("divide", Op::Bin(Bin::Div)),
    ("true_divide", Op::Bin(Bin::Div)),
    ("floor_divide", Op::Bin(Bin::FloorDiv)),
    ("remainder", Op::Bin(Bin::Rem)),
    ("fmod", Op::Bin(Bin::Fmod)),
    ("power", Op::Bin(Bin::Pow)),
    ("maximum", Op::Bin(Bin::Max)),
    ("minimum", Op::Bin(Bin::Min)),
    ("fmax", Op::Bin(Bin::FMax)),
    ("fmin", Op::Bin(Bin::FMin)),
    ("copysign", Op::Bin(Bin::CopySign)),
    ("nextafter", Op::Bin(Bin::NextAfter)),
    ("arctan2", Op::Bin(Bin::Arctan2)),
    ("hypot", Op::Bin(Bin::Hypot)),
    ("heaviside", Op::Bin(Bin::Heaviside)),
    ("logaddexp", Op::Bin(Bin::LogAddExp)),
    ("logaddexp2", Op::Bin(Bin::LogAddExp2)),
    ("negative", Op::Un(Un::Neg)),
    ("positive", Op::Un(Un::Pos)),
    ("absolute", Op::Un(Un::Abs)),
    ("fabs", Op::Un(Un::Abs)),
    ("conjugate", Op::Un(Un::Pos)),
    ("sign", Op::Un(Un::Sign)),
    ("sqrt", Op::Un(Un::Sqrt)),
    ("square", Op::Un(Un::Square)),
    ("reciprocal", Op::Un(Un::Recip)),
    ("exp", Op::Un(Un::Exp)),
    ("exp2", Op::Un(Un::Exp2)),
    ("expm1", Op::Un(Un::Expm1)),
    ("log", Op::Un(Un::Log)),
    ("log2", Op::Un(Un::Log2)),
    ("log10", Op::Un(Un::Log10)),
    ("log1p", Op::Un(Un::Log1p)),
    ("sin", Op::Un(Un::Sin)),
    ("cos", Op::Un(Un::Cos)),
    ("tan", Op::Un(Un::Tan)),
    ("tanh", Op::Un(Un::Tanh)),
    ("arctan", Op::Un(Un::Arctan)),
    ("sinh", Op::Un(Un::Sinh)),
    ("cosh", Op::Un(Un::Cosh)),
    ("arcsin", Op::Un(Un::Arcsin)),
    ("arccos", Op::Un(Un::Arccos)),
    ("arcsinh", Op::Un(Un::Arcsinh)),
    ("arccosh", Op::Un(Un::Arccosh)),
    ("arctanh", Op::Un(Un::Arctanh)),
    ("cbrt", Op::Un(Un::Cbrt)),
    ("deg2rad", Op::Un(Un::Deg2Rad)),
    ("rad2deg", Op::Un(Un::Rad2Deg)),
    ("radians", Op::Un(Un::Deg2Rad)),
    ("degrees", Op::Un(Un::Rad2Deg)),
    ("floor", Op::Un(Un::Floor)),
    ("ceil", Op::Un(Un::Ceil)),
    ("rint", Op::Un(Un::Rint)),
    ("trunc", Op::Un(Un::Trunc)),
    ("spacing", Op::Un(Un::Spacing)),
    ("isnan", Op::Pred(Pred::IsNan)),
    ("isinf", Op::Pred(Pred::IsInf)),
    ("isfinite", Op::Pred(Pred::IsFinite)),
    ("signbit", Op::Pred(Pred::SignBit)),
    ("logical_not", Op::Pred(Pred::LogicalNot)),
    ("equal", Op::Rel(Rel::Eq)),
    ("not_equal", Op::Rel(Rel::Ne)),
    ("less", Op::Rel(Rel::Lt)),
    ("less_equal", Op::Rel(Rel::Le)),
    ("greater", Op::Rel(Rel::Gt)),
    ("greater_equal", Op::Rel(Rel::Ge)),
    ("logical_and", Op::Rel(Rel::And)),
    ("logical_or", Op::Rel(Rel::Or)),
    ("logical_xor", Op::Rel(Rel::Xor)),
];

struct LoopData<O> {
    t: usize,
    op: O,
}

/// Gather `m` codes from a strided pointer.
///
/// # Safety
/// `p` addresses `m` elements of `size` bytes at stride `s`.
#[inline(always)]
unsafe fn gather(p: *const u8, s: isize, size: usize, out: &mut [u32]) {
    for (j, o) in out.iter_mut().enumerate() {
        // SAFETY: see the function contract.
        *o = unsafe { load(p.offset(j as isize * s), size) };
    }
}

/// # Safety
/// `p` addresses `m` writable elements of `size` bytes at stride `s`.
#[inline(always)]
unsafe fn scatter(p: *mut u8, s: isize, size: usize, src: &[u32]) {
    for (j, c) in src.iter().enumerate() {
        // SAFETY: see the function contract.
        unsafe { store(p.offset(j as isize * s), size, *c) };
    }
}

/// Does the input range `p` (stride `sp`) share memory with the output range
/// `o` (stride `so`) other than element for element (in place is fine)?
fn overlaps(p: *const u8, sp: isize, o: *mut u8, so: isize, n: usize, size: usize) -> bool {
    // In place element for element is fine; a zero stride in place (a reduction) is not.
    if n <= 1 || (std::ptr::eq(p, o) && sp == so && sp != 0) {
        return false;
    }
    let span = |start: *const u8, s: isize| {
        let first = start as isize;
        let last = first + s * (n as isize - 1);
        (first.min(last), first.max(last) + size as isize)
    };
    let (a0, a1) = span(p, sp);
    let (b0, b1) = span(o as *const u8, so);
    a0 < b1 && b0 < a1
}

/// # Safety
/// numpy's loop contract: `args`, `dims`, `steps` describe `dims[0]` elements;
/// `data` is a leaked `LoopData` made by `register_all`.
unsafe extern "C" fn loop_bin(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let d = &*(data as *const LoopData<Bin>);
        let size = TYPES[d.t].size;
        let n = *dims as usize;
        let (a, b, o) = (*args as *const u8, *args.add(1) as *const u8, *args.add(2) as *mut u8);
        let (sa, sb, so) = (*steps, *steps.add(1), *steps.add(2));
        if std::ptr::eq(a, o) && sa == 0 && so == 0 && matches!(d.op, Bin::Add | Bin::Sub | Bin::Mul | Bin::Div) {
            return reduce(d.t, d.op, o, b, sb, n);
        }
        if let Some(tab) = kernels::bin_table(d.t, d.op) {
            // 8-bit types: one lookup per pair (reductions included: each step reads the
            // last result), the entry's high byte its exceptions.
            let mut raised = 0u16;
            for i in 0..n as isize {
                let x = *a.offset(i * sa) as usize;
                let y = *b.offset(i * sb) as usize;
                // Codes are bytes: x << 8 | y < 65536, the table's length.
                let e = *tab.get_unchecked(x << 8 | y);
                *o.offset(i * so) = e as u8;
                raised |= e;
            }
            kernels::raise_fp((raised >> 8) as u32);
            return;
        }
        if d.t == kernels::BF16
            && matches!(d.op, Bin::Add | Bin::Sub | Bin::Mul | Bin::Div)
            && (sa, sb, so) == (2, 2, 2)
            && !overlaps(a, sa, o, so, n, size)
            && !overlaps(b, sb, o, so, n, size)
        {
            // Contiguous, and the output is an input itself or apart from both: vectorized.
            return kernels::bf16_arith(d.op, a as *const u16, b as *const u16, o as *mut u16, n);
        }
        if d.t == kernels::BF16
            && matches!(d.op, Bin::Add | Bin::Sub | Bin::Mul | Bin::Div)
            && so == 2
            && ((sa, sb) == (0, 2) || (sa, sb) == (2, 0))
            && !overlaps(a, sa, o, so, n, size)
            && !overlaps(b, sb, o, so, n, size)
        {
            // One operand a scalar (`x * 0.5`: numpy passes it at stride 0): the vectorized
            // loop against a block of its copies.
            const SPAN: usize = 4096;
            let fill = [(if sa == 0 { a } else { b } as *const u16).read_unaligned(); SPAN];
            let mut i = 0;
            while i < n {
                let m = SPAN.min(n - i);
                let (pa, pb) = if sa == 0 { (fill.as_ptr(), (b as *const u16).add(i)) } else { ((a as *const u16).add(i), fill.as_ptr()) };
                kernels::bf16_arith(d.op, pa, pb, (o as *mut u16).add(i), m);
                i += m;
            }
            return;
        }
        if d.t == kernels::BF16 && matches!(d.op, Bin::Add | Bin::Sub | Bin::Mul | Bin::Div) {
            // Strided or overlapping: element by element in order (reductions too).
            return kernels::bf16_arith_strided(d.op, a, sa, b, sb, o, so, n);
        }
        if overlaps(a, sa, o, so, n, size) || overlaps(b, sb, o, so, n, size) {
            // Reductions and accumulations (`np.add.reduce`, `np.cumsum`) pass the output
            // as an input shifted by one step: each result feeds the next, so go one by one.
            let mut r = [0u32];
            for i in 0..n as isize {
                let x = [load(a.offset(i * sa), size)];
                let y = [load(b.offset(i * sb), size)];
                kernels::binary(d.t, d.op, &x, &y, &mut r);
                store(o.offset(i * so), size, r[0]);
            }
            return;
        }
        let (mut ca, mut cb, mut co) = ([0u32; BLOCK], [0u32; BLOCK], [0u32; BLOCK]);
        let mut i = 0;
        while i < n {
            let m = BLOCK.min(n - i);
            let k = i as isize;
            gather(a.offset(k * sa), sa, size, &mut ca[..m]);
            gather(b.offset(k * sb), sb, size, &mut cb[..m]);
            kernels::binary(d.t, d.op, &ca[..m], &cb[..m], &mut co[..m]);
            scatter(o.offset(k * so), so, size, &co[..m]);
            i += m;
        }
    }
}

/// A reduction's inner loop (`np.add.reduce`, `sum`, `mean`, `prod`): the
/// output `o` is the first operand at stride 0. As numpy's float16 loops
/// accumulate such a loop in float32 and round once, the `n` operands at `b`
/// (stride `sb`) are combined in float64 and the result rounded once into the
/// type: one rounding per inner loop instead of one per element, so a long
/// bfloat16 sum does not stall at 256.
///
/// # Safety
/// `o` addresses one element of type `t`, read and written; `b` addresses `n`
/// elements at byte stride `sb`.
unsafe fn reduce(t: usize, op: Bin, o: *mut u8, b: *const u8, sb: isize, n: usize) {
    let size = TYPES[t].size;
    // SAFETY: see the function contract.
    unsafe {
        let first = kernels::dec(t, load(o, size));
        let v = match op {
            // Sums of a format's values stay far inside float64's range.
            Bin::Add => first + kernels::sum_f64(t, b, sb, n),
            Bin::Sub => first - kernels::sum_f64(t, b, sb, n),
            _ => {
                // Products and quotients as m * 2**e, m renormalised to [0.5, 1) after
                // every step: no float64 overflow or underflow along the way (so no
                // status flags a posit should not raise), a product that leaves
                // float64's range and comes back is right, and zeros, infinities and
                // NaN meet each other as they would.
                let (mut m, mut e) = (first, 0i64);
                for i in 0..n as isize {
                    let y = kernels::dec(t, load(b.offset(i * sb), size));
                    m = if op == Bin::Mul { m * y } else { m / y };
                    if m != 0.0 && m.is_finite() {
                        let (f, k) = kernels::frexp(m);
                        (m, e) = (f, e + k as i64);
                    }
                }
                if m == 0.0 || !m.is_finite() {
                    m
                } else if e > 1000 {
                    // Past every type's range: overflow (posits: maxpos).
                    f64::MAX.copysign(m)
                } else if e < -1000 {
                    // Below it: zero (posits: minpos, never zero).
                    if kernels::is_posit(t) { f64::from_bits(1).copysign(m) } else { 0f64.copysign(m) }
                } else {
                    m * 2f64.powi(e as i32)
                }
            }
        };
        store(o, size, kernels::enc_reporting(t, v));
    }
}

/// # Safety
/// As [`loop_bin`].
unsafe extern "C" fn loop_un(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let d = &*(data as *const LoopData<Un>);
        let size = TYPES[d.t].size;
        let n = *dims as usize;
        let (a, o) = (*args as *const u8, *args.add(1) as *mut u8);
        let (sa, so) = (*steps, *steps.add(1));
        if let Some(tab) = kernels::un_table(d.t, d.op) {
            // Types of at most 16 bits: one lookup per element, the exceptions above the code.
            match tab {
                kernels::Table::Byte(e) => {
                    let mut raised = 0u16;
                    for i in 0..n as isize {
                        let v = *e.get_unchecked(*a.offset(i * sa) as usize);
                        *o.offset(i * so) = v as u8;
                        raised |= v;
                    }
                    kernels::raise_fp((raised >> 8) as u32);
                }
                kernels::Table::Half(e) => {
                    // (16-bit codes: indices below 65536, the table's length.)
                    let mut raised = 0u32;
                    for i in 0..n as isize {
                        let c = (a.offset(i * sa) as *const u16).read_unaligned() as usize;
                        let v = *e.get_unchecked(c);
                        (o.offset(i * so) as *mut u16).write_unaligned(v as u16);
                        raised |= v;
                    }
                    kernels::raise_fp(raised >> 16);
                }
            }
            return;
        }
        let (mut ca, mut co) = ([0u32; BLOCK], [0u32; BLOCK]);
        let mut i = 0;
        while i < n {
            let m = BLOCK.min(n - i);
            let k = i as isize;
            gather(a.offset(k * sa), sa, size, &mut ca[..m]);
            kernels::unary(d.t, d.op, &ca[..m], &mut co[..m]);
            scatter(o.offset(k * so), so, size, &co[..m]);
            i += m;
        }
    }
}

/// # Safety
/// As [`loop_bin`]; the output is numpy bool.
unsafe extern "C" fn loop_pred(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let d = &*(data as *const LoopData<Pred>);
        let size = TYPES[d.t].size;
        let n = *dims as usize;
        let (a, o) = (*args as *const u8, *args.add(1) as *mut u8);
        let (sa, so) = (*steps, *steps.add(1));
        let mut ca = [0u32; BLOCK];
        let mut r = [false; BLOCK];
        let mut i = 0;
        while i < n {
            let m = BLOCK.min(n - i);
            let k = i as isize;
            gather(a.offset(k * sa), sa, size, &mut ca[..m]);
            kernels::pred(d.t, d.op, &ca[..m], &mut r[..m]);
            for (j, v) in r[..m].iter().enumerate() {
                *o.offset((k + j as isize) * so) = *v as u8;
            }
            i += m;
        }
    }
}

/// # Safety
/// As [`loop_bin`]; the output is numpy bool.
unsafe extern "C" fn loop_rel(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // The vectorized comparisons signal invalid on NaN operands; numpy's compare
    // quietly, so the status is put back.
    // SAFETY: see the function contract.
    super::casts::with_fp_flags_kept(|| unsafe {
        let d = &*(data as *const LoopData<Rel>);
        let size = TYPES[d.t].size;
        let n = *dims as usize;
        let (a, b, o) = (*args as *const u8, *args.add(1) as *const u8, *args.add(2) as *mut u8);
        let (sa, sb, so) = (*steps, *steps.add(1), *steps.add(2));
        if d.t == kernels::BF16 && matches!(sa, 0 | 2) && matches!(sb, 0 | 2) && so == 1 {
            // bfloat16 arrays or a scalar (stride 0) into contiguous bools: values by a
            // shift, one loop per relation.
            let (pa, pb, ia, ib) = (a as *const u16, b as *const u16, (sa / 2) as usize, (sb / 2) as usize);
            let val = |p: *const u16, i: usize| f32::from_bits(((p.add(i).read_unaligned()) as u32) << 16);
            macro_rules! each {
                ($f:expr) => {
                    for i in 0..n {
                        *o.add(i) = $f(val(pa, i * ia), val(pb, i * ib)) as u8;
                    }
                };
            }
            match d.op {
                Rel::Eq => each!(|p: f32, q: f32| p == q),
                Rel::Ne => each!(|p: f32, q: f32| p != q),
                Rel::Lt => each!(|p: f32, q: f32| p < q),
                Rel::Le => each!(|p: f32, q: f32| p <= q),
                Rel::Gt => each!(|p: f32, q: f32| p > q),
                Rel::Ge => each!(|p: f32, q: f32| p >= q),
                Rel::And => each!(|p: f32, q: f32| p != 0.0 && q != 0.0),
                Rel::Or => each!(|p: f32, q: f32| p != 0.0 || q != 0.0),
                Rel::Xor => each!(|p: f32, q: f32| (p != 0.0) != (q != 0.0)),
            }
            return;
        }
        let (mut ca, mut cb) = ([0u32; BLOCK], [0u32; BLOCK]);
        let mut r = [false; BLOCK];
        let mut i = 0;
        while i < n {
            let m = BLOCK.min(n - i);
            let k = i as isize;
            gather(a.offset(k * sa), sa, size, &mut ca[..m]);
            gather(b.offset(k * sb), sb, size, &mut cb[..m]);
            kernels::rel(d.t, d.op, &ca[..m], &cb[..m], &mut r[..m]);
            for (j, v) in r[..m].iter().enumerate() {
                *o.offset((k + j as isize) * so) = *v as u8;
            }
            i += m;
        }
    })
}

/// `divmod`: `floor_divide` and `remainder` of the same pairs, into its two outputs
/// (each the exact result rounded once, as those ufuncs give them). `data` holds the type.
///
/// # Safety
/// numpy's ufunc loop contract: two inputs and two outputs of the type, `dims[0]`
/// elements `steps` apart.
unsafe extern "C" fn loop_divmod(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let t = *(data as *const usize);
        let size = TYPES[t].size;
        let n = *dims as usize;
        let (a, b, q, r) = (*args as *const u8, *args.add(1) as *const u8, *args.add(2) as *mut u8, *args.add(3) as *mut u8);
        let (sa, sb, sq, sr) = (*steps, *steps.add(1), *steps.add(2), *steps.add(3));
        let (mut x, mut y, mut oq, mut or) = ([0u32; BLOCK], [0u32; BLOCK], [0u32; BLOCK], [0u32; BLOCK]);
        let mut i = 0;
        while i < n {
            let m = BLOCK.min(n - i);
            for j in 0..m {
                let k = (i + j) as isize;
                x[j] = load(a.offset(k * sa), size);
                y[j] = load(b.offset(k * sb), size);
            }
            kernels::binary(t, Bin::FloorDiv, &x[..m], &y[..m], &mut oq[..m]);
            kernels::binary(t, Bin::Rem, &x[..m], &y[..m], &mut or[..m]);
            for j in 0..m {
                let k = (i + j) as isize;
                store(q.offset(k * sq), size, oq[j]);
                store(r.offset(k * sr), size, or[j]);
            }
            i += m;
        }
    }
}

/// `modf`: the fractional and integral parts, both of the type (exact: a
/// value's parts are values of its format), signed as numpy's (`modf(-2.0)`
/// is `(-0.0, -2.0)`, `modf(inf)` is `(0.0, inf)`). `data` holds the type.
///
/// # Safety
/// numpy's ufunc loop contract: one input and two outputs of the type.
unsafe extern "C" fn loop_modf(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let t = *(data as *const usize);
        let size = TYPES[t].size;
        let n = *dims as usize;
        let (a, f, w) = (*args as *const u8, *args.add(1) as *mut u8, *args.add(2) as *mut u8);
        let (sa, sf, sw) = (*steps, *steps.add(1), *steps.add(2));
        for i in 0..n as isize {
            let x = kernels::dec(t, load(a.offset(i * sa), size));
            let whole = x.trunc();
            let frac = if x.is_infinite() { 0f64.copysign(x) } else { (x - whole).copysign(x) };
            // (Both written after the input is read: in place works.)
            store(f.offset(i * sf), size, kernels::enc(t, frac));
            store(w.offset(i * sw), size, kernels::enc(t, whole));
        }
    }
}

/// `frexp`: mantissa (of the type, in [0.5, 1) in magnitude, exact) and int32
/// exponent, `x = m * 2**e`; zeros, infinities and NaN give themselves and 0.
///
/// # Safety
/// numpy's ufunc loop contract: one input of the type, outputs of the type and int32.
unsafe extern "C" fn loop_frexp(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let t = *(data as *const usize);
        let size = TYPES[t].size;
        let n = *dims as usize;
        let (a, m, e) = (*args as *const u8, *args.add(1) as *mut u8, *args.add(2) as *mut u8);
        let (sa, sm, se) = (*steps, *steps.add(1), *steps.add(2));
        for i in 0..n as isize {
            let c = load(a.offset(i * sa), size);
            let x = kernels::dec(t, c);
            let (mant, exp) = if x == 0.0 || !x.is_finite() {
                (c, 0i32)
            } else {
                // Every lowp value is a normal f64.
                let (f, k) = kernels::frexp(x);
                (kernels::enc(t, f), k)
            };
            store(m.offset(i * sm), size, mant);
            (e.offset(i * se) as *mut i32).write_unaligned(exp);
        }
    }
}

/// `ldexp`: `x * 2**e` rounded once (to nearest even) into the type, for int32
/// (`I = i32`) or int64 exponents. Finite operands whose result passes the
/// format's range raise overflow, as numpy's float16 loop does; posits
/// saturate at maxpos/minpos and raise nothing. `data` holds the type.
///
/// # Safety
/// numpy's ufunc loop contract: inputs of the type and of `I`, an output of the type.
unsafe extern "C" fn loop_ldexp<I: Copy + Into<i64>>(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let t = *(data as *const usize);
        let size = TYPES[t].size;
        let n = *dims as usize;
        let (a, e, o) = (*args as *const u8, *args.add(1) as *const u8, *args.add(2) as *mut u8);
        let (sa, se, so) = (*steps, *steps.add(1), *steps.add(2));
        for i in 0..n as isize {
            let x = kernels::dec(t, load(a.offset(i * sa), size));
            let k: i64 = (e.offset(i * se) as *const I).read_unaligned().into();
            // Every lowp value lies within 2**±150, so exponents past ±400 give the
            // results of ±400, and x * 2**k stays a normal float64: exact.
            let k = k.clamp(-400, 400) as i32;
            store(o.offset(i * so), size, kernels::enc_reporting(t, x * 2f64.powi(k)));
        }
    }
}

/// `clip` (numpy's `np.clip` ufunc): `min(max(x, lo), hi)`, a NaN (NaR) in
/// any of the three giving NaN as numpy's float loops do, x kept on ties. The result is one
/// of the operands' codes: nothing is rounded. `data` holds the type.
///
/// # Safety
/// numpy's ufunc loop contract: three inputs and an output of the type.
unsafe extern "C" fn loop_clip(args: *mut *mut c_char, dims: *mut npy_intp, steps: *mut npy_intp, data: *mut c_void) {
    let _fp = lowp_core::fpenv::Clean::enter();
    // SAFETY: see the function contract.
    unsafe {
        let t = *(data as *const usize);
        let size = TYPES[t].size;
        let n = *dims as usize;
        let (x, lo, hi, o) = (*args as *const u8, *args.add(1) as *const u8, *args.add(2) as *const u8, *args.add(3) as *mut u8);
        let (sx, sl, sh, so) = (*steps, *steps.add(1), *steps.add(2), *steps.add(3));
        // The compiler may select with maxsd/minsd, which flag NaN operands as
        // invalid; numpy's clip raises nothing, so the status is put back.
        super::casts::with_fp_flags_kept(|| {
            for i in 0..n as isize {
                let (cx, cl, ch) = (load(x.offset(i * sx), size), load(lo.offset(i * sl), size), load(hi.offset(i * sh), size));
                let (vx, vl, vh) = (kernels::dec(t, cx), kernels::dec(t, cl), kernels::dec(t, ch));
                // As numpy's float16 loop: max(a, b) is a when a is NaN or a >= b, else b
                // (x stays on a tie: clip(-0.0, 0.0, 1) is -0.0); min likewise.
                let (c, v) = if vx.is_nan() || vx >= vl { (cx, vx) } else { (cl, vl) };
                let c = if v.is_nan() || v <= vh { c } else { ch };
                store(o.offset(i * so), size, c);
            }
        });
    }
}

fn leak<O>(t: usize, op: O) -> *mut c_void {
    Box::into_raw(Box::new(LoopData { t, op })) as *mut c_void
}

pub fn register_all(py: Python<'_>) -> PyResult<()> {
    let np = py.import("numpy")?;
    let mut seen: Vec<usize> = Vec::new();
    for &(name, op) in TABLE {
        let uf = np.getattr(name)?;
        let ptr = uf.as_ptr() as usize;
        // `divide` and `true_divide` are one ufunc in numpy 2.
        if seen.contains(&ptr) {
            continue;
        }
        seen.push(ptr);
        for t in 0..N {
            let tn = type_num(t);
            let b = NPY_TYPES::NPY_BOOL as c_int;
            let (func, mut types, data): (unsafe extern "C" fn(_, _, _, _), Vec<c_int>, _) = match op {
                Op::Bin(o) => (loop_bin, vec![tn, tn, tn], leak(t, o)),
                Op::Un(o) => (loop_un, vec![tn, tn], leak(t, o)),
                Op::Pred(o) => (loop_pred, vec![tn, b], leak(t, o)),
                Op::Rel(o) => (loop_rel, vec![tn, tn, b], leak(t, o)),
            };
            // SAFETY: uf is a numpy ufunc; types has nin+nout entries (numpy copies it);
            // data lives forever.
            let rc = unsafe {
                PY_UFUNC_API.PyUFunc_RegisterLoopForType(py, uf.as_ptr() as *mut PyUFuncObject, tn, Some(func), types.as_mut_ptr(), data)
            };
            check(py, rc, &format!("registering the {name} loop"))?;
        }
    }
    // The loops of their own, each operand's type (None: the lowp type): the two-output
    // ufuncs (frexp's exponents int32), ldexp with int32 and int64 exponents (numpy's own
    // loops take both; its int64 is C long where that has 64 bits, else long long), clip.
    let int = Some(NPY_TYPES::NPY_INT as c_int);
    let long = Some(if std::mem::size_of::<std::ffi::c_long>() == 8 { NPY_TYPES::NPY_LONG } else { NPY_TYPES::NPY_LONGLONG } as c_int);
    let umath = np.getattr("_core")?.getattr("umath")?;
    let own: [(&str, LoopFn, &[Option<c_int>]); 6] = [
        ("divmod", loop_divmod, &[None; 4]),
        ("modf", loop_modf, &[None; 3]),
        ("frexp", loop_frexp, &[None, None, int]),
        ("ldexp", loop_ldexp::<i32>, &[None, int, None]),
        ("ldexp", loop_ldexp::<i64>, &[None, long, None]),
        ("clip", loop_clip, &[None; 4]),
    ];
    for (name, f, operands) in own {
        let uf = umath.getattr(name)?;
        for t in 0..N {
            let tn = type_num(t);
            let mut types: Vec<c_int> = operands.iter().map(|o| o.unwrap_or(tn)).collect();
            let data = Box::into_raw(Box::new(t)) as *mut c_void;
            // SAFETY: as above: the types of every operand; data lives forever.
            let rc = unsafe { PY_UFUNC_API.PyUFunc_RegisterLoopForType(py, uf.as_ptr() as *mut PyUFuncObject, tn, Some(f), types.as_mut_ptr(), data) };
            check(py, rc, &format!("registering the {name} loop"))?;
        }
    }
    // Python floats beside lowp operands: the ufuncs of two or three lowp inputs.
    let mut mixed: Vec<(&str, usize)> = TABLE.iter().filter(|(_, op)| matches!(op, Op::Bin(_) | Op::Rel(_))).map(|&(n, _)| (n, 2)).collect();
    mixed.extend([("divmod", 2), ("clip", 3)]);
    super::promote::register_all(py, &mixed)
}

type LoopFn = unsafe extern "C" fn(*mut *mut c_char, *mut npy_intp, *mut npy_intp, *mut c_void);
