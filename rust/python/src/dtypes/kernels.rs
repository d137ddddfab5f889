//! Element kernels of the dtypes: decoding and encoding blocks of codes, and
//! the arithmetic of the ufunc loops. No Python here.
//!
//! Codes travel as `u32` whatever the storage width (1, 2 or 4 bytes).
//!
//! How results are rounded once into a type:
//! - bf16 and fp8 `+ - * /`: computed in f32 and rounded into the type. f32
//!   has at least 2p+2 bits for every such p (p <= 8), so the f32 rounding is
//!   innocuous and the result is the correctly rounded one (and equals
//!   ml_dtypes', which computes the same way).
//! - posits `+ - * / sqrt`: computed in f64 with the exact error term
//!   (TwoSum, Dekker's product, remainders) and rounded to odd at 53 bits;
//!   rounding that to a posit (at most 28 significant bits) is correct.
//! - everything else: computed in f64 from the exact decoded inputs and
//!   rounded once into the type.

use std::sync::OnceLock;

use lowp_core::convert;
use lowp_core::format::Format;
use lowp_core::round::{Mode, RoundOpts};

use super::{N, TYPES};

/// Elements per block of a strided loop (stack buffers).
pub const BLOCK: usize = 512;

fn rne() -> RoundOpts {
    RoundOpts::new(Mode::NearestEven)
}

static LUT64: [OnceLock<Vec<f64>>; N] = [const { OnceLock::new() }; N];
static LUT32: [OnceLock<Vec<f32>>; N] = [const { OnceLock::new() }; N];

fn lut64(t: usize) -> Option<&'static [f64]> {
    let ti = &TYPES[t];
    if ti.fmt.bits() > 16 {
        return None;
    }
    Some(LUT64[t].get_or_init(|| (0..1u64 << ti.fmt.bits()).map(|c| ti.fmt.decode(c)).collect()))
}

/// f32 table for the float formats of at most 16 bits (their values are f32s).
fn lut32(t: usize) -> Option<&'static [f32]> {
    let ti = &TYPES[t];
    if ti.fmt.bits() > 16 || !ti.fmt.fits_f32() {
        return None;
    }
    Some(LUT32[t].get_or_init(|| (0..1u64 << ti.fmt.bits()).map(|c| ti.fmt.decode(c) as f32).collect()))
}

/// Exact value of one code.
#[inline]
pub fn dec(t: usize, c: u32) -> f64 {
    match lut64(t) {
        Some(l) => l[c as usize & (l.len() - 1)],
        None => TYPES[t].fmt.decode(c as u64),
    }
}

/// Round one f64 to nearest even into type `t`.
#[inline]
pub fn enc(t: usize, x: f64) -> u32 {
    TYPES[t].fmt.encode(x, &rne(), 0) as u32
}

pub fn dec_block64(t: usize, c: &[u32], out: &mut [f64]) {
    match lut64(t) {
        Some(l) => {
            let m = l.len() - 1;
            for (x, y) in c.iter().zip(out.iter_mut()) {
                *y = l[*x as usize & m];
            }
        }
        None => {
            let f = TYPES[t].fmt;
            for (x, y) in c.iter().zip(out.iter_mut()) {
                *y = f.decode(*x as u64);
            }
        }
    }
}

/// Decode to f32 (only for types whose values are all f32s).
pub fn dec_block32(t: usize, c: &[u32], out: &mut [f32]) {
    if TYPES[t].name == "bfloat16" {
        for (x, y) in c.iter().zip(out.iter_mut()) {
            // bf16 is the top half of an f32.
            *y = f32::from_bits(*x << 16);
        }
        return;
    }
    let l = lut32(t).expect("f32 decoding of a type that fits f32");
    let m = l.len() - 1;
    for (x, y) in c.iter().zip(out.iter_mut()) {
        *y = l[*x as usize & m];
    }
}

pub fn enc_block64(t: usize, x: &[f64], out: &mut [u32]) {
    // Cannot fail: nearest-even options are valid and u32 holds every code.
    let _ = convert::encode(&TYPES[t].fmt, x, out, &rne(), 0);
}

pub fn enc_block32(t: usize, x: &[f32], out: &mut [u32]) {
    let _ = convert::encode(&TYPES[t].fmt, x, out, &rne(), 0);
}

/// Does `t` compute `+ - * /` in f32 (see the module docs)?
#[inline]
pub fn uses_f32(t: usize) -> bool {
    matches!(TYPES[t].fmt, Format::Float(f) if f.man_bits <= 10) && TYPES[t].fmt.fits_f32()
}

#[inline]
pub fn is_posit(t: usize) -> bool {
    matches!(TYPES[t].fmt, Format::Posit(_))
}

// ---------------------------------------------------------------- exact f64 helpers

/// Dekker's split: `a = hi + lo` with halves of 26 bits.
#[inline(always)]
fn split(a: f64) -> (f64, f64) {
    let c = 134217729.0 * a; // 2^27 + 1
    let hi = c - (c - a);
    (hi, a - hi)
}

/// `a * b = p + e` exactly (no overflow/underflow in the posit range).
#[inline(always)]
fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    let (ah, al) = split(a);
    let (bh, bl) = split(b);
    let e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    (p, e)
}

/// Round-to-odd correction: `s` is the nearest f64 to an exact value whose
/// difference from `s` has the sign of `dir` (0: exact). An inexact even `s`
/// moves one ulp toward the exact value, so the result is the exact value
/// rounded to odd at 53 bits, which then rounds correctly to <= 51 bits.
#[inline(always)]
fn odd(s: f64, dir: f64) -> f64 {
    if dir == 0.0 || !s.is_finite() || s == 0.0 {
        return s;
    }
    let b = s.to_bits();
    if b & 1 == 1 {
        return s;
    }
    // Increasing the magnitude bits moves away from zero.
    if (dir > 0.0) == (s > 0.0) {
        f64::from_bits(b + 1)
    } else {
        f64::from_bits(b - 1)
    }
}

#[inline(always)]
fn add_odd(a: f64, b: f64) -> f64 {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb); // TwoSum: a + b = s + e exactly
    odd(s, e)
}

#[inline(always)]
fn mul_odd(a: f64, b: f64) -> f64 {
    let (p, e) = two_prod(a, b);
    odd(p, e)
}

#[inline(always)]
fn div_odd(a: f64, b: f64) -> f64 {
    let q = a / b;
    if !q.is_finite() || q == 0.0 {
        return q;
    }
    let (p, e) = two_prod(q, b);
    let r = (a - p) - e; // a - q*b, exact
    // a/b - q = r/b: its sign is sign(r) * sign(b).
    odd(q, if r == 0.0 { 0.0 } else if (r > 0.0) == (b > 0.0) { 1.0 } else { -1.0 })
}

#[inline(always)]
fn sqrt_odd(x: f64) -> f64 {
    let s = x.sqrt();
    if !s.is_finite() || s == 0.0 {
        return s;
    }
    let (p, e) = two_prod(s, s);
    odd(s, (x - p) - e)
}

// ---------------------------------------------------------------- numpy semantics in f64

fn divmod(a: f64, b: f64) -> (f64, f64) {
    // As numpy's npy_divmod on doubles.
    if b == 0.0 {
        return (a / b, a % b);
    }
    let mut m = a % b;
    let mut div = (a - m) / b;
    if m != 0.0 {
        if (b < 0.0) != (m < 0.0) {
            m += b;
            div -= 1.0;
        }
    } else {
        m = 0f64.copysign(b);
    }
    let fd = if div != 0.0 {
        let mut f = div.floor();
        if div - f > 0.5 {
            f += 1.0;
        }
        f
    } else {
        0f64.copysign(a / b)
    };
    (fd, m)
}

fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

// ---------------------------------------------------------------- operations

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Rem,
    Fmod,
    Pow,
    Max,
    Min,
    FMax,
    FMin,
    CopySign,
    NextAfter,
    Arctan2,
    Hypot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Un {
    Neg,
    Pos,
    Abs,
    Sign,
    Sqrt,
    Square,
    Recip,
    Exp,
    Exp2,
    Expm1,
    Log,
    Log2,
    Log10,
    Log1p,
    Sin,
    Cos,
    Tan,
    Tanh,
    Arctan,
    Floor,
    Ceil,
    Rint,
    Trunc,
    Spacing,
}

/// Predicates: one input, bool output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pred {
    IsNan,
    IsInf,
    IsFinite,
    SignBit,
    LogicalNot,
}

/// Relations: two inputs, bool output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rel {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Xor,
}

/// The neighbour of a code toward +inf (`up`) or -inf, by the type's order.
/// NaN stays NaN; a step past the largest finite value gives inf or NaN.
pub fn next_code(t: usize, c: u32, up: bool) -> u32 {
    match TYPES[t].fmt {
        Format::Posit(p) => {
            let nar = p.nar() as u32;
            if c == nar {
                return c;
            }
            let mask = ((1u64 << p.nbits) - 1) as u32;
            // Posit codes are ordered as two's complement integers.
            if up {
                c.wrapping_add(1) & mask
            } else {
                c.wrapping_sub(1) & mask
            }
        }
        Format::Float(f) => {
            if f.is_nan_code(c as u64) {
                return c;
            }
            let sb = f.sign_bit() as u32;
            let mag = c & f.mag_mask() as u32;
            let neg = c & sb != 0 && mag != 0;
            if mag == 0 {
                // From either zero to the smallest subnormal of the direction.
                return if up { 1 } else { sb | 1 };
            }
            // Away from zero is a larger magnitude code.
            let away = up != neg;
            let m = if away { mag + 1 } else { mag - 1 };
            if m == 0 {
                0
            } else if neg {
                sb | m
            } else {
                m
            }
        }
        Format::Int(_) => c,
    }
}

#[inline]
fn pick(ca: u32, cb: u32, a: f64, b: f64, op: Bin) -> u32 {
    match op {
        Bin::Max => {
            if a.is_nan() {
                ca
            } else if b.is_nan() {
                cb
            } else if a >= b {
                ca
            } else {
                cb
            }
        }
        Bin::Min => {
            if a.is_nan() {
                ca
            } else if b.is_nan() {
                cb
            } else if a <= b {
                ca
            } else {
                cb
            }
        }
        Bin::FMax => {
            if b.is_nan() || a >= b {
                ca
            } else {
                cb
            }
        }
        Bin::FMin => {
            if b.is_nan() || a <= b {
                ca
            } else {
                cb
            }
        }
        _ => unreachable!(),
    }
}

/// `out = op(a, b)` on codes of type `t`.
pub fn binary(t: usize, op: Bin, a: &[u32], b: &[u32], out: &mut [u32]) {
    let n = a.len();
    if uses_f32(t) && matches!(op, Bin::Add | Bin::Sub | Bin::Mul | Bin::Div) {
        let mut x = [0f32; BLOCK];
        let mut y = [0f32; BLOCK];
        dec_block32(t, a, &mut x[..n]);
        dec_block32(t, b, &mut y[..n]);
        let (x, y) = (&mut x[..n], &y[..n]);
        match op {
            Bin::Add => x.iter_mut().zip(y).for_each(|(p, q)| *p += *q),
            Bin::Sub => x.iter_mut().zip(y).for_each(|(p, q)| *p -= *q),
            Bin::Mul => x.iter_mut().zip(y).for_each(|(p, q)| *p *= *q),
            _ => x.iter_mut().zip(y).for_each(|(p, q)| *p /= *q),
        }
        enc_block32(t, x, out);
        return;
    }
    let mut x = [0f64; BLOCK];
    let mut y = [0f64; BLOCK];
    dec_block64(t, a, &mut x[..n]);
    dec_block64(t, b, &mut y[..n]);
    let (x, y) = (&mut x[..n], &y[..n]);
    let posit = is_posit(t);
    macro_rules! map {
        ($f:expr) => {{
            let f = $f;
            x.iter_mut().zip(y).for_each(|(p, q)| *p = f(*p, *q))
        }};
    }
    match op {
        Bin::Max | Bin::Min | Bin::FMax | Bin::FMin => {
            for i in 0..n {
                out[i] = pick(a[i], b[i], x[i], y[i], op);
            }
            return;
        }
        Bin::NextAfter => {
            for i in 0..n {
                let (p, q) = (x[i], y[i]);
                out[i] = if p.is_nan() || q.is_nan() {
                    enc(t, f64::NAN)
                } else if p == q {
                    b[i]
                } else {
                    next_code(t, a[i], q > p)
                };
            }
            return;
        }
        Bin::Add if posit => map!(add_odd),
        Bin::Sub if posit => map!(|p: f64, q: f64| add_odd(p, -q)),
        Bin::Mul if posit => map!(mul_odd),
        Bin::Div if posit => map!(div_odd),
        Bin::Add => map!(|p: f64, q: f64| p + q),
        Bin::Sub => map!(|p: f64, q: f64| p - q),
        Bin::Mul => map!(|p: f64, q: f64| p * q),
        Bin::Div => map!(|p: f64, q: f64| p / q),
        Bin::FloorDiv => map!(|p: f64, q: f64| divmod(p, q).0),
        Bin::Rem => map!(|p: f64, q: f64| divmod(p, q).1),
        Bin::Fmod => map!(|p: f64, q: f64| p % q),
        Bin::Pow => map!(f64::powf),
        Bin::CopySign => map!(f64::copysign),
        Bin::Arctan2 => map!(f64::atan2),
        Bin::Hypot => map!(f64::hypot),
    }
    enc_block64(t, x, out);
}

pub fn unary(t: usize, op: Un, a: &[u32], out: &mut [u32]) {
    let n = a.len();
    let mut x = [0f64; BLOCK];
    dec_block64(t, a, &mut x[..n]);
    let x = &mut x[..n];
    let posit = is_posit(t);
    macro_rules! map {
        ($f:expr) => {{
            let f = $f;
            x.iter_mut().for_each(|p| *p = f(*p))
        }};
    }
    match op {
        Un::Spacing => {
            for i in 0..n {
                let v = x[i];
                out[i] = if v.is_nan() || v.is_infinite() {
                    enc(t, f64::NAN)
                } else {
                    // Toward the sign's infinity (numpy's convention, +0 and -0 alike by sign bit).
                    let up = !v.is_sign_negative();
                    let nb = dec(t, next_code(t, a[i], up));
                    enc(t, nb - v)
                };
            }
            return;
        }
        Un::Neg => map!(|p: f64| -p),
        Un::Pos => {}
        Un::Abs => map!(f64::abs),
        Un::Sign => map!(sign),
        Un::Sqrt if posit => map!(sqrt_odd),
        Un::Sqrt => map!(f64::sqrt),
        Un::Square if posit => map!(|p: f64| mul_odd(p, p)),
        Un::Square => map!(|p: f64| p * p),
        Un::Recip if posit => map!(|p: f64| div_odd(1.0, p)),
        Un::Recip => map!(|p: f64| 1.0 / p),
        Un::Exp => map!(f64::exp),
        Un::Exp2 => map!(f64::exp2),
        Un::Expm1 => map!(f64::exp_m1),
        Un::Log => map!(f64::ln),
        Un::Log2 => map!(f64::log2),
        Un::Log10 => map!(f64::log10),
        Un::Log1p => map!(f64::ln_1p),
        Un::Sin => map!(f64::sin),
        Un::Cos => map!(f64::cos),
        Un::Tan => map!(f64::tan),
        Un::Tanh => map!(f64::tanh),
        Un::Arctan => map!(f64::atan),
        Un::Floor => map!(f64::floor),
        Un::Ceil => map!(f64::ceil),
        Un::Rint => map!(f64::round_ties_even),
        Un::Trunc => map!(f64::trunc),
    }
    enc_block64(t, x, out);
}

pub fn pred(t: usize, op: Pred, a: &[u32], out: &mut [bool]) {
    let n = a.len();
    let mut x = [0f64; BLOCK];
    dec_block64(t, a, &mut x[..n]);
    for (p, o) in x[..n].iter().zip(out.iter_mut()) {
        *o = match op {
            Pred::IsNan => p.is_nan(),
            Pred::IsInf => p.is_infinite(),
            Pred::IsFinite => p.is_finite(),
            Pred::SignBit => p.is_sign_negative(),
            Pred::LogicalNot => *p == 0.0,
        };
    }
}

pub fn rel(t: usize, op: Rel, a: &[u32], b: &[u32], out: &mut [bool]) {
    let n = a.len();
    let mut x = [0f64; BLOCK];
    let mut y = [0f64; BLOCK];
    dec_block64(t, a, &mut x[..n]);
    dec_block64(t, b, &mut y[..n]);
    for ((p, q), o) in x[..n].iter().zip(&y[..n]).zip(out.iter_mut()) {
        *o = match op {
            Rel::Eq => p == q,
            Rel::Ne => p != q,
            Rel::Lt => p < q,
            Rel::Le => p <= q,
            Rel::Gt => p > q,
            Rel::Ge => p >= q,
            Rel::And => *p != 0.0 && *q != 0.0,
            Rel::Or => *p != 0.0 || *q != 0.0,
            Rel::Xor => (*p != 0.0) != (*q != 0.0),
        };
    }
}
