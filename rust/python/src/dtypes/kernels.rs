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
//!
//! Speed without changing any result:
//! - unary ops on types of at most 16 bits, and binary ops on 8-bit types,
//!   are tables of every result, built once by the code above (see
//!   [`un_table`], [`bin_table`]);
//! - bf16 rounds from f32 by a bit trick ([`f32_to_bf16`]); f64 results of
//!   the float formats go through f32 rounded to odd ([`f64_to_f32_odd`]);
//! - posit<n,2> results use a direct encoder ([`posit2_encode`]).
//!
//! Each of these is tested bit for bit against the format engine.
//!
//! Floating-point warnings: computed paths raise the flags their f32/f64
//! operations raise (numpy reports them as for its own floats); table
//! lookups raise none.

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

/// `$body` with `$v(p, s)` a reader of the codes of type `$t` at `p` (byte stride
/// `s`): `|i| value i`, exact, by a shift (bfloat16), the float32 table (the other
/// types of up to 16 bits) or [`dec`]. One body per reader, so each inlines.
macro_rules! with_reader {
    ($t:expr, $v:ident => $body:expr) => {{
        let t = $t;
        if t == BF16 {
            let $v = |p: *const u8, s: isize| move |i: isize| f32::from_bits(((p.offset(i * s) as *const u16).read_unaligned() as u32) << 16) as f64;
            $body
        } else if let Some(l) = lut32(t) {
            if TYPES[t].size == 1 {
                let $v = |p: *const u8, s: isize| move |i: isize| *l.get_unchecked(*p.offset(i * s) as usize) as f64;
                $body
            } else {
                let $v = |p: *const u8, s: isize| move |i: isize| *l.get_unchecked((p.offset(i * s) as *const u16).read_unaligned() as usize) as f64;
                $body
            }
        } else {
            let size = TYPES[t].size;
            let $v = |p: *const u8, s: isize| move |i: isize| dec(t, super::load(p.offset(i * s), size));
            $body
        }
    }};
}

/// `init` plus the sum of `x(0) .. x(n-1)` in four running sums (each from `init`
/// but the last three from -0, which leaves any x as it is): the adds' latency,
/// not their order, bounds it.
#[inline(always)]
fn sum4(n: usize, init: f64, x: impl Fn(isize) -> f64) -> f64 {
    let mut acc = [init, -0.0, -0.0, -0.0];
    let whole = n / 4 * 4;
    for i in (0..whole as isize).step_by(4) {
        for (l, s) in acc.iter_mut().enumerate() {
            *s += x(i + l as isize);
        }
    }
    for i in whole as isize..n as isize {
        acc[0] += x(i);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// The sum of the products of `n` codes of type `t` at `a` and `b` (byte strides
/// `sa`, `sb`), in float64 from +0 (the products exact but for posit32's, of up
/// to 2 x 28 bits).
///
/// # Safety
/// Both ranges are readable.
pub unsafe fn dot_f64(t: usize, a: *const u8, sa: isize, b: *const u8, sb: isize, n: usize) -> f64 {
    // SAFETY: readable by the contract.
    unsafe { with_reader!(t, v => { let (x, y) = (v(a, sa), v(b, sb)); sum4(n, 0.0, |i| x(i) * y(i)) }) }
}

/// The sum of `n` codes of type `t` at `b` (byte stride `sb`) in float64, from -0
/// (so that a sum of -0s stays -0).
///
/// # Safety
/// The range is readable.
pub unsafe fn sum_f64(t: usize, b: *const u8, sb: isize, n: usize) -> f64 {
    // SAFETY: readable by the contract.
    unsafe { with_reader!(t, v => sum4(n, -0.0, v(b, sb))) }
}

/// A normal, finite, nonzero `x` as `f * 2**k` with `f` in [0.5, 1) in magnitude,
/// both exact (`f` from `x`'s bits, with its exponent field replaced).
#[inline(always)]
pub fn frexp(x: f64) -> (f64, i32) {
    let b = x.to_bits();
    (f64::from_bits((b & !(0x7FF << 52)) | (1022 << 52)), ((b >> 52) & 0x7FF) as i32 - 1022)
}

/// `enc(t, v)`, raising the overflow flag where a finite `v` passes the
/// format's largest value (as the element loops report it; posits saturate).
pub fn enc_reporting(t: usize, v: f64) -> u32 {
    let c = enc(t, v);
    if v.is_finite() && !is_posit(t) && !finite(dec(t, c)) {
        raise_fp(FP_OVERFLOW);
    }
    c
}

/// Exact value of one code.
#[inline]
pub fn dec(t: usize, c: u32) -> f64 {
    match lut64(t) {
        Some(l) => l[c as usize & (l.len() - 1)],
        None => match TYPES[t].fmt {
            Format::Posit(p) if p.es == 2 => posit2_decode(p.nbits, c),
            f => f.decode(c as u64),
        },
    }
}

/// Exact value of a posit<n,2> code (n <= 32); NaR is NaN, as the format engine decodes.
#[inline(always)]
pub fn posit2_decode(n: u32, c: u32) -> f64 {
    let x = c << (32 - n); // left-aligned code
    if x << 1 == 0 {
        return if x == 0 { 0.0 } else { f64::NAN }; // 0 and NaR (sign bit alone)
    }
    let sm = ((x as i32) >> 31) as u32; // all ones when negative
    // Two's complement magnitude, branch-free: (x ^ -1) + 1 = -x (negating the left-aligned code negates the code).
    let body = (x ^ sm).wrapping_sub(sm) << 1; // regime first, sign dropped
    let om = (body as i32) >> 31; // -1 when the regime is a run of ones, else 0
    let run = (body ^ om as u32).leading_zeros(); // run length, 1..=31: body is neither 0 nor all ones
    let k = -(run as i32) ^ om; // -run for zeros; !(-run) = run - 1 for ones
    // Drop the regime and its terminator; a u64 shift allows run + 1 = 32 (missing bits read 0).
    let rest = ((body as u64) << (run + 1)) as u32;
    let scale = 4 * k + (rest >> 30) as i32; // two exponent bits
    let frac = ((rest as u64) << 2) & 0xFFFF_FFFF; // fraction, left-aligned in 32 bits
    // |scale| <= 120: a normal f64; the fraction (<= 27 bits) fits its 52.
    f64::from_bits(((sm as u64 & 1) << 63) | (((scale + 1023) as u64) << 52) | (frac << 20))
}


/// Round one f64 to nearest even into type `t`.
#[inline]
pub fn enc(t: usize, x: f64) -> u32 {
    match TYPES[t].fmt {
        Format::Posit(p) if p.es == 2 => posit2_encode(p.nbits, x),
        f => f.encode(x, &rne(), 0) as u32,
    }
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
            for (x, y) in c.iter().zip(out.iter_mut()) {
                *y = dec(t, *x);
            }
        }
    }
}

/// Decode to f32 (only for types whose values are all f32s).
pub fn dec_block32(t: usize, c: &[u32], out: &mut [f32]) {
    if t == BF16 {
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
    if uses_f32(t) {
        // Round to odd into f32 first (24 bits >= p + 2 for these formats), then
        // to the format: the same result as one rounding from f64, on the fast f32 path.
        let mut y = [0f32; BLOCK];
        let n = x.len();
        for (v, o) in x.iter().zip(y.iter_mut()) {
            *o = f64_to_f32_odd(*v);
        }
        enc_block32(t, &y[..n], out);
        return;
    }
    if let Format::Posit(p) = TYPES[t].fmt {
        if p.es == 2 && p.nbits <= 16 {
            // Through f32 (rounded to odd, clamped to a range that rounds alike) into the
            // core's vectorized posit kernel: the same codes as posit2_encode.
            let n = x.len();
            let mut y = [0f32; BLOCK];
            for (v, o) in x.iter().zip(y.iter_mut()) {
                *o = super::casts::posit16_via_f32(*v);
            }
            // Cannot fail (valid options, u32 codes); the flags of NaN lanes are not the caller's.
            let _ = super::casts::with_fp_flags_kept(|| convert::encode(&TYPES[t].fmt, &y[..n], out, &rne(), 0));
            return;
        }
        if p.es == 2 {
            for (v, o) in x.iter().zip(out.iter_mut()) {
                *o = posit2_encode(p.nbits, *v);
            }
            return;
        }
    }
    // Cannot fail: nearest-even options are valid and u32 holds every code.
    let _ = convert::encode(&TYPES[t].fmt, x, out, &rne(), 0);
}

/// f64 to f32 rounded to odd: inexact results with an even last bit move one
/// ulp toward `x` (so the sticky information survives a second rounding).
#[inline(always)]
pub fn f64_to_f32_odd(x: f64) -> f32 {
    let y = x as f32;
    let yb = y.to_bits();
    // NaN and inf pass through; `!=` is a quiet compare.
    if !finite(x) || y as f64 == x || yb & 1 == 1 || yb & 0x7F80_0000 == 0x7F80_0000 {
        return y;
    }
    // Same sign: a larger magnitude code is farther from zero.
    let away = (x.abs() > (y as f64).abs()) as u32;
    f32::from_bits(if away == 1 { yb + 1 } else { yb - 1 } | (yb & 0x8000_0000))
}

pub fn enc_block32(t: usize, x: &[f32], out: &mut [u32]) {
    if t == BF16 {
        for (v, o) in x.iter().zip(out.iter_mut()) {
            *o = f32_to_bf16(v.to_bits()) as u32;
        }
        return;
    }
    if TYPES[t].size == 1 {
        let tab = odd_table(t);
        for (v, o) in x.iter().zip(out.iter_mut()) {
            *o = tab[bf16_odd(v.to_bits())] as u32;
        }
        return;
    }
    let _ = convert::encode(&TYPES[t].fmt, x, out, &rne(), 0);
}

/// 8-bit types from f32/f64: round to odd at bf16's precision (8 bits >= p + 2
/// for every 8-bit type, and every rounding boundary of theirs is a bf16
/// value), then one lookup in a table of all 65536 bf16 patterns encoded by
/// the format engine. Equal to rounding once from the input, tested bit for bit.
static ODD_TABLES: [OnceLock<Box<[u8]>>; N] = [const { OnceLock::new() }; N];

pub fn odd_table(t: usize) -> &'static [u8] {
    ODD_TABLES[t].get_or_init(|| {
        let f = TYPES[t].fmt;
        let bf = Format::Float(lowp_core::format::named::BFLOAT16);
        (0..1u64 << 16).map(|h| f.encode(bf.decode(h), &rne(), 0) as u8).collect()
    })
}

/// f32 bits rounded to odd at bf16 precision: keep the top half, and set its
/// last bit when anything below was nonzero (NaN stays NaN, inf stays inf).
#[inline(always)]
pub fn bf16_odd(x: u32) -> usize {
    ((x >> 16) | ((x & 0xFFFF) != 0) as u32) as usize
}

/// Index of bfloat16 in [`TYPES`].
pub const BF16: usize = 0;

/// f32 bits to bf16 bits, nearest even (the same results as the format engine,
/// tested bit for bit): bf16 is the top half of an f32, so adding 0x7fff plus
/// the kept half's lowest bit and truncating rounds to nearest, ties to even
/// (a carry into the exponent is the correct next binade, or inf). NaN becomes
/// the quiet NaN of its sign (as the format engine and ml_dtypes do).
#[inline(always)]
pub fn f32_to_bf16(x: u32) -> u16 {
    if x & 0x7FFF_FFFF > 0x7F80_0000 {
        ((x >> 16) & 0x8000 | 0x7FC0) as u16
    } else {
        ((x + 0x7FFF + ((x >> 16) & 1)) >> 16) as u16
    }
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

/// Finite test on the bits: float compares with NaN can raise the invalid flag
/// once vectorized (signaling predicates), which numpy would report as a warning.
#[inline(always)]
fn finite(x: f64) -> bool {
    x.to_bits() & 0x7FF0_0000_0000_0000 != 0x7FF0_0000_0000_0000
}

/// Round-to-odd correction: `s` is the nearest f64 to an exact value whose
/// difference from `s` has the sign of `dir` (0: exact). An inexact even `s`
/// moves one ulp toward the exact value, so the result is the exact value
/// rounded to odd at 53 bits, which then rounds correctly to <= 51 bits.
/// Only quiet compares and bit tests (see [`finite`]).
#[inline(always)]
fn odd(s: f64, dir: f64) -> f64 {
    if dir == 0.0 || !finite(s) || !finite(dir) || s == 0.0 {
        return s;
    }
    let b = s.to_bits();
    if b & 1 == 1 {
        return s;
    }
    // Increasing the magnitude bits moves away from zero.
    if dir.is_sign_positive() == s.is_sign_positive() {
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
    if !finite(q) || q == 0.0 {
        return q;
    }
    let (p, e) = two_prod(q, b);
    let r = (a - p) - e; // a - q*b, exact
    // a/b - q = r/b: its sign is sign(r) * sign(b).
    odd(q, if r == 0.0 { 0.0 } else if r.is_sign_positive() == b.is_sign_positive() { 1.0 } else { -1.0 })
}

#[inline(always)]
fn sqrt_odd(x: f64) -> f64 {
    let s = x.sqrt();
    if !finite(s) || s == 0.0 {
        return s;
    }
    let (p, e) = two_prod(s, s);
    odd(s, (x - p) - e)
}

/// `exp(x)`; near 0, where `1 + x` (what f64 keeps of the exact value) can be a
/// tie of posit32, the exact value `1 + expm1(x)` rounded to odd.
#[inline(always)]
fn exp_odd(x: f64) -> f64 {
    if x != 0.0 && x.abs() < 1.0 / 1048576.0 {
        add_odd(1.0, x.exp_m1())
    } else {
        x.exp()
    }
}

/// `atan2(y, x)`; for `0 < |y/x| < 2^-27` (x > 0), where f64 keeps nothing of
/// the series' `-t^3/3`, the quotient rounded to odd with an exact quotient
/// counted as lying above the result (the arctangent is smaller in magnitude),
/// so that a quotient on a tie of the format rounds toward zero as the exact
/// arctangent does.
#[inline(always)]
fn atan2_odd(y: f64, x: f64) -> f64 {
    if x > 0.0 && finite(x) && y != 0.0 && finite(y) && y.abs() < x * (1.0 / 134217728.0) {
        let q = y / x;
        if q == 0.0 || !finite(q) {
            return y.atan2(x);
        }
        let (p, e) = two_prod(q, x);
        let r = (y - p) - e; // y - q*x, exact; y/x - q has its sign (x > 0)
        let dir = if r == 0.0 { -q } else { r };
        return odd(q, dir);
    }
    y.atan2(x)
}

// ---------------------------------------------------------------- numpy semantics in f64

fn divmod(a: f64, b: f64) -> (f64, f64) {
    // As numpy's npy_divmod on doubles. A NaN operand gives numpy's NaNs before any
    // ordered comparison: vectorized, `<` is a signaling compare, which raised
    // "invalid" for a quiet NaN where numpy's floats stay quiet.
    if a.is_nan() || b.is_nan() {
        let m = a % b;
        return ((a - m) / b, m);
    }
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

/// numpy's sign: -1, 0 (unsigned) or 1; NaN stays NaN.
fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else if x == 0.0 {
        0.0
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
    Heaviside,
    LogAddExp,
    LogAddExp2,
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
    Sinh,
    Cosh,
    Arcsin,
    Arccos,
    Arcsinh,
    Arccosh,
    Arctanh,
    Cbrt,
    Deg2Rad,
    Rad2Deg,
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
            // Toward zero from -min_subnormal gives -0 (+0 where there is no -0).
            f.apply_sign(m as u64, neg) as u32
        }
        Format::Int(_) => c,
    }
}

/// Selection ops return one of the inputs' codes (numpy's choice on ties: the second).
#[inline]
fn pick(ca: u32, cb: u32, a: f64, b: f64, op: Bin) -> u32 {
    match op {
        Bin::Max if a.is_nan() => ca,
        Bin::Max if b.is_nan() => cb,
        Bin::Max => if a > b { ca } else { cb },
        Bin::Min if a.is_nan() => ca,
        Bin::Min if b.is_nan() => cb,
        Bin::Min => if a < b { ca } else { cb },
        Bin::FMax if b.is_nan() => ca,
        Bin::FMax if a.is_nan() => cb,
        Bin::FMax => if a > b { ca } else { cb },
        Bin::FMin if b.is_nan() => ca,
        Bin::FMin if a.is_nan() => cb,
        Bin::FMin => if a < b { ca } else { cb },
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
    if let Format::Posit(p) = TYPES[t].fmt {
        if p.es == 2 && p.nbits <= 16 && matches!(op, Bin::Add | Bin::Sub | Bin::Mul | Bin::Div) {
            return posit16_arith(t, op, a, b, out);
        }
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
        // Powers whose exact values other ops compute rounded to odd (f64's powf
        // rounds x^2 of a 28-bit posit32 before the posit rounding: twice).
        Bin::Pow => map!(|p: f64, q: f64| {
            if q == 2.0 {
                mul_odd(p, p)
            } else if q == -1.0 {
                div_odd(1.0, p)
            } else if q == 0.5 && p > 0.0 && finite(p) {
                sqrt_odd(p)
            } else {
                p.powf(q)
            }
        }),
        Bin::CopySign => map!(f64::copysign),
        Bin::Arctan2 => map!(atan2_odd),
        Bin::Heaviside => map!(|p: f64, q: f64| if p.is_nan() { p } else if p < 0.0 { 0.0 } else if p > 0.0 { 1.0 } else { q }),
        Bin::LogAddExp => map!(|p: f64, q: f64| {
            // As numpy: the larger plus log1p(exp(-|difference|)), exact for equal inputs.
            if p == q { p + std::f64::consts::LN_2 } else { let m = p.max(q); m + (-(p - q).abs()).exp().ln_1p() }
        }),
        Bin::LogAddExp2 => map!(|p: f64, q: f64| {
            if p == q { p + 1.0 } else { let m = p.max(q); m + (-(p - q).abs()).exp2().ln_1p() / std::f64::consts::LN_2 }
        }),
        Bin::Hypot => map!(f64::hypot),
    }
    if posit && op == Bin::Pow {
        // A power of a nonzero base is nonzero and finite (0 ** -1 is a division by zero).
        let mut base = [0f64; BLOCK];
        dec_block64(t, a, &mut base[..n]);
        posit_range(x, y.iter().copied(), |i| base[i] != 0.0 && base[i].is_finite(), true);
    }
    enc_block64(t, x, out);
}

/// `+ - * /` on posit<n<=16,2> codes: values from the f32 table (exact, half
/// the cache footprint of the f64 one), the results rounded to odd in f64,
/// then [`enc_block64`].
fn posit16_arith(t: usize, op: Bin, a: &[u32], b: &[u32], out: &mut [u32]) {
    let n = a.len();
    let l = lut32(t).expect("posit<n<=16,2> values are f32s");
    let m = l.len() - 1;
    let mut x = [0f64; BLOCK];
    let x = &mut x[..n];
    macro_rules! go {
        ($f:expr) => {{
            let f = $f;
            for ((o, &ca), &cb) in x.iter_mut().zip(a).zip(b) {
                *o = f(l[ca as usize & m] as f64, l[cb as usize & m] as f64);
            }
        }};
    }
    match op {
        Bin::Add => go!(add_odd),
        Bin::Sub => go!(|p: f64, q: f64| add_odd(p, -q)),
        // Products of <= 12-bit significands are exact in f64.
        Bin::Mul => go!(|p: f64, q: f64| p * q),
        _ => go!(div_odd),
    }
    enc_block64(t, x, out);
}

pub fn unary(t: usize, op: Un, a: &[u32], out: &mut [u32]) {
    let n = a.len();
    let mut x = [0f64; BLOCK];
    dec_block64(t, a, &mut x[..n]);
    let x = &mut x[..n];
    let posit = is_posit(t);
    // Posit ops whose float64 results can leave its range: their operands kept.
    let ranged = posit && matches!(op, Un::Exp | Un::Exp2 | Un::Expm1 | Un::Sinh | Un::Cosh);
    let mut inputs = [0f64; BLOCK];
    if ranged {
        inputs[..n].copy_from_slice(x);
    }
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
        Un::Exp => map!(exp_odd),
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
        Un::Sinh => map!(f64::sinh),
        Un::Cosh => map!(f64::cosh),
        Un::Arcsin => map!(f64::asin),
        Un::Arccos => map!(f64::acos),
        // (asinh(0) through ln_1p would raise divide-by-zero; acosh below 1 gives
        // NaN without raising invalid: the status flags numpy reports come out as
        // its own functions raise them.)
        Un::Arcsinh => map!(|p: f64| if p == 0.0 { p } else { p.asinh() }),
        Un::Arccosh => map!(|p: f64| if p < 1.0 { (p - 1.0).sqrt() } else { p.acosh() }),
        // (Odd: f64::atanh loses bits near -1, where 2x / (1 - x) nears -1 in ln_1p.)
        Un::Arctanh => map!(|p: f64| if p < 0.0 { -(-p).atanh() } else { p.atanh() }),
        Un::Cbrt => map!(f64::cbrt),
        Un::Deg2Rad => map!(f64::to_radians),
        Un::Rad2Deg => map!(f64::to_degrees),
        Un::Floor => map!(f64::floor),
        Un::Ceil => map!(f64::ceil),
        Un::Rint => map!(f64::round_ties_even),
        Un::Trunc => map!(f64::trunc),
    }
    if ranged {
        // Finite for finite operands; and never zero for exp and exp2.
        let zero_fix = matches!(op, Un::Exp | Un::Exp2);
        posit_range(x, inputs[..n].iter().copied(), |_| true, zero_fix);
    }
    enc_block64(t, x, out);
}

/// Posit results of finite operands whose exact values lie beyond float64's
/// range: past its largest, the largest float64 (the posit's maxpos, not NaR);
/// a nonzero below its smallest, the smallest (minpos, not zero), each of its
/// sign. `finite(i)`: is element i's exact result finite (and, with
/// `zero_fix`, nonzero) for its operands `inputs` when they are finite? The
/// status flags of those float64 over- and underflows are cleared: posits
/// neither overflow nor underflow.
fn posit_range(r: &mut [f64], inputs: impl Iterator<Item = f64>, finite: impl Fn(usize) -> bool, zero_fix: bool) {
    let mut fixed = false;
    for (i, (v, x)) in r.iter_mut().zip(inputs).enumerate() {
        if !x.is_finite() || !finite(i) {
            continue;
        }
        if v.is_infinite() {
            *v = f64::MAX.copysign(*v);
            fixed = true;
        } else if *v == 0.0 && zero_fix {
            *v = f64::from_bits(1).copysign(*v);
            fixed = true;
        }
    }
    if fixed {
        set_fp_status(fp_status() & !(FP_OVERFLOW | FP_UNDERFLOW));
    }
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
    // The values (exact: f32 for the types whose values all are f32s), then one
    // loop per relation, which vectorizes.
    macro_rules! compare {
        ($x:expr, $y:expr, $zero:expr) => {{
            let (x, y) = (&$x[..n], &$y[..n]);
            let each = |o: &mut [bool], f: &dyn Fn(usize) -> bool| o.iter_mut().enumerate().for_each(|(i, r)| *r = f(i));
            match op {
                Rel::Eq => x.iter().zip(y).zip(out.iter_mut()).for_each(|((p, q), o)| *o = p == q),
                Rel::Ne => x.iter().zip(y).zip(out.iter_mut()).for_each(|((p, q), o)| *o = p != q),
                Rel::Lt => x.iter().zip(y).zip(out.iter_mut()).for_each(|((p, q), o)| *o = p < q),
                Rel::Le => x.iter().zip(y).zip(out.iter_mut()).for_each(|((p, q), o)| *o = p <= q),
                Rel::Gt => x.iter().zip(y).zip(out.iter_mut()).for_each(|((p, q), o)| *o = p > q),
                Rel::Ge => x.iter().zip(y).zip(out.iter_mut()).for_each(|((p, q), o)| *o = p >= q),
                Rel::And => each(out, &|i| x[i] != $zero && y[i] != $zero),
                Rel::Or => each(out, &|i| x[i] != $zero || y[i] != $zero),
                Rel::Xor => each(out, &|i| (x[i] != $zero) != (y[i] != $zero)),
            }
        }};
    }
    if t == BF16 || lut32(t).is_some() {
        let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
        dec_block32(t, a, &mut x[..n]);
        dec_block32(t, b, &mut y[..n]);
        compare!(x, y, 0.0f32)
    } else {
        let (mut x, mut y) = ([0f64; BLOCK], [0f64; BLOCK]);
        dec_block64(t, a, &mut x[..n]);
        dec_block64(t, b, &mut y[..n]);
        compare!(x, y, 0.0f64)
    }
}

// ---------------------------------------------------------------- result tables

/// Results of every input of a unary op on a type of at most 16 bits, or of
/// every pair of a binary op on an 8-bit type: the op becomes one lookup per
/// element. Tables are built on first use by the block kernels above (so
/// they hold exactly what the computed path gives) and kept for the process.
///
/// Building evaluates the op on every encoding (logs of negatives, ...), so
/// the floating-point status flags are restored afterwards: numpy would
/// otherwise warn about values the caller never passed. The table keeps, for
/// each entry, the exceptions numpy reports that its evaluation raised
/// (invalid, divide-by-zero, overflow; and overflow where finite operands
/// give a result past the format's range, which the f64 evaluation does not
/// see), and the loops raise those of the entries they read.
const UN_OPS: usize = Un::Spacing as usize + 1;
const BIN_OPS: usize = Bin::Hypot as usize + 1;

/// MXCSR status bits numpy reports: invalid, divide-by-zero, overflow.
pub const FP_INVALID: u32 = 1;
pub const FP_DIVIDE: u32 = 1 << 2;
pub const FP_OVERFLOW: u32 = 1 << 3;
pub const FP_UNDERFLOW: u32 = 1 << 4;
const FP_REPORTED: u32 = FP_INVALID | FP_DIVIDE | FP_OVERFLOW;

/// A result table: each entry the result's code and, above it, the exceptions
/// its evaluation raises (one load gives both; no second table to keep in
/// cache).
pub enum Table {
    /// 8-bit types: the code in the low byte, the exceptions in the high one.
    Byte(Box<[u16]>),
    /// 16-bit types: the code in the low half, the exceptions in the high one.
    Half(Box<[u32]>),
}

static UN_TABLES: [[OnceLock<Table>; UN_OPS]; N] = [const { [const { OnceLock::new() }; UN_OPS] }; N];
static BIN_TABLES: [[OnceLock<Table>; BIN_OPS]; N] = [const { [const { OnceLock::new() }; BIN_OPS] }; N];

#[cfg(target_arch = "x86_64")]
pub fn fp_status() -> u32 {
    let mut c: u32 = 0;
    // SAFETY: stmxcsr stores the SSE control/status register into `c`.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut c, options(nostack)) };
    c
}

#[cfg(target_arch = "x86_64")]
pub fn set_fp_status(c: u32) {
    // SAFETY: ldmxcsr loads a value read by stmxcsr (same modes, old flags).
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &c, options(nostack, readonly)) };
}

#[cfg(not(target_arch = "x86_64"))]
pub fn fp_status() -> u32 {
    0
}

#[cfg(not(target_arch = "x86_64"))]
pub fn set_fp_status(_c: u32) {}

/// Raise the exceptions in `flags` (status bits) on this thread, as the
/// arithmetic that found them would have.
pub fn raise_fp(flags: u32) {
    if flags != 0 {
        set_fp_status(fp_status() | (flags & FP_REPORTED));
    }
}

/// The table of `n` entries of type `t`'s results, `f` computing a block of
/// them from their indices; `finite_in(i)`: are entry i's operands finite?
fn build(t: usize, n: usize, f: impl Fn(&[u32], &mut [u32]), finite_in: impl Fn(u32) -> bool) -> Table {
    let saved = fp_status();
    let clear = saved & !0x3F;
    let posit = is_posit(t);
    let has_inf = matches!(TYPES[t].fmt, Format::Float(f) if f.inf);
    let mut out = vec![0u32; n];
    let mut codes = [0u32; BLOCK];
    let mut res = [0u32; BLOCK];
    for start in (0..n).step_by(BLOCK) {
        let m = BLOCK.min(n - start);
        for (j, c) in codes[..m].iter_mut().enumerate() {
            *c = (start + j) as u32;
        }
        set_fp_status(clear);
        f(&codes[..m], &mut res[..m]);
        let mut flags = [0u32; BLOCK];
        if fp_status() & FP_REPORTED != 0 {
            // Whose: one entry at a time.
            for j in 0..m {
                let mut r = [0u32];
                set_fp_status(clear);
                f(&codes[j..j + 1], &mut r);
                flags[j] = fp_status() & FP_REPORTED;
            }
        }
        for j in 0..m {
            let mut fl = flags[j];
            if posit {
                // Posits saturate: no overflow (their invalid results are NaR).
                fl &= !FP_OVERFLOW;
            }
            let r = dec(t, res[j]);
            if fl & (FP_INVALID | FP_DIVIDE) == 0 && finite_in(codes[j]) && !finite(r) {
                // A NaN where the format has infinities is an invalid operation;
                // otherwise the result passed the largest value.
                fl |= if r.is_nan() && has_inf { FP_INVALID } else { FP_OVERFLOW };
            }
            out[start + j] = res[j] | fl << 16;
        }
    }
    set_fp_status(saved);
    if TYPES[t].size == 1 {
        Table::Byte(out.iter().map(|&e| (e & 0xFF | (e >> 16) << 8) as u16).collect())
    } else {
        Table::Half(out.into_boxed_slice())
    }
}

/// The unary table of (t, op), for types of at most 16 bits.
pub fn un_table(t: usize, op: Un) -> Option<&'static Table> {
    let bits = TYPES[t].fmt.bits();
    if bits > 16 {
        return None;
    }
    Some(UN_TABLES[t][op as usize].get_or_init(|| build(t, 1 << bits, |c, r| unary(t, op, c, r), |c| finite(dec(t, c)))))
}

/// The binary table of (t, op) indexed by `a << 8 | b`, for 8-bit types
/// (always [`Table::Byte`]).
pub fn bin_table(t: usize, op: Bin) -> Option<&'static [u16]> {
    if TYPES[t].fmt.bits() != 8 {
        return None;
    }
    let tab = BIN_TABLES[t][op as usize].get_or_init(|| {
        build(
            t,
            1 << 16,
            |c, r| {
                let a: Vec<u32> = c.iter().map(|x| x >> 8).collect();
                let b: Vec<u32> = c.iter().map(|x| x & 0xFF).collect();
                binary(t, op, &a, &b, r)
            },
            |c| finite(dec(t, c >> 8)) && finite(dec(t, c & 0xFF)),
        )
    });
    match tab {
        Table::Byte(e) => Some(e),
        Table::Half(_) => None,
    }
}

// ---------------------------------------------------------------- posit<n,2> encoder

/// Round an f64 to posit<n,2> (n <= 32), nearest even on the encoding as the
/// 2022 Posit Standard rounds: no underflow to 0, no overflow past maxpos,
/// NaN and infinities become NaR. The same results as the format engine
/// (tested on every posit, every midpoint and random values), in a few
/// integer steps instead of the general engine's.
#[inline]
pub fn posit2_encode(n: u32, x: f64) -> u32 {
    let nar = 1u32 << (n - 1);
    let mask = if n == 32 { u32::MAX } else { (1u32 << n) - 1 };
    if x == 0.0 {
        return 0;
    }
    if !finite(x) {
        return nar;
    }
    let b = x.to_bits();
    let neg = b >> 63 != 0;
    let ef = ((b >> 52) & 0x7FF) as i32;
    let max_scale = (n as i32 - 2) * 4;
    let mag: u32 = if ef == 0 {
        1 // f64 subnormals are far below minpos
    } else {
        let scale = ef - 1023;
        let frac = b & ((1u64 << 52) - 1);
        if scale >= max_scale {
            nar - 1 // maxpos (or beyond it: saturate)
        } else if scale < -max_scale {
            1 // below minpos: minpos
        } else {
            let k = scale >> 2; // regime value: floor(scale / 4)
            let e = (scale & 3) as u128; // exponent bits
            // Regime: k+1 ones then a zero (k >= 0), or -k zeros then a one.
            let (r, rlen) = if k >= 0 { (((1u128 << (k + 1)) - 1) << 1, k + 2) } else { (1u128, 1 - k) };
            let body = (r << 54) | (e << 52) | frac as u128; // rlen + 54 bits
            let len = rlen as u32 + 54;
            let keep = n - 1;
            let shift = len - keep; // len > 54 > keep: always positive
            let mut m = (body >> shift) as u64;
            let rem = body & ((1u128 << shift) - 1);
            let half = 1u128 << (shift - 1);
            if rem > half || (rem == half && m & 1 == 1) {
                m += 1;
            }
            // Rounding never reaches NaR nor 0 (maxpos and minpos bound it).
            m.clamp(1, (nar - 1) as u64) as u32
        }
    };
    if neg {
        mag.wrapping_neg() & mask
    } else {
        mag
    }
}

/// `out[i] = bf16(a[i] op b[i])` over contiguous arrays, computed in f32 and
/// rounded once (the results of the element loop, bit for bit), AVX2 where the
/// CPU has it, on threads over large arrays. `out` may be `a` or `b` itself,
/// but must not overlap them otherwise.
///
/// # Safety
/// `a`, `b` hold `n` readable u16 and `out` `n` writable u16.
pub unsafe fn bf16_arith(op: Bin, a: *const u16, b: *const u16, out: *mut u16, n: usize) {
    /// Elements per task on threads.
    const CHUNK: usize = 1 << 16;
    let (pa, pb, po) = (a as usize, b as usize, out as usize);
    let run = move |start: usize, len: usize| {
        // SAFETY: [start, start + len) lies inside the n elements of each array.
        unsafe { bf16_arith_part(op, (pa as *const u16).add(start), (pb as *const u16).add(start), (po as *mut u16).add(start), len) }
    };
    let threads = lowp_core::parallel::num_threads();
    if threads > 1 && n >= 2 * CHUNK {
        use rayon::prelude::*;
        use std::sync::atomic::{AtomicU32, Ordering};
        let tasks = n.div_ceil(CHUNK);
        // The floating-point exceptions the workers raise, handed to this thread
        // as if it had computed everything (numpy reports them after the loop).
        let flags = AtomicU32::new(0);
        lowp_core::parallel::pool().install(|| {
            (0..tasks).into_par_iter().for_each(|t| {
                // The status bits are the low 6 of MXCSR; the control bits stay as they are.
                let before = fp_status();
                set_fp_status(before & !0x3F);
                run(t * CHUNK, CHUNK.min(n - t * CHUNK));
                flags.fetch_or(fp_status() & 0x3F, Ordering::Relaxed);
                set_fp_status(fp_status() & !0x3F | before & 0x3F);
            })
        });
        set_fp_status(fp_status() | flags.into_inner());
    } else {
        run(0, n);
    }
}

/// # Safety
/// As [`bf16_arith`].
unsafe fn bf16_arith_part(op: Bin, a: *const u16, b: *const u16, out: *mut u16, n: usize) {
    #[cfg(target_arch = "x86_64")]
    if convert::isa() >= convert::Isa::Avx2 {
        // SAFETY: the Avx2 path is only reported when the CPU has AVX2; the caller's contract.
        return unsafe {
            match op {
                Bin::Add => bf16_arith_avx2::<0>(a, b, out, n),
                Bin::Sub => bf16_arith_avx2::<1>(a, b, out, n),
                Bin::Mul => bf16_arith_avx2::<2>(a, b, out, n),
                _ => bf16_arith_avx2::<3>(a, b, out, n),
            }
        };
    }
    // SAFETY: the caller's contract.
    unsafe { bf16_arith_strided(op, a as *const u8, 2, b as *const u8, 2, out as *mut u8, 2, n) }
}

/// `out[i] = bf16(a[i] op b[i])` element by element, in order, over byte
/// strides: computed in f32 and rounded once ([`f32_to_bf16`]). In order, so
/// reductions and accumulations (the output an input shifted by one step) are
/// right too.
///
/// # Safety
/// `a`, `b` and `out` address `n` u16 elements each at strides `sa`, `sb`, `so` bytes.
#[allow(clippy::too_many_arguments)]
pub unsafe fn bf16_arith_strided(op: Bin, a: *const u8, sa: isize, b: *const u8, sb: isize, out: *mut u8, so: isize, n: usize) {
    macro_rules! go {
        ($f:expr) => {{
            let f = $f;
            for i in 0..n as isize {
                // SAFETY: element i of each operand lies inside it (the caller's contract).
                unsafe {
                    let x = f32::from_bits(((a.offset(i * sa) as *const u16).read_unaligned() as u32) << 16);
                    let y = f32::from_bits(((b.offset(i * sb) as *const u16).read_unaligned() as u32) << 16);
                    (out.offset(i * so) as *mut u16).write_unaligned(f32_to_bf16(f(x, y).to_bits()));
                }
            }
        }};
    }
    match op {
        Bin::Add => go!(|x: f32, y: f32| x + y),
        Bin::Sub => go!(|x: f32, y: f32| x - y),
        Bin::Mul => go!(|x: f32, y: f32| x * y),
        _ => go!(|x: f32, y: f32| x / y),
    }
}

/// 16 elements a step: widen each half with a shift, compute in f32, round
/// to nearest even as [`f32_to_bf16`] does (NaN lanes to the quiet NaN of their sign).
///
/// # Safety
/// As [`bf16_arith`]; the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn bf16_arith_avx2<const OP: u8>(a: *const u16, b: *const u16, out: *mut u16, n: usize) {
    use std::arch::x86_64::*;
    let half = _mm256_set1_epi32(0x7FFF);
    let one = _mm256_set1_epi32(1);
    let abs = _mm256_set1_epi32(0x7FFF_FFFF);
    let inf = _mm256_set1_epi32(0x7F80_0000);
    let qnan = _mm256_set1_epi32(0x7FC0_0000);
    let sign = _mm256_set1_epi32(i32::MIN);
    let op = |x: __m256, y: __m256| match OP {
        0 => _mm256_add_ps(x, y),
        1 => _mm256_sub_ps(x, y),
        2 => _mm256_mul_ps(x, y),
        _ => _mm256_div_ps(x, y),
    };
    // f32 bits to bf16 codes in the low half of each lane.
    let round = |v: __m256| {
        let x = _mm256_castps_si256(v);
        // Nearest even: add 0x7fff plus the kept half's lowest bit, keep the top half.
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), one);
        let r = _mm256_srli_epi32::<16>(_mm256_add_epi32(_mm256_add_epi32(x, half), lsb));
        // NaN lanes: the quiet NaN with x's sign.
        let nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
        let q = _mm256_srli_epi32::<16>(_mm256_or_si256(_mm256_and_si256(x, sign), qnan));
        _mm256_blendv_epi8(r, q, nan)
    };
    let mut i = 0;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n: 16 elements of each array; unaligned loads and stores.
        unsafe {
            let va = _mm256_loadu_si256(a.add(i) as *const __m256i);
            let vb = _mm256_loadu_si256(b.add(i) as *const __m256i);
            // Interleaving with zeros puts each code in the top half of a 32-bit lane
            // (lanes 0-3 and 8-11 from unpacklo, the others from unpackhi).
            let z = _mm256_setzero_si256();
            let lo = op(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, va)), _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, vb)));
            let hi = op(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, va)), _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, vb)));
            // packus keeps the 128-bit halves in place, the inverse of the unpacks.
            let r = _mm256_packus_epi32(round(lo), round(hi));
            _mm256_storeu_si256(out.add(i) as *mut __m256i, r);
        }
        i += 16;
    }
    let bop = match OP {
        0 => Bin::Add,
        1 => Bin::Sub,
        2 => Bin::Mul,
        _ => Bin::Div,
    };
    // SAFETY: the caller's contract.
    unsafe { bf16_arith_strided(bop, a.add(i) as *const u8, 2, b.add(i) as *const u8, 2, out.add(i) as *mut u8, 2, n - i) }
}
